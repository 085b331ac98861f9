"""A real cluster per test module: `phalanx start --head` (Redis, GCS, node manager) on a free
loopback port in a temporary directory, stopped by `phalanx stop` (and checked: no process
of it is left) when the module's tests are done."""

import contextlib
import os
import socket
import subprocess
import time

import pytest

from phalanx import _native
import phalanx

PHALANX = os.path.join(_native.BIN_DIR, "phalanx")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes_with(*needles):
    """(pid, command line) of every other process whose command line holds all `needles`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if all(n in cmd for n in needles) and int(pid) != os.getpid():
            found.append((int(pid), cmd))
    return found


class Cluster:
    def __init__(self, root, num_cpus=4, extra_args=()):
        self.root = str(root)
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = dict(os.environ, PHALANX_TMPDIR=self.root)
        self.env.pop("PHALANX_ADDRESS", None)
        self.env.pop("PHALANX_TOKEN", None)
        out = self.cli("start", "--head", "--port", str(self.port), "--node-ip-address",
                       "127.0.0.1", "--num-cpus", str(num_cpus), "--heartbeat-ms", "200",
                       *extra_args)
        assert out.returncode == 0, out.stdout + out.stderr
        session = os.path.realpath(os.path.join(self.root, "session_latest"))
        with open(os.path.join(session, "token")) as f:
            self.token = f.read().strip()
        # The cluster's CA, for clients in this process (as on a machine without a session of
        # the cluster): a dir holding its ca.pem.
        self.tls_dir = os.path.join(session, "tls")

    def cli(self, *args, timeout=60):
        return subprocess.run([PHALANX, *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def stop(self):
        self.cli("stop", "--grace", "5", timeout=120)
        deadline = time.time() + 10
        while _processes_with(self.root) and time.time() < deadline:
            time.sleep(0.1)
        left = _processes_with(self.root)
        assert not left, f"processes left behind: {left}"


@contextlib.contextmanager
def connected_cluster(root, num_cpus=4, extra_args=()):
    """A Cluster in `root` (`phalanx start` with `extra_args` too) with this process connected
    to it as a driver; disconnected and stopped (and checked: nothing left) at the end."""
    c = Cluster(root, num_cpus=num_cpus, extra_args=extra_args)
    os.environ["PHALANX_TLS_DIR"] = c.tls_dir
    c.env["PHALANX_TLS_DIR"] = c.tls_dir  # not one an earlier module left in os.environ
    try:
        # Inside the try: a cluster whose init fails is stopped too.
        phalanx.init(c.address, token=c.token)
        yield c
    finally:
        phalanx.shutdown()
        os.environ.pop("PHALANX_TLS_DIR", None)
        c.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with connected_cluster(tmp_path_factory.mktemp("phx")) as c:
        yield c


def wait_for(condition, timeout=30.0, interval=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    return condition()
