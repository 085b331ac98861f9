#!/usr/bin/python3
"""py_overhead_bench: what elasticity costs a Python (torch) job when nothing fails. The same
loop — Linear(64, 256) → ReLU → Linear(256, 1), data parallel (torch's DistributedDataParallel
over the `phalanx` backend of torch.distributed, on phalanx's collective group: what
phalanx.train.prepare_model returns), SGD, a batch of 32 random rows per rank, steps padded to
10 ms and to 100 ms —
runs twice in the same run, with the same ranks:
  plain       each rank a process of its own, the group formed once, then the bare loop
  controller  phalanx.train.ElasticTrainer: the job's controller drives every step, and each
              step ends with state.commit() (the snapshot of model and optimizer)
Each side's time per step is taken over the steps after the first WARMUP, on rank 0.

    /usr/bin/python3 bench/py_overhead_bench.py [--ranks 4] [--steps-10ms 300]
                                                [--steps-100ms 60]

Last line: RESULT overhead_10ms=... overhead_100ms=... (controller time per step over the
plain loop's, minus 1; goals: <= 0.03 at 10 ms, <= 0.01 at 100 ms)
"""

import argparse
import os
import sys
import tempfile
import time

import phalanx
from phalanx import train

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _local_ranks import run_ranks  # noqa: E402

WARMUP = 10
RUN_TIMEOUT_S = 600  # one side of one setting, at most


def make_model():
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 1))


def compute_step(model, opt, gen):
    """The step's work: forward, backward (the gradients are averaged here), update."""
    import torch
    x = torch.randn(32, 64, generator=gen)
    loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def one_step(model, opt, gen, step_s, t0):
    """The step both sides run: its work, then the padding to step_s."""
    loss = compute_step(model, opt, gen)
    time.sleep(max(0.0, step_s - (time.time() - t0)))
    return loss


def controller_loop(config):
    import torch
    model = train.prepare_model(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    state = train.State(model=model, optimizer=opt, step=0)
    state.restore()
    ctx = train.get_context()
    gen = torch.Generator().manual_seed(1000 + ctx.rank)
    times = []
    while state.step < config["steps"]:
        t0 = time.time()
        loss = one_step(model, opt, gen, config["step_s"], t0)
        state.step += 1
        state.commit()
        times.append(time.time())
        train.report({"loss": loss.item()})
    if ctx.rank == 0:
        with open(config["out"], "w") as f:
            f.write(f"{(times[-1] - times[WARMUP]) / (len(times) - 1 - WARMUP) * 1000:.4f}\n")


def plain_rank(args):
    """One rank of the plain loop (started by main)."""
    import torch
    from phalanx.collective import CollectiveGroup
    group = CollectiveGroup(args.group, address=args.address, token=args.token, timeout=60)
    group.reconfigure(1, args.rank, args.world)
    # DDP over the phalanx backend on that group, as prepare_model sets it up in the loop.
    import phalanx.distributed
    from torch.nn.parallel import DistributedDataParallel
    model = DistributedDataParallel(make_model(),
                                    process_group=phalanx.distributed.process_group(group))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1000 + args.rank)
    times = []
    for _ in range(args.steps):
        t0 = time.time()
        one_step(model, opt, gen, args.step_ms / 1000, t0)
        times.append(time.time())
    if args.rank == 0:
        print(f"plain_ms_per_step "
              f"{(times[-1] - times[WARMUP]) / (len(times) - 1 - WARMUP) * 1000:.4f}", flush=True)


def plain_ms(ranks, step_ms, steps, address, token, tmp):
    out = run_ranks(__file__, ranks, lambda r: [
        "--group", f"pyoverhead-{step_ms}", "--address", address, "--token", token,
        "--step-ms", step_ms, "--steps", steps], tmp, f"plain-{step_ms}", RUN_TIMEOUT_S)
    for line in out.splitlines():
        if line.startswith("plain_ms_per_step "):
            return float(line.split()[1])
    print(f"the plain loop failed:\n{out[-2000:]}", flush=True)
    return -1.0


def controller_ms(ranks, step_ms, steps, tmp):
    out = os.path.join(tmp, f"controller-{step_ms}")
    trainer = train.ElasticTrainer(
        controller_loop,
        train_loop_config={"steps": steps, "step_s": step_ms / 1000, "out": out},
        scaling_config=train.ScalingConfig(num_workers=ranks, resources_per_worker={"CPU": 1}),
        run_config=train.RunConfig(name=f"pyoverhead{step_ms}"), verbose=False)
    result = trainer.fit(timeout=RUN_TIMEOUT_S)
    if result.error is not None or not os.path.exists(out):
        print(f"the controller's run failed: {result.error}", flush=True)
        return -1.0
    with open(out) as f:
        return float(f.read())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps-10ms", type=int, default=300)
    p.add_argument("--steps-100ms", type=int, default=60)
    # One rank of the plain loop.
    p.add_argument("--rank", type=int, default=-1)
    p.add_argument("--world", type=int)
    p.add_argument("--group")
    p.add_argument("--address")
    p.add_argument("--token")
    p.add_argument("--step-ms", type=int)
    p.add_argument("--steps", type=int)
    args = p.parse_args()
    if args.rank >= 0:
        plain_rank(args)
        return
    if not 1 <= args.ranks <= 16:
        sys.exit("--ranks must be within 1..16")
    if min(args.steps_10ms, args.steps_100ms) < WARMUP + 10:
        sys.exit(f"--steps-10ms and --steps-100ms must be >= {WARMUP + 10}")

    print(f"# py_overhead_bench: {args.ranks} ranks, a torch MLP, data parallel (gradients "
          f"over phalanx's group), the plain loop and the same loop under phalanx.train, "
          f"{os.cpu_count()} cores", flush=True)
    phalanx.init(num_cpus=args.ranks + 2)
    from phalanx import _native
    address, token = _native.cluster()[:2]
    print(f"{'step':<8} {'steps':>6} {'plain ms/step':>14} {'controller ms/step':>19} "
          f"{'overhead':>9}", flush=True)
    overhead = {}
    with tempfile.TemporaryDirectory(prefix="pyoverhead.") as tmp:
        for step_ms, steps in ((10, args.steps_10ms), (100, args.steps_100ms)):
            plain = plain_ms(args.ranks, step_ms, steps, address, token, tmp)
            ctrl = controller_ms(args.ranks, step_ms, steps, tmp)
            overhead[step_ms] = ctrl / plain - 1 if plain > 0 and ctrl > 0 else -1
            print(f"{f'{step_ms} ms':<8} {steps:>6} {plain:>14.3f} {ctrl:>19.3f} "
                  f"{100 * overhead[step_ms]:>8.2f}%", flush=True)
    phalanx.shutdown()
    # -1: not measured. Below 0 is noise (the run under the controller was the faster one).
    met10 = -1 < overhead[10] <= 0.03
    met100 = -1 < overhead[100] <= 0.01
    print(f"goals: <= 3% at 10 ms steps: {'met' if met10 else 'missed'}; <= 1% at 100 ms "
          f"steps: {'met' if met100 else 'missed'}", flush=True)
    print(f"RESULT overhead_10ms={overhead[10]:.4f} overhead_100ms={overhead[100]:.4f}")


if __name__ == "__main__":
    main()
