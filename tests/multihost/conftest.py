"""Fixtures of the multi-host tests: 3 hosts (network namespaces, tests/multihost/netns.py)
with a Phalanx cluster started by the real CLI on each, stopped with `phalanx stop` on every
host at the end, and checked: no process left. Each test is bounded in time (SIGALRM)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import netns  # noqa: E402

TEST_BOUND_S = int(os.environ.get("PHALANX_MULTIHOST_TEST_BOUND_S", "180"))


def pytest_collection_modifyitems(config, items):
    why = netns.unavailable()
    if why:
        skip = pytest.mark.skip(reason=why)
        for item in items:
            if "multihost" in str(item.fspath):
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def time_bound(request):
    """Fails a test that runs past TEST_BOUND_S, or the seconds of its @pytest.mark.bound(s)
    (its clean-up still runs)."""
    marker = request.node.get_closest_marker("bound")
    with netns.time_bound(request.node.name, marker.args[0] if marker else TEST_BOUND_S):
        yield


def pytest_configure(config):
    config.addinivalue_line("markers", "hosts(n): how many hosts the test's cluster has (3)")
    config.addinivalue_line("markers", "bound(s): the test's time bound, when not the default")


@pytest.fixture
def hosts(request):
    """3 hosts, or n with @pytest.mark.hosts(n)."""
    marker = request.node.get_closest_marker("hosts")
    with netns.Hosts(marker.args[0] if marker else 3) as h:
        yield h


@pytest.fixture
def cluster(hosts):
    """A cluster of every host: 2 CPUs per host, node timeout 2 s, heartbeats every 250 ms."""
    c = netns.Cluster(hosts, num_cpus=2, node_timeout_ms=2000, heartbeat_ms=250)
    try:
        c.start()
        yield c
    finally:
        left = c.stop()
        if left:
            pytest.fail("processes left after `phalanx stop` on every host:\n" + "\n".join(
                f"  host {h} pid {p}: {cmd}" for h, p, cmd in left), pytrace=False)
