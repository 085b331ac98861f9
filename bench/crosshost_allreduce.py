#!/usr/bin/python3
"""crosshost_allreduce: allreduce bandwidth across 2 hosts x 2 ranks -- Phalanx's hierarchical
collective group against torch.distributed's Gloo, on the same 2 hosts in the same run.

    /usr/bin/python3 bench/crosshost_allreduce.py [--runs 3]

Hosts: 2 network namespaces on a bridge (tests/multihost/netns.py), each with its own address
and hostname, so Phalanx sees 2 machines (no PHALANX_MACHINE_ID). Needs root; where
namespaces cannot be made it prints one line and exits 0.

Phalanx: `phalanx start` on both hosts (for the GCS the group meets through), then 4
processes of `build/bin/allreduce_bench --mode bandwidth --rank R --world 4 --host <its IP>`,
ranks 0-1 on host 0 and 2-3 on host 1: shared memory inside each host, one TCP stream
between the hosts' leaders. torch: 4 processes of bench/peers/allreduce_gloo_torch.py --rank R
--world 4 --master-addr <host 0>, placed the same way, GLOO_SOCKET_IFNAME=eth0 (the host's veth).

Method, the same on both sides (float32, sizes 1, 16 and 64 MiB among others): each iteration
is timed between barriers, an iteration's time is the max over ranks, the median over
iterations is taken; busbw = 2(n-1)/n x bytes / time, n = 4. Each run runs Phalanx then torch;
the table shows the median over --runs of each. Both hosts share this machine's cores, so the
bridge's bandwidth here is that of a memory copy between processes, not of a network.

Last line: RESULT phalanx_busbw_16MiB=.. torch_gloo_busbw_16MiB=.. ratio=.. (GB/s = 1e9 B/s)
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "multihost"))

import _netns_bench  # noqa: E402
import netns  # noqa: E402

PYTHON = "/usr/bin/python3"
PEER_SCRIPT = os.path.join(HERE, "peers", "allreduce_gloo_torch.py")
RANKS_PER_HOST = 2
WORLD = 2 * RANKS_PER_HOST
SIZES = ["1MiB", "16MiB", "64MiB"]
TORCH_PORT = 29500
RUN_BOUND_S = 300          # one side's 4 ranks, start to exit
LINE_RE = re.compile(r"^allreduce\s+(\d+[KM]iB)\s+\d+\s.*\s([\d.]+)\s*$", re.M)


def log(*a):
    print(*a, flush=True)


def busbw(text):
    """{size: allreduce busbw GB/s} from rank 0's table (the last column, both programs)."""
    return {m.group(1): float(m.group(2)) for m in LINE_RE.finditer(text)}


def run_ranks(hosts, argv_of, env_of, tag):
    """Starts rank r = 0..WORLD-1 (argv_of(r, host)) on host r // RANKS_PER_HOST, waits for all
    (at most RUN_BOUND_S), and returns rank 0's output. Raises if a rank failed."""
    procs = []
    for r in range(WORLD):
        host = hosts[r // RANKS_PER_HOST]
        path = os.path.join(hosts.dir, f"{tag}-r{r}.log")
        procs.append((host.spawn(argv_of(r, host), env=env_of(host), log=path), path))
    deadline = time.time() + RUN_BOUND_S
    for r, (proc, path) in enumerate(procs):
        try:
            rc = proc.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            rc = None
        if rc != 0:
            for p, _ in procs:
                if p.poll() is None:
                    p.kill()
            with open(path, errors="replace") as f:
                tail = f.read()[-2000:]
            raise RuntimeError(f"{tag} rank {r}: {'timed out' if rc is None else f'rc {rc}'}:\n"
                               f"{tail}")
    with open(procs[0][1], errors="replace") as f:
        return f.read()


def run_phalanx(hosts, cluster, i):
    binary = os.path.join(netns.bin_dir(), "allreduce_bench")
    return run_ranks(
        hosts,
        lambda r, h: [binary, "--mode", "bandwidth", "--gcs", cluster.address, "--token",
                      cluster.token, "--rank", str(r), "--world", str(WORLD), "--host", h.ip,
                      # A group of its own per run: one name would meet the last run's epochs.
                      "--group", f"crosshost-{i}"],
        lambda h: {},
        f"phalanx-{i}")


def run_torch(hosts, i):
    port = TORCH_PORT + i
    return run_ranks(
        hosts,
        lambda r, h: [PYTHON, PEER_SCRIPT, "--rank", str(r), "--world", str(WORLD),
                      "--master-addr", hosts[0].ip, "--master-port", str(port)],
        lambda h: {"GLOO_SOCKET_IFNAME": h.dev, "OMP_NUM_THREADS": "1"},
        f"torch-{i}")


def report(ours, theirs):
    log("")
    log(f"allreduce busbw GB/s, 2 hosts x 2 ranks, median of {len(ours)} runs")
    log(f"{'size':>6} {'phalanx hier':>13} {'torch gloo':>11} {'ratio':>6}")
    med = {}
    for size in SIZES:
        a = statistics.median(r.get(size, 0.0) for r in ours)
        b = statistics.median(r.get(size, 0.0) for r in theirs)
        med[size] = (a, b)
        log(f"{size:>6} {a:>13.3f} {b:>11.3f} {a / b if b else 0:>6.2f}")
    a, b = med["16MiB"]
    log(f"RESULT phalanx_busbw_16MiB={a:.3f} torch_gloo_busbw_16MiB={b:.3f} "
        f"ratio={a / b if b else 0:.3f} phalanx_busbw_1MiB={med['1MiB'][0]:.3f} "
        f"torch_gloo_busbw_1MiB={med['1MiB'][1]:.3f} phalanx_busbw_64MiB={med['64MiB'][0]:.3f} "
        f"torch_gloo_busbw_64MiB={med['64MiB'][1]:.3f} runs={len(ours)}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    if not _netns_bench.ready("crosshost_allreduce", "allreduce_bench", p, log):
        return 0
    log("# crosshost_allreduce: 2 hosts (network namespaces) x 2 ranks, float32, "
        "busbw = 2(n-1)/n x bytes / median time, GB/s = 1e9 B/s")
    ours, theirs = [], []
    with netns.Hosts(2, log=log) as hosts:
        with netns.Cluster(hosts, num_cpus=2) as cluster:
            for i in range(args.runs):
                out = run_phalanx(hosts, cluster, i)
                ours.append(busbw(out))
                if i == 0:
                    log("## Phalanx hierarchical (run 1), rank 0:\n" + out.strip())
                out = run_torch(hosts, i)
                theirs.append(busbw(out))
                if i == 0:
                    log("## torch.distributed Gloo (run 1), rank 0:\n" + out.strip())
                log(f"  run {i + 1}: 16MiB phalanx {ours[-1].get('16MiB', 0):.3f} GB/s, "
                    f"torch {theirs[-1].get('16MiB', 0):.3f} GB/s")
    report(ours, theirs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
