# Ray Core's generators with only the import changed: num_returns of a generator that raises
# after yielding (the refs before the error read their values, the later ones raise), the
# older num_returns="dynamic" shape, a streaming ObjectRefGenerator read with `for`,
# `async for` and ray.wait beside a plain task's ref.
import asyncio
import time

import phalanx as ray

ray.init()


@ray.remote
def generator():
    for i in range(2):
        yield i
    raise ValueError("error after two values")


ref1, ref2, ref3, ref4 = generator.options(num_returns=4).remote()
assert ray.get([ref1, ref2]) == [0, 1]
for ref in (ref3, ref4):
    try:
        ray.get(ref)
        raise AssertionError("a ref after the error read a value")
    except ValueError as error:
        assert "error after two values" in str(error)

dynamic_ref = generator.options(num_returns="dynamic").remote()
refs = list(ray.get(dynamic_ref))
assert len(refs) == 3, refs
assert ray.get(refs[:2]) == [0, 1]
try:
    ray.get(refs[2])
    raise AssertionError("the last ref of a failed dynamic generator read a value")
except ray.exceptions.RayTaskError as error:
    assert isinstance(error, ValueError)


@ray.remote
def split(values, chunk):
    while values:
        yield values[:chunk]
        values = values[chunk:]


assert [ray.get(r) for r in split.remote(list(range(7)), 3)] == [[0, 1, 2], [3, 4, 5], [6]]


@ray.remote
def slow_values():
    for i in range(3):
        time.sleep(0.5)
        yield i


async def read_all():
    return [await ref async for ref in slow_values.remote()]

assert asyncio.run(read_all()) == [0, 1, 2]

# ray.wait takes an ObjectRefGenerator: it is ready when its next ref is.
gen = slow_values.remote()
ready, unready = ray.wait([gen], timeout=0)
assert ready == [] and unready == [gen]
ready, unready = ray.wait([gen])
assert ready == [gen]
assert ray.get(next(gen)) == 0


@ray.remote
def regular_task():
    time.sleep(0.5)
    return "done"


pending = [slow_values.remote(), regular_task.remote()]
results = []
while pending:
    ready, pending = ray.wait(pending)
    for r in ready:
        if isinstance(r, ray.ObjectRefGenerator):
            try:
                results.append(ray.get(next(r)))
            except StopIteration:
                pass
            else:
                pending.append(r)
        else:
            results.append(ray.get(r))
assert sorted(results, key=str) == [0, 1, 2, "done"], results
print("OK")
