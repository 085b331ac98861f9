"""What the Python benchmarks that start their own rank processes on this machine share:
start one process per rank, wait for all of them within a bound (killing, by pid, any still
running past it), and hand back rank 0's output."""

import os
import subprocess
import sys
import time


def run_ranks(script, world, rank_args, tmp, tag, timeout_s):
    """Runs `script` once per rank r in 0..world-1 as `python script --rank r --world world
    *rank_args(r)`, each with OMP_NUM_THREADS=1 and its output in tmp/<tag>-<r>.log, and waits
    for all of them (timeout_s for the lot); returns rank 0's output."""
    procs = []
    for r in range(world):
        log = open(os.path.join(tmp, f"{tag}-{r}.log"), "w")
        procs.append((subprocess.Popen(
            [sys.executable, os.path.abspath(script), "--rank", str(r), "--world", str(world),
             *[str(a) for a in rank_args(r)]],
            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1")),
            log))
    deadline = time.time() + timeout_s
    for p, log in procs:
        try:
            p.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()
    with open(os.path.join(tmp, f"{tag}-0.log")) as f:
        return f.read()
