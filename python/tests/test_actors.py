"""The Python actor API against a real cluster: basics, ordering, errors with causes,
kill -9 and restarts, OOM kills, C++ actors from Python, wait, placement groups."""

import asyncio
import os
import signal
import time

import pytest

from phalanx import _native
import phalanx
from conftest import wait_for
from helpers import BrokenInit, Counter


def test_create_call_and_named_lookup(cluster):
    c = Counter.options(name="counter-a", num_cpus=0.5).remote(5)
    assert phalanx.get(c.add.remote(3)) == 8
    assert phalanx.get([c.add.remote(1), c.add.remote(1)]) == [9, 10]
    same = phalanx.get_actor("counter-a")
    assert same == c
    assert phalanx.get(same.get.remote()) == 10
    with pytest.raises(ValueError, match="no-such-actor"):
        phalanx.get_actor("no-such-actor")
    # A taken name is a ValueError, as in Ray, and leaves the first actor as it was.
    with pytest.raises(ValueError, match="counter-a") as taken:
        phalanx.get(Counter.options(name="counter-a", num_cpus=0.5).remote(1).get.remote())
    assert isinstance(taken.value, phalanx.AlreadyExistsError)
    info = phalanx.actor_info(c)
    assert info["state"] == "ALIVE" and info["pid"] > 0


def test_calls_from_one_caller_run_in_order(cluster):
    c = Counter.remote()
    refs = [c.record.remote(i) for i in range(300)]
    assert phalanx.get(refs, timeout=60) == list(range(300))


def test_handles_travel_to_other_actors(cluster):
    a, b = Counter.remote(100), Counter.remote()
    assert phalanx.get(b.call_other.remote(a, 5), timeout=60) == 105


def test_wait_returns_the_finished_first(cluster):
    c = Counter.options(max_concurrency=2).remote()
    slow, fast = c.sleep.remote(3), c.sleep.remote(0)
    ready, not_ready = phalanx.wait([slow, fast], num_returns=1, timeout=30)
    assert ready == [fast] and not_ready == [slow]
    assert phalanx.get(slow, timeout=30) == 3


def test_errors_are_exceptions_with_causes(cluster):
    c = Counter.remote()
    with pytest.raises(phalanx.TaskError) as e:
        phalanx.get(c.fail.remote("boom"))
    assert e.value.cause_type == "ValueError"
    assert "boom" in str(e.value) and "Traceback" in e.value.remote_traceback
    with pytest.raises(phalanx.InvalidCallError, match="no method 'nope'"):
        phalanx.get(c.nope.remote())
    with pytest.raises(phalanx.InvalidCallError, match="add"):
        phalanx.get(c.add.remote(1, 2, 3))
    with pytest.raises(phalanx.GetTimeoutError):
        phalanx.get(c.sleep.remote(5), timeout=0.5)
    # The actor still works after all of that.
    assert phalanx.get(c.add.remote(1), timeout=30) == 1
    with pytest.raises(TypeError, match=r"\.remote"):
        c.add(1)
    with pytest.raises(ValueError, match="unknown actor option"):
        Counter.options(num_cpu=1)
    with pytest.raises(ValueError, match="num_cpus"):
        Counter.options(num_cpus=-1)


def test_a_constructor_that_raises_kills_the_actor_with_its_cause(cluster):
    bad = phalanx.remote(BrokenInit).remote()
    with pytest.raises(phalanx.ActorDiedError) as e:
        phalanx.get(bad.anything.remote(), timeout=60)
    assert e.value.cause.startswith("CREATION_FAILED")
    assert "the constructor failed on purpose" in e.value.cause


def test_an_impossible_request_is_refused_at_once(cluster):
    with pytest.raises(phalanx.PhalanxError, match="CPU"):
        Counter.options(num_cpus=1000).remote()


def test_kill9_restarts_the_actor_and_kill_ends_it(cluster):
    c = Counter.options(max_restarts=1, max_task_retries=-1).remote(7)
    pid = phalanx.get(c.pid.remote())
    os.kill(pid, signal.SIGKILL)
    # The next call waits for the restart and runs on the new process (state starts over).
    assert phalanx.get(c.get.remote(), timeout=60) == 7
    new_pid = phalanx.get(c.pid.remote())
    assert new_pid != pid
    assert phalanx.actor_info(c)["num_restarts"] == 1
    phalanx.kill(c)
    with pytest.raises(phalanx.ActorDiedError) as e:
        phalanx.get(c.get.remote(), timeout=30)
    assert e.value.cause == "KILLED_BY_USER"


def test_a_restart_budget_that_runs_out_ends_in_the_signal_cause(cluster):
    c = Counter.options(max_restarts=0).remote()
    os.kill(phalanx.get(c.pid.remote()), signal.SIGKILL)
    with pytest.raises(phalanx.ActorDiedError) as e:
        phalanx.get(c.get.remote(), timeout=30)
    assert e.value.cause.startswith("SIGNALED(9")


def test_an_actor_over_its_memory_limit_dies_of_oom_with_peak_and_limit(cluster):
    c = Counter.options(memory=300 << 20).remote()
    with pytest.raises(phalanx.ActorDiedError) as e:
        phalanx.get(c.allocate.remote(700 << 20), timeout=60)
    assert e.value.cause.startswith("OOM_KILLED: peak ")
    assert "> limit 300.0 MiB" in e.value.cause


def test_python_calls_a_cpp_actor(cluster):
    Greeter = phalanx.cpp_actor_class("Greeter",
                                      os.path.join(_native.BIN_DIR, "actors_quickstart"))
    g = Greeter.remote("hello")
    assert phalanx.get(g.Greet.remote("Ada"), timeout=60) == "hello, Ada"
    assert phalanx.get(g.Count.remote()) == 1
    with pytest.raises(phalanx.InvalidCallError):
        phalanx.get(g.Greet.remote(1, 2))
    with pytest.raises(TypeError, match="positional"):
        g.Greet.remote(name="x")


def test_placement_groups(cluster):
    pg = phalanx.placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK")
    assert phalanx.get(pg.ready(), timeout=30) is pg
    assert pg.state == "CREATED"
    c = Counter.options(num_cpus=1, scheduling_strategy=phalanx.PlacementGroupSchedulingStrategy(
        pg, 1)).remote(1)
    assert phalanx.get(c.add.remote(1), timeout=60) == 2
    phalanx.remove_placement_group(pg)
    with pytest.raises(phalanx.ActorDiedError):
        wait_for(lambda: phalanx.actor_info(c)["state"] == "DEAD", timeout=20)
        phalanx.get(c.add.remote(1), timeout=10)
    with pytest.raises(phalanx.PlacementGroupError, match="CPU"):
        phalanx.placement_group([{"CPU": -1}], strategy="STRICT_PACK")
    with pytest.raises(ValueError, match="strategy"):
        phalanx.placement_group([{"CPU": 1}], strategy="TIGHT")


def test_init_errors_are_clear(cluster):
    with pytest.raises(phalanx.PhalanxError, match="already called"):
        phalanx.init(cluster.address)
    phalanx.init(cluster.address, ignore_reinit_error=True)
    env = dict(os.environ, PHALANX_ADDRESS="", PHALANX_TOKEN="")
    import subprocess
    import sys
    dead = subprocess.run([sys.executable, "-c", "import phalanx; phalanx.init('127.0.0.1:1', token='x')"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert dead.returncode != 0
    assert "cannot reach the GCS at 127.0.0.1:1" in dead.stderr
    wrong = subprocess.run([sys.executable, "-c",
                            f"import phalanx; phalanx.init('{cluster.address}', token='nope')"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert "wrong cluster token" in wrong.stderr


def test_a_first_call_to_a_stopped_actor_waits_for_it_and_does_not_fail(cluster):
    """A caller's first connection to an actor whose process cannot run for a moment (a busy
    machine; here SIGSTOP for 1.5 s): the TLS and HTTP/2 handshake need the actor's process,
    and a connect bounded at 100 ms failed the call with "lost the connection" while the
    actor lived. The connect now has rpc::kConnectTimeout (20 s): the call runs once the
    process runs again."""
    a, b = Counter.remote(100), Counter.remote()
    assert phalanx.get([a.add.remote(0), b.add.remote(0)], timeout=60) == [100, 0]
    pid = phalanx.actor_info(a)["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        ref = b.call_other.remote(a, 5)  # b's first call to a: a new connection
        time.sleep(1.5)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert phalanx.get(ref, timeout=60) == 105


LEAKY_DRIVER = """
import sys, time
sys.path.insert(0, {tests!r})
import phalanx
from helpers import Counter
phalanx.init({address!r}, token={token!r}, namespace={namespace!r})
a = Counter.options(name="owned-a-" + sys.argv[1]).remote(1)
b = Counter.options(name="owned-b-" + sys.argv[1]).remote(2)
kept = Counter.options(name="kept-" + sys.argv[1], lifetime="detached").remote(3)
pg = phalanx.placement_group([{{"CPU": 0.5}}])
phalanx.get([a.add.remote(0), b.add.remote(0), kept.add.remote(0)], timeout=60)
phalanx.get(pg.ready(), timeout=60)
print("READY", pg.id, flush=True)
time.sleep(600)
"""


LEAKY_NAMESPACE = "leaky-drivers"  # each driver has an anonymous one of its own otherwise


def _leaky(name):
    """The handle of the leaky driver's actor `name` (in its namespace)."""
    return phalanx.get_actor(name, namespace=LEAKY_NAMESPACE)


def _start_driver(cluster, tag):
    import subprocess
    import sys as _sys
    code = LEAKY_DRIVER.format(tests=os.path.dirname(os.path.abspath(__file__)),
                               address=cluster.address, token=cluster.token,
                               namespace=LEAKY_NAMESPACE)
    proc = subprocess.Popen([_sys.executable, "-c", code, tag], stdout=subprocess.PIPE,
                            text=True, env=dict(os.environ, PHALANX_TLS_DIR=cluster.tls_dir))
    line = proc.stdout.readline()
    assert line.startswith("READY"), line
    return proc, line.split()[1]


def test_a_sigkilled_drivers_actors_and_placement_groups_are_released(cluster):
    """A driver SIGKILLed (what `timeout -s KILL`, the OOM killer or a lost pod do) cannot kill
    its actors at shutdown: its lease stops, the GCS finds its port refusing connections, and
    its non-detached actors die (OWNER_DIED) and its placement groups go, within the node
    timeout (3 s) and a knock. Its detached actor stays."""
    proc, pg_id = _start_driver(cluster, "k")
    try:
        owned = [_leaky(f"owned-{x}-k") for x in "ab"]
        kept = _leaky("kept-k")
        killed_at = time.time()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert wait_for(lambda: all(phalanx.actor_info(h)["state"] == "DEAD" for h in owned),
                        timeout=60), [phalanx.actor_info(h) for h in owned]
        took = time.time() - killed_at
        for h in owned:
            assert "OWNER_DIED" in phalanx.actor_info(h)["death_cause"], phalanx.actor_info(h)
        assert wait_for(lambda: _native.placement_group_state(pg_id) == "REMOVED", timeout=30), \
            _native.placement_group_state(pg_id)
        print(f"\n[driver SIGKILL] its actors dead {took:.2f} s after the kill")
        assert phalanx.actor_info(kept)["state"] == "ALIVE"
        phalanx.kill(kept)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _gcs_pid(cluster):
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if args[0].endswith(b"phalanx-gcs") and cluster.root.encode() in b" ".join(args):
            return int(pid)
    return None


def test_a_driver_that_dies_while_the_gcs_is_down_is_released_when_it_returns(cluster):
    """The GCS is killed (kill -9), then a driver is SIGKILLed, then the GCS is started again
    as an operator would: the restarted GCS loads the driver leases its predecessor kept in
    Redis, finds the driver's port refusing connections, and releases its actors (leases kept
    only in the dead GCS's memory would leave the driver's actors ALIVE)."""
    import subprocess
    proc, _ = _start_driver(cluster, "g")
    gcs_pid = _gcs_pid(cluster)
    assert gcs_pid, "no phalanx-gcs of this cluster"
    restarted = None
    try:
        owned = [_leaky(f"owned-{x}-g") for x in "ab"]
        os.kill(gcs_pid, signal.SIGKILL)
        assert wait_for(lambda: not os.path.exists(f"/proc/{gcs_pid}"), timeout=30)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        session = os.path.realpath(os.path.join(cluster.root, "session_latest"))
        with open(os.path.join(session, "gcs.args")) as f:
            args = [a for a in f.read().split("\n") if a]
        restarted = subprocess.Popen(args, env=cluster.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        back_at = time.time()

        def released():
            try:
                return all(phalanx.actor_info(h)["state"] == "DEAD" for h in owned)
            except phalanx.PhalanxError:
                return False  # the GCS is not serving yet
        assert wait_for(released, timeout=60), [phalanx.actor_info(h) for h in owned]
        for h in owned:
            assert "OWNER_DIED" in phalanx.actor_info(h)["death_cause"], phalanx.actor_info(h)
        print(f"\n[driver SIGKILL while the GCS was down] its actors dead "
              f"{time.time() - back_at:.2f} s after the GCS was started again")
        phalanx.kill(_leaky("kept-g"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        # The restarted GCS serves the cluster's next tests; `phalanx stop` ends it.


def test_a_stopped_driver_keeps_its_actors(cluster):
    """A driver that cannot run for longer than the node timeout (SIGSTOP, a starved machine)
    is not gone: its port still accepts, so its actors stay until the driver lease timeout;
    after SIGCONT it renews again."""
    proc, _ = _start_driver(cluster, "s")
    try:
        owned = [_leaky(f"owned-{x}-s") for x in "ab"]
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(6)  # twice the node timeout
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(1)
        assert all(phalanx.actor_info(h)["state"] == "ALIVE" for h in owned), \
            [phalanx.actor_info(h) for h in owned]
        phalanx.kill(_leaky("kept-s"))
    finally:
        proc.kill()
        proc.wait()


@phalanx.remote(num_cpus=0.25)
class AsyncActor:
    """Ray's async actor, in the shape of its documentation's."""

    def __init__(self):
        self.spans = []
        self.lock = asyncio.Lock()  # made by the constructor, used by every call's coroutine
        self.inside = 0
        self.most_inside = 0

    async def run_concurrent(self, i, seconds):
        start = time.time()
        await asyncio.sleep(seconds)
        self.spans.append((start, time.time()))
        return i

    async def locked(self):
        async with self.lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            await asyncio.sleep(0.05)
            self.inside -= 1

    async def doubled(self, x):
        return 2 * await slow_value.remote(x)  # a task's ref awaited, not got

    def report(self):
        return self.spans, self.most_inside


@phalanx.remote(num_cpus=0.25)
def slow_value(x):
    time.sleep(0.2)
    return x


def test_an_async_actor_interleaves_its_calls_at_their_awaits(cluster):
    a = AsyncActor.remote()
    assert phalanx.get([a.run_concurrent.remote(i, 1.0) for i in range(4)], timeout=60) == \
        [0, 1, 2, 3]
    spans, _ = phalanx.get(a.report.remote(), timeout=30)
    # All four were inside their sleep at once (not one after another: 8 s before).
    assert max(s for s, _ in spans) < min(e for _, e in spans), spans
    # One event loop: the constructor's asyncio.Lock serializes the calls that take it.
    phalanx.get([a.locked.remote() for _ in range(6)], timeout=60)
    assert phalanx.get(a.report.remote(), timeout=30)[1] == 1
    # max_concurrency=1 makes it serial again, as in Ray.
    serial = AsyncActor.options(max_concurrency=1).remote()
    phalanx.get([serial.run_concurrent.remote(i, 0.2) for i in range(3)], timeout=60)
    spans, _ = phalanx.get(serial.report.remote(), timeout=30)
    spans.sort()
    assert all(spans[i][1] <= spans[i + 1][0] + 1e-3 for i in range(len(spans) - 1)), spans
    # max_concurrency=2: never more than two coroutines at once, though each call's thread
    # returns as soon as its coroutine is started.
    two = AsyncActor.options(max_concurrency=2).remote()
    phalanx.get([two.run_concurrent.remote(i, 0.3) for i in range(6)], timeout=60)
    spans, _ = phalanx.get(two.report.remote(), timeout=30)
    most = max(sum(1 for s, e in spans if s <= t < e - 1e-3) for t, _ in spans)
    assert most == 2, spans


@phalanx.remote
class AsyncWorker:
    """An async actor whose methods are each called more than once: the first call of a
    method learns that it is a coroutine function, the next ones go to the event loop's own
    queue (python/src/worker.cc's LoopQueue)."""

    def __init__(self):
        self.attempts = 0

    async def total(self, array, scale=1):
        await asyncio.sleep(0)
        return float(array.sum()) * scale

    async def fails(self, message):
        raise ValueError(message)

    async def flaky(self):
        self.attempts += 1
        if self.attempts % 2:
            raise ConnectionError("transient")
        return self.attempts


def test_an_async_methods_later_calls_behave_as_its_first(cluster):
    import numpy as np
    a = AsyncWorker.remote()
    big = phalanx.put(np.ones(50_000))  # 400 KB: a ref to the store, read off the loop
    for _ in range(3):
        assert phalanx.get(a.total.remote(big, scale=2), timeout=60) == 100_000.0
        assert phalanx.get([a.total.remote(np.ones(3)) for _ in range(20)], timeout=60) == \
            [3.0] * 20
        with pytest.raises(ValueError, match="no good"):
            phalanx.get(a.fails.remote("no good"), timeout=60)
        with pytest.raises(TypeError, match="total"):
            phalanx.get(a.total.remote(), timeout=60)
        retried = a.flaky.options(retry_exceptions=[ConnectionError], max_task_retries=1)
        assert phalanx.get(retried.remote(), timeout=60) % 2 == 0


def test_a_ref_is_awaitable_in_an_actor_and_in_the_driver(cluster):
    a = AsyncActor.remote()
    assert phalanx.get([a.doubled.remote(i) for i in range(4)], timeout=60) == [0, 2, 4, 6]

    async def driver():
        return await asyncio.gather(*(slow_value.remote(i) for i in range(3)))
    assert asyncio.run(driver()) == [0, 1, 2]


@phalanx.remote(num_cpus=0.25)
class Parent:
    """Creates actors of its own (Ray's ownership: they die with it unless detached)."""

    def __init__(self):
        self.children = []

    def spawn(self, detached):
        options = {"num_cpus": 0.25}
        if detached:
            options["lifetime"] = "detached"
        child = Counter.options(**options).remote()
        phalanx.get(child.pid.remote())
        self.children.append(child)
        return child

    def pid(self):
        return os.getpid()


def test_an_actors_actors_die_with_it_unless_detached(cluster):
    parent = Parent.remote()
    owned = phalanx.get(parent.spawn.remote(False), timeout=60)
    kept = phalanx.get(parent.spawn.remote(True), timeout=60)
    owned_pid = phalanx.get(owned.pid.remote(), timeout=30)
    killed_at = time.time()
    os.kill(phalanx.get(parent.pid.remote(), timeout=30), signal.SIGKILL)
    assert wait_for(lambda: phalanx.actor_info(owned)["state"] == "DEAD", timeout=30), \
        phalanx.actor_info(owned)
    took = time.time() - killed_at
    info = phalanx.actor_info(owned)
    assert "OWNER_DIED" in str(info["death_cause"]), info
    assert wait_for(lambda: not _alive(owned_pid), timeout=30)
    print(f"\nan actor's actor: dead {took:.2f} s after its owner's SIGKILL")
    # The detached one lives on, and answers.
    assert phalanx.get(kept.add.remote(1), timeout=30) == 1
    phalanx.kill(kept)


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


@phalanx.remote(num_cpus=0.25)
class Introspect:
    def ids(self):
        c = phalanx.get_runtime_context()
        return (c.get_actor_id(), c.get_node_id(), c.get_job_id(), c.namespace,
                c.get_task_id(), phalanx.get_gpu_ids())


@phalanx.remote(num_cpus=0.25)
def task_ids():
    c = phalanx.get_runtime_context()
    return c.get_actor_id(), c.get_task_id(), c.get_node_id()


def test_runtime_context_nodes_and_resources_as_in_ray(cluster):
    (node,) = phalanx.nodes()
    assert node["Alive"] and node["NodeManagerAddress"] == "127.0.0.1"
    assert node["Resources"]["CPU"] == 4 and phalanx.cluster_resources()["CPU"] == 4
    assert 0 <= phalanx.available_resources().get("CPU", 0) <= 4
    me = phalanx.get_runtime_context()
    assert me.get_actor_id() is None and me.get_task_id() is None
    assert me.get_node_id() in (node["NodeID"], None)
    a = Introspect.remote()
    actor_id, node_id, job_id, namespace, task_id, gpus = phalanx.get(a.ids.remote(), timeout=30)
    # As Ray's: an actor call has a task id too (the call's, not the actor's).
    assert actor_id == a.actor_id and node_id == node["NodeID"] and task_id
    assert task_id != actor_id
    assert job_id == me.get_job_id() and namespace == me.namespace and gpus == []
    actor_id, task_id, node_id = phalanx.get(task_ids.remote(), timeout=30)
    assert actor_id is None and task_id and node_id == node["NodeID"]
    phalanx.kill(a)


@phalanx.remote(num_cpus=0.25)
class Doubler:
    def double(self, v):
        time.sleep(0.01 * (v % 3))
        return 2 * v

    def env(self, name):
        return os.environ.get(name)

    def child_env(self, name):
        return phalanx.get(env_of.remote(name), timeout=60)


@phalanx.remote
def env_of(name):
    return os.environ.get(name)


def test_actor_pool_get_if_exists_and_a_jobs_runtime_env(cluster):
    from phalanx.util import ActorPool
    pool = ActorPool([Doubler.remote() for _ in range(3)])
    assert list(pool.map(lambda a, v: a.double.remote(v), range(20))) == [2 * v for v in range(20)]
    assert sorted(pool.map_unordered(lambda a, v: a.double.remote(v), range(10))) == \
        [2 * v for v in range(10)]
    pool.submit(lambda a, v: a.double.remote(v), 21)
    assert pool.has_next() and pool.get_next(timeout=30) == 42 and not pool.has_next()
    # get_if_exists: the second call gets the first actor, not an error.
    first = Doubler.options(name="only-one", get_if_exists=True).remote()
    again = Doubler.options(name="only-one", get_if_exists=True).remote()
    assert first == again
    phalanx.kill(first)
    # init(runtime_env=...) is every actor's and task's, under their own.
    phalanx.shutdown()
    phalanx.init(cluster.address, token=cluster.token,
                 runtime_env={"env_vars": {"JOB_WIDE": "yes", "MINE": "job"}})
    try:
        a = Doubler.options(runtime_env={"env_vars": {"MINE": "actor"}}).remote()
        assert phalanx.get([a.env.remote("JOB_WIDE"), a.env.remote("MINE")], timeout=30) == \
            ["yes", "actor"]
        # What an actor starts inherits its env_vars (the job's and its own), as in Ray.
        assert phalanx.get([a.child_env.remote("JOB_WIDE"), a.child_env.remote("MINE")],
                           timeout=60) == ["yes", "actor"]
        assert phalanx.get(env_of.remote("MINE"), timeout=60) == "job"
    finally:
        phalanx.shutdown()
        phalanx.init(cluster.address, token=cluster.token)
    with pytest.raises(ValueError, match="working_dir"):
        phalanx.init(runtime_env={"working_dir": "."})
