"""Inside train_loop: the rank's context, its reports and checkpoints, its process group, and the model's data parallelism (Ray Train's train.get_context, report, prepare_model)."""

import os
import sys
import shutil
from ._config import Checkpoint


from phalanx import _native

from ._runtime import RUNTIME


# ---- inside train_loop ----------------------------------------------------------------------

class TrainContext:
    """Ray Train's: this worker's place in the group of the running loop's epoch."""

    def __init__(self, rank, world_size, epoch, job_id, local_rank=0, local_world_size=1,
                 node_rank=0):
        self.rank = rank
        self.world_size = world_size
        self.epoch = epoch          # the collective group's epoch (one per membership)
        self.job_id = job_id
        self.local_rank = local_rank
        self.local_world_size = local_world_size
        self.node_rank = node_rank

    def get_world_rank(self):
        return self.rank

    def get_world_size(self):
        return self.world_size

    def get_local_rank(self):
        return self.local_rank

    def get_local_world_size(self):
        return self.local_world_size

    def get_node_rank(self):
        return self.node_rank

    def get_experiment_name(self):
        return self.job_id

    def __repr__(self):
        return (f"TrainContext(rank={self.rank}, world_size={self.world_size}, "
                f"local_rank={self.local_rank}, local_world_size={self.local_world_size}, "
                f"node_rank={self.node_rank}, epoch={self.epoch}, job_id={self.job_id!r})")


def get_context():
    """Rank, world size, local rank, local world size, node rank and group epoch of this
    worker (in ``train_loop``: those of the membership the running loop started with)."""
    epoch, rank, world = RUNTIME.loop_membership()
    return TrainContext(rank, world, epoch, RUNTIME.job_id, RUNTIME.local_rank,
                        RUNTIME.local_world, RUNTIME.node_rank)


def on_resize(callback):
    """Calls ``callback()`` after ``State.restore()`` loads the committed state at a
    membership change (Horovod's reset callbacks): re-derive there whatever depends on the
    world size, e.g. ``for g in opt.param_groups: g["lr"] = base_lr * get_context().
    world_size`` (the restored optimizer holds the learning rate of the old world size).
    Register it in ``train_loop`` before ``restore()``; it holds for this run of the loop."""
    if not callable(callback):
        raise TypeError("on_resize takes a function of no arguments")
    RUNTIME.reset_callbacks.append(callback)


def get_device():
    """The torch device this worker trains on: its GPU with ``ScalingConfig(use_gpu=True)``
    (each worker sees one, CUDA_VISIBLE_DEVICES set to its local rank), else the CPU."""
    import torch
    if RUNTIME.options.get("use_gpu") and torch.cuda.is_available():
        return torch.device("cuda", 0)
    return torch.device("cpu")


def report(metrics, checkpoint=None):
    """Records this step's metrics (a dict; ``loss`` shows in the job status). The last dict
    reported by rank 0 becomes ``Result.metrics``.

    ``checkpoint`` (Ray's ``Checkpoint.from_directory(d)``): rank 0's is copied into the
    run's storage (``RunConfig(storage_path=..., name=...)``, as ``checkpoint_000003``), and
    becomes ``train.get_checkpoint()`` and ``Result.checkpoint``; only the newest
    ``CheckpointConfig(num_to_keep=)`` are kept. Other ranks' checkpoints are not kept (their
    state is rank 0's under data parallelism). On several machines give a storage path every
    machine sees, as with Ray."""
    if not isinstance(metrics, dict):
        raise TypeError("train.report takes a dict of metrics")
    RUNTIME.last_report = dict(metrics)
    if checkpoint is None:
        return
    if not isinstance(checkpoint, Checkpoint) or not os.path.isdir(checkpoint.path):
        raise TypeError("train.report(checkpoint=...) takes train.Checkpoint.from_directory(d) "
                        "of a directory that exists")
    if RUNTIME.loop_membership()[1] != 0:
        return
    storage = RUNTIME.options.get("storage")
    if not storage:
        raise ValueError("train.report(checkpoint=...) needs somewhere to keep it: give "
                         "RunConfig(storage_path=...) (default ~/phalanx_results) a name")
    index_key = f"{RUNTIME.job_id}/ray_checkpoint_index"
    raw = _native.kv_get("elastic", index_key)
    index = int(raw) + 1 if raw else 0
    target = os.path.join(storage, f"checkpoint_{index:06d}")
    staging = target + ".tmp"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(checkpoint.path, staging)
    os.replace(staging, target)  # a reader never sees half a checkpoint
    _native.kv_put("elastic", index_key, str(index).encode(), True)
    _native.kv_put("elastic", f"{RUNTIME.job_id}/ray_checkpoint", target.encode(), True)
    keep = RUNTIME.options.get("num_to_keep")
    if keep:
        for old in range(index - keep, -1, -1):
            path = os.path.join(storage, f"checkpoint_{old:06d}")
            if not os.path.isdir(path):
                break
            shutil.rmtree(path, ignore_errors=True)


def get_checkpoint():
    """Ray's: the newest checkpoint this run reported (``report(checkpoint=...)``), else the
    trainer's ``resume_from_checkpoint``, else None. A loop that resumes from it is what Ray
    users write; with Phalanx the ranks also keep their committed ``State`` in memory, and a
    resize rolls back only to the last ``state.commit()``."""
    pointer = _native.kv_get("elastic", f"{RUNTIME.job_id}/ray_checkpoint")
    if pointer and os.path.isdir(pointer.decode()):
        return Checkpoint.from_directory(pointer.decode())
    resume = RUNTIME.options.get("resume_from_checkpoint")
    if resume and os.path.isdir(resume):
        return Checkpoint.from_directory(resume)
    return None


def torch_process_group(backend=None):
    """This epoch's torch.distributed process group (formed on first use per epoch)."""
    return RUNTIME.torch_process_group(backend)


def collective_group():
    """phalanx's collective group of this epoch (phalanx.collective.CollectiveGroup): for
    collectives of your own in ``train_loop`` (a dead peer fails them at once, where a
    torch.distributed call would wait for the group's timeout)."""
    return RUNTIME.collective_group()


def allreduce(tensor, op="sum"):
    """Allreduces a numpy array or CPU tensor in place over this epoch's ranks."""
    return RUNTIME.collective_group().allreduce(tensor, op)


class TorchConfig:
    """Ray Train's: the torch.distributed backend the workers' default group runs on.
    ``backend="phalanx"`` (the default): phalanx's own, over the group the job's controller
    forms, aborts at once on a lost peer and re-forms in place; ``"gloo"`` or ``"nccl"``:
    torch's own, formed again through a TCPStore at each membership change (their ops wait
    out ``timeout_s`` on a peer that stopped or whose host vanished, unless a socket closes).
    ``backend=None`` (Ray's default) is ``"phalanx"``; ``init_method`` (Ray's "env" or "tcp")
    is taken and has nothing to choose: the group always forms from what the job's
    controller says."""

    def __init__(self, backend=None, init_method="env", timeout_s=1800):
        if backend is None:
            backend = "phalanx"
        if backend not in ("phalanx", "gloo", "nccl"):
            raise ValueError(f"TorchConfig(backend={backend!r}): give 'phalanx' (the default), "
                             f"'gloo' or 'nccl'")
        if init_method not in ("env", "tcp"):
            raise ValueError(f"TorchConfig(init_method={init_method!r}): give 'env' or 'tcp'")
        self.backend = backend
        self.init_method = init_method
        self.timeout_s = timeout_s


def prepare_model(model, *, parallel_strategy="ddp", parallel_strategy_kwargs=None,
                  move_to_device=True, backend=None):
    """Ray Train's: makes ``model`` data parallel over this epoch's ranks. Call it inside
    ``train_loop``: after a membership change the loop runs again and wraps the model for the
    new group.

    ``parallel_strategy="ddp"`` (the default): torch's DistributedDataParallel over the loop's
    default torch.distributed group (the ``phalanx`` backend unless ``TorchConfig`` says
    otherwise), so gradients are averaged bucket by bucket while backward runs; when a peer
    is lost, backward fails at once with an error naming it. ``parallel_strategy_kwargs`` go
    to DDP. The model moves to ``get_device()`` first (``move_to_device=False``: it stays).
    ``parallel_strategy=None``: the model only moved. ``"phalanx"``: phalanx's
    ``DataParallel``, which averages every gradient after backward ends through phalanx's
    group, with no torch.distributed group at all.

    ``backend="nccl"`` (older releases): DDP on the GPU over this epoch's torch NCCL group.

    After ``train.torch.accelerate(amp=True)`` the model's forward runs under CUDA autocast."""
    import torch
    from ._torch_utils import autocast_model
    if backend not in (None, "gloo", "nccl"):
        raise ValueError(f"backend={backend!r}: give None, 'gloo' or 'nccl' (or leave it out "
                         f"and choose the backend with TorchConfig)")
    if parallel_strategy not in ("ddp", None, "phalanx"):
        raise ValueError(f"parallel_strategy={parallel_strategy!r}: give 'ddp' (the default), "
                         f"None (no wrapping) or 'phalanx' (phalanx's DataParallel)")
    if backend is None and parallel_strategy != "phalanx":
        device = get_device()
        if move_to_device:
            model = model.to(device)
        model = autocast_model(model)
        if parallel_strategy is None:
            return model
        from torch.nn.parallel import DistributedDataParallel
        pg = torch_process_group()
        kwargs = dict(parallel_strategy_kwargs or {})
        if device.type == "cuda":
            kwargs.setdefault("device_ids", [device.index or 0])
        return DistributedDataParallel(model, process_group=pg, **kwargs)
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise RuntimeError("prepare_model(backend=\"nccl\"): CUDA is not available on "
                               "this rank; leave backend out to train on the CPU")
        from torch.nn.parallel import DistributedDataParallel
        torch_process_group(backend)
        device = torch.cuda.current_device()
        return DistributedDataParallel(autocast_model(model.to(device)), device_ids=[device])
    from ._data_parallel import DataParallel
    return DataParallel(autocast_model(model), RUNTIME.collective_group())


def _unwrap(obj):
    """The model inside DistributedDataParallel or DataParallel (their state_dict keys start
    with "module."; a State's snapshot holds the model's own)."""
    dp = sys.modules.get(f"{__name__}._data_parallel")
    if type(obj).__name__ == "DistributedDataParallel" or (
            dp is not None and isinstance(obj, dp.DataParallel)):
        return obj.module
    return obj
