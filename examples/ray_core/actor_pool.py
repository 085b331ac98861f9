# Ray Core's ActorPool (the docstrings of ray.util.ActorPool and its methods) with only the
# import changed: map, map_unordered, submit/get_next, get_next_unordered, has_next,
# has_free, pop_idle and push, under both of Ray's import paths.
import time

import phalanx as ray
from phalanx.util import ActorPool
from phalanx.util.actor_pool import ActorPool as ActorPoolByModule

assert ActorPool is ActorPoolByModule
ray.init()


@ray.remote
class Actor:
    def double(self, v):
        return 2 * v

    def slow_double(self, v):
        time.sleep(0.05 * v)
        return 2 * v


a1, a2 = Actor.remote(), Actor.remote()
pool = ActorPool([a1, a2])
assert list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3, 4])) == [2, 4, 6, 8]
assert sorted(pool.map_unordered(lambda a, v: a.slow_double.remote(v), [4, 3, 2, 1])) == \
    [2, 4, 6, 8]

pool.submit(lambda a, v: a.double.remote(v), 1)
pool.submit(lambda a, v: a.double.remote(v), 2)
pool.submit(lambda a, v: a.double.remote(v), 3)  # waits for a free actor
assert pool.has_next()
assert [pool.get_next(), pool.get_next(), pool.get_next()] == [2, 4, 6]
assert not pool.has_next()

pool.submit(lambda a, v: a.slow_double.remote(v), 10)
pool.submit(lambda a, v: a.double.remote(v), 2)
assert pool.get_next_unordered() == 4  # the faster one first
assert pool.get_next_unordered() == 20

pool.submit(lambda a, v: a.slow_double.remote(v), 20)
try:
    pool.get_next(timeout=0.1)
    raise AssertionError("get_next did not time out")
except TimeoutError:
    pass
assert pool.get_next() == 40

assert pool.has_free()
idle = pool.pop_idle()
assert idle in (a1, a2)
a3 = Actor.remote()
pool.push(a3)
pool.push(idle)
assert sorted(pool.map(lambda a, v: a.double.remote(v), range(10))) == \
    [2 * v for v in range(10)]
print("OK")
