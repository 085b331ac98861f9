# Ray Core's "actor creator failure" (fault tolerance of actors) with only the import
# changed: an actor dies with the actor that created it, even for a call made the moment
# after its creator's SIGKILL, unless it is detached. The cause is OWNER_DIED.
import os
import signal

import phalanx as ray

ray.init()


@ray.remote(max_restarts=-1)
class Actor:
    def ping(self):
        return "hello"


@ray.remote
class Parent:
    def generate_actors(self):
        self.child = Actor.remote()
        self.detached_actor = Actor.options(name="actor", lifetime="detached").remote()
        return self.child, self.detached_actor, os.getpid()


parent = Parent.remote()
actor, detached_actor, pid = ray.get(parent.generate_actors.remote())
assert ray.get(actor.ping.remote()) == "hello"

os.kill(pid, signal.SIGKILL)

try:
    print("actor.ping:", ray.get(actor.ping.remote()))
    raise AssertionError("the child answered after its owner's SIGKILL")
except ray.exceptions.RayActorError as e:
    print("Failed to submit actor call", e)
    assert "OWNER_DIED" in e.cause, e.cause

print("detached_actor.ping:", ray.get(detached_actor.ping.remote()))
ray.kill(detached_actor)
print("OK")
