# Ray Core's streaming generators ("Ray Generators" guide) with only the import changed:
# generator tasks and the methods of sync, async and threaded actors give an
# ObjectRefGenerator (imported from ray._raylet, as Ray's docs do); next, for, async for;
# an exception mid-stream; cancel; completed(); ray.wait on generators.
import asyncio
import time

import phalanx as ray
from phalanx._raylet import ObjectRefGenerator

ray.init()


@ray.remote
def task():
    for i in range(5):
        time.sleep(0.1)
        yield i


gen = task.remote()
assert isinstance(gen, ObjectRefGenerator)
ref = next(gen)  # blocks until the first value is yielded
assert ray.get(ref) == 0
assert [ray.get(ref) for ref in gen] == [1, 2, 3, 4]


@ray.remote
class Actor:
    def f(self):
        for i in range(5):
            yield i


@ray.remote
class AsyncActor:
    async def f(self):
        for i in range(5):
            yield i


@ray.remote(max_concurrency=5)
class ThreadedActor:
    def f(self):
        for i in range(5):
            yield i


for cls in (Actor, AsyncActor, ThreadedActor):
    actor = cls.remote()
    assert [ray.get(ref) for ref in actor.f.remote()] == [0, 1, 2, 3, 4], cls


async def main():
    return [await ref async for ref in task.remote()]

assert asyncio.run(main()) == [0, 1, 2, 3, 4]


@ray.remote
def failing():
    for i in range(5):
        time.sleep(0.1)
        if i == 1:
            raise ValueError
        yield i


gen = failing.remote()
assert ray.get(next(gen)) == 0
try:
    ray.get(next(gen))
    raise AssertionError("the error after the first value did not raise")
except ValueError as e:
    print(f"Exception is raised when i == 1 as expected {e!r}")


@ray.remote
def slow():
    for i in range(50):
        time.sleep(0.2)
        yield i


gen = slow.remote()
assert ray.get(next(gen)) == 0
ray.cancel(gen)
seen = []
try:
    for ref in gen:  # what was yielded before the cancel, then the cancel's error
        seen.append(ray.get(ref))
    raise AssertionError(f"a cancelled generator ended without an error after {seen}")
except ray.exceptions.TaskCancelledError:
    assert len(seen) < 10, seen

gen = task.remote()
ray.get(gen.completed())  # ready once the generator has finished
assert [ray.get(r) for r in gen] == [0, 1, 2, 3, 4]


@ray.remote
def generator_task():
    for i in range(3):
        time.sleep(0.3)
        yield i


@ray.remote
def regular_task():
    time.sleep(0.3)
    return "regular"


gen = [generator_task.remote()]
ref = [regular_task.remote()]
ready, unready = [], [*gen, *ref]
result = []
while unready:
    ready, unready = ray.wait(unready)
    for r in ready:
        if isinstance(r, ObjectRefGenerator):
            try:
                ref = next(r)
                result.append(ray.get(ref))
            except StopIteration:
                pass
            else:
                unready.append(r)
        else:
            result.append(ray.get(r))
assert sorted(result, key=str) == [0, 1, 2, "regular"], result
print("OK")
