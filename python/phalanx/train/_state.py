"""The state a rank commits at each step boundary and restores after a membership change (Horovod Elastic's State)."""

import pickle
import sys
from ._loop import _unwrap, on_resize


from . import _zero
from ._runtime import RUNTIME


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
