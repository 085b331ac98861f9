#!/usr/bin/python3
"""elastic_digits: an elastic data-parallel torch classifier on scikit-learn's bundled digits
(nothing is downloaded), its gradients averaged over phalanx's collective group, 3 workers
(min 1, max 4).

    python3 examples/python/elastic_digits.py                  # a local cluster for the run
    python3 examples/python/elastic_digits.py --address auto   # the cluster of `phalanx start`
    python3 examples/python/elastic_digits.py --kill-at-step 60

Kill a worker while it runs (``phalanx list actors`` shows their pids; ``kill -9 PID``) and
the job heals: the survivors go on from the last committed step and a replacement joins.
Every sample is used exactly once per epoch whatever the resizes; the script checks it and
prints the final test accuracy.
"""

import argparse
import os
import signal
import sys
import threading
import time

import phalanx
from phalanx import train


def load_data():
    import numpy as np
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32")
    order = np.random.RandomState(0).permutation(len(x))
    test, fit = order[:360], order[360:]
    return x[fit], y[fit], x[test], y[test]


def train_loop(config):
    import numpy as np
    import torch

    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y, x_test, y_test = (torch.from_numpy(a) for a in load_data())
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    model = train.prepare_model(model)   # data parallel over this epoch's ranks
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    state = train.State(model=model, optimizer=optimizer, epoch=0, step=0,
                        seen=np.zeros(len(x)), exactly_once=[])
    state.restore()                       # the last committed step, if there is one
    ctx = train.get_context()
    for epoch in range(state.epoch, config["epochs"]):
        for idx in train.ElasticSampler(len(x), config["batch_size"], epoch, seed=1):
            if config.get("raise_at_step") is not None and state.step >= config["raise_at_step"] \
                    and ctx.rank == 1 and not os.path.exists(config["raise_marker"]):
                # Chaos (tests): this rank's loop raises before the step's allreduce, once;
                # the marker holds when.
                with open(config["raise_marker"], "w") as f:
                    f.write(repr(time.time()))
                raise RuntimeError(f"raise_at_step: rank 1 raises at step {state.step}")
            optimizer.zero_grad()
            out = model(x[idx])
            loss = F.cross_entropy(out, y[idx], reduction="sum") / max(1, len(idx))
            loss.backward()
            optimizer.step()
            # Which samples this step used, over all ranks: each must be used once per epoch.
            used = torch.zeros(len(x), dtype=torch.float64)
            used[idx] = 1
            train.allreduce(used)   # phalanx's group: fails at once if a peer dies
            state.seen = state.seen + used.numpy()
            state.step += 1
            state.commit()
            train.report({"loss": float(loss), "epoch": epoch, "step": state.step,
                          "world_size": ctx.world_size})
            if config.get("step_sleep"):
                time.sleep(config["step_sleep"])
            if config.get("oom_at_step") is not None and state.step >= config["oom_at_step"] \
                    and ctx.rank == 1 and not os.path.exists(config["oom_marker"]):
                # Chaos (tests): use more memory than this worker's limit, once.
                open(config["oom_marker"], "w").close()
                ballast = np.ones(config["oom_bytes"] // 8)
                time.sleep(10)
                del ballast
        state.exactly_once = state.exactly_once + [bool((state.seen == 1).all())]
        state.seen = np.zeros(len(x))
        state.epoch = epoch + 1
        state.commit()
    # Measured on the final model, not taken from the last step: a loop restarted from the
    # last commit (a membership change after the final epoch's commit) runs no step at all.
    with torch.no_grad():
        accuracy = float((model(x_test).argmax(1) == y_test).float().mean())
        loss = F.cross_entropy(model(x), y)
    train.report({"accuracy": accuracy, "loss": float(loss), "steps": state.step,
                  "each_sample_once_per_epoch": all(state.exactly_once),
                  "epochs": len(state.exactly_once), "world_size": ctx.world_size})


def kill_rank_at(job_id, step, rank=1):
    """Chaos: SIGKILL the worker of `rank` once the job reached `step` (same machine)."""
    while True:
        status = train.job_status(job_id)
        if status.state in ("SUCCEEDED", "FAILED", "STOPPED"):
            return
        if status.steps >= step and len(status.ranks) > rank:
            handle = phalanx.ActorHandle(status.ranks[rank]["actor_id"], "PythonTrainer", "cpp")
            pid = phalanx.actor_info(handle)["pid"]
            print(f"[chaos]     kill -9 of rank {rank} (pid {pid}) at step {status.steps}",
                  flush=True)
            os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.05)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default=None, help="cluster address (default: local)")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--min", type=int, default=1)
    parser.add_argument("--max", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--memory", type=float, default=1.0, help="GiB per worker (a limit)")
    parser.add_argument("--kill-at-step", type=int, default=None)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    args = parser.parse_args()

    phalanx.init(args.address, num_cpus=max(4, args.max) if args.address is None else None)
    trainer = train.ElasticTrainer(
        train_loop,
        train_loop_config={"lr": args.lr, "epochs": args.epochs, "batch_size": args.batch_size,
                           "step_sleep": args.step_sleep},
        scaling_config=train.ScalingConfig(
            num_workers=(args.min, args.max), initial_workers=args.workers,
            resources_per_worker={"CPU": 0.5, "memory": int(args.memory * (1 << 30))}),
        run_config=train.RunConfig(name="digits",
                                   failure_config=train.FailureConfig(max_failures=5)))
    if args.kill_at_step is not None:
        job_id = trainer.submit()
        threading.Thread(target=kill_rank_at, args=(job_id, args.kill_at_step),
                         daemon=True).start()
        result = _wait(job_id)
    else:
        result = trainer.fit()
    print(f"\njob {result.job_id}: {result.state} after {result.steps} steps, "
          f"{result.restarts} respawn(s), world size {result.world_size}")
    for e in result.events:
        print(f"  {e['kind']:<14} {e['message']}")
    m = result.metrics
    print(f"test accuracy {m.get('accuracy', 0):.3f}; each sample used once per epoch: "
          f"{m.get('each_sample_once_per_epoch')} ({m.get('epochs')} epochs)")
    phalanx.shutdown()
    return 0 if m.get("accuracy", 0) >= 0.9 and m.get("each_sample_once_per_epoch") else 1


def fit(trainer, kill_at_step=None):
    """``trainer.fit()``; with ``kill_at_step``, the examples' chaos: submit, SIGKILL rank 1 once
    the job reached that step (kill_rank_at), and return the job's end status."""
    if kill_at_step is None:
        return trainer.fit()
    job_id = trainer.submit()
    threading.Thread(target=kill_rank_at, args=(job_id, kill_at_step), daemon=True).start()
    while train.job_status(job_id).state not in ("SUCCEEDED", "FAILED", "STOPPED"):
        time.sleep(0.2)
    return train.job_status(job_id)


def _wait(job_id):
    shown_c = shown_e = 0
    while True:
        r = train.job_status(job_id)
        for c in r.conditions[shown_c:]:
            print(f"[condition] {c['type']:<10} {c['reason']:<16} {c['message']}", flush=True)
        for e in r.events[shown_e:]:
            print(f"[event]     {e['kind']:<14} {e['message']} (world size {e['world_size']})",
                  flush=True)
        shown_c, shown_e = len(r.conditions), len(r.events)
        if r.state in ("SUCCEEDED", "FAILED", "STOPPED"):
            return r
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
