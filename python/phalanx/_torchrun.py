"""The worker side of ``phalanx run``: a torchrun program, run unchanged as a rank of an
elastic job.

``ScriptLoop`` is the job's training function (phalanx.train's ``train_loop``): it runs the
user's script (or ``-m`` module) as ``__main__`` in the rank's warm process, in a copy of the
directory the launcher shipped, with the environment torchrun gives its workers. The script
never commits a step, so the whole run is one step: when the group changes (a worker died,
hung, or its host was cut off) every rank runs the script again from its start, as torchrun
restarts its worker group, and the script resumes from its own snapshot, as under torchrun.

Its ``init_process_group()`` (env://, as torchrun scripts call it) forms torch's own group
with MASTER_ADDR and MASTER_PORT; with ``--backend phalanx`` the call is answered by the
``phalanx`` backend's group the runtime installed, whatever backend it names, so a lost peer
fails the survivors' pending ops at once instead of at torch's timeout.
"""

import contextlib
import hashlib
import io
import os
import runpy
import sys
import tempfile
import threading
import time
import traceback
import zipfile

from phalanx import _native

from .train._runtime import RUNTIME, _RankOutput, _Reset

# What the launcher ships (the script's directory): at most this many bytes, compressed.
MAX_WORKING_DIR_BYTES = 32 << 20
_SKIPPED_DIRS = frozenset((".git", "__pycache__", ".mypy_cache", ".pytest_cache"))
# How often a worker looks for files its script wrote into the shipped copy (a relative
# snapshot path), to warn that a restart on another node will not find them.
WRITE_CHECK_S = 2.0
# A script that raised waits this long for the job's controller to abort its step (a peer was
# lost) before it counts as failed on its own and its worker exits, as under torchrun.
ABORT_WAIT_S = 1.0
# `phalanx run --horovod` puts this first on a rank's path: its `horovod` package is
# phalanx.horovod under Horovod's name, so a Horovod program runs with no line changed.
HOROVOD_SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "horovod", "_shim")


def pack_directory(root):
    """The files under ``root`` as a zip archive (bytes) and their relative paths. Raises
    ValueError past MAX_WORKING_DIR_BYTES, naming the directory."""
    buffer = io.BytesIO()
    names = []
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_DIRS)
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                if not os.path.isfile(path):
                    continue
                rel = os.path.relpath(path, root)
                archive.write(path, rel)
                names.append(rel)
                if buffer.tell() > MAX_WORKING_DIR_BYTES:
                    raise ValueError(
                        f"the script's directory {root} holds more than "
                        f"{MAX_WORKING_DIR_BYTES >> 20} MiB (compressed): phalanx run ships it "
                        f"to every node; keep data sets and snapshots out of it (read them from "
                        f"a shared path), or give --working-dir a smaller directory")
    return buffer.getvalue(), names


def _unpack(job_id, key):
    """The node's copy of the shipped directory (made once per node and archive; ranks on the
    same node share it, as torchrun's workers share their node's working directory). Named
    after the archive's KV key, which is new per launch, so a restarted script finds its copy
    without fetching the archive again."""
    tls = os.environ.get("PHALANX_TLS_DIR", "")
    root = os.path.join(os.path.dirname(tls), "runtime_resources") if tls else \
        os.path.join(tempfile.gettempdir(), f"phalanx-run-{os.getuid()}")
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    target = os.path.join(root, "working_dir", f"{job_id}-{digest}")
    if not os.path.isdir(target):
        blob = _native.kv_get("elastic", key)
        if blob is None:
            raise RuntimeError(f"the working directory of job {job_id} is not in the GCS (KV "
                               f"elastic/{key}): run the program again with phalanx run")
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".unpack-", dir=os.path.dirname(target))
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            archive.extractall(staging)
        try:
            os.rename(staging, target)  # whole, or not at all (another rank may win)
        except OSError:
            import shutil
            shutil.rmtree(staging, ignore_errors=True)
    return target


class _RelativeWrites:
    """Warns once per process when the script writes files into the shipped copy on a
    cluster of several nodes: they stay on this node, and a restart placed on another one
    starts without them (torchrun's tutorial keeps its snapshot at a relative path)."""

    _started = False

    @classmethod
    def watch(cls, root, shipped, nodes):
        if cls._started or nodes < 2:
            return
        cls._started = True
        known = set(shipped)

        def look():
            while True:
                time.sleep(WRITE_CHECK_S)
                for dirpath, dirnames, filenames in os.walk(root):
                    dirnames[:] = [d for d in dirnames if d not in _SKIPPED_DIRS]
                    for name in filenames:
                        rel = os.path.relpath(os.path.join(dirpath, name), root)
                        if rel not in known:
                            print(f"phalanx run: warning: the script wrote {rel} to its working "
                                  f"directory on node {os.environ.get('PHALANX_NODE_ADDRESS', '?')}"
                                  f"; it stays on that node, and a restart that lands on another "
                                  f"of the cluster's {nodes} nodes will not find it: give "
                                  f"snapshots an absolute path on storage every node shares",
                                  file=sys.stderr, flush=True)
                            return

        threading.Thread(target=look, name="relative-writes", daemon=True).start()


class _StreamFile:
    """One stream of one rank for --log-dir, --redirects and --tee (torchrun's layout:
    ``LOG_DIR/RUN_ID/attempt_N/LOCAL_RANK/stdout.log``): written to the file, and to the
    console (the driver) unless redirected without tee."""

    def __init__(self, console, path, to_console):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._file = open(path, "a", buffering=1, encoding="utf-8", errors="replace")
        self._console = console
        self._to_console = to_console

    def write(self, text):
        self._file.write(text)
        if self._to_console:
            return self._console.write(text)
        return len(text)

    def flush(self):
        self._file.flush()
        self._console.flush()

    def __getattr__(self, name):
        return getattr(self._console, name)


def _original(stream):
    while isinstance(stream, _StreamFile):
        stream = stream._console
    return stream


_patch_lock = threading.Lock()


def _phalanx_backend():
    """Whether this job's ranks run on the phalanx backend's group (--backend phalanx)."""
    return RUNTIME.options.get("backend") == "phalanx" and RUNTIME.options.get("init_group")


def _patch_torch_distributed():
    """With --backend phalanx: the script's init_process_group() is answered by the group the
    runtime installed (whatever backend, store or init_method it names), and its
    destroy_process_group() leaves that group to the runtime. Patched once per process."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    with _patch_lock:
        if getattr(c10d, "_phalanx_run_patched", False):
            return
        original_init = c10d.init_process_group
        original_destroy = c10d.destroy_process_group

        def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1,
                               rank=-1, store=None, group_name="", pg_options=None):
            if not _phalanx_backend():
                return original_init(backend=backend, init_method=init_method,
                                     timeout=timeout or c10d.default_pg_timeout,
                                     world_size=world_size, rank=rank, store=store,
                                     group_name=group_name, pg_options=pg_options)
            _, my_rank, world = RUNTIME.loop_membership()
            for name, given, mine in (("rank", rank, my_rank), ("world_size", world_size, world)):
                if given not in (-1, None) and int(given) != mine:
                    raise ValueError(f"init_process_group({name}={given}): this worker is rank "
                                     f"{my_rank} of {world} (phalanx run sets RANK and "
                                     f"WORLD_SIZE): leave {name} out, or read it from the "
                                     f"environment")
            if not dist.is_initialized():
                RUNTIME.torch_process_group("phalanx")

        def destroy_process_group(group=None):
            if _phalanx_backend() and (
                    group is None or group is c10d.GroupMember.WORLD):
                return  # the runtime's, replaced at the next membership change
            return original_destroy(group)

        for module in (c10d, dist):
            module.init_process_group = init_process_group
            module.destroy_process_group = destroy_process_group
        c10d._phalanx_run_patched = True


def _leave_old_group():
    """A default group a previous run of the script left (it failed before its own
    destroy_process_group()): torch refuses to form a second one."""
    import torch.distributed as dist
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - a broken group may not destroy cleanly
            pass


class ScriptLoop:
    """The training function of a ``phalanx run`` job (pickled by the launcher)."""

    def __init__(self, target, args, module, archive_key, shipped, *, backend, run_id,
                 max_restarts, log_dir, redirects, tee, nodes, omp_threads, horovod=False,
                 memory_saves=False):
        self.target = target          # the script's path in the shipped copy, or the module
        self.args = list(args)
        self.module = module
        self.archive_key = archive_key
        self.shipped = list(shipped)
        self.backend = backend        # None: the script's own; "phalanx"
        self.run_id = run_id
        self.max_restarts = max_restarts
        self.log_dir = log_dir
        self.redirects = redirects    # {1, 2}: the streams written to files only
        self.tee = tee                # {1, 2}: the streams written to files and the console
        self.nodes = nodes            # the cluster's nodes at launch
        self.omp_threads = omp_threads
        self.horovod = horovod        # `import horovod.torch` finds phalanx.horovod.torch
        self.memory_saves = memory_saves  # torch.save/load through the node's memory

    def __call__(self):
        epoch, rank, world = RUNTIME.loop_membership()
        root = _unpack(RUNTIME.job_id, self.archive_key)
        os.chdir(root)
        _RelativeWrites.watch(root, self.shipped, self.nodes)
        restarts = max(0, epoch - 1)
        os.environ.update({
            "TORCHELASTIC_RESTART_COUNT": str(restarts),
            "TORCHELASTIC_MAX_RESTARTS": str(self.max_restarts),
            "TORCHELASTIC_RUN_ID": self.run_id,
            # Rank 0 serves the store at MASTER_PORT, as torchrun's agent does.
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "PHALANX_RUN": "1",
        })
        if self.omp_threads and "OMP_NUM_THREADS" not in os.environ:
            os.environ["OMP_NUM_THREADS"] = str(self.omp_threads)
        _patch_torch_distributed()
        if getattr(self, "memory_saves", False):
            from . import _memory_saves
            _memory_saves.install(RUNTIME.job_id)
        if self.backend != "phalanx":
            _leave_old_group()
        streams = self._open_logs(restarts)
        argv, path = sys.argv, list(sys.path)
        if self.horovod:
            sys.path.insert(0, HOROVOD_SHIM)
        try:
            if self.module:
                sys.argv = [self.target] + self.args
                sys.path.insert(0, root)
                runpy.run_module(self.target, run_name="__main__", alter_sys=True)
            else:
                script = os.path.join(root, self.target)
                sys.argv = [script] + self.args
                sys.path.insert(0, os.path.dirname(script))
                runpy.run_path(script, run_name="__main__")
            if getattr(self, "memory_saves", False):
                from . import _memory_saves
                _memory_saves.flush()  # a final save is on disk when the job ends
        except SystemExit as e:
            if e.code not in (None, 0):
                self._fail(f"the script exited with code {e.code}",
                           e.code if isinstance(e.code, int) else 1)
        except _Reset:
            raise
        except BaseException:  # noqa: BLE001 - a peer's loss, or the script's own failure
            self._fail(traceback.format_exc(), 1)
        finally:
            sys.argv, sys.path[:] = argv, path
            for name, stream in streams:
                stream.flush()
                setattr(sys, name, _original(stream))

    def _fail(self, what, code):
        """The script failed. After a lost peer (the controller aborts this rank's step within
        ABORT_WAIT_S) the error goes to the runtime, and the group restarts in warm processes.
        Failed on its own, the worker process exits with the script's code, as a torchrun
        worker does: the job's controller sees it exit, restarts the group within
        --max-restarts, and names the exit in the job's events."""
        # The generation of the loop this thread runs, not the runtime's now: a loop that a
        # restart already replaced (its peer's death reached it after the restart) ends
        # quietly, and must not end the process that runs the new one.
        generation = getattr(RUNTIME.local, "generation", RUNTIME.generation)
        deadline = time.time() + ABORT_WAIT_S
        while time.time() < deadline:
            if RUNTIME.aborted or RUNTIME.generation != generation:
                raise RuntimeError(what.strip().splitlines()[-1])
            time.sleep(0.01)
        print(what if "Traceback" in what else f"phalanx run: {what}", file=sys.stderr,
              end="" if what.endswith("\n") else "\n", flush=True)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        _RankOutput.send()
        os._exit(code if isinstance(code, int) and 0 < code < 256 else 1)

    def _open_logs(self, restarts):
        """Installs the per-rank log files of --log-dir for this attempt."""
        if not self.log_dir:
            return []
        local = os.environ.get("LOCAL_RANK", "0")
        base = os.path.join(self.log_dir, self.run_id, f"attempt_{restarts}", local)
        out = []
        for fd, name in ((1, "stdout"), (2, "stderr")):
            if fd not in self.redirects and fd not in self.tee:
                continue
            console = _original(getattr(sys, name))
            stream = _StreamFile(console, os.path.join(base, f"{name}.log"),
                                 to_console=fd in self.tee)
            setattr(sys, name, stream)
            out.append((name, stream))
        return out
