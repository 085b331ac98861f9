# Ray Core's RuntimeContext task names and ids (the docstrings of get_task_name,
# get_task_function_name and get_task_id) with only the import changed.
import phalanx as ray

ray.init()


@ray.remote
class Actor:
    def get_task_name(self):
        return ray.get_runtime_context().get_task_name()

    def get_task_function_name(self):
        return ray.get_runtime_context().get_task_function_name()

    def get_task_id(self):
        return ray.get_runtime_context().get_task_id()


@ray.remote
class AsyncActor:
    async def get_task_name(self):
        return ray.get_runtime_context().get_task_name()

    async def get_task_function_name(self):
        return ray.get_runtime_context().get_task_function_name()


@ray.remote
def get_task_name():
    return ray.get_runtime_context().get_task_name()


@ray.remote
def get_task_function_name():
    return ray.get_runtime_context().get_task_function_name()


@ray.remote
def get_task_id():
    return ray.get_runtime_context().get_task_id()


a = Actor.remote()
b = AsyncActor.remote()
# Task names are available for actor tasks, async actor tasks and normal tasks.
assert ray.get(a.get_task_name.remote()) == "Actor.get_task_name"
assert ray.get(b.get_task_name.remote()) == "AsyncActor.get_task_name"
assert ray.get(get_task_name.remote()) == "get_task_name"
# A name given with options(name=...).
assert ray.get(get_task_name.options(name="task_name").remote()) == "task_name"
assert ray.get(a.get_task_name.options(name="actor_task").remote()) == "actor_task"
# The function's full path, its module included.
assert ray.get(a.get_task_function_name.remote()) == "__main__.Actor.get_task_function_name"
assert ray.get(b.get_task_function_name.remote()) == \
    "__main__.AsyncActor.get_task_function_name"
assert ray.get(get_task_function_name.remote()) == "__main__.get_task_function_name"
# Task ids: one per task or actor call; the driver runs none.
ids = ray.get([get_task_id.remote() for _ in range(4)] + [a.get_task_id.remote()
                                                           for _ in range(4)])
assert len(set(ids)) == 8 and all(isinstance(i, str) and i for i in ids), ids
ctx = ray.get_runtime_context()
assert ctx.get_task_name() is None and ctx.get_task_id() is None
print("OK")
