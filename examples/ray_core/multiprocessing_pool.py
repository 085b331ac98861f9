# Ray's "Distributed multiprocessing.Pool" with only the import changed: the quickstart's
# Pool().map, then the multiprocessing.Pool API on the pool's actors: map with a chunksize,
# imap, imap_unordered, starmap, apply and apply_async with callback and error_callback,
# map_async, an exception in a mapped function raised at get (and at imap's turn), get with
# a timeout, an initializer run in each process, maxtasksperchild, close/join and the
# context manager. As in Ray's quickstart, the first Pool() connects this script itself
# (ray.init() with no arguments).
import os
import time

from phalanx.util.multiprocessing import Pool, TimeoutError


def f(index):
    return index


# The quickstart: a Pool over the cluster's CPUs, its results in the items' order.
pool = Pool()
results = []
for result in pool.map(f, range(100)):
    print(result)
    results.append(result)
assert results == list(range(100))


def square(x):
    return x * x


assert pool.map(square, range(1000), chunksize=10) == [x * x for x in range(1000)]
assert list(pool.imap(square, range(50))) == [x * x for x in range(50)]
assert sorted(pool.imap_unordered(square, range(50), chunksize=4)) == \
    [x * x for x in range(50)]
assert pool.starmap(pow, [(2, 3), (3, 2), (10, 0)]) == [8, 9, 1]
assert pool.apply(divmod, (17, 5)) == (3, 2)

# apply_async with a callback; the callback has run when get returns.
collected = []
async_result = pool.apply_async(square, (12,), callback=collected.append)
assert async_result.get(timeout=30) == 144
assert collected == [144] and async_result.successful()

# map_async: the callback gets the whole list once.
lists = []
async_result = pool.map_async(square, range(10), callback=lists.append)
async_result.wait()
assert async_result.ready() and lists == [[x * x for x in range(10)]]


# An exception in a mapped function re-raises at get, with the remote traceback as its
# cause; error_callback gets it too.
def fails_on_seven(x):
    if x == 7:
        raise ValueError(f"cannot take {x}")
    return x


try:
    pool.map(fails_on_seven, range(10))
    raise AssertionError("map of a failing function returned")
except ValueError as error:
    assert "cannot take 7" in str(error)
    assert "fails_on_seven" in str(error.__cause__)

errors = []
async_result = pool.map_async(fails_on_seven, range(10), error_callback=errors.append)
async_result.wait(timeout=30)
assert not async_result.successful()
assert len(errors) == 1 and isinstance(errors[0], ValueError)
try:
    pool.apply_async(fails_on_seven, (7,)).get()
    raise AssertionError("apply_async of a failing call returned")
except ValueError:
    pass

# imap raises the item's exception at its turn, and goes on after it.
outcomes = []
iterator = pool.imap(fails_on_seven, range(10))
for _ in range(10):
    try:
        outcomes.append(next(iterator))
    except ValueError:
        outcomes.append("error")
assert outcomes == [0, 1, 2, 3, 4, 5, 6, "error", 8, 9], outcomes

# get with a timeout raises multiprocessing.TimeoutError while the call still runs.
slow = pool.apply_async(time.sleep, (3,))
try:
    slow.get(timeout=0.1)
    raise AssertionError("get returned before the call finished")
except TimeoutError:
    assert not slow.ready()
pool.close()
pool.join()
assert slow.ready()
try:
    pool.map(square, [1])
    raise AssertionError("a closed pool took work")
except ValueError:
    pass


# An initializer runs once in each process as it starts.
def initializer(greeting):
    os.environ["POOL_GREETING"] = greeting


def greet(name):
    return f"{os.environ['POOL_GREETING']}, {name}"


with Pool(processes=2, initializer=initializer, initargs=("hello",)) as pool:
    assert pool.map(greet, ["a", "b", "c"]) == ["hello, a", "hello, b", "hello, c"]

# maxtasksperchild: each process is replaced (and initialized again) after that many chunks.
with Pool(processes=2, initializer=initializer, initargs=("hi",),
          maxtasksperchild=2) as pool:
    pids = pool.map(lambda _: (os.getpid(), os.environ["POOL_GREETING"]), range(8),
                    chunksize=1)
    assert {greeting for _, greeting in pids} == {"hi"}
    assert len({pid for pid, _ in pids}) >= 4, pids
print("OK")
