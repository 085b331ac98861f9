#!/usr/bin/python3
"""torchrun_compat: one unmodified torchrun program (examples/python/torchrun_ddp.py, the DDP
tutorial's shape: env:// init, DistributedSampler, DDP, a snapshot every epoch) under
`phalanx run` and under torchrun at its best documented settings (--monitor_interval 0.1),
side by side in the same run, hit by three faults:

  kill   SIGKILL of one of 4 workers on this machine
  stop   SIGSTOP of one of 4 workers on this machine (SIGCONT once measured)
  cut    the link of a worker's host down, 3 network-namespace hosts with one worker each
         (skipped where namespaces cannot be made; needs root)

Both restart the worker group and resume from the program's snapshot (the same program);
`phalanx run` finds the fault in milliseconds and restarts warm processes, torchrun's agent
finds a dead worker by polling and starts new ones; a stopped worker or a cut host holds
torchrun's survivors in Gloo until the process group's timeout (torch's default 1800 s;
bounded here at --bound-s). Two `phalanx run` sides: "phalanx" with --backend phalanx (the
program's init_process_group() gets the phalanx backend: a lost peer fails the survivors'
ops at once) and "phalanx-gloo" with the program's own Gloo group (kill and stop only: under
a cut host it waits out Gloo's timeout as torchrun does).

resume: the fault -> rank 0's first step of the restarted group (its first step line after
it printed "Resuming training from snapshot"); lost: steps done before the fault and done
again after it. Medians over --runs.

    bench/torchrun_compat.py [--runs 1] [--faults kill,stop,cut] [--bound-s 60]

Last line: RESULT ratio=<kill resume, phalanx over torchrun> stop_ratio=.. cut_ratio=.., the
phalanx-gloo side's ratios (kill_gloo_ratio=..) and each side's medians ('>' where torchrun
did not resume within the bound, and a '<' ratio).
"""

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "multihost"))
sys.path.insert(0, HERE)

from multihost_recovery import kill_host_processes, median, wait_for  # noqa: E402

PYTHON = "/usr/bin/python3"
PHALANX = os.path.join(ROOT, "build", "bin", "phalanx")
PROGRAM = os.path.join(ROOT, "examples", "python", "torchrun_ddp.py")
EPOCHS = 200              # more than a run needs: each side is stopped once measured
STEP_S = 0.066            # each step padded to this, both sides
FAULT_AT_EPOCH = 4        # the fault once rank 0 runs this epoch (after its snapshot)
START_BOUND_S = 180
STEP_RE = re.compile(r"step (\d+)\.(\d+) t=([\d.]+)")
RESUMING = "Resuming training from snapshot"


def log(*a):
    print(*a, flush=True)


class Output:
    """A process's output, collected as it comes (stdout and stderr together)."""

    def __init__(self, argv, cwd, env, wrap=None, popen=None):
        self.text = ""
        self.lock = threading.Lock()
        self.proc = popen or subprocess.Popen(
            (wrap or (lambda a: a))(argv), cwd=cwd, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.text += line

    def read(self):
        with self.lock:
            return self.text

    def kill(self):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


def steps(text, start=0):
    """[(epoch, batch, unix s, end offset)] of rank 0's step lines from `start`."""
    return [(int(m.group(1)), int(m.group(2)), float(m.group(3)), m.end())
            for m in STEP_RE.finditer(text, start)]


def measure(out, apply, undo, per_epoch, bound):
    """Applies the fault once rank 0 runs epoch FAULT_AT_EPOCH; {resume_s, lost}."""
    if not wait_for(lambda: any(e >= FAULT_AT_EPOCH for e, _, _, _ in steps(out.read())),
                    START_BOUND_S):
        raise RuntimeError(f"never reached epoch {FAULT_AT_EPOCH}:\n" + out.read()[-2000:])
    fault = time.time()
    apply()

    def resumed():
        text = out.read()
        before = [s for s in steps(text) if s[2] <= fault]
        at = text.find(RESUMING, before[-1][3] if before else 0)
        after = steps(text, at) if at >= 0 else []
        return (before, after[0]) if after else None

    got = wait_for(resumed, bound)
    undo()
    if not got:
        return {"resume_s": None, "lost": None}
    before, first = got
    done = max(e * per_epoch + b for e, b, _, _ in before) + 1
    return {"resume_s": first[2] - fault, "lost": max(0, done - (first[0] * per_epoch +
                                                                 first[1]))}


def program_args(snapshot):
    return [str(EPOCHS), "1", "--snapshot_path", snapshot, "--step_s", str(STEP_S)]


def fault_fns(fault, pid):
    if fault == "stop":
        def cont():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        return (lambda: os.kill(pid, signal.SIGSTOP)), cont
    return (lambda: os.kill(pid, signal.SIGKILL)), (lambda: None)


# ---- one machine: kill and stop ----------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="phx-trcompat-")
        self.port = free_port()
        self.env = dict(os.environ, PHALANX_TMPDIR=self.root)
        for k in ("PHALANX_ADDRESS", "PHALANX_TOKEN"):
            self.env.pop(k, None)
        out = subprocess.run([PHALANX, "start", "--head", "--port", str(self.port),
                              "--node-ip-address", "127.0.0.1", "--num-cpus", "4"],
                             env=self.env, capture_output=True, text=True, timeout=120)
        if out.returncode:
            raise RuntimeError(out.stdout + out.stderr)
        session = os.path.realpath(os.path.join(self.root, "session_latest"))
        with open(os.path.join(session, "token")) as f:
            self.token = f.read().strip()
        self.tls = os.path.join(session, "tls")

    def stop(self):
        subprocess.run([PHALANX, "stop", "--grace", "3"], env=self.env, capture_output=True,
                       timeout=120)
        shutil.rmtree(self.root, ignore_errors=True)


def rank_pid(job_id, rank):
    from phalanx import _native
    for m in _native.job_status(job_id).ranks:
        if m.rank == rank and m.actor_id:
            return _native.actor_info(m.actor_id)["pid"]
    return None


def run_phalanx_local(fault, work, bound, backend):
    import phalanx
    cluster = LocalCluster()
    out = None
    try:
        os.environ["PHALANX_TLS_DIR"] = cluster.tls
        phalanx.init(f"127.0.0.1:{cluster.port}", token=cluster.token)
        out = Output([PHALANX, "run", "--nproc-per-node", "4", "--max-restarts", "5",
                      "--cpus-per-worker", "1", "--backend", backend, "torchrun_ddp.py",
                      *program_args(os.path.join(work, f"ph-{backend}.pt"))], work, cluster.env)
        wait_for(lambda: re.search(r"\[phalanx run\] job (\S+):", out.read()), 60)
        job_id = re.search(r"\[phalanx run\] job (\S+):", out.read()).group(1)
        wait_for(lambda: steps(out.read()), START_BOUND_S)
        pid = wait_for(lambda: rank_pid(job_id, 1), 30)
        apply, undo = fault_fns(fault, pid)
        return measure(out, apply, undo, per_epoch=2, bound=bound)
    finally:
        if out is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(out.proc.pid, signal.SIGINT)  # the launcher stops its job
            with contextlib.suppress(subprocess.TimeoutExpired):
                out.proc.wait(40)
            out.kill()
        phalanx.shutdown()
        os.environ.pop("PHALANX_TLS_DIR", None)
        cluster.stop()


def torchrun_worker_pid(agent_pid, rank):
    """The pid of the agent's worker of global rank `rank` (from its environment)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != agent_pid:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except (OSError, ValueError, IndexError):
            continue
        if env.get(b"RANK") == str(rank).encode():
            return int(pid)
    return None


def run_torchrun_local(fault, work, bound):
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    # torch 1.13 on Python 3.11 crashes on the default --redirects/--tee ("0" parses to None):
    # 2 keeps stdout on the console (bench/peers/torchrun_recovery.sh).
    out = Output([PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                  "4", "--max_restarts", "5", "--monitor_interval", "0.1", "--redirects", "2",
                  "--tee", "2", "--log_dir", os.path.join(work, "tr-logs"), "torchrun_ddp.py",
                  *program_args(os.path.join(work, "tr-snapshot.pt"))], work, env)
    try:
        wait_for(lambda: steps(out.read()), START_BOUND_S)
        pid = wait_for(lambda: torchrun_worker_pid(out.proc.pid, 1), 30)
        apply, undo = fault_fns(fault, pid)
        return measure(out, apply, undo, per_epoch=2, bound=bound)
    finally:
        out.kill()


# ---- three hosts: cut --------------------------------------------------------------------

def run_cut(work, bound):
    """(phalanx, torchrun) results of a cut host on 3 namespace hosts."""
    import cluster_info
    import multihost_recovery as mr
    import netns
    with netns.Hosts(3, log=log) as hosts, mr.host_names(hosts):
        shutil.copy(PROGRAM, os.path.join(hosts.dir, "torchrun_ddp.py"))
        cluster = netns.Cluster(hosts, num_cpus=2, node_timeout_ms=2000)
        out = None
        try:
            cluster.start()
            # One worker per host (each takes its host's 2 CPUs), launched from the head.
            argv = [PHALANX, "run", "--address", cluster.address, "--nnodes", "2:3",
                    "--nproc-per-node", "1", "--cpus-per-worker", "2", "--max-restarts", "5",
                    "--backend", "phalanx", "torchrun_ddp.py",
                    *program_args(os.path.join(hosts.dir, "ph-snapshot.pt"))]
            out = Output(None, None, None, popen=subprocess.Popen(
                hosts[0].wrap(["sh", "-c", f'cd "{hosts.dir}" && exec "$0" "$@"', *argv]),
                env=hosts[0].env({"PHALANX_TOKEN": cluster.token}), stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, start_new_session=True))
            wait_for(lambda: re.search(r"\[phalanx run\] job (\S+):", out.read()), 60)
            job_id = re.search(r"\[phalanx run\] job (\S+):", out.read()).group(1)
            wait_for(lambda: steps(out.read()), START_BOUND_S)
            ctl = cluster_info.wait_controller(cluster, job_id)
            ranks = {h for h, _, _ in cluster_info.ranks(cluster)}
            victim = next(i for i in range(1, 3) if i in ranks and (ctl is None or
                                                                 ctl[0] != i))
            ph = measure(out, hosts[victim].link_down, hosts[victim].link_up, per_epoch=3,
                         bound=bound)
        finally:
            for h in hosts:
                if not h.link_is_up():
                    h.link_up()
            if out is not None:
                out.kill()
            cluster.stop()
        tr = run_torchrun_cut(hosts, victim, bound)
    return ph, tr


def run_torchrun_cut(hosts, victim, bound):
    outs = []
    try:
        for h in hosts:
            argv = [PYTHON, "-m", "torch.distributed.run", "--nnodes", "2:3",
                    "--nproc_per_node", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint",
                    f"{hosts[0].ip}:29400", "--rdzv_id", "trcompat", "--rdzv_conf",
                    f"last_call_timeout=1,is_host={'1' if h.index == 0 else '0'}",
                    "--monitor_interval", "0.1", "--max_restarts", "5", "--redirects", "2",
                    "--tee", "2", "--log_dir", os.path.join(hosts.dir, f"tr-logs-{h.index}"),
                    "torchrun_ddp.py", *program_args(os.path.join(hosts.dir, "tr-snapshot.pt"))]
            outs.append(Output(None, None, None, popen=subprocess.Popen(
                h.wrap(["sh", "-c", f'cd "{hosts.dir}" && exec "$0" "$@"', *argv]),
                env=h.env({"GLOO_SOCKET_IFNAME": h.dev, "OMP_NUM_THREADS": "1"}),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                start_new_session=True)))

        class All:
            def read(self):
                # Rank 0's lines: only one agent's worker prints steps at a time.
                return "\0".join(o.read() for o in outs)

        # The hosts' outputs concatenated: rank 0 may move between hosts on a restart, so the
        # merged text is ordered by its step lines' own times in measure()'s search.
        merged = All()
        return measure(_Ordered(merged), hosts[victim].link_down, hosts[victim].link_up,
                       per_epoch=3, bound=bound)
    finally:
        for h in hosts:
            if not h.link_is_up():
                h.link_up()
        for o in outs:
            o.kill()
        kill_host_processes(hosts)


class _Ordered:
    """Several processes' output (joined by NUL) as one text whose lines are ordered by the
    time their step lines carry; a line without one goes just before the next step line of its
    process (a "Resuming" line before the first step of its restarted group)."""

    def __init__(self, source):
        self.source = source

    def read(self):
        keyed = []
        for chunk in self.source.read().split("\0"):
            t = float("inf")
            for line in reversed(chunk.splitlines(True)):
                m = STEP_RE.search(line)
                if m:
                    t = float(m.group(3))
                    keyed.append((t, 0, line))
                else:
                    keyed.append((t, -1, line))
        keyed.sort(key=lambda x: (x[0], x[1]))
        return "".join(line for _, _, line in keyed)


# ---- report ------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--faults", default="kill,stop,cut")
    p.add_argument("--bound-s", type=float, default=60.0,
                   help="how long to wait for a side to resume")
    args = p.parse_args()
    if not os.path.exists(PHALANX):
        p.error(f"build first: {PHALANX} is missing")
    faults = args.faults.split(",")
    log(f"# torchrun_compat: {os.path.basename(PROGRAM)} unchanged, {int(STEP_S * 1000)} ms "
        f"steps, a snapshot every epoch; kill/stop: 4 workers on this machine; cut: 3 hosts "
        f"(namespaces), node timeout 2 s; torchrun --monitor_interval 0.1; bound "
        f"{args.bound_s:g} s")
    sides = ("phalanx", "phalanx-gloo", "torchrun")
    results = {(f, s): [] for f in faults for s in sides}
    for i in range(args.runs):
        for fault in faults:
            work = tempfile.mkdtemp(prefix="trcompat-")
            shutil.copy(PROGRAM, os.path.join(work, "torchrun_ddp.py"))
            try:
                if fault == "cut":
                    import netns
                    why = netns.unavailable()
                    if why:
                        log(f"  cut skipped: {why}")
                        continue
                    ph, tr = run_cut(work, args.bound_s)
                    got = (("phalanx", ph), ("torchrun", tr))
                else:
                    got = (("phalanx", run_phalanx_local(fault, work, args.bound_s, "phalanx")),
                           ("phalanx-gloo", run_phalanx_local(fault, work, args.bound_s,
                                                              "script")),
                           ("torchrun", run_torchrun_local(fault, work, args.bound_s)))
            except Exception as e:  # noqa: BLE001 - a failed run is reported, the others go on
                log(f"  run {i + 1} {fault} FAILED: {e}")
                continue
            finally:
                shutil.rmtree(work, ignore_errors=True)
            for name, r in got:
                results[(fault, name)].append(r)
                shown = "> bound" if r["resume_s"] is None else f"{r['resume_s']:.2f} s"
                log(f"  run {i + 1} {fault:<4} {name:<12} resume {shown}, steps lost "
                    f"{r['lost']}")
    parts = []
    log("")
    log(f"{'fault':<6} {'phalanx s':>10} {'phalanx-gloo s':>15} {'torchrun s':>11} "
        f"{'ratio':>7} {'gloo ratio':>11}")
    show = lambda x: "none" if x is None else f"{x:.2f}"  # noqa: E731
    for fault in faults:
        med = {s: median(r["resume_s"] for r in results[(fault, s)]) for s in sides}
        ran = bool(results[(fault, "torchrun")])
        tr = med["torchrun"]

        def ratio(x):
            if x is None or not ran:
                return "none"
            return f"<{x / args.bound_s:.3f}" if tr is None else f"{x / tr:.3f}"
        trs = f">{args.bound_s:g}" if ran and tr is None else show(tr)
        log(f"{fault:<6} {show(med['phalanx']):>10} {show(med['phalanx-gloo']):>15} "
            f"{trs:>11} {ratio(med['phalanx']):>7} {ratio(med['phalanx-gloo']):>11}")
        key = "ratio" if fault == "kill" else f"{fault}_ratio"
        parts.append(f"{key}={ratio(med['phalanx'])}")
        parts.append(f"{fault}_gloo_ratio={ratio(med['phalanx-gloo'])}")
        parts.append(f"{fault}_phalanx_s={show(med['phalanx'])} "
                     f"{fault}_phalanx_gloo_s={show(med['phalanx-gloo'])} "
                     f"{fault}_torchrun_s={trs}")
    log("RESULT " + " ".join(parts) + f" runs={args.runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
