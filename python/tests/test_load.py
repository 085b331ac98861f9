"""A busy machine is not a dead one: 20 elastic jobs (2 ranks each) submitted at once while 16
busy-looping processes keep the load of this 2-core machine at 16 or more, as on a shared
cluster. Every rank start must succeed (no spawn_failed, no rank_died: each was a live rank
taken for a lost one, issue 48), no rank may be taken for hung and no controller for stopped
(controller_restarted: its lease expired while its process ran), and every job must end
SUCCEEDED. The hog is killed by pid, whatever happens."""

import contextlib
import os
import re
import subprocess
import sys
import time

from phalanx import _native
from conftest import wait_for

JOBS = 20
HOG = 16

SPEC = """name: load{i}
trainer: RegressionTrainer
codePath: {bin}/elastic_regression
replicas: 2
minReplicas: 2
maxReplicas: 2
resources: {{CPU: 0.1, memory: 128Mi}}
data: {{numSamples: 512, globalBatch: 32, seed: 7}}
steps: 60
hang: {{timeoutSeconds: 120}}
config: {{stepMs: "10"}}
"""


def runnable():
    """Processes runnable now (/proc/loadavg's 4th field): the load the jobs meet, which the
    1-minute load average reaches only after a minute."""
    with open("/proc/loadavg") as f:
        return int(f.read().split()[3].split("/")[0])


@contextlib.contextmanager
def cpu_hog():
    """HOG busy processes while the block runs, killed by pid whatever happens."""
    hog = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(HOG)]
    try:
        yield
    finally:
        for h in hog:
            h.kill()
        for h in hog:
            h.wait()


def test_a_burst_of_jobs_under_a_cpu_hog_has_no_spurious_failures(cluster, tmp_path):
    with cpu_hog():
        start = time.time()
        submits = []
        for i in range(JOBS):
            path = tmp_path / f"load{i}.yaml"
            path.write_text(SPEC.format(i=i, bin=_native.BIN_DIR))
            submits.append(subprocess.Popen(
                [os.path.join(_native.BIN_DIR, "phalanx"), "job", "submit", "--no-wait", "-f",
                 str(path)], env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True))
        ids = []
        for p in submits:
            out, _ = p.communicate(timeout=300)
            m = re.search(r"Job (\S+) submitted", out)
            assert m, out
            ids.append(m.group(1))
        ended = {}

        def all_ended():
            for j in ids:
                if j not in ended:
                    status = cluster.cli("job", "status", j).stdout
                    if re.search(r"\b(SUCCEEDED|FAILED|STOPPED)\b", status.split("\n")[0]):
                        ended[j] = status
            return len(ended) == len(ids)

        assert wait_for(all_ended, timeout=600, interval=1.0), sorted(set(ids) - set(ended))
        took = time.time() - start
        load = runnable()
    bad = {j: s for j, s in ended.items()
           if "SUCCEEDED" not in s.split("\n")[0] or "spawn_failed" in s or "rank_died" in s
           or "controller_restarted" in s or " hang " in s}
    print(f"\n[load] {JOBS} jobs of 2 ranks at once under {HOG} busy processes ({load} "
          f"runnable): all ended in {took:.1f} s, {len(bad)} with a failure")
    assert not bad, "\n\n".join(bad.values())


BACK_TO_BACK = int(os.environ.get("PHALANX_LOAD_JOBS", "4"))


def ddp_loop(config):
    """A Ray Train loop as users write it: DDP, an optimizer, a report per step."""
    import torch
    from torch.nn.parallel import DistributedDataParallel
    from phalanx import train
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(config["steps"]):
        loss = model(torch.randn(16, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        train.report({"loss": loss.item()})


def start_seconds(result):
    """From the job's first condition (submitted) to its first epoch (every rank up)."""
    submitted = min(c["time_ms"] for c in result.conditions)
    formed = min(e["time_ms"] for e in result.events if e["kind"] == "epoch")
    return (formed - submitted) / 1000


def test_jobs_back_to_back_under_a_cpu_hog_start_without_a_spurious_failure(cluster, tmp_path):
    """Jobs started one after another (PHALANX_LOAD_JOBS, 4 here; the issue's goal is 50),
    alternately a C++ job and a Python torch DDP job of 2 ranks each, while 16 busy processes
    keep the load at 16 or more. Each must end SUCCEEDED with no rank lost, failed to start,
    timed out in a phase or taken for hung, and no controller restarted; the time each took to start is printed (not
    asserted: absolute times here are noise)."""
    from phalanx import train
    starts, bad = [], []
    with cpu_hog():
        for i in range(BACK_TO_BACK):
            if i % 2 == 0:
                path = tmp_path / f"b2b{i}.yaml"
                path.write_text(SPEC.format(i=i, bin=_native.BIN_DIR))
                out = cluster.cli("job", "submit", "-f", str(path), timeout=300)
                m = re.search(r"Job (\S+) submitted", out.stdout)
                assert m, out.stdout + out.stderr
                result = train.job_status(m.group(1))
            else:
                result = train.TorchTrainer(
                    ddp_loop, train_loop_config={"steps": 20},
                    scaling_config=train.ScalingConfig(num_workers=2,
                                                       resources_per_worker={"CPU": 0.1}),
                    run_config=train.RunConfig(name=f"b2b{i}"), verbose=False).fit(timeout=300)
            kinds = [e["kind"] for e in result.events]
            spurious = [k for k in kinds
                        if k in ("spawn_failed", "rank_died", "phase_timeout", "hang",
                                 "controller_restarted")]
            if result.state != "SUCCEEDED" or spurious:
                bad.append(f"{result.job_id}: {result.state} {result.message} {spurious}")
            starts.append(start_seconds(result))
        load = runnable()
    starts_sorted = sorted(starts)
    print(f"\n[load] {BACK_TO_BACK} jobs back to back under {HOG} busy processes ({load} "
          f"runnable): {len(bad)} with a failure; start (submitted → every rank up) median "
          f"{starts_sorted[len(starts) // 2]:.1f} s, max {starts_sorted[-1]:.1f} s, "
          f"over 10 s: {sum(s > 10 for s in starts)}")
    assert not bad, "\n".join(bad)
