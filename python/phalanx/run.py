"""``phalanx run``: torchrun's (and horovodrun's) command line on a Phalanx cluster.

    phalanx run --nnodes 1:2 --nproc-per-node 2 --max-restarts 3 train.py --epochs 5
    phalanx run -m mypkg.train
    phalanx run --horovod -np 3 --min-np 1 --max-np 5 --host-discovery-script ./hosts.sh \\
        python train.py

Each worker is a rank of an elastic job, placed on the cluster's nodes: the script runs in a
warm process (torch already imported) with the environment torchrun gives (RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR, TORCHELASTIC_RESTART_COUNT, ...), in a copy of the script's
directory shipped to its node. A failure (a death, a hang, a cut host) restarts the worker
group as torchrun's agent does, found in milliseconds rather than at torch's timeout; with
``--nnodes MIN:MAX`` the group re-forms at the size the cluster can give. Output comes back
prefixed by rank; the exit code is torchrun's (0, or 1 when the job failed).

With no cluster to join (no ``--address``, no ``$PHALANX_ADDRESS``, no ``phalanx start`` on
this machine) it starts a private one on this machine, as ``torchrun --standalone`` would.
``phalanx job submit --torchrun [options] -- script.py`` submits the same job and returns.
"""

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time

# Rank-prefixed output and the job's events are polled this often while following.
FOLLOW_POLL_S = 0.2
# After Ctrl-C: how long the job may take to stop before this command exits anyway.
STOP_WAIT_S = 30.0
# What --hang-timeout defaults to: torchrun finds no hangs; Phalanx's frozen-rank probe still
# restarts a stopped worker within about a second (hang.silentSeconds).
NO_HANG_TIMEOUT_S = 7 * 24 * 3600
# Below the fewest workers (--nnodes MIN, --min-np) with the restarts used up or no room for
# a replacement: how long the job waits for a node before it fails (torchrun fails at once
# when its restarts are used up; its agents wait join_timeout, 600 s, for missing nodes).
BELOW_MIN_TIMEOUT_S = 10.0
# How long the first placement of the workers may wait for room (torchrun's join_timeout).
PLACE_TIMEOUT_S = 600.0
# Horovod: how often the host discovery script runs (horovodrun's default is 1 s).
DISCOVERY_INTERVAL_S = 1.0
DISCOVERY_TIMEOUT_S = 10.0
# A restarted rank waits this long for its previous run of the script to unwind.
RESTART_UNWIND_S = 0.1


class UsageError(Exception):
    """A command line this command refuses: the message names the option and the fix."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _add(parser, name, *aliases, **kw):
    """An option in both spellings, as torch 2's torchrun takes them (--nproc-per-node and
    --nproc_per_node)."""
    names = [name] + list(aliases)
    if name.startswith("--") and "-" in name[2:]:
        names.append("--" + name[2:].replace("-", "_"))
    parser.add_argument(*names, **kw)


def _parser(horovod):
    p = _Parser(prog="phalanx run", add_help=True,
                description="torchrun's command line on a Phalanx cluster (see --help)")
    p.add_argument("--horovod", action="store_true",
                   help="launch a Horovod elastic program (horovodrun's options)")
    if horovod:
        p.add_argument("-np", "--num-proc", dest="np", type=int, required=True,
                       help="the number of workers to start")
        _add(p, "--min-np", type=int, help="the fewest workers the job may run with")
        _add(p, "--max-np", type=int, help="the most workers the job may grow to")
        _add(p, "--host-discovery-script",
             help="a program printing the usable hosts, one per line, HOST[:SLOTS]")
        _add(p, "--slots-per-host", type=int, default=1,
             help="slots of a discovered host that names none")
        p.add_argument("-H", "--hosts", help="accepted; the cluster's nodes are the hosts")
        _add(p, "--reset-limit", type=int, help="the most resets before the job fails")
        for flag in ("--start-timeout", "--elastic-timeout", "--network-interface"):
            _add(p, flag, help="accepted (Phalanx's own bounds apply)")
        p.add_argument("--verbose", action="store_true", help="accepted")
    else:
        _add(p, "--nnodes", default="1", help="nodes as N or MIN:MAX (workers: nodes x nproc)")
        _add(p, "--nproc-per-node", default="1",
             help="workers per node: N, auto (GPUs, else CPUs), cpu or gpu")
        _add(p, "--max-restarts", type=int, default=0,
             help="worker group restarts before the job fails (torchrun's default 0)")
        _add(p, "--rdzv-id", default=None, help="the run's id (TORCHELASTIC_RUN_ID)")
        for flag in ("--rdzv-backend", "--rdzv-endpoint", "--rdzv-conf", "--start-method",
                     "--master-addr", "--master-port", "--local-addr", "--monitor-interval"):
            _add(p, flag, help="accepted; the GCS is the rendezvous, failures are found by "
                               "Phalanx")
        _add(p, "--standalone", action="store_true", help="one node: --nnodes 1")
        _add(p, "--role", default="default", help="the workers' role (accepted)")
        _add(p, "--node-rank", type=int, default=None, help="accepted (ranks are assigned)")
        _add(p, "--no-python", action="store_true",
             help="refused: phalanx run runs Python programs in warm workers")
        _add(p, "--run-path", action="store_true", help="accepted (the script runs by path)")
        _add(p, "--log-dir", help="write each worker's output under "
                                  "LOG_DIR/RUN_ID/attempt_N/LOCAL_RANK/, on its node")
        _add(p, "--redirects", "-r", default="0",
             help="streams to the log files only: 0 none, 1 stdout, 2 stderr, 3 both")
        _add(p, "--tee", "-t", default="0",
             help="streams to the log files and the console: 0 none, 1, 2, 3")
        p.add_argument("-m", "--module", action="store_true",
                       help="run the program as a module, as python -m")
    # Phalanx's own.
    p.add_argument("--address", help="the cluster's GCS HOST:PORT (default: $PHALANX_ADDRESS, "
                                     "else this machine's, else a private one)")
    _add(p, "--backend", choices=("phalanx", "script"), default="script",
         help="phalanx: the script's init_process_group() gets the phalanx backend, so a "
              "lost peer fails the survivors' ops at once; script (default): the backend the "
              "script names" if not horovod else "accepted (Horovod runs on phalanx)")
    _add(p, "--cpus-per-worker", type=float, default=1.0,
         help="CPUs each worker reserves on its node (default 1)")
    _add(p, "--hang-timeout", type=float, default=NO_HANG_TIMEOUT_S,
         help="restart the group when a worker's script makes no progress this long "
              "(seconds; default: never, as torchrun)")
    _add(p, "--below-min-timeout", type=float, default=BELOW_MIN_TIMEOUT_S,
         help="fail when the job has been below its fewest workers this long (seconds): "
              "restarts used up, or nodes lost and none to replace them")
    _add(p, "--working-dir", help="the directory shipped to every node (default: the "
                                  "script's; with -m, this one)")
    _add(p, "--memory-saves", action="store_true",
         help="the script's torch.save(obj, path) returns once the bytes are in the node's "
              "memory (the file is written in the background), and torch.load(path) after a "
              "restart reads that copy: no disk read (default: off)")
    _add(p, "--name", help="the job's name (default: the script's)")
    _add(p, "--no-follow", action="store_true",
         help="submit and print the job's id (phalanx job submit --torchrun)")
    p.add_argument("training_script", help="the script (or module, with -m)")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return p


def _streams(value, option):
    """torchrun's --redirects/--tee value: the file descriptors (1, 2) it covers."""
    table = {"0": set(), "1": {1}, "2": {2}, "3": {1, 2}}
    if value not in table:
        raise UsageError(f"{option} {value}: give 0 (none), 1 (stdout), 2 (stderr) or 3 (both)")
    return table[value]


def _nnodes(value):
    lo, _, hi = value.partition(":")
    try:
        lo, hi = int(lo), int(hi or lo)
    except ValueError:
        raise UsageError(f"--nnodes {value}: give a number of nodes, or MIN:MAX") from None
    if lo < 1 or hi < lo:
        raise UsageError(f"--nnodes {value}: give 1 <= MIN <= MAX (e.g. --nnodes 1:2)")
    return lo, hi


def _nproc(value):
    if value.isdigit() and int(value) >= 1:
        return int(value), False
    gpus = _local_gpus()
    if value == "gpu":
        if gpus == 0:
            raise UsageError("--nproc-per-node gpu: this machine has no GPU that torch sees; "
                             "give a number of workers")
        return gpus, True
    if value == "auto":
        return (gpus, True) if gpus else (os.cpu_count() or 1, False)
    if value == "cpu":
        return os.cpu_count() or 1, False
    raise UsageError(f"--nproc-per-node {value}: give a number >= 1, auto, cpu or gpu")


def _local_gpus():
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - no torch: no GPU
        return 0


class Plan:
    """What a command line asks for, checked before anything starts."""

    def __init__(self, args):
        self.args = args
        self.horovod = args.horovod
        command = [args.training_script] + list(args.training_script_args)
        if self.horovod:
            # horovodrun takes a command: `python prog.py ...`.
            while command and os.path.basename(command[0]).startswith("python"):
                command.pop(0)
                while command and command[0] in ("-u", "-B"):
                    command.pop(0)
            if not command:
                raise UsageError("--horovod: give the program, e.g. python train.py")
            if command[0] == "-m":
                raise UsageError("--horovod: give the program's path (python train.py), not -m")
            self.module = False
            if args.np < 1:
                raise UsageError(f"-np {args.np}: give 1 or more workers")
            self.min_workers = args.min_np if args.min_np is not None else args.np
            self.max_workers = args.max_np if args.max_np is not None else args.np
            if not 1 <= self.min_workers <= args.np <= self.max_workers:
                raise UsageError(f"-np {args.np} --min-np {self.min_workers} --max-np "
                                 f"{self.max_workers}: give 1 <= min-np <= np <= max-np")
            self.initial = args.np
            self.use_gpu = False
            self.max_restarts = args.reset_limit if args.reset_limit is not None else 100
            self.backend = "phalanx"
            self.redirects = self.tee = set()
            self.log_dir = None
            self.run_id = args.name
            if args.host_discovery_script and not os.access(args.host_discovery_script,
                                                            os.X_OK):
                raise UsageError(f"--host-discovery-script {args.host_discovery_script}: not an "
                                 f"executable file")
        else:
            if args.no_python:
                raise UsageError("--no-python: phalanx run runs Python programs in warm "
                                 "workers; run other programs with `phalanx job submit`")
            lo, hi = (1, 1) if args.standalone else _nnodes(args.nnodes)
            nproc, self.use_gpu = _nproc(args.nproc_per_node)
            self.module = args.module
            self.min_workers, self.max_workers = lo * nproc, hi * nproc
            self.initial = self.max_workers
            if args.max_restarts < 0:
                raise UsageError(f"--max-restarts {args.max_restarts}: give 0 or more")
            self.max_restarts = args.max_restarts
            self.backend = args.backend
            self.redirects = _streams(args.redirects, "--redirects")
            self.tee = _streams(args.tee, "--tee")
            self.log_dir = os.path.abspath(args.log_dir) if args.log_dir else None
            if (self.redirects or self.tee) and not self.log_dir:
                import tempfile
                self.log_dir = tempfile.mkdtemp(prefix="torchelastic_")
            self.run_id = args.rdzv_id
        if args.cpus_per_worker < 0:
            raise UsageError(f"--cpus-per-worker {args.cpus_per_worker}: give 0 or more")
        if not args.below_min_timeout > 0:
            raise UsageError(f"--below-min-timeout {args.below_min_timeout}: give seconds > 0")
        if not args.hang_timeout > 0:
            raise UsageError(f"--hang-timeout {args.hang_timeout}: give seconds > 0")
        self.target, self.args_after = command[0], command[1:]
        if self.module:
            self.root = os.path.abspath(args.working_dir or os.getcwd())
            self.relative = self.target
        else:
            script = os.path.abspath(self.target)
            if not os.path.isfile(script):
                raise UsageError(f"{self.target}: no such file: give the path of a Python "
                                 f"script, or -m MODULE")
            self.root = os.path.abspath(args.working_dir or os.path.dirname(script))
            self.relative = os.path.relpath(script, self.root)
            if self.relative.startswith(".."):
                raise UsageError(f"{self.target} is outside --working-dir {self.root}: the "
                                 f"script must be in the directory that is shipped")
        if not os.path.isdir(self.root):
            raise UsageError(f"--working-dir {self.root}: not a directory")
        stem = os.path.splitext(os.path.basename(self.target))[0].replace(".", "-")
        self.name = args.name or stem or "run"
        self.run_id = self.run_id or "none"  # torchrun's default --rdzv-id


def _connect(address, workers, cpus):
    """Joins the cluster (``--address``, $PHALANX_ADDRESS, or this machine's), else starts a
    private one on this machine sized to the job."""
    import phalanx
    if address or os.environ.get("PHALANX_ADDRESS"):
        phalanx.init(address)
        return False
    from .exceptions import NotFoundError
    try:
        phalanx.init("auto")
        return False
    except NotFoundError:
        pass  # no session on this machine; any other error (TLS, a dead GCS) is the user's
    phalanx.init(num_cpus=max(os.cpu_count() or 1, int(workers * cpus + 0.999)))
    return True


def _check_fit(plan):
    """Refuses a job the cluster cannot hold even at its minimum, naming the fix."""
    from phalanx import _native
    alive = [n for n in _native.nodes() if n["alive"]]
    cpus = sum(n["resources"].get("CPU", 0) for n in alive)
    need = plan.min_workers * plan.args.cpus_per_worker
    if need > cpus + 1e-9:
        raise UsageError(f"{plan.min_workers} workers of {plan.args.cpus_per_worker:g} CPU "
                         f"need {need:g} CPUs; the cluster's {len(alive)} node(s) offer "
                         f"{cpus:g}: pass --cpus-per-worker {cpus / plan.min_workers:.2g}, or "
                         f"add nodes")
    return len(alive)


def _submit(plan, nodes, allowed=None):
    import secrets
    from phalanx import _native
    from . import _torchrun, train
    archive, shipped = _torchrun.pack_directory(plan.root)
    key = f"run/{plan.name}-{secrets.token_hex(6)}/working_dir"
    _native.kv_put("elastic", key, archive, True)
    loop = _torchrun.ScriptLoop(
        plan.relative, plan.args_after, plan.module, key, shipped, backend=plan.backend,
        run_id=plan.run_id, max_restarts=plan.max_restarts, log_dir=plan.log_dir,
        redirects=plan.redirects, tee=plan.tee, nodes=nodes,
        omp_threads=1 if plan.max_workers > 1 else 0, horovod=plan.horovod,
        memory_saves=plan.args.memory_saves)
    resources = {"CPU": plan.args.cpus_per_worker}
    if plan.use_gpu:
        resources["GPU"] = 1
    trainer = train.ElasticTrainer(
        loop, scaling_config=train.ScalingConfig(
            num_workers=(plan.min_workers, plan.max_workers), initial_workers=plan.initial,
            resources_per_worker=resources, use_gpu=plan.use_gpu),
        run_config=train.RunConfig(name=plan.name, failure_config=train.FailureConfig(
            max_failures=plan.max_restarts, hang_timeout_s=plan.args.hang_timeout,
            below_min_timeout_s=plan.args.below_min_timeout,
            phase_timeouts={"place": PLACE_TIMEOUT_S})),
        prestart_imports=["torch"], step_call_ms=0, verbose=False)
    if allowed:
        trainer._spec_extra = {"nodes": allowed}  # the discovered hosts' nodes
    trainer._runtime_options = {
        "torch": True, "backend": plan.backend if plan.backend == "phalanx" else "gloo",
        "init_group": plan.backend == "phalanx", "cuda_visible": False, "agent_store": True,
        # A survivor of a lost peer may sit in torch's own Gloo op until its timeout, which
        # nothing can abort: the restarted script does not wait for it (torchrun would have
        # killed the process).
        "unwind_s": RESTART_UNWIND_S}
    return trainer.submit()


def _follow(job_id, discovery):
    """Prints the ranks' output and the job's events until it ends; torchrun's exit code."""
    from phalanx import _native
    offset = 0
    shown = 0

    def print_log():
        nonlocal offset
        text, offset = _native.job_log(job_id, offset)
        if text:
            sys.stdout.write(text.decode(errors="replace"))
            sys.stdout.flush()

    while True:
        status = _native.job_status(job_id)
        print_log()
        for e in status.events[shown:]:
            if e.kind not in ("step", "checkpoint"):
                print(f"[phalanx run] {e.kind}: {e.message}", file=sys.stderr, flush=True)
        shown = len(status.events)
        if discovery is not None:
            discovery.poll(status)
        if status.done():
            print_log()  # what the ranks wrote between the status read and the end
            if status.state == "SUCCEEDED":
                return 0
            print(f"[phalanx run] job {job_id} {status.state}: {status.message}",
                  file=sys.stderr, flush=True)
            return 1
        time.sleep(FOLLOW_POLL_S)


class HostDiscovery:
    """horovodrun's --host-discovery-script: the hosts it prints (HOST[:SLOTS], one per
    line) are the nodes the job may use. The job is limited to those nodes (the spec's
    `nodes`, then a scale request's) and resized to their slots (within --min-np and
    --max-np): ranks on a host that left are taken out gracefully, and new ranks start only
    on listed hosts. A host is a node's hostname, IP address or id (127.0.0.1 and localhost
    name this machine's node)."""

    def __init__(self, script, slots_per_host, min_np, max_np):
        self.script = script
        self.slots_per_host = slots_per_host
        self.min_np, self.max_np = min_np, max_np
        self.job_id = None
        self.next_run = 0.0
        self.applied = None

    def hosts(self):
        out = subprocess.run([self.script], capture_output=True, text=True,
                             timeout=DISCOVERY_TIMEOUT_S)
        if out.returncode != 0:
            raise RuntimeError(f"--host-discovery-script exited {out.returncode}: "
                               f"{out.stderr.strip()[:200]}")
        hosts = {}
        for line in out.stdout.split():
            host, _, slots = line.partition(":")
            hosts[host] = int(slots) if slots else self.slots_per_host
        return hosts

    @staticmethod
    def _node_names(node):
        ip = node["address"].rsplit(":", 1)[0].strip("[]")
        names = {node["hostname"], ip, node["node_id"]}
        if ip.startswith("127.") or node["hostname"] == _hostname():
            names |= {"localhost", "127.0.0.1", _hostname()}
        return names

    def resolve(self):
        """Runs the script: (the live nodes it names, by id, sorted; the workers their slots
        give, within --min-np..--max-np; their slots)."""
        from phalanx import _native
        hosts = self.hosts()
        usable, slots = [], 0
        for n in _native.nodes():
            named = self._node_names(n) & set(hosts) if n["alive"] else set()
            if named:
                usable.append(n["node_id"])
                slots += max(hosts[h] for h in named)
        return sorted(usable), max(self.min_np, min(self.max_np, slots)), slots

    def first(self):
        """The nodes and size to start with; UsageError when the script fails or names no
        live node of the cluster."""
        try:
            usable, target, slots = self.resolve()
        except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError) as e:
            raise UsageError(f"--host-discovery-script: {e}") from None
        if not usable:
            raise UsageError("--host-discovery-script names no live node of the cluster: "
                             "print the nodes' hostnames or IP addresses (`phalanx status` "
                             "lists them), one per line as HOST:SLOTS")
        return usable, target, slots

    def poll(self, status):
        from phalanx import _native
        now = time.time()
        if now < self.next_run or status.done():
            return
        self.next_run = now + DISCOVERY_INTERVAL_S
        try:
            usable, target, slots = self.resolve()
        except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError) as e:
            print(f"[phalanx run] host discovery: {e}; keeping the last hosts", file=sys.stderr)
            return
        if not usable:
            return  # no listed host is up now: the ranks stay where they are
        key = (target, tuple(usable))
        if key == self.applied:
            return
        try:
            _native.scale_job(self.job_id, target, [], nodes=usable)
        except Exception as e:  # noqa: BLE001 - tried again at the next run
            print(f"[phalanx run] host discovery: resizing to {target}: {e}", file=sys.stderr)
            return
        self.applied = key
        print(f"[phalanx run] host discovery: {len(usable)} host(s), {slots} slot(s): "
              f"{target} workers", file=sys.stderr, flush=True)


def _hostname():
    import socket
    return socket.gethostname()


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    horovod = "--horovod" in argv[:argv.index("--")] if "--" in argv else "--horovod" in argv
    if "--" in argv and not horovod:
        i = argv.index("--")  # `job submit --torchrun [options] -- script.py args`
        argv = argv[:i] + argv[i + 1:]
    try:
        args = _parser(horovod).parse_args(argv)
        plan = Plan(args)
    except UsageError as e:
        print(f"phalanx run: {e}", file=sys.stderr)
        return 2
    import phalanx
    try:
        private = _connect(args.address, plan.max_workers, args.cpus_per_worker)
        if private and args.no_follow:
            raise UsageError("--no-follow: no cluster to leave the job on (no --address, no "
                             "$PHALANX_ADDRESS, no `phalanx start` on this machine)")
        nodes = _check_fit(plan)
        discovery, allowed = None, None
        if plan.horovod and args.host_discovery_script:
            discovery = HostDiscovery(os.path.abspath(args.host_discovery_script),
                                      args.slots_per_host, plan.min_workers, plan.max_workers)
            allowed, target, _ = discovery.first()
            plan.initial = min(plan.initial, target)
            discovery.applied = (plan.initial, tuple(allowed))  # grows at its first poll
            nodes = len(allowed)
        job_id = _submit(plan, nodes, allowed)
    except (UsageError, ValueError) as e:
        print(f"phalanx run: {e}", file=sys.stderr)
        phalanx.shutdown()
        return 2
    except phalanx.PhalanxError as e:
        print(f"phalanx run: {e}", file=sys.stderr)
        phalanx.shutdown()
        return 1
    if args.no_follow:
        print(f"submitted job {job_id} ({plan.min_workers}..{plan.max_workers} workers); "
              f"`phalanx job status {job_id}` and `phalanx job logs -f {job_id}` follow it")
        return 0
    print(f"[phalanx run] job {job_id}: {plan.initial} workers of {shlex.join([plan.target] + plan.args_after)}",
          file=sys.stderr, flush=True)
    if discovery is not None:
        discovery.job_id = job_id
    terminated = []

    def on_sigterm(*_):
        terminated.append(1)
        raise KeyboardInterrupt()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return _follow(job_id, discovery)
    except KeyboardInterrupt:
        from phalanx import _native
        print(f"[phalanx run] stopping job {job_id}", file=sys.stderr, flush=True)
        _native.stop_job(job_id)
        deadline = time.time() + STOP_WAIT_S
        while time.time() < deadline and not _native.job_status(job_id).done():
            time.sleep(FOLLOW_POLL_S)
        return 143 if terminated else 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        phalanx.shutdown()


if __name__ == "__main__":
    sys.exit(main())
