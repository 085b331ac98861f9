"""Ray's ``ray.actor``: ``exit_actor()``, ``method``, and the classes of actors, for type hints
as Ray's documentation writes them:

    Counter: ActorClass[CounterImpl] = phalanx.remote(CounterImpl)
    def bump(counter: ActorProxy[CounterImpl]) -> ObjectRef[int]: ...

``ActorClass[T]``, ``ActorHandle[T]``, ``ActorProxy[T]`` and ``ObjectRef[T]`` are the classes
themselves at run time (Ray's are generic only for type checkers)."""

import os
import sys
import threading
import time

from phalanx import _native

from ._api import ActorClass, ActorHandle, ActorMethod, method
from ._context import TASK_WORKER_CLASS

# Ray's ActorProxy[T]: how its docs annotate a handle to an actor of class T.
ActorProxy = ActorHandle

__all__ = ["ActorClass", "ActorHandle", "ActorMethod", "ActorProxy", "exit_actor", "method"]

# How long an actor that asked to exit waits for its node to end it, before it ends itself.
EXIT_WAIT_S = 10.0


class _ExitActor(BaseException):
    """Raised by exit_actor(); the worker ends the actor when its method lets it out."""


def exit_actor():
    """Ends the actor that calls it, for good (no restart), as Ray's ``exit_actor``: this
    call and the calls after it fail with ActorDiedError; the answers of the calls before it
    are sent before the actor ends. ``sys.exit()`` in a method
    does the same. Only an actor may call it."""
    hosted = _native.hosted_actor()
    if hosted is None or hosted[2] == TASK_WORKER_CLASS:
        raise TypeError("exit_actor() ends the actor that calls it; it was called outside an "
                        "actor (in a driver or a task)")
    raise _ExitActor()


def _end_this_actor():
    """What the worker does when a method raised _ExitActor or SystemExit: the GCS kills this
    actor without a restart; if that takes past EXIT_WAIT_S, the process ends itself."""
    hosted = _native.hosted_actor()

    def end():
        try:
            _native.kill(hosted[0], True)
        except Exception as e:  # noqa: BLE001 - the fallback below still ends it
            print(f"[phalanx worker] exit_actor: the GCS did not take the kill: {e}",
                  file=sys.stderr, flush=True)
        time.sleep(EXIT_WAIT_S)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    threading.Thread(target=end, name="phalanx-exit-actor", daemon=True).start()
