"""Data across a changing world: ElasticSampler and prepare_data_loader."""
import warnings

from ._loop import get_device


from ._runtime import RUNTIME


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
    iteration takes the first data epoch not used up.

    Each prepared loader keeps its own progress (a train and a test loader do not use up each
    other's epochs): the first one of the loop's run under the data epoch's number, as
    ElasticSampler does, the n-th (n > 0) under ``(n, epoch)``. The loop prepares its
    loaders in the same order on every rank and at every run, so the keys agree."""

    def __init__(self, num_samples, batch_size, shuffle, drop_last, seed=0, index=0):
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.index = index
        self.epoch = None

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def _key(self, epoch):
        return epoch if self.index == 0 else (self.index, epoch)

    def _consumed(self, epoch):
        return RUNTIME.progress.get(self._key(epoch), 0)

    def _current_epoch(self):
        if self.epoch is not None:
            return self.epoch
        e = 0
        while self._consumed(e) >= self.num_samples:
            e += 1
        return e

    def __iter__(self):
        epoch = self._current_epoch()
        order = ElasticSampler(self.num_samples, self.batch_size, epoch, shuffle=self.shuffle,
                               seed=self.seed)._order()
        while True:
            consumed = self._consumed(epoch)
            if consumed >= self.num_samples:
                break
            world, rank = RUNTIME.world, RUNTIME.rank
            take = min(world * self.batch_size, self.num_samples - consumed)
            RUNTIME.progress[self._key(epoch)] = consumed + take
            if self.drop_last and take < world * self.batch_size:
                break  # every rank drops the same short last batch
            lo, hi = consumed + take * rank // world, consumed + take * (rank + 1) // world
            if lo == hi:
                # A last chunk smaller than the world: this rank repeats one of its samples
                # rather than take an empty batch (which DDP and collate_fn refuse), as
                # DistributedSampler pads its last round.
                lo, hi = consumed + rank % take, consumed + rank % take + 1
            yield order[lo:hi].tolist()
        self.epoch = None  # the next iteration takes the next data epoch

    def __len__(self):
        left = max(0, self.num_samples - self._consumed(self._current_epoch()))
        per_step = RUNTIME.world * self.batch_size
        return left // per_step if self.drop_last else (left + per_step - 1) // per_step


class _DeviceLoader:
    """A data loader whose batches move to ``device`` (Ray's prepare_data_loader)."""

    def __init__(self, loader, device):
        self.loader = loader
        self.device = device
        self.batch_sampler = loader.batch_sampler
        # set_epoch, as on a DistributedSampler: ours, or the loader's own left in place.
        self.sampler = (loader.batch_sampler if isinstance(loader.batch_sampler,
                                                           _ElasticBatchSampler)
                        else loader.sampler)
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


def prepare_data_loader(data_loader, add_dist_sampler=True, move_to_device=True,
                        auto_transfer=True, *, seed=0):
    """Ray Train's: ``data_loader`` (a torch DataLoader over a map-style dataset) with each
    rank taking its share of every batch, so that each sample is used once per epoch across
    the ranks, also through resizes (the progress is committed with ``State``), and batches
    moved to ``get_device()``. As with Ray's DistributedSampler, the loader's sampler is
    replaced and only says whether to shuffle (any but a SequentialSampler does, here with
    ``seed`` and the epoch); ``sampler.set_epoch(e)`` works as on a DistributedSampler. Left as
    they are (Ray's rules): a loader whose sampler is already a DistributedSampler, one over
    an IterableDataset, and all with ``add_dist_sampler=False``. Each prepared loader has its
    own epochs (a test loader does not use up the train loader's). ``auto_transfer`` (Ray's
    copy on a second CUDA stream) is taken; batches are copied on the current stream."""
    import torch
    from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, \
        RandomSampler, SequentialSampler
    from ._torch_utils import loader_seeding
    if not isinstance(data_loader, DataLoader):
        raise TypeError("prepare_data_loader takes a torch.utils.data.DataLoader")
    loader = data_loader
    if (add_dist_sampler and not isinstance(data_loader.sampler, DistributedSampler)
            and not isinstance(data_loader.dataset, IterableDataset)):
        if data_loader.batch_size is None:
            raise ValueError("prepare_data_loader: the DataLoader has no batch_size (it was "
                             "given a batch_sampler): give batch_size= instead")
        shuffle = not isinstance(data_loader.sampler, SequentialSampler)
        if not isinstance(data_loader.sampler, (SequentialSampler, RandomSampler)) and \
                RUNTIME.rank == 0:
            warnings.warn(f"prepare_data_loader replaces the loader's "
                          f"{type(data_loader.sampler).__name__} by one that shuffles the "
                          f"whole dataset and splits it among the ranks (as Ray's "
                          f"DistributedSampler does); give add_dist_sampler=False to keep it",
                          stacklevel=2)
        batches = _ElasticBatchSampler(len(data_loader.dataset), data_loader.batch_size,
                                       shuffle, data_loader.drop_last, seed, RUNTIME.loaders)
        RUNTIME.loaders += 1
        worker_init_fn, generator = loader_seeding(data_loader.worker_init_fn,
                                                   data_loader.generator)
        loader = DataLoader(data_loader.dataset, batch_sampler=batches,
                            num_workers=data_loader.num_workers,
                            collate_fn=data_loader.collate_fn,
                            pin_memory=data_loader.pin_memory,
                            timeout=data_loader.timeout,
                            worker_init_fn=worker_init_fn, generator=generator)
    device = get_device() if move_to_device else torch.device("cpu")
    return _DeviceLoader(loader, device)
