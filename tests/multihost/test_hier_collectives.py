"""Hierarchical collective groups on 2 real hosts (network namespaces with their own address
and hostname, tests/multihost/netns.py) x 2 ranks each, run by build/bin/collective_rank:
every op and dtype gives the local result (shared memory inside each host, one TCP stream
between the hosts' leaders); a host whose link goes down (no FIN, no RST) ends the others'
call at once on Abort(), or at the group timeout without one, and the survivors form a new
epoch. Every process is killed by the harness at the end."""

import os
import re
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import netns  # noqa: E402


@pytest.fixture
def two_hosts():
    with netns.Hosts(2) as hosts:
        cluster = netns.Cluster(hosts, num_cpus=2)
        try:
            cluster.start()
            yield hosts, cluster
        finally:
            cluster.stop()


def rank(hosts, cluster, tmp_path, group, r, scenario, plan, timeout_ms=10000, env=None):
    host = hosts[0] if r < 2 else hosts[1]
    log = str(tmp_path / f"{group}-r{r}.log")
    argv = [os.path.join(netns.bin_dir(), "collective_rank"), "--gcs", cluster.address,
            "--token", cluster.token, "--group", group, "--scenario", scenario, "--plan", plan,
            "--timeout-ms", str(timeout_ms), "--host", host.ip]
    return host.spawn(argv, env=env, log=log), log


def read(log):
    with open(log, errors="replace") as f:
        return f.read()


def wait_line(log, text, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(log) and text in read(log):
            return True
        time.sleep(0.05)
    return False


def exit_code(proc, timeout=120):
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def test_every_op_and_dtype_across_two_hosts(two_hosts, tmp_path):
    hosts, cluster = two_hosts
    ranks = [rank(hosts, cluster, tmp_path, "hier-ops", r, "ops", f"1:4:{r}") for r in range(4)]
    for r, (proc, log) in enumerate(ranks):
        assert exit_code(proc) == 0, f"rank {r}:\n{read(log)[-4000:]}"
        assert "DONE" in read(log), read(log)[-4000:]
    assert "spans 2 machines" in read(ranks[0][1]), read(ranks[0][1])[-2000:]


@pytest.mark.parametrize("abort", [True, False], ids=["abort", "timeout"])
def test_link_down_fails_the_other_host_and_it_goes_on(two_hosts, tmp_path, abort):
    """Host 1's link goes down mid-allreduce: with Abort() (a controller that learned the host
    is gone) the survivors' call ends within milliseconds; without, at the 3 s group timeout.
    Either way the survivors (both on host 0) form epoch 2 and check an allreduce."""
    hosts, cluster = two_hosts
    group = f"hier-link-{'abort' if abort else 'timeout'}"
    trigger = str(tmp_path / f"{group}.abort")
    env = {"TEST_ABORT_FILE": trigger} if abort else None
    survivors = [rank(hosts, cluster, tmp_path, group, r, "loop", f"1:4:{r},2:2:{r}",
                      timeout_ms=3000, env=env) for r in (0, 1)]
    for r in (2, 3):
        rank(hosts, cluster, tmp_path, group, r, "loop", f"1:4:{r}", timeout_ms=3000)
    assert wait_line(survivors[0][1], "iter 3"), read(survivors[0][1])[-4000:]
    hosts[1].link_down()
    cut = time.time()
    if abort:
        time.sleep(0.3)  # the survivors block on the silent host
        open(trigger, "w").close()
    for r, (proc, log) in enumerate(survivors):
        assert exit_code(proc) == 0, f"rank {r}:\n{read(log)[-4000:]}"
        out = read(log)
        assert "epoch 2 OK" in out, out[-4000:]
        if abort:
            ms = float(re.search(r"abort ended the call in ([\d.]+) ms", out).group(1))
            print(f"\nrank {r}: the call ended {ms:.1f} ms after Abort() (host 1's link down)")
            assert ms < 1000, out[-4000:]
        else:
            failed = int(re.search(r"failed at (\d+)", out).group(1)) / 1000.0
            print(f"\nrank {r}: failed {failed - cut:.2f} s after host 1's link went down "
                  "(group timeout 3 s)")
            assert failed - cut < 3 + 2, out[-4000:]
