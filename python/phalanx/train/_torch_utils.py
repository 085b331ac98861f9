"""Ray Train's torch helpers beyond prepare_model and prepare_data_loader: accelerate,
prepare_optimizer, backward, enable_reproducibility, get_devices, and TorchCheckpoint.

Their choices (mixed precision, the seed) hold for one run of ``train_loop``: a membership
change runs the loop again, which calls them again. Imported by phalanx.train.torch (and by
prepare_model and prepare_data_loader when they run), never with phalanx.train: it imports
torch."""

import os
import random
import tempfile

import numpy as np
import torch

from ._config import Checkpoint
from ._loop import _unwrap, get_device
from ._runtime import RUNTIME


class _Accelerator:
    """This run of the loop's: mixed precision (``accelerate(amp=True)``; only on a GPU, as
    Ray's CUDA autocast is off elsewhere) and the seed of ``enable_reproducibility``."""

    def __init__(self, amp=False):
        self.amp = amp
        self.seed = None
        self._scaler = None

    def on_gpu(self):
        return self.amp and get_device().type == "cuda"

    def scaler(self):
        """The GradScaler of mixed precision, or None without it."""
        if self._scaler is None and self.on_gpu():
            self._scaler = torch.cuda.amp.GradScaler()
        return self._scaler


def accelerator():
    """This run of the loop's accelerator; the default one (full precision, no seed) is set
    by whichever of prepare_model, prepare_data_loader, ... comes first, as in Ray."""
    if RUNTIME.accelerator is None:
        RUNTIME.accelerator = _Accelerator()
    return RUNTIME.accelerator


def accelerate(amp=False):
    """Ray Train's: ``amp=True`` trains with automatic mixed precision: the model's forward
    under CUDA autocast (``prepare_model``), the loss scaled (``backward``) and the optimizer
    stepped through a GradScaler (``prepare_optimizer``). On the CPU it changes nothing. Call
    it once per run of the loop, before any other of these helpers."""
    if RUNTIME.accelerator is not None:
        raise RuntimeError("train.torch.accelerate() comes first: call it once, before "
                           "prepare_model, prepare_data_loader, prepare_optimizer, backward "
                           "and enable_reproducibility")
    RUNTIME.accelerator = _Accelerator(amp=amp)


def prepare_optimizer(optimizer):
    """Ray Train's: ``optimizer`` as it steps under ``accelerate(amp=True)`` (through the
    GradScaler; an optimizer of its own type still, for LR schedulers); else ``optimizer``."""
    scaler = accelerator().scaler()
    return optimizer if scaler is None else _ScaledOptimizer(optimizer, scaler)


def backward(tensor):
    """Ray Train's: ``tensor.backward()``, with the loss scaled under ``accelerate(amp=True)``."""
    scaler = accelerator().scaler()
    if scaler is None:
        tensor.backward()
    else:
        scaler.scale(tensor).backward()


def enable_reproducibility(seed=0):
    """Ray Train's: seeds torch, Python's ``random`` and numpy with ``seed``; makes torch use
    deterministic algorithms (no cuDNN benchmarking; cuBLAS's workspace set as CUDA's
    determinism needs); and seeds the worker processes of the data loaders prepared after it.
    (The shuffled order of a prepared loader is already the same on every run: seeded by
    ``prepare_data_loader(seed=)`` and the epoch.) Reproducible within limits: see torch's
    notes on randomness."""
    accelerator().seed = seed
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"


def get_devices():
    """Ray Train's: the torch devices of this worker. Each worker has at most one GPU here
    (CUDA_VISIBLE_DEVICES is its local rank), so it is ``[get_device()]``."""
    return [get_device()]


# ---- used by prepare_model and prepare_data_loader ------------------------------------------

class _AutocastForward:
    """A model's forward under CUDA autocast (``accelerate(amp=True)``), set on the model as
    its ``forward``. A class, not a closure: ``torch.save(model)`` can still pickle the model."""

    def __init__(self, module):
        self.module = module

    def __call__(self, *args, **kwargs):
        with torch.autocast("cuda"):
            return type(self.module).forward(self.module, *args, **kwargs)


def autocast_model(model):
    """``model`` with its forward under autocast when this loop asked for mixed precision."""
    if accelerator().on_gpu():
        model.forward = _AutocastForward(model)
    return model


class _SeededWorkerInit:
    """A data loader process's start under ``enable_reproducibility``: numpy and ``random``
    seeded from torch's seed of that process (which the loader's seeded generator sets), then
    the loader's own ``worker_init_fn``."""

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, worker_id):
        seed = torch.initial_seed() % 2**32
        np.random.seed(seed)
        random.seed(seed)
        if self.inner is not None:
            self.inner(worker_id)


def loader_seeding(worker_init_fn, generator):
    """The ``worker_init_fn`` and ``generator`` a prepared loader gets: the loader's own, or
    seeded ones after ``enable_reproducibility``."""
    seed = accelerator().seed
    if seed is None:
        return worker_init_fn, generator
    generator = torch.Generator()
    generator.manual_seed(seed)
    return _SeededWorkerInit(worker_init_fn), generator


class _ScaledOptimizer:
    """``prepare_optimizer``'s under mixed precision: ``step()`` goes through the GradScaler;
    everything else is the wrapped optimizer's. Made a subclass of the optimizer's own class
    at creation (see ``__new__``) so isinstance checks (LR schedulers) pass."""

    def __new__(cls, optimizer, scaler):
        kind = type(f"Scaled{type(optimizer).__name__}", (cls, type(optimizer)), {})
        return object.__new__(kind)

    def __init__(self, optimizer, scaler):
        # Not the optimizer's __init__: this object only forwards to `optimizer`.
        object.__setattr__(self, "optimizer", optimizer)
        object.__setattr__(self, "scaler", scaler)

    def __getattribute__(self, name):
        if name in ("optimizer", "scaler", "step", "__class__", "__dict__"):
            return object.__getattribute__(self, name)
        return getattr(object.__getattribute__(self, "optimizer"), name)

    def __setattr__(self, name, value):
        if name == "step":
            # An LR scheduler's counting wrapper of step(): on this object, around the
            # scaled step (on the optimizer it would wrap the step the scaler calls).
            object.__setattr__(self, name, value)
        else:
            setattr(self.optimizer, name, value)

    def step(self, closure=None):
        self.scaler.step(self.optimizer, closure)
        self.scaler.update()


# ---- checkpoints --------------------------------------------------------------------------

MODEL_FILENAME = "model.pt"


class TorchCheckpoint(Checkpoint):
    """Ray Train's (before its Train V2): a checkpoint directory holding one torch model, as
    ``model.pt``: ``from_state_dict(model.state_dict())`` or ``from_model(model)``, then
    ``train.report(metrics, checkpoint=...)``; ``get_model()`` reads it back. A
    DistributedDataParallel model is saved as the model inside it (no "module." keys)."""

    @classmethod
    def from_state_dict(cls, state_dict, *, preprocessor=None):
        _no_preprocessor(preprocessor)
        plain = {_strip_module(k): v for k, v in state_dict.items()}
        return cls._saved(lambda path: torch.save(plain, path))

    @classmethod
    def from_model(cls, model, *, preprocessor=None):
        _no_preprocessor(preprocessor)
        inner = _unwrap(model)
        return cls._saved(lambda path: torch.save(inner, path))

    @classmethod
    def _saved(cls, save):
        directory = tempfile.mkdtemp(prefix="phalanx-checkpoint-")
        save(os.path.join(directory, MODEL_FILENAME))
        return cls.from_directory(directory)

    def get_model(self, model=None):
        """The saved model (on the CPU): the one ``from_model`` saved, or ``model`` with the
        state dict ``from_state_dict`` saved loaded into it (then ``model`` is required)."""
        with self.as_directory() as directory:
            saved = torch.load(os.path.join(directory, MODEL_FILENAME), map_location="cpu")
        if isinstance(saved, torch.nn.Module):
            return saved
        if model is None:
            raise ValueError(f"{self!r} holds a state dict: give the model to load it into, "
                             f"get_model(model)")
        _unwrap(model).load_state_dict({_strip_module(k): v for k, v in saved.items()})
        return model


def _strip_module(key):
    return key[len("module."):] if key.startswith("module.") else key


def _no_preprocessor(preprocessor):
    if preprocessor is not None:
        raise ValueError("TorchCheckpoint(preprocessor=...): preprocessors are Ray Data's, "
                         "which phalanx does not have; save it in the directory yourself")
