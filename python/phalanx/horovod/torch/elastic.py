"""Horovod elastic's PyTorch API (``hvd.elastic``) on Phalanx's elastic jobs.

``TorchState`` is a ``phalanx.train.State``: ``commit()`` is a step boundary the job's
controller agrees on (kept in memory, copied to the controller), and a membership change
stops the loop there. The training function decorated with ``run`` then runs again on every
rank of the new group (under ``phalanx run --horovod``, with the program's set-up above it),
``restore()`` loads the last commit on survivors and newcomers alike, and the reset callbacks
run. At the first start, with nothing committed, ``sync()`` gives every rank rank 0's state,
as Horovod's does.
"""

import functools

import numpy as np

from ... import train
from ...train._runtime import RUNTIME


def run(func):
    """Horovod's ``@hvd.elastic.run``: ``func(state, ...)`` from the newest committed state.
    A lost peer or a changed group ends the call on every rank; the job's controller runs it
    again on the new group (from the top of the program under ``phalanx run --horovod``)."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        from . import init, is_initialized
        if not is_initialized():
            init()
        if not state.restore():
            state.sync()
        return func(state, *args, **kwargs)
    return wrapper


class TorchState(train.State):
    """Horovod's ``hvd.elastic.TorchState(model, optimizer, **kwargs)``: the model, the
    optimizer, samplers (``ElasticSampler``) and plain values (``state.epoch``,
    ``state.batch``) committed together."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        super().__init__(model=model, optimizer=optimizer, **kwargs)

    def sync(self):
        """Every rank takes rank 0's model, optimizer, samplers and values."""
        from . import broadcast_object, broadcast_optimizer_state, broadcast_parameters, size
        if size() == 1:
            return
        for name, obj in self._objects.items():
            if name == "optimizer" or hasattr(obj, "param_groups"):
                broadcast_optimizer_state(obj, 0)
            elif hasattr(obj, "parameters"):
                broadcast_parameters(obj.state_dict(), 0)
            else:
                obj.load_state_dict(broadcast_object(obj.state_dict(), 0))
        self._values.update(broadcast_object(dict(self._values), 0))

    def commit(self):
        """A step boundary of the job (kept in memory on this rank and agreed on by the job's
        controller); run alone, only counted."""
        if getattr(RUNTIME.local, "generation", None) is None:
            object.__setattr__(self, "commits", self.commits + 1)
            return
        super().commit()

    def save(self):
        """Horovod's ``save()``: the same as ``commit()`` here (a commit is a copy in memory)."""
        self.commit()

    def check_host_updates(self):
        """Raises nothing while the group is unchanged; a changed group stops the loop (it
        runs again on the new group, from the last commit)."""
        RUNTIME.loop_membership()  # a loop of an older group stops here

    def on_reset(self):
        for callback in list(RUNTIME.reset_callbacks):
            callback()


class ElasticSampler:
    """Horovod's ``hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=0)``: this rank's
    share of the samples of the epoch not yet processed. ``record_batch(batch_idx,
    batch_size)`` after each batch counts it as processed by every rank; with the sampler in
    the ``TorchState`` (``TorchState(..., train_sampler=sampler)``) that count is committed,
    and after a resize the rest of the epoch is split among the new ranks, so each sample is
    used once per epoch. ``set_epoch(e)`` starts epoch e (keeping the progress when it is the
    epoch already under way, as after a reset)."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.num_samples_total = len(dataset)
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed = 0

    def set_epoch(self, epoch):
        if epoch != self.epoch:
            self.epoch = epoch
            self.processed = 0

    def _remaining(self):
        order = (np.random.RandomState(self.seed + self.epoch).permutation(self.num_samples_total)
                 if self.shuffle else np.arange(self.num_samples_total))
        return order[self.processed:]

    def _world(self):
        from . import rank, size
        return rank(), size()

    def __iter__(self):
        r, n = self._world()
        return iter(self._remaining()[r::n].tolist())

    def __len__(self):
        r, n = self._world()
        return len(self._remaining()[r::n])

    def record_batch(self, batch_idx, batch_size):
        """Counts one more batch of ``batch_size`` samples on every rank as processed (call it
        once per batch, in order)."""
        _, n = self._world()
        self.processed = min(self.num_samples_total, self.processed + batch_size * n)

    def record_indices(self, indices):
        _, n = self._world()
        self.processed = min(self.num_samples_total, self.processed + len(indices) * n)

    def state_dict(self):
        return {"epoch": self.epoch, "processed": self.processed}

    def load_state_dict(self, state):
        self.epoch = state["epoch"]
        self.processed = state["processed"]


__all__ = ["run", "TorchState", "ElasticSampler"]
