"""scripts/slurm/phalanx.sbatch on a real Slurm: munged, slurmctld and two slurmd (Debian's
slurm-wlm 22.05), each slurmd on a host of its own -- a network namespace with its own
address and hostname (tests/slurm/slurm_cluster.py over tests/multihost/netns.py) -- so the
Phalanx head (node n1, the job's first) and the node that joins it (n2) reach each other at
different addresses, as on two machines, each with its own per-node PHALANX_TMPDIR.

- An elastic regression job (examples/cpp/elastic_regression; 2 ranks of 2 CPUs each, so one
  on each node) submitted with `sbatch -N 2 phalanx.sbatch -f spec.yaml` ends SUCCEEDED (the
  job's output file shows it) and the Slurm job COMPLETED with exit code 0; nothing of the
  allocation is left.
- A driver command instead of a spec runs on the head's host with the cluster in its
  environment (`phalanx status` there sees both nodes); its exit code is the job's.
- A longer one is cancelled with `scancel` once it trains on both nodes: within a bound, no
  process of that allocation is left -- no pid from its session dirs' pid files, no process
  whose command line (pgrep -f) or environment (a worker's) names its per-node session roots,
  nothing but slurmctld, slurmd and munged on either host.
- `scancel --batch --signal=TERM` (the orderly stop the template's header names): the script's
  trap stops the driver, the nodes (each `phalanx start --block` says so) and the head; no
  SIGKILL from srun, nothing left.

No accounting (no slurmdbd): states come from `scontrol show job` and the output file. Needs
root; skips with one line where Slurm, munge or namespaces are missing."""

import glob
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import slurm_cluster  # noqa: E402
from slurm_cluster import SlurmCluster, SlurmUnavailable  # noqa: E402

import netns  # noqa: E402  (slurm_cluster put tests/multihost on the path)

# One line for the whole file where it cannot run (not root, no Slurm or munge, no namespaces).
WHY_NOT = slurm_cluster.unavailable()
if WHY_NOT:
    pytest.skip(WHY_NOT, allow_module_level=True)

# Bounds, in seconds. The whole file runs in about 30 s.
TEST_BOUND_S = 150          # each test (SIGALRM; its clean-up still runs)
JOB_DONE_S = 90             # sbatch -> the short job COMPLETED
RUNNING_S = 60              # sbatch -> the long job trains on both nodes
CANCEL_CLEAN_S = 30         # scancel -> nothing of the allocation left (KillWait is 15 s)
POLL_S = 0.25

SBATCH = os.path.join(netns.REPO, "scripts", "slurm", "phalanx.sbatch")
SHORT_STEPS = 300
LONG_STEPS = 100000
STEP_MS = 10
# Phalanx's processes (tests/multihost/netns.py's list): daemons, job runners, workers.
PHALANX_RE = re.compile(netns.PHALANX_PROCESS_RE)
# The test cluster's own daemons (slurmctld's helper is "slurmctld: slurmscriptd").
DAEMON_RE = re.compile(r"^\S*(slurmctld|slurmd|munged)[ :]")
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


@pytest.fixture(scope="module")
def slurm(request):
    """The Slurm cluster of this file's tests: stopped at the end whatever happens; its run dir
    (logs, job output, session dirs) is kept when a test failed."""
    failed_before = request.session.testsfailed
    cluster = SlurmCluster()
    try:
        cluster.__enter__()
    except SlurmUnavailable as e:
        pytest.skip(str(e))
    try:
        yield cluster
    finally:
        cluster.close(failed=request.session.testsfailed > failed_before)


@pytest.fixture(autouse=True)
def time_bound(request):
    with netns.time_bound(request.node.name, TEST_BOUND_S):
        yield


def write_spec(slurm, tag, steps):
    """A copy of examples/cpp/elastic_regression.yaml: 2 ranks of 2 CPUs (one per node)."""
    d = os.path.join(slurm.jobs_dir, tag)
    os.makedirs(d, exist_ok=True)
    spec = os.path.join(d, "spec.yaml")
    with open(spec, "w") as f:
        f.write(textwrap.dedent(f"""\
            name: slurm-{tag}
            trainer: RegressionTrainer
            codePath: {os.path.join(netns.bin_dir(), "elastic_regression")}
            replicas: 2
            minReplicas: 2
            maxReplicas: 2
            resources: {{CPU: 2, memory: 512Mi}}
            data: {{numSamples: 2048, globalBatch: 64, seed: 7}}
            steps: {steps}
            restartLimit: 3
            restartTimeLimit: 3600
            hang: {{timeoutSeconds: 30}}
            config: {{stepMs: "{STEP_MS}", trackSamples: "0"}}
            """))
    return spec


def submit(slurm, spec=None, command=None):
    """sbatch -N 2 phalanx.sbatch -f spec (or COMMAND...); returns the job id."""
    env = {"PHALANX_BIN_DIR": netns.bin_dir(),
           "PHALANX_SLURM_TMPDIR": slurm.path("phx"),
           "PHALANX_HEAD_ARGS": "--node-timeout-ms 2000",
           "PHALANX_START_ARGS": "--heartbeat-ms 250",
           "PHALANX_MEMORY_USAGE_THRESHOLD": "0.95"}
    return slurm.sbatch(["-N", "2", "--chdir", slurm.jobs_dir,
                         "--output", os.path.join(slurm.jobs_dir, "slurm-%j.out"),
                         SBATCH, *(command or ["-f", spec])], env=env)


def output(slurm, job):
    try:
        with open(os.path.join(slurm.jobs_dir, f"slurm-{job}.out"), errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def wait_for(what, predicate, timeout, slurm, job):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(POLL_S)
    raise AssertionError(f"{what}: not within {timeout} s; job {job} is "
                         f"{slurm.show_job(job).get('JobState')}; its output:\n"
                         f"{output(slurm, job)[-4000:]}\n{slurm.logs_tail()}")


def session_roots(slurm, job):
    """Each node's PHALANX_TMPDIR of this allocation (phalanx.sbatch: <root>/phalanx-slurm-
    <job>-<node>)."""
    return sorted(glob.glob(os.path.join(slurm.path("phx"), f"phalanx-slurm-{job}-*")))


def session_pids(slurm, job):
    """[(pid file, pid)] from every session of the allocation (<session>/pids/*.pid)."""
    found = []
    for root in session_roots(slurm, job):
        for f in glob.glob(os.path.join(root, "session_2*", "pids", "*.pid")):
            try:
                with open(f) as fh:
                    found.append((f, int(fh.read().split()[0])))
            except (OSError, ValueError, IndexError):
                pass
    return found


def leftovers(slurm, job):
    """What of the allocation still runs: pids from its pid files that live, processes whose
    command line (pgrep -f) or environment names its per-node paths, and any process on the
    two hosts but the test cluster's daemons (a slurmstepd, a Phalanx daemon or worker). []
    when nothing is."""
    left = []
    for f, pid in session_pids(slurm, job):
        if netns._pid_alive(pid) and not netns._is_zombie(pid):
            left.append(f"pid {pid} of {os.path.relpath(f, slurm.dir)}: {netns._cmdline(pid)}")
    roots = session_roots(slurm, job)
    for root in roots:
        r = subprocess.run(["pgrep", "-af", re.escape(root)], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            pid, _, cmd = line.partition(" ")
            if not netns._is_zombie(int(pid)):
                left.append(f"pid {pid} names the allocation's paths: {cmd}")
    # A worker's command line is its program alone; its environment names its session
    # (PHALANX_TMPDIR, PHALANX_TLS_DIR).
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or netns._is_zombie(int(entry)):
            continue
        env = b"\0".join(slurm_cluster._environ(int(entry)))
        if any(r.encode() in env for r in roots):
            left.append(f"pid {entry}'s environment names the allocation's paths: "
                        f"{netns._cmdline(int(entry))}")
    for h in slurm.hosts:
        for pid, cmd in h.processes():
            if not DAEMON_RE.search(cmd):
                left.append(f"pid {pid} on {h.hostname}: {cmd}")
    return sorted(set(left))


def phalanx_processes(slurm):
    return [(h.hostname, pid, cmd) for h in slurm.hosts for pid, cmd in h.processes()
            if PHALANX_RE.search(cmd)]


def wait_nothing_left(slurm, job, timeout):
    """Waits until nothing of the allocation runs; returns what still does then ([])."""
    deadline = time.time() + timeout
    while True:
        left = leftovers(slurm, job)
        if not left or time.time() > deadline:
            return left
        time.sleep(POLL_S)


def wait_training(slurm, job):
    """Waits until the elastic job trains with both ranks (its output says so)."""
    wait_for("the elastic job trains on both nodes",
             lambda: re.search(r"\[condition\] Running +Training +world size 2",
                               output(slurm, job)), RUNNING_S, slurm, job)


def test_elastic_job_succeeds_and_the_allocation_completes(slurm):
    spec = write_spec(slurm, "short", SHORT_STEPS)
    t0 = time.time()
    job = submit(slurm, spec)
    state = wait_for("the job ends", lambda: slurm.job_state(job) in TERMINAL and
                     slurm.job_state(job), JOB_DONE_S, slurm, job)
    took = time.time() - t0
    info = slurm.show_job(job)
    out = output(slurm, job)
    print(f"\n[slurm] job {job} {state} {info.get('ExitCode')} on {info.get('NodeList')} in "
          f"{took:.1f} s (sbatch -> {state}); its output:\n{out}")
    assert state == "COMPLETED" and info.get("ExitCode") == "0:0", (
        f"job {job}: {state} {info.get('ExitCode')}\n{out}\n{slurm.logs_tail()}")
    assert re.search(r"\[condition\] Running +Training +world size 2", out), out
    assert re.search(r"^job \S+ \(slurm-short\): SUCCEEDED", out, re.M), out
    # Two nodes, at two addresses: the head's and the one that joined; a private session
    # root each.
    roots = session_roots(slurm, job)
    assert [os.path.basename(r) for r in roots] == [f"phalanx-slurm-{job}-n1",
                                                    f"phalanx-slurm-{job}-n2"], roots
    for r in roots:
        assert os.stat(r).st_mode & 0o777 == 0o700, r
    assert f"n2 joins {slurm.hosts[0].ip}:" in out, out
    assert f"--node-ip-address {slurm.hosts[1].ip} --memory-usage-threshold 0.95" in out, out
    # The head's output (with the token) stays in its session root.
    token_files = glob.glob(os.path.join(roots[0], "session_2*", "token"))
    assert token_files, roots
    with open(token_files[0]) as f:
        token = f.read().strip()
    assert token and token not in out, "the token is in the job's output file"
    # The nodes stopped in order (SIGTERM to their step), not by srun's SIGKILL.
    assert "phalanx start: Terminated: stopping." in out and "srun: error" not in out, out
    left = wait_nothing_left(slurm, job, 10)
    assert not left, "left after the job completed:\n  " + "\n  ".join(left)


def test_a_driver_command_runs_on_the_head_and_its_exit_code_is_the_jobs(slurm):
    job = submit(slurm, command=["sh", "-c", 'phalanx status && '
                                 'echo "driver on $(hostname), PHALANX_ADDRESS=$PHALANX_ADDRESS" '
                                 '&& exit 3'])
    wait_for("the job ends", lambda: slurm.job_state(job) in TERMINAL, JOB_DONE_S, slurm, job)
    info = slurm.show_job(job)
    out = output(slurm, job)
    print(f"\n[slurm] job {job}: driver `sh -c 'phalanx status && ... exit 3'` -> "
          f"{info.get('JobState')} {info.get('ExitCode')}")
    assert "Nodes: 2 alive, 0 dead" in out, out
    assert (f"driver on {slurm.hosts[0].hostname}, PHALANX_ADDRESS={slurm.hosts[0].ip}:"
            in out), out
    assert "phalanx.sbatch: the driver exited with 3" in out, out
    assert info.get("JobState") == "FAILED" and info.get("ExitCode") == "3:0", info
    left = wait_nothing_left(slurm, job, 10)
    assert not left, "left after the job ended:\n  " + "\n  ".join(left)


def test_scancel_stops_every_process_of_the_allocation(slurm):
    job = submit(slurm, write_spec(slurm, "long", LONG_STEPS))
    wait_training(slurm, job)
    pids = session_pids(slurm, job)
    running = phalanx_processes(slurm)
    assert {"gcs.pid", "redis.pid", "node.pid"} <= {os.path.basename(f) for f, _ in pids}, pids
    # The check below sees the allocation while it runs: the daemons by their pid files, the
    # workers (ranks, the controller) by their environment, on both hosts.
    before = leftovers(slurm, job)
    workers = [w for w in before if "environment" in w and "elastic_regression" in w]
    assert len(workers) >= 2 and any(slurm.hosts[1].hostname in w for w in before), before
    print(f"\n[slurm] job {job} trains; pid files {sorted(os.path.basename(f) for f, _ in pids)}"
          f"; Phalanx processes on the two hosts: "
          f"{sorted((h, os.path.basename(c.split()[0])) for h, _, c in running)}; scancel")
    t0 = time.time()
    slurm.scancel(job)
    wait_for("the job ends after scancel", lambda: slurm.job_state(job) in TERMINAL,
             CANCEL_CLEAN_S, slurm, job)
    ended = time.time() - t0
    left = wait_nothing_left(slurm, job, CANCEL_CLEAN_S)
    clean = time.time() - t0
    out = output(slurm, job)
    print(f"[slurm] scancel -> {slurm.job_state(job)} in {ended:.1f} s, nothing left in "
          f"{clean:.1f} s; the end of the job's output:\n{out[-1500:]}")
    assert not left, ("left after scancel:\n  " + "\n  ".join(left) + f"\n{out[-3000:]}")
    assert slurm.job_state(job) == "CANCELLED", slurm.show_job(job)


def test_a_sigterm_to_the_script_stops_the_cluster_in_order(slurm):
    job = submit(slurm, write_spec(slurm, "orderly", LONG_STEPS))
    wait_training(slurm, job)
    t0 = time.time()
    slurm.client(["scancel", "--batch", "--signal=TERM", job])
    wait_for("the job ends after SIGTERM to its script",
             lambda: slurm.job_state(job) in TERMINAL, CANCEL_CLEAN_S, slurm, job)
    ended = time.time() - t0
    left = wait_nothing_left(slurm, job, CANCEL_CLEAN_S)
    out = output(slurm, job)
    info = slurm.show_job(job)
    print(f"\n[slurm] job {job}: SIGTERM to the script -> {info.get('JobState')} "
          f"{info.get('ExitCode')} in {ended:.1f} s; the end of its output:\n{out[-1200:]}")
    assert not left, ("left after the stop:\n  " + "\n  ".join(left) + f"\n{out[-3000:]}")
    for line in ("phalanx.sbatch: got SIGTERM: stopping the cluster",
                 "phalanx.sbatch: stopping the driver", "phalanx.sbatch: stopping the nodes",
                 "phalanx start: Terminated: stopping.", "phalanx.sbatch: stopping the head",
                 "phalanx.sbatch: stopped;"):
        assert line in out, f"no {line!r} in:\n{out}"
    assert "srun: error" not in out and "forcing job termination" not in out, out
    # The script exits 128 + SIGTERM: the driver did not finish.
    assert info.get("ExitCode") == "143:0", info
