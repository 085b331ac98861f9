"""torch.distributed on Phalanx's collective groups: the ``phalanx`` backend of c10d.

Inside ``phalanx.train``'s ``train_loop`` nothing is needed: torch.distributed is initialised
on this backend before the loop runs, so ``DistributedDataParallel(model)``,
``ZeroRedundancyOptimizer`` and ``dist.all_reduce(t)`` work as in a torchrun or Ray Train
script. When the job's controller aborts the group (a peer died, hung, or its host vanished),
every pending torch op fails at once with an error naming the lost rank; the next epoch
installs a new default group over the re-formed collective group, without a TCPStore and
without ``destroy_process_group()``.

Elsewhere, on a Phalanx cluster (``phalanx.init()`` or ``$PHALANX_ADDRESS``)::

    import torch.distributed as dist
    import phalanx.distributed          # registers the backend
    dist.init_process_group("phalanx", init_method="env://")   # or store=..., rank=, world_size=

The store of ``init_process_group`` is used once, to agree on the group's name; the ranks
then meet through the GCS. Ops: allreduce (SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR),
broadcast, reduce, allgather, ``_allgather_base``, gather, scatter, reduce_scatter,
``_reduce_scatter_base``, alltoall, alltoall_base, barrier, send/recv; every dtype torch
has but complex (``torch.view_as_real`` first, as torch's own all_reduce does).
"""

import secrets
import threading
from datetime import timedelta

BACKEND = "phalanx"

_lock = threading.Lock()


def _torch_module():
    try:
        from phalanx import _native_torch
    except ImportError as e:
        raise ImportError(
            "the phalanx torch.distributed backend is not built: install Debian's libtorch-dev "
            "(scripts/setup.sh does) and build again") from e
    return _native_torch


def register():
    """Registers the ``phalanx`` backend with torch.distributed (once per process)."""
    import torch.distributed as dist
    with _lock:
        if BACKEND.upper() not in dist.Backend._plugins:
            _torch_module()
            dist.Backend.register_backend(BACKEND, _create)


def process_group(group, timeout=None):
    """A torch.distributed ProcessGroup over ``group`` (a phalanx.collective.CollectiveGroup)
    as formed now: its epoch, rank and world size. ``timeout``: seconds for each op (None:
    the group's own)."""
    register()
    return _torch_module().ProcessGroupPhalanx(group._g._capsule(),
                                               float(timeout or 0.0))


def set_default_group(pg):
    """Makes ``pg`` torch.distributed's default group (``dist.group.WORLD``), replacing the
    one there without destroying it: the previous epoch's group may still be held by a loop
    that is unwinding, and its ops fail on their own (naming the newer epoch)."""
    import torch.distributed.distributed_c10d as c10d
    old = c10d.GroupMember.WORLD
    if old is not None:
        for table in (c10d._pg_map, c10d._pg_names, c10d._pg_group_ranks):
            table.pop(old, None)
    c10d._update_default_pg(pg)
    backend = c10d.Backend(BACKEND)
    c10d._pg_map[pg] = (backend, None)
    c10d._pg_names[pg] = ""
    c10d._pg_group_ranks[pg] = {i: i for i in range(pg.size())}
    c10d._backend = backend
    return pg


def is_phalanx_group(pg):
    return type(pg).__name__ == "ProcessGroupPhalanx"


def _create(store, rank, world_size, timeout):
    """torch's creator for ``init_process_group("phalanx", ...)``: rank 0 names a new
    collective group in the store, every rank forms its epoch 1 through the GCS."""
    from .collective import CollectiveGroup
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    key = "phalanx/group_name"
    if rank == 0:
        store.set(key, f"torch-{secrets.token_hex(8)}")
    name = store.get(key).decode()
    group = CollectiveGroup(name, timeout=seconds)
    group.reconfigure(1, rank, world_size)
    return process_group(group, seconds)
