#!/usr/bin/python3
"""multihost_recovery: a host's link goes down under an elastic job on 3 hosts; how long until
the survivors train again, and until the job is back at full strength -- Phalanx and torchrun
side by side, in the same run, on the same 3 hosts.

    bench/multihost_recovery.sh [--runs 3] [--node-timeout-ms 2000] [--pg-timeout-s 2]

Hosts: 3 network namespaces on a bridge (tests/multihost/netns.py), each with its own address
and hostname. Needs root; where namespaces cannot be made it prints one line and exits 0.

Phalanx: `phalanx start` on each host (node timeout --node-timeout-ms), an elastic regression
job (examples/cpp/elastic_regression, one rank per host: replicas 3, min 2, max 3, steps of
STEP_MS) submitted with `phalanx job submit -f` on host 0. Both sides time a step where
torchrun's worker prints it: when its update is applied, before the step is padded to STEP_MS
(RegressionTrainer's stepPad: "after"). Phalanx's times come from the ranks' update log (a line
per applied update: pid, step, updates before it, unix ms, world size); the controller's step
log ("step unix_ms world_size" per agreed step, one padding later) gives the committed figures,
also printed, and the steps lost.

torchrun: one agent per host (`python3 -m torch.distributed.run --nnodes 2:3
--nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint <host 0>:PORT --monitor_interval 0.1`,
rendezvous store on host 0, which is never cut), running bench/peers/train_elastic.py (DDP over
Gloo on the host's veth, steps of STEP_MS, a checkpoint every CKPT_EVERY steps; its training
process group has a --pg-timeout-s timeout, torch's default being 30 min). Times come from the
step lines rank 0 prints ("step N restart=R world=W t=unix time"), merged over the 3 hosts.

Each run, for each system in turn on the same hosts:
  1. start, wait until the job runs at world size 3 and passes step FAULT_STEP;
  2. cut: `ip link set eth0 down` on one non-head host (for Phalanx, one that does not hold the
     job's controller; torchrun's agents lose the same host);
  3. resume: cut -> the first step the survivors complete after the cut (world size 2);
  4. the link comes back up as soon as they did (or after RESUME_BOUND_S);
  5. full strength: cut -> the first step completed at world size 3 again (also reported from
     the moment the link came back);
  6. committed steps lost: how far the completed step went backwards, summed over the whole
     run (torchrun restarts every rank from its last checkpoint, at the cut and again when the
     host joins back; Phalanx rolls back to its in-memory commit).
Medians over --runs. Every wait is bounded (the *_BOUND_S constants); a system that does not
get there within a bound is reported as "did not ... within X s" and its ratio is taken against
the bound (an upper bound of the ratio, labelled '<'). Every process is killed by pid at the
end (the harness), and /etc/netns/<namespace>/hosts (the hosts' names for torchrun's
MASTER_ADDR) is removed.

Last line: RESULT phalanx_resume_s=.. torchrun_resume_s=.. resume_ratio=..
  phalanx_full_s=.. torchrun_full_s=.. full_ratio=.. phalanx_steps_lost=.. torchrun_steps_lost=..
  phalanx_committed_resume_s=..
"""

import argparse
import contextlib
import os
import re
import shutil
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "multihost"))

import _netns_bench  # noqa: E402
import cluster_info  # noqa: E402
import netns  # noqa: E402
from jobs import ElasticRun, analyze_steps, now_ms, read_int_rows  # noqa: E402

PYTHON = "/usr/bin/python3"
PEER_SCRIPT = os.path.join(HERE, "peers", "train_elastic.py")

STEP_MS = 66               # time per training step, both systems (as recovery_bench)
FAULT_STEP = 105           # the cut: midway between two of torchrun's checkpoints
CKPT_EVERY = 10            # torchrun's checkpoint interval (steps)
PHALANX_STEPS = 100000     # more than a run needs: the job is stopped once measured
TORCH_STEPS = 100000
TORCH_PORT = 29400         # the c10d rendezvous store on host 0
TORCH_MAX_RESTARTS = 10
TORCH_LAST_CALL_S = 1      # rendezvous: wait this long for more nodes once min (2) joined
TORCH_JOIN_TIMEOUT_S = 600 # rendezvous: give up joining after this long (torch's default)

START_BOUND_S = 180        # start -> world size 3 and step FAULT_STEP
RESUME_BOUND_S = 120       # cut -> the survivors' next step
FULL_BOUND_S = 120         # link up -> a step at world size 3
STOP_BOUND_S = 30          # `phalanx job stop` -> the submit command exits
POLL_S = 0.02


def log(*a):
    print(*a, flush=True)


# -- shared --------------------------------------------------------------------------------

@contextlib.contextmanager
def host_names(hosts):
    """Each host resolves every host's hostname (torchrun's agents hand the workers their
    rank-0 host by name, socket.getfqdn()): /etc/netns/<ns>/hosts, which `ip netns exec`
    mounts over /etc/hosts in that namespace only. Removed at exit."""
    lines = ["127.0.0.1 localhost"] + [f"{h.ip} {h.hostname}" for h in hosts]
    made = []
    try:
        for h in hosts:
            d = f"/etc/netns/{h.name}"
            os.makedirs(d, exist_ok=True)
            made.append(d)
            with open(os.path.join(d, "hosts"), "w") as f:
                f.write("\n".join(lines) + "\n")
        yield
    finally:
        for d in made:
            shutil.rmtree(d, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir("/etc/netns")  # only when empty: not ours otherwise


def wait_for(predicate, bound_s):
    """Polls predicate() until it returns something true; that value, or None after bound_s."""
    deadline = time.time() + bound_s
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(POLL_S)
    return None


def first_after(steps, t_ms, world=None, below=None):
    """The first (step, ms, world) completed after unix time t_ms (with that world size, or a
    world size below `below`), or None."""
    for s in steps:
        if s[1] > t_ms and (world is None or s[2] == world) and (below is None or s[2] < below):
            return s
    return None


def measure(steps_fn, cut_fn, link_up_fn, applied_fn=None):
    """Steps 2-6 of the docstring for one system: cut, wait for the survivors' step, link up,
    wait for world size 3. steps_fn() returns [(step, unix_ms, world)] completed (committed) so
    far; applied_fn(), where given, the steps' updates as the ranks applied them, which then
    time the resume and full strength (the committed ones are kept as committed_*)."""
    timed_fn = applied_fn or steps_fn
    cut_ms = now_ms()
    cut_fn()
    resumed = wait_for(lambda: first_after(timed_fn(), cut_ms, below=3), RESUME_BOUND_S)
    up_ms = now_ms()
    link_up_fn()
    full = wait_for(lambda: first_after(timed_fn(), up_ms, world=3), FULL_BOUND_S)
    steps = steps_fn()
    committed = {}
    if applied_fn is not None:
        c_resumed = wait_for(lambda: first_after(steps_fn(), cut_ms, below=3), FULL_BOUND_S)
        c_full = wait_for(lambda: first_after(steps_fn(), up_ms, world=3), FULL_BOUND_S)
        steps = steps_fn()
        committed = {
            "committed_resume_s": (c_resumed[1] - cut_ms) / 1000.0 if c_resumed else None,
            "committed_full_s": (c_full[1] - cut_ms) / 1000.0 if c_full else None,
        }
    return {
        **committed,
        "cut_ms": cut_ms,
        "resume_s": (resumed[1] - cut_ms) / 1000.0 if resumed else None,
        "full_s": (full[1] - cut_ms) / 1000.0 if full else None,
        "up_to_full_s": (full[1] - up_ms) / 1000.0 if full else None,
        "link_down_s": (up_ms - cut_ms) / 1000.0,
        "lost": analyze_steps(steps, cut_ms)["lost"],
        "last_before": max((s[0] for s in steps if s[1] <= cut_ms), default=0),
    }


# -- Phalanx -------------------------------------------------------------------------------

def applied_steps(path):
    """[(step, unix_ms, world)] of every update the ranks applied (the update log), by time."""
    return sorted(((r[1], r[3], r[4]) for r in read_int_rows(path, 5)), key=lambda s: s[1])


def run_phalanx(hosts, tag, args):
    """One Phalanx measurement on `hosts`; (result dict, the cut host's index)."""
    cluster = netns.Cluster(hosts, num_cpus=2, node_timeout_ms=args.node_timeout_ms)
    try:
        cluster.start()
        updates = os.path.join(hosts.dir, f"{tag}-updates.log")
        run = ElasticRun(cluster, hosts.dir, tag=tag, steps=PHALANX_STEPS, step_ms=STEP_MS,
                         hang_s=args.hang_s, config={"stepPad": "after", "updateLog": updates})
        run.submit()
        if run.wait_world(3, timeout=START_BOUND_S) is None:
            raise RuntimeError(f"phalanx: never reached world size 3:\n{run.output()[-2000:]}")
        ctl = cluster_info.wait_controller(cluster, run.job_id)
        victim = next(i for i in range(1, len(hosts)) if ctl is None or ctl[0] != i)
        run.wait_step(FAULT_STEP, timeout=START_BOUND_S)
        res = measure(run.steps, hosts[victim].link_down, hosts[victim].link_up,
                      applied_fn=lambda: applied_steps(updates))
        res["controller_host"] = ctl[0] if ctl else None
        cluster.phalanx(0, "job", "stop", run.job_id, "--grace", "2", timeout=60)
        run.wait_done(timeout=STOP_BOUND_S)
        return res, victim
    finally:
        for h in hosts:
            if not h.link_is_up():
                h.link_up()
        cluster.stop()


# -- torchrun ------------------------------------------------------------------------------

TORCH_STEP_RE = re.compile(r"step (\d+) restart=(\d+) world=(\d+) t=([\d.]+)")
TORCH_START_RE = re.compile(r"start rank=0 restart=(\d+) world=(\d+) t=([\d.]+)")


def read_logs(logs):
    text = ""
    for path in logs:
        try:
            with open(path, errors="replace") as f:
                text += f.read()
        except OSError:
            pass
    return text


def torch_steps(logs):
    """[(step, unix_ms, world)] from rank 0's step lines in every agent's log, by time."""
    out = [(int(m.group(1)), int(float(m.group(4)) * 1000), int(m.group(3)))
           for m in TORCH_STEP_RE.finditer(read_logs(logs))]
    return sorted(out, key=lambda s: s[1])


def torch_restart_s(logs, cut_ms):
    """Cut -> the first worker process started after it (rank 0's "start" line): the time
    torchrun took to see the failure and form a new rendezvous round; None if none."""
    starts = sorted(float(m.group(3)) * 1000 for m in TORCH_START_RE.finditer(read_logs(logs)))
    later = [t for t in starts if t > cut_ms]
    return (later[0] - cut_ms) / 1000.0 if later else None


def start_agent(host, head, run_dir, args):
    """torchrun's agent on `host`, its rendezvous store on `head`; returns its log's path."""
    logdir = os.path.join(run_dir, f"logs-h{host.index}")
    os.makedirs(logdir, exist_ok=True)
    conf = (f"join_timeout={TORCH_JOIN_TIMEOUT_S},last_call_timeout={TORCH_LAST_CALL_S},"
            f"is_host={'1' if host is head else '0'}")
    argv = [PYTHON, "-m", "torch.distributed.run",
            "--nnodes", "2:3", "--nproc_per_node", "1",
            "--rdzv_backend", "c10d", "--rdzv_endpoint", f"{head.ip}:{TORCH_PORT}",
            "--rdzv_id", os.path.basename(run_dir), "--rdzv_conf", conf,
            "--monitor_interval", "0.1", "--max_restarts", str(TORCH_MAX_RESTARTS),
            # torch 1.13 on Python 3.11 needs non-zero values here: "0" parses to None and
            # torchrun crashes (as bench/peers/torchrun_recovery.sh says).
            "--redirects", "1", "--tee", "1", "--log_dir", logdir,
            PEER_SCRIPT, "--run-dir", run_dir, "--steps", str(TORCH_STEPS),
            "--ckpt-every", str(CKPT_EVERY), "--step-time", str(STEP_MS / 1000.0),
            "--pg-timeout-s", str(args.pg_timeout_s)]
    path = os.path.join(run_dir, f"agent-h{host.index}.log")
    env = {"GLOO_SOCKET_IFNAME": host.dev, "OMP_NUM_THREADS": "1"}
    host.spawn(argv, env=env, log=path)
    return path


def kill_host_processes(hosts):
    """SIGKILL every process living on the hosts, by pid (the agents and their workers)."""
    for h in hosts:
        for pid in h.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def run_torchrun(hosts, victim, tag, args):
    """One torchrun measurement on `hosts`, cutting host `victim`; the result dict."""
    run_dir = os.path.join(hosts.dir, tag)
    os.makedirs(run_dir)
    try:
        logs = [start_agent(h, hosts[0], run_dir, args) for h in hosts]
        steps = lambda: torch_steps(logs)  # noqa: E731
        started = wait_for(lambda: [s for s in steps() if s[0] >= FAULT_STEP and s[2] == 3],
                           START_BOUND_S)
        if not started:
            tails = "\n".join(open(p, errors="replace").read()[-1500:] for p in logs)
            raise RuntimeError(f"torchrun: never reached step {FAULT_STEP} at world 3:\n{tails}")
        res = measure(steps, hosts[victim].link_down, hosts[victim].link_up)
        res["restart_s"] = torch_restart_s(logs, res["cut_ms"])
        return res
    finally:
        for h in hosts:
            if not h.link_is_up():
                h.link_up()
        kill_host_processes(hosts)


# -- report --------------------------------------------------------------------------------

def median(values):
    """Median of the values that are not None, or None."""
    v = [x for x in values if x is not None]
    return statistics.median(v) if v else None


def show(x, bound=None):
    if x is None:
        return f"did not within {bound} s" if bound else "-"
    return f"{x:.2f}"


def ratio(a, b, b_bound):
    """a / b with b = the bound (and a '<' label) when b never happened."""
    if a is None:
        return "-", None
    if b is None:
        return f"<{a / b_bound:.3f} (torchrun: bound {b_bound} s)", a / b_bound
    return f"{a / b:.3f}", a / b


def report(results, args):
    ph = [r["phalanx"] for r in results]
    tr = [r["torchrun"] for r in results]
    rows = [("cut -> survivors' next step (s)", "resume_s", RESUME_BOUND_S),
            ("cut -> world size 3 again (s)", "full_s", RESUME_BOUND_S + FULL_BOUND_S),
            ("link up -> world size 3 again (s)", "up_to_full_s", FULL_BOUND_S),
            ("link down for (s)", "link_down_s", None),
            ("committed steps lost", "lost", None)]
    log("")
    log(f"{'median of ' + str(len(results)) + ' runs':<36} {'phalanx':>10} {'torchrun':>10}")
    med = {}
    for label, key, bound in rows:
        a = median(x[key] for x in ph)
        b = median(x[key] for x in tr)
        missing = sum(x[key] is None for x in tr)
        med[key] = (a, b)
        note = f"  (torchrun: {missing}/{len(tr)} runs did not get there within {bound} s)" \
            if missing and bound else ""
        log(f"{label:<36} {show(a):>10} {show(b):>10}{note}")
    resume_txt, resume_r = ratio(med["resume_s"][0], med["resume_s"][1], RESUME_BOUND_S)
    full_txt, full_r = ratio(med["full_s"][0], med["full_s"][1], RESUME_BOUND_S + FULL_BOUND_S)
    c_resume = median(x.get("committed_resume_s") for x in ph)
    c_full = median(x.get("committed_full_s") for x in ph)
    log(f"{'phalanx at the commit (resume, full)':<36} {show(c_resume):>10} {show(c_full):>10}")
    log(f"ratio phalanx/torchrun: resume {resume_txt}, full strength {full_txt}")
    log("(resume: the cut -> the first step whose update was applied after it, at world size 2 "
        "(Phalanx: the ranks' update log; torchrun: rank 0's step lines, printed as its update "
        "is applied); full strength: the cut -> the first such step at world size 3, after the "
        "link came back up once the survivors had resumed; at the commit: the controller's step "
        "log, one step's padding later; steps lost: how far the committed step went backwards "
        "over the run)")
    f = lambda x: "none" if x is None else f"{x:.3f}"  # noqa: E731
    lost_a, lost_b = med["lost"]
    log(f"RESULT phalanx_resume_s={f(med['resume_s'][0])} "
        f"torchrun_resume_s={f(med['resume_s'][1])} resume_ratio={f(resume_r)} phalanx_full_s={f(med['full_s'][0])} "
        f"torchrun_full_s={f(med['full_s'][1])} full_ratio={f(full_r)} "
        f"phalanx_steps_lost={f(lost_a)} torchrun_steps_lost={f(lost_b)} "
        f"phalanx_committed_resume_s={f(c_resume)} runs={len(results)} "
        f"node_timeout_ms={args.node_timeout_ms} torch_pg_timeout_s={args.pg_timeout_s}")


def run_once(i, args):
    """One run: Phalanx, then torchrun, on the same 3 fresh hosts."""
    with netns.Hosts(3, log=log) as hosts, host_names(hosts):
        t0 = time.time()
        ph, victim = run_phalanx(hosts, f"phalanx-{i}", args)
        log(f"  run {i + 1} phalanx  (cut host {victim}, controller on host "
            f"{ph['controller_host']}): resume {show(ph['resume_s'], RESUME_BOUND_S)} s, "
            f"full strength {show(ph['full_s'])} s (link up -> full {show(ph['up_to_full_s'])} s); "
            f"committed: {show(ph['committed_resume_s'])} s and {show(ph['committed_full_s'])} s; "
            f"steps lost {ph['lost']} [{time.time() - t0:.0f} s wall]")
        t0 = time.time()
        tr = run_torchrun(hosts, victim, f"torchrun-{i}", args)
        log(f"  run {i + 1} torchrun (cut host {victim}): resume "
            f"{show(tr['resume_s'], RESUME_BOUND_S)} s (new workers started "
            f"{show(tr['restart_s'])} s after the cut), full strength {show(tr['full_s'])} s "
            f"(link up -> full {show(tr['up_to_full_s'], FULL_BOUND_S)} s), steps lost "
            f"{tr['lost']} (last step before the cut {tr['last_before']}) "
            f"[{time.time() - t0:.0f} s wall]")
        return {"phalanx": ph, "torchrun": tr}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--node-timeout-ms", type=int, default=2000)
    p.add_argument("--hang-s", type=float, default=10)
    p.add_argument("--pg-timeout-s", type=float, default=2.0,
                   help="torchrun's training process group timeout (torch's default: 1800)")
    args = p.parse_args()
    if not _netns_bench.ready("multihost_recovery", "elastic_regression", p, log):
        return 0
    log(f"# multihost_recovery: 3 hosts (network namespaces), 1 rank each, {STEP_MS} ms steps, "
        f"link of one non-head host down at step {FAULT_STEP}; Phalanx node timeout "
        f"{args.node_timeout_ms} ms; torchrun c10d on host 0, --monitor_interval 0.1, "
        f"last_call_timeout {TORCH_LAST_CALL_S} s, process group timeout {args.pg_timeout_s} s, "
        f"checkpoint every {CKPT_EVERY} steps")
    results = []
    for i in range(args.runs):
        try:
            results.append(run_once(i, args))
        except Exception as e:  # noqa: BLE001 -- a failed run is reported, the others go on
            log(f"  run {i + 1} FAILED: {e}")
    if not results:
        log("RESULT runs=0 (every run failed)")
        return 1
    report(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
