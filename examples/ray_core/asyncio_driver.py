# Ray Core's "AsyncIO / Concurrency for Actors" (ObjectRefs as asyncio futures) with only the
# import changed: await a ref in the driver's asyncio code, asyncio.wait and gather on refs,
# ref.as_future() and ref.future(), add_done_callback.
import asyncio
import time

import phalanx as ray

ray.init()


@ray.remote
def some_task(delay=0.0):
    time.sleep(delay)
    return 1


async def await_obj_ref():
    await some_task.remote()
    await asyncio.wait([some_task.remote()])

asyncio.run(await_obj_ref())


async def convert_to_asyncio_future():
    ref = some_task.remote()
    fut: asyncio.Future = asyncio.wrap_future(ref.future())
    print(await fut)
    assert await some_task.remote().as_future() == 1

asyncio.run(convert_to_asyncio_future())

fut = some_task.remote().future()  # a concurrent.futures.Future
assert fut.result(timeout=60) == 1


async def first_done():
    fast, slow = some_task.remote(0.0), some_task.remote(5.0)
    done, pending = await asyncio.wait([slow, fast], return_when=asyncio.FIRST_COMPLETED)
    assert done == {fast} and pending == {slow}, (done, pending)
    done, pending = await asyncio.wait([slow, fast], timeout=0.5)
    assert done == {fast} and pending == {slow}
    ray.cancel(slow)
    done, pending = await asyncio.wait([slow, ray.put(2)], timeout=30)
    assert len(done) == 2 and not pending
    assert await asyncio.gather(*[some_task.remote() for _ in range(5)]) == [1] * 5
    assert await asyncio.wait_for(some_task.remote(), timeout=30) == 1
    called = asyncio.get_running_loop().create_future()
    ref = some_task.remote(0.1)
    ref.add_done_callback(lambda r: called.set_result(r))  # called on this loop
    assert await called is ref

asyncio.run(first_done())


@ray.remote
def fails():
    raise ValueError("bad")


async def failure():
    try:
        await fails.remote()
        raise AssertionError("no error")
    except ValueError:
        pass
    done, _ = await asyncio.wait([fails.remote()])
    try:
        ray.get(done.pop())
        raise AssertionError("no error")
    except ValueError:
        pass

asyncio.run(failure())
print("OK")
