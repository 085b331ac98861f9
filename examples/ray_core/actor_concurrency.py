# Ray Core's concurrency groups with only the import changed: an async actor whose "io"
# methods run at most 2 at once beside a "compute" group and the default one, a call sent
# to another group with .options(concurrency_group=...), the same on a threaded actor, and
# @ray.method(retry_exceptions=...) on an actor's method.
import asyncio
import threading
import time

import phalanx as ray

ray.init()


@ray.remote(concurrency_groups={"io": 2, "compute": 4})
class AsyncIOActor:
    def __init__(self):
        self.release = asyncio.Event()
        self.running = {"io": 0, "compute": 0}

    @ray.method(concurrency_group="io")
    async def io(self):
        self.running["io"] += 1
        await self.release.wait()
        self.running["io"] -= 1
        return "io"

    @ray.method(concurrency_group="compute")
    async def compute(self):
        self.running["compute"] += 1
        await self.release.wait()
        self.running["compute"] -= 1
        return "compute"

    async def running_now(self):  # the default group
        return dict(self.running)

    async def go(self):
        self.release.set()


def wait_until(predicate, what):
    deadline = time.time() + 60
    while not predicate():
        assert time.time() < deadline, what
        time.sleep(0.05)


a = AsyncIOActor.remote()
io_refs = [a.io.remote() for _ in range(3)]
# Sent to the "compute" group, although io() is in "io".
moved = a.io.options(concurrency_group="compute").remote()
compute_refs = [a.compute.remote() for _ in range(3)]
# The "io" group runs 2 of its 3 calls; "compute" runs its 3 and the moved io() call: 3
# io() running (the moved one would wait in a full "io" group) and 3 compute().
wait_until(lambda: ray.get(a.running_now.remote()) == {"io": 3, "compute": 3},
           "the groups did not fill up as their concurrency says")
time.sleep(0.5)  # the third plain io() call still waits for a free place in its group
assert ray.get(a.running_now.remote()) == {"io": 3, "compute": 3}
ray.get(a.go.remote())
assert ray.get(io_refs + [moved] + compute_refs) == ["io"] * 4 + ["compute"] * 3


@ray.remote(concurrency_groups={"io": 1})
class ThreadedActor:
    def __init__(self):
        self.release = threading.Event()

    @ray.method(concurrency_group="io")
    def blocked(self):
        self.release.wait(60)
        return "released"

    def ping(self):  # the default group still answers while "io" is busy
        return "pong"

    def go(self):
        self.release.set()


t = ThreadedActor.options(max_concurrency=2).remote()
blocked = t.blocked.remote()
assert ray.get(t.ping.remote(), timeout=60) == "pong"
ray.get(t.go.remote())
assert ray.get(blocked) == "released"


@ray.remote(max_task_retries=3)
class Flaky:
    def __init__(self):
        self.calls = 0

    @ray.method(retry_exceptions=True)
    def may_fail(self):
        self.calls += 1
        if self.calls < 3:
            raise ValueError("transient")
        return self.calls

    def always_fails(self):
        self.calls += 1
        raise ValueError("always")

    def calls_made(self):
        return self.calls


assert ray.get(Flaky.remote().may_fail.remote()) == 3
f = Flaky.remote()
# This call's own option: ValueError is retried up to max_task_retries (3), so 4 runs.
try:
    ray.get(f.always_fails.options(retry_exceptions=[ValueError]).remote())
    raise AssertionError("always_fails returned")
except ValueError:
    pass
assert ray.get(f.calls_made.remote()) == 4
try:
    ray.get(f.always_fails.remote())  # not marked: it runs once
    raise AssertionError("always_fails returned")
except ValueError:
    pass
try:
    ray.get(f.always_fails.options(retry_exceptions=[KeyError]).remote())  # not a KeyError
    raise AssertionError("always_fails returned")
except ValueError:
    pass
assert ray.get(f.calls_made.remote()) == 6
print("OK")
