"""Ray's introspection calls: ``get_runtime_context()``, ``get_gpu_ids()``, ``nodes()``,
``cluster_resources()`` and ``available_resources()``."""

import os
import socket

import _phalanx


def _is_task_worker(hosted):
    from ._task import _TASK_WORKER_CLASS
    return hosted[2] == _TASK_WORKER_CLASS


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
        return os.environ.get("PHALANX_JOB_ID") or _phalanx.cluster()[2]

    def get_node_id(self):
        """The id of the node this process runs on (None where no node of the cluster runs
        on this machine)."""
        node = os.environ.get("PHALANX_NODE_ID")
        if node:
            return node
        here = socket.gethostname()
        for n in _phalanx.nodes():
            if n["alive"] and n["hostname"] == here:
                return n["node_id"]
        return None

    def get_actor_id(self):
        """The id of the actor this process hosts; None in a driver or a task."""
        hosted = _phalanx.hosted_actor()
        return None if hosted is None or _is_task_worker(hosted) else hosted[0]

    def get_actor_name(self):
        actor_id = self.get_actor_id()
        return _phalanx.actor_info(actor_id).get("name") or None if actor_id else None

    def get_task_id(self):
        """The task running in this process (its worker's id), or None in a driver."""
        hosted = _phalanx.hosted_actor()
        return hosted[0] if hosted is not None and _is_task_worker(hosted) else None

    def is_canceled(self):
        """Whether the actor call or task this thread runs was cancelled (phalanx.cancel),
        for a plain method to stop early. RuntimeError in a driver or an async method (which
        gets asyncio.CancelledError instead), as in Ray."""
        from . import _worker
        return _worker.is_canceled()

    @property
    def was_current_actor_reconstructed(self):
        """Whether this actor is a restart of one that died (Ray's property)."""
        hosted = _phalanx.hosted_actor()
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
        return _phalanx.cluster()[3]

    def get_namespace(self):
        return self.namespace

    def get_accelerator_ids(self):
        return {"GPU": [str(g) for g in get_gpu_ids()]}


def get_runtime_context():
    from ._api import _ensure_init
    _ensure_init()
    return RuntimeContext()


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


def nodes():
    """Every node the cluster knows, dead ones included, in Ray's shape."""
    from ._api import _ensure_init
    _ensure_init()
    out = []
    for n in _phalanx.nodes():
        host, _, port = n["address"].rpartition(":")
        out.append({"NodeID": n["node_id"], "Alive": n["alive"],
                    "NodeManagerAddress": host.strip("[]"), "NodeManagerPort": int(port or 0),
                    "NodeManagerHostname": n["hostname"], "IsHead": n["is_head"],
                    "Resources": dict(n["resources"]) if n["alive"] else {},
                    # What its object store holds, as its last heartbeat said.
                    "ObjectStore": dict(n["object_store"])})
    return out


def _sum(field):
    from ._api import _ensure_init
    _ensure_init()
    total = {}
    for n in _phalanx.nodes():
        if n["alive"]:
            for k, v in n[field].items():
                total[k] = total.get(k, 0.0) + v
    return total


def cluster_resources():
    """The resources of the cluster's live nodes, summed."""
    return _sum("resources")


def available_resources():
    """What the live nodes have free now, summed."""
    return {k: v for k, v in _sum("available").items() if v > 0}
