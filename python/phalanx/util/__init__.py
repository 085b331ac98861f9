"""``phalanx.util``: Ray's ``ray.util`` helpers, at Ray's module paths: ``ActorPool``
(``phalanx.util.actor_pool``), ``phalanx.util.queue.Queue``,
``phalanx.util.multiprocessing.Pool``, and the placement group functions (also in
``phalanx.util.placement_group``), with the scheduling strategies in
``phalanx.util.scheduling_strategies``, where Ray has them.
"""

from . import actor_pool
from .actor_pool import ActorPool
from .placement_group import (PlacementGroup, get_current_placement_group,
                              get_placement_group, placement_group, placement_group_table,
                              remove_placement_group)

__all__ = ["ActorPool", "PlacementGroup", "placement_group", "remove_placement_group",
           "get_placement_group", "placement_group_table", "get_current_placement_group"]


def __getattr__(name):
    # ray.util.queue and ray.util.multiprocessing, loaded on first use (their actors' classes
    # are not needed by every program).
    if name in ("queue", "multiprocessing"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
