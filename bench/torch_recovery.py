#!/usr/bin/python3
"""torch_recovery: a DDP training job on 3 hosts (one rank each) hit by a SIGKILL of a rank, a
SIGSTOP of a rank, and a cut of a rank's host; how long until the survivors update again, and
until the job is back at full strength. Three systems on the same hosts, in the same run:

  phalanx        examples/python/ddp_digits.py (a Ray Train script: DDP, a DataLoader, dist.*
                 calls) under phalanx.train on the `phalanx` backend of torch.distributed,
                 submitted by tests/multihost/ddp_driver.py on host 0
  phalanx-gloo   the same job with TorchConfig(backend="gloo"): torch's own Gloo group, formed
                 again through a TCPStore at each membership change
  torchrun       bench/peers/train_elastic.py (a DDP MLP over Gloo, rank 0 checkpointing every
                 10 steps) under torchrun at its best documented settings (--monitor_interval
                 0.1, c10d rendezvous on host 0); its training process group's timeout is
                 --pg-timeout-s (torch's default: 1800 s)

    bench/torch_recovery.py [--runs 1] [--faults kill,stop,cut] [--pg-timeout-s 30]
    (as root: network namespaces; where they cannot be made it prints one line and exits 0)

Every system pads its steps to 66 ms. The fault hits a non-head host that does not hold the
Phalanx job's controller (torchrun's agents lose the same host). stop: SIGSTOP of the rank's
process, SIGCONT once the survivors resumed (or after the bound); cut: `ip link set eth0 down`,
up again once they resumed. resume: the fault -> the survivors' first update (Phalanx: the
ranks' own update log, the first update at world size 2; torchrun, which restarts every worker:
rank 0's first step line of a later restart round); full: -> the first update at world size 3
again (torchrun's restarted workers are at full strength when the victim's host takes part);
redone: updates made before the fault and made again after it (Phalanx rolls back to the
last step every rank committed; torchrun to its last checkpoint). Medians over --runs.

Last line: RESULT kill_ratio=.. stop_ratio=.. cut_ratio=.. (phalanx's resume over torchrun's;
a '<' ratio where torchrun did not resume within the bound) and each system's medians.
"""

import argparse
import contextlib
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "multihost"))
sys.path.insert(0, HERE)

import _netns_bench  # noqa: E402
import cluster_info  # noqa: E402
import multihost_recovery as mr  # noqa: E402
import netns  # noqa: E402

PYTHON = "/usr/bin/python3"
DRIVER = os.path.join(HERE, "..", "tests", "multihost", "ddp_driver.py")
STEP_S = 0.066
FAULT_AFTER_STEPS = 40   # updates at world size 3 before the fault
START_BOUND_S = 180


def log(*a):
    print(*a, flush=True)


def ddp_steps(path):
    """[(step, unix_ms, world, round)] of the ranks' updates (ddp_digits' step_log), by time;
    a Phalanx job keeps its processes, so every update is of round 0."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 4:
                    t, _, world, step = (int(x) for x in parts)
                    out.append((step, t, world, 0))
    except FileNotFoundError:
        pass
    return sorted(out, key=lambda s: s[1])


def torchrun_steps(logs):
    """[(step, unix_ms, world, restart)] of rank 0's step lines, by time."""
    out = [(int(m.group(1)), int(float(m.group(4)) * 1000), int(m.group(3)), int(m.group(2)))
           for m in mr.TORCH_STEP_RE.finditer(mr.read_logs(logs))]
    return sorted(out, key=lambda s: s[1])


def measure(steps_fn, apply, undo, in_place):
    """Applies the fault, waits for the survivors' first update after it, undoes the fault,
    waits for full strength. `in_place`: the survivors go on at world size 2 (Phalanx); else
    every worker restarts (torchrun), and the first update of a later round counts."""
    before = steps_fn()
    fault_ms = mr.now_ms()
    apply()
    round_at = max((s[3] for s in before), default=0)

    def resumed():
        for s in steps_fn():
            if s[1] > fault_ms and (s[2] < 3 if in_place else s[3] > round_at):
                return s
        return None

    first = mr.wait_for(resumed, mr.RESUME_BOUND_S)
    undo()
    since = first[1] if first else fault_ms

    def full():
        for s in steps_fn():
            if s[1] >= since and s[2] == 3 and (in_place or s[3] > round_at):
                return s
        return None

    back = mr.wait_for(full, mr.FULL_BOUND_S)
    done_before = max((s[0] for s in steps_fn() if s[1] <= fault_ms), default=0)
    return {"resume_s": (first[1] - fault_ms) / 1000.0 if first else None,
            "full_s": (back[1] - fault_ms) / 1000.0 if back else None,
            # Updates made before the fault and made again after it.
            "lost": max(0, done_before - (first[0] - 1)) if first else None}


def fault_fns(fault, host, pid):
    """(apply, undo) for `fault` on `host` (its rank's process is `pid`)."""
    if fault == "cut":
        return host.link_down, host.link_up
    if fault == "stop":
        def cont():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        return (lambda: os.kill(pid, signal.SIGSTOP)), cont
    return (lambda: os.kill(pid, signal.SIGKILL)), (lambda: None)


def run_phalanx(hosts, fault, backend, tag):
    cluster = netns.Cluster(hosts, num_cpus=2, node_timeout_ms=2000)
    try:
        cluster.start()
        out = os.path.join(hosts.dir, tag)
        hosts[0].spawn([PYTHON, DRIVER, "--address", cluster.address, "--token", cluster.token,
                        "--out", out, "--backend", backend, "--epochs", "1000",
                        "--step-sleep", str(STEP_S), "--timeout", "900"],
                       log=os.path.join(hosts.dir, f"{tag}.log"))
        steps = lambda: ddp_steps(os.path.join(out, "steps"))  # noqa: E731
        if not mr.wait_for(lambda: len([s for s in steps() if s[2] == 3]) >= 3 *
                           FAULT_AFTER_STEPS, START_BOUND_S):
            raise RuntimeError(f"{tag}: never ran {FAULT_AFTER_STEPS} steps at world size 3:\n"
                               + open(os.path.join(hosts.dir, f"{tag}.log")).read()[-2000:])
        with open(os.path.join(out, "job_id")) as f:
            job_id = f.read().strip()
        ctl = cluster_info.wait_controller(cluster, job_id)
        victim = next(i for i in range(1, len(hosts)) if ctl is None or ctl[0] != i)
        pid = next(p for h, p, _ in cluster_info.ranks(cluster) if h == victim)
        apply, undo = fault_fns(fault, hosts[victim], pid)
        res = measure(steps, apply, undo, in_place=True)
        cluster.phalanx(0, "job", "stop", job_id, "--grace", "2", timeout=60)
        return res, victim
    finally:
        for h in hosts:
            if not h.link_is_up():
                h.link_up()
        cluster.stop()


def run_torchrun(hosts, victim, fault, tag, args):
    run_dir = os.path.join(hosts.dir, tag)
    os.makedirs(run_dir)
    try:
        logs = [mr.start_agent(h, hosts[0], run_dir, args) for h in hosts]
        steps = lambda: torchrun_steps(logs)  # noqa: E731
        if not mr.wait_for(lambda: [s for s in steps() if s[0] >= FAULT_AFTER_STEPS and
                                    s[2] == 3], START_BOUND_S):
            raise RuntimeError(f"{tag}: torchrun never reached step {FAULT_AFTER_STEPS}")
        # The worker on the victim host: its pid file is the newest of its rank.
        pids = {}
        for name in os.listdir(run_dir):
            if name.startswith("pid.r"):
                with open(os.path.join(run_dir, name)) as f:
                    pid = int(f.read())
                if pid in hosts[victim].pids():
                    pids[os.path.getmtime(os.path.join(run_dir, name))] = pid
        pid = pids[max(pids)] if pids else None
        if pid is None and fault != "cut":
            raise RuntimeError(f"{tag}: no worker of torchrun found on host {victim}")
        apply, undo = fault_fns(fault, hosts[victim], pid)
        return measure(steps, apply, undo, in_place=False)
    finally:
        for h in hosts:
            if not h.link_is_up():
                h.link_up()
        mr.kill_host_processes(hosts)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--faults", default="kill,stop,cut")
    p.add_argument("--pg-timeout-s", type=float, default=30.0,
                   help="torchrun's training process group timeout (torch's default: 1800)")
    args = p.parse_args()
    if not _netns_bench.ready("torch_recovery", "phalanx", p, log):
        return 0
    mr.STEP_MS = int(STEP_S * 1000)
    faults = args.faults.split(",")
    systems = ("phalanx", "phalanx-gloo", "torchrun")
    log(f"# torch_recovery: 3 hosts (network namespaces), a DDP job with one rank each, "
        f"{int(STEP_S * 1000)} ms steps; faults {', '.join(faults)}; Phalanx node timeout 2 s, "
        f"liveness probe 1 s; torchrun --monitor_interval 0.1, process group timeout "
        f"{args.pg_timeout_s} s")
    results = {(f, s): [] for f in faults for s in systems}
    for i in range(args.runs):
        for fault in faults:
            try:
                with netns.Hosts(3, log=log) as hosts, mr.host_names(hosts):
                    ph, victim = run_phalanx(hosts, fault, "phalanx", f"ph-{fault}-{i}")
                    pg, _ = run_phalanx(hosts, fault, "gloo", f"pg-{fault}-{i}")
                    tr = run_torchrun(hosts, victim, fault, f"tr-{fault}-{i}", args)
            except Exception as e:  # noqa: BLE001 -- a failed run is reported, the others go on
                log(f"  run {i + 1} {fault} FAILED: {e}")
                continue
            for name, r in zip(systems, (ph, pg, tr)):
                results[(fault, name)].append(r)
                log(f"  run {i + 1} {fault:<4} {name:<13} resume {mr.show(r['resume_s'])} s, "
                    f"full strength {mr.show(r['full_s'])} s, updates redone {r['lost']}")
    log("")
    log(f"{'fault':<6} {'system':<13} {'resume s':>9} {'full s':>9} {'redone':>7}")
    out = {}
    for fault in faults:
        for name in systems:
            rs = results[(fault, name)]
            resume = mr.median(r["resume_s"] for r in rs)
            full = mr.median(r["full_s"] for r in rs)
            lost = mr.median(r["lost"] for r in rs)
            out[(fault, name)] = resume
            log(f"{fault:<6} {name:<13} {mr.show(resume, mr.RESUME_BOUND_S):>9} "
                f"{mr.show(full):>9} {mr.show(lost):>7}")
    fmt = lambda x: "none" if x is None else f"{x:.3f}"  # noqa: E731
    parts = []
    for fault in faults:
        text, _ = mr.ratio(out[(fault, "phalanx")], out[(fault, "torchrun")], mr.RESUME_BOUND_S)
        parts.append(f"{fault}_ratio={text.split()[0]}")
        for name in systems:
            parts.append(f"{fault}_{name.replace('-', '_')}_s={fmt(out[(fault, name)])}")
    log("RESULT " + " ".join(parts) + f" runs={args.runs} torch_pg_timeout_s={args.pg_timeout_s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
