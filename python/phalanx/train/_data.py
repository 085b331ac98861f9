"""Data across a changing world: ElasticSampler and prepare_data_loader."""
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
