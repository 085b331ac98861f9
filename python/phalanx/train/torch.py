"""Ray Train's ``ray.train.torch`` at the same path, so that a Ray Train script moves over by
renaming ``ray`` to ``phalanx``:

    import phalanx.train
    from phalanx.train import ScalingConfig
    from phalanx.train.torch import TorchTrainer

    def train_func(config):
        loader = phalanx.train.torch.prepare_data_loader(DataLoader(data, batch_size=32))
        model = phalanx.train.torch.prepare_model(Net())
        ...
        phalanx.train.report({"loss": loss.item()})

    result = TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=2)).fit()

TorchTrainer, TorchConfig, prepare_model, prepare_data_loader and get_device are
phalanx.train's own (the same objects); the rest are Ray's torch-only helpers. Not here:
TorchPredictor (batch inference over Ray Data) and TorchXLAConfig (TPUs).

This module's name does not hide torch: imports are absolute, so ``import torch`` anywhere,
this package included, is PyTorch.
"""

try:
    import torch  # noqa: F401 - PyTorch; as Ray's ray.train.torch, this module needs it
except ModuleNotFoundError as e:
    raise ModuleNotFoundError("phalanx.train.torch needs PyTorch: install it (pip install "
                              "torch, or Debian's python3-torch)") from e

from ._data import prepare_data_loader
from ._loop import TorchConfig, get_device, prepare_model
from ._torch_utils import (TorchCheckpoint, accelerate, backward, enable_reproducibility,
                           get_devices, prepare_optimizer)
from ._trainer import TorchTrainer

__all__ = ["TorchTrainer", "TorchConfig", "TorchCheckpoint", "get_device", "get_devices",
           "prepare_model", "prepare_data_loader", "prepare_optimizer", "accelerate",
           "backward", "enable_reproducibility"]
