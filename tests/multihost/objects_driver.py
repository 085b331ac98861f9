"""A Ray-style driver of the object store across hosts (tests/multihost/test_objects.py):
weights put on the head and read by actors on two other hosts, an actor's print shown here, a value put by an actor
read by the driver and by an actor on a third host, a call's result passed on before it is
done, and a value whose owner is killed. Prints one JSON line per check."""

import argparse
import json
import os
import signal
import socket
import time

import numpy as np

import phalanx
from phalanx import NodeAffinitySchedulingStrategy


@phalanx.remote(num_cpus=1)
class Worker:
    def host(self):
        return socket.gethostname()

    def pid(self):
        return os.getpid()

    def total(self, weights):            # a top-level ref: the value arrives
        return float(weights.sum()), socket.gethostname()

    def total_of(self, box):             # a ref inside a list: read here
        return float(phalanx.get(box[0]).sum())

    def put_big(self, n):
        return [phalanx.put(np.full(n, 3.0))]

    def keep(self, box):                 # a borrower on another host
        self.box = box

    def read_kept(self):
        return float(phalanx.get(self.box["w"]).sum())

    def shout(self, text):               # printed on its host, shown by the driver
        print(text, flush=True)

    def slow_make(self, n):
        time.sleep(1.0)
        return np.ones(n)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--address")
    p.add_argument("--token")
    args = p.parse_args()
    phalanx.init(args.address, token=args.token)
    here = socket.gethostname()
    others = sorted(n["NodeID"] for n in phalanx.nodes()
                    if n["Alive"] and n["NodeManagerHostname"] != here)
    w1, w2 = (Worker.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n)).remote()
              for n in others[:2])
    hosts = phalanx.get([w1.host.remote(), w2.host.remote()], timeout=60)

    def say(**fields):
        print(json.dumps(fields), flush=True)

    # What an actor on another host prints reaches this driver's stderr (log_to_driver).
    phalanx.get(w1.shout.remote("hello from another host"), timeout=60)
    say(check="prints", pid=phalanx.get(w1.pid.remote(), timeout=60))

    weights = np.arange(8_000_000, dtype=np.float64)  # 64 MB
    ref = phalanx.put(weights)
    started = time.monotonic()
    results = phalanx.get([w1.total.remote(ref), w2.total.remote(ref)], timeout=120)
    say(check="broadcast", driver=here, hosts=hosts, results=results,
        want=float(weights.sum()), seconds=round(time.monotonic() - started, 3))

    # More readers on w1's host: the value crossed the network once, into that node's cache,
    # and a new one read by three processes at once crosses it once too. The head node counts
    # what it sent (ObjectStore.sent_bytes, from its heartbeats).
    head = next(n["NodeID"] for n in phalanx.nodes() if n["NodeManagerHostname"] == here)

    def sent():
        """The head node's bytes sent, once two readings 1.5 s apart agree (bounded)."""
        last, deadline = None, time.monotonic() + 30
        while time.monotonic() < deadline:
            now = next(n["ObjectStore"].get("sent_bytes", 0) for n in phalanx.nodes()
                       if n["NodeID"] == head)
            if now == last:
                return now
            last = now
            time.sleep(1.5)
        return last

    readers = [Worker.options(num_cpus=0,
                              scheduling_strategy=NodeAffinitySchedulingStrategy(others[0]))
               .remote() for _ in range(2)]
    before = sent()
    again = phalanx.get([r.total.remote(ref) for r in readers], timeout=120)
    after_again = sent()
    fresh = phalanx.put(np.ones(4_000_000))  # 32 MB, read by three processes at once
    together = phalanx.get([r.total.remote(fresh) for r in readers + [w1]], timeout=120)
    after_fresh = sent()
    from phalanx import _objects
    copy = os.path.join(_objects._store_root(others[0]), _objects.CACHE_DIR, head,
                        fresh._obj.owner, fresh._obj.id)
    cached = os.path.exists(copy)
    del fresh
    deadline = time.monotonic() + 30
    while os.path.exists(copy) and time.monotonic() < deadline:
        time.sleep(0.1)
    say(check="node_cache", again=[r[0] for r in again], together=[r[0] for r in together],
        sent_again=after_again - before, sent_fresh=after_fresh - after_again, cached=cached,
        dropped_after_free=not os.path.exists(copy))
    for r in readers:
        phalanx.kill(r)

    [theirs] = phalanx.get(w2.put_big.remote(1_000_000), timeout=60)
    say(check="borrowed", driver=float(phalanx.get(theirs, timeout=60).sum()),
        third_host=phalanx.get(w1.total_of.remote([theirs]), timeout=60), want=3e6)

    # A borrower on another host keeps a value alive after the driver dropped its ref; once
    # it lets go, the driver (its owner) frees it.
    kept = phalanx.put(np.full(1_000_000, 4.0))
    kept_file = os.path.join(_objects._here.dir, kept._obj.id)
    phalanx.get(w1.keep.remote({"w": kept}), timeout=60)
    del kept
    time.sleep(1.0)
    while_borrowed = os.path.exists(kept_file)
    read = phalanx.get(w1.read_kept.remote(), timeout=60)
    phalanx.get(w1.keep.remote(None), timeout=60)
    deadline = time.monotonic() + 30
    while os.path.exists(kept_file) and time.monotonic() < deadline:
        time.sleep(0.1)
    say(check="remote_borrower", while_borrowed=while_borrowed, read=read,
        freed_after=not os.path.exists(kept_file))

    # A borrower on another host SIGKILLed while it holds the ref (its node stays up): that
    # node tells the owner the process is gone, and the value is freed.
    doomed = phalanx.put(np.full(1_000_000, 5.0))
    doomed_file = os.path.join(_objects._here.dir, doomed._obj.id)
    victim = Worker.options(num_cpus=0,
                            scheduling_strategy=NodeAffinitySchedulingStrategy(others[0])).remote()
    phalanx.get(victim.keep.remote({"w": doomed}), timeout=60)
    victim_pid = phalanx.get(victim.pid.remote(), timeout=60)
    del doomed
    time.sleep(1.0)
    held = os.path.exists(doomed_file)
    os.kill(victim_pid, signal.SIGKILL)  # one machine: the hosts share its pids
    killed = time.monotonic()
    deadline = killed + 30
    while os.path.exists(doomed_file) and time.monotonic() < deadline:
        time.sleep(0.1)
    say(check="remote_borrower_killed", held=held, freed=not os.path.exists(doomed_file),
        seconds=round(time.monotonic() - killed, 2))

    pending = w2.slow_make.remote(1000)  # passed on before it is done
    say(check="pending", result=phalanx.get(w1.total_of.remote([pending]), timeout=60),
        want=1000.0)

    phalanx.kill(w2)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            phalanx.get(theirs, timeout=10)
            time.sleep(0.2)
        say(check="owner_died", error=None)
    except phalanx.OwnerDiedError as e:
        say(check="owner_died", error=str(e))
    phalanx.shutdown()


if __name__ == "__main__":
    main()
