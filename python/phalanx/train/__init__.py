"""Elastic training in Python, modelled on Ray Train and Horovod Elastic.

    from phalanx import train

    def train_loop(config):
        model = train.prepare_model(Net())          # data parallel over this epoch's ranks
        opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
        state = train.State(model=model, optimizer=opt, epoch=0)
        state.restore()                             # the newest committed state, if any
        for epoch in range(state.epoch, config["epochs"]):
            for batch in train.ElasticSampler(len(data), 32, epoch):
                ...                                 # forward, backward, opt.step()
                state.commit()                      # a step boundary: cheap, every step
                train.report({"loss": loss.item()})
            state.epoch = epoch + 1
            state.commit()

    result = train.ElasticTrainer(
        train_loop, train_loop_config={"lr": 0.1, "epochs": 5},
        scaling_config=train.ScalingConfig(num_workers=(1, 4), initial_workers=3,
                                           resources_per_worker={"CPU": 1, "memory": 2 << 30}),
        run_config=train.RunConfig(name="digits", storage_path="/shared/runs",
                                   failure_config=train.FailureConfig(max_failures=5),
                                   checkpoint_config=train.CheckpointConfig(
                                       checkpoint_frequency=50))).fit()
    print(result.metrics, result.checkpoint, result.error)

The names are Ray Train's (``TorchTrainer`` is another name for ``ElasticTrainer``), so a Ray
Train script moves over by changing its imports.

Each worker is an actor of the job; the job's elastic controller (the same one as for C++
jobs and `phalanx job submit -f`) places them, reacts to deaths, OOM kills (respawned with
more memory), node changes and scale requests, and re-forms the group. After a membership
change ``train_loop`` runs again on every rank and ``state.restore()`` brings back the last
committed step: survivors their own, newcomers a survivor's by broadcast, and only when every
rank was lost the last checkpoint on disk.
"""

import json
import math
import os
import pickle
import secrets
import sys
import shutil
import tempfile
import time
import warnings
from contextlib import contextmanager

import cloudpickle

import _phalanx

from .._api import _ensure_init
from .._serialization import dumps_function
from ..exceptions import PhalanxError
from . import _zero
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
    raw = _phalanx.kv_get("elastic", index_key)
    index = int(raw) + 1 if raw else 0
    target = os.path.join(storage, f"checkpoint_{index:06d}")
    staging = target + ".tmp"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(checkpoint.path, staging)
    os.replace(staging, target)  # a reader never sees half a checkpoint
    _phalanx.kv_put("elastic", index_key, str(index).encode(), True)
    _phalanx.kv_put("elastic", f"{RUNTIME.job_id}/ray_checkpoint", target.encode(), True)
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
    pointer = _phalanx.kv_get("elastic", f"{RUNTIME.job_id}/ray_checkpoint")
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
    out ``timeout_s`` on a peer that stopped or whose host vanished, unless a socket closes)."""

    def __init__(self, backend="phalanx", timeout_s=1800):
        if backend not in ("phalanx", "gloo", "nccl"):
            raise ValueError(f"TorchConfig(backend={backend!r}): give 'phalanx' (the default), "
                             f"'gloo' or 'nccl'")
        self.backend = backend
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

    ``backend="nccl"`` (older releases): DDP on the GPU over this epoch's torch NCCL group."""
    import torch
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
        return DistributedDataParallel(model.to(device), device_ids=[device])
    from ._data_parallel import DataParallel
    return DataParallel(model, RUNTIME.collective_group())


def _unwrap(obj):
    """The model inside DistributedDataParallel or DataParallel (their state_dict keys start
    with "module."; a State's snapshot holds the model's own)."""
    dp = sys.modules.get(f"{__name__}._data_parallel")
    if type(obj).__name__ == "DistributedDataParallel" or (
            dp is not None and isinstance(obj, dp.DataParallel)):
        return obj.module
    return obj


def __getattr__(name):
    # DataParallel's module imports torch: loaded on first use, not with phalanx.train.
    if name == "DataParallel":
        from ._data_parallel import DataParallel
        return DataParallel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class State:
    """The training state of one rank: objects with ``state_dict()`` (model, optimizer,
    scheduler) and plain values (``state.epoch``). ``commit()`` snapshots them in this process
    (a step boundary: call it after every optimizer step); ``restore()`` fills them from the
    newest committed state in the group, or leaves them as initialised.

    torch's ZeroRedundancyOptimizer (ZeRO-1) may be one of them: each rank commits its own
    shard of the optimizer state, which gets a copy in another rank's memory (on another host
    where there is one), and ``restore()`` reshards the whole state to the new world size
    (a collective: every rank calls it at the same place, as the loop's top)."""

    def __init__(self, model=None, optimizer=None, **values):
        objects = {}
        if model is not None:
            objects["model"] = model
        if optimizer is not None:
            objects["optimizer"] = optimizer
        plain = {}
        for k, v in values.items():
            if hasattr(v, "state_dict") and hasattr(v, "load_state_dict"):
                objects[k] = v
            else:
                plain[k] = v
        object.__setattr__(self, "_objects", objects)
        object.__setattr__(self, "_values", plain)
        object.__setattr__(self, "commits", 0)

    def __getattr__(self, name):
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        objects = object.__getattribute__(self, "_objects")
        if name in objects:
            return objects[name]
        raise AttributeError(name)

    def __setattr__(self, name, value):
        if name in self._objects:
            self._objects[name] = value
        else:
            self._values[name] = value

    def _zero_optimizers(self):
        """The ZeroRedundancyOptimizers of this state, by name."""
        return {k: v for k, v in self._objects.items() if _zero.is_zero(v)}

    def _snapshot(self):
        """The state as of now: a copy (tensors copied to host memory, the rest deep-copied),
        pickled later by the runtime off the loop's path (RUNTIME.save_state). A
        ZeroRedundancyOptimizer gives this rank's shard of its state (its state_dict() would
        be a collective), kept apart under "zero": the runtime copies it to another rank."""
        zero = self._zero_optimizers()
        snapshot = {
            "objects": {k: _unwrap(v).state_dict() for k, v in self._objects.items()
                        if k not in zero},
            "values": self._values,
            "progress": RUNTIME.progress,
            "report": RUNTIME.last_report,
        }
        try:
            copied = _copy_state(snapshot)
        except Exception:  # noqa: BLE001 - something deepcopy cannot copy: through pickle
            copied = pickle.loads(pickle.dumps(snapshot, protocol=5))
        if zero:
            copied["zero"] = {k: _copy_state(_zero.local_shard(v)) for k, v in zero.items()}
        return copied

    def commit(self):
        object.__setattr__(self, "commits", self.commits + 1)
        RUNTIME.commit(self._snapshot)

    def restore(self):
        """True if a committed state was loaded. Then the reset callbacks run (``on_resize``,
        ``register_reset_callbacks``), after the load: a learning rate scaled by the world
        size is set for the new one, not the one the state was committed at."""
        source = RUNTIME.restore_from
        if not source:
            return False
        saved = pickle.loads(source)
        for k, sd in saved["objects"].items():
            if k in self._objects:
                _unwrap(self._objects[k]).load_state_dict(sd)
        zero = self._zero_optimizers()
        if zero:
            if saved.get("zero_key"):
                # A collective: every rank restores the same commit here.
                RUNTIME.zero_restore(saved["zero_key"], zero)
            else:
                print(f"phalanx.train: the committed state has no state of "
                      f"{', '.join(zero)} (a checkpoint from disk, or one committed without "
                      f"it): the optimizer starts afresh", file=sys.stderr)
        self._values.update(saved["values"])
        RUNTIME.progress = dict(saved["progress"])
        RUNTIME.last_report = dict(saved.get("report", {}))
        for callback in list(RUNTIME.reset_callbacks):
            callback()
        return True

    def register_reset_callbacks(self, callbacks):
        """Horovod's: functions called (no arguments) after ``restore()`` loaded a committed
        state, i.e. after every membership change."""
        if callable(callbacks):
            callbacks = [callbacks]
        for c in callbacks:
            on_resize(c)


_IMMUTABLE = frozenset((int, float, bool, str, bytes, type(None)))


def _copy_state(obj):
    """A copy of a state_dict-like tree that later steps cannot change: tensors copied to
    host memory (as pickling them would), containers rebuilt, anything else deep-copied."""
    import copy
    if type(obj) in _IMMUTABLE:  # most leaves of a state_dict: no copy.deepcopy call
        return obj
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _HostTensor.of(obj)
    if isinstance(obj, dict):
        return type(obj)((k, _copy_state(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        return type(obj)(_copy_state(v) for v in obj)
    return copy.deepcopy(obj)


class _HostTensor:
    """A tensor of a snapshot, copied to host memory as a numpy array where numpy has its
    dtype. The snapshot is pickled on the host's thread while the loop runs on, and both
    need the GIL: arrays pickle in one copy (19 µs for a 17k-parameter model and SGD here, where
    the tensors' own pickling, through torch.save, took 140 µs). It unpickles as a tensor."""

    __slots__ = ("array",)

    @staticmethod
    def of(tensor):
        copied = tensor.detach().to("cpu", copy=True)
        try:
            array = copied.numpy()  # shares the copy's memory
        except (TypeError, RuntimeError):  # bfloat16, sparse, a conjugate view: as a tensor
            return copied
        wrapped = _HostTensor()
        wrapped.array = array
        return wrapped

    def __reduce__(self):
        return _tensor_from_array, (self.array,)


def _tensor_from_array(array):
    import torch
    return torch.from_numpy(array)


class ElasticSampler:
    """This rank's batches (``batch_size`` indices each) over the samples of data epoch
    ``epoch`` that no rank has consumed yet. Every step takes the next world_size ×
    batch_size samples of a shuffled order (seeded by ``seed`` and ``epoch``) and splits them
    among the ranks; its progress is part of ``State``, so after a resize the remaining
    samples are split among the new ranks and each sample is used exactly once per epoch."""

    def __init__(self, num_samples, batch_size, epoch=0, *, shuffle=True, seed=0):
        if num_samples <= 0 or batch_size <= 0:
            raise ValueError("num_samples and batch_size must be > 0")
        self.num_samples = int(num_samples)
        self.batch_size = int(batch_size)
        self.epoch = int(epoch)
        self.shuffle = shuffle
        self.seed = seed

    def _order(self):
        import numpy as np
        if not self.shuffle:
            return np.arange(self.num_samples)
        return np.random.RandomState(self.seed * 100003 + self.epoch).permutation(self.num_samples)

    def __iter__(self):
        order = self._order()
        while True:
            consumed = RUNTIME.progress.get(self.epoch, 0)
            if consumed >= self.num_samples:
                return
            world, rank = RUNTIME.world, RUNTIME.rank
            take = min(world * self.batch_size, self.num_samples - consumed)
            lo = consumed + take * rank // world
            hi = consumed + take * (rank + 1) // world
            RUNTIME.progress[self.epoch] = consumed + take
            yield order[lo:hi].tolist()

    def __len__(self):
        left = self.num_samples - RUNTIME.progress.get(self.epoch, 0)
        per_step = RUNTIME.world * self.batch_size
        return max(0, (left + per_step - 1) // per_step)


class _ElasticBatchSampler:
    """prepare_data_loader's batch sampler: each batch is this rank's share of the next
    world_size × batch_size samples of the data epoch that no rank has used yet (the loop's
    committed progress, part of ``State``), so after a resize the rest of the epoch is split
    among the new ranks and each sample is used once per epoch. Without ``set_epoch`` an
    iteration takes the first data epoch not used up."""

    def __init__(self, num_samples, batch_size, shuffle, drop_last, seed=0):
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.epoch = None

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def _current_epoch(self):
        if self.epoch is not None:
            return self.epoch
        e = 0
        while RUNTIME.progress.get(e, 0) >= self.num_samples:
            e += 1
        return e

    def __iter__(self):
        epoch = self._current_epoch()
        order = ElasticSampler(self.num_samples, self.batch_size, epoch, shuffle=self.shuffle,
                               seed=self.seed)._order()
        while True:
            consumed = RUNTIME.progress.get(epoch, 0)
            if consumed >= self.num_samples:
                break
            world, rank = RUNTIME.world, RUNTIME.rank
            take = min(world * self.batch_size, self.num_samples - consumed)
            RUNTIME.progress[epoch] = consumed + take
            if self.drop_last and take < world * self.batch_size:
                break  # every rank drops the same short last batch
            yield order[consumed + take * rank // world:
                        consumed + take * (rank + 1) // world].tolist()
        self.epoch = None  # the next iteration takes the next data epoch

    def __len__(self):
        return len(ElasticSampler(self.num_samples, self.batch_size, self._current_epoch()))


class _DeviceLoader:
    """A data loader whose batches move to ``device`` (Ray's prepare_data_loader)."""

    def __init__(self, loader, device):
        self.loader = loader
        self.device = device
        self.batch_sampler = loader.batch_sampler
        self.sampler = loader.batch_sampler  # set_epoch, as on a DistributedSampler
        self.dataset = loader.dataset

    def _move(self, batch):
        import torch
        if isinstance(batch, torch.Tensor):
            return batch.to(self.device)
        if isinstance(batch, (list, tuple)):
            return type(batch)(self._move(b) for b in batch)
        if isinstance(batch, dict):
            return {k: self._move(v) for k, v in batch.items()}
        return batch

    def __iter__(self):
        for batch in self.loader:
            yield self._move(batch)

    def __len__(self):
        return len(self.loader)


def prepare_data_loader(data_loader, add_dist_sampler=True, move_to_device=True, seed=0):
    """Ray Train's: ``data_loader`` (a torch DataLoader over a map-style dataset) with each
    rank taking its share of every batch, so that each sample is used once per epoch across
    the ranks, also through resizes (the progress is committed with ``State``), and batches
    moved to ``get_device()``. ``shuffle`` is taken from the loader's sampler (a
    RandomSampler shuffles, with ``seed`` and the epoch); ``sampler.set_epoch(e)`` works as on
    torch's DistributedSampler."""
    import torch
    from torch.utils.data import DataLoader, RandomSampler
    if not isinstance(data_loader, DataLoader):
        raise TypeError("prepare_data_loader takes a torch.utils.data.DataLoader")
    loader = data_loader
    if add_dist_sampler:
        if data_loader.batch_size is None:
            raise ValueError("prepare_data_loader: the DataLoader has no batch_size (it was "
                             "given a batch_sampler): give batch_size= instead")
        shuffle = isinstance(data_loader.sampler, RandomSampler)
        batches = _ElasticBatchSampler(len(data_loader.dataset), data_loader.batch_size,
                                       shuffle, data_loader.drop_last, seed)
        loader = DataLoader(data_loader.dataset, batch_sampler=batches,
                            num_workers=data_loader.num_workers,
                            collate_fn=data_loader.collate_fn,
                            pin_memory=data_loader.pin_memory,
                            worker_init_fn=data_loader.worker_init_fn)
    device = get_device() if move_to_device else torch.device("cpu")
    return _DeviceLoader(loader, device)


# ---- the driver side ------------------------------------------------------------------------

class ScalingConfig:
    """Ray Train's: ``num_workers``: a fixed count or ``(min, max)`` (elastic);
    ``initial_workers``: how many to start with (default: max); ``resources_per_worker``: e.g.
    ``{"CPU": 1, "memory": 2 << 30}`` (memory is a limit; "memory" also takes "2Gi");
    ``use_gpu``: one GPU per worker unless ``resources_per_worker`` says otherwise;
    ``placement_strategy``: PACK (default), SPREAD, STRICT_PACK or STRICT_SPREAD."""

    def __init__(self, num_workers=1, initial_workers=None, resources_per_worker=None,
                 use_gpu=False, placement_strategy="PACK"):
        if isinstance(num_workers, int):
            lo = hi = num_workers
        else:
            lo, hi = num_workers
        if lo < 1 or hi < lo:
            raise ValueError(f"num_workers={num_workers!r}: give n >= 1 or (min, max) with "
                             f"1 <= min <= max")
        initial = hi if initial_workers is None else initial_workers
        if not lo <= initial <= hi:
            raise ValueError(f"initial_workers={initial} must be within num_workers "
                             f"({lo}..{hi})")
        if placement_strategy not in _PLACEMENT_STRATEGIES:
            raise ValueError(f"placement_strategy={placement_strategy!r}: give one of "
                             f"{', '.join(_PLACEMENT_STRATEGIES)}")
        self.min_workers, self.max_workers, self.initial_workers = lo, hi, initial
        self.num_workers = num_workers
        self.resources_per_worker = dict(resources_per_worker or {"CPU": 1})
        memory = self.resources_per_worker.get("memory")
        if isinstance(memory, float) and memory.is_integer():
            self.resources_per_worker["memory"] = int(memory)
        self.use_gpu = use_gpu
        if use_gpu:
            self.resources_per_worker.setdefault("GPU", 1)
        # Ray takes an amount of 0 as "none of it" (e.g. {"GPU": 0} with use_gpu=True).
        self.resources_per_worker = {k: v for k, v in self.resources_per_worker.items()
                                     if v != 0}
        self.placement_strategy = placement_strategy


_PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")

# A restart budget that never runs out: what max_failures=-1 means (Ray's "retry forever").
_UNLIMITED_FAILURES = 1 << 30


class FailureConfig:
    """Ray Train's: ``max_failures``: respawns allowed within ``window_s`` seconds (-1: no
    limit; 0: the first failure fails the job). Beyond Ray's: ``policies``, the job spec's
    faultTolerantPolicy (first match wins, then the defaults: OOM → respawnLarger with twice
    the memory, node died → reschedule, exited → restart), e.g.
    ``[{"event": "oom", "action": "respawnLarger", "memoryGrowth": 2}]``; how long the job may
    stay below its minimum, when a step without progress is a hang (``hang_timeout_s``), when a
    rank that does not answer while its host is up is frozen (``hang_silent_s``; 0: never), and
    the straggler check; ``phase_timeouts``: each phase's bound in seconds (the spec's
    ``phases``), e.g. ``{"start": 300}`` for a setup that downloads a dataset: ``place``
    (the ranks' reservation; default ``below_min_timeout_s``), ``start`` (a new rank's setup,
    120), ``form`` (an epoch's rendezvous and rollback, 120), ``sync`` (sending the state to
    newcomers, 120), ``checkpoint`` (a save or a load, 120). A rank that holds a phase up past
    its bound is restarted as hung."""

    _PHASES = {"place": "placeSeconds", "start": "startSeconds", "form": "formSeconds",
               "sync": "syncSeconds", "checkpoint": "checkpointSeconds"}

    def __init__(self, max_failures=10, window_s=3600, policies=None, below_min_timeout_s=60,
                 hang_timeout_s=300, straggler_check=False, straggler_factor=2.0,
                 hang_silent_s=1, phase_timeouts=None):
        if not isinstance(max_failures, int) or max_failures < -1:
            raise ValueError(f"max_failures={max_failures!r}: give a whole number >= 0, or -1 "
                             f"for no limit")
        self.max_failures = max_failures
        self.window_s = window_s
        self.policies = list(policies or [])
        self.below_min_timeout_s = below_min_timeout_s
        self.hang_timeout_s = hang_timeout_s
        self.hang_silent_s = hang_silent_s
        self.straggler_check = straggler_check
        self.straggler_factor = straggler_factor
        self.phase_timeouts = dict(phase_timeouts or {})
        for phase in self.phase_timeouts:
            if phase not in self._PHASES:
                raise ValueError(f"phase_timeouts: unknown phase {phase!r}: use "
                                 f"{', '.join(self._PHASES)} (stepping is bounded by "
                                 f"hang_timeout_s)")

    def phases(self):
        """The spec's ``phases`` map."""
        return {self._PHASES[k]: v for k, v in self.phase_timeouts.items()}

    @property
    def restart_limit(self):
        return _UNLIMITED_FAILURES if self.max_failures == -1 else self.max_failures


class CheckpointConfig:
    """Ray Train's: ``checkpoint_frequency``: write the committed state every this many steps
    (0: never) under ``RunConfig(storage_path=..., name=...)``. A checkpoint is read back only
    when every rank is lost at once; any smaller loss heals from the survivors' memory.
    ``checkpoint_at_end=True``: also the final committed state, when the loop returns (Ray
    refuses it for function trainers; here the controller holds that state, so it writes it).
    ``num_to_keep``: how many of the newest checkpoints the loop reports
    (``train.report(metrics, checkpoint=...)``) are kept (None: all)."""

    def __init__(self, num_to_keep=None, checkpoint_frequency=0, checkpoint_at_end=None):
        if num_to_keep is not None and (isinstance(num_to_keep, bool) or
                                        not isinstance(num_to_keep, int) or num_to_keep < 1):
            raise ValueError(f"num_to_keep={num_to_keep!r}: give a whole number >= 1 of the "
                             f"newest checkpoints to keep, or None to keep them all")
        if not isinstance(checkpoint_frequency, int) or checkpoint_frequency < 0:
            raise ValueError(f"checkpoint_frequency={checkpoint_frequency!r}: give a whole "
                             f"number of steps >= 0 (0: no checkpoints)")
        if checkpoint_at_end is not None and not isinstance(checkpoint_at_end, bool):
            raise ValueError(f"checkpoint_at_end={checkpoint_at_end!r}: give True (write the "
                             f"final committed state when the loop ends) or False")
        self.num_to_keep = num_to_keep
        self.checkpoint_frequency = checkpoint_frequency
        self.checkpoint_at_end = checkpoint_at_end


class RunConfig:
    """Ray Train's: the run's ``name`` (the job's name), ``storage_path`` (checkpoints go to
    ``storage_path/name``; default ``~/phalanx_results``; on several machines give a shared
    file system, as with Ray), ``failure_config`` and ``checkpoint_config``."""

    def __init__(self, name=None, storage_path=None, failure_config=None,
                 checkpoint_config=None, verbose=True):
        self.name = name
        self.storage_path = storage_path
        self.failure_config = failure_config
        self.checkpoint_config = checkpoint_config
        self.verbose = verbose

    def storage_dir(self, name):
        """Where the run's checkpoints go: ``storage_path/name``."""
        root = self.storage_path or os.path.join(os.path.expanduser("~"), "phalanx_results")
        return os.path.join(os.path.abspath(os.fspath(root)), name)

    def checkpoint_dir(self, name):
        c = self.checkpoint_config
        if c is None or (c.checkpoint_frequency == 0 and not c.checkpoint_at_end):
            return None
        root = self.storage_path or os.path.join(os.path.expanduser("~"), "phalanx_results")
        return os.path.join(os.path.abspath(os.fspath(root)), name)


class Checkpoint:
    """A checkpoint. Ray's: ``Checkpoint.from_directory(d)``, a directory of files the loop
    wrote (``report(metrics, checkpoint=...)``, ``get_checkpoint()``); ``path``,
    ``to_directory()``, ``as_directory()``. Or one the job's controller wrote: rank 0's
    committed state at ``step``, in one file at ``path`` (``"<step>\\n"`` then the pickled
    state), which ``load_state()`` gives as a dict: each ``State`` object's state_dict by name
    ("model", "optimizer", ...) and its plain values."""

    def __init__(self, path, step=None):
        self.path = path
        self.step = step

    @classmethod
    def from_directory(cls, path):
        return cls(os.path.abspath(os.fspath(path)))

    @property
    def is_directory(self):
        return os.path.isdir(self.path)

    def load_state(self):
        if self.is_directory:
            raise ValueError(f"{self!r} is a directory of your own files: read them with "
                             f"as_directory()")
        with open(self.path, "rb") as f:
            header, _, payload = f.read().partition(b"\n")
        saved = pickle.loads(payload)
        state = dict(saved.get("objects", {}))
        state.update(saved.get("values", {}))
        return state

    def to_directory(self, path=None):
        """Copies the checkpoint into ``path`` (a new temporary directory by default) and
        returns the directory."""
        path = path or tempfile.mkdtemp(prefix="phalanx-checkpoint-")
        os.makedirs(path, exist_ok=True)
        if self.is_directory:
            shutil.copytree(self.path, path, dirs_exist_ok=True)
        else:
            shutil.copy2(self.path, path)
        return path

    @contextmanager
    def as_directory(self):
        """A directory holding the checkpoint's files, for the ``with`` block."""
        yield self.path if self.is_directory else os.path.dirname(os.path.abspath(self.path))

    def __repr__(self):
        return f"Checkpoint(path={self.path!r}, step={self.step})"


class Result:
    """An elastic job's outcome, from its status as the C++ side reads it (_phalanx.JobStatus,
    the same as ``phalanx job status``)."""

    def __init__(self, status):
        self.job_id = status.job_id
        self.state = status.state
        self.message = status.message
        self.world_size = status.world_size
        self.steps = status.step
        self.steps_per_call = status.steps_per_call  # of the last call (ElasticTrainer)
        self.restarts = status.restarts
        self.controller_actor_id = status.controller_actor_id
        results = status.results
        try:
            self.metrics = json.loads(results) if results else {}
        except ValueError:
            self.metrics = {"results": results}
        self.events = [{"time_ms": e.time_ms, "kind": e.kind, "message": e.message,
                        "world_size": e.world_size, "epoch": e.epoch} for e in status.events]
        self.conditions = [{"type": c.type, "reason": c.reason, "message": c.message,
                            "time_ms": c.time_ms} for c in status.conditions]
        self.ranks = [{"rank": m.rank, "actor_id": m.actor_id, "node_id": m.node_id,
                       "memory_bytes": m.memory_bytes} for m in status.ranks]
        # Each fault and how the job healed, as unix ms (0: not reached): fault → detected →
        # resumed (the survivors' next step) → full strength (the world size before it).
        self.recoveries = [{"kind": r.kind, "message": r.message, "fault_ms": r.fault_ms,
                            "detected_ms": r.detected_ms, "resumed_ms": r.resumed_ms,
                            "full_strength_ms": r.full_strength_ms,
                            "world_before": r.world_before, "world_during": r.world_during}
                           for r in status.recoveries]
        self.restarts_by_cause = dict(status.restarts_by_cause)
        self.fault_seconds = status.fault_seconds
        # Ray's: the error of a failed run (None otherwise), and the newest checkpoint.
        self.error = PhalanxError(self.message) if self.state == "FAILED" else None
        self.checkpoint = None
        pointer = _phalanx.kv_get("elastic", f"{self.job_id}/checkpoint")
        if pointer:
            step, _, path = pointer.decode().partition(" ")
            if path and os.path.exists(path):
                self.checkpoint = Checkpoint(path, int(step))
        # The loop's own (report(checkpoint=...)) come first, as in Ray.
        reported = _phalanx.kv_get("elastic", f"{self.job_id}/ray_checkpoint")
        if reported and os.path.isdir(reported.decode()):
            self.checkpoint = Checkpoint.from_directory(reported.decode())
        self.path = None  # where the checkpoints go (ElasticTrainer fills it in)

    def __repr__(self):
        return (f"Result(job_id={self.job_id!r}, state={self.state}, metrics={self.metrics}, "
                f"restarts={self.restarts}, world_size={self.world_size})")


class TrainingFailedError(PhalanxError):
    def __init__(self, result):
        super().__init__(f"elastic job {result.job_id} failed: {result.message}")
        self.result = result


def job_status(job_id):
    """The job's record (state, world size, events, ...) as a Result."""
    return Result(_phalanx.job_status(job_id))


def _names_in(code):
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names_in(const)
    return names


def _prestart_imports(given, train_loop):
    """The modules the nodes' prestarted workers import ahead for this job (the spec's
    ``preimports``): ``given`` if not None, else torch when the driver has imported it or
    ``train_loop`` names it."""
    if given is not None:
        if isinstance(given, str) or not all(isinstance(m, str) for m in given):
            raise TypeError("prestart_imports must be a list of module names, e.g. ['torch']")
        return list(given)
    code = getattr(train_loop, "__code__", None)
    # `import torch.distributed as dist` names "torch.distributed", not "torch".
    if "torch" in sys.modules or (code is not None and any(
            n == "torch" or n.startswith("torch.") for n in _names_in(code))):
        return ["torch"]
    return []


# The default of ElasticTrainer(step_call_ms=...): see its docstring.
PYTHON_STEP_CALL_MS = 100


class ElasticTrainer:
    """Runs ``train_loop(config)`` on every worker of an elastic job, as Ray Train's
    ``TorchTrainer``: ``ElasticTrainer(train_loop, train_loop_config=..., scaling_config=
    ScalingConfig(...), run_config=RunConfig(name=..., failure_config=FailureConfig(...),
    checkpoint_config=CheckpointConfig(...))).fit()``.

    ``prestart_imports``: modules that each node's prestarted workers import ahead (default:
    ``["torch"]`` when the driver has imported torch or ``train_loop`` names it; ``[]``: none).
    A rank that replaces a dead one then takes such a worker and is ready without paying for
    ``import torch``; each node keeps two of them while the job's ranks run there.

    ``step_call_ms``: the training each of the controller's calls to a rank covers (the
    spec's ``stepCallMs``; 0: one step per call). 100 ms by default, where a C++ job's is
    50: each call costs a Python loop about 1 ms on a busy host (the state's copy at the
    call's end, and the GIL handed to the host's thread and back), so 100 ms keeps that near
    1% at any step time. A failure redoes at most about two calls of work."""

    def __init__(self, train_loop=None, train_loop_config=None, *, scaling_config=None,
                 run_config=None, train_loop_per_worker=None, verbose=True, env=None,
                 prestart_imports=None, step_call_ms=PYTHON_STEP_CALL_MS, torch_config=None,
                 resume_from_checkpoint=None):
        if train_loop_per_worker is not None:
            if train_loop is not None:
                raise TypeError("give the training function once: as the first argument or "
                                "as train_loop_per_worker=")
            train_loop = train_loop_per_worker
        if not callable(train_loop):
            raise TypeError("train_loop must be a function taking the config dict")
        run_config = run_config or RunConfig()
        self.train_loop = train_loop
        self.train_loop_config = train_loop_config
        self.scaling = scaling_config or ScalingConfig()
        self.run_config = run_config
        self.failure = run_config.failure_config or FailureConfig()
        self.name = run_config.name or "train"
        self.checkpoint_dir = run_config.checkpoint_dir(self.name)
        self.checkpoint_interval = (run_config.checkpoint_config.checkpoint_frequency
                                    if self.checkpoint_dir else 0)
        self.checkpoint_at_end = bool(self.checkpoint_dir and
                                      run_config.checkpoint_config.checkpoint_at_end)
        self.verbose = verbose and run_config.verbose
        self.env = dict(env or {})
        self.prestart_imports = _prestart_imports(prestart_imports, train_loop)
        if isinstance(step_call_ms, bool) or not isinstance(step_call_ms, (int, float)) or \
                not 0 <= step_call_ms < math.inf:
            raise ValueError(f"step_call_ms={step_call_ms!r}: give milliseconds >= 0 (0: one "
                             f"step per call)")
        self.step_call_ms = step_call_ms
        if torch_config is not None and not isinstance(torch_config, TorchConfig):
            raise TypeError("torch_config must be a phalanx.train.TorchConfig")
        self.explicit_torch_config = torch_config is not None
        self.torch_config = torch_config or TorchConfig()
        if resume_from_checkpoint is not None and not isinstance(resume_from_checkpoint,
                                                                 Checkpoint):
            raise TypeError("resume_from_checkpoint must be a train.Checkpoint (e.g. "
                            "Checkpoint.from_directory(d), or a Result's .checkpoint)")
        self.resume_from_checkpoint = resume_from_checkpoint
        self.job_id = None

    def _spec(self, fn_key):
        """The job spec (a _phalanx.JobSpec): written in the spec's YAML form (JSON is YAML)
        and read by the C++ parser, the same as for ``phalanx job submit -f``; a bad value
        raises InvalidArgumentError naming the field and the fix."""
        s, f = self.scaling, self.failure
        spec = {
            "name": self.name,
            "trainer": "PythonTrainer",
            "language": "python",
            "replicas": s.initial_workers,
            "minReplicas": s.min_workers,
            "maxReplicas": s.max_workers,
            "resources": s.resources_per_worker,
            "placementStrategy": s.placement_strategy,
            "restartLimit": f.restart_limit,
            "restartTimeLimit": f.window_s,
            "failPolicy": {"belowMinTimeoutSeconds": f.below_min_timeout_s},
            "hang": {"timeoutSeconds": f.hang_timeout_s, "silentSeconds": f.hang_silent_s},
            "straggler": {"check": f.straggler_check, "factor": f.straggler_factor},
            "config": {"pyfn": fn_key},
            "stepCallMs": self.step_call_ms,
        }
        if self.prestart_imports:
            spec["preimports"] = self.prestart_imports
        if f.policies:
            spec["faultTolerantPolicy"] = f.policies
        if f.phase_timeouts:
            spec["phases"] = f.phases()
        if self.checkpoint_dir:
            spec["checkpoint"] = {"dir": self.checkpoint_dir,
                                  "intervalSteps": self.checkpoint_interval,
                                  "atEnd": self.checkpoint_at_end}
        spec.update(getattr(self, "_spec_extra", {}))  # phalanx run's (the nodes it may use)
        return _phalanx.parse_job_spec(json.dumps(spec))

    def submit(self):
        """Starts the job and returns its id (``fit`` waits for it)."""
        _ensure_init()
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        if "" in sys.path:
            paths.insert(0, os.getcwd())
        options = {"backend": self.torch_config.backend, "use_gpu": self.scaling.use_gpu,
                   # The loop uses torch: it names torch, or the driver imported it, or a
                   # TorchConfig was given.
                   "torch": self.explicit_torch_config or
                            "torch" in _prestart_imports(None, self.train_loop),
                   "storage": self.run_config.storage_dir(self.name),
                   "num_to_keep": getattr(self.run_config.checkpoint_config, "num_to_keep", None),
                   "resume_from_checkpoint": (self.resume_from_checkpoint.path
                                              if self.resume_from_checkpoint else None)}
        options.update(getattr(self, "_runtime_options", {}))  # phalanx run's
        inner = dumps_function(self.train_loop, self.train_loop_config, options,
                               what="train_loop")
        key = f"pyfn/{self.name}-{secrets.token_hex(6)}"
        _phalanx.kv_put("elastic", key, cloudpickle.dumps((paths, inner), protocol=5), True)
        self.job_id = _phalanx.submit_job(self._spec(key))
        return self.job_id

    def fit(self, timeout=None):
        """Runs the job to its end; returns its Result (raises TrainingFailedError if it
        failed). With ``verbose``, prints conditions and events as they come."""
        job_id = self.submit()
        if self.verbose:
            print(f"[phalanx.train] job {job_id} submitted", flush=True)
        deadline = None if timeout is None else time.time() + timeout
        shown_c = shown_e = 0
        started = time.time()
        warned = False
        log_offset = 0
        while True:
            status = _phalanx.job_status(job_id)
            if self.verbose:
                # The ranks' output, "(rank N) ..." per line, as Ray and torchrun print it.
                text, log_offset = _phalanx.job_log(job_id, log_offset)
                if text:
                    sys.stdout.write(text.decode(errors="replace"))
                    sys.stdout.flush()
            if not warned and status.step == 0 and any(
                    e.kind in ("rank_died", "hang", "step_failed", "scaling_out", "scaled_in")
                    or "(recovery)" in e.message for e in status.events):
                warned = True
                warnings.warn(_NO_COMMIT_WARNING.format(seconds=time.time() - started),
                              RuntimeWarning, stacklevel=2)
            if self.verbose:
                for c in status.conditions[shown_c:]:
                    print(f"[condition] {c.type:<10} {c.reason:<16} {c.message}", flush=True)
                for e in status.events[shown_e:]:
                    print(f"[event]     {e.kind:<14} {e.message}", flush=True)
                shown_c = len(status.conditions)
                shown_e = len(status.events)
            if status.done():
                result = Result(status)
                result.path = self.checkpoint_dir
                if result.state != "SUCCEEDED":
                    raise TrainingFailedError(result)
                return result
            if deadline is not None and time.time() > deadline:
                _phalanx.stop_job(job_id)
                raise PhalanxError(f"elastic job {job_id} did not finish within {timeout} s; "
                                   f"it was asked to stop")
            time.sleep(0.2)


_NO_COMMIT_WARNING = (
    "train_loop has not committed a step yet ({seconds:.0f} s into the job) and the group just "
    "changed: without state.commit() the whole loop is one step, so a lost or added rank "
    "re-runs it from its start and everything it did is lost. Make a train.State(model=..., "
    "optimizer=...), call state.restore() at the top of train_loop and state.commit() after "
    "each optimizer step (cheap: a copy in memory); a resize then costs at most one step.")


# Ray Train's name for the same trainer.
TorchTrainer = ElasticTrainer

__all__ = ["ElasticTrainer", "TorchTrainer", "TorchConfig", "ScalingConfig", "RunConfig",
           "FailureConfig", "CheckpointConfig", "Checkpoint", "Result", "TrainingFailedError",
           "State", "ElasticSampler", "get_context", "get_device", "get_checkpoint", "on_resize",
           "report",
           "prepare_model",
           "prepare_data_loader",
           "torch_process_group", "collective_group", "allreduce", "job_status"]
