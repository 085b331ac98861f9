#!/usr/bin/python3
"""zero_digits: ZeRO-1 (torch's ZeroRedundancyOptimizer) in a Ray Train script, on Phalanx.

Each rank keeps Adam's state for its share of the parameters only. Under ``train.State`` a
rank's share also has a copy in another rank's memory (on another host where there is one),
so a lost rank's optimizer state is not lost: the survivors reshard it to the new world size
and go on, with no checkpoint read from disk. The script keeps the global batch constant
(``global_batch`` samples a step, split among the ranks of the moment), so a run through a
SIGKILL or a cut host ends with the weights of a run that lost nothing.

    python3 examples/python/zero_digits.py                  # a local cluster for the run
    python3 examples/python/zero_digits.py --kill-at-step 40
"""

import argparse
import time

import phalanx
from phalanx import train

import ddp_digits
from ddp_digits import NeuralNetwork, chaos, load_data
from elastic_digits import fit


def train_func(config):
    import torch
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    torch.set_num_threads(1)
    world = dist.get_world_size()
    if config["global_batch"] % world:
        raise ValueError(f"global_batch {config['global_batch']} does not split over "
                         f"{world} ranks")
    x, y = load_data()
    loader = DataLoader(TensorDataset(x, y), batch_size=config["global_batch"] // world,
                        shuffle=True, drop_last=True)
    loader = train.prepare_data_loader(loader)

    model = train.prepare_model(NeuralNetwork.make())
    optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                        lr=config["lr"])
    loss_fn = torch.nn.CrossEntropyLoss()

    state = train.State(model=model, optimizer=optimizer, epoch=0, step=0)
    state.restore()
    rank = dist.get_rank()
    for epoch in range(state.epoch, config["epochs"]):
        for xb, yb in loader:
            loss = loss_fn(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            state.step += 1
            if config.get("step_log"):
                with open(config["step_log"], "a") as f:
                    f.write(f"{time.time() * 1000:.0f} {rank} {world} {state.step}\n")
            state.commit()
            chaos(config, state.step, rank)
        state.epoch = epoch + 1
        state.commit()
        train.report({"epoch": epoch, "loss": float(loss), "world_size": world,
                      "step": state.step})
    with torch.no_grad():
        accuracy = float((model(x).argmax(1) == y).float().mean())
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    if rank == 0 and config.get("weights_out"):
        torch.save(weights, config["weights_out"])
    # How much of Adam's state this rank holds: ZeRO's point (about 1/world of it).
    held = sum(s["exp_avg"].numel() for s in optimizer.optim.state.values())
    total = torch.tensor([float(held)])
    dist.all_reduce(total)
    train.report({"accuracy": accuracy, "steps": state.step, "world_size": world,
                  "held_share": held / weights.numel(),
                  "state_complete": bool(total.item() == weights.numel())})


def trainer(config, workers=(1, 3), name="zero-digits", placement_strategy="PACK"):
    return ddp_digits.trainer(dict({"lr": 0.002, "epochs": 4, "global_batch": 24}, **config),
                              workers, name, placement_strategy, loop=train_func)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default=None, help="cluster address (default: local)")
    parser.add_argument("--kill-at-step", type=int, default=None)
    args = parser.parse_args()
    phalanx.init(args.address)
    t = trainer({})
    result = fit(t, args.kill_at_step)
    print(result.metrics)


if __name__ == "__main__":
    main()
