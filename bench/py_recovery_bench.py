#!/usr/bin/python3
"""py_recovery_bench: how fast a Python elastic job (phalanx.train, a torch model) heals after
kill -9 of one of its 4 ranks, against torchrun's elastic restart of the same model and loop
(bench/peers/torchrun_recovery.sh with bench/peers/train_elastic.py) in the same run.

    /usr/bin/python3 bench/py_recovery_bench.py [--runs 3]

Both sides: 4 workers on this machine, Linear(64, 256) → ReLU → Linear(256, 1) data parallel
(DDP over Gloo for torchrun, what phalanx.train.prepare_model gives for Phalanx) with SGD, a
batch of 32 random rows per rank, steps padded to 66 ms; rank 1 is SIGKILLed at a random
point of the step after the 55th (each side watches its ranks' per-step log, so the kill lands
in that step). The peer runs at its best documented settings: torchrun --monitor_interval=0.1.

Phalanx, per run:
  survivors' next step  kill → the first step the 3 survivors complete (its update applied,
                        before its padding: where torchrun's side logs its steps)
  full strength         kill → the first step completed with 4 ranks again (the replacement
                        has started, imported torch, joined and received the state)
  steps lost            read from the state: every rank counts, in its phalanx.train.State, the
                        updates applied to its model; the survivors' first step after the kill
                        starts from H of them, and the job had committed C before the kill
                        (C = the updates every rank had logged): C - H were lost
torchrun, per run: kill → the first step after its restart (all 4 workers are restarted, so
this is also its full strength); steps lost since the checkpoint it resumed from.

Last line: RESULT phalanx_recovery_s=... phalanx_full_strength_s=... torchrun_recovery_s=...
           ratio=... full_strength_ratio=... phalanx_steps_lost=... torchrun_steps_lost=...
(ratios: Phalanx's median over torchrun's median; goals: ratio <= 0.05, full strength <= 0.5 s)
"""

import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from phalanx import _native
import phalanx
from phalanx import train
from py_overhead_bench import compute_step, make_model

HERE = os.path.dirname(os.path.abspath(__file__))
RANKS = 4
STEP_S = 0.066
KILL_AFTER = 55     # rank 1 dies during the step after this many committed ones
STEPS = 110
RUN_TIMEOUT_S = 180  # one Phalanx run, start to end
PEER_TIMEOUT_S = 900


def train_loop(config):
    """The peer's loop (bench/peers/train_elastic.py) under phalanx.train — the model and the
    step are py_overhead_bench's — with a line per step in config["log"]: pid rank
    updates_before unix_ms world_size computed_unix_ms (unix_ms: the step's end, just before
    its commit; computed_unix_ms: its update applied, before the padding, where the peer logs
    its steps)."""
    import torch
    model = train.prepare_model(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    state = train.State(model=model, optimizer=opt, updates=0)
    state.restore()
    ctx = train.get_context()
    gen = torch.Generator().manual_seed(1000 + ctx.rank)
    log = os.open(config["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while state.updates < config["steps"]:
            t0 = time.time()
            # The gradients are averaged over the job's ranks in its backward().
            loss = compute_step(model, opt, gen)
            computed = time.time()
            time.sleep(max(0.0, config["step_s"] - (computed - t0)))
            before = state.updates
            state.updates = before + 1
            # One short write to an O_APPEND file: the ranks' lines never interleave.
            os.write(log, f"{os.getpid()} {ctx.rank} {before} {time.time() * 1000:.1f} "
                          f"{ctx.world_size} {computed * 1000:.1f}\n".encode())
            state.commit()
            train.report({"loss": loss.item()})
    finally:
        os.close(log)


def read_log(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.endswith("\n"):
                pid, rank, before, ms, world, computed = line.split()
                rows.append((int(pid), int(rank), int(before), float(ms), int(world),
                             float(computed)))
    return rows


def one_run(run, dir_path, rng, imports):
    log = os.path.join(dir_path, f"updates-{run}.log")
    trainer = train.ElasticTrainer(
        train_loop, train_loop_config={"log": log, "steps": STEPS, "step_s": STEP_S},
        scaling_config=train.ScalingConfig(num_workers=(1, RANKS),
                                           resources_per_worker={"CPU": 1}),
        run_config=train.RunConfig(name=f"pyrecovery{run}",
                                   failure_config=train.FailureConfig(max_failures=5)),
        prestart_imports=imports, verbose=False)
    job_id = trainer.submit()
    deadline = time.time() + RUN_TIMEOUT_S
    kill_ms = None
    rows = []
    while time.time() < deadline:
        if kill_ms is None and os.path.exists(log):
            rows = read_log(log)
            done = [r for r in rows if r[2] == KILL_AFTER - 1 and r[4] == RANKS]
            victim = [r[0] for r in done if r[1] == 1]
            if len(done) == RANKS and victim:
                time.sleep(rng.uniform(0, STEP_S))  # a random point of the step
                kill_ms = time.time() * 1000
                os.kill(victim[0], signal.SIGKILL)
        status = train.job_status(job_id)
        if status.state in ("SUCCEEDED", "FAILED", "STOPPED"):
            break
        time.sleep(0.001 if kill_ms is None else 0.1)
    else:
        _native.stop_job(job_id)
        print(f"run {run}: the job did not end within {RUN_TIMEOUT_S} s", flush=True)
        return None
    if kill_ms is None:
        print(f"run {run}: the job ended ({status.state}) before the kill", flush=True)
        return None
    rows = read_log(log)
    # Committed before the kill: the updates every one of the 4 ranks had logged by then.
    per_rank = {}
    for pid, rank, before, ms, world, _ in rows:
        if ms <= kill_ms and world == RANKS:
            per_rank[pid] = max(per_rank.get(pid, -1), before + 1)
    committed = min(per_rank.values()) if len(per_rank) >= RANKS else 0
    after = [r for r in rows if r[3] > kill_ms]
    first3 = next((r for r in after if r[4] < RANKS), None)
    if first3 is None:
        print(f"run {run}: no step with fewer ranks after the kill ({status.state})", flush=True)
        return None
    back4 = next((r for r in after if r[4] == RANKS and r[3] > first3[3]), None)
    # Each side's step counts from the time its update is applied, before its padding: the
    # peer (bench/peers/train_elastic.py) logs its steps there.
    out = {
        "recovery_s": (first3[5] - kill_ms) / 1000,
        "padded_s": (first3[3] - kill_ms) / 1000,
        "full_s": (back4[5] - kill_ms) / 1000 if back4 else None,
        "lost": committed - first3[2],
        "committed": committed,
        "state": status.state,
    }
    print(f"run {run}: killed after {committed} committed steps (aimed at {KILL_AFTER}); "
          f"survivors' next step after {out['recovery_s']:.3f} s (world {first3[4]}; its "
          f"padding ended after {out['padded_s']:.3f} s), full "
          f"strength after {out['full_s'] if out['full_s'] is None else round(out['full_s'], 3)}"
          f" s; their state held {first3[2]} updates: committed steps lost {out['lost']}; "
          f"job {status.state}", flush=True)
    return out


def warm_workers():
    """(pid, PSS, RSS in MiB) of this machine's idle prestarted workers that imported torch
    ahead: started idle (PHALANX_WORKER_POOLED=1) with PHALANX_WORKER_IMPORTS naming torch,
    and still alive once every job ended (the jobs' ranks are gone by then)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            if env.get(b"PHALANX_WORKER_POOLED") != b"1" or \
                    b"torch" not in env.get(b"PHALANX_WORKER_IMPORTS", b"").split(b","):
                continue
            with open(f"/proc/{pid}/smaps_rollup") as f:
                kb = {line.split(":")[0]: int(line.split()[1]) for line in f if "kB" in line}
            found.append((int(pid), kb["Pss"] / 1024, kb["Rss"] / 1024))
        except (OSError, ValueError, KeyError):
            continue
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--peer", default=os.path.join(HERE, "peers", "torchrun_recovery.sh"))
    parser.add_argument("--prestart-imports", default="torch",
                        help="modules the prestarted workers import ahead, comma-separated "
                             "('' : none, the replacement imports torch itself)")
    args = parser.parse_args()
    imports = [m for m in args.prestart_imports.split(",") if m]
    if args.runs < 1:
        sys.exit("--runs must be >= 1")
    if not os.path.exists(args.peer):
        sys.exit(f"the peer {args.peer} is missing: give its path with --peer")

    print(f"# py_recovery_bench: {args.runs} runs, {RANKS} ranks, {STEP_S * 1000:.0f} ms steps, "
          f"kill -9 of rank 1 during the step after {KILL_AFTER} committed ones, prestarted "
          f"workers import {imports or 'nothing'} ahead, {os.cpu_count()} cores", flush=True)
    phalanx.init(num_cpus=8)
    rng = random.Random(1)
    outs = []
    with tempfile.TemporaryDirectory(prefix="pyrecovery.") as d:
        for run in range(1, args.runs + 1):
            o = one_run(run, d, rng, imports)
            if o:
                outs.append(o)
    # Wait (a bounded while) for the last job's ranks to be gone, then measure what the warm
    # replacements cost while they wait.
    time.sleep(2)
    warm = warm_workers()
    for pid, pss, rss in warm:
        print(f"idle prestarted worker {pid} with torch imported: PSS {pss:.0f} MiB, RSS "
              f"{rss:.0f} MiB", flush=True)
    phalanx.shutdown()

    env = dict(os.environ, STEPS="80", NPROC=str(RANKS), KILL_AT=str(KILL_AFTER),
               STEP_TIME=str(STEP_S), KILL_JITTER=str(STEP_S))
    cmd = ["timeout", str(PEER_TIMEOUT_S), "bash", args.peer, "c10d", str(args.runs),
           "--monitor_interval=0.1"]
    print(f"## torchrun: STEPS=80 NPROC={RANKS} KILL_AT={KILL_AFTER} STEP_TIME={STEP_S} "
          f"KILL_JITTER={STEP_S} {' '.join(cmd[3:])}", flush=True)
    peer = subprocess.run(cmd, env=env, capture_output=True, text=True,
                          timeout=PEER_TIMEOUT_S + 30)
    print(peer.stdout + peer.stderr, end="", flush=True)

    def summary(key):
        m = re.search(key + r": n=\d+ min=[\d.]+ median=([\d.]+)", peer.stdout)
        return float(m.group(1)) if m else -1.0

    theirs, their_lost = summary("kill_to_first_step_s"), summary("lost_steps")
    if not outs:
        sys.exit("no Phalanx run completed")
    rec = statistics.median(o["recovery_s"] for o in outs)
    padded = statistics.median(o["padded_s"] for o in outs)
    fulls = [o["full_s"] for o in outs if o["full_s"] is not None]
    full = statistics.median(fulls) if fulls else -1.0
    lost = max(o["lost"] for o in outs)
    exact = sum(o["committed"] == KILL_AFTER for o in outs)
    print(f"phalanx: survivors' next step median {rec:.3f} s (its padding ended after "
          f"{padded:.3f} s), full strength median {full:.3f} s "
          f"(n={len(outs)}); committed steps lost, read from the ranks' state: at most {lost}; "
          f"killed in the aimed step in {exact} of {len(outs)}", flush=True)
    ratio = rec / theirs if theirs > 0 else 0
    full_ratio = full / theirs if theirs > 0 and full > 0 else 0
    print(f"goals: survivors' next step <= 1/20 of torchrun's restart: "
          f"{'met' if 0 < ratio <= 0.05 else 'missed'} ({ratio:.3f}); full strength <= 0.5 s: "
          f"{'met' if 0 < full <= 0.5 else 'missed'} ({full:.3f} s)", flush=True)
    pss = sum(w[1] for w in warm)
    print(f"warm replacements: {len(warm)} idle workers with torch imported on this node, "
          f"PSS {pss:.0f} MiB in all", flush=True)
    print(f"RESULT phalanx_recovery_s={rec:.3f} phalanx_full_strength_s={full:.3f} "
          f"torchrun_recovery_s={theirs:.2f} ratio={ratio:.3f} full_strength_ratio="
          f"{full_ratio:.3f} phalanx_steps_lost={lost} torchrun_steps_lost={their_lost:.0f} "
          f"warm_workers={len(warm)} warm_pss_mib={pss:.0f}")


if __name__ == "__main__":
    main()
