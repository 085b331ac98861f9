"""Horovod's PyTorch API (``horovod.torch``) on Phalanx.

Under ``phalanx run --horovod`` each worker is a rank of an elastic job, and the collectives
run on torch.distributed's ``phalanx`` backend over the job's group: a lost peer fails the
survivors' pending ops at once, and the job's controller re-forms the group. A Horovod
elastic program heals as under horovodrun, with the controller's timings: ``hvd.elastic.run``
re-runs the program's training function from the last ``state.commit()`` on every rank of
the new group (and the program's set-up above it, which under Phalanx runs again in the same
warm process), ``state.restore()`` brings the committed state back, and the reset callbacks
run after it, so a learning rate scaled by ``hvd.size()`` is the new size's.

Run on its own (``python prog.py``), a program is one rank of a world of one, as under
Horovod without horovodrun.

Ops: ``allreduce(_)``, ``allreduce_async(_)``, ``grouped_allreduce(_)``, ``allgather``,
``allgather_object``, ``broadcast(_)``, ``broadcast_object``, ``broadcast_parameters``,
``broadcast_optimizer_state``, ``alltoall``, ``barrier``, ``synchronize``, ``poll``;
``DistributedOptimizer`` (gradients allreduced per parameter as backward produces them, with
``backward_passes_per_step``, ``op=Average|Sum``, ``Compression.none|fp16``). Not here:
Adasum, process sets, ``join``, sparse gradients.
"""

import functools
import os

import torch
import torch.distributed as dist

from ...train._runtime import RUNTIME
from . import elastic  # noqa: F401 - hvd.elastic, as in Horovod

Average = "Average"
Sum = "Sum"
Min = "Min"
Max = "Max"
Product = "Product"
Adasum = "Adasum"


class HorovodInternalError(RuntimeError):
    """A collective failed because the group changed (a peer was lost)."""


class HostsUpdatedInterrupt(RuntimeError):
    """The hosts changed; the elastic loop resets (``state.check_host_updates()``)."""

    def __init__(self, skip_sync=False):
        super().__init__("the hosts changed")
        self.skip_sync = skip_sync


class Compression:
    """Gradient compression for ``DistributedOptimizer``: ``Compression.none`` or
    ``Compression.fp16`` (floating tensors sent as float16, restored to their dtype)."""

    class none:
        @staticmethod
        def compress(tensor):
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor

    class fp16:
        @staticmethod
        def compress(tensor):
            if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
                return tensor.to(torch.float16), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor.to(ctx) if ctx is not None else tensor


# ---- the world --------------------------------------------------------------------------

_state = {"initialized": False, "alone": False}


def _in_job():
    return bool(RUNTIME.job_id) and RUNTIME.loop_epoch is not None


def init(comm=None, process_sets=None):
    """Joins this rank's group: under ``phalanx run --horovod`` the job's (torch.distributed
    already runs on it); alone, a world of one."""
    if process_sets:
        raise ValueError("hvd.init(process_sets=...): process sets are not supported on Phalanx")
    if _in_job():
        if not dist.is_initialized():
            RUNTIME.torch_process_group("phalanx")
        _state["alone"] = False
    else:
        _state["alone"] = not dist.is_initialized()
    _state["initialized"] = True


def is_initialized():
    return _state["initialized"]


def shutdown():
    _state["initialized"] = False


def _check():
    if not _state["initialized"]:
        raise ValueError("Horovod has not been initialized; use hvd.init().")


def size():
    _check()
    if _state["alone"]:
        return 1
    return RUNTIME.loop_membership()[2] if _in_job() else dist.get_world_size()


def rank():
    _check()
    if _state["alone"]:
        return 0
    return RUNTIME.loop_membership()[1] if _in_job() else dist.get_rank()


def local_rank():
    _check()
    return RUNTIME.local_rank if _in_job() else int(os.environ.get("LOCAL_RANK", 0))


def local_size():
    _check()
    return RUNTIME.local_world if _in_job() else int(os.environ.get("LOCAL_WORLD_SIZE", 1))


def cross_rank():
    """This rank's node among the job's nodes (Horovod's cross rank)."""
    _check()
    return RUNTIME.node_rank if _in_job() else 0


def cross_size():
    _check()
    return len(set(RUNTIME.rank_nodes)) if _in_job() and RUNTIME.rank_nodes else 1


def is_homogeneous():
    return True


def mpi_threads_supported():
    return False


def mpi_enabled():
    return False


def mpi_built():
    return False


def gloo_enabled():
    return True


def gloo_built():
    return True


def nccl_built():
    return False


def cuda_built():
    return torch.cuda.is_available()


def rocm_built():
    return False


# ---- collectives ------------------------------------------------------------------------

_REDUCE_OPS = {Sum: "SUM", Average: "SUM", Min: "MIN", Max: "MAX", Product: "PRODUCT"}


def _op(op, average):
    if average is not None:
        if op is not None:
            raise ValueError("give op= or the older average=, not both")
        return Average if average else Sum
    op = Average if op is None else op
    if op == Adasum:
        raise NotImplementedError("op=hvd.Adasum is not supported on Phalanx: use hvd.Average")
    if op not in _REDUCE_OPS:
        raise ValueError(f"op={op!r}: give hvd.Average, hvd.Sum, hvd.Min, hvd.Max or "
                         f"hvd.Product")
    return op


def _internal(fn):
    """Turns the backend's error for a lost peer into Horovod's HorovodInternalError."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RuntimeError as e:
            if isinstance(e, HorovodInternalError):
                raise
            raise HorovodInternalError(str(e)) from e
    return wrapper


class _Handle:
    """An op in flight (allreduce_async and friends): ``synchronize(handle)`` gives its
    result."""

    def __init__(self, work, finish):
        self.work = work
        self.finish = finish
        self.result = None
        self.done = False

    def wait(self):
        if not self.done:
            if self.work is not None:
                self.work.wait()
            self.result = self.finish()
            self.done = True
        return self.result


def _allreduce_start(tensor, op, prescale_factor, postscale_factor, compression):
    _check()
    n = size()
    if prescale_factor != 1.0:
        tensor.mul_(prescale_factor)
    sent, ctx = compression.compress(tensor)
    work = None
    if n > 1:
        work = dist.all_reduce(sent, op=getattr(dist.ReduceOp, _REDUCE_OPS[op]), async_op=True)

    def finish():
        out = compression.decompress(sent, ctx)
        if op == Average and n > 1:
            out = out.div_(n) if out.dtype.is_floating_point else out.floor_divide_(n)
        if postscale_factor != 1.0:
            out = out.mul_(postscale_factor)
        if out is not tensor:
            tensor.copy_(out)
        return tensor
    return _Handle(work, finish)


@_internal
def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None, compression=Compression.none):
    return _allreduce_start(tensor, _op(op, average), prescale_factor, postscale_factor,
                            compression)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=None):
    return allreduce_async_(tensor.clone(), average, name, op, prescale_factor,
                            postscale_factor)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor))


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """The reduction of ``tensor`` over all ranks (a new tensor; Average by default)."""
    return synchronize(allreduce_async_(tensor.clone(), average, name, op, prescale_factor,
                                        postscale_factor, compression=compression))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=None):
    handles = [allreduce_async_(t, average, name, op, prescale_factor, postscale_factor)
               for t in tensors]
    return [synchronize(h) for h in handles]


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    handles = [allreduce_async_(t.clone(), average, name, op, prescale_factor,
                                postscale_factor, compression=compression) for t in tensors]
    return [synchronize(h) for h in handles]


@_internal
def synchronize(handle):
    """The result of an op started by one of the ``*_async`` calls."""
    return handle.wait()


def poll(handle):
    """Whether the op of ``handle`` has finished."""
    return handle.done or handle.work is None or handle.work.is_completed()


@_internal
def allgather(tensor, name=None, process_set=None):
    """Every rank's ``tensor`` concatenated along the first dimension, in rank order (their
    first dimensions may differ)."""
    _check()
    n = size()
    if n == 1:
        return tensor.clone()
    t = tensor if tensor.dim() > 0 else tensor.reshape(1)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(sizes, torch.tensor([t.shape[0]], dtype=torch.int64))
    most = int(max(s.item() for s in sizes))
    padded = torch.zeros((most,) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device)
    padded[:t.shape[0]] = t
    parts = [torch.empty_like(padded) for _ in range(n)]
    dist.all_gather(parts, padded.contiguous())
    return torch.cat([p[:int(s.item())] for p, s in zip(parts, sizes)])


def allgather_async(tensor, name=None, process_set=None):
    result = allgather(tensor, name)
    return _Handle(None, lambda: result)


@_internal
def allgather_object(obj, name=None, process_set=None):
    """Every rank's ``obj``, as a list in rank order."""
    _check()
    if size() == 1:
        return [obj]
    out = [None] * size()
    dist.all_gather_object(out, obj)
    return out


@_internal
def broadcast_(tensor, root_rank, name=None, process_set=None):
    """``tensor`` set in place to root_rank's."""
    _check()
    if size() > 1:
        dist.broadcast(tensor, src=root_rank)
    return tensor


def broadcast(tensor, root_rank, name=None, process_set=None):
    return broadcast_(tensor.clone(), root_rank, name)


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    broadcast_(tensor, root_rank, name)
    return _Handle(None, lambda: tensor)


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    return broadcast_async_(tensor.clone(), root_rank, name)


@_internal
def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """root_rank's ``obj`` on every rank."""
    _check()
    if size() == 1:
        return obj
    box = [obj if rank() == root_rank else None]
    dist.broadcast_object_list(box, src=root_rank)
    return box[0]


@_internal
def alltoall(tensor, splits=None, name=None, process_set=None):
    """Sends ``splits[i]`` rows of ``tensor`` to rank i (equal parts without splits) and
    returns the rows every rank sent this one, in rank order."""
    _check()
    n = size()
    if splits is None:
        if tensor.shape[0] % n:
            raise ValueError(f"alltoall: the first dimension ({tensor.shape[0]}) does not "
                             f"divide among {n} ranks: give splits=")
        splits = [tensor.shape[0] // n] * n
    splits = [int(s) for s in splits]
    if n == 1:
        return tensor.clone()
    sizes_out = torch.tensor(splits, dtype=torch.int64)
    sizes_in = torch.empty(n, dtype=torch.int64)
    dist.all_to_all_single(sizes_in, sizes_out)
    inputs = list(torch.split(tensor, splits))
    outputs = [torch.empty((int(k),) + tuple(tensor.shape[1:]), dtype=tensor.dtype)
               for k in sizes_in]
    dist.all_to_all(outputs, [i.contiguous() for i in inputs])
    return torch.cat(outputs)


@_internal
def barrier(process_set=None):
    _check()
    if size() > 1:
        dist.barrier()


def broadcast_parameters(params, root_rank):
    """root_rank's parameters on every rank: ``params`` is a ``state_dict()`` or
    ``named_parameters()``."""
    items = sorted(params.items()) if isinstance(params, dict) else list(params)
    for _, p in items:
        if isinstance(p, torch.Tensor):
            broadcast_(p.data if p.requires_grad else p, root_rank)


def broadcast_optimizer_state(optimizer, root_rank):
    """root_rank's optimizer state (its state and hyper-parameters) on every rank."""
    state = broadcast_object(optimizer.state_dict(), root_rank)
    if rank() != root_rank:
        optimizer.load_state_dict(state)


# ---- DistributedOptimizer -----------------------------------------------------------------

class _DistributedOptimizer:
    """The methods a DistributedOptimizer adds to the wrapped optimizer's own class."""

    def _hvd_setup(self, named_parameters, compression, backward_passes_per_step, op,
                   gradient_predivide_factor):
        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            if any(not isinstance(x, tuple) for x in named):
                raise ValueError("named_parameters should be a sequence of (name, parameter) "
                                 "tuples, as model.named_parameters() gives")
            names = [k for k, _ in named]
            if len(set(names)) != len(names):
                raise ValueError("named_parameters: names must be unique")
            missing = {id(p) for p in all_params} - {id(p) for _, p in named}
            if missing:
                raise ValueError("named_parameters was given, but some of the optimizer's "
                                 "parameters are not in it")
        self._hvd_compression = compression
        self._hvd_op = _op(op, None)
        self._hvd_predivide = gradient_predivide_factor
        self.backward_passes_per_step = backward_passes_per_step
        self._hvd_delay = {p: backward_passes_per_step for p in all_params}
        self._hvd_handles = {}
        self._hvd_hooks = []
        self._hvd_synchronized = False
        self._hvd_should_synchronize = True
        for p in all_params:
            if p.requires_grad:
                accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
                accumulator.register_hook(self._hvd_hook(p))
                self._hvd_hooks.append(accumulator)

    def _hvd_start(self, p):
        pre = 1.0 / self._hvd_predivide if self._hvd_op == Average else 1.0
        post = self._hvd_predivide if self._hvd_op == Average else 1.0
        return allreduce_async_(p.grad, op=self._hvd_op, prescale_factor=pre,
                                postscale_factor=post, compression=self._hvd_compression)

    def _hvd_hook(self, p):
        def hook(*_):
            if self._hvd_delay[p] <= 0:
                raise AssertionError("gradients were computed more than backward_passes_per_"
                                     "step times before step(): raise backward_passes_per_step "
                                     "to accumulate them locally")
            self._hvd_delay[p] -= 1
            if self._hvd_delay[p] == 0:
                # Started as backward produces it: the allreduce overlaps the rest of backward.
                self._hvd_handles[p] = self._hvd_start(p)
        return hook

    def synchronize(self):
        """Waits for every gradient's allreduce (starting those backward did not produce)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad and p not in self._hvd_handles and p.grad is not None \
                        and size() > 1:
                    self._hvd_handles[p] = self._hvd_start(p)
        try:
            for handle in self._hvd_handles.values():
                synchronize(handle)
        finally:
            self._hvd_handles.clear()
            for p in self._hvd_delay:
                self._hvd_delay[p] = self.backward_passes_per_step
        self._hvd_synchronized = True

    def skip_synchronize(self):
        """``with optimizer.skip_synchronize(): optimizer.step()`` after ``synchronize()``."""
        optimizer = self

        class _Skip:
            def __enter__(self):
                optimizer._hvd_should_synchronize = False

            def __exit__(self, *exc):
                optimizer._hvd_should_synchronize = True
        return _Skip()

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._hvd_delay:
            self._hvd_delay[p] = passes

    def step(self, closure=None):
        if self._hvd_should_synchronize and not self._hvd_synchronized:
            self.synchronize()
        self._hvd_synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._hvd_handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize()")
        return super(self.__class__, self).zero_grad(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        self._hvd_handles = {}
        self._hvd_synchronized = False
        for p in self._hvd_delay:
            self._hvd_delay[p] = self.backward_passes_per_step
        return super(self.__class__, self).load_state_dict(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None):
    """``optimizer`` whose ``step()`` first averages every gradient over the ranks (Horovod's):
    an object of a subclass of the optimizer's own class, sharing its parameter groups and
    state, so ``isinstance``, ``state_dict()`` and learning-rate changes work as on it."""
    if op == Adasum:
        raise NotImplementedError("DistributedOptimizer(op=hvd.Adasum) is not supported on "
                                  "Phalanx: use hvd.Average")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor goes with op=hvd.Average only")
    base = optimizer.__class__
    cls = type(base.__name__, (base,), {k: v for k, v in _DistributedOptimizer.__dict__.items()
                                        if not k.startswith("__")})
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update(optimizer.__dict__)  # the same param_groups, state and defaults
    wrapped._hvd_setup(named_parameters, compression, backward_passes_per_step, op,
                       gradient_predivide_factor)
    return wrapped


__all__ = [
    "Average", "Sum", "Min", "Max", "Product", "Adasum", "Compression", "HorovodInternalError",
    "HostsUpdatedInterrupt", "init", "is_initialized", "shutdown", "size", "rank",
    "local_rank", "local_size", "cross_rank", "cross_size", "is_homogeneous",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built",
    "nccl_built", "cuda_built", "rocm_built", "allreduce", "allreduce_", "allreduce_async",
    "allreduce_async_", "grouped_allreduce", "grouped_allreduce_", "synchronize", "poll",
    "allgather", "allgather_async", "allgather_object", "broadcast", "broadcast_",
    "broadcast_async", "broadcast_async_", "broadcast_object", "alltoall", "barrier",
    "broadcast_parameters", "broadcast_optimizer_state", "DistributedOptimizer", "elastic",
]
