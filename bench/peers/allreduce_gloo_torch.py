#!/usr/bin/python3
"""Peer baseline: torch.distributed (Gloo, CPU) collectives, N processes on this machine or one
rank per host.

Usage: /usr/bin/python3 allreduce_gloo_torch.py [--nproc 2] [--min-iters 20]
       /usr/bin/python3 allreduce_gloo_torch.py --rank R --world N --master-addr IP
           [--master-port P]   one rank of N, e.g. on a host of its own (rank 0 listens at
                               IP:P; set GLOO_SOCKET_IFNAME to the host's device)

The peer of build/bin/allreduce_bench (every rank on this machine) and, in the one-rank
mode, of bench/crosshost_allreduce.py (one process per rank, on hosts of their own); both
modes time the ops the same way.

Prints one line per (op, size): median / p10 / p90 latency over the timed
iterations, plus algbw and busbw in GB/s (1e9 B/s), as nccl-tests define them:
  allreduce: busbw = algbw * 2(n-1)/n
  allgather: busbw = algbw * (n-1)/n   (size = total gathered bytes, n*per-rank)
  broadcast: busbw = algbw
Each iteration is timed separately between barriers; the per-iteration time is
the max over ranks (all-reduced with MAX at the end), then the median is taken.
b2b_us is the nccl-tests-style mean of the same number of back-to-back calls
(no barriers in between; max over ranks). Bandwidths use the median.
"""
import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

KiB, MiB = 1 << 10, 1 << 20
PLAN = [  # (op, bytes)
    ("allreduce", 4 * KiB), ("allreduce", 64 * KiB), ("allreduce", 1 * MiB),
    ("allreduce", 16 * MiB), ("allreduce", 64 * MiB),
    ("allgather", 1 * MiB), ("allgather", 16 * MiB),
    ("broadcast", 1 * MiB), ("broadcast", 16 * MiB),
]
BUSBW_FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n,
                "allgather": lambda n: (n - 1) / n,
                "broadcast": lambda n: 1.0}


def iters_for(nbytes, min_iters):
    # more iterations for small messages; never fewer than min_iters
    n = 500 if nbytes <= 64 * KiB else 100 if nbytes <= MiB else 40 if nbytes <= 16 * MiB else 0
    return max(min_iters, n)


def make_op(op, nbytes, rank, world):
    n = nbytes // 4  # float32 elements
    if op == "allreduce":
        t = torch.ones(n)
        return lambda: dist.all_reduce(t)
    if op == "allgather":
        t = torch.ones(n // world)
        out = [torch.empty(n // world) for _ in range(world)]
        return lambda: dist.all_gather(out, t)
    if op == "broadcast":
        t = torch.ones(n)
        return lambda: dist.broadcast(t, src=0)
    raise ValueError(op)


def worker(rank, world, port, min_iters, warmup, addr="127.0.0.1"):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}",
                            rank=rank, world_size=world)
    if rank == 0:
        print(f"# torch {torch.__version__}, backend gloo, world={world}, "
              f"warmup={warmup}, GB/s = 1e9 B/s", flush=True)
        print(f"{'op':<10} {'size':>8} {'iters':>5} {'median_us':>10} {'p10_us':>9} "
              f"{'p90_us':>9} {'b2b_us':>9} {'algbw_GB/s':>10} {'busbw_GB/s':>10}", flush=True)
    for op, nbytes in PLAN:
        fn = make_op(op, nbytes, rank, world)
        for _ in range(warmup):
            fn()
        iters = iters_for(nbytes, min_iters)
        times = torch.zeros(iters, dtype=torch.float64)
        for i in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            times[i] = time.perf_counter() - t0
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        b2b = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        dist.all_reduce(b2b, op=dist.ReduceOp.MAX)
        if rank == 0:
            ts = sorted(times.tolist())
            med = statistics.median(ts)
            p10, p90 = ts[int(0.1 * (iters - 1))], ts[int(0.9 * (iters - 1))]
            algbw = nbytes / med / 1e9
            busbw = algbw * BUSBW_FACTOR[op](world)
            size = f"{nbytes // MiB}MiB" if nbytes >= MiB else f"{nbytes // KiB}KiB"
            print(f"{op:<10} {size:>8} {iters:>5} {med * 1e6:>10.1f} {p10 * 1e6:>9.1f} "
                  f"{p90 * 1e6:>9.1f} {b2b.item() * 1e6:>9.1f} {algbw:>10.3f} {busbw:>10.3f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--min-iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rank", type=int, default=-1, help="run this one rank only")
    ap.add_argument("--world", type=int, default=0)
    ap.add_argument("--master-addr", default="127.0.0.1")
    ap.add_argument("--master-port", type=int, default=29500)
    a = ap.parse_args()
    if a.rank >= 0:
        worker(a.rank, a.world, a.master_port, a.min_iters, a.warmup, a.master_addr)
        raise SystemExit(0)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # keep Gloo on loopback
    mp.spawn(worker, args=(a.nproc, free_port(), a.min_iters, a.warmup), nprocs=a.nproc)
