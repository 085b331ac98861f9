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
    """A task or an actor's method raised. ``cause`` is the remote exception itself (None
    where it could not be sent back), ``cause_type`` its class name and ``remote_traceback``
    its traceback. As Ray's RayTaskError, the error raised is also an instance of the cause's
    class where one can be made: ``except ValueError`` around ``get`` catches a remote
    ValueError."""

    def __init__(self, message, cause_type="", remote_traceback="", cause=None):
        super().__init__(message)
        self.cause_type = cause_type
        self.remote_traceback = remote_traceback
        self.cause = cause


class TaskCancelledError(PhalanxError):
    """The task was cancelled (``phalanx.cancel``) before it gave a result."""


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


class AlreadyExistsError(PhalanxError, ValueError):
    """The name is taken (an actor's in its namespace, a placement group's), as Ray's
    ValueError says."""


class InvalidArgumentError(PhalanxError, ValueError):
    """The cluster refused a request as malformed (e.g. a job spec, with the field and fix)."""


class ObjectLostError(PhalanxError):
    """A value of the object store is gone (Ray's ObjectLostError)."""

    def __init__(self, message, object_id="", owner=""):
        super().__init__(message)
        self.object_id = object_id
        self.owner = owner

    def __reduce__(self):
        return type(self), (str(self), self.object_id, self.owner)


class OwnerDiedError(ObjectLostError):
    """The process that owned the value (put it, or made the call) died, and the value with it."""


class ObjectFreedError(ObjectLostError):
    """The value was freed: its owner held no ref to it any more."""


class ObjectStoreFullError(PhalanxError, MemoryError):
    """No room for a value in the node's store (/dev/shm)."""


class WorkerCrashedError(ActorDiedError):
    """A task's worker process died while it ran the task, on every try (Ray's
    WorkerCrashedError; an ActorDiedError too, as a task worker is an actor here)."""


class OutOfMemoryError(WorkerCrashedError):
    """A task's worker was killed for passing its memory limit, or by the node's memory
    monitor (Ray's OutOfMemoryError)."""


class NodeDiedError(PhalanxError):
    """The node that held the work died (Ray's NodeDiedError)."""


class TaskUnschedulableError(PhalanxError):
    """No node can ever run the task (Ray's TaskUnschedulableError)."""


class ActorUnschedulableError(PhalanxError):
    """No node can ever host the actor (Ray's ActorUnschedulableError)."""


class RuntimeEnvSetupError(PhalanxError):
    """The runtime environment could not be set up (Ray's RuntimeEnvSetupError)."""


class ActorPlacementGroupRemoved(ActorError):
    """The actor's placement group was removed (Ray's ActorPlacementGroupRemoved)."""


class TaskPlacementGroupRemoved(PhalanxError):
    """The task's placement group was removed (Ray's TaskPlacementGroupRemoved)."""


class ObjectReconstructionFailedError(ObjectLostError):
    """A lost value could not be made again (Ray's ObjectReconstructionFailedError; values
    are not reconstructed here)."""


class ObjectFetchTimedOutError(ObjectLostError):
    """A value could not be fetched from its node in time (Ray's ObjectFetchTimedOutError)."""


class PendingCallsLimitExceeded(PhalanxError):
    """Too many calls wait on an actor (Ray's PendingCallsLimitExceeded)."""


class AsyncioActorExit(PhalanxError):
    """Raised inside an async actor to end it (Ray's AsyncioActorExit)."""


class LocalRayletDiedError(PhalanxError):
    """This machine's node died (Ray's LocalRayletDiedError)."""


class RaySystemError(PhalanxError):
    """An error of the runtime itself (Ray's RaySystemError)."""


class UnserializableException(PhalanxError):
    """A remote exception that could not be pickled back (Ray's UnserializableException)."""


class CrossLanguageError(PhalanxError):
    """An error that crossed from another language (Ray's CrossLanguageError)."""


# Ray's names for the bases: `except ray.exceptions.RayTaskError` and the others work as
# written.
RayError = PhalanxError
RayTaskError = TaskError
RayActorError = ActorError


class _CancelledTaskError(TaskError, TaskCancelledError):
    """What ``get`` of a cancelled call raises: a TaskCancelledError that is also a TaskError
    (Ray's RayTaskError whose cause is TaskCancelledError), so that ``except RayTaskError``
    and ``except TaskCancelledError`` both catch it, as Ray's documentation writes them."""

    def __init__(self, message):
        TaskError.__init__(self, message, "TaskCancelledError", "", None)

    def __reduce__(self):
        return (_cancelled, (str(self),))


def _cancelled(message):
    return _CancelledTaskError(message)


# ---- a remote exception as the caller sees it -------------------------------------------------

_AS_CAUSE = {}  # the cause's class -> the TaskError subclass that is also one (None: cannot be)


def _class_as_cause(cause_cls):
    """A subclass of both TaskError and ``cause_cls`` (Ray's as_instanceof_cause), made once
    per class; None where Python cannot combine them (an instance layout conflict)."""
    if cause_cls in _AS_CAUSE:
        return _AS_CAUSE[cause_cls]
    made = None
    if issubclass(cause_cls, Exception) and not issubclass(cause_cls, PhalanxError):
        def __init__(self, message, cause_type, remote_traceback, cause):
            # Not the bases' __init__: the cause's class may want other arguments.
            self._message = message
            self.cause_type = cause_type
            self.remote_traceback = remote_traceback
            self.cause = cause
            self.args = cause.args  # as the user's own exception has them

        def __str__(self):
            return self._message

        def __getattr__(self, name):  # the cause's own attributes (only those not found)
            if name.startswith("__") or name == "cause":
                raise AttributeError(name)
            return getattr(self.cause, name)

        def __reduce__(self):  # travels on (a nested task's error) as what it is
            return (_as_cause, (self._message, self.cause_type, self.remote_traceback,
                                self.cause))
        try:
            made = type(f"TaskError({cause_cls.__name__})", (TaskError, cause_cls),
                        {"__init__": __init__, "__str__": __str__, "__getattr__": __getattr__,
                         "__reduce__": __reduce__, "__module__": __name__})
        except TypeError:
            made = None
    _AS_CAUSE[cause_cls] = made
    return made


def _as_cause(message, cause_type, remote_traceback, cause):
    cls = _class_as_cause(type(cause)) if isinstance(cause, BaseException) else None
    if cls is None:
        return TaskError(message, cause_type, remote_traceback, cause)
    try:
        error = cls.__new__(cls)
        cls.__init__(error, message, cause_type, remote_traceback, cause)
        return error
    except Exception:  # noqa: BLE001 - a class whose __new__ wants its own arguments
        return TaskError(message, cause_type, remote_traceback, cause)


def _task_error(message, detail):
    """The error for a remote exception (the native module raises it): ``detail`` is the
    class name, then, after a NUL, the pickled exception where the worker could pickle it."""
    import pickle
    name, _, blob = bytes(detail).partition(b"\0")
    cause = None
    if blob:
        try:
            cause = pickle.loads(blob)
        except Exception:  # noqa: BLE001 - a class this process cannot import
            cause = None
    return _as_cause(message, name.decode(errors="replace"), message, cause)


def _remote_detail(e):
    """What a worker sends beside a TaskError's message: the class name, a NUL and the
    pickled exception (a nested task's TaskError: its cause), or the name alone where it
    cannot be pickled or is over 1 MiB."""
    import pickle

    import cloudpickle  # a class of the driver's __main__ travels by value
    cause = e.cause if isinstance(e, TaskError) and e.cause is not None else e
    name = type(cause).__name__.encode()
    try:
        blob = cloudpickle.dumps(cause, protocol=5)
        pickle.loads(blob)  # an exception whose __init__ wants other arguments fails here
    except Exception:  # noqa: BLE001
        return name
    return name + b"\0" + blob if len(blob) <= (1 << 20) else name
