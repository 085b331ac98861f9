"""`phalanx run` across hosts: examples/python/torchrun_ddp.py (pytorch/examples' DDP
tutorial in shape, unchanged) launched from the head with `--nnodes 1:2 --nproc-per-node 2`,
its ranks on two hosts, its directory shipped to them, its snapshot on a path every host
sees. The link of a rank's host is cut: the node timeout (2 s) declares it dead, the
survivors' pending ops on the phalanx backend fail at once, and the group restarts from the
snapshot at the size the cluster can give, where torchrun would wait out torch's timeout."""

import os
import re
import shutil

import cluster_info
from jobs import now_ms, wait_for

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "python", "torchrun_ddp.py")
PHALANX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "bin",
                       "phalanx")
STEP_LINE = re.compile(r"\(rank 0\) step (\d+)\.(\d+) t=([\d.]+)")


def _read(log):
    try:
        with open(log) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def test_a_torchrun_program_on_two_hosts_heals_a_cut_host(cluster, hosts):
    work = os.path.join(hosts.dir, "job")
    os.makedirs(work)
    shutil.copy(PROGRAM, os.path.join(work, "torchrun_ddp.py"))
    snapshot = os.path.join(hosts.dir, "shared", "snapshot.pt")
    os.makedirs(os.path.dirname(snapshot))
    log = os.path.join(hosts.dir, "run.log")
    launcher = hosts[0].spawn(
        ["sh", "-c", f'cd "{work}" && exec "$0" "$@"', os.path.realpath(PHALANX), "run",
         "--address", cluster.address, "--nnodes", "1:2", "--nproc-per-node", "2",
         "--max-restarts", "3", "--backend", "phalanx", "torchrun_ddp.py", "40", "1",
         "--snapshot_path", snapshot, "--step_s", "0.1"],
        env={"PHALANX_TOKEN": cluster.token}, log=log)
    assert wait_for(lambda: re.search(r"\(rank 0\) step 4\.", _read(log)), 90), _read(log)
    job_id = re.search(r"\[phalanx run\] job (\S+):", _read(log)).group(1)
    ctl = cluster_info.wait_controller(cluster, job_id, 30)
    assert ctl is not None, cluster.phalanx(0, "list", "actors").stdout
    rank_hosts = {h for h, _, _ in cluster_info.ranks(cluster)}
    assert len(rank_hosts) == 2, (rank_hosts, cluster.phalanx(0, "list", "actors").stdout)
    # A rank's host that is not the head; one without the controller where there is one (a
    # cut controller host is restarted too, and heals the same way, later).
    victim = min(sorted(h for h in rank_hosts if h != 0), key=lambda h: h == ctl[0])
    cut_ms = now_ms()
    hosts[victim].link_down()
    launcher.wait(timeout=150)
    text = _read(log)
    assert launcher.returncode == 0, text[-4000:]
    assert "weights_sum=" in text, text[-4000:]
    # Rank 0's first step after it resumed from the snapshot, past its last step before the cut.
    before = [m.end() for m in STEP_LINE.finditer(text) if float(m.group(3)) * 1000 <= cut_ms]
    resumed = text.index("(rank 0) Resuming training from snapshot", before[-1])
    first = next(float(m.group(3)) for m in STEP_LINE.finditer(text, resumed))
    took = first - cut_ms / 1000
    print(f"\n[phalanx run, cut host] host {victim} cut (controller there: "
          f"{victim == ctl[0]}): rank 0's first step of the restarted group {took:.2f} s later "
          f"(node timeout 2 s)")
    # Loose: the point is "not torch's timeout" (a busy machine cannot fail it).
    if took >= 30:
        raise AssertionError(
            f"rank 0 stepped again {took:.2f} s after the cut. The run's output after the cut:\n"
            f"{text[before[-1]:][-6000:]}\n{cluster_info.job_report(cluster, job_id, lines=40)}")


def test_a_relative_write_on_a_cluster_of_several_nodes_is_warned_about(cluster, hosts):
    """torchrun's tutorial keeps its snapshot at a relative path: under `phalanx run` on
    several nodes that file stays on the node that wrote it, and the worker says so."""
    work = os.path.join(hosts.dir, "rel")
    os.makedirs(work)
    with open(os.path.join(work, "writes.py"), "w") as f:
        f.write("import time\nopen('snapshot.pt', 'w').write('x')\ntime.sleep(5)\n")
    log = os.path.join(hosts.dir, "rel.log")
    launcher = hosts[0].spawn(
        ["sh", "-c", f'cd "{work}" && exec "$0" "$@"', os.path.realpath(PHALANX), "run",
         "--address", cluster.address, "--nproc-per-node", "1", "writes.py"],
        env={"PHALANX_TOKEN": cluster.token}, log=log)
    launcher.wait(timeout=90)
    text = _read(log)
    assert launcher.returncode == 0, text
    assert re.search(r"\(rank 0\) phalanx run: warning: the script wrote snapshot\.pt to its "
                     r"working directory on node \S+; it stays on that node", text), text
    # The user's directory holds only the script: the write went to the node's copy.
    assert os.listdir(work) == ["writes.py"]


HOROVOD_PROGRAM = os.path.join(os.path.dirname(PROGRAM), "horovod_elastic.py")
HVD_LINE = re.compile(r"\(rank 0\) step \d+\.\d+ size=(\d+) lr=([\d.]+)")


def test_a_horovod_program_runs_only_on_the_hosts_its_discovery_script_lists(cluster, hosts):
    """horovodrun's --host-discovery-script on three hosts: the job's ranks run only on the
    hosts the script prints (by hostname or IP), move when the list changes (the ranks of a
    host that left are taken out, new ones start on the host that came), and the learning
    rate is the reset callback's (lr x size) at every size."""
    work = os.path.join(hosts.dir, "hvd")
    os.makedirs(work)
    shutil.copy(HOROVOD_PROGRAM, os.path.join(work, "horovod_elastic.py"))
    listed = os.path.join(hosts.dir, "hosts.txt")
    script = os.path.join(hosts.dir, "discover_hosts.sh")
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\ncat {listed}\n")
    os.chmod(script, 0o755)

    def listing(*lines):
        with open(listed + ".new", "w") as f:
            f.write("".join(f"{line}\n" for line in lines))
        os.replace(listed + ".new", listed)

    listing(f"{hosts[1].hostname}:2")
    log = os.path.join(hosts.dir, "hvd.log")
    launcher = hosts[0].spawn(
        ["sh", "-c", f'cd "{work}" && exec "$0" "$@"', os.path.realpath(PHALANX), "run",
         "--address", cluster.address, "--horovod", "-np", "2", "--min-np", "1", "--max-np",
         "4", "--host-discovery-script", script, "--cpus-per-worker", "1", "python",
         "horovod_elastic.py", "--epochs", "25", "--num-batches-per-epoch", "40", "--step-s",
         "0.05"],
        env={"PHALANX_TOKEN": cluster.token}, log=log)

    def sizes():
        return [int(m.group(1)) for m in HVD_LINE.finditer(_read(log))]

    def stage(size, expected_hosts):
        """Waits for 5 steps at `size` past those already printed, then for the ranks to sit
        on exactly `expected_hosts` (warm joiners included)."""
        seen = len(sizes())
        assert wait_for(lambda: sum(1 for s in sizes()[seen:] if s == size) >= 5, 120), \
            _read(log)[-4000:]
        assert wait_for(lambda: {h for h, _, _ in cluster_info.ranks(cluster)} ==
                        expected_hosts, 30), \
            (expected_hosts, cluster_info.ranks(cluster), _read(log)[-3000:])

    try:
        stage(2, {1})
        listing(f"{hosts[1].hostname}:2", f"{hosts[2].ip}:2")
        stage(4, {1, 2})
        listing(f"{hosts[2].hostname}:2")
        stage(2, {2})
        launcher.wait(timeout=240)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    text = _read(log)
    assert launcher.returncode == 0, text[-4000:]
    assert "(rank 0) done" in text, text[-4000:]
    wrong = [(int(m.group(1)), m.group(2)) for m in HVD_LINE.finditer(text)
             if abs(float(m.group(2)) - 0.01 * int(m.group(1))) > 1e-9]
    assert not wrong, wrong[:5]
    print(f"\n[phalanx run --horovod] hosts 1 -> 1,2 -> 2; sizes seen {sorted(set(sizes()))}")
    print("\n".join(line for line in text.split("\n")
                    if "host discovery" in line or "] nodes:" in line or "scaled_in" in line))
