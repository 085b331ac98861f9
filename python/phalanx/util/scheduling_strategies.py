"""Ray's ``ray.util.scheduling_strategies``: where an actor or task is placed."""

from .._api import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

__all__ = ["PlacementGroupSchedulingStrategy", "NodeAffinitySchedulingStrategy"]
