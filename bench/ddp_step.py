#!/usr/bin/python3
"""ddp_step: the step time of torch's DistributedDataParallel over the `phalanx` backend of
torch.distributed, against DDP over torch's own Gloo backend (its peer, at its defaults: 25 MiB
buckets, one Gloo TCP pair per rank pair over loopback), in the same processes and the same
run, alternating rounds. A third column times phalanx.train's DataParallel (gradients
averaged after backward ends, over the same collective group), which prepare_model returned
before DDP did; a fourth the same step with no communication at all (each rank's own
compute, with the others computing beside it), the floor under both.

The model: Linear(2048, 3072) → ReLU → Linear(3072, 1): 25.2 MiB of float32 gradients, a batch
of 8 rows per rank, SGD. Each rank is a process of its own. Layouts: 2 and 4 ranks on this
host, and 2x2: 2 network-namespace hosts of 2 ranks each (as root; skipped with one line
where namespaces cannot be made).

    /usr/bin/python3 bench/ddp_step.py [--layouts 2,4,2x2] [--steps 20] [--rounds 3]

Lines: one per layout with each side's median ms per step on rank 0, the ratio (phalanx /
gloo: below 1 is faster) and the comm ratio (the same over each side's time above compute).
Last line: RESULT ratio=<4 ranks> ratio_2=<2 ranks> ratio_2x2=<2 hosts x 2>
dataparallel_ratio=<DataParallel / DDP over phalanx, 4 ranks> (goals: ratio <= 0.5 on one
host, ratio_2x2 <= 0.8).
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _local_ranks import run_ranks  # noqa: E402

RUN_TIMEOUT_S = 600


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import phalanx
    import phalanx.distributed
    from phalanx.collective import CollectiveGroup
    from phalanx.train._data_parallel import DataParallel

    torch.set_num_threads(1)
    # One host: loopback; hosts (network namespaces): each host's own link.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo" if args.master == "127.0.0.1" else "eth0")
    phalanx.init(args.address, token=args.token)
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}:{args.port}",
                            rank=args.rank, world_size=args.world)
    group = CollectiveGroup(args.group, timeout=120, host=args.host or None)
    group.reconfigure(1, args.rank, args.world)
    ph = phalanx.distributed.process_group(group)

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(2048, 3072), torch.nn.ReLU(),
                                   torch.nn.Linear(3072, 1))

    sides = {"gloo": DDP(make()), "phalanx": DDP(make(), process_group=ph),
             "dataparallel": DataParallel(make(), group), "compute": make()}
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-4) for k, m in sides.items()}
    gen = torch.Generator().manual_seed(args.rank)
    x = torch.randn(8, 2048, generator=gen)
    y = torch.randn(8, 1, generator=gen)
    times = {k: [] for k in sides}
    for _ in range(args.rounds):
        for name, model in sides.items():
            for i in range(args.steps + 2):
                dist.barrier()
                t0 = time.perf_counter()
                loss = torch.nn.functional.mse_loss(model(x), y)
                opts[name].zero_grad()
                loss.backward()
                opts[name].step()
                if i >= 2:  # the first steps of a round warm the buckets up
                    times[name].append(time.perf_counter() - t0)
    if args.rank == 0:
        for name, t in times.items():
            print(f"ms_per_step {name} {statistics.median(t) * 1000:.3f}", flush=True)
    dist.barrier()
    phalanx.shutdown()


def parse(out, what):
    ms = {}
    for line in out.splitlines():
        if line.startswith("ms_per_step "):
            _, name, value = line.split()
            ms[name] = float(value)
    if len(ms) != 4:
        print(f"the {what} run failed:\n{out[-3000:]}", flush=True)
    return ms


def two_hosts(args, tmp):
    """2 hosts x 2 ranks: network-namespace hosts (tests/multihost/netns.py) with a cluster
    of their own; ranks 0 and 1 on host 0, 2 and 3 on host 1. Each side's bytes between the
    hosts go over the veth link (Gloo's pairs, phalanx's TCP), within a host Gloo's pairs
    over the same link and phalanx's shared memory. None where namespaces cannot be made."""
    import _netns_bench
    netns = _netns_bench.netns
    why = netns.unavailable()
    if why:
        print(f"2x2: skipped ({why})", flush=True)
        return None
    with netns.Hosts(2) as hosts, netns.Cluster(hosts, num_cpus=4) as cluster:
        port = 29500
        procs = []
        for r in range(4):
            h = hosts[r // 2]
            procs.append(h.spawn(
                [sys.executable, os.path.abspath(__file__), "--rank", r, "--world", 4,
                 "--address", cluster.address, "--token", cluster.token, "--port", port,
                 "--master", hosts[0].ip, "--host", h.ip, "--group", "ddpstep-2x2",
                 "--steps", args.steps, "--rounds", args.rounds],
                env={"OMP_NUM_THREADS": "1"}, log=os.path.join(tmp, f"2x2-{r}.log")))
        deadline = time.time() + RUN_TIMEOUT_S
        for p in procs:
            try:
                p.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()  # the rest: the Hosts' clean-up, by pid
                p.wait()
        with open(os.path.join(tmp, "2x2-0.log")) as f:
            return parse(f.read(), "2 hosts x 2")


def layout(world, args, address, token, tmp):
    port = _free_port()
    out = run_ranks(__file__, world, lambda r: [
        "--address", address, "--token", token, "--port", port,
        "--group", f"ddpstep-{world}-{port}", "--steps", args.steps, "--rounds", args.rounds],
        tmp, f"w{world}", RUN_TIMEOUT_S)
    return parse(out, f"{world}-rank")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layouts", default="2,4,2x2")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rank", type=int, default=-1)
    p.add_argument("--world", type=int)
    p.add_argument("--address")
    p.add_argument("--token")
    p.add_argument("--port", type=int)
    p.add_argument("--group")
    p.add_argument("--master", default="127.0.0.1")
    p.add_argument("--host", default="")
    args = p.parse_args()
    if args.rank >= 0:
        rank_main(args)
        return
    layouts = args.layouts.split(",")
    local = [int(w) for w in layouts if w != "2x2"]
    import phalanx
    from phalanx import _native
    print(f"# ddp_step: DDP over phalanx vs DDP over torch's Gloo (and phalanx.train's "
          f"DataParallel), 25.2 MiB of gradients, {os.cpu_count()} cores", flush=True)
    print(f"{'ranks':<6} {'gloo ms':>9} {'phalanx ms':>11} {'DataParallel ms':>16} "
          f"{'compute ms':>11} {'ratio':>7} {'comm ratio':>11}", flush=True)
    ratios, dp = {}, {}

    def row(name, ms):
        if len(ms) != 4:
            return
        ratios[name] = ms["phalanx"] / ms["gloo"]
        dp[name] = ms["dataparallel"] / ms["phalanx"]
        # The part of a step that is not the model's own compute, each side's.
        comm = ((ms["phalanx"] - ms["compute"]) / (ms["gloo"] - ms["compute"])
                if ms["gloo"] > ms["compute"] else -1)
        print(f"{name:<6} {ms['gloo']:>9.2f} {ms['phalanx']:>11.2f} "
              f"{ms['dataparallel']:>16.2f} {ms['compute']:>11.2f} "
              f"{ratios[name]:>7.3f} {comm:>11.3f}", flush=True)

    with tempfile.TemporaryDirectory(prefix="ddpstep.") as tmp:
        if local:
            phalanx.init(num_cpus=max(local) + 2)
            address, token = _native.cluster()[:2]
            for world in local:
                row(str(world), layout(world, args, address, token, tmp))
            phalanx.shutdown()
        if "2x2" in layouts:
            ms = two_hosts(args, tmp)
            if ms is not None:
                row("2x2", ms)
    print(f"RESULT ratio={ratios.get('4', -1):.3f} ratio_2={ratios.get('2', -1):.3f} "
          f"ratio_2x2={ratios.get('2x2', -1):.3f} "
          f"dataparallel_ratio={dp.get('4', -1):.3f}")


if __name__ == "__main__":
    main()
