"""Redis HA with Sentinel, end to end: a primary, one replica and 3 sentinels on loopback; a
head started with `--redis-sentinel`; an elastic job (examples/cpp/elastic_regression) and a
driver writing KV keys while the primary is killed with SIGKILL. The GCS moves to the new
primary, the job ends SUCCEEDED with no committed step lost, every KV write the GCS
acknowledged is on the new primary, and a GCS restarted from the new primary reports the
same actors, jobs and KV as before (every table intact)."""

import difflib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from phalanx import _native
import phalanx
from conftest import Cluster, _free_port, _processes_with, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "multihost"))
import jobs  # noqa: E402  (the elastic regression job's spec and step-log analysis)

REDIS_SERVER = shutil.which("redis-server")
# redis-sentinel is redis-server in its sentinel mode (`redis-server CONF --sentinel`).
pytestmark = pytest.mark.skipif(
    REDIS_SERVER is None,
    reason="redis-server is not installed (apt-get install redis-server redis-sentinel)")

PASSWORD = "sentinel-test-pw"
MASTER = "phx"


class Resp:
    """A minimal Redis client (RESP2 over a socket): exact bytes, no extra package."""

    def __init__(self, port, password=None, timeout=2.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        if password:
            self.call("AUTH", password)

    def close(self):
        self.sock.close()

    def call(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self._read()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _read(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError("closed")
                self.buf += chunk
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise RuntimeError(f"bad reply {line!r}")


def call(port, *args, password=PASSWORD):
    """One command; None if the server does not answer."""
    try:
        c = Resp(port, password)
        try:
            return c.call(*args)
        finally:
            c.close()
    except (OSError, RuntimeError):
        return None


class SentinelSet:
    """A primary, one replica and 3 sentinels (quorum 2, down-after 1 s, failover-timeout
    3 s) in `root`, each started by pid and stopped by pid (then by port, as a fallback)."""

    def __init__(self, root):
        self.root = str(root)
        self.redis_ports = [_free_port(), _free_port()]
        self.sentinel_ports = [_free_port() for _ in range(3)]
        self.procs = []

    def _spawn(self, argv, log):
        with open(log, "ab") as out:
            self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL,
                                               start_new_session=True))

    def start(self):
        for i, port in enumerate(self.redis_ports):
            d = os.path.join(self.root, f"redis{i}")
            os.makedirs(d)
            argv = [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
                    "--save", "", "--appendonly", "no", "--daemonize", "no",
                    "--requirepass", PASSWORD, "--masterauth", PASSWORD,
                    "--repl-diskless-sync-delay", "0"]
            if i == 1:
                argv += ["--replicaof", "127.0.0.1", str(self.redis_ports[0])]
            self._spawn(argv, os.path.join(d, "redis.log"))
        for i, port in enumerate(self.sentinel_ports):
            d = os.path.join(self.root, f"sentinel{i}")
            os.makedirs(d)
            conf = os.path.join(d, "sentinel.conf")
            with open(conf, "w") as f:
                # known-replica: the sentinels know the replica at once, not after their 10 s
                # INFO poll of the primary.
                f.write(f"port {port}\nbind 127.0.0.1\ndir {d}\n"
                        f"sentinel monitor {MASTER} 127.0.0.1 {self.redis_ports[0]} 2\n"
                        f"sentinel auth-pass {MASTER} {PASSWORD}\n"
                        f"sentinel down-after-milliseconds {MASTER} 1000\n"
                        f"sentinel failover-timeout {MASTER} 3000\n"
                        f"sentinel known-replica {MASTER} 127.0.0.1 {self.redis_ports[1]}\n")
            self._spawn([REDIS_SERVER, conf, "--sentinel"], os.path.join(d, "sentinel.log"))

        def ready():
            info = call(self.redis_ports[1], "INFO", "replication")
            if not info or b"master_link_status:up" not in info:
                return False
            for port in self.sentinel_ports:
                m = call(port, "SENTINEL", "master", MASTER, password=None)
                if not m or dict(zip(m[::2], m[1::2])).get(b"num-slaves") != b"1":
                    return False
            return True
        assert wait_for(ready, timeout=30, interval=0.1), \
            f"the sentinels never saw the replica in sync; logs in {self.root}"

    def sentinels(self):
        return ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)

    def primary_port(self):
        for port in self.sentinel_ports:
            a = call(port, "SENTINEL", "get-master-addr-by-name", MASTER, password=None)
            if a:
                return int(a[1])
        return None

    def kill_primary(self):
        port = self.primary_port()
        proc = self.procs[self.redis_ports.index(port)]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        return port

    def wait_failover(self, old_port, timeout=20):
        def moved():
            port = self.primary_port()
            if port and port != old_port:
                role = call(port, "ROLE")
                if role and role[0] == b"master":
                    return port
            return None
        return wait_for(moved, timeout=timeout, interval=0.05)

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        # Fallback: anything still serving one of our ports (redis rewrites its process title
        # to "redis-server 127.0.0.1:PORT").
        for port in self.redis_ports + self.sentinel_ports:
            for pid, cmd in _processes_with("redis-server", f"127.0.0.1:{port}"):
                os.kill(pid, signal.SIGKILL)


def tables(port, cluster_id):
    """Every hash of the cluster on the Redis at `port`: {name: {field: value}}."""
    c = Resp(port, PASSWORD)
    try:
        names, cursor = [], b"0"
        while True:
            cursor, batch = c.call("SCAN", cursor, "MATCH", f"phx:{cluster_id}:*", "COUNT", 1000)
            names += batch
            if cursor == b"0":
                break
        out = {}
        for name in names:
            if c.call("TYPE", name) == "hash":
                flat = c.call("HGETALL", name)
                out[name.decode()] = dict(zip(flat[::2], flat[1::2]))
        return out
    finally:
        c.close()


@pytest.fixture
def sentinel_cluster(tmp_path):
    sentinels = SentinelSet(tmp_path / "redis")
    os.makedirs(sentinels.root)
    cluster = None
    try:
        sentinels.start()
        cluster = Cluster(tmp_path / "phx", extra_args=(
            "--redis-sentinel", sentinels.sentinels(), "--redis-master-name", MASTER,
            "--redis-password", PASSWORD))
        yield sentinels, cluster
    finally:
        try:
            phalanx.shutdown()
            if cluster is not None:
                cluster.stop()
        finally:
            sentinels.stop()


def test_bad_sentinel_flags_are_refused_naming_the_flag(tmp_path):
    c = Cluster.__new__(Cluster)  # only for its cli(); nothing is started
    c.env = dict(os.environ, PHALANX_TMPDIR=str(tmp_path))
    port = str(_free_port())
    r = c.cli("start", "--head", "--port", port, "--redis-sentinel", "127.0.0.1")
    assert r.returncode != 0
    assert "--redis-sentinel '127.0.0.1': '127.0.0.1' is not HOST:PORT" in r.stderr, r.stderr
    r = c.cli("start", "--head", "--port", port, "--redis-sentinel", "127.0.0.1:1")
    assert r.returncode != 0
    assert "--redis-sentinel needs --redis-master-name" in r.stderr, r.stderr
    r = c.cli("start", "--head", "--port", port, "--redis-sentinel", "127.0.0.1:1",
              "--redis-master-name", MASTER, timeout=60)
    assert r.returncode != 0
    assert f"no Redis primary for master '{MASTER}' from the sentinels 127.0.0.1:1" in r.stderr, \
        r.stderr


def test_a_sentinel_failover_mid_job_loses_nothing(sentinel_cluster, tmp_path):
    sentinels, cluster = sentinel_cluster
    session = os.path.join(cluster.root, "session_latest")
    with open(os.path.join(session, "cluster_id")) as f:
        cluster_id = f.read().strip()
    gcs_log = os.path.join(session, "logs", "gcs.log")

    # A driver that writes KV keys one after another, through the failover.
    os.environ["PHALANX_TLS_DIR"] = cluster.tls_dir
    phalanx.init(cluster.address, token=cluster.token)
    acked, failed, stop = [], [], threading.Event()

    def kv_writer():
        i = 0
        while not stop.is_set():
            try:
                _native.kv_put("sentinel-test", f"k{i}", f"v{i}".encode(), True)
                acked.append(i)
            except Exception as e:  # noqa: BLE001 -- any failure is reported below
                failed.append((i, repr(e)))
            i += 1
            time.sleep(0.005)
    writer = threading.Thread(target=kv_writer, daemon=True)

    # The elastic job: 2 ranks, ~600 steps of 20 ms, followed by `phalanx job submit -f`.
    run_dir = tmp_path / "job"
    os.makedirs(run_dir)
    step_log = str(run_dir / "steps.log")
    open(step_log, "w").close()
    spec = run_dir / "spec.yaml"
    spec.write_text(jobs.spec_yaml(os.path.join(_native.BIN_DIR, "elastic_regression"),
                                   step_log, steps=600, step_ms=20, replicas=2,
                                   min_replicas=1, max_replicas=2, cpu=1, hang_s=30))
    submit_log = open(run_dir / "submit.log", "w")
    submit = subprocess.Popen([os.path.join(_native.BIN_DIR, "phalanx"), "job", "submit",
                               "-f", str(spec)], env=cluster.env, stdout=submit_log,
                              stderr=subprocess.STDOUT)
    try:
        def steps():
            out = []
            with open(step_log) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 3:
                        out.append(tuple(int(x) for x in parts))
            return out
        assert wait_for(lambda: steps() and steps()[-1][0] >= 100, timeout=90), \
            f"the job did not reach step 100:\n{open(run_dir / 'submit.log').read()}"
        writer.start()
        time.sleep(0.5)

        old = sentinels.kill_primary()
        fault_ms = jobs.now_ms()
        new = sentinels.wait_failover(old, timeout=20)
        assert new, "the sentinels did not fail over within 20 s"
        print(f"\nfailover: new primary {new} {(jobs.now_ms() - fault_ms) / 1000:.2f} s "
              f"after the kill")

        rc = submit.wait(timeout=180)
        stop.set()
        writer.join(timeout=60)
        output = open(run_dir / "submit.log").read()
        assert rc == 0, f"the job did not succeed (rc {rc}):\n{output}"
        assert "SUCCEEDED" in output, output
    finally:
        stop.set()
        if submit.poll() is None:
            submit.kill()
            submit.wait(timeout=10)
        submit_log.close()

    # The GCS moved to the new primary.
    log = open(gcs_log).read()
    assert f"writing to Redis at 127.0.0.1:{new} now (was Redis at 127.0.0.1:{old})" in log, \
        log[-3000:]
    # No committed step lost, every step agreed.
    a = jobs.analyze_steps(steps(), fault_ms, 600)
    print("job:", jobs.format_analysis(a))
    assert a["lost"] == 0 and a["complete"], a

    # Every KV write the GCS acknowledged is on the new primary (no write failed either).
    assert not failed, failed[:5]
    assert len(acked) > 50, len(acked)
    on_primary = tables(new, cluster_id).get(f"phx:{cluster_id}:kv:sentinel-test", {})
    # (The stored value is the GCS's KV entry record, which holds the value's bytes.)
    missing = [i for i in acked if f"v{i}".encode() not in on_primary.get(f"k{i}".encode(), b"")]
    print(f"kv: {len(acked)} writes acknowledged, {len(missing)} missing on the new primary")
    assert not missing, missing[:10]
    phalanx.shutdown()

    # Every table intact: a GCS restarted from the new primary reports what the running one
    # reported (actors, jobs, the job's record), and the tables on Redis did not change.
    def view():
        actors = cluster.cli("list", "actors", "--all")
        job_list = cluster.cli("job", "list")
        assert actors.returncode == 0 and job_list.returncode == 0, actors.stderr + job_list.stderr
        return actors.stdout, job_list.stdout
    # The job's actors are stopped after the job is SUCCEEDED: wait until every one is
    # recorded DEAD, so that the view is settled before the restart.
    def settled():
        actors = cluster.cli("list", "actors", "--all").stdout.splitlines()[1:]
        return actors and all(" DEAD " in line for line in actors)
    assert wait_for(settled, timeout=30), cluster.cli("list", "actors", "--all").stdout
    before_view = view()
    before_tables = tables(new, cluster_id)
    gcs_pid = int(open(os.path.join(session, "pids", "gcs.pid")).read().split()[0])
    os.kill(gcs_pid, signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{gcs_pid}") or
             open(f"/proc/{gcs_pid}/stat").read().split()[2] == "Z", timeout=10)
    args = open(os.path.join(session, "gcs.args")).read().split("\n")
    with open(os.path.join(session, "logs", "gcs.restart.out"), "ab") as out:
        subprocess.Popen([a for a in args if a], stdout=out, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    assert wait_for(lambda: cluster.cli("status").returncode == 0, timeout=30), \
        open(gcs_log).read()[-3000:]
    after_view = view()
    for before_text, after_text in zip(before_view, after_view):
        assert after_text == before_text, "\n".join(difflib.unified_diff(
            before_text.splitlines(), after_text.splitlines(), "before the GCS restart",
            "after", lineterm=""))
    after_tables = tables(new, cluster_id)
    for name in before_tables:
        if ":nodes" in name or ":meta" in name:
            continue  # a restarted GCS records its start and the node's reconnect
        assert after_tables.get(name) == before_tables[name], name
    print(f"tables: {len(before_tables)} hashes, "
          f"{sum(len(v) for v in before_tables.values())} entries on the new primary; "
          f"actors and jobs the same after a GCS restart from it")
