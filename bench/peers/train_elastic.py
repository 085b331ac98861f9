#!/usr/bin/python3
"""Peer baseline: a tiny elastic DDP job (Gloo, CPU) launched by torchrun (python3 -m
torch.distributed.run). The trainer of bench/peers/torchrun_recovery.sh (one host, N workers)
and of bench/multihost_recovery.py (one worker per host).

Rank 0 prints (t = unix time):
  "start rank=0 restart=R world=W t=..."    first thing (before importing torch)
  "imported restart=R world=W t=..."        after importing torch
  "pg_ready restart=R world=W t=..."        after the process groups are formed
  "resume step=S restart=R world=W t=..."   after building DDP and loading the checkpoint
                                            (S=0: none)
  "step N restart=R world=W t=..."          after every optimizer step
W is the world size of the line's round. Every worker writes RUN_DIR/pid.r<rank>.c<restart> so
that a driver can kill it by pid. Rank 0 saves a checkpoint every --ckpt-every steps (atomic
rename, in --run-dir, which every host must see); --ckpt-every 0 disables checkpointing (a
restart then begins again at step 0).

DDP allreduces in a process group of its own with a --pg-timeout-s timeout (torch's default is
30 min: a peer whose link went down would block the survivors that long); the job's first
rendezvous (init_process_group) keeps a long one, --init-timeout-s, so that a slow start on a
loaded machine is no failure.
"""
import os
import sys
import time
from datetime import timedelta

RESTART = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
if RANK == 0:
    print(f"start rank=0 restart={RESTART} world={WORLD} t={time.time():.6f}", flush=True)

import argparse  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def log(msg):
    if RANK == 0:
        print(f"{msg} restart={RESTART} world={WORLD} t={time.time():.6f}", flush=True)


log("imported")

ap = argparse.ArgumentParser()
ap.add_argument("--run-dir", required=True)
ap.add_argument("--steps", type=int, default=100000)
ap.add_argument("--ckpt-every", type=int, default=10)
ap.add_argument("--step-time", type=float, default=0.066, help="target seconds per step")
ap.add_argument("--pg-timeout-s", type=float, default=2.0)
ap.add_argument("--init-timeout-s", type=float, default=120.0)
args = ap.parse_args()

with open(os.path.join(args.run_dir, f"pid.r{RANK}.c{RESTART}"), "w") as f:
    f.write(str(os.getpid()))

torch.set_num_threads(1)
dist.init_process_group("gloo", timeout=timedelta(seconds=args.init_timeout_s))
# The group the training steps run in: a short timeout, so that a vanished peer fails the step.
group = dist.new_group(timeout=timedelta(seconds=args.pg_timeout_s))
log("pg_ready")
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)),
            process_group=group)
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
ckpt = os.path.join(args.run_dir, "ckpt.pt")

start = 0
if args.ckpt_every and os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"]
log(f"resume step={start}")

gen = torch.Generator().manual_seed(1000 + RANK)
for step in range(start + 1, args.steps + 1):
    t0 = time.time()
    x = torch.randn(32, 64, generator=gen)
    y = x.sum(dim=1, keepdim=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()  # DDP allreduces the gradients over Gloo here
    opt.step()
    if RANK == 0:
        if args.ckpt_every and step % args.ckpt_every == 0:
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step},
                       ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        log(f"step {step}")
    time.sleep(max(0.0, args.step_time - (time.time() - t0)))

dist.destroy_process_group()
sys.exit(0)
