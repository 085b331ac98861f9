"""A busy machine is not a dead one: 20 elastic jobs (2 ranks each) submitted at once while 16
busy-looping processes keep the load of this 2-core machine at 16 or more, as on a shared
cluster. Every rank start must succeed (no spawn_failed, no rank_died: each was a live rank
taken for a lost one, issue 48) and every job must end SUCCEEDED. The hog is killed by pid,
whatever happens."""

import os
import re
import subprocess
import sys
import time

import _phalanx
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


def test_a_burst_of_jobs_under_a_cpu_hog_has_no_spurious_failures(cluster, tmp_path):
    hog = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(HOG)]
    try:
        start = time.time()
        submits = []
        for i in range(JOBS):
            path = tmp_path / f"load{i}.yaml"
            path.write_text(SPEC.format(i=i, bin=_phalanx.BIN_DIR))
            submits.append(subprocess.Popen(
                [os.path.join(_phalanx.BIN_DIR, "phalanx"), "job", "submit", "--no-wait", "-f",
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
    finally:
        for h in hog:
            h.kill()
        for h in hog:
            h.wait()
    bad = {j: s for j, s in ended.items()
           if "SUCCEEDED" not in s.split("\n")[0] or "spawn_failed" in s or "rank_died" in s}
    print(f"\n[load] {JOBS} jobs of 2 ranks at once under {HOG} busy processes: all ended in "
          f"{took:.1f} s, {len(bad)} with a failure")
    assert not bad, "\n\n".join(bad.values())
