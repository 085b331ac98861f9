# Ray Core's actors with only the import changed: a stateful counter, named and detached
# actors, get_if_exists, actor handles passed to tasks, an async actor, cancelled actor
# tasks, ActorPool and exit_actor.
import asyncio
import time

import phalanx as ray
from phalanx.util import ActorPool

ray.init()


@ray.remote
class Counter:
    def __init__(self):
        self.value = 0

    def increment(self):
        self.value += 1
        return self.value

    def get_counter(self):
        return self.value


counter = Counter.remote()
refs = [counter.increment.remote() for _ in range(5)]
assert ray.get(refs) == [1, 2, 3, 4, 5]


@ray.remote
def bump(c):
    return ray.get(c.increment.remote())


assert ray.get(bump.remote(counter)) == 6

named = Counter.options(name="global_counter", lifetime="detached").remote()
same = ray.get_actor("global_counter")
ray.get(named.increment.remote())
assert ray.get(same.get_counter.remote()) == 1
assert Counter.options(name="global_counter", get_if_exists=True).remote() == named
ray.kill(named)


@ray.remote
class AsyncActor:
    async def run_task(self):
        await asyncio.sleep(1)
        return 1


actor = AsyncActor.remote()
start = time.time()
assert sum(ray.get([actor.run_task.remote() for _ in range(4)])) == 4
assert time.time() - start < 3.5  # the four sleeps overlap


# Cancelling actor tasks, as Ray's docs show: an async actor's task is cancelled at its await;
# a plain actor's task checks is_canceled().
@ray.remote
class Sleeper:
    def __init__(self):
        self.cancelled = False

    async def f(self):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled = True
            raise

    async def was_cancelled(self):
        return self.cancelled


def cancel_running(ref, error):
    time.sleep(1)  # wait until the task is scheduled
    ray.cancel(ref)
    try:
        ray.get(ref)
        raise AssertionError("the cancelled call returned")
    except error:  # Ray's documentation catches either
        pass


sleeper = Sleeper.remote()
cancel_running(sleeper.f.remote(), ray.exceptions.RayTaskError)
deadline = time.time() + 30
while not ray.get(sleeper.was_cancelled.remote()):
    assert time.time() < deadline, "the actor task was not cancelled"
    time.sleep(0.1)


@ray.remote
class Looper:
    def f(self):
        for _ in range(300):
            if ray.get_runtime_context().is_canceled():
                return "stopped early"
            time.sleep(0.1)
        return "ran to the end"


looper = Looper.remote()
cancel_running(looper.f.remote(), ray.exceptions.TaskCancelledError)


@ray.remote
class Doubler:
    def double(self, v):
        return 2 * v


pool = ActorPool([Doubler.remote(), Doubler.remote()])
assert list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3, 4])) == [2, 4, 6, 8]


@ray.remote
class Exiter:
    def exit(self):
        ray.actor.exit_actor()


exiter = Exiter.remote()
try:
    ray.get(exiter.exit.remote())
    raise AssertionError("exit_actor() returned")
except ray.exceptions.ActorDiedError:
    pass
print("OK")
