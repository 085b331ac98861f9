"""Phalanx: an actor runtime for elastic, fault-tolerant distributed training.

    import phalanx

    phalanx.init()                      # a local cluster for this script, or "auto"/"host:port"

    @phalanx.remote(num_cpus=1, max_restarts=2)
    class Counter:
        def __init__(self, start):
            self.value = start
        def add(self, x):
            self.value += x
            return self.value

    c = Counter.remote(5)
    print(phalanx.get(c.add.remote(3)))  # 8

    @phalanx.remote                     # a function: a task on a pooled worker
    def square(x):
        return x * x

    print(phalanx.get(square.remote(square.remote(2))))  # 16: refs as arguments

See phalanx.collective for collective groups and phalanx.train for elastic training.
"""

# The native module, phalanx._native, is built beside the sources in a checkout
# (build/python/phalanx) and installed beside them by a wheel or the .deb: the package's path
# takes in every phalanx folder on sys.path.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from ._api import (ActorClass, ActorHandle, DynamicObjectRefGenerator,
                   NodeAffinitySchedulingStrategy, ObjectRef, ObjectRefGenerator, PlacementGroup, PlacementGroupSchedulingStrategy, actor_info, cancel,
                   cpp_actor_class,
                   get, get_actor, get_placement_group, init, is_initialized, kill, method,
                   placement_group, placement_group_table,
                   put, remove_placement_group, shutdown, wait)
from ._api import available_resources, cluster_resources, get_runtime_context, nodes
from ._context import RuntimeContext, get_gpu_ids
from ._task import RemoteFunction, remote
from .exceptions import (ActorDiedError, ActorError, ActorUnavailableError, AlreadyExistsError,
                         CollectiveError,
                         GetTimeoutError, InvalidArgumentError, InvalidCallError, NotFoundError,
                         ObjectFreedError, ObjectLostError, ObjectStoreFullError, OwnerDiedError,
                         PhalanxError, PlacementGroupError, TaskCancelledError, TaskError)

from . import actor, dag, exceptions, util  # ray.actor, ray.dag, ray.exceptions, ray.util

__all__ = [
    "actor", "dag", "exceptions", "util",
    "init", "shutdown", "is_initialized", "remote", "method", "put", "get", "wait", "kill",
    "cancel",
    "get_actor",
    "actor_info", "placement_group", "remove_placement_group", "get_placement_group",
    "placement_group_table", "cpp_actor_class",
    "ActorClass", "ActorHandle", "ObjectRef", "ObjectRefGenerator", "DynamicObjectRefGenerator",
    "RemoteFunction", "PlacementGroup",
    "PlacementGroupSchedulingStrategy", "NodeAffinitySchedulingStrategy",
    "PhalanxError", "AlreadyExistsError", "ActorError", "ActorDiedError",
    "ActorUnavailableError", "TaskError",
    "InvalidCallError", "GetTimeoutError", "PlacementGroupError", "CollectiveError",
    "NotFoundError", "InvalidArgumentError", "ObjectLostError", "OwnerDiedError",
    "ObjectFreedError", "ObjectStoreFullError", "TaskCancelledError", "get_runtime_context",
    "RuntimeContext",
    "get_gpu_ids", "nodes", "cluster_resources", "available_resources",
]
