"""Several "hosts" on one machine, for multi-host tests: network namespaces on a bridge.

    from netns import Hosts, Cluster

    with Hosts(3) as hosts:                      # a bridge and 3 namespaces, one per host
        hosts[1].run(["hostname"]).stdout        # "h1-<run>"
        p = hosts[2].spawn(["sleep", "100"], log="/tmp/x.log")
        hosts[2].link_down(); hosts[2].link_up() # cut the host off the bridge, and back
        with Cluster(hosts) as cluster:          # `phalanx start` on each host, as on 3 machines
            print(cluster.phalanx(0, "status").stdout)
    # every process started in (or living in) those namespaces is killed by pid, and every
    # namespace, veth and the bridge are deleted -- also after an exception, at interpreter
    # exit (atexit) and on SIGTERM/SIGHUP.

Each host is a network namespace with its own address (a veth into the run's bridge, in
10.213.X.0/24) and its own hostname: every command runs as
`ip netns exec NS unshare --uts sh -c 'hostname H; exec "$@"'`, so the boot-id@hostname
machine id Phalanx derives differs between hosts while the file system stays shared (the
same binaries at the same path on every host, as the runtime expects). Traffic never leaves
the bridge: it has no address in the main namespace and the hosts have no default route.
Each host also gets a PHALANX_TMPDIR of its own (its session dirs).

Names carry a per-run prefix with the owner's pid (namespaces `phxmh<pid>h<i>`, veths
`pv<pid>h<i>`/`pv<pid>b<i>`, bridge `phxmb<pid>`): at start, the leftovers of earlier runs
whose owner process is gone (a crash, a SIGKILL) are found by name and removed, with the
processes still living in their namespaces.

Needs root and `ip netns`; `Hosts.unavailable()` says why not (tests skip with that line).
"""

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager


class TestTimeBound(Exception):
    pass


@contextmanager
def time_bound(what, seconds):
    """Raises TestTimeBound in this (main) thread once `what` runs past `seconds` (SIGALRM);
    the code after the `with` (a test's clean-up) still runs."""
    def on_alarm(signum, frame):
        raise TestTimeBound(f"{what} ran past its {seconds} s bound")
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)

NS_PREFIX = "phxmh"        # network namespaces: phxmh<pid>h<i>
BRIDGE_PREFIX = "phxmb"    # bridges: phxmb<pid>
VETH_PREFIX = "pv"         # veth pairs: pv<pid>h<i> (moved into the host, renamed eth0) / pv<pid>b<i>
SUBNET_BASE = "10.213"     # hosts are 10.213.X.(10+i)/24, X from the owner pid
HOST_DEV = "eth0"          # the veth's name inside each host

_NS_RE = re.compile(r"^%s(\d+)h(\d+)$" % NS_PREFIX)
_BRIDGE_RE = re.compile(r"^%s(\d+)$" % BRIDGE_PREFIX)
_VETH_RE = re.compile(r"^%s(\d+)[hb](\d+)$" % VETH_PREFIX)

_live = []                 # every open Hosts, for atexit / signal clean-up
_live_lock = threading.Lock()
_handlers_installed = False


class HarnessUnavailable(RuntimeError):
    """Namespaces cannot be made here (not root, no `ip netns`)."""


def _ip(*args, check=True, timeout=20):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check,
                          timeout=timeout)


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _netns_inode(name):
    try:
        return os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return None


def pids_in_netns(name):
    """Every process whose network namespace is `name` (what `ip netns pids` prints, read from
    /proc directly so that it also works while the namespace is half torn down)."""
    ino = _netns_inode(name)
    if ino is None:
        return []
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino == ino:
                found.append(int(entry))
        except OSError:
            continue
    return sorted(found)


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _kill_pids(pids, rounds_timeout=5.0, relist=None):
    """SIGCONT then SIGKILL each pid (a stopped process dies too); repeat with `relist()`
    (processes forked meanwhile) until nothing is left or the time is up."""
    deadline = time.time() + rounds_timeout
    pids = set(pids)
    while True:
        pids.discard(os.getpid())
        for pid in pids:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        time.sleep(0.05)
        left = set(relist()) if relist else set()
        left |= {p for p in pids if _pid_alive(p) and not _is_zombie(p)}
        left.discard(os.getpid())
        if not left or time.time() > deadline:
            return sorted(left)
        pids = left


def _is_zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def unavailable():
    """None when namespaces can be made here, else one line saying why not."""
    if os.geteuid() != 0:
        return "multi-host tests need root (network namespaces); skipped"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "multi-host tests need `ip` (iproute2) and `unshare` (util-linux); skipped"
    probe = f"{NS_PREFIX}{os.getpid()}probe"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"multi-host tests need `ip netns add` ({r.stderr.strip()}); skipped"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    r = subprocess.run(["ip", "link", "add", f"{BRIDGE_PREFIX}probe", "type", "bridge"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return f"multi-host tests need a bridge (`ip link add type bridge`: {r.stderr.strip()}); skipped"
    subprocess.run(["ip", "link", "del", f"{BRIDGE_PREFIX}probe"], capture_output=True)
    return None


def _run_dir_root():
    return os.path.join(tempfile.gettempdir(), "phalanx-multihost")


def _owner_alive(pid):
    """Is the run that owns names with this pid still going? Its record holds the owner's
    start time, so a reused pid does not keep a dead run's leftovers."""
    if not _pid_alive(pid) or _is_zombie(pid):
        return False
    try:
        with open(os.path.join(_run_dir_root(), f"owner-{pid}")) as f:
            recorded = f.read().strip()
    except OSError:
        return True  # alive and no record: not ours to judge, leave it
    return recorded == _start_time(pid)


def cleanup_stale(log=print):
    """Removes what earlier runs left behind (by name), when their owner process is gone:
    the processes in their namespaces, the namespaces, veths and bridges."""
    removed = []
    names = _ip("netns", "list", check=False).stdout.split("\n")
    for line in names:
        name = line.split(" ")[0].strip()
        m = _NS_RE.match(name)
        if not m or _owner_alive(int(m.group(1))):
            continue
        left = _kill_pids(pids_in_netns(name), relist=lambda n=name: pids_in_netns(n))
        _ip("netns", "del", name, check=False)
        removed.append(name + (f" (pids left: {left})" if left else ""))
    # Wrappers stopped before they entered their namespace: found by their command line.
    wrap_re = re.compile(r"^ip netns exec %s(\d+)h\d+ " % NS_PREFIX)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        m = wrap_re.match(_cmdline(int(entry)))
        if m and not _owner_alive(int(m.group(1))):
            _kill_pids([int(entry)])
            removed.append(f"pid {entry}")
    links = _ip("-o", "link", "show", check=False).stdout.split("\n")
    for line in links:
        parts = line.split(":")
        if len(parts) < 2:
            continue
        dev = parts[1].strip().split("@")[0]
        m = _BRIDGE_RE.match(dev) or _VETH_RE.match(dev)
        if m and not _owner_alive(int(m.group(1))):
            _ip("link", "del", dev, check=False)
            removed.append(dev)
    # Owner records of runs that are gone (their run dirs stay: logs of a failed run).
    for entry in os.listdir(_run_dir_root()) if os.path.isdir(_run_dir_root()) else []:
        m = re.match(r"^owner-(\d+)$", entry)
        if m and int(m.group(1)) != os.getpid() and not _owner_alive(int(m.group(1))):
            try:
                os.unlink(os.path.join(_run_dir_root(), entry))
            except OSError:
                pass
    if removed and log:
        log(f"netns: removed leftovers of earlier runs: {', '.join(removed)}")
    return removed


class Host:
    """One host: a network namespace with its own address, hostname and PHALANX_TMPDIR."""

    def __init__(self, hosts, index, ns, ip, hostname, dev, tmpdir):
        self._hosts = hosts
        self.index = index
        self.name = ns
        self.ip = ip
        self.hostname = hostname
        self.dev = dev            # the veth inside the namespace
        self.tmpdir = tmpdir      # PHALANX_TMPDIR of this host (its session dirs)
        self.procs = []           # every Popen spawn() made

    def __repr__(self):
        return f"Host({self.index}, {self.name}, {self.ip}, {self.hostname})"

    def wrap(self, argv):
        """The command line that runs `argv` on this host (its namespace and hostname)."""
        return ["ip", "netns", "exec", self.name, "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', self.hostname, *[str(a) for a in argv]]

    def env(self, extra=None):
        env = dict(os.environ)
        for k in ("PHALANX_ADDRESS", "PHALANX_TOKEN"):
            env.pop(k, None)
        env["PHALANX_TMPDIR"] = self.tmpdir
        if extra:
            env.update(extra)
        return env

    def spawn(self, argv, env=None, log=None):
        """Starts `argv` on this host in a session of its own; output to `log` (a path) or
        discarded. The process is tracked: killed at the end whatever happens."""
        out = open(log, "ab") if log else subprocess.DEVNULL
        try:
            proc = subprocess.Popen(self.wrap(argv), env=self.env(env), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        finally:
            if log:
                out.close()
        self.procs.append(proc)
        self._hosts._tracked.append(proc)
        return proc

    def run(self, argv, timeout=60, env=None, check=False):
        """Runs `argv` on this host and waits (at most `timeout` s; then it is killed and
        subprocess.TimeoutExpired raised). stdout/stderr as text."""
        proc = subprocess.Popen(self.wrap(argv), env=self.env(env), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        self._hosts._tracked.append(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_pids([proc.pid])
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(proc.args, timeout, out, err)
        result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        if check:
            result.check_returncode()
        return result

    def link_down(self):
        """Cuts this host off: its veth goes down (nothing in, nothing out; no FIN, no RST)."""
        _ip("-n", self.name, "link", "set", self.dev, "down")

    def link_up(self):
        _ip("-n", self.name, "link", "set", self.dev, "up")

    def link_is_up(self):
        return "state UP" in _ip("-n", self.name, "link", "show", self.dev).stdout or \
            ",UP" in _ip("-n", self.name, "link", "show", self.dev).stdout

    def block_host(self, ip):
        """Drops every packet from `ip` arriving at this host (an iptables rule in this host's
        namespace, gone with it). On both hosts of a pair: they cannot reach each other,
        while both still reach every other host (a data-plane partition)."""
        subprocess.run(["ip", "netns", "exec", self.name, "iptables", "-I", "INPUT", "-s", ip,
                        "-j", "DROP"], check=True, capture_output=True, text=True, timeout=20)

    def unblock_host(self, ip):
        subprocess.run(["ip", "netns", "exec", self.name, "iptables", "-D", "INPUT", "-s", ip,
                        "-j", "DROP"], check=True, capture_output=True, text=True, timeout=20)

    def block_tcp(self, port, from_ip):
        """Drops TCP packets from `from_ip` to this host's `port` (an iptables rule in this
        host's namespace, gone with it): a firewall that lets everything else through."""
        self._iptables("-I", port, from_ip)

    def unblock_tcp(self, port, from_ip):
        self._iptables("-D", port, from_ip)

    def _iptables(self, op, port, from_ip):
        subprocess.run(["ip", "netns", "exec", self.name, "iptables", op, "INPUT", "-p", "tcp",
                        "-s", from_ip, "--dport", str(port), "-j", "DROP"],
                       check=True, capture_output=True, text=True, timeout=20)

    def tcp_answers(self, ip, port, timeout=0.5):
        """Whether a TCP handshake from this host to ip:port completes within `timeout` s."""
        code = ("import socket, sys\n"
                "try:\n"
                "    socket.create_connection((sys.argv[1], int(sys.argv[2])), "
                "timeout=float(sys.argv[3])).close()\n"
                "    print('answered')\n"
                "except OSError as e:\n"
                "    print('no answer:', e)\n")
        r = self.run([sys.executable, "-c", code, ip, str(port), str(timeout)], timeout=20)
        return r.stdout.strip() == "answered"

    def pids(self):
        """Every process living on this host (`ip netns pids`)."""
        r = _ip("netns", "pids", self.name, check=False)
        return sorted(int(p) for p in r.stdout.split() if p.isdigit())

    def processes(self):
        """[(pid, command line)] of every process on this host."""
        return [(p, _cmdline(p)) for p in self.pids() if not _is_zombie(p)]

    def pgrep(self, pattern):
        """[(pid, command line)] of the processes on this host whose command line matches the
        regular expression `pattern`."""
        rx = re.compile(pattern)
        return [(p, c) for p, c in self.processes() if rx.search(c)]

    def signal(self, pid, sig):
        os.kill(pid, sig)


class Hosts:
    """`with Hosts(n) as hosts:` n hosts on a bridge; everything is removed at exit."""

    def __init__(self, n, keep_dir_on_failure=True, log=print):
        if n < 1 or n > 200:
            raise ValueError("Hosts(n): 1 <= n <= 200")
        self.n = n
        self.run_id = os.getpid()
        self.subnet = f"{SUBNET_BASE}.{self.run_id % 240 + 10}"
        self.bridge = f"{BRIDGE_PREFIX}{self.run_id}"
        self.keep_dir_on_failure = keep_dir_on_failure
        self.log = log or (lambda *_: None)
        self.hosts = []
        self._tracked = []
        self._closed = True
        self.dir = None

    # -- set-up ---------------------------------------------------------------------------
    def __enter__(self):
        why = unavailable()
        if why:
            raise HarnessUnavailable(why)
        os.makedirs(_run_dir_root(), exist_ok=True)
        with open(os.path.join(_run_dir_root(), f"owner-{self.run_id}"), "w") as f:
            f.write(str(_start_time(self.run_id)))
        cleanup_stale(self.log)
        # Names are per owner pid: a second Hosts in the same process must wait for the first.
        for ns in _ip("netns", "list", check=False).stdout.split("\n"):
            m = _NS_RE.match(ns.split(" ")[0].strip())
            if m and int(m.group(1)) == self.run_id:
                raise RuntimeError("netns: one Hosts at a time per process (close the other)")
        self._closed = False
        _register(self)
        self.dir = tempfile.mkdtemp(prefix=f"run{self.run_id}-", dir=_run_dir_root())
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("link", "set", self.bridge, "up")
            for i in range(self.n):
                self.hosts.append(self._make_host(i))
        except BaseException:
            self.close(failed=True)
            raise
        return self

    def _make_host(self, i):
        ns = f"{NS_PREFIX}{self.run_id}h{i}"
        inner, outer = f"{VETH_PREFIX}{self.run_id}h{i}", f"{VETH_PREFIX}{self.run_id}b{i}"
        ip = f"{self.subnet}.{10 + i}"
        _ip("netns", "add", ns)
        _ip("link", "add", inner, "type", "veth", "peer", "name", outer)
        _ip("link", "set", outer, "master", self.bridge)
        _ip("link", "set", outer, "up")
        _ip("link", "set", inner, "netns", ns)
        _ip("-n", ns, "link", "set", inner, "name", HOST_DEV)
        _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", HOST_DEV)
        _ip("-n", ns, "link", "set", HOST_DEV, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        tmpdir = os.path.join(self.dir, f"h{i}")
        os.makedirs(tmpdir)
        return Host(self, i, ns, ip, f"h{i}-{self.run_id}", HOST_DEV, tmpdir)

    def __exit__(self, exc_type, exc, tb):
        self.close(failed=exc_type is not None)
        return False

    def __getitem__(self, i):
        return self.hosts[i]

    def __len__(self):
        return len(self.hosts)

    def __iter__(self):
        return iter(self.hosts)

    # -- tear-down ------------------------------------------------------------------------
    def all_pids(self):
        pids = set()
        for h in self.hosts:
            pids.update(pids_in_netns(h.name))
        for p in self._tracked:
            if p.poll() is None:
                pids.add(p.pid)
        pids.discard(os.getpid())
        return sorted(pids)

    def kill_all(self):
        """SIGCONT + SIGKILL every process started here or living in these namespaces, by
        pid; returns the pids that would not die (should be empty)."""
        left = _kill_pids(self.all_pids(), rounds_timeout=10.0, relist=self.all_pids)
        for p in self._tracked:
            try:
                p.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        return left

    def close(self, failed=False):
        if self._closed:
            return
        self._closed = True
        left = self.kill_all()
        if left:
            self.log(f"netns: processes that would not die: {left}")
        for h in self.hosts:
            _ip("netns", "del", h.name, check=False)
        # Namespaces that were never listed in self.hosts (a failed set-up) and veth ends.
        for i in range(self.n):
            _ip("netns", "del", f"{NS_PREFIX}{self.run_id}h{i}", check=False)
            for end in ("h", "b"):
                dev = f"{VETH_PREFIX}{self.run_id}{end}{i}"
                if os.path.exists(f"/sys/class/net/{dev}"):
                    _ip("link", "del", dev, check=False)
        _ip("link", "del", self.bridge, check=False)
        try:
            os.unlink(os.path.join(_run_dir_root(), f"owner-{self.run_id}"))
        except OSError:
            pass
        _unregister(self)
        if self.dir:
            if os.environ.get("PHALANX_MULTIHOST_KEEP"):
                self.log(f"netns: logs and sessions kept in {self.dir} (PHALANX_MULTIHOST_KEEP)")
            elif failed and self.keep_dir_on_failure:
                self.log(f"netns: logs and sessions of the failed run kept in {self.dir}")
            else:
                shutil.rmtree(self.dir, ignore_errors=True)


def _register(hosts):
    global _handlers_installed
    with _live_lock:
        _live.append(hosts)
        if not _handlers_installed:
            _handlers_installed = True
            atexit.register(_close_all)
            if threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGTERM, signal.SIGHUP):
                    previous = signal.getsignal(sig)
                    signal.signal(sig, _make_handler(previous))


def _unregister(hosts):
    with _live_lock:
        if hosts in _live:
            _live.remove(hosts)


def _close_all():
    with _live_lock:
        live = list(_live)
    for h in live:
        try:
            h.close(failed=True)
        except Exception as e:  # noqa: BLE001 -- clean up the others whatever happens
            print(f"netns: clean-up failed: {e}", file=sys.stderr)


def _make_handler(previous):
    def handler(signum, frame):
        _close_all()
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
    return handler


# ---------------------------------------------------------------------------------------------
# A Phalanx cluster on the hosts, started with the real CLI as a user would on n machines.

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# Processes of a Phalanx cluster (daemons and the programs hosting actors), by name.
PHALANX_PROCESS_RE = (r"phalanx-gcs|phalanx-node|phalanx-job-runner|redis-server|"
                      r"elastic_regression|phalanx_worker|phalanx\._worker|/bin/phalanx\b")


def bin_dir():
    """This checkout's build/bin (or $PHALANX_BIN_DIR)."""
    return os.environ.get("PHALANX_BIN_DIR") or os.path.join(REPO, "build", "bin")


class Cluster:
    """`phalanx start --head` on host 0 and `phalanx start --address` on the others.

    `with Cluster(hosts) as c:` starts it and, at exit, runs `phalanx stop` on every host and
    checks that no Phalanx process is left (`c.stop()` does the same and returns what was
    left; `c.check_no_strays()` raises if something is)."""

    def __init__(self, hosts, port=6380, num_cpus=2, node_timeout_ms=2000, heartbeat_ms=250,
                 extra_head_args=(), start_timeout=60, head_num_cpus=None):
        self.hosts = hosts
        self.port = port
        self.num_cpus = num_cpus
        self.head_num_cpus = num_cpus if head_num_cpus is None else head_num_cpus
        self.node_timeout_ms = node_timeout_ms
        self.heartbeat_ms = heartbeat_ms
        self.extra_head_args = list(extra_head_args)
        self.start_timeout = start_timeout
        self.bin = bin_dir()
        self.token = None
        self.join_args = []  # what the head's join command adds: --ca-fingerprint F, or --no-tls
        self.address = f"{hosts[0].ip}:{port}"
        self.started = False
        self.stopped = False

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        strays = self.stop()
        if exc_type is None and strays:
            raise AssertionError(f"processes left after `phalanx stop` on every host: {strays}")
        return False

    @property
    def head(self):
        return self.hosts[0]

    def phalanx(self, host, *args, timeout=60, env=None):
        """Runs `phalanx ARGS` on host `host` (an index or a Host); CompletedProcess."""
        h = self.hosts[host] if isinstance(host, int) else host
        return h.run([os.path.join(self.bin, "phalanx"), *args], timeout=timeout, env=env)

    def _start_one(self, i):
        h = self.hosts[i]
        cpus = self.head_num_cpus if i == 0 else self.num_cpus
        common = ["--node-ip-address", h.ip, "--num-cpus", str(cpus),
                  "--heartbeat-ms", str(self.heartbeat_ms)]
        if i == 0:
            args = ["start", "--head", "--port", str(self.port),
                    "--node-timeout-ms", str(self.node_timeout_ms), *common,
                    *self.extra_head_args]
        else:
            # As the head's join command says: the token in the environment, never on a
            # command line (`ps` shows those to every user).
            args = ["start", "--address", self.address, *self.join_args, *common]
        env = {"PHALANX_TOKEN": self.token} if i else None
        r = self.phalanx(i, *args, timeout=self.start_timeout, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"`phalanx {' '.join(args)}` on {h.name} failed "
                               f"({r.returncode}):\n{r.stdout}\n{r.stderr}")
        return r

    def start(self):
        self.started = True
        head = self._start_one(0)
        with open(os.path.join(self.session(0), "token")) as f:
            self.token = f.read().strip()
        # The join command the head printed says how to trust it: the CA's fingerprint.
        m = re.search(r"--ca-fingerprint ([0-9a-f]{64})", head.stdout)
        self.join_args = ["--ca-fingerprint", m.group(1)] if m else ["--no-tls"]
        for i in range(1, len(self.hosts)):
            self._start_one(i)

    def restart(self, timeout=60):
        """Stops the whole cluster and starts it again: a new session, a new head and new node
        ids. Waits until every host's node is alive; raises if something of the old one is left
        or the new one does not come up."""
        left = self.stop()
        if left:
            raise RuntimeError(f"restart: processes left after stop: {left}")
        self.stopped = False
        self.start()
        if not self.wait_alive(len(self.hosts), timeout):
            raise RuntimeError(f"restart: not every node is alive after {timeout} s")

    def wait_alive(self, n, timeout):
        """Whether at least `n` nodes are alive within `timeout` s."""
        deadline = time.time() + timeout
        while len(self.alive_nodes()) < n:
            if time.time() > deadline:
                return False
            time.sleep(0.3)
        return True

    def start_node(self, i):
        """`phalanx start --address ...` on host i again (a new node, a new session)."""
        return self._start_one(i)

    def session(self, host):
        h = self.hosts[host] if isinstance(host, int) else host
        return os.path.realpath(os.path.join(h.tmpdir, "session_latest"))

    def pid_of(self, host, name):
        """The pid in <session>/pids/<name>.pid of that host (gcs, redis, node), or None."""
        try:
            with open(os.path.join(self.session(host), "pids", f"{name}.pid")) as f:
                return int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def restart_gcs(self):
        """Starts the GCS again with the arguments in <session>/gcs.args (after a kill -9), as
        an operator would; the GCS records its own pid where `phalanx stop` finds it."""
        session = self.session(0)
        with open(os.path.join(session, "gcs.args")) as f:
            args = [a for a in f.read().split("\n") if a]
        return self.head.spawn(args, log=os.path.join(session, "logs", "gcs.restarted.out"))

    def restart_redis(self):
        """Starts the embedded Redis again with its config (same port, password and AOF), as an
        operator would; its config has it record its own pid where `phalanx stop` finds it."""
        session = self.session(0)
        redis = shutil.which("redis-server") or "/usr/bin/redis-server"
        return self.head.spawn([redis, os.path.join(session, "redis.conf")],
                               log=os.path.join(session, "logs", "redis.restarted.out"))

    def status(self, host=0):
        """`phalanx status` parsed: [{"node", "state", "address", "head"}]."""
        r = self.phalanx(host, "status", timeout=30)
        nodes = []
        for line in r.stdout.split("\n"):
            m = re.match(r"^\s+([0-9a-f]{6,})\s+(ALIVE|DEAD)\s+(\S+)", line)
            if m:
                nodes.append({"node": m.group(1), "state": m.group(2), "address": m.group(3),
                              "head": "(head)" in line})
        return nodes, r

    def alive_nodes(self, host=0):
        nodes, _ = self.status(host)
        return [n for n in nodes if n["state"] == "ALIVE"]

    def strays(self):
        """Processes of this cluster still running: [(host index, pid, command line)], by
        namespace and by name (a command line naming one of the hosts' session dirs)."""
        found = []
        for h in self.hosts:
            for pid, cmd in h.processes():
                found.append((h.index, pid, cmd))
        seen = {p for _, p, _ in found}
        rx = re.compile(PHALANX_PROCESS_RE)
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in seen or int(entry) == os.getpid():
                continue
            cmd = _cmdline(int(entry))
            for h in self.hosts:
                if h.tmpdir in cmd and rx.search(cmd) and not _is_zombie(int(entry)):
                    found.append((h.index, int(entry), cmd))
        return found

    def stop(self, grace=5, timeout=60):
        """`phalanx stop` on every host (workers first, head last); waits a moment for the
        processes to go; returns what is left (should be [])."""
        if self.stopped or not self.started:
            return []
        self.stopped = True
        for h in list(self.hosts)[1:] + [self.hosts[0]]:
            try:
                r = self.phalanx(h, "stop", "--grace", str(grace), timeout=timeout)
                if r.returncode != 0:
                    self.hosts.log(f"`phalanx stop` on {h.name}: rc {r.returncode} "
                                   f"{r.stdout.strip()} {r.stderr.strip()}")
            except subprocess.TimeoutExpired:
                self.hosts.log(f"`phalanx stop` on {h.name} timed out")
        deadline = time.time() + 5
        while self.strays() and time.time() < deadline:
            time.sleep(0.1)
        return self.strays()

    def check_no_strays(self):
        left = self.strays()
        assert not left, "processes left after `phalanx stop`:\n" + "\n".join(
            f"  host {h} pid {p}: {c}" for h, p, c in left)
