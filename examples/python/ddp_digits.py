#!/usr/bin/python3
"""ddp_digits: a Ray Train script, as Ray's TorchTrainer examples are written, on Phalanx.

What differs from the Ray script: the imports (``from phalanx import train``), the data (the
digits scikit-learn bundles, where Ray's example downloads Fashion-MNIST) and one Phalanx
line per step, ``state.commit()``, which lets a lost rank heal in place: the survivors go on
from the last committed step and a replacement joins, with every sample still used once per
epoch. Everything else is torch's own: ``DistributedDataParallel`` (``prepare_model``), a
``DataLoader`` (``prepare_data_loader``), and ``torch.distributed`` calls of the script's own
(``dist.all_reduce`` of the epoch's loss), on the ``phalanx`` backend that the job sets up
before the loop runs.

    python3 examples/python/ddp_digits.py                  # a local cluster for the run
    python3 examples/python/ddp_digits.py --address auto   # the cluster of `phalanx start`
    python3 examples/python/ddp_digits.py --kill-at-step 40
"""

import argparse
import os
import signal
import sys
import time

import phalanx
from phalanx import train
from phalanx.train import RunConfig, ScalingConfig, TorchTrainer, FailureConfig

from elastic_digits import fit  # --kill-at-step: SIGKILL of rank 1 at that step


def load_data():
    import torch
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    return torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)


class NeuralNetwork:
    """Built inside the loop (torch is imported there): Ray's example network, sized for
    8x8 digits."""

    @staticmethod
    def make():
        import torch.nn as nn
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                             nn.Linear(128, 10))


def train_func(config):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    torch.set_num_threads(1)
    x, y = load_data()
    dataset = TensorDataset(x, y)
    loader = DataLoader(dataset, batch_size=config["batch_size"], shuffle=True)
    loader = train.prepare_data_loader(loader)

    model = train.prepare_model(NeuralNetwork.make())
    loss_fn = torch.nn.CrossEntropyLoss()
    # The learning rate scaled by the world size (Horovod's rule, per 3 workers here).
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"] * dist.get_world_size() / 3,
                                momentum=0.9)

    def scale_lr():
        # restore() loads the optimizer as committed, with the old world size's rate.
        for group in optimizer.param_groups:
            group["lr"] = config["lr"] * dist.get_world_size() / 3

    state = train.State(model=model, optimizer=optimizer, epoch=0, step=0)
    train.on_resize(scale_lr)
    state.restore()
    rank = dist.get_rank()
    for epoch in range(state.epoch, config["epochs"]):
        epoch_loss = torch.zeros(2)
        for xb, yb in loader:
            pred = model(xb)
            loss = loss_fn(pred, yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            epoch_loss += torch.tensor([float(loss) * len(yb), len(yb)])
            state.step += 1
            if config.get("step_log"):
                # Tests and benchmarks: "<unix ms> <rank> <world size> <step>" per update.
                with open(config["step_log"], "a") as f:
                    f.write(f"{time.time() * 1000:.0f} {rank} {dist.get_world_size()} "
                            f"{state.step}\n")
            state.commit()
            chaos(config, state.step, rank)
        dist.all_reduce(epoch_loss)
        state.epoch = epoch + 1
        state.commit()
        train.report({"epoch": epoch, "loss": float(epoch_loss[0] / epoch_loss[1]),
                      "world_size": dist.get_world_size(), "step": state.step})
    with torch.no_grad():
        accuracy = float((model(x).argmax(1) == y).float().mean())
    # Every rank holds the same weights (DDP): their checksum, allreduced, says so.
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    total = weights.sum().reshape(1).double()
    lowest, highest = total.clone(), total.clone()
    dist.all_reduce(lowest, op=dist.ReduceOp.MIN)
    dist.all_reduce(highest, op=dist.ReduceOp.MAX)
    train.report({"accuracy": accuracy, "steps": state.step, "world_size": dist.get_world_size(),
                  "weights_equal": bool(lowest.item() == highest.item()),
                  "lr": optimizer.param_groups[0]["lr"],
                  "backend": dist.get_backend()})


def chaos(config, step, rank):
    """Tests: each step padded by ``step_sleep`` seconds; rank 1 stops itself (SIGSTOP) once,
    at ``stop_at_step``; the marker says when."""
    if config.get("step_sleep"):
        time.sleep(config["step_sleep"])
    if config.get("stop_at_step") is not None and step >= config["stop_at_step"] and rank == 1 \
            and not os.path.exists(config["stop_marker"]):
        with open(config["stop_marker"], "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGSTOP)


def trainer(config, workers=(1, 3), name="ddp-digits", placement_strategy="PACK", loop=None):
    """The TorchTrainer of `loop` (this script's train_func by default) on `workers` (min,
    max) workers of half a CPU each."""
    return TorchTrainer(
        loop or train_func, train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers, resources_per_worker={"CPU": 0.5},
                                     placement_strategy=placement_strategy),
        run_config=RunConfig(name=name, failure_config=FailureConfig(max_failures=3)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default=None, help="cluster address (default: local)")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--kill-at-step", type=int, default=None)
    args = parser.parse_args()
    phalanx.init(args.address)
    t = trainer({"lr": 0.05, "epochs": args.epochs, "batch_size": 32})
    result = fit(t, args.kill_at_step)
    print(result.metrics)
    phalanx.shutdown()
    return 0 if result.state == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())
