#!/usr/bin/python3
"""py_actor_bench: Python actor calls per second, side by side with the same calls to a C++
actor from C++ (build/bin/actor_bench) in the same run, on the same machine.

    /usr/bin/python3 bench/py_actor_bench.py [--seconds 3]

Measures, 1 caller : 1 actor, a no-op method taking and returning a small int:
  sync   call, then get, one at a time (latency-bound)
  async  submit a window of calls, then get them all (throughput)
for a Python actor from Python, a C++ actor from Python, and (actor_bench) a C++ actor from
C++. Last line:
RESULT py_sync_calls_per_s=... py_async_calls_per_s=... cpp_sync_calls_per_s=...
       cpp_async_calls_per_s=... ratio=...   (ratio = py_async / cpp_async)
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

from phalanx import _native
import phalanx


@phalanx.remote
class Echo:
    def echo(self, x):
        return x


def sync_rate(call, seconds):
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        phalanx.get(call(n))
        n += 1
    return n / (time.perf_counter() - start)


def async_rate(call, seconds, window=20000):
    rates = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t = time.perf_counter()
        refs = [call(i) for i in range(window)]
        phalanx.get(refs, timeout=120)
        rates.append(window / (time.perf_counter() - t))
    return statistics.median(rates)


def latency_us(call, n=2000):
    samples = []
    for i in range(n):
        t = time.perf_counter()
        phalanx.get(call(i))
        samples.append((time.perf_counter() - t) * 1e6)
    samples.sort()
    return samples[len(samples) // 2], samples[int(len(samples) * 0.99)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()

    print(f"# py_actor_bench: {args.seconds:.0f} s per measurement, 1 caller : 1 actor, "
          f"{os.cpu_count()} cores shared by all parts", flush=True)
    phalanx.init(num_cpus=4)
    py_actor = Echo.remote()
    cpp_actor = phalanx.cpp_actor_class(
        "Greeter", os.path.join(_native.BIN_DIR, "actors_quickstart")).remote("hi")
    phalanx.get([py_actor.echo.remote(0), cpp_actor.Count.remote()], timeout=60)
    py_call = py_actor.echo.remote
    cpp_call = lambda i: cpp_actor.Greet.remote("x")  # noqa: E731
    sync_rate(py_call, 0.5)  # warm up

    p50, p99 = latency_us(py_call)
    print(f"latency  Python → Python actor  p50 {p50:7.1f} us  p99 {p99:7.1f} us", flush=True)
    py_sync = sync_rate(py_call, args.seconds)
    py_async = async_rate(py_call, args.seconds)
    print(f"calls/s  Python → Python actor  sync {py_sync:9.0f}   async {py_async:9.0f}",
          flush=True)
    pc_sync = sync_rate(cpp_call, args.seconds)
    pc_async = async_rate(cpp_call, args.seconds)
    print(f"calls/s  Python → C++ actor     sync {pc_sync:9.0f}   async {pc_async:9.0f}",
          flush=True)
    phalanx.shutdown()

    # The peer: the same calls to a C++ actor from C++, measured by actor_bench now.
    bench = os.path.join(_native.BIN_DIR, "actor_bench")
    out = subprocess.run([bench], capture_output=True, text=True, timeout=600)
    line = [l for l in out.stdout.splitlines() if l.startswith("RESULT")]
    if out.returncode != 0 or not line:
        print(out.stdout + out.stderr)
        sys.exit("actor_bench failed")
    values = dict(re.findall(r"(\w+)=([\d.]+)", line[-1]))
    cpp_sync = float(values["sync_calls_per_s"])
    cpp_async = float(values["async_calls_per_s"])
    print(f"calls/s  C++ → C++ actor        sync {cpp_sync:9.0f}   async {cpp_async:9.0f}  "
          f"(actor_bench, same run)", flush=True)
    print(f"RESULT py_sync_calls_per_s={py_sync:.0f} py_async_calls_per_s={py_async:.0f} "
          f"cpp_sync_calls_per_s={cpp_sync:.0f} cpp_async_calls_per_s={cpp_async:.0f} "
          f"ratio={py_async / cpp_async:.3f}")


if __name__ == "__main__":
    main()
