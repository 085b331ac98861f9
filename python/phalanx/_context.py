"""What this process is: the RuntimeContext that ``get_runtime_context()`` returns, its GPUs,
and the calls the running task started. It imports nothing of the package but the native
module, so every other module may use it: the worker process (``phalanx._worker``) hands it
what only a worker knows (``set_cancel_probe``)."""

import contextvars
import os
import socket

from phalanx import _native

# The class of the actor that runs tasks in a pooled task worker (phalanx._task.TaskWorker):
# a process that hosts it is a task worker, not an actor.
TASK_WORKER_CLASS = "phalanx._task.TaskWorker"


def _is_task_worker(hosted):
    return hosted[2] == TASK_WORKER_CLASS


# The calls the running task started (native refs), while a task runs in this process: a
# cancelled task cancels those not done, as Ray's cancel(recursive=True) does.
_children = None


def note_child(native_ref):
    """Records a call (task or actor call) that the running task started."""
    children = _children
    if children is not None:
        children.append(native_ref)


def begin_children():
    """The running task starts: its calls are recorded from now."""
    global _children
    _children = []


def end_children(cancel):
    """The running task ended (cancel: it was cancelled, and so are its calls not done)."""
    global _children
    children, _children = _children, None
    for ref in (children or ()) if cancel else ():
        try:
            if not ref.done():
                ref.cancel(False)
        except Exception:  # noqa: BLE001 - one that cannot be cancelled runs on
            pass


# Whether the call this thread runs was cancelled: set by the worker process
# (phalanx._worker), the only one that runs calls; None in a driver.
_cancel_probe = None


def set_cancel_probe(probe):
    global _cancel_probe
    _cancel_probe = probe


# The task or actor call this thread (or this coroutine) runs: (name, function name, call key
# "<caller>/<seq>"), as the worker process sets it around each call; None in a driver.
_current_task = contextvars.ContextVar("phalanx_current_task", default=None)


def enter_task(name, function_name, call_key):
    """The worker starts a call: what get_task_name(), get_task_function_name() and
    get_task_id() say until leave_task(the token returned)."""
    return _current_task.set((name, function_name, call_key))


def leave_task(token):
    _current_task.reset(token)


class _Id(str):
    """An id as Ray's properties give it: the hex string itself, with Ray's ``hex()``."""

    @classmethod
    def of(cls, value):
        return None if value is None else cls(value)

    def hex(self):
        return str(self)


class RuntimeContext:
    """What this process is, in Ray's terms (``phalanx.get_runtime_context()``)."""

    def get_job_id(self):
        """The id of the job this process belongs to (a driver's own, or its actor's)."""
        return os.environ.get("PHALANX_JOB_ID") or _native.cluster()[2]

    def get_node_id(self):
        """The id of the node this process runs on (None where no node of the cluster runs
        on this machine)."""
        node = os.environ.get("PHALANX_NODE_ID")
        if node:
            return node
        here = socket.gethostname()
        for n in _native.nodes():
            if n["alive"] and n["hostname"] == here:
                return n["node_id"]
        return None

    def get_actor_id(self):
        """The id of the actor this process hosts; None in a driver or a task."""
        hosted = _native.hosted_actor()
        return None if hosted is None or _is_task_worker(hosted) else hosted[0]

    def get_actor_name(self):
        actor_id = self.get_actor_id()
        return _native.actor_info(actor_id).get("name") or None if actor_id else None

    def get_task_id(self):
        """The id of the task or actor call this thread runs (hex), or None in a driver."""
        current = _current_task.get()
        call = current[2] if current else None
        if not call:
            return None
        # Unique in the cluster: the worker's actor, the caller, and the caller's sequence
        # number on that actor (48 hex digits, as Ray's task ids).
        hosted = _native.hosted_actor()
        caller, _, seq = call.partition("/")
        return f"{hosted[0] if hosted else ''}{caller}{int(seq or 0):016x}"

    def get_task_name(self):
        """The name of the task or actor call this thread runs, as Ray's: the function's
        name for a task ("train_step"), "Class.method" for an actor call, or the name given
        with ``.options(name=...)``. None in a driver."""
        current = _current_task.get()
        return current[0] if current else None

    def get_task_function_name(self):
        """The full name of the function the task or actor call runs, its module included
        ("__main__.train_step", "__main__.Worker.step"). None in a driver."""
        current = _current_task.get()
        return current[1] if current else None

    def is_canceled(self):
        """Whether the actor call or task this thread runs was cancelled (phalanx.cancel),
        for a plain method to stop early. RuntimeError in a driver or an async method (which
        gets asyncio.CancelledError instead), as in Ray."""
        if _cancel_probe is None:
            raise RuntimeError("is_canceled() is for a method of an actor or a task; the "
                               "driver runs none")
        return _cancel_probe()

    @property
    def was_current_actor_reconstructed(self):
        """Whether this actor is a restart of one that died (Ray's property)."""
        hosted = _native.hosted_actor()
        return bool(hosted and hosted[1] > 0)

    # Ray's properties beside the getters: ids with .hex(), as Ray's JobID, NodeID, ...
    @property
    def job_id(self):
        return _Id.of(self.get_job_id())

    @property
    def node_id(self):
        return _Id.of(self.get_node_id())

    @property
    def actor_id(self):
        return _Id.of(self.get_actor_id())

    @property
    def task_id(self):
        return _Id.of(self.get_task_id())

    @property
    def namespace(self):
        return _native.cluster()[3]

    def get_namespace(self):
        return self.namespace

    def get_accelerator_ids(self):
        return {"GPU": [str(g) for g in get_gpu_ids()]}


def get_gpu_ids():
    """The GPUs this process was given (CUDA_VISIBLE_DEVICES, as the node set it for an actor
    or task with num_gpus); [] where none."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    ids = []
    for part in visible.split(","):
        part = part.strip()
        if part:
            ids.append(int(part) if part.isdigit() else part)
    return ids
