#!/usr/bin/python3
"""task_bench: remote functions (tasks) per second from one client, side by side with the same
calls made as actor calls in the same run, on the same machine.

    /usr/bin/python3 bench/task_bench.py [--seconds 3] [--num-cpus 4]

Measures, one client, a no-op function taking and returning a small int:
  sync   f.remote(i), then get, one at a time (latency-bound: one hop to a pooled worker)
  async  a window of f.remote(i), then get them all (throughput; the pool leases up to one
         worker per CPU of the local cluster)
and the peer: the same calls as actor calls (`actor.f.remote(i)`) to one Python actor, and to
as many actors as the tasks may use workers (round robin). Ray publishes 8k async tasks/s from
one client on a 64-vCPU machine (release/benchmarks, "single client tasks async"); that line is
printed for scale, not measured here.
Last line:
RESULT task_sync_per_s=... task_async_per_s=... actor_sync_per_s=... actor_async_per_s=...
       actor_pool_async_per_s=... ratio_sync=... ratio_async=...
       (ratio = tasks / actor calls to one actor)
"""

import argparse
import os
import sys

import _phalanx
import phalanx
from py_actor_bench import Echo, async_rate, sync_rate  # the actor benchmark's actor and loops

RAY_ASYNC_TASKS_PER_S = 8000  # Ray's published single-client async tasks/s, 64 vCPU


@phalanx.remote
def echo(x):
    return x


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
            workers = sum(s["workers"] for s in _phalanx.task_pool_stats())
    rows["actor_pool_async"] = async_rate(pool_call, args.seconds, window=5000)
    print(f"tasks    sync {rows['task_sync']:9.0f}/s   async {rows['task_async']:9.0f}/s   "
          f"({workers} pooled workers)")
    print(f"actor    sync {rows['actor_sync']:9.0f}/s   async {rows['actor_async']:9.0f}/s   "
          f"(1 actor)")
    print(f"actors               async {rows['actor_pool_async']:9.0f}/s   "
          f"({len(actors)} actors, round robin)")
    print(f"Ray, published: {RAY_ASYNC_TASKS_PER_S}/s async tasks from one client on 64 vCPU; "
          f"here {rows['task_async'] / RAY_ASYNC_TASKS_PER_S:.2f}x that on "
          f"{os.cpu_count()} cores (different machines: for scale only)")
    phalanx.shutdown()
    print("RESULT " + " ".join(f"{k}_per_s={v:.0f}" for k, v in rows.items()) +
          f" ratio_sync={rows['task_sync'] / rows['actor_sync']:.2f}"
          f" ratio_async={rows['task_async'] / rows['actor_async']:.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
