# Ray Core's fault tolerance with only the import changed: a task retried after its worker
# dies, retry_exceptions, an actor restarted with max_restarts, the user's exception class
# through get, the owner of an object dying, cancel, and the actor-checkpointing pattern (an
# actor that calls sys.exit(1) restarts from its checkpoint, its calls retried).
import json
import os
import signal
import sys
import tempfile
import time

import numpy as np
import phalanx as ray

ray.init()
marker = os.path.join(tempfile.mkdtemp(), "died")


@ray.remote(max_retries=1)
def potentially_fail(path):
    if not os.path.exists(path):
        open(path, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return "survived"


assert ray.get(potentially_fail.remote(marker)) == "survived"

attempts = os.path.join(tempfile.mkdtemp(), "attempts")


@ray.remote(max_retries=2, retry_exceptions=[IOError])
def flaky(path):
    with open(path, "a") as f:
        f.write("x")
    if os.path.getsize(path) < 2:
        raise IOError("transient")
    return os.path.getsize(path)


assert ray.get(flaky.remote(attempts)) == 2


@ray.remote(max_restarts=2, max_task_retries=-1)
class Actor:
    def pid(self):
        return os.getpid()


actor = Actor.remote()
first = ray.get(actor.pid.remote())
os.kill(first, signal.SIGKILL)
second = ray.get(actor.pid.remote())
assert second != first


class MyError(ValueError):
    pass


@ray.remote
def raises():
    raise MyError("bad input")


try:
    ray.get(raises.remote())
except ValueError as e:  # the task's own exception class
    assert "bad input" in str(e)


@ray.remote
class Owner:
    def make(self):
        return [ray.put(np.zeros(1 << 20))]

    def pid(self):
        return os.getpid()


owner = Owner.remote()
[ref] = ray.get(owner.make.remote())
os.kill(ray.get(owner.pid.remote()), signal.SIGKILL)
time.sleep(0.5)
try:
    ray.get(ref)
    raise AssertionError("a dead owner's object was read")
except ray.exceptions.OwnerDiedError:
    pass


@ray.remote
def forever():
    time.sleep(3600)


task = forever.remote()
time.sleep(1)
ray.cancel(task, force=True)
try:
    ray.get(task)
except ray.exceptions.TaskCancelledError:
    pass

checkpoint = os.path.join(tempfile.mkdtemp(), "checkpoint.json")


@ray.remote(max_restarts=-1, max_task_retries=-1)
class ImmortalActor:
    def __init__(self, path):
        self.path = path
        self.state = {}
        if os.path.exists(path):  # restore from the checkpoint
            with open(path) as f:
                self.state = json.load(f)

    def update(self, key, value, crash):
        if crash and key not in self.state:
            self.state[key] = "crashing"
            with open(self.path, "w") as f:
                json.dump(self.state, f)
            sys.exit(1)  # a crash: the actor restarts and the call is retried
        self.state[key] = value
        with open(self.path, "w") as f:
            json.dump(self.state, f)

    def get(self, key):
        return self.state[key]

    def pid(self):
        return os.getpid()


immortal = ImmortalActor.remote(checkpoint)
before = ray.get(immortal.pid.remote())
ray.get(immortal.update.remote("1", 1, crash=True))
assert ray.get(immortal.get.remote("1")) == 1
assert ray.get(immortal.pid.remote()) != before  # restarted once
print("OK")
