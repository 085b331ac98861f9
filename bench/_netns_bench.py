"""What the benchmarks on network-namespace hosts (tests/multihost/netns.py) share before they
start: the check that namespaces can be made here and that the program they run is built.
netns.Hosts and netns.Cluster do the rest (start-up, clean-up)."""

import os
import sys

MULTIHOST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "multihost")
if MULTIHOST not in sys.path:
    sys.path.insert(0, MULTIHOST)

import netns  # noqa: E402


def ready(name, binary, parser, log):
    """Whether benchmark `name` can run here. False, after one line "NAME: why" through `log`,
    where namespaces cannot be made (not root, no `ip netns`): the benchmark then exits 0, as
    a skip. Where build/bin/`binary` is missing, `parser.error` exits (status 2)."""
    why = netns.unavailable()
    if why:
        log(f"{name}: {why}")
        return False
    if not os.path.exists(os.path.join(netns.bin_dir(), binary)):
        parser.error(f"build first: {netns.bin_dir()}/{binary} is missing")
    return True
