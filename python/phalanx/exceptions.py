"""Errors raised by phalanx: each carries the cause (Ray's names where they fit).

The native module raises these classes itself: the C++ error's kind (an actor died, a task
raised, a get timed out, ...) picks the class, else the call's domain (placement groups,
collectives), else its status code (python/src/errors.cc)."""


class PhalanxError(Exception):
    """Base class of every phalanx error."""


class ActorError(PhalanxError):
    def __init__(self, message, actor_id=""):
        super().__init__(message)
        self.actor_id = actor_id


class ActorDiedError(ActorError):
    """The actor is dead. ``cause`` says why, e.g.
    ``"OOM_KILLED: peak 1.9 GiB > limit 1.0 GiB"``, ``"SIGNALED(9, Killed)"``,
    ``"CREATION_FAILED: ..."``, ``"KILLED_BY_USER"``, ``"NODE_DIED: ..."``."""

    def __init__(self, message, actor_id="", cause=""):
        super().__init__(message, actor_id)
        self.cause = cause


class ActorUnavailableError(ActorError):
    """The actor died during the call and is restarting; the call was not retried
    (``max_task_retries``)."""


class TaskError(PhalanxError):
    """The actor's method raised. ``cause_type`` is the remote exception's class name and
    ``remote_traceback`` its traceback."""

    def __init__(self, message, cause_type="", remote_traceback=""):
        super().__init__(message)
        self.cause_type = cause_type
        self.remote_traceback = remote_traceback


class InvalidCallError(PhalanxError, TypeError):
    """No such method, or arguments that do not fit it."""


class GetTimeoutError(PhalanxError, TimeoutError):
    """``get`` or ``placement_group(...).ready()`` did not finish within the timeout."""


class PlacementGroupError(PhalanxError):
    """A placement group could not be created or was removed."""


class CollectiveError(PhalanxError, RuntimeError):
    """A collective failed: a peer died or left, it timed out, or it was aborted."""


class NotFoundError(PhalanxError, LookupError):
    """The cluster does not know the actor, job or key asked for."""


class InvalidArgumentError(PhalanxError, ValueError):
    """The cluster refused a request as malformed (e.g. a job spec, with the field and fix)."""
