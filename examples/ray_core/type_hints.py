# Ray Core's "Type hints in Ray" with only the import changed: ray.remote as a function
# (ActorClass[T]), @ray.method bare and with options, ActorProxy[T] and ObjectRef[T]
# annotations, and a handle passed to a typed function.
import phalanx as ray
from phalanx import ObjectRef
from phalanx.actor import ActorClass, ActorHandle, ActorProxy

ray.init()


@ray.remote
def add_numbers(x: int, y: int) -> int:
    return x + y


a = add_numbers.remote(5, 3)
assert ray.get(a) == 8


class DemoRay:
    def __init__(self, init: int):
        self.init = init

    @ray.method
    def calculate(self, v1: int, v2: int) -> int:
        return self.init + v1 + v2

    @ray.method(num_returns=2)
    def split(self) -> tuple:
        return self.init, -self.init


ActorDemoRay: ActorClass[DemoRay] = ray.remote(DemoRay)
actor: ActorProxy[DemoRay] = ActorDemoRay.remote(1)
ref: ObjectRef[int] = actor.calculate.remote(1, 2)
assert ray.get(ref) == 4
high, low = actor.split.remote()
assert ray.get([high, low]) == [1, -1]


@ray.remote
def use_actor(actor: "ActorProxy[DemoRay]") -> int:
    return ray.get(actor.calculate.remote(10, 20))


assert ray.get(use_actor.remote(actor)) == 31


def typed(handle: ActorHandle[DemoRay]) -> ObjectRef[int]:
    return handle.calculate.remote(0, 0)


assert ray.get(typed(actor)) == 1
assert isinstance(actor, ActorHandle) and isinstance(ActorDemoRay, ActorClass)
print("OK")
