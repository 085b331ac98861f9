#!/usr/bin/python3
"""object_bench: the object store's put and get, side by side in the same run with a memcpy
of the same bytes (the physical limit of one copy here), and an actor call with a large
argument by ref against by value.

    /usr/bin/python3 bench/object_bench.py [--big-mib 1024] [--arg-mib 100] [--repeats 3]

Measures, one client, numpy float64 arrays of 1 KiB, 1 MiB and --big-mib:
  put       phalanx.put(a) (a small value is pickled into its ref; a large one is written
            once into the node's store in /dev/shm): the first put of the big array writes
            new pages ("first"); the later ones, each after the previous value was freed,
            write into the file that value left (python/phalanx/_object_pool.py, as Ray's
            plasma reuses its arena)
  get       phalanx.get(ref) of that ref in the same process (a large one is mapped: no copy)
  put+get   both, as a value's round trip
  memcpy    np.copyto into a buffer of the same size, touched first (the peer), and into
            a new one, whose pages fault in during the copy
and from 4 client processes at once (each puts and gets its own 1 MiB values), ops/s.
Then, when this runs as root and can mount a tmpfs with huge=within_size (2 MiB pages), the
big put/get again on a local cluster whose store lives there (`--object-store-dir`, Ray's
--plasma-directory: the setting Ray documents for fast puts), against the same memcpy.
Then the actor call: a method that sums a --arg-mib array, given the array (pickled into the
call, through the caller and the worker's gRPC) against given a ref to it put once. Ray
publishes 19.9 GB/s single-client put of large objects on its test machine (printed for
scale, not measured here). Best of --repeats; absolute figures on a busy 2-core machine are
noise, the ratios in the same run are the figures.
Last line:
RESULT put_gbps_big_first=.. put_gbps_big=.. get_gbps_big=.. roundtrip_gbps_big=..
       memcpy_gbps_big=..
       memcpy_new_gbps_big=..
       ratio_roundtrip_vs_memcpy=.. put_ops_1k=.. get_ops_1k=.. put_ops_1m_4clients=..
       actor_arg_by_value_s=.. actor_arg_by_ref_s=.. ratio_ref_vs_value=..
       roundtrip_gbps_big_hugetmpfs=.. ratio_roundtrip_vs_memcpy_hugetmpfs=.. (or "none")
"""

import argparse
import multiprocessing
import os
import subprocess
import tempfile
import time

import numpy as np

import phalanx

RAY_PUT_GBPS = 19.9  # Ray's published single-client put of large objects


@phalanx.remote
class Summer:
    def total(self, a):
        return float(a[::4096].sum())


def best(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def rate(fn, seconds=1.0):
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        n += 1
    return n / (time.perf_counter() - start)


def client(address, token, seconds, queue):
    phalanx.init(address, token=token)
    a = np.random.rand(1 << 17)  # 1 MiB
    queue.put(rate(lambda: phalanx.get(phalanx.put(a)), seconds))
    phalanx.shutdown()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--big-mib", type=int, default=1024)
    p.add_argument("--arg-mib", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    print(f"# object_bench on {os.cpu_count()} cores; best of {args.repeats}", flush=True)
    phalanx.init(num_cpus=4)
    from phalanx import _api
    address, token = _api._native.cluster()[:2]

    small = np.random.rand(128)  # 1 KiB
    put_1k = rate(lambda: phalanx.put(small))
    ref_1k = phalanx.put(small)
    get_1k = rate(lambda: phalanx.get(ref_1k))
    mid = np.random.rand(1 << 17)  # 1 MiB
    put_1m = rate(lambda: phalanx.put(mid))
    ref_1m = phalanx.put(mid)
    get_1m = rate(lambda: phalanx.get(ref_1m))
    print(f"1 KiB: put {put_1k:,.0f}/s get {get_1k:,.0f}/s; 1 MiB: put {put_1m:,.0f}/s "
          f"get {get_1m:,.0f}/s", flush=True)

    big = np.ones(args.big_mib << 17)  # float64: MiB * 2^17 elements
    nbytes = big.nbytes
    target = np.empty_like(big)
    target.fill(0)
    memcpy = best(lambda: np.copyto(target, big), args.repeats)
    target = None
    # The same copy into new memory, whose pages fault in as it goes (as a store's new pages).
    memcpy_new = best(lambda: np.copyto(np.empty_like(big), big), args.repeats)
    first, put, get, trip = measure_big(big, args.repeats)
    gb = nbytes / 1e9
    print(f"{args.big_mib} MiB: first put {gb / first:.2f} GB/s, put {gb / put:.2f} GB/s, "
          f"get {gb / get:.1f} GB/s, put+get "
          f"{gb / trip:.2f} GB/s; memcpy {gb / memcpy:.2f} GB/s into touched memory, "
          f"{gb / memcpy_new:.2f} GB/s into new memory (Ray publishes "
          f"{RAY_PUT_GBPS} GB/s put on its machine)", flush=True)

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=client, args=(address, token, 2.0, queue)) for _ in range(4)]
    for pr in procs:
        pr.start()
    four = sum(queue.get(timeout=120) for _ in procs)
    for pr in procs:
        pr.join(timeout=60)
    print(f"4 clients, 1 MiB put+get: {four:,.0f}/s in all", flush=True)

    arg = np.random.rand(args.arg_mib << 17)
    summer = Summer.remote()
    phalanx.get(summer.total.remote(np.ones(8)), timeout=120)
    by_value = best(lambda: phalanx.get(summer.total.remote(arg), timeout=300), args.repeats)
    arg_ref = phalanx.put(arg)
    by_ref = best(lambda: phalanx.get(summer.total.remote(arg_ref), timeout=300), args.repeats)
    print(f"actor call with a {args.arg_mib} MiB argument: by value {by_value:.3f} s, by ref "
          f"{by_ref:.4f} s ({by_value / by_ref:.0f}x)", flush=True)
    phalanx.shutdown()
    arg = arg_ref = None
    huge = huge_tmpfs_roundtrip(big, args.repeats, nbytes)
    if huge is None:
        huge_fields = "roundtrip_gbps_big_hugetmpfs=none ratio_roundtrip_vs_memcpy_hugetmpfs=none"
    else:
        print(f"{args.big_mib} MiB with the store on a huge-page tmpfs: put+get "
              f"{gb / huge:.2f} GB/s, {memcpy / huge:.2f} of the memcpy", flush=True)
        huge_fields = (f"roundtrip_gbps_big_hugetmpfs={gb / huge:.2f} "
                       f"ratio_roundtrip_vs_memcpy_hugetmpfs={memcpy / huge:.2f}")
    print(f"RESULT put_gbps_big_first={gb / first:.2f} put_gbps_big={gb / put:.2f} "
          f"get_gbps_big={gb / get:.1f} "
          f"roundtrip_gbps_big={gb / trip:.2f} memcpy_gbps_big={gb / memcpy:.2f} "
          f"memcpy_new_gbps_big={gb / memcpy_new:.2f} "
          f"ratio_roundtrip_vs_memcpy={memcpy / trip:.2f} put_ops_1k={put_1k:.0f} "
          f"get_ops_1k={get_1k:.0f} put_ops_1m_4clients={four:.0f} "
          f"actor_arg_by_value_s={by_value:.3f} actor_arg_by_ref_s={by_ref:.4f} "
          f"ratio_ref_vs_value={by_value / by_ref:.1f} {huge_fields}")


def measure_big(big, repeats):
    """(first put, put, get, put+get) seconds of `big`: the first put into new pages, then
    the best of `repeats` of each."""
    holder = {}
    t = time.perf_counter()
    holder["ref"] = phalanx.put(big)
    first = time.perf_counter() - t

    def put_big():
        holder.pop("ref", None)  # the previous one is freed first
        holder["ref"] = phalanx.put(big)
    put = best(put_big, repeats)
    get = best(lambda: phalanx.get(holder["ref"]), repeats)

    def roundtrip():
        holder.pop("ref", None)
        phalanx.get(phalanx.put(big))
    trip = best(roundtrip, repeats)
    holder.clear()
    return first, put, get, trip


def huge_tmpfs_roundtrip(big, repeats, nbytes):
    """put+get seconds of `big` on a local cluster whose store is a tmpfs with huge pages, or
    None when none can be mounted here (not root, or no shmem THP in the kernel)."""
    mount = tempfile.mkdtemp(prefix="phalanx-bench-huge-")
    size = f"{(3 * nbytes) // (1 << 20) + 64}m"
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},huge=within_size",
                          "tmpfs", mount], capture_output=True, text=True)
    if out.returncode != 0:
        print(f"# no huge-page tmpfs here ({out.stderr.strip() or 'mount failed'})", flush=True)
        os.rmdir(mount)
        return None
    try:
        phalanx.init(num_cpus=2, _plasma_directory=mount)
        try:
            return measure_big(big, repeats)[3]
        finally:
            phalanx.shutdown()
    finally:
        subprocess.run(["umount", mount], capture_output=True)
        os.rmdir(mount)


if __name__ == "__main__":
    main()
