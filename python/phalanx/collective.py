"""Collective groups on numpy arrays and torch CPU tensors, without copies (the C++ ops
run on the array's own memory): allreduce, allgather, reduce_scatter, broadcast, barrier,
send/recv, in float32/float64/float16/bfloat16 (torch)/int32/int64.

Members rendezvous through the GCS per epoch; ``reconfigure(epoch, rank, world_size)`` forms
the group anew after a membership change and a member of an older epoch is refused. Ranks on
one machine go through shared memory, others over Gloo's TCP transport; NCCL on GPUs when
built. A peer that dies fails the others' call at once with ``CollectiveError`` naming it.

    from phalanx import collective
    g = collective.CollectiveGroup("grads")
    g.reconfigure(epoch=1, rank=rank, world_size=4)
    g.allreduce(array)                  # in place, sum
    g.allreduce(tensor, op="avg")

Ray's module-level style works too: ``init_collective_group(world_size, rank,
group_name="g")`` then ``allreduce(tensor, group_name="g")``.
"""

import os
import threading

from phalanx import _native

from .exceptions import CollectiveError  # noqa: F401

_OPS = ("sum", "prod", "min", "max", "avg")


def _default_host():
    node = os.environ.get("PHALANX_NODE_ADDRESS", "")
    return node.rsplit(":", 1)[0] if node else ""


class CollectiveGroup:
    """One member's view of a named group. Timeouts are seconds (None: the group's)."""

    def __init__(self, name, *, backend="gloo", timeout=30.0, host=None, shared_memory=True,
                 address=None, token=None):
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"backend={backend!r}: give 'gloo' (CPU) or 'nccl' (GPU)")
        # The GCS: ``address``, else this process's cluster (phalanx.init), else
        # $PHALANX_ADDRESS, else this machine's session.
        self._g = _native.CollectiveGroup(name, backend, address or "", token or "",
                                           host if host is not None else _default_host(),
                                           float(timeout), bool(shared_memory))

    @staticmethod
    def _t(timeout):
        return -1.0 if timeout is None else float(timeout)

    def reconfigure(self, epoch, rank, world_size, *, timeout=None):
        """Forms epoch ``epoch`` with this member as ``rank`` of ``world_size``."""
        self._g.reconfigure(int(epoch), int(rank), int(world_size), self._t(timeout))

    def allreduce(self, tensor, op="sum", *, timeout=None):
        if op not in _OPS:
            raise ValueError(f"op={op!r}: give one of {_OPS}")
        self._g.allreduce(tensor, op, self._t(timeout))
        return tensor

    def allgather(self, tensor, out, *, timeout=None):
        """``out`` holds world_size × tensor's elements (an array, or a list of world_size
        tensors shaped like ``tensor``, filled by copy)."""
        if isinstance(out, (list, tuple)):
            flat = _empty_like(tensor, len(out))
            self._g.allgather(tensor, flat, self._t(timeout))
            n = _numel(tensor)
            for i, o in enumerate(out):
                _copy_into(o, flat, i * n, n)
            return out
        self._g.allgather(tensor, out, self._t(timeout))
        return out

    def reduce_scatter(self, tensor, out, op="sum", *, timeout=None):
        """``tensor`` holds world_size × out's elements; rank r gets the reduced r-th slice."""
        self._g.reduce_scatter(tensor, out, op, self._t(timeout))
        return out

    def broadcast(self, tensor, root=0, *, timeout=None):
        self._g.broadcast(tensor, int(root), self._t(timeout))
        return tensor

    def barrier(self, *, timeout=None):
        self._g.barrier(self._t(timeout))

    def send(self, tensor, dst, *, timeout=None):
        self._g.send(tensor, int(dst), self._t(timeout))

    def recv(self, tensor, src, *, timeout=None):
        self._g.recv(tensor, int(src), self._t(timeout))
        return tensor

    def abort(self, reason="aborted"):
        """Ends a collective in flight (from any thread) with CollectiveError."""
        self._g.abort(reason)

    @property
    def rank(self):
        return self._g.rank

    @property
    def world_size(self):
        return self._g.world_size

    @property
    def epoch(self):
        return self._g.epoch

    @property
    def name(self):
        return self._g.name


def _numel(t):
    return t.numel() if hasattr(t, "numel") and callable(t.numel) else t.size


def _empty_like(t, copies):
    if hasattr(t, "new_empty"):
        return t.new_empty((copies * t.numel(),))
    import numpy as np
    return np.empty(copies * t.size, dtype=t.dtype)


def _copy_into(dst, flat, start, n):
    part = flat[start:start + n]
    if hasattr(dst, "copy_"):
        dst.copy_(part.reshape(dst.shape))
    else:
        dst[...] = part.reshape(dst.shape)


# ---- Ray-style module functions -------------------------------------------------------------

_groups = {}
_groups_lock = threading.Lock()


def init_collective_group(world_size, rank, backend="gloo", group_name="default", *, epoch=1,
                          timeout=30.0):
    g = CollectiveGroup(group_name, backend=backend, timeout=timeout)
    g.reconfigure(epoch, rank, world_size)
    with _groups_lock:
        _groups[group_name] = g
    return g


def _group(name):
    with _groups_lock:
        g = _groups.get(name)
    if g is None:
        raise ValueError(f"no collective group '{name}' in this process: call "
                         f"init_collective_group(world_size, rank, group_name='{name}') first")
    return g


def destroy_collective_group(group_name="default"):
    with _groups_lock:
        _groups.pop(group_name, None)


def get_rank(group_name="default"):
    return _group(group_name).rank


def get_collective_group_size(group_name="default"):
    return _group(group_name).world_size


def allreduce(tensor, group_name="default", op="sum"):
    return _group(group_name).allreduce(tensor, op)


def allgather(tensor_list, tensor, group_name="default"):
    return _group(group_name).allgather(tensor, tensor_list)


def reducescatter(tensor, tensor_list, group_name="default", op="sum"):
    """Ray's argument order: ``tensor`` receives this rank's slice of the reduced inputs."""
    import numpy as np
    g = _group(group_name)
    if hasattr(tensor, "new_empty"):
        import torch
        flat = torch.cat([t.reshape(-1) for t in tensor_list])
    else:
        flat = np.concatenate([np.asarray(t).reshape(-1) for t in tensor_list])
    return g.reduce_scatter(flat, tensor, op)


def broadcast(tensor, src_rank=0, group_name="default"):
    return _group(group_name).broadcast(tensor, src_rank)


def barrier(group_name="default"):
    _group(group_name).barrier()


def send(tensor, dst_rank, group_name="default"):
    _group(group_name).send(tensor, dst_rank)


def recv(tensor, src_rank, group_name="default"):
    return _group(group_name).recv(tensor, src_rank)
