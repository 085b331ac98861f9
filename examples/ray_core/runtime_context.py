# Ray Core's introspection and job-wide runtime_env with only the import changed.
import os

import phalanx as ray

ray.init(runtime_env={"env_vars": {"FOO": "bar"}})


@ray.remote
def env():
    return os.environ.get("FOO")


@ray.remote
def nested_env():
    return ray.get(env.remote())


assert ray.get(env.remote()) == "bar"
assert ray.get(nested_env.remote()) == "bar"


@ray.remote
class Actor:
    def ids(self):
        ctx = ray.get_runtime_context()
        return ctx.get_actor_id(), ctx.get_node_id(), ctx.get_job_id()


actor_id, node_id, job_id = ray.get(Actor.remote().ids.remote())
assert actor_id and node_id in {n["NodeID"] for n in ray.nodes()} and job_id
assert ray.cluster_resources()["CPU"] >= 1
assert ray.get_gpu_ids() == []
print("OK")
