"""Ray Core's API in the shapes of its documentation: several return values (``num_returns``,
``@ray.method``), an actor that ends itself (``exit_actor``, ``sys.exit``), and placement
groups (named and detached, the table, ``wait([pg.ready()])``, child tasks captured), with
``ray.util``'s module paths."""

import gc
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import phalanx
from phalanx.actor import exit_actor
from phalanx.util.placement_group import (get_current_placement_group, get_placement_group,
                                          placement_group, placement_group_table,
                                          remove_placement_group)
from phalanx.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from conftest import connected_cluster, wait_for


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with connected_cluster(tmp_path_factory.mktemp("phx"), num_cpus=8) as c:
        yield c


@phalanx.remote(num_returns=3)
def three():
    return 1, 2, 3


@phalanx.remote
def one():
    return 1


@phalanx.remote
def identity(x):
    return x


@phalanx.remote
def total(refs):
    return sum(phalanx.get(refs))


@phalanx.remote(num_cpus=1)
def current_group():
    g = get_current_placement_group()
    return g.id if g else None


@phalanx.remote(num_cpus=1)
class Worker:
    @phalanx.method(num_returns=2)
    def pair(self):
        return "a", "b"

    def both(self):
        return [1, 2]

    def bye(self):
        exit_actor()

    def leave(self):
        sys.exit(0)

    def alive(self):
        return True

    def group(self):
        g = get_current_placement_group()
        return g.id if g else None

    def child_group(self):
        return phalanx.get(current_group.remote(), timeout=60)


def test_several_return_values(cluster):
    a, b, c = three.remote()
    assert phalanx.get([a, b, c], timeout=60) == [1, 2, 3] and phalanx.get(c) == 3
    assert phalanx.get(total.remote([b]), timeout=60) == 2  # one value, nested
    assert phalanx.get(identity.remote(c), timeout=60) == 3  # one value, as an argument
    assert phalanx.get(total.remote(list(three.remote())), timeout=60) == 6  # refs sent on
    w = Worker.remote()
    x, y = w.pair.remote()
    assert phalanx.get([x, y], timeout=60) == ["a", "b"]
    p, q = w.both.options(num_returns=2).remote()
    assert phalanx.get(q, timeout=60) == 2
    assert one.options(num_returns=0).remote() is None
    bad, _ = one.options(num_returns=2).remote()
    with pytest.raises(ValueError, match="returned one int but num_returns=2"):
        phalanx.get(bad, timeout=60)
    with pytest.raises(ValueError, match="num_returns"):
        one.options(num_returns=-1)
    phalanx.kill(w)


@phalanx.remote
def count_to(n):
    for i in range(n):
        yield i


@phalanx.remote
def fails_after(n):
    for i in range(n):
        yield i
    raise ValueError("ran dry")


@phalanx.remote
def slow_then_block(path):
    """Yields two values, then waits for a file that the reader writes after reading them:
    the reader must get them while the generator still runs (they stream)."""
    yield "first"
    yield np.full(500_000, 2.0)  # one of the store, not inline
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError("the reader never got the first values")
        time.sleep(0.05)
    yield "last"


@phalanx.remote
class Streamer:
    def count_to(self, n):
        for i in range(n):
            yield i * 10

    async def acount_to(self, n):
        for i in range(n):
            yield i * 100


def test_generators_give_a_ref_per_value(cluster):
    # Ray's shapes: a generator task gives an ObjectRefGenerator (a ref per value, in order).
    gen = count_to.remote(3)
    assert isinstance(gen, phalanx.ObjectRefGenerator)
    assert [phalanx.get(r, timeout=60) for r in gen] == [0, 1, 2]
    a, b = count_to.options(num_returns=2).remote(2)
    assert phalanx.get([a, b], timeout=60) == [0, 1]
    dynamic = phalanx.get(count_to.options(num_returns="dynamic").remote(3), timeout=60)
    assert phalanx.get(list(dynamic), timeout=60) == [0, 1, 2]
    # An item travels to another task as any ref does.
    first = next(iter(count_to.remote(2)))
    assert phalanx.get(identity.remote(first), timeout=60) == 0
    # Methods too, plain and async; and `async for` in a coroutine.
    s = Streamer.remote()
    assert [phalanx.get(r, timeout=60) for r in s.count_to.remote(3)] == [0, 10, 20]

    async def read_async():
        return [await r async for r in s.acount_to.remote(3)]
    import asyncio
    assert asyncio.run(read_async()) == [0, 100, 200]
    # The generator raises: the values before come first, then a ref that raises the error,
    # as its own class.
    gen = fails_after.remote(2)
    assert phalanx.get(next(gen), timeout=60) == 0
    assert phalanx.get(next(gen), timeout=60) == 1
    with pytest.raises(ValueError, match="ran dry"):
        phalanx.get(next(gen), timeout=60)
    with pytest.raises(StopIteration):
        next(gen)
    with pytest.raises(ValueError, match="'streaming' or 'dynamic'"):
        count_to.options(num_returns="many")


def test_generator_values_stream_as_they_are_yielded(cluster, tmp_path):
    from phalanx import _native
    from phalanx import _objects
    flag = tmp_path / "got-them"
    gen = slow_then_block.remote(str(flag))
    assert phalanx.get(next(gen), timeout=60) == "first"
    assert float(phalanx.get(next(gen), timeout=60).sum()) == 1e6
    assert not gen.is_finished() and not gen.completed().done()  # it still runs
    flag.write_text("go")
    assert phalanx.get(next(gen), timeout=60) == "last"
    with pytest.raises(StopIteration):
        next(gen)
    assert phalanx.get(gen.completed(), timeout=60) == 3 and gen.is_finished()
    # A reader that stops early: what it did not take is deleted from the stream.
    gen = count_to.remote(5)
    assert phalanx.get(next(gen), timeout=60) == 0
    phalanx.get(gen.completed(), timeout=60)
    stream = f"{gen._stream}/"
    del gen
    gc.collect()
    assert wait_for(lambda: not _native.kv_list(_objects.STREAM_NS, stream), timeout=30), \
        _native.kv_list(_objects.STREAM_NS, "")


def test_an_actor_ends_itself_for_good(cluster):
    for method in ("bye", "leave"):
        w = Worker.options(max_restarts=3).remote()
        assert phalanx.get(w.alive.remote(), timeout=60)
        started = time.monotonic()
        with pytest.raises(phalanx.ActorDiedError):
            phalanx.get(getattr(w, method).remote(), timeout=60)
        assert time.monotonic() - started < 30
        time.sleep(0.5)
        assert phalanx.actor_info(w)["state"] == "DEAD"  # not restarted, max_restarts or not
        with pytest.raises(phalanx.ActorDiedError):
            phalanx.get(w.alive.remote(), timeout=60)
    with pytest.raises(TypeError, match="outside an actor"):
        exit_actor()


def test_placement_groups_as_ray_util_has_them(cluster):
    pg = placement_group([{"CPU": 1}] * 3, strategy="PACK", name="trainers",
                         lifetime="detached")
    ready, not_ready = phalanx.wait([pg.ready()], timeout=60)
    assert ready and not not_ready
    assert phalanx.get(pg.ready(), timeout=60) == pg
    assert get_placement_group("trainers") == pg
    row = placement_group_table(pg)
    assert row["name"] == "trainers" and row["state"] == "CREATED" and row["strategy"] == "PACK"
    assert row["bundles"] == {0: {"CPU": 1.0}, 1: {"CPU": 1.0}, 2: {"CPU": 1.0}}
    assert all(row["bundles_to_node_id"].values())
    assert pg.id in placement_group_table()
    # An actor in the group sees it; with capture, the tasks it starts run in it too.
    captured = Worker.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, 0, placement_group_capture_child_tasks=True)).remote()
    assert phalanx.get(captured.group.remote(), timeout=60) == pg.id
    assert phalanx.get(captured.child_group.remote(), timeout=60) == pg.id
    plain = Worker.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 1)).remote()
    assert phalanx.get(plain.group.remote(), timeout=60) == pg.id
    assert phalanx.get(plain.child_group.remote(), timeout=60) is None
    assert phalanx.get(current_group.remote(), timeout=60) is None
    with pytest.raises(ValueError, match="no placement group named 'nope'"):
        get_placement_group("nope")
    with pytest.raises(ValueError, match="lifetime"):
        placement_group([{"CPU": 1}], lifetime="forever")
    remove_placement_group(pg)
    assert placement_group_table(pg)["state"] == "REMOVED"
    with pytest.raises(ValueError):
        get_placement_group("trainers")


def test_a_detached_group_outlives_its_driver(cluster):
    program = (
        "import sys, phalanx\n"
        "phalanx.init(sys.argv[1], token=sys.argv[2])\n"
        "kept = phalanx.placement_group([{'CPU': 1}], name='kept', lifetime='detached')\n"
        "gone = phalanx.placement_group([{'CPU': 1}], name='gone')\n"
        "phalanx.get([kept.ready(), gone.ready()], timeout=60)\n")
    env = dict(cluster.env, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", program, cluster.address, cluster.token],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    kept = get_placement_group("kept")
    assert placement_group_table(kept)["state"] == "CREATED"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
            r["name"] == "gone" and r["state"] != "REMOVED"
            for r in placement_group_table().values()):
        time.sleep(0.1)
    assert all(r["state"] == "REMOVED" for r in placement_group_table().values()
               if r["name"] == "gone")
    remove_placement_group(kept)


def test_init_without_an_address_joins_this_machines_cluster(cluster, tmp_path):
    program = ("import phalanx\nfrom phalanx import _native\n"
               "phalanx.init()\n"
               "print(_native.cluster()[0], len(phalanx.nodes()))\n"
               "phalanx.shutdown()\n")
    env = dict(cluster.env, PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("PHALANX_TLS_DIR", None)
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == [cluster.address, "1"], out.stdout
    # With no cluster on the machine (an empty session root), it starts one of its own.
    env["PHALANX_TMPDIR"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[0] != cluster.address, out.stdout


PRINTING_PROGRAM = """
import sys, time
import phalanx as ray
ray.init(log_to_driver=sys.argv[1] == "on")

@ray.remote
def task(x):
    print("task says", x)
    return x

@ray.remote
class Actor:
    def speak(self):
        print("actor says hi")
        print("actor warns", file=sys.stderr)
        return 1

assert ray.get([task.remote(i) for i in range(2)]) == [0, 1]
ray.get(Actor.remote().speak.remote())
deadline = time.time() + 60  # the lines come about 0.1 s after they were printed
while time.time() < deadline and sys.argv[1] == "on":
    time.sleep(0.2)
    if open(sys.argv[2]).read().count("says") >= 3:
        break
time.sleep(1)  # what else might come
print("DONE")
"""


def test_what_tasks_and_actors_print_reaches_the_driver(cluster, tmp_path):
    # Ray's log_to_driver: each line on the driver's stderr after "(Class pid=N)".
    env = dict(cluster.env, PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("PHALANX_TLS_DIR", None)
    for switch in ("on", "off"):
        err_path = tmp_path / f"stderr-{switch}"
        with open(err_path, "w") as err:
            out = subprocess.run([sys.executable, "-c", PRINTING_PROGRAM, switch, str(err_path)],
                                 env=env, stdout=subprocess.PIPE, stderr=err, text=True,
                                 timeout=180)
        text = err_path.read_text()
        assert out.returncode == 0 and out.stdout.strip() == "DONE", text[-3000:]
        lines = text.splitlines()
        if switch == "off":
            assert not [x for x in lines if "says" in x or "warns" in x], text
            continue
        said = sorted(x.split(") ", 1)[1] for x in lines if x.startswith("(") and ") " in x)
        assert said == ["actor says hi", "actor warns", "task says 0", "task says 1"], text
        assert all(x.startswith("(pid=") for x in lines if "task says" in x), text
        assert all(x.startswith("(Actor pid=") for x in lines if "actor " in x), text
        assert not [x for x in lines if "[info]" in x], text  # the worker host's own log


@phalanx.remote(num_cpus=1, max_retries=3)
def sleeper(seconds, marker=None):
    time.sleep(seconds)
    if marker:
        open(marker, "w").close()
    return os.getpid()


@phalanx.remote(num_cpus=1, max_retries=0)
def waits_on_a_sleeper(started, interrupted):
    open(started, "w").close()
    try:
        phalanx.get(sleeper.remote(30))
    except KeyboardInterrupt:
        open(interrupted, "w").close()
        raise


@phalanx.remote(num_cpus=1, max_retries=0)
def starts_a_spinner(path, interrupted):
    return phalanx.get(spin_noting_interrupt.remote(path, interrupted))


@phalanx.remote(num_cpus=1, max_retries=0)
def spin_noting_interrupt(path, interrupted):
    try:
        return _spin(path)
    except KeyboardInterrupt:
        open(interrupted, "w").close()
        raise


def _spin(path):
    # CPU-bound, as a task worth cancelling is: it writes its count until stopped (<= 120 s).
    end, n = time.monotonic() + 120, 0
    while time.monotonic() < end:
        n += 1
        if n % 20000 == 0:
            with open(path, "w") as f:
                f.write(str(n))
    return n


@phalanx.remote(num_cpus=1, max_retries=0)
def spin(path):
    return _spin(path)


def _read(path):
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def test_cancel_a_queued_a_running_and_a_finished_task(cluster, tmp_path):
    # Force: the worker is killed, the task is not retried, get fails at once.
    running = sleeper.remote(60)
    time.sleep(1.0)
    started = time.monotonic()
    phalanx.cancel(running, force=True)
    with pytest.raises(phalanx.TaskCancelledError, match="worker was killed"):
        phalanx.get(running, timeout=30)
    assert time.monotonic() - started < 10
    # Queued behind 8 CPUs' worth of tasks: it never runs.
    busy = [sleeper.remote(3) for _ in range(8)]
    queued = sleeper.remote(0, str(tmp_path / "ran"))
    phalanx.cancel(queued)
    with pytest.raises(phalanx.TaskCancelledError):
        phalanx.get(queued, timeout=30)
    phalanx.get(busy, timeout=120)
    time.sleep(1.0)
    assert not (tmp_path / "ran").exists()
    # Not forced while it runs: get fails at once, and KeyboardInterrupt stops the task, as
    # in Ray: its count stops moving (seen still over 2 s), and its worker runs the next.
    count = tmp_path / "count"
    spinning = spin.remote(str(count))
    deadline = time.monotonic() + 60
    while not _read(count):
        assert time.monotonic() < deadline, "the spinning task never started"
        time.sleep(0.05)
    phalanx.cancel(spinning)
    with pytest.raises(phalanx.TaskCancelledError, match="KeyboardInterrupt was raised"):
        phalanx.get(spinning, timeout=5)
    deadline = time.monotonic() + 30
    while True:
        before = _read(count)
        time.sleep(2.0)
        if _read(count) == before:
            break
        assert time.monotonic() < deadline, "the cancelled task still runs"
    # A task blocked in get is interrupted too (its get waits in short native slices).
    started, interrupted = tmp_path / "started", tmp_path / "interrupted"
    waiting = waits_on_a_sleeper.remote(str(started), str(interrupted))
    assert wait_for(started.exists, timeout=60), "the waiting task never started"
    time.sleep(0.5)
    phalanx.cancel(waiting)
    with pytest.raises(phalanx.TaskCancelledError, match="KeyboardInterrupt was raised"):
        phalanx.get(waiting, timeout=5)
    # Well before the 30 s its get would have taken (the bound leaves room for load).
    assert wait_for(interrupted.exists, timeout=15), "get was not interrupted"
    # A cancelled task cancels what it started (Ray's recursive=True): the child stops too.
    count, interrupted = tmp_path / "child-count", tmp_path / "child-interrupted"
    parent = starts_a_spinner.remote(str(count), str(interrupted))
    deadline = time.monotonic() + 60
    while not _read(count):
        assert time.monotonic() < deadline, "the child task never started"
        time.sleep(0.05)
    phalanx.cancel(parent)
    with pytest.raises(phalanx.TaskCancelledError):
        phalanx.get(parent, timeout=5)
    # Interrupted, well before its 120 s (the bound leaves room for load).
    assert wait_for(interrupted.exists, timeout=30), "the cancelled task's child ran on"
    done = sleeper.remote(0)
    pid = phalanx.get(done, timeout=60)
    phalanx.cancel(done)
    assert phalanx.get(done) == pid
    with pytest.raises(ValueError, match="not supported for actor calls"):
        phalanx.cancel(Worker.remote().alive.remote(), force=True)
    with pytest.raises(ValueError, match="phalanx.put"):
        phalanx.cancel(phalanx.put(1))


@phalanx.remote
class AsyncCanceller:
    """Ray's documented shape of an async actor's cancelled call: CancelledError at its
    await."""

    def __init__(self):
        self.log = []

    async def wait_long(self):
        import asyncio
        self.log.append("started")
        try:
            await asyncio.sleep(60)
            self.log.append("slept")
        except asyncio.CancelledError:
            self.log.append("cancelled")
            raise

    async def read(self):
        return list(self.log)


@phalanx.remote
class Canceller:
    """A plain actor whose long call polls is_canceled(), as Ray's documentation shows."""

    def __init__(self):
        self.log = []

    def poll(self, seconds, started=None):
        if started:  # the caller learns that the call runs (a read would queue behind it)
            open(started, "w").close()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if phalanx.get_runtime_context().is_canceled():
                self.log.append("saw cancel")
                return "stopped"
            time.sleep(0.05)
        self.log.append("ran out")
        return "ran out"

    def note(self, what):
        self.log.append(what)

    def read(self):
        return list(self.log)


def test_cancel_actor_calls_queued_running_async_and_finished(cluster, tmp_path):
    a = AsyncCanceller.remote()
    phalanx.get(a.read.remote(), timeout=60)
    # A running async method: its asyncio task is cancelled; get fails at once.
    # The second call goes to the event loop's own queue (the first learnt that the method is
    # async): cancelled the same way.
    for n in (1, 2):
        waiting = a.wait_long.remote()
        deadline = time.monotonic() + 30
        while phalanx.get(a.read.remote(), timeout=60).count("started") < n:
            assert time.monotonic() < deadline, "the async method did not start"
            time.sleep(0.05)
        phalanx.cancel(waiting)
        with pytest.raises(phalanx.TaskCancelledError, match="wait_long"):
            phalanx.get(waiting, timeout=5)
        while phalanx.get(a.read.remote(), timeout=60).count("cancelled") < n:
            assert time.monotonic() < deadline, "the async method was not cancelled"
            time.sleep(0.1)

    b = Canceller.remote()
    # A running plain method runs on and sees is_canceled(); a call queued behind it never
    # runs; the actor keeps its state and serves the next calls.
    started = tmp_path / "poll-started"
    polling = b.poll.remote(60, str(started))
    queued = b.note.remote("queued ran")
    # Cancelled before it ran, poll would never see is_canceled(): wait until it runs (a
    # loaded machine may take seconds to start it).
    assert wait_for(started.exists, timeout=60, interval=0.05), "the plain method did not start"
    phalanx.cancel(queued)
    phalanx.cancel(polling)
    with pytest.raises(phalanx.TaskCancelledError):
        phalanx.get(polling, timeout=5)
    with pytest.raises(phalanx.TaskCancelledError, match="note"):
        phalanx.get(queued, timeout=5)
    phalanx.get(b.note.remote("after"), timeout=60)
    assert phalanx.get(b.read.remote(), timeout=60) == ["saw cancel", "after"]
    # A finished call keeps its result.
    done = b.read.remote()
    result = phalanx.get(done, timeout=60)
    phalanx.cancel(done)
    assert phalanx.get(done) == result
    with pytest.raises(RuntimeError, match="driver"):
        phalanx.get_runtime_context().is_canceled()


@phalanx.remote(max_retries=0)
def worker_exits():
    os._exit(3)


@phalanx.remote(num_cpus=0)
class Pair:
    @phalanx.method(num_returns=2)
    def two(self):
        return 1, 2

    def reconstructed(self):
        ctx = phalanx.get_runtime_context()
        return ctx.was_current_actor_reconstructed, ctx.actor_id.hex(), ctx.node_id


def test_ray_names_of_errors_context_and_actors(cluster):
    """What Ray Core's documentation programs use, as they spell it."""
    ex = phalanx.exceptions
    assert ex.RayError is phalanx.PhalanxError and ex.RayTaskError is ex.TaskError
    assert issubclass(ex.ActorDiedError, ex.RayActorError)
    for name in ("WorkerCrashedError", "OutOfMemoryError", "NodeDiedError",
                 "TaskUnschedulableError", "ActorUnschedulableError", "RuntimeEnvSetupError",
                 "ActorPlacementGroupRemoved", "TaskPlacementGroupRemoved",
                 "ObjectReconstructionFailedError", "ObjectFetchTimedOutError",
                 "PendingCallsLimitExceeded", "AsyncioActorExit", "LocalRayletDiedError",
                 "RaySystemError", "UnserializableException", "CrossLanguageError"):
        assert issubclass(getattr(ex, name), ex.RayError), name
    # A task whose worker dies: Ray's WorkerCrashedError (an ActorDiedError too).
    with pytest.raises(ex.WorkerCrashedError, match="its worker died"):
        phalanx.get(worker_exits.remote(), timeout=60)
    # The context's properties, as Ray's.
    a = Pair.options(name="pair-of-ray-names").remote()
    fresh, actor_id, node_id = phalanx.get(a.reconstructed.remote(), timeout=60)
    assert fresh is False and actor_id and node_id == phalanx.get_runtime_context().get_node_id()
    # get_actor's handle keeps @method(num_returns), and get_or_create finds the live one.
    x, y = phalanx.get_actor("pair-of-ray-names").two.remote()
    assert phalanx.get([x, y], timeout=60) == [1, 2]
    same = Pair.options(name="pair-of-ray-names").get_or_create()
    assert phalanx.get(same.reconstructed.remote(), timeout=60)[1] == actor_id
    # PlacementGroupSchedulingStrategy(placement_group=None): no group, as in Ray.
    from phalanx.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    assert phalanx.get(one.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=None)).remote(), timeout=60) == 1
    phalanx.kill(a)


DROPPED_STREAM_PROGRAM = """
import time
from phalanx import _native
import phalanx as ray
from phalanx import _objects
ray.init(num_cpus=2)

@ray.remote
def count_to(n):
    for i in range(n):
        time.sleep(0.05)
        yield i

for _ in range(3):
    first = next(iter(count_to.remote(4)))  # the generator is dropped while it still yields
    assert ray.get(first) == 0
deadline = time.time() + 20
while _native.kv_list(_objects.STREAM_NS, "") and time.time() < deadline:
    time.sleep(0.1)
print("left", _native.kv_list(_objects.STREAM_NS, ""))
"""


def test_a_generator_dropped_while_it_yields_leaves_no_values(tmp_path):
    """A fresh driver (it has put nothing) takes one value of each of three generators and
    drops them while they still yield: what they yield later goes too (its keys, and the
    values the workers keep for them), not only what was there at the drop."""
    program = tmp_path / "dropped_stream.py"
    program.write_text(DROPPED_STREAM_PROGRAM)
    out = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ))
    assert out.returncode == 0 and out.stdout.strip().endswith("left []"), \
        out.stdout[-2000:] + out.stderr[-2000:]
