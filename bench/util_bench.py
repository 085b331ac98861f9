#!/usr/bin/python3
"""util_bench: Ray's ray.util helpers built on actors (phalanx.util.queue.Queue,
phalanx.util.multiprocessing.Pool, phalanx.util.ActorPool) and streaming generators, each side
by side with the same work done by hand on plain actors or tasks in the same run, on the same
machine.

    /usr/bin/python3 bench/util_bench.py [--seconds 2] [--processes 4] [--items 1000]
                                         [--parts queue,pool,actor_pool,generator]

Measures, one client:
  queue  Queue.put(i) then Queue.get(), one at a time (each a round trip to the queue's
         async actor), as operations per second; the peer: the same puts and gets as calls
         of a plain actor holding a list (put = append, get = pop(0)).
  pool   Pool(processes).map(f, range(items)) for a small f (x * x), in ms; the peer: the
         same calls made by hand, round robin over as many plain actors (one call per
         item, then one get of all), and, for scale, the same by hand with the pool's
         chunks (one call per chunk).
  actor_pool  ActorPool(actors).map(lambda a, v: a.double.remote(v), range(items)) on
         N = min(4, --processes) actors, in ms; the peer: the same calls by hand round robin
         over the same actors (all submitted, then one get of the list); and, to tell the
         pool's design from its bookkeeping, by hand with one call in flight per actor, as
         the pool keeps (get the oldest, then give its actor the next item).
  generator  a task yielding range(items), read as [get(r) for r in gen.remote(items)], in
         ms; the peer: the same items returned as one list by a task (get(lst.remote(items))).
         Also the same generator as an actor method; and, to see where the time goes, the
         task's generator with no one reading (until its completed() ref is ready), then
         the time to read its finished stream alone and the GCS key-value calls this
         process made for it (each yielded value goes through the cluster's key-value
         store: see ObjectRefGenerator), and one kv_get round trip from here.
The sides of each take turns a round at a time for --seconds each (at least 3 rounds, after
a warm-up); the medians are shown.
Last line (the keys of the parts run):
RESULT queue_ops_per_s=... list_actor_ops_per_s=... ratio_queue=... pool_map_ms=...
       round_robin_ms=... chunked_round_robin_ms=... ratio_pool=... ratio_pool_chunked=...
       actor_pool_map_ms=... actor_round_robin_ms=... one_in_flight_ms=...
       ratio_actor_pool=... ratio_actor_pool_one_in_flight=... generator_ms=...
       actor_generator_ms=... list_task_ms=... generator_us_per_item=...
       list_us_per_item=... ratio_generator=... ratio_actor_generator=...
       stream_write_ms=... stream_read_ms=... kv_calls_per_item=... kv_round_trip_us=...
       (ratio_queue = Queue / list actor, higher is better; ratio_pool = Pool.map's time /
       the round robin's, lower is better, goal <= 1.2; ratio_actor_pool = ActorPool.map's
       time / the round robin's, goal <= 1.2; ratio_generator = the generator's time / the
       list's, the same items, so also per item, goal <= 2)
"""

import argparse
import contextlib
import os
import statistics
import sys
import time

import phalanx
from phalanx import _native
from phalanx.util import ActorPool
from phalanx.util.multiprocessing import Pool
from phalanx.util.queue import Queue


@phalanx.remote
class ListQueue:
    """The peer of Queue: a plain actor holding a list."""

    def __init__(self):
        self.items = []

    def put(self, item):
        self.items.append(item)

    def get(self):
        return self.items.pop(0)


@phalanx.remote
class Squarer:
    """The peer of the pool's processes: one call per item, or per chunk of items."""

    def square(self, x):
        return x * x

    def square_chunk(self, xs):
        return [x * x for x in xs]


def square(x):
    return x * x


@phalanx.remote
class Doubler:
    """ActorPool's actors, and the generator as an actor method."""

    def double(self, v):
        return 2 * v

    def gen(self, n):
        for i in range(n):
            yield i


@phalanx.remote
def gen(n):
    for i in range(n):
        yield i


@phalanx.remote
def lst(n):
    return list(range(n))


PARTS = ("queue", "pool", "actor_pool", "generator")


# Each side runs in turn, a round at a time, for the whole measurement: a change in the
# shared machine's load falls on both.
OPS_PER_ROUND = 200


def ops_rates(sides, seconds):
    """{name: put/get operations per second} of each (name, put, get), one put then one
    get at a time, the median of rounds of OPS_PER_ROUND operations taken in turn."""
    rates, start = {name: [] for name, _, _ in sides}, time.perf_counter()
    while time.perf_counter() - start < seconds * len(sides):
        for name, put, get in sides:
            t = time.perf_counter()
            for i in range(OPS_PER_ROUND // 2):
                put(i)
                assert get() == i
            rates[name].append(OPS_PER_ROUND / (time.perf_counter() - t))
    return {name: statistics.median(r) for name, r in rates.items()}


def median_ms(sides, seconds, expected):
    """{name: median ms} of each (name, run), runs taken in turn."""
    samples, start = {name: [] for name, _ in sides}, time.perf_counter()
    while time.perf_counter() - start < seconds * len(sides) or \
            min(map(len, samples.values())) < 3:
        for name, run in sides:
            t = time.perf_counter()
            out = run()
            samples[name].append((time.perf_counter() - t) * 1e3)
            assert out == expected
    return {name: statistics.median(s) for name, s in samples.items()}


def warm_up(sides, expected):
    for _, run in sides:
        assert run() == expected


@contextlib.contextmanager
def counting_kv_calls():
    """{name: calls} of the GCS key-value calls this process makes inside the block (its
    background sweeper's included)."""
    names = ("kv_get", "kv_put", "kv_delete", "kv_list")
    counts, originals = dict.fromkeys(names, 0), {n: getattr(_native, n) for n in names}

    def counted(name):
        def call(*args, **kwargs):
            counts[name] += 1
            return originals[name](*args, **kwargs)
        return call

    for name in names:
        setattr(_native, name, counted(name))
    try:
        yield counts
    finally:
        for name, fn in originals.items():
            setattr(_native, name, fn)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"a comma-separated choice of {', '.join(PARTS)}")
    args = parser.parse_args()
    parts = args.parts.split(",")
    for part in parts:
        if part not in PARTS:
            parser.error(f"--parts: no part {part!r}; choose among {', '.join(PARTS)}")
    print(f"# util_bench: {args.seconds:g} s per measurement, one client, a local cluster "
          f"of {args.processes} CPUs on {os.cpu_count()} cores shared by all parts",
          flush=True)
    phalanx.init(num_cpus=args.processes)
    results = {}
    if "queue" in parts:
        results.update(bench_queue(args))
    if "pool" in parts:
        results.update(bench_pool(args))
    if "actor_pool" in parts:
        results.update(bench_actor_pool(args))
    if "generator" in parts:
        results.update(bench_generator(args))
    phalanx.shutdown()
    print("RESULT " + " ".join(f"{k}={v}" for k, v in results.items()), flush=True)


def bench_queue(args):
    """Queue against a plain actor holding a list."""
    q, peer = Queue(), ListQueue.remote()
    q.put(0), q.get(), phalanx.get(peer.put.remote(0)), phalanx.get(peer.get.remote())
    queue_sides = (("queue", q.put, q.get),
                   ("list_actor", lambda i: phalanx.get(peer.put.remote(i)),
                    lambda: phalanx.get(peer.get.remote())))
    ops_rates(queue_sides, 0.2)  # warm up
    rows = ops_rates(queue_sides, args.seconds)
    q.shutdown()
    print(f"queue    Queue put+get {rows['queue']:8.0f} ops/s   plain actor with a list "
          f"{rows['list_actor']:8.0f} ops/s   ratio {rows['queue'] / rows['list_actor']:.2f}",
          flush=True)
    phalanx.kill(peer)
    return {"queue_ops_per_s": f"{rows['queue']:.0f}",
            "list_actor_ops_per_s": f"{rows['list_actor']:.0f}",
            "ratio_queue": f"{rows['queue'] / rows['list_actor']:.2f}"}


def bench_pool(args):
    """Pool.map against the same calls by hand, round robin over as many actors."""
    items, n = list(range(args.items)), args.processes
    expected = [x * x for x in items]
    pool = Pool(processes=n)
    actors = [Squarer.remote() for _ in range(n)]
    phalanx.get([a.square.remote(0) for a in actors])
    chunk = -(-len(items) // (4 * n))  # the pool's default chunksize
    chunks = [items[i:i + chunk] for i in range(0, len(items), chunk)]

    def round_robin():
        return phalanx.get([actors[i % n].square.remote(x) for i, x in enumerate(items)])

    def chunked_round_robin():
        parts = phalanx.get([actors[i % n].square_chunk.remote(c)
                             for i, c in enumerate(chunks)])
        return [y for part in parts for y in part]

    def pool_map():
        return pool.map(square, items)

    runs = (("pool_map_ms", pool_map), ("round_robin_ms", round_robin),
            ("chunked_round_robin_ms", chunked_round_robin))
    median_ms(runs, 0.2, expected)  # warm up
    rows = median_ms(runs, args.seconds, expected)
    pool.terminate()
    for a in actors:
        phalanx.kill(a)
    print(f"pool     Pool({n}).map over {len(items)} items {rows['pool_map_ms']:7.1f} ms   "
          f"by hand round robin over {n} actors {rows['round_robin_ms']:7.1f} ms   "
          f"ratio {rows['pool_map_ms'] / rows['round_robin_ms']:.2f} (goal <= 1.2)")
    print(f"         by hand with the pool's chunks ({len(chunks)} calls of {chunk}) "
          f"{rows['chunked_round_robin_ms']:7.1f} ms   ratio "
          f"{rows['pool_map_ms'] / rows['chunked_round_robin_ms']:.2f}")
    return {"pool_map_ms": f"{rows['pool_map_ms']:.1f}",
            "round_robin_ms": f"{rows['round_robin_ms']:.1f}",
            "chunked_round_robin_ms": f"{rows['chunked_round_robin_ms']:.1f}",
            "ratio_pool": f"{rows['pool_map_ms'] / rows['round_robin_ms']:.2f}",
            "ratio_pool_chunked": f"{rows['pool_map_ms'] / rows['chunked_round_robin_ms']:.2f}"}


def bench_actor_pool(args):
    """ActorPool.map against the same calls by hand, round robin over the same actors."""
    items, n = list(range(args.items)), min(4, args.processes)
    expected = [2 * v for v in items]
    actors = [Doubler.remote() for _ in range(n)]
    phalanx.get([a.double.remote(0) for a in actors])
    pool = ActorPool(actors)

    def actor_pool_map():
        return list(pool.map(lambda a, v: a.double.remote(v), items))

    def round_robin():
        return phalanx.get([actors[i % n].double.remote(v) for i, v in enumerate(items)])

    def one_in_flight():
        # ActorPool's schedule without its bookkeeping: n calls in flight, results in order,
        # each freed actor given the next item.
        refs = [actors[i].double.remote(v) for i, v in enumerate(items[:n])]
        out = []
        for i in range(len(items)):
            out.append(phalanx.get(refs[i]))
            if i + n < len(items):
                refs.append(actors[i % n].double.remote(items[i + n]))
        return out

    runs = (("actor_pool_map_ms", actor_pool_map), ("actor_round_robin_ms", round_robin),
            ("one_in_flight_ms", one_in_flight))
    warm_up(runs, expected)
    rows = median_ms(runs, args.seconds, expected)
    for a in actors:
        phalanx.kill(a)
    ratio = rows["actor_pool_map_ms"] / rows["actor_round_robin_ms"]
    ratio_design = rows["actor_pool_map_ms"] / rows["one_in_flight_ms"]
    print(f"actors   ActorPool({n} actors).map over {len(items)} items "
          f"{rows['actor_pool_map_ms']:7.1f} ms   by hand round robin over them "
          f"{rows['actor_round_robin_ms']:7.1f} ms   ratio {ratio:.2f} (goal <= 1.2)")
    print(f"         by hand, one call in flight per actor (the pool's schedule) "
          f"{rows['one_in_flight_ms']:7.1f} ms   ratio {ratio_design:.2f}", flush=True)
    return {"actor_pool_map_ms": f"{rows['actor_pool_map_ms']:.1f}",
            "actor_round_robin_ms": f"{rows['actor_round_robin_ms']:.1f}",
            "one_in_flight_ms": f"{rows['one_in_flight_ms']:.1f}",
            "ratio_actor_pool": f"{ratio:.2f}",
            "ratio_actor_pool_one_in_flight": f"{ratio_design:.2f}"}


def bench_generator(args):
    """A streaming generator against the same items returned as one list."""
    n = args.items
    expected = list(range(n))
    actor = Doubler.remote()
    phalanx.get(actor.double.remote(0))

    runs = (("generator_ms", lambda: [phalanx.get(r) for r in gen.remote(n)]),
            ("actor_generator_ms", lambda: [phalanx.get(r) for r in actor.gen.remote(n)]),
            ("list_task_ms", lambda: phalanx.get(lst.remote(n))))
    warm_up(runs, expected)
    rows = median_ms(runs, args.seconds, expected)

    # Where the time goes: the generator writing its stream with no one reading, then the
    # finished stream read alone, counting the GCS key-value calls of this process as it reads.
    writes, reads, kv_calls = [], [], []
    for _ in range(3):
        t = time.perf_counter()
        stream = gen.remote(n)
        phalanx.get(stream.completed())
        writes.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        with counting_kv_calls() as counts:
            assert [phalanx.get(r) for r in stream] == expected
        reads.append((time.perf_counter() - t) * 1e3)
        kv_calls.append(sum(counts.values()))
    calls = (counts["kv_get"], counts["kv_put"], counts["kv_delete"], counts["kv_list"])
    rows["stream_write_ms"] = statistics.median(writes)
    rows["stream_read_ms"] = statistics.median(reads)
    per_call = []
    for _ in range(200):
        t = time.perf_counter()
        _native.kv_get("phalanx-util-bench", "missing")
        per_call.append((time.perf_counter() - t) * 1e6)
    kv_us = statistics.median(per_call)
    phalanx.kill(actor)

    per_item = {k: rows[k] * 1e3 / n for k in ("generator_ms", "actor_generator_ms",
                                                "list_task_ms")}
    ratio = rows["generator_ms"] / rows["list_task_ms"]
    ratio_actor = rows["actor_generator_ms"] / rows["list_task_ms"]
    kv_per_item = statistics.median(kv_calls) / n
    print(f"stream   generator task yielding {n} items {rows['generator_ms']:7.1f} ms "
          f"({per_item['generator_ms']:.0f} us/item)   the same as a list from a task "
          f"{rows['list_task_ms']:7.1f} ms ({per_item['list_task_ms']:.1f} us/item)   "
          f"ratio {ratio:.1f} (goal <= 2)")
    print(f"         generator actor method {rows['actor_generator_ms']:7.1f} ms "
          f"({per_item['actor_generator_ms']:.0f} us/item)   ratio {ratio_actor:.1f}")
    print(f"         the generator alone, no one reading {rows['stream_write_ms']:7.1f} ms "
          f"({rows['stream_write_ms'] * 1e3 / n:.0f} us/item: a put each, the refs to the GCS in batches)")
    print(f"         reading a finished generator's stream {rows['stream_read_ms']:7.1f} ms "
          f"({rows['stream_read_ms'] * 1e3 / n:.0f} us/item): {kv_per_item:.1f} GCS "
          f"key-value calls/item here (last read: get {calls[0]}, put {calls[1]}, delete "
          f"{calls[2]}, list {calls[3]}); one kv_get round trip {kv_us:.0f} us", flush=True)
    return {"generator_ms": f"{rows['generator_ms']:.1f}",
            "actor_generator_ms": f"{rows['actor_generator_ms']:.1f}",
            "list_task_ms": f"{rows['list_task_ms']:.1f}",
            "generator_us_per_item": f"{per_item['generator_ms']:.0f}",
            "list_us_per_item": f"{per_item['list_task_ms']:.1f}",
            "ratio_generator": f"{ratio:.1f}",
            "ratio_actor_generator": f"{ratio_actor:.1f}",
            "stream_write_ms": f"{rows['stream_write_ms']:.1f}",
            "stream_read_ms": f"{rows['stream_read_ms']:.1f}",
            "kv_calls_per_item": f"{kv_per_item:.1f}",
            "kv_round_trip_us": f"{kv_us:.0f}"}


if __name__ == "__main__":
    sys.exit(main())
