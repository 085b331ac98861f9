"""Data parallelism over phalanx's collective group, with no torch.distributed process group.

``prepare_model`` on CPU wraps the model in ``DataParallel``. At construction it copies rank 0's
parameters and buffers to every rank, as DistributedDataParallel does. At the end of each
``backward()`` it averages the gradients over the group's ranks.

Why not DDP: DDP needs torch's Gloo process group (a TCPStore, its address through the GCS,
then Gloo's full mesh), formed again at every membership change, on the path of the survivors'
next step: 40-60 ms of it here, and DDP's constructor another 10 ms. This wrapper uses the
group the controller's new epoch forms anyway. A dead peer fails ``backward()`` at once with
``phalanx.CollectiveError``.

This module imports torch: ``phalanx.train`` loads it on first use of ``DataParallel``.
"""

import contextlib

import torch

BUCKET_BYTES = 25 << 20  # gradients averaged per collective: DDP's default bucket_cap_mb
_ALIGN = 8               # bytes: each tensor's place in the packed broadcast


class DataParallel(torch.nn.Module):
    """``module`` with its gradients averaged over ``group`` (a phalanx CollectiveGroup of
    this epoch) at the end of every ``backward()``. ``.module`` is the model itself, and
    ``state_dict()`` has DistributedDataParallel's "module." keys."""

    def __init__(self, module, group, *, bucket_bytes=BUCKET_BYTES):
        super().__init__()
        if bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes={bucket_bytes}: give a positive size in bytes "
                             f"(the default, {BUCKET_BYTES}, is DDP's)")
        params = [p for p in module.parameters() if p.requires_grad]
        for p in params:
            if p.device.type != "cpu":
                raise ValueError(f"a parameter is on {p.device}: DataParallel averages CPU "
                                 f"gradients; for GPUs use prepare_model(model, "
                                 f"backend=\"nccl\")")
        self.module = module
        self._group = group
        self._epoch = group.epoch  # the epoch it was wrapped for
        self._sync = True
        self._queued = False
        _broadcast_state(module, group)
        self._buckets = _buckets(params, bucket_bytes)
        # One hook per parameter: the first gradient of a backward() queues the averaging for
        # its end. A module wrapped again (train_loop runs again after a membership change)
        # loses the hooks of its previous wrapper, whose group is gone.
        for handle in getattr(module, "_phalanx_grad_hooks", ()):
            handle.remove()
        module._phalanx_grad_hooks = [p.register_hook(self._on_grad) for p in params]

    def forward(self, *args, **kwargs):
        self._queued = False  # a backward() that failed before its end queued nothing more
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Inside, backward() only accumulates gradients locally; the next backward()
        outside averages them all (DistributedDataParallel.no_sync)."""
        old, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = old

    def _on_grad(self, grad):
        if self._sync and not self._queued:
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._average)
        return grad

    def _average(self):
        self._queued = False
        if self._group.epoch != self._epoch:
            # The group moved on (a membership change): this wrapper's loop is an old one
            # finishing its step, and must not take part in the new epoch's collectives.
            raise RuntimeError(f"the group moved on to epoch {self._group.epoch}; this model "
                               f"was wrapped for epoch {self._epoch}: wrap it again "
                               f"(prepare_model) in the new epoch")
        for params, flat in self._buckets:
            offset = 0
            for p in params:
                n = p.numel()
                if p.grad is None:  # not used in this forward: counts as 0, as in DDP
                    flat[offset:offset + n].zero_()
                elif p.grad.is_sparse:
                    raise TypeError("a sparse gradient: DataParallel averages dense "
                                    "gradients (make the embedding with sparse=False)")
                else:
                    flat[offset:offset + n].copy_(p.grad.reshape(-1))
                offset += n
            self._group.allreduce(flat, "avg")
            offset = 0
            for p in params:
                n = p.numel()
                averaged = flat[offset:offset + n].view_as(p)
                if p.grad is None:
                    p.grad = averaged.clone()
                else:
                    p.grad.copy_(averaged)
                offset += n


def _buckets(params, bucket_bytes):
    """DDP's buckets: the parameters in reverse order (the order backward produces their
    gradients), one dtype per bucket, at most bucket_bytes each (or one parameter), each with
    its flat buffer."""
    groups = []
    for p in reversed(params):
        size = p.numel() * p.element_size()
        last = groups[-1] if groups else None
        if last is None or last[0][0].dtype != p.dtype or last[1] + size > bucket_bytes:
            last = [[], 0]
            groups.append(last)
        last[0].append(p)
        last[1] += size
    return [(ps, torch.empty(sum(p.numel() for p in ps), dtype=ps[0].dtype))
            for ps, _ in groups]


def _broadcast_state(module, group):
    """Copies rank 0's parameters and buffers to every rank in one collective: their bytes,
    packed into one int64 tensor, so that any dtype goes through."""
    tensors = [t for t in list(module.parameters()) + list(module.buffers())
               if t.device.type == "cpu"]
    if group.world_size <= 1 or not tensors:
        return
    raw = [t.detach().contiguous().reshape(-1).view(torch.uint8) for t in tensors]
    offsets = []
    total = 0
    for r in raw:
        offsets.append(total)
        total += (r.numel() + _ALIGN - 1) // _ALIGN * _ALIGN
    packed = torch.zeros(max(total, _ALIGN), dtype=torch.uint8)
    for r, at in zip(raw, offsets):
        packed[at:at + r.numel()].copy_(r)
    group.broadcast(packed.view(torch.int64), 0)
    with torch.no_grad():
        for t, r, at in zip(tensors, raw, offsets):
            t.copy_(packed[at:at + r.numel()].view(t.dtype).view_as(t))
