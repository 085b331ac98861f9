# Ray Core's placement groups with only the import changed: reserve bundles, wait for them,
# schedule an actor and a task into them, read the table, and remove the group; a group no
# node can hold stays pending (with a warning), as in Ray.
import phalanx as ray
from phalanx.util.placement_group import (placement_group, placement_group_table,
                                          remove_placement_group)
from phalanx.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ray.init()

pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK")
ray.get(pg.ready(), timeout=30)
ready, unready = ray.wait([pg.ready()], timeout=0)
assert ready and not unready


@ray.remote(num_cpus=1)
class Actor:
    def ready(self):
        return True


@ray.remote(num_cpus=1)
def where():
    return ray.util.get_current_placement_group().id


actor = Actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
    placement_group=pg, placement_group_bundle_index=0)).remote()
assert ray.get(actor.ready.remote())
assert ray.get(where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
    placement_group=pg)).remote()) == pg.id
assert placement_group_table(pg)["state"] == "CREATED"
remove_placement_group(pg)
assert placement_group_table(pg)["state"] == "REMOVED"

too_big = placement_group([{"CPU": 1000}])
ready, unready = ray.wait([too_big.ready()], timeout=1)
assert not ready and unready
assert placement_group_table(too_big)["state"] == "PENDING"
remove_placement_group(too_big)
print("OK")
