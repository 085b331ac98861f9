# Ray Core's serialization guide (numpy arrays are read-only, zero-copy) with only the import
# changed: writing into an argument fails until it is copied; a get of a put array is a
# read-only view of the object store, shared by readers on the machine.
import numpy as np

import phalanx as ray

ray.init()


@ray.remote
def f(arr):
    # arr = arr.copy()  # Adding a copy will fix the error.
    arr[0] = 1


try:
    ray.get(f.remote(np.zeros(100)))
    raise AssertionError("writing into an argument succeeded")
except ray.exceptions.RayTaskError as e:
    print(e)
    assert isinstance(e, ValueError) and "read-only" in str(e)


@ray.remote
def g(arr):
    arr = arr.copy()
    arr[0] = 1
    return arr


assert ray.get(g.remote(np.zeros(100)))[0] == 1

big = np.arange(4_000_000, dtype=np.float64)  # 32 MB: the object store, not inline
ref = ray.put(big)
view = ray.get(ref)
assert not view.flags.writeable and view[123] == 123.0
try:
    view[0] = 1.0
    raise AssertionError("writing into a value of the object store succeeded")
except ValueError:
    pass


@ray.remote
def total(arr):
    return float(arr.sum()), arr.flags.writeable


assert ray.get(total.remote(ref)) == (float(big.sum()), False)
print("OK")
