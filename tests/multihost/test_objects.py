"""The object store across hosts (3 network-namespace hosts, the real CLI on each): values
move between nodes through the holding node's manager (ReadObject), once per node (its
cache, which drops a copy once the value is freed), what an actor prints reaches the
driver, and a value dies with
its owner's process, with an error that names it. The driver is
tests/multihost/objects_driver.py, a Ray-style program."""

import json
import os

DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "objects_driver.py")


def test_values_move_between_hosts_and_die_with_their_owner(cluster, hosts):
    out = hosts[0].run(["/usr/bin/python3", DRIVER, "--address", cluster.address, "--token",
                        cluster.token], timeout=150)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    checks = {c["check"]: c for c in (json.loads(line) for line in out.stdout.splitlines()
                                      if line.startswith("{"))}
    print(checks)
    b = checks["broadcast"]
    assert b["driver"] not in b["hosts"] and len(set(b["hosts"])) == 2, b
    assert [r[0] for r in b["results"]] == [b["want"]] * 2, b
    assert sorted(r[1] for r in b["results"]) == sorted(b["hosts"]), b
    c = checks["node_cache"]
    assert c["again"] == [b["want"]] * 2 and c["together"] == [4e6] * 3, c
    # 64 MB cached on that node already; 32 MB read by three processes crosses once.
    assert c["sent_again"] < 1e6 and 32e6 <= c["sent_fresh"] < 2 * 32e6, c
    assert c["cached"] and c["dropped_after_free"], c
    assert checks["borrowed"]["driver"] == checks["borrowed"]["third_host"] == 3e6
    assert checks["pending"]["result"] == 1000.0
    kept = checks["remote_borrower"]
    assert kept["while_borrowed"] and kept["read"] == 4e6 and kept["freed_after"], kept
    killed = checks["remote_borrower_killed"]
    assert killed["held"] and killed["freed"], killed
    died = checks["owner_died"]["error"]
    assert died and "died" in died and "actor" in died, checks["owner_died"]
    # The line an actor printed on another host, prefixed with its class, pid and host.
    said = [x for x in out.stderr.splitlines() if x.endswith(") hello from another host")]
    assert said and said[0].startswith(f"(Worker pid={checks['prints']['pid']}, ip=10.213."), \
        out.stderr[-3000:]
