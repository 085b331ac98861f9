#!/usr/bin/python3
"""task_bench: remote functions (tasks) per second from one client, side by side with the same
calls made as actor calls in the same run, on the same machine.

    /usr/bin/python3 bench/task_bench.py [--seconds 3] [--num-cpus 4]

Measures, one client, a no-op function taking and returning a small int:
  sync   f.remote(i), then get, one at a time (latency-bound: one hop to a pooled worker)
  async  a window of f.remote(i), then get them all (throughput; the pool leases up to one
         worker per CPU of the local cluster)
and the peer: the same calls as actor calls (`actor.f.remote(i)`) to one Python actor, and to
as many actors as the tasks may use workers (round robin). Then:
  nested  trees of tasks of depth 3 (a root, 4 children, 16 grandchildren: 21 tasks), each
          parent waiting in get for its children; the peer: the same 21 no-op tasks submitted
          flat by the client (what nesting costs). The tree is deeper than the CPUs: it
          finishes because a waiting task lends its CPU.
  async   calls of an `async def` method of an async actor; the peer: the same calls to a
          plain actor. And 16 calls of `await asyncio.sleep(0.1)` at once: their wall time
          (0.1 s when they overlap, as in Ray; 1.6 s one at a time). Ray publishes 8k async tasks/s from
one client on a 64-vCPU machine (release/benchmarks, "single client tasks async"); that line is
printed for scale, not measured here.
Last line:
RESULT task_sync_per_s=... task_async_per_s=... actor_sync_per_s=... actor_async_per_s=...
       actor_pool_async_per_s=... nested_per_s=... flat_per_s=... async_actor_per_s=...
       ratio_sync=... ratio_async=... ratio_nested=... ratio_async_actor=... overlap_s=...
       (ratio = tasks / actor calls to one actor; nested / flat; async actor / plain actor)
"""

import argparse
import asyncio
import os
import sys
import time

from phalanx import _native
import phalanx
from py_actor_bench import Echo, async_rate, sync_rate  # the actor benchmark's actor and loops

RAY_ASYNC_TASKS_PER_S = 8000  # Ray's published single-client async tasks/s, 64 vCPU


@phalanx.remote
def echo(x):
    return x


TREE_FANOUT, TREE_TASKS = 4, 1 + 4 + 16


@phalanx.remote
def tree(depth):
    if depth == 0:
        return 1
    return 1 + sum(phalanx.get([tree.remote(depth - 1) for _ in range(TREE_FANOUT)]))


@phalanx.remote
class AsyncEcho:
    async def echo(self, x):
        return x

    async def sleep(self, s):
        await asyncio.sleep(s)
        return s


def tree_rate(seconds):
    """Tasks/s through trees of depth 3, one tree at a time."""
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        assert phalanx.get(tree.remote(2), timeout=300) == TREE_TASKS
        n += TREE_TASKS
    return n / (time.perf_counter() - start)


def flat_rate(seconds):
    """The peer: the same number of no-op tasks, submitted by the client, one batch at a time."""
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        phalanx.get([echo.remote(i) for i in range(TREE_TASKS)], timeout=300)
        n += TREE_TASKS
    return n / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--num-cpus", type=int, default=4)
    args = parser.parse_args()
    print(f"# task_bench: {args.seconds:.0f} s per measurement, one client, a local cluster of "
          f"{args.num_cpus} CPUs on {os.cpu_count()} cores shared by all parts", flush=True)
    phalanx.init(num_cpus=args.num_cpus)

    task = echo.remote
    phalanx.get([task(i) for i in range(200)], timeout=120)  # lease the workers once
    actor = Echo.remote()
    actors = [actor] + [Echo.remote() for _ in range(args.num_cpus - 1)]
    phalanx.get([a.echo.remote(0) for a in actors], timeout=120)
    actor_call = actor.echo.remote
    rr = {"i": 0}

    def pool_call(i):
        rr["i"] += 1
        return actors[rr["i"] % len(actors)].echo.remote(i)

    rows = {}
    for name, call in (("task", task), ("actor", actor_call)):
        sync_rate(call, 0.5)
        rows[f"{name}_sync"] = sync_rate(call, args.seconds)
        rows[f"{name}_async"] = async_rate(call, args.seconds, window=5000)
        if name == "task":  # before idle ones are returned
            workers = sum(s["workers"] for s in _native.task_pool_stats())
    rows["actor_pool_async"] = async_rate(pool_call, args.seconds, window=5000)
    print(f"tasks    sync {rows['task_sync']:9.0f}/s   async {rows['task_async']:9.0f}/s   "
          f"({workers} pooled workers)")
    print(f"actor    sync {rows['actor_sync']:9.0f}/s   async {rows['actor_async']:9.0f}/s   "
          f"(1 actor)")
    print(f"actors               async {rows['actor_pool_async']:9.0f}/s   "
          f"({len(actors)} actors, round robin)")
    tree_rate(0.5)  # lease the pools of the tree's levels
    rows["nested"] = tree_rate(args.seconds)
    rows["flat"] = flat_rate(args.seconds)
    aecho = AsyncEcho.remote()
    phalanx.get(aecho.echo.remote(0), timeout=120)
    rows["async_actor"] = async_rate(aecho.echo.remote, args.seconds, window=5000)
    t = time.perf_counter()
    phalanx.get([aecho.sleep.remote(0.1) for _ in range(16)], timeout=120)
    overlap_s = time.perf_counter() - t
    print(f"nested   {rows['nested']:9.0f} tasks/s in trees of depth 3 ({TREE_TASKS} tasks, "
          f"fan-out {TREE_FANOUT}, on {args.num_cpus} CPUs)   flat, the same tasks from the "
          f"client: {rows['flat']:9.0f}/s")
    print(f"async    {rows['async_actor']:9.0f} calls/s to an async actor (plain actor: "
          f"{rows['actor_async']:.0f}/s); 16 x asyncio.sleep(0.1) at once took "
          f"{overlap_s:.2f} s")
    print(f"Ray, published: {RAY_ASYNC_TASKS_PER_S}/s async tasks from one client on 64 vCPU; "
          f"here {rows['task_async'] / RAY_ASYNC_TASKS_PER_S:.2f}x that on "
          f"{os.cpu_count()} cores (different machines: for scale only)")
    phalanx.shutdown()
    print("RESULT " + " ".join(f"{k}_per_s={v:.0f}" for k, v in rows.items()) +
          f" ratio_sync={rows['task_sync'] / rows['actor_sync']:.2f}"
          f" ratio_async={rows['task_async'] / rows['actor_async']:.2f}"
          f" ratio_nested={rows['nested'] / rows['flat']:.2f}"
          f" ratio_async_actor={rows['async_actor'] / rows['actor_async']:.2f}"
          f" overlap_s={overlap_s:.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
