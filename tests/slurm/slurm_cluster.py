"""A real Slurm on this machine, for tests: munged, slurmctld and two slurmd (Debian's
slurm-wlm 22.05 and munge), each slurmd on a host of its own (a network namespace with its
own address and hostname, tests/multihost/netns.py), so a job's first node and its second
reach each other at different addresses, as on two machines.

    with SlurmCluster() as slurm:                 # ~2 s: key, daemons, both nodes idle
        job = slurm.sbatch(["-N", "2", "script.sh"], env={"X": "1"})
        slurm.job_state(job)                      # "RUNNING", "COMPLETED", ... (scontrol)
        slurm.scancel(job)
    # every daemon is stopped by pid, then anything left that names this cluster's
    # slurm.conf or run dir (its command line or its SLURM_CONF) is killed, and the
    # namespaces and the run dir go -- also after an exception.

Everything lives in one run dir, /tmp/phalanx-slurm-XXXX (mode 0711: munged wants every
directory above its socket searchable by all, which pytest's 0700 tmp root is not): the munge
key, socket, seed and log; slurm.conf (found through SLURM_CONF, and given to each daemon with
-f so that its command line names it); the controller's state, each node's spool, every log
and pid file; and `jobs/`, where tests put their scripts and output files. It is removed at the
end, or kept (with a line saying where) after a failure or with PHALANX_SLURM_KEEP=1.
Accounting is none: a job's state comes from `scontrol show job` (finished jobs stay listed
MinJobAge, 300 s).

slurmctld and munged run on host 0 beside node n1; n2 is on host 1. Clients (sbatch, squeue,
scontrol, scancel) run on host 0: the bridge has no address in the main namespace. munged's
socket is a file, which every namespace sees. Living in the hosts' namespaces, every daemon
and everything it starts is also killed by netns's own clean-up (at exit, on SIGTERM, and by
the next run when this one was SIGKILLed). Every daemon runs as root (SlurmUser=root), with
ProctrackType=proctrack/linuxproc and TaskPlugin=task/none: no cgroup is made or changed.

`unavailable()` says why this cannot run here (not root, no Slurm or munge, no namespaces):
one line, for a skip.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "multihost"))
import netns  # noqa: E402

# Bounds, in seconds.
DAEMON_START_S = 20        # munged's socket answers; both nodes are idle
DAEMON_STOP_S = 5          # SIGTERM to SIGKILL
CLIENT_S = 20              # one sbatch / squeue / scontrol / scancel

NODES = ("n1", "n2")       # n1 on host 0 (with slurmctld), n2 on host 1
CPUS_PER_NODE = 2
SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818         # the same on every host: each has its own network namespace
KILL_WAIT_S = 15           # slurm.conf KillWait: SIGTERM to SIGKILL when a job is cancelled
REQUIRED = ("munged", "mungekey", "munge", "slurmctld", "slurmd", "slurmstepd", "sbatch",
            "srun", "squeue", "scontrol", "scancel", "sinfo", "nsenter")


def unavailable():
    """None when a Slurm cluster can be started here, else one line saying why not."""
    if os.geteuid() != 0:
        return "Slurm tests need root (slurmd, network namespaces); skipped"
    missing = [b for b in REQUIRED if shutil.which(b) is None
               and not os.path.exists(os.path.join("/usr/sbin", b))]
    if missing:
        return (f"Slurm tests need Debian's slurm-wlm and munge ({', '.join(missing)} not "
                f"found: apt-get install slurm-wlm munge); skipped")
    why = netns.unavailable()
    if why:
        return why.replace("multi-host tests", "Slurm tests")
    return None


def _which(name):
    return shutil.which(name) or os.path.join("/usr/sbin", name)


def _wrap(host, argv):
    """`argv` on `host`: in its network namespace and with its hostname, like Host.wrap, but
    through nsenter rather than `ip netns exec`, which also gives the process a mount
    namespace with a fresh /sys -- without /sys/fs/cgroup, where slurmd's cgroup plugin (which
    22.05 loads whatever the config says) looks, and fails. Nothing here mounts or changes
    anything: the process sees the machine's /sys."""
    return ["nsenter", f"--net=/run/netns/{host.name}", "unshare", "--uts", "sh", "-c",
            'hostname "$0" && exec "$@"', host.hostname, *[str(a) for a in argv]]


def _environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


class SlurmUnavailable(RuntimeError):
    pass


class SlurmCluster:
    """munged + slurmctld + slurmd n1 (host 0) and n2 (host 1), in a run dir of its own."""

    def __init__(self, log=print):
        self.log = log or (lambda *_: None)
        self.dir = None
        self.hosts = None
        self.munged = None
        self.daemons = {}          # name -> Popen (slurmctld, slurmd-n1, slurmd-n2)
        self.closed = False

    # -- paths ----------------------------------------------------------------------------
    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    @property
    def conf(self):
        return self.path("slurm", "slurm.conf")

    @property
    def munge_socket(self):
        return self.path("munge", "run", "munge.socket")

    @property
    def jobs_dir(self):
        return self.path("jobs")

    def env(self, extra=None):
        env = {"SLURM_CONF": self.conf}
        env.update(extra or {})
        return env

    # -- set-up ---------------------------------------------------------------------------
    def __enter__(self):
        why = unavailable()
        if why:
            raise SlurmUnavailable(why)
        self.dir = tempfile.mkdtemp(prefix="phalanx-slurm-", dir="/tmp")
        os.chmod(self.dir, 0o711)
        try:
            self.hosts = netns.Hosts(2, log=self.log).__enter__()
            self._start_munged()
            self._write_conf()
            self._start_slurm()
        except BaseException:
            self.close(failed=True)
            raise
        return self

    def _start_munged(self):
        for sub, mode in (("etc", 0o700), ("lib", 0o700), ("log", 0o700), ("run", 0o755)):
            os.makedirs(self.path("munge", sub), mode=mode)
            os.chmod(self.path("munge", sub), mode)
        key = self.path("munge", "etc", "munge.key")
        subprocess.run([_which("mungekey"), "-c", "-k", key], check=True, capture_output=True,
                       timeout=CLIENT_S)
        log = open(self.path("munge", "log", "munged.out"), "ab")
        self.munged = subprocess.Popen(
            _wrap(self.hosts[0], [
                _which("munged"), "-F", f"--socket={self.munge_socket}", f"--key-file={key}",
                f"--pid-file={self.path('munge', 'run', 'munged.pid')}",
                f"--log-file={self.path('munge', 'log', 'munged.log')}",
                f"--seed-file={self.path('munge', 'lib', 'munged.seed')}"]),
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        log.close()
        deadline = time.time() + DAEMON_START_S
        while time.time() < deadline:
            r = subprocess.run([_which("munge"), "-n", "-S", self.munge_socket],
                               capture_output=True, timeout=CLIENT_S)
            if r.returncode == 0:
                return
            if self.munged.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"munged did not answer within {DAEMON_START_S} s:\n"
                           f"{self._tail(self.path('munge', 'log', 'munged.log'))}"
                           f"{self._tail(self.path('munge', 'log', 'munged.out'))}")

    def _write_conf(self):
        for sub in ("slurm/state", "slurm/log", "slurm/run", "jobs",
                    *(f"slurm/spool/{n}" for n in NODES)):
            os.makedirs(self.path(sub), exist_ok=True)
        h0 = self.hosts[0]
        s = self.path("slurm")
        nodes = "\n".join(
            f"NodeName={n} NodeHostname={h.hostname} NodeAddr={h.ip} Port={SLURMD_PORT} "
            f"CPUs={CPUS_PER_NODE} State=UNKNOWN" for n, h in zip(NODES, self.hosts))
        conf = f"""\
# Written by tests/slurm/slurm_cluster.py for one test run; everything under {self.dir}.
ClusterName=phalanxtest
SlurmctldHost={h0.hostname}({h0.ip})
SlurmctldPort={SLURMCTLD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={s}/state
SlurmdSpoolDir={s}/spool/%n
SlurmctldPidFile={s}/run/slurmctld.pid
SlurmdPidFile={s}/run/slurmd.%n.pid
SlurmctldLogFile={s}/log/slurmctld.log
SlurmdLogFile={s}/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
ReturnToService=2
KillWait={KILL_WAIT_S}
MinJobAge=300
InactiveLimit=0
SlurmdTimeout=60
MessageTimeout=10
{nodes}
PartitionName=test Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP
"""
        with open(self.conf, "w") as f:
            f.write(conf)

    def _spawn(self, host, name, argv):
        log = open(self.path("slurm", "log", f"{name}.out"), "ab")
        try:
            self.daemons[name] = subprocess.Popen(
                _wrap(host, argv), env=host.env(self.env()), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()

    def _start_slurm(self):
        self._spawn(self.hosts[0], "slurmctld",
                    [_which("slurmctld"), "-D", "-c", "-i", "-f", self.conf])
        for i, node in enumerate(NODES):
            self._spawn(self.hosts[i], f"slurmd-{node}",
                        [_which("slurmd"), "-D", "-N", node, "-f", self.conf])
        deadline = time.time() + DAEMON_START_S
        states = ""
        while time.time() < deadline:
            for name, p in self.daemons.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited ({p.returncode}):\n{self.logs_tail()}")
            r = self.client(["sinfo", "-h", "-N", "-o", "%N %T"], check=False)
            states = r.stdout.strip()
            if r.returncode == 0 and all(
                    re.search(rf"^{n} idle$", states, re.M) for n in NODES):
                return
            time.sleep(0.2)
        raise RuntimeError(f"the nodes are not idle within {DAEMON_START_S} s (sinfo: "
                           f"{states!r}):\n{self.logs_tail()}")

    # -- clients (on host 0) --------------------------------------------------------------
    def client(self, argv, env=None, check=True, timeout=CLIENT_S):
        h = self.hosts[0]
        try:
            r = subprocess.run(_wrap(h, [_which(argv[0]), *argv[1:]]), env=h.env(self.env(env)),
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"`{' '.join(argv)}` took more than {timeout} s") from e
        if check and r.returncode != 0:
            raise RuntimeError(f"`{' '.join(argv)}` failed ({r.returncode}): "
                               f"{r.stdout.strip()} {r.stderr.strip()}")
        return r

    def sbatch(self, args, env=None):
        """Submits a batch job; returns its id. `env`: added to the environment sbatch
        exports to the job (the whole environment of the call, as sbatch does by default)."""
        r = self.client(["sbatch", "--parsable", *args], env=env)
        return r.stdout.strip().split(";")[0]

    def show_job(self, job_id):
        """`scontrol show job` as a dict (JobState, ExitCode, NodeList, ...); {} if unknown."""
        r = self.client(["scontrol", "-o", "show", "job", str(job_id)], check=False)
        if r.returncode != 0:
            return {}
        return dict(re.findall(r"(\w+)=(\S*)", r.stdout))

    def job_state(self, job_id):
        return self.show_job(job_id).get("JobState", "")

    def scancel(self, job_id):
        self.client(["scancel", str(job_id)])

    # -- tear-down ------------------------------------------------------------------------
    def _tail(self, path, n=3000):
        try:
            with open(path, errors="replace") as f:
                data = f.read()
        except OSError:
            return ""
        return f"--- {path} (last {n} chars)\n{data[-n:]}\n"

    def logs_tail(self):
        logs = [self.path("slurm", "log", f) for f in sorted(os.listdir(self.path("slurm", "log")))]
        return "".join(self._tail(p, 1500) for p in logs)

    def strays(self):
        """[(pid, command line)] of processes of this cluster still running, found by name:
        their command line names the run dir or slurm.conf, or their SLURM_CONF is it (every
        slurmstepd and every job's process carries it)."""
        if not self.dir:
            return []
        conf_env = f"SLURM_CONF={self.conf}".encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            pid = int(entry)
            cmd = netns._cmdline(pid)
            if netns._is_zombie(pid):
                continue
            if self.dir in cmd or conf_env in _environ(pid):
                found.append((pid, cmd))
        return found

    def _terminate(self, procs):
        for p in procs:
            if p is not None and p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + DAEMON_STOP_S
        for p in procs:
            if p is None:
                continue
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                netns._kill_pids([p.pid])
                p.wait(timeout=DAEMON_STOP_S)

    def close(self, failed=False):
        """Stops everything this cluster started (by pid, then by name), removes the namespaces
        and the run dir (kept when `failed`, with a line saying where)."""
        if self.closed:
            return
        self.closed = True
        # Slurm first, while munged still answers: the daemons by pid, then what they left.
        self._terminate([self.daemons.get(f"slurmd-{n}") for n in NODES] +
                        [self.daemons.get("slurmctld")])
        left = netns._kill_pids([p for p, _ in self.strays()
                                 if self.munged is None or p != self.munged.pid],
                                rounds_timeout=DAEMON_STOP_S,
                                relist=lambda: [p for p, _ in self.strays()
                                                if self.munged is None or p != self.munged.pid])
        if left:
            self.log(f"slurm: processes that would not die: {left}")
        self._terminate([self.munged])
        if self.hosts is not None:
            self.hosts.close(failed=failed)
            self.hosts = None
        left = netns._kill_pids([p for p, _ in self.strays()], rounds_timeout=DAEMON_STOP_S)
        if left:
            self.log(f"slurm: processes that would not die: {left}")
        if self.dir:
            if failed or os.environ.get("PHALANX_SLURM_KEEP"):
                self.log(f"slurm: the run dir (logs, job output) is kept in {self.dir}")
            else:
                shutil.rmtree(self.dir, ignore_errors=True)

    def __exit__(self, exc_type, exc, tb):
        self.close(failed=exc_type is not None)
        return False
