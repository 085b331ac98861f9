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
    assert took < 30, took


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
