"""An elastic regression job (examples/cpp/elastic_regression) on a multi-host Cluster, and
what its controller's step log says about a fault: time to heal, committed steps lost.

    run = ElasticRun(cluster, workdir, steps=600, step_ms=40)
    run.submit()                       # `phalanx job submit -f spec.yaml` on host 0 (follows it)
    run.wait_step(150)
    fault_ms = now_ms(); ...           # the fault
    rc = run.wait_done(120)            # the submit command's exit code (0: SUCCEEDED)
    run.analyze(fault_ms)              # {"heal_s", "first_step_s", "stall_s", "lost", ...}
    run.weights_error()                # largest |learned - known| weight (< 1e-3: converged)

The spec is a copy of examples/cpp/elastic_regression.yaml with one rank per host
(`resources: {CPU: 2}` on 2-CPU hosts), replicas 3, minReplicas 2, maxReplicas 3, and the
controller's step log (`config.controllerStepLog`: "step unix_ms world_size" per agreed step,
appended by every incarnation of the controller) in the run's directory, which every host
sees (the hosts share the file system).
"""

import json
import os
import re
import subprocess
import textwrap
import time

from netns import REPO, bin_dir

# The known weights of RegressionTrainer (examples/cpp/regression_trainer.h) with dims 8:
# w*_j = (j + 1) / dims * (-1)^j.
DIMS = 8
KNOWN_WEIGHTS = [(j + 1.0) / DIMS * (-1 if j % 2 else 1) for j in range(DIMS)]


def now_ms():
    return int(time.time() * 1000)


def wait_for(cond, timeout, interval=0.05):
    """cond()'s first truthy value within `timeout` seconds, else its last value."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    return cond()


def int_rows(lines, width):
    """The lines of exactly `width` integers among `lines`, as tuples; any other line (one
    still being written, a note) is skipped."""
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == width and all(p.lstrip("-").isdigit() for p in parts):
            out.append(tuple(int(p) for p in parts))
    return out


def read_int_rows(path, width):
    """int_rows of the file at `path` ([] while it does not exist)."""
    try:
        with open(path) as f:
            return int_rows(f, width)
    except OSError:
        return []


class StepTail:
    """The last row of the controller's step log, read as the log grows (from where the last
    read stopped)."""

    def __init__(self, path):
        self.path = path
        self.offset = 0
        self.partial = ""
        self.last = (0, 0, 0)

    def last_step(self):
        try:
            with open(self.path) as f:
                f.seek(self.offset)
                chunk = f.read()
                self.offset = f.tell()
        except OSError:
            return self.last
        lines = (self.partial + chunk).split("\n")
        self.partial = lines.pop()
        rows = int_rows(lines, 3)
        if rows:
            self.last = rows[-1]
        return self.last


def spec_yaml(code_path, step_log, name="regression", steps=600, step_ms=40, replicas=3,
              min_replicas=2, max_replicas=3, cpu=2, memory="512Mi", hang_s=10,
              debounce_s=1, restart_limit=20, policies=None, config=None, silent_s=None):
    cfg = {"stepMs": str(step_ms), "controllerStepLog": step_log, "trackSamples": "0"}
    cfg.update(config or {})
    cfg_yaml = ", ".join(f"{k}: {json.dumps(str(v))}" for k, v in cfg.items())
    # hang.silentSeconds: the spec's default (1 s) unless given.
    silent = "" if silent_s is None else f", silentSeconds: {silent_s}"
    policies = policies or textwrap.dedent("""\
        - event: oom
          action: respawnLarger
          memoryGrowth: 2
        - exitCodes: "137"
          action: restart
        """)
    return textwrap.dedent(f"""\
        # A copy of examples/cpp/elastic_regression.yaml for the multi-host tests: one rank
        # per host (CPU 2 on 2-CPU hosts), 3 ranks, min 2, max 3.
        name: {name}
        trainer: RegressionTrainer
        codePath: {code_path}
        replicas: {replicas}
        minReplicas: {min_replicas}
        maxReplicas: {max_replicas}
        resources: {{CPU: {cpu}, memory: {memory}}}
        data: {{numSamples: 2048, globalBatch: 64, seed: 7}}
        steps: {steps}
        faultTolerantPolicy:
        """) + textwrap.indent(policies, "  ") + textwrap.dedent(f"""\
        restartLimit: {restart_limit}
        restartTimeLimit: 3600
        hang: {{timeoutSeconds: {hang_s}{silent}}}
        scaleOutDebounceSeconds: {debounce_s}
        config: {{{cfg_yaml}}}
        """)


class ElasticRun:
    """One elastic regression job submitted with the CLI on host 0 and followed there."""

    def __init__(self, cluster, workdir, tag="job", **spec):
        self.cluster = cluster
        self.dir = os.path.join(workdir, tag)
        os.makedirs(self.dir, exist_ok=True)
        self.step_log = os.path.join(self.dir, "steps.log")
        self.spec_path = os.path.join(self.dir, "spec.yaml")
        self.submit_log = os.path.join(self.dir, "submit.log")
        self.spec = dict(spec)
        self.total_steps = spec.get("steps", 600)
        self.job_id = None
        self.proc = None
        self.tail = StepTail(self.step_log)

    def submit(self, timeout=30):
        with open(self.step_log, "w"):
            pass
        self.tail = StepTail(self.step_log)
        with open(self.spec_path, "w") as f:
            f.write(spec_yaml(os.path.join(bin_dir(), "elastic_regression"), self.step_log,
                              **self.spec))
        self.proc = self.cluster.head.spawn(
            [os.path.join(bin_dir(), "phalanx"), "job", "submit", "-f", self.spec_path],
            log=self.submit_log)
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = re.search(r"Job (\S+) submitted", self.output())
            if m:
                self.job_id = m.group(1)
                return self.job_id
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"`phalanx job submit -f` gave no job id:\n{self.output()}")

    def output(self):
        try:
            with open(self.submit_log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def steps(self):
        """[(step, unix_ms, world_size)] from the controller's step log."""
        return read_int_rows(self.step_log, 3)

    def last_step(self):
        """The last (step, unix_ms, world_size) logged, (0, 0, 0) before any: read from where
        the last call stopped, so that polling it costs next to nothing however long the log."""
        return self.tail.last_step()

    def wait_step(self, step, timeout=60):
        """Waits until a step >= `step` was agreed; returns the entry."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            last = self.last_step()
            if last[0] >= step:
                return last
            if self.proc.poll() is not None:
                raise AssertionError(f"the job ended before step {step}:\n{self.output()}")
            time.sleep(0.02)
        raise AssertionError(f"no step {step} within {timeout} s (last {self.last_step()})\n"
                             f"{self.output()[-3000:]}")

    def wait_world(self, size, after_ms=0, timeout=60):
        """Waits until a step agreed after `after_ms` had `size` ranks; the entry or None."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            for s in self.steps():
                if s[1] >= after_ms and s[2] == size:
                    return s
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        return None

    def wait_step_after(self, t_ms, timeout=60):
        """Waits until a step was agreed after unix time `t_ms`; the entry or None."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            for s in self.steps():
                if s[1] > t_ms:
                    return s
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        return None

    def wait_done(self, timeout=120):
        """The submit command's exit code (0: SUCCEEDED), or None if it still runs."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def status_text(self):
        return self.cluster.phalanx(0, "job", "status", self.job_id, timeout=30).stdout

    def job_json(self):
        """The job's record as the GCS keeps it (JSON through the Python module, on host 0)."""
        code = ("import json, sys, phalanx\nfrom phalanx import _native\n"
                "phalanx.init(sys.argv[1], token=sys.argv[2])\n"
                "print(_native.get_job(sys.argv[3]))\n"
                "phalanx.shutdown()\n")
        env = {"PYTHONPATH": f"{REPO}/python:{REPO}/build/python"}
        r = self.cluster.head.run(["/usr/bin/python3", "-c", code, self.cluster.address,
                                   self.cluster.token, self.job_id], env=env, timeout=60)
        if r.returncode != 0:
            raise AssertionError(f"reading job {self.job_id} failed:\n{r.stdout}\n{r.stderr}")
        for line in reversed(r.stdout.strip().split("\n")):
            line = line.strip()
            if line.startswith("{"):
                return json.loads(line)
        raise AssertionError(f"no JSON in:\n{r.stdout}")

    def weights(self, job=None):
        job = job or self.job_json()
        results = job.get("elastic", {}).get("results", "")
        m = re.search(r"weights=([^;]*)", results)
        if not m:
            raise AssertionError(f"no weights in the job's results: {results!r}")
        return [float(w) for w in m.group(1).split(",") if w]

    def weights_error(self, job=None):
        w = self.weights(job)
        assert len(w) == DIMS, w
        return max(abs(a - b) for a, b in zip(w, KNOWN_WEIGHTS))

    def analyze(self, fault_ms):
        return analyze_steps(self.steps(), fault_ms, self.total_steps)


def analyze_steps(steps, fault_ms, total_steps=None):
    """What the step log says about a fault at unix time `fault_ms`:
      first_step_s  fault -> the first step agreed after it
      stall_s       the longest gap between agreed steps around the fault (from the last step
                    before the fault, or from the fault, within 60 s after it)
      heal_s        fault -> the step that ended that longest gap (the job making progress
                    again after the disruption the fault caused, which may come later than
                    the fault itself: a stopped node manager is declared dead after the node
                    timeout); first_step_s when that gap is no longer than 5 ordinary steps
                    (or 250 ms): the fault did not disturb the job
      lost          committed steps lost: how far the agreed step ever went backwards
      complete      every step 1..total was agreed
      worlds        the world sizes seen after the fault, in order (deduplicated)"""
    res = {"first_step_s": None, "stall_s": None, "heal_s": None, "lost": 0,
           "complete": None, "worlds": [], "last_before": None, "first_after": None}
    lost = 0
    for a, b in zip(steps, steps[1:]):
        if b[0] <= a[0]:
            lost += a[0] - b[0] + 1
    res["lost"] = lost
    if total_steps:
        agreed = {s[0] for s in steps}
        res["complete"] = all(i in agreed for i in range(1, total_steps + 1))
    before = [s for s in steps if s[1] <= fault_ms]
    after = [s for s in steps if s[1] > fault_ms]
    res["last_before"] = before[-1][0] if before else 0
    if after:
        res["first_after"] = after[0][0]
        res["first_step_s"] = (after[0][1] - fault_ms) / 1000.0
        # The longest gap that ends within 60 s after the fault.
        prev_ms = before[-1][1] if before else fault_ms
        best = (after[0][1] - max(prev_ms, fault_ms), after[0][1])
        t_prev = after[0][1]
        for s in after[1:]:
            if s[1] - fault_ms > 60_000:
                break
            gap = s[1] - t_prev
            if gap > best[0]:
                best = (gap, s[1])
            t_prev = s[1]
        res["stall_s"] = best[0] / 1000.0
        # A gap no longer than a few ordinary steps is no disruption: then the job healed
        # with the first step after the fault.
        gaps = sorted(b[1] - a[1] for a, b in zip(before, before[1:]))
        normal = gaps[len(gaps) // 2] if gaps else 0
        if best[0] <= max(5 * normal, 250):
            res["heal_s"] = res["first_step_s"]
        else:
            res["heal_s"] = (best[1] - fault_ms) / 1000.0
        worlds = []
        for s in after:
            if not worlds or worlds[-1] != s[2]:
                worlds.append(s[2])
        res["worlds"] = worlds
    return res


def format_analysis(a):
    def f(x):
        return "-" if x is None else f"{x:.2f}"
    return (f"heal {f(a['heal_s'])} s (first step after the fault {f(a['first_step_s'])} s, "
            f"longest stall {f(a['stall_s'])} s), steps lost {a['lost']}, "
            f"last step before {a['last_before']}, first after {a['first_after']}, "
            f"world sizes after {a['worlds']}")
