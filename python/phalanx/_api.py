"""The actor API: init/shutdown, @remote classes, handles, get/wait/kill, placement groups."""

import atexit
import collections
import inspect
import json
import itertools
import os
import pickle
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import cloudpickle

from phalanx import _native

from . import _command
from . import _objects
from . import _serialization as ser
from ._context import RuntimeContext, note_child
from .exceptions import AlreadyExistsError, GetTimeoutError, NotFoundError, PhalanxError

_lock = threading.Lock()
_local_cluster = None  # (tmpdir, port, watchdog) of a cluster init() started for this script

# Stops a local cluster when its driver dies without shutdown() (SIGKILL, SIGTERM).
_WATCHDOG = r'''
import os, shutil, subprocess, sys, time
pid, tmp, cli = int(sys.argv[1]), sys.argv[2], sys.argv[3]
while True:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        break
    time.sleep(0.5)
subprocess.run([cli, "stop", "--grace", "3"], env=dict(os.environ, PHALANX_TMPDIR=tmp),
               capture_output=True, timeout=120)
shutil.rmtree(tmp, ignore_errors=True)
'''


# ---- init / shutdown ------------------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _phalanx_cli():
    return os.path.join(_native.BIN_DIR, "phalanx")


def _start_local_cluster(num_cpus=None, num_gpus=None, resources=None, store=None):
    tmp = tempfile.mkdtemp(prefix="phalanx-local-")
    port = _free_port()
    cmd = [_phalanx_cli(), "start", "--head", "--port", str(port), "--node-ip-address",
           "127.0.0.1"]
    if num_cpus is not None:
        cmd += ["--num-cpus", str(num_cpus)]
    if num_gpus is not None:
        cmd += ["--num-gpus", str(num_gpus)]
    if resources:
        import json
        cmd += ["--resources", json.dumps(resources)]
    memory, directory = store or (None, None)
    if memory is not None:
        cmd += ["--object-store-memory", str(int(memory))]
    if directory is not None:
        cmd += ["--object-store-dir", str(directory)]
    env = dict(os.environ, PHALANX_TMPDIR=tmp)
    env.pop("PHALANX_ADDRESS", None)
    env.pop("PHALANX_TOKEN", None)
    # An installed package's nodes run their Python workers with this interpreter and package.
    env.update(_command.worker_env())
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PhalanxError("phalanx.init() could not start a local cluster:\n" + out.stdout +
                           out.stderr)
    session = os.path.realpath(os.path.join(tmp, "session_latest"))
    with open(os.path.join(session, "token")) as f:
        token = f.read().strip()
    # Its CA, for this process's channels (and its children's): the session is not under this
    # process's $PHALANX_TMPDIR, where the runtime would look for it.
    os.environ["PHALANX_TLS_DIR"] = os.path.join(session, "tls")
    return tmp, port, token


def _stop_local_cluster():
    global _local_cluster
    if _local_cluster is None:
        return
    tmp, _, watchdog = _local_cluster
    _local_cluster = None
    if os.environ.get("PHALANX_TLS_DIR", "").startswith(os.path.realpath(tmp)):
        del os.environ["PHALANX_TLS_DIR"]
    watchdog.kill()
    watchdog.wait()
    subprocess.run([_phalanx_cli(), "stop", "--grace", "3"], env=dict(os.environ,
                   PHALANX_TMPDIR=tmp), capture_output=True, timeout=120)
    shutil.rmtree(tmp, ignore_errors=True)


_job_runtime_env = None  # init(runtime_env=...): every actor's and task's default


# The env_vars an actor or task was started with (init's runtime_env, its parent's and its
# own), in JSON, so that what it starts inherits them, as in Ray.
ENV_VARS_ENV = "PHALANX_RUNTIME_ENV_VARS"


def _inherited_env_vars():
    """The env_vars what this process starts inherits: this driver's init(runtime_env=...),
    or those this worker was started with."""
    import json
    if _job_runtime_env is not None:
        return dict(_job_runtime_env.get("env_vars") or {})
    try:
        return dict(json.loads(os.environ.get(ENV_VARS_ENV) or "{}"))
    except ValueError:
        return {}


def _check_runtime_env(runtime_env, where):
    if runtime_env is None:
        return
    if not isinstance(runtime_env, dict):
        raise ValueError(f"{where}: runtime_env must be a dict, e.g. "
                         f"{{'env_vars': {{'OMP_NUM_THREADS': '1'}}}}")
    unknown = sorted(set(runtime_env) - {"env_vars"})
    if unknown:
        raise ValueError(f"{where}: runtime_env key(s) {unknown} are not supported; give "
                         f"env_vars (ship code with `phalanx job submit --working-dir`)")
    env = runtime_env.get("env_vars") or {}
    if not isinstance(env, dict):
        raise ValueError(f"{where}: runtime_env['env_vars'] must be a dict of strings")


# How long init() gives this machine's cluster's GCS to accept a connection before it starts
# a cluster of its own (a refused port answers at once; this bounds a host that drops it).
MACHINE_CLUSTER_PROBE_S = 1.0


def _machine_cluster_answers():
    """Whether this machine runs a cluster (`phalanx start`): its latest session names a GCS
    address, and that port accepts a connection."""
    root = os.environ.get("PHALANX_TMPDIR") or "/tmp/phalanx"
    try:
        with open(os.path.join(root, "session_latest", "address")) as f:
            host, _, port = f.read().strip().rpartition(":")
        with socket.create_connection((host.strip("[]"), int(port)),
                                      timeout=MACHINE_CLUSTER_PROBE_S):
            return True
    except (OSError, ValueError):
        return False


def init(address=None, *, token=None, namespace=None, num_cpus=None, num_gpus=None,
         resources=None, ignore_reinit_error=False, runtime_env=None,
         object_store_memory=None, _plasma_directory=None, log_to_driver=True):
    """Connects this process to a cluster, like ``ray.init()``.

    ``address``: ``None`` connects to ``$PHALANX_ADDRESS`` when set (a job submitted with
    ``phalanx job submit``), else to the cluster this machine runs (``phalanx start``), as
    Ray's does, else starts a local single-node cluster for this script (stopped at exit).
    ``num_cpus``/``num_gpus``/``resources`` size that local cluster, and ask for one: with
    them, ``None`` never joins the machine's. ``"auto"`` connects to the cluster this machine
    runs (an error if there is none); ``"host:port"`` to that GCS. The token comes
    from ``token``, ``$PHALANX_TOKEN`` or this machine's session of that address.
    With ``log_to_driver`` (Ray's), what this driver's actors and tasks print comes to its
    stderr, each line after ``(Class pid=N)`` (``(pid=N)`` for a task, with ``ip=`` for
    another host), about 0.1 s after it was printed.
    ``namespace`` scopes the names of actors (and what ``get_actor`` finds); without one,
    the driver gets an anonymous namespace of its own, as in Ray.
    ``runtime_env={"env_vars": {...}}`` is every actor's and task's environment this driver
    starts (theirs are added on top). ``object_store_memory`` (bytes) and
    ``_plasma_directory`` (Ray's names; ``phalanx start --object-store-memory`` and
    ``--object-store-dir``) size and place the local cluster's object store, and ask for one
    as ``num_cpus`` does.
    """
    global _local_cluster, _job_runtime_env
    _check_runtime_env(runtime_env, "init")
    with _lock:
        if _native.is_initialized():
            if ignore_reinit_error or _native.in_worker_mode():
                return
            raise PhalanxError("phalanx.init() was already called (pass "
                               "ignore_reinit_error=True to allow it)")
        if address is None:
            address = os.environ.get("PHALANX_ADDRESS") or None
        store = None
        if object_store_memory is not None or _plasma_directory is not None:
            store = (object_store_memory, _plasma_directory)
        if address is None and num_cpus is None and num_gpus is None and resources is None \
                and store is None and _machine_cluster_answers():
            address = "auto"  # Ray's: join the cluster this machine runs
        if store is not None and address is not None:
            raise ValueError("object_store_memory and _plasma_directory size a local cluster "
                             "that init() starts; when connecting to a cluster, give them to "
                             "`phalanx start` (--object-store-memory, --object-store-dir)")
        if address is None:
            tmp, port, tok = _start_local_cluster(num_cpus, num_gpus, resources, store)
            watchdog = subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(os.getpid()), tmp,
                                         _phalanx_cli()], start_new_session=True,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
            _local_cluster = (tmp, port, watchdog)
            address, token = f"127.0.0.1:{port}", tok
        elif address == "auto":
            address = ""
        if namespace is None:
            namespace = str(uuid.uuid4())  # Ray's anonymous namespace: this driver's own
        elif not isinstance(namespace, str):
            raise TypeError(f"namespace={namespace!r}: give a string")
        try:
            _native.init(address, token or "", namespace, bool(log_to_driver))
        except PhalanxError:
            _stop_local_cluster()
            raise
        _job_runtime_env = runtime_env
        atexit.register(shutdown)


def is_initialized():
    return _native.is_initialized()


def shutdown():
    """Disconnects; the actors this driver created (unless detached) are killed, and a local
    cluster started by init() is stopped."""
    global _job_runtime_env
    with _lock:
        if _native.is_initialized() and not _native.in_worker_mode():
            _objects.forget_all()  # a driver's values go with it, as in Ray
            _native.shutdown()
        _stop_local_cluster()
        _job_runtime_env = None


def _ensure_init():
    if not _native.is_initialized():
        init()


# ---- object refs, get, wait ----------------------------------------------------------------

class ObjectRef:
    """A value by reference: the future result of an actor call (``handle.method.remote(...)``)
    or of a task (``f.remote(...)``), or a value given to ``phalanx.put``. A ref may travel
    anywhere a value does (inside lists, dicts, arguments and results); as a top-level
    argument of a task or actor call it is replaced by its value before the call runs."""

    __slots__ = ("_ref", "_encoding", "_obj", "_pins", "_index", "_borrowed")

    def __init__(self, ref, encoding, obj=None, pins=None, index=None, borrow=False):
        self._ref = ref          # the runtime's ref of a call of this process (or None)
        self._encoding = encoding
        self._obj = obj          # its place in the object store (_objects.Obj), once it has one
        self._pins = pins        # refs this call's arguments carried: kept until it finished
        self._index = index      # (i, n): the i-th of the call's n return values
        self._borrowed = False   # whether it counts as a borrow of another process's value
        if obj is not None:
            if _objects.is_owned(obj):
                _objects._here.hold(obj.id)
            elif borrow:
                self._borrowed = _objects.borrow(obj)

    def __del__(self):
        obj = getattr(self, "_obj", None)
        try:
            if obj is not None and getattr(self, "_borrowed", False):
                _objects._here.unborrow(obj.id)
            elif obj is not None and _objects.is_owned(obj):
                _objects._here.release(obj.id)
            pins, call = getattr(self, "_pins", None), getattr(self, "_ref", None)
            if pins and call is not None and not call.done():
                _objects._here.keep_until_done(call, pins)
        except Exception:  # noqa: BLE001 - at interpreter exit the module may be half gone
            pass

    def done(self):
        if self._ref is not None:
            return self._ref.done()
        return _objects.ready(self._obj)

    def hex(self):
        """The ref's id (Ray's ObjectRef.hex())."""
        return self._store_obj().id if self._ref is None else f"{id(self._ref):x}"

    def __repr__(self):
        if self._ref is None:
            return f"ObjectRef({self._obj.id} of {self._obj.label})"
        state = "done" if self._ref.done() else "pending"
        if not self._ref.actor_id:
            return f"ObjectRef(task {self._ref.method}, {state})"
        return f"ObjectRef({self._ref.method} on actor {self._ref.actor_id[:8]}, {state})"

    def _store_obj(self):
        """Its Obj, publishing a call's result to the store the first time."""
        if self._obj is None:
            with _publish_lock:
                if self._obj is None:
                    obj = _objects.publish(self._ref, self._encoding, self._index, _returned)
                    self._obj = obj  # publish() counted it for this ref
        return self._obj

    def __reduce__(self):
        # Sent inside a value: the receiver borrows it (see _objects).
        obj = self._store_obj()
        return _ref_from_obj, (obj, _objects.sent(self, obj))

    # Type hints: ObjectRef[int] is ObjectRef.
    __class_getitem__ = classmethod(lambda cls, item: cls)

    def __await__(self):
        """``await ref`` in a coroutine (an async actor's method, or a driver's): the result,
        without blocking the event loop."""
        return self.as_future().__await__()

    def future(self):
        """A concurrent.futures.Future of the result (set when the call finishes)."""
        import concurrent.futures
        f = concurrent.futures.Future()

        def fill(ref):
            try:
                f.set_result(get(ref))
            except BaseException as e:  # noqa: BLE001 - handed to the future
                f.set_exception(e)
        _watcher.add(self, fill, None)
        return f

    def as_future(self):
        """An asyncio.Future of the result, on the running event loop (Ray's
        ``ref.as_future()``): for ``asyncio.wait_for``, ``asyncio.shield`` and the like."""
        import asyncio
        return asyncio.wrap_future(self.future())

    def _on_completed(self, callback):
        """Calls ``callback(result)`` (the value, or the exception the call raised) once the
        ref is ready, from a thread of the runtime (Ray's ``_on_completed``)."""
        def deliver(ref):
            try:
                value = get(ref)
            except BaseException as e:  # noqa: BLE001 - handed to the callback
                value = e
            callback(value)
        _watcher.add(self, deliver, None)

    # asyncio.wait([ref, ...]) in the driver's asyncio code, as with Ray: it asks done() and
    # registers a callback; the sets it returns hold the refs themselves.
    def add_done_callback(self, fn, *, context=None):
        """Calls ``fn(ref)`` once the ref is ready: on the event loop that was running when it
        was added (as an asyncio.Future does), else from a thread of the runtime."""
        import asyncio
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        _watcher.add(self, fn, loop, context)

    def remove_done_callback(self, fn):
        """Forgets ``fn``, if it was not called yet; how many callbacks were removed."""
        return _watcher.remove(self, fn)

    def cancelled(self):
        return False


_publish_lock = threading.Lock()


class _RefWatcher:
    """Calls the callbacks of refs (ObjectRef.add_done_callback, future, _on_completed) when
    they are ready, from one thread for all of them: it waits on the pending calls natively,
    up to WATCH_SLICE_S at a time (a ref added meanwhile is looked at after it), and polls
    the refs of the object store."""

    WATCH_SLICE_S = 0.01

    def __init__(self):
        self._lock = threading.Lock()
        self._entries = []   # [ref, fn, loop, context]
        self._wake = threading.Event()
        self._thread = None

    def add(self, ref, fn, loop, context=None):
        entry = [ref, fn, loop, context]
        if ref.done():
            return self._fire(entry)
        with self._lock:
            self._entries.append(entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="phalanx-ref-watcher",
                                                 daemon=True)
                self._thread.start()
        self._wake.set()

    def remove(self, ref, fn):
        with self._lock:
            before = len(self._entries)
            self._entries = [e for e in self._entries if not (e[0] is ref and e[1] == fn)]
            return before - len(self._entries)

    def _fire(self, entry):
        ref, fn, loop, context = entry
        if loop is None:
            try:
                fn(ref)
            except Exception:  # noqa: BLE001 - a callback's error is its own, as asyncio's
                import traceback
                traceback.print_exc()
        elif not loop.is_closed():
            loop.call_soon_threadsafe(fn, ref, context=context)

    def _run(self):
        while True:
            with self._lock:
                entries = list(self._entries)
                if not entries:
                    self._thread = None
                    return
            calls = [e[0]._ref for e in entries if e[0]._ref is not None]
            self._wake.clear()
            if calls and len(calls) == len(entries):
                _native.wait(calls, 1, self.WATCH_SLICE_S)
            else:
                self._wake.wait(0.005 if calls or entries else self.WATCH_SLICE_S)
            ready = [e for e in entries if e[0].done()]
            if ready:
                with self._lock:
                    taken = set(map(id, ready))
                    self._entries = [e for e in self._entries if id(e) not in taken]
                for e in ready:
                    self._fire(e)


_watcher = _RefWatcher()


class YieldedThenRaised:
    """What a generator called with ``num_returns=n`` or ``"dynamic"`` returns when it raised
    after yielding: its values, then its error. As in Ray, the refs of the values yielded
    read them, and the later refs raise the error."""

    def __init__(self, values, message, detail):
        self.values = values
        self.message = message  # the TaskError's message and detail (_task_error)
        self.detail = detail

    def error(self):
        from .exceptions import _task_error
        return _task_error(self.message, self.detail)


def collect_yielded(gen, name):
    """The values `gen` yields, as a list; a YieldedThenRaised if it raised after the first."""
    values = []
    try:
        for v in gen:
            values.append(v)
    except Exception as e:  # noqa: BLE001 - the later refs raise it
        if not values:
            raise
        return _yielded_then(values, e, name)
    return values


async def collect_yielded_async(agen, name):
    """collect_yielded of an async generator."""
    values = []
    try:
        async for v in agen:
            values.append(v)
    except Exception as e:  # noqa: BLE001
        if not values:
            raise
        return _yielded_then(values, e, name)
    return values


def _yielded_then(values, e, name):
    import traceback

    from .exceptions import _remote_detail
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__)).rstrip()
    return YieldedThenRaised(values, f"{type(e).__name__}: {e}\n\n{name} raised after "
                                     f"{len(values)} value(s):\n{tb}", _remote_detail(e))


def _returned(value, index):
    """The value a ref stands for: the call's result, or its i-th value of n (num_returns)."""
    if isinstance(value, YieldedThenRaised):
        if index == "dynamic":
            return DynamicObjectRefGenerator(
                [put(v) for v in value.values] +
                [ObjectRef(None, ser.PICKLE, _objects.put_error(value.error()))])
        if index is not None and index[0] < len(value.values):
            return value.values[index[0]]
        raise value.error()
    if index is None:
        return value
    if index == "dynamic":
        if not isinstance(value, list):
            raise ValueError(f"num_returns='dynamic' is for a generator (a function that "
                             f"yields); the call returned one {type(value).__name__}")
        return DynamicObjectRefGenerator(put(v) for v in value)
    i, n = index
    if not isinstance(value, (tuple, list)) or len(value) != n:
        got = f"{len(value)} values" if isinstance(value, (tuple, list)) else \
            f"one {type(value).__name__}"
        raise ValueError(f"the call returned {got} but num_returns={n}: return a tuple or "
                         f"list of {n} values")
    return value[i]


class ObjectRefGenerator:
    """What ``.remote()`` of a generator (a function or method that yields) gives, as Ray's
    does: iterate it for one ref per yielded value, in order, each as soon as it was yielded
    (``for ref in gen: phalanx.get(ref)``; ``async for`` in a coroutine). If the generator
    raises, the values it yielded before come first, then a ref whose ``get`` raises the
    error.

    The values stream through the GCS's key-value store (``_objects.STREAM_NS``): the worker
    puts each value and writes the refs, in batches, under "<stream id>/<batch>"
    (_StreamWriter); this side takes each batch (registering as a borrower first) and deletes
    its key. The call's own result is the number of values."""

    def __init__(self, ref, stream_id=None):
        self._ref = ref      # the call's ref: its value is the number of values (or their list)
        self._stream = stream_id  # None: the call returns the list of values (older worker)
        self._count = None   # how many, once known
        self._next = 0       # refs handed out
        self._batch = 0      # the stream's next batch (_StreamWriter)
        self._buffer = collections.deque()  # refs of batches taken, not handed out yet
        self._failed = False

    def __del__(self):
        stream = getattr(self, "_stream", None)
        try:
            if stream is not None and not self.is_finished():
                _objects._here.drop_stream(stream, self._ref)
        except Exception:  # noqa: BLE001 - at interpreter exit the module may be half gone
            pass

    def __iter__(self):
        return self

    def __next__(self):
        return self._take(None)

    def _take(self, deadline):
        if self._stream is None:
            return self._take_listed()
        if self._failed or (self._count is not None and self._next >= self._count):
            raise StopIteration
        with _objects.Polling() as polling:
            while True:
                if self._buffer:
                    self._next += 1
                    return self._buffer.popleft()
                done = self._ref.done()
                if self._fetch_batch():
                    continue
                if done:
                    try:
                        count = get(self._ref)
                    except Exception:  # noqa: BLE001 - the generator raised: a ref raising it
                        self._failed = True
                        return self._ref
                    self._count = count if isinstance(count, int) else len(count)
                    if self._next >= self._count:
                        raise StopIteration
                    raise PhalanxError(f"value {self._next} of the generator is missing from "
                                       f"the stream (the cluster's key-value store lost it?)")
                if deadline is not None and time.monotonic() >= deadline:
                    raise GetTimeoutError("the generator yielded no next value in time")
                polling.pause()

    def _fetch_batch(self):
        """Takes the stream's next batch of refs, if it was written: whether it was."""
        key = f"{self._stream}/{self._batch}"
        blob = _native.kv_get(_objects.STREAM_NS, key)
        if blob is None:
            return False
        self._buffer.extend(pickle.loads(blob))  # they register as borrowers before the delete
        _native.kv_delete(_objects.STREAM_NS, key, False)
        self._batch += 1
        return True

    def _take_listed(self):
        if self._count is None:
            self._count = len(get(self._ref))
        if self._next >= self._count:
            raise StopIteration
        i, self._next = self._next, self._next + 1
        r = self._ref
        return ObjectRef(r._ref, r._encoding, pins=r._pins, index=(i, self._count))

    def __aiter__(self):
        return self

    async def __anext__(self):
        import asyncio
        ref = await asyncio.get_running_loop().run_in_executor(None, self._take_or_none)
        if ref is None:
            raise StopAsyncIteration
        return ref

    def _take_or_none(self):
        """The next ref, or None at the end (StopIteration cannot cross a Future)."""
        try:
            return self._take(None)
        except StopIteration:
            return None

    def next_ready(self):
        """Whether the next ref is ready (or the generator has ended)."""
        if self._stream is None or self._failed or self._count is not None or self._buffer:
            return True
        return self._ref.done() or _native.kv_get(
            _objects.STREAM_NS, f"{self._stream}/{self._batch}") is not None

    def completed(self):
        """A ref that is ready when the generator has finished (its value: how many values
        it yielded)."""
        return self._ref

    def is_finished(self):
        return self._failed or (self._count is not None and self._next >= self._count)


def stream_out(stream_id, values):
    """The worker's side of ObjectRefGenerator: puts each of `values` (an iterator) and sends
    its ref on the stream as it comes (_StreamWriter); the number of values."""
    writer = _StreamWriter(stream_id)
    try:
        for value in values:
            writer.write(value)
    finally:
        writer.close()  # what was yielded before an error goes out before the error does
    return writer.count


async def stream_out_async(stream_id, values):
    """stream_out of an async generator."""
    writer = _StreamWriter(stream_id)
    try:
        async for value in values:
            writer.write(value)
    finally:
        writer.close()
    return writer.count


class _StreamWriter:
    """Sends a generator's refs on its stream in batches: key "<stream id>/<batch>" holds the
    pickled list of the refs yielded since the batch before. A thread of its own writes each
    batch (one key-value round trip) while the generator runs on, taking whatever was yielded
    meanwhile: a slow generator's values go one by one, as soon as yielded, and a fast one's
    go many per round trip rather than one round trip each."""

    def __init__(self, stream_id):
        self._stream = stream_id
        self._cond = threading.Condition()
        self._pending = []
        self._closed = False
        self._error = None
        self._batches = 0
        self.count = 0
        self._thread = threading.Thread(target=self._run, name="phalanx-stream", daemon=True)
        self._thread.start()

    def write(self, value):
        ref = put(value)
        with self._cond:
            if self._error is not None:
                raise self._error
            self._pending.append(ref)
            self.count += 1
            self._cond.notify()

    def close(self):
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()
        if self._error is not None:
            raise self._error

    def _run(self):
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                refs, self._pending = self._pending, []
            key = f"{self._stream}/{self._batches}"
            self._batches += 1
            try:
                with _objects.collecting() as inside:
                    blob = cloudpickle.dumps(refs, protocol=5)
                _native.kv_put(_objects.STREAM_NS, key, blob, True)
                # Held (from here by the sweeper, which looks only at keys written) until the
                # reader has taken it, and so registered as its borrower.
                _objects._here.keep_streamed(key, inside)
            except Exception as e:  # noqa: BLE001 - the generator's next write raises it
                with self._cond:
                    self._error = e
                    self._pending = []
                return


def _check_streamable(result):
    """A streaming call's result that did not come from a generator: a list or tuple streams
    its items."""
    if isinstance(result, (list, tuple)):
        return iter(result)
    raise TypeError(f"num_returns='streaming' is for a generator (a function that yields); "
                    f"the call returned one {type(result).__name__}")


class DynamicObjectRefGenerator:
    """The value of a ``num_returns="dynamic"`` call's ref (Ray's older generator shape):
    iterating it gives one ref per yielded value."""

    def __init__(self, refs):
        self._refs = list(refs)

    def __iter__(self):
        return iter(self._refs)

    def __len__(self):
        return len(self._refs)


# num_returns of a generator: one ObjectRefGenerator ("streaming", Ray's default for a
# generator), or a ref to a DynamicObjectRefGenerator ("dynamic").
_GENERATOR_RETURNS = ("streaming", "dynamic")


def _stream_kwargs(kwargs, num_returns):
    """(kwargs, stream id): a streaming call's keyword arguments name its new stream."""
    if num_returns != "streaming":
        return kwargs, None
    import uuid
    stream_id = uuid.uuid4().hex
    return dict(kwargs, **{_objects.STREAM_KWARG: stream_id}), stream_id


def _returns(ref, encoding, num_returns, pins=None, stream_id=None):
    """What .remote() gives for a call of `num_returns` values: a ref, a list of them (one
    per value), None for 0, or a generator's shapes (Ray's)."""
    if num_returns == 1:
        return ObjectRef(ref, encoding, pins=pins)
    if num_returns == 0:
        return None
    if num_returns == "streaming":
        return ObjectRefGenerator(ObjectRef(ref, encoding, pins=pins), stream_id)
    if num_returns == "dynamic":
        return ObjectRef(ref, encoding, pins=pins, index="dynamic")
    return [ObjectRef(ref, encoding, pins=pins, index=(i, num_returns))
            for i in range(num_returns)]


def check_num_returns(value):
    if value in _GENERATOR_RETURNS:
        return value
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"num_returns={value!r}: give a whole number >= 0 (a call of n values "
                         f"gives n refs), or 'streaming' or 'dynamic' for a generator")
    return value


def method(fn=None, *, num_returns=1, concurrency_group=None, retry_exceptions=None,
           max_task_retries=None, enable_task_events=None):
    """Ray's ``@phalanx.method(...)`` (or a bare ``@phalanx.method``) on an actor's method:
    ``num_returns`` (its calls give
    that many refs), ``concurrency_group`` (one of the actor's ``concurrency_groups`` it runs
    in), ``retry_exceptions`` (True or exception classes: the method is run again when it
    raises one, up to ``max_task_retries`` times; that defaults to the actor's). Phalanx
    records no per-task events, so ``enable_task_events`` changes nothing."""
    check_num_returns(num_returns)
    _check_retry_exceptions(retry_exceptions)
    _check_retries(max_task_retries, "max_task_retries")
    if concurrency_group is not None and not (isinstance(concurrency_group, str) and
                                              concurrency_group):
        raise ValueError(f"concurrency_group={concurrency_group!r}: give the name of one of "
                         f"the actor's concurrency_groups")

    def mark(fn):
        fn.__phalanx_num_returns__ = num_returns
        if concurrency_group is not None:
            fn.__phalanx_concurrency_group__ = concurrency_group
        if retry_exceptions is not None:
            fn.__phalanx_retry_exceptions__ = _retry_value(retry_exceptions)
        if max_task_retries is not None:
            fn.__phalanx_max_task_retries__ = max_task_retries
        return fn
    if fn is not None:
        if not callable(fn):
            raise TypeError(f"@phalanx.method takes keyword options (num_returns=2, ...), not "
                            f"{fn!r:.60}")
        return mark(fn)
    return mark


def _check_retry_exceptions(value):
    if value is None or isinstance(value, bool) or (
            isinstance(value, (list, tuple)) and all(
                inspect.isclass(c) and issubclass(c, BaseException) for c in value)):
        return
    raise ValueError(f"retry_exceptions={value!r}: give True, False or a list of exception "
                     f"classes")


def _retry_value(value):
    return tuple(value) if isinstance(value, list) else value


def _check_retries(value, name):
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or
                              value < -1):
        raise ValueError(f"{name}={value!r}: give a whole number >= 0, or -1 for no limit")


# A method call's own retry_exceptions and max_task_retries (ActorMethod.options) travel to
# the actor under this keyword.
RETRY_KWARG = "__phalanx_retry__"
# A call's name given with .options(name=...): what get_runtime_context().get_task_name() says.
TASK_NAME_KWARG = "__phalanx_task_name__"


def _ref_from_obj(obj, borrow=False):
    return ObjectRef(None, ser.PICKLE, obj, borrow=borrow)


class _ArgRef:
    """Stands for a top-level ObjectRef argument of a call: the callee reads its value before
    the call runs (resolve_args), and the caller's ref stays pinned until the result is
    dropped."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __reduce__(self):
        return _ArgRef, (self.obj,)


def _swap_ref_args(args, kwargs):
    """(args, kwargs, pins): top-level ObjectRefs as _ArgRefs."""
    pins = []

    def swap(v):
        if isinstance(v, ObjectRef):
            pins.append(v)
            return _ArgRef(v._store_obj())
        return v
    if not any(isinstance(v, ObjectRef) for v in itertools.chain(args, kwargs.values())):
        return args, kwargs, None
    return tuple(swap(a) for a in args), {k: swap(v) for k, v in kwargs.items()}, pins


def has_ref_args(args, kwargs):
    """Whether resolve_args has values to read."""
    return any(isinstance(v, _ArgRef) for v in itertools.chain(args, kwargs.values()))


def resolve_args(args, kwargs):
    """The callee's side of _swap_ref_args: each _ArgRef's value."""
    if not has_ref_args(args, kwargs):
        return args, kwargs

    def value(v):
        return _objects.read(v.obj, None) if isinstance(v, _ArgRef) else v
    return tuple(value(a) for a in args), {k: value(v) for k, v in kwargs.items()}


def put(value, *, _owner=None):
    """Stores `value` once and returns an ObjectRef to it, as Ray's ``put``. Large numpy
    arrays and torch CPU tensors are shared with readers on the same machine, not copied."""
    if isinstance(value, ObjectRef):
        raise TypeError("phalanx.put takes a value, not an ObjectRef (the ref already names a "
                        "value)")
    if _owner is not None:
        raise ValueError("_owner= is not supported: a value is owned by the process that "
                         "puts it")
    _ensure_init()
    return ObjectRef(None, ser.PICKLE, _objects.put(value))


def get(refs, *, timeout=None):
    """The value of one ref, or the values of a list of refs (in order). Raises the first
    call's error (``ActorDiedError``, the task's own exception class, ...), ``OwnerDiedError``
    for a value whose owner died, or ``GetTimeoutError`` after ``timeout`` seconds."""
    if isinstance(refs, _PlacementGroupReady):
        return refs._get(timeout)
    single = isinstance(refs, ObjectRef)
    if not single and not isinstance(refs, (list, tuple)):
        raise ValueError(f"phalanx.get takes an ObjectRef or a list of ObjectRefs, not "
                         f"{type(refs).__name__} ({refs!r:.60})")
    items = [refs] if single else list(refs)
    for r in items:
        if not isinstance(r, (ObjectRef, _PlacementGroupReady)):
            raise TypeError(f"phalanx.get takes ObjectRefs (or a list of them), not "
                            f"{type(r).__name__}")
    deadline = None if timeout is None else time.monotonic() + float(timeout)
    values = [None] * len(items)
    calls = [i for i, r in enumerate(items) if r._ref is not None]
    if calls:
        natives = [items[i]._ref for i in calls]
        if _native.in_worker_mode():
            _wait_interruptibly(natives, deadline)
        left = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
        # The native get raises the first failed call's error as its phalanx class.
        results = _native.get(natives, left)
        for i, v in zip(calls, results):
            values[i] = ser.read_only(_returned(ser.loads_value(v, items[i]._encoding),
                                                items[i]._index))
    for i, r in enumerate(items):
        if isinstance(r, _PlacementGroupReady):
            values[i] = r._get(None if deadline is None else
                               max(0.0, deadline - time.monotonic()))
        elif r._ref is None:
            values[i] = _objects.read(r._obj, deadline)
    return values[0] if single else values


# How long a worker's get waits in native code at a time: a task cancelled while it waits
# gets its KeyboardInterrupt within this (it is raised only when Python code runs).
INTERRUPT_SLICE_S = 0.1


def _wait_interruptibly(natives, deadline):
    """Waits for calls in slices of INTERRUPT_SLICE_S, lending the CPU throughout (one
    Blocked scope), so that phalanx.cancel's KeyboardInterrupt reaches a waiting task."""
    if all(n.done() for n in natives):
        return
    with _native.Blocked():
        while True:
            step = INTERRUPT_SLICE_S
            if deadline is not None:
                step = min(step, deadline - time.monotonic())
                if step <= 0:
                    return
            if all(_native.wait(natives, len(natives), step)):
                return


def cancel(ref, *, force=False, recursive=True):
    """Cancels a task or an actor call, as Ray's ``cancel``: ``get`` of its ref raises
    ``TaskCancelledError`` at once, and a finished one keeps its result.
    - A task not started yet never runs; a running one gets KeyboardInterrupt at its next
      Python instruction (its result is dropped either way), unless ``force``, which kills
      its worker process.
    - An actor call not started yet never runs. A running one of an async method has its
      asyncio task cancelled (CancelledError at its await); a plain method runs on, and
      ``get_runtime_context().is_canceled()`` says it was cancelled (actors keep state, so
      they are not interrupted). ``force`` is refused for actor calls.
    A cancelled task cancels the tasks and actor calls it started that are not done, as
    Ray's ``recursive=True`` does (``recursive=False`` is accepted, and does the same)."""
    if isinstance(ref, ObjectRefGenerator):
        # Ray's cancel of a streaming generator: the call stops; the refs it yielded before
        # stay readable, then the next one raises TaskCancelledError.
        ref = ref._ref
    if not isinstance(ref, ObjectRef):
        raise TypeError(f"phalanx.cancel takes an ObjectRef (or an ObjectRefGenerator), not "
                        f"{type(ref).__name__}")
    if ref._ref is None:
        raise ValueError("phalanx.cancel stops a task; this ref is a value (phalanx.put)")
    if ref._ref.actor_id and force:
        raise ValueError("force=True is not supported for actor calls (it would kill the "
                         "actor's state): cancel without force, or phalanx.kill(handle)")
    ref._ref.cancel(bool(force))


def wait(refs, *, num_returns=1, timeout=None, fetch_local=True):
    """(ready, not_ready): the first ``num_returns`` refs done, or whatever is done when
    ``timeout`` seconds pass. Order within each list follows ``refs``. As in Ray, an
    ObjectRefGenerator among them is ready when its next ref is (or it has ended)."""
    if isinstance(refs, ObjectRef) or not isinstance(refs, (list, tuple)):
        raise TypeError(f"phalanx.wait takes a list of ObjectRefs, not {type(refs).__name__}")
    refs = list(refs)
    for r in refs:
        if not isinstance(r, (ObjectRef, _PlacementGroupReady, ObjectRefGenerator)):
            raise TypeError(f"phalanx.wait takes ObjectRefs (or ObjectRefGenerators), not "
                            f"{type(r).__name__}")
    if num_returns < 0 or num_returns > len(refs):
        raise ValueError(f"num_returns={num_returns} must be between 0 and len(refs)="
                         f"{len(refs)}")
    calls = [r for r in refs if isinstance(r, ObjectRef) and r._ref is not None]
    if len(calls) == len(refs):
        done = _native.wait([r._ref for r in refs], num_returns,
                             -1.0 if timeout is None else float(timeout))
    else:
        # Refs of the store are polled, the calls asked without waiting, until enough are done.
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        with _objects.Polling() as polling:
            while True:
                done = [r.next_ready() if isinstance(r, ObjectRefGenerator) else r.done()
                        for r in refs]
                if sum(done) >= num_returns or (deadline is not None and
                                                time.monotonic() >= deadline):
                    break
                polling.pause()
    ready = [r for r, d in zip(refs, done) if d][:num_returns]
    taken = set(map(id, ready))
    return ready, [r for r in refs if id(r) not in taken]


# ---- actors -------------------------------------------------------------------------------

class PlacementGroupSchedulingStrategy:
    """Ray's: put the actor or task in a bundle of a placement group (-1: any bundle); with
    ``placement_group_capture_child_tasks``, the actors and tasks it starts go in the group
    too (unless they say otherwise)."""

    def __init__(self, placement_group, placement_group_bundle_index=-1,
                 placement_group_capture_child_tasks=None):
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index
        self.placement_group_capture_child_tasks = placement_group_capture_child_tasks


# What a worker in a placement group is told: the group's id, and whether what it starts goes
# in the group too (placement_group_capture_child_tasks).
PG_ENV = "PHALANX_PLACEMENT_GROUP"
PG_CAPTURE_ENV = "PHALANX_PLACEMENT_GROUP_CAPTURE"


class NodeAffinitySchedulingStrategy:
    """Ray's: run on this node (``soft``: elsewhere if it cannot)."""

    def __init__(self, node_id, soft=False):
        self.node_id = node_id
        self.soft = soft


_OPTION_NAMES = {"num_cpus", "num_gpus", "memory", "resources", "max_restarts",
                 "max_task_retries", "max_concurrency", "name", "namespace", "lifetime",
                 "placement_group", "placement_group_bundle_index",
                 "placement_group_capture_child_tasks", "scheduling_strategy",
                 "runtime_env", "code_path", "get_if_exists", "concurrency_groups"}


def _check_known_and_amounts(options, names, what):
    """ValueError for an option not in `names`, or a resource amount that is not >= 0."""
    unknown = set(options) - names
    if unknown:
        raise ValueError(f"unknown {what} option(s) {sorted(unknown)}; the options are "
                         f"{sorted(names)}")
    for key in ("num_cpus", "num_gpus", "memory"):
        value = options.get(key)
        if value is not None and (not isinstance(value, (int, float)) or value < 0):
            raise ValueError(f"{key}={value!r}: give a number >= 0")


def _check_options(options):
    _check_known_and_amounts(options, _OPTION_NAMES, "actor")
    groups = options.get("concurrency_groups")
    if groups is not None and not (isinstance(groups, dict) and all(
            isinstance(k, str) and k and isinstance(v, int) and not isinstance(v, bool) and
            v >= 1 for k, v in groups.items())):
        raise ValueError(f"concurrency_groups={groups!r}: give a dict of group name -> its "
                         f"max concurrency (a whole number >= 1), e.g. {{'io': 2}}")
    lifetime = options.get("lifetime")
    if lifetime not in (None, "detached", "non_detached"):
        raise ValueError(f"lifetime={lifetime!r}: give 'detached' or None")


def _native_options(options):
    o = {}
    resources = dict(options.get("resources") or {})
    if options.get("num_cpus") is not None:
        resources["CPU"] = float(options["num_cpus"])
    if options.get("num_gpus") is not None:
        resources["GPU"] = float(options["num_gpus"])
    if options.get("memory") is not None:
        resources["memory"] = float(options["memory"])
    o["resources"] = {k: float(v) for k, v in resources.items()}
    for key in ("max_restarts", "max_task_retries", "max_concurrency", "name", "namespace",
                "code_path"):
        if options.get(key) is not None:
            o[key] = options[key]
    o["detached"] = options.get("lifetime") == "detached"
    # The job's runtime_env (init's), then this actor's or task's on top.
    env = _inherited_env_vars()
    env.update(((options.get("runtime_env") or {}).get("env_vars")) or {})
    if env:
        import json
        env = {str(k): str(v) for k, v in env.items()}
        o["env"] = dict(env, **{ENV_VARS_ENV: json.dumps(env, sort_keys=True)})
    strategy = options.get("scheduling_strategy")
    pg = options.get("placement_group")
    index = options.get("placement_group_bundle_index", -1)
    capture = options.get("placement_group_capture_child_tasks")
    if isinstance(strategy, PlacementGroupSchedulingStrategy):
        pg, index = strategy.placement_group, strategy.placement_group_bundle_index
        capture = strategy.placement_group_capture_child_tasks
        if pg is None:
            pg = "default"  # Ray's placement_group=None: no group, not even the parent's
    elif strategy is None and pg is None and os.environ.get(PG_CAPTURE_ENV) == "1" and \
            os.environ.get(PG_ENV):
        # Started by an actor or task whose group captures its children: in the group too.
        pg, index, capture = PlacementGroup(os.environ[PG_ENV], [], ""), -1, True
    if pg is not None and pg != "default":
        env = dict(o.get("env") or {})
        env[PG_ENV] = pg.id
        env[PG_CAPTURE_ENV] = "1" if capture else ""
        o["env"] = env
    elif pg == "default":
        pg = None
    elif isinstance(strategy, NodeAffinitySchedulingStrategy):
        o["scheduling_strategy"] = "NODE_AFFINITY"
        o["node_id"] = strategy.node_id
        o["soft"] = bool(strategy.soft)
    elif isinstance(strategy, str):
        o["scheduling_strategy"] = strategy
    elif strategy is not None:
        raise ValueError(f"scheduling_strategy={strategy!r}: give 'DEFAULT', 'SPREAD', a "
                         f"PlacementGroupSchedulingStrategy or a NodeAffinitySchedulingStrategy")
    if pg is not None:
        o["placement_group_id"] = pg.id
        o["bundle_index"] = int(index if index is not None else -1)
    return o


_METHOD_OPTION_NAMES = {"num_returns", "concurrency_group", "retry_exceptions",
                        "max_task_retries", "enable_task_events", "name"}


class ActorMethod:
    __slots__ = ("_handle", "_name", "_options")

    def __init__(self, handle, name, options=None):
        self._handle = handle
        self._name = name
        self._options = options or {}

    def options(self, **options):
        """Ray's per-call options of a method: ``num_returns``, ``concurrency_group``,
        ``retry_exceptions``, ``max_task_retries``; ``name`` and ``enable_task_events`` are
        taken and change nothing."""
        unknown = set(options) - _METHOD_OPTION_NAMES
        if unknown:
            raise ValueError(f"unknown method option(s) {sorted(unknown)}; the options are "
                             f"{sorted(_METHOD_OPTION_NAMES)}")
        if options.get("num_returns") is not None:
            check_num_returns(options["num_returns"])
        _check_retry_exceptions(options.get("retry_exceptions"))
        _check_retries(options.get("max_task_retries"), "max_task_retries")
        group = options.get("concurrency_group")
        if group is not None and not (isinstance(group, str) and group):
            raise ValueError(f"concurrency_group={group!r}: give the name of one of the "
                             f"actor's concurrency_groups")
        return ActorMethod(self._handle, self._name, dict(self._options, **options))

    # Type hints: ActorMethod[...] is ActorMethod.
    __class_getitem__ = classmethod(lambda cls, item: cls)

    def remote(self, *args, **kwargs):
        h = self._handle
        encoding = ser.PICKLE if h._language == "python" else ser.MSGPACK
        pins = None
        if encoding == ser.PICKLE:
            args, kwargs, pins = _swap_ref_args(args, kwargs)
        elif any(isinstance(a, ObjectRef) for a in args):
            args = tuple(get(a) if isinstance(a, ObjectRef) else a for a in args)  # C++: values
        o = self._options
        n = o.get("num_returns")
        if n is None:
            n = h._method_returns.get(self._name, 1)
        stream_id = None
        if encoding == ser.PICKLE:
            kwargs, stream_id = _stream_kwargs(kwargs, n)
            if o.get("retry_exceptions") is not None or o.get("max_task_retries") is not None:
                kwargs = dict(kwargs, **{RETRY_KWARG: (_retry_value(o.get("retry_exceptions")),
                                                       o.get("max_task_retries"))})
            if o.get("name"):
                kwargs = dict(kwargs, **{TASK_NAME_KWARG: str(o["name"])})
        with _objects.collecting() as inside:  # refs inside the arguments: pinned too
            payload = ser.dumps_call(args, kwargs, encoding)
        if inside:
            pins = (pins or []) + inside
        call = _native.submit(h._actor_id, self._name, payload,
                               o.get("concurrency_group") or "")
        note_child(call)
        return _returns(call, encoding, n, pins, stream_id)

    def bind(self, *args, **kwargs):
        """A node of a DAG (phalanx.dag) that calls this method when the DAG runs."""
        from .dag import ClassMethodNode
        return ClassMethodNode(self._handle, self._name, args, kwargs, self._options)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"actor methods are called with .remote(): "
                        f"handle.{self._name}.remote(...)")


class ActorHandle:
    """A handle to an actor: ``handle.method.remote(*args)`` returns an ObjectRef. Handles can
    be passed to other actors."""

    def __init__(self, actor_id, class_name, language="python", method_returns=None):
        self._actor_id = actor_id
        self._class_name = class_name
        self._language = language
        self._method_returns = method_returns or {}  # method -> num_returns (@phalanx.method)

    # Type hints, as Ray's generic ActorHandle[T]: ActorHandle[Counter] is ActorHandle.
    __class_getitem__ = classmethod(lambda cls, item: cls)

    @property
    def actor_id(self):
        return self._actor_id

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return ActorMethod(self, name)

    def __reduce__(self):
        return (ActorHandle, (self._actor_id, self._class_name, self._language,
                              self._method_returns))

    def __repr__(self):
        return f"ActorHandle({self._class_name}, {self._actor_id[:8]})"

    def __eq__(self, other):
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    def __hash__(self):
        return hash(self._actor_id)


# An async actor (a class with an ``async def`` method) takes this many calls at once unless
# max_concurrency says otherwise: Ray's default. Its coroutines share one event loop, and a
# thread waits for each call only while it runs (the worker starts them as calls need them).
ASYNC_MAX_CONCURRENCY = 1000
# The label of an actor's record that holds its methods' num_returns (@phalanx.method), for
# the handles get_actor makes (Ray keeps them in the GCS too).
METHOD_RETURNS_LABEL = "phalanx.method_returns"


def _method_returns(cls):
    """{method: num_returns} of the methods of cls that @phalanx.method marked."""
    if cls is None:
        return {}
    out = {}
    for name in dir(cls):
        fn = getattr(cls, name, None)
        n = getattr(fn, "__phalanx_num_returns__", None)
        if n is None and (inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)):
            n = "streaming"  # Ray's default for a generator method
        if n is not None:
            out[name] = n
    return out


def _is_async_class(cls):
    return cls is not None and any(
        inspect.iscoroutinefunction(getattr(cls, name, None)) or
        inspect.isasyncgenfunction(getattr(cls, name, None))
        for name in dir(cls) if not name.startswith("__"))


class ActorClass:
    """What ``@phalanx.remote`` makes of a class: ``.remote(*args)`` creates an actor,
    ``.options(...)`` overrides the decorator's options for one creation."""

    # Type hints, as Ray's ActorClass[T] (``Counter: ActorClass[C] = phalanx.remote(C)``).
    __class_getitem__ = classmethod(lambda cls, item: cls)

    def __init__(self, cls, options, language="python", class_name=None):
        self._cls = cls
        self._options = dict(options)
        self._language = language
        self._class_name = class_name or (f"{cls.__module__}.{cls.__qualname__}" if cls else "")
        _check_options(self._options)

    def options(self, **options):
        merged = dict(self._options)
        merged.update(options)
        return ActorClass(self._cls, merged, self._language, self._class_name)

    def remote(self, *args, **kwargs):
        _ensure_init()
        name = self._options.get("name")
        if self._options.get("get_if_exists") and name:
            # Ray's get-or-create: the live actor of that name, else a new one (and if another
            # caller created it meanwhile, that one).
            try:
                return get_actor(name, self._options.get("namespace"))
            except ValueError:
                pass
            try:
                return self.options(get_if_exists=False).remote(*args, **kwargs)
            except AlreadyExistsError:
                return get_actor(name, self._options.get("namespace"))
        if self._language == "python":
            # The driver's import path travels along, so the worker can import the modules
            # the class comes from (classes of __main__ travel by value).
            paths = [p for p in sys.path if p and os.path.isdir(p)]
            if "" in sys.path or not sys.path[0]:
                paths.insert(0, os.getcwd())
            init_args = cloudpickle.dumps((paths, cloudpickle.dumps((self._cls, args, kwargs),
                                                                    protocol=5),
                                           self._worker_settings()), protocol=5)
        else:
            init_args = ser.dumps_call(args, kwargs, ser.MSGPACK)
        options = _native_options(self._options)
        returns = _method_returns(self._cls)
        if returns and self._options.get("name"):
            options["labels"] = {METHOD_RETURNS_LABEL: json.dumps(returns)}
        if (self._language == "python" and self._options.get("max_concurrency") is None
                and _is_async_class(self._cls)):
            options["max_concurrency"] = ASYNC_MAX_CONCURRENCY
        actor_id = _native.create_actor(self._class_name, self._language, init_args, options)
        return ActorHandle(actor_id, self._class_name, self._language, returns)

    def _worker_settings(self):
        """What the actor's worker is told beside its class (phalanx._worker.create): the
        actor's max_task_retries (its methods' retry_exceptions retry up to it) and its
        concurrency groups, checked against the groups its methods name."""
        groups = dict(self._options.get("concurrency_groups") or {})
        for name in dir(self._cls):
            group = getattr(getattr(self._cls, name, None), "__phalanx_concurrency_group__",
                            None)
            if group is not None and group not in groups:
                raise ValueError(f"{self._class_name}.{name}: @method(concurrency_group="
                                 f"{group!r}) names no group of the actor's "
                                 f"concurrency_groups {sorted(groups)}; add it there")
        return {"max_task_retries": self._options.get("max_task_retries") or 0,
                "concurrency_groups": groups}

    def bind(self, *args, **kwargs):
        """A node of a DAG (phalanx.dag) that creates this actor, once, when the DAG first
        runs; ``node.method.bind(...)`` calls its methods."""
        from .dag import ClassNode
        return ClassNode(self, args, kwargs)

    def get_or_create(self, *args, **kwargs):
        """The live actor of this ``name`` (and namespace), else a new one made with these
        arguments: ``.options(name=..., get_if_exists=True).remote(...)``."""
        if not self._options.get("name"):
            raise ValueError("get_or_create needs a name: Cls.options(name=...)"
                             ".get_or_create(...)")
        return self.options(get_if_exists=True).remote(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"actor classes are created with .remote(): "
                        f"{self._class_name}.remote(...)")


def cpp_actor_class(class_name, code_path):
    """A C++ actor class (registered with PHALANX_ACTOR in the program ``code_path``), to
    create from Python: ``phalanx.cpp_actor_class("Greeter", "/opt/app/greeter").remote(...)``.
    Arguments and results travel as msgpack; methods are called by name."""
    return ActorClass(None, {"code_path": code_path}, language="cpp", class_name=class_name)


# How long phalanx.kill(no_restart=True) waits for the actor to be DEAD before it returns
# anyway (its node may be unreachable; the GCS then buries it with the node).
KILL_WAIT_S = 10.0


def kill(handle, *, no_restart=True):
    """Kills the actor's process; with ``no_restart=False`` it restarts if its
    ``max_restarts`` allows. With ``no_restart=True`` it returns once the actor is DEAD
    (at most ``KILL_WAIT_S``), so that a call made after it fails with ActorDiedError."""
    if not isinstance(handle, ActorHandle):
        raise TypeError(f"phalanx.kill takes an ActorHandle, not {type(handle).__name__}")
    _native.kill(handle._actor_id, no_restart)
    if not no_restart:
        return
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline:
        try:
            if _native.actor_info(handle._actor_id)["state"] == "DEAD":
                return
        except PhalanxError:
            return  # the GCS does not know it (any more), or cannot say
        time.sleep(0.01)


def get_actor(name, namespace=None):
    """The handle of the live actor named ``name``; ValueError if there is none."""
    _ensure_init()
    ns = namespace if namespace is not None else _native.cluster()[3]
    try:
        info = _native.named_actor(name, ns)
    except NotFoundError as e:
        raise ValueError(str(e)) from None
    returns = info.get("labels", {}).get(METHOD_RETURNS_LABEL)
    return ActorHandle(info["actor_id"], info["class_name"], info["language"],
                       json.loads(returns) if returns else None)


def actor_info(handle):
    """State, pid, node, restarts and death cause of an actor (a dict)."""
    return dict(_native.actor_info(handle._actor_id))


# ---- placement groups ---------------------------------------------------------------------

class _PlacementGroupReady:
    """What ``pg.ready()`` gives: ``get`` and ``wait`` take it as they take an ObjectRef."""

    _ref = None

    def __init__(self, pg):
        self._pg = pg

    def done(self):
        return self._pg.state == "CREATED"

    def _get(self, timeout):
        # GetTimeoutError after `timeout`; PlacementGroupError if the group was removed.
        _native.wait_placement_group(self._pg.id, -1.0 if timeout is None else float(timeout))
        return self._pg


class PlacementGroup:
    def __init__(self, pg_id, bundles, strategy):
        self.id = pg_id
        self.bundle_specs = bundles
        self.strategy = strategy

    def ready(self):
        """A ref that ``phalanx.get`` resolves once every bundle is reserved."""
        return _PlacementGroupReady(self)

    def wait(self, timeout_seconds=30):
        """True once every bundle is reserved; False if that did not happen in time."""
        try:
            _native.wait_placement_group(self.id, float(timeout_seconds))
            return True
        except PhalanxError:
            return False

    @property
    def state(self):
        return _native.placement_group_state(self.id)

    @property
    def bundle_count(self):
        return len(self.bundle_specs)

    def __eq__(self, other):
        return isinstance(other, PlacementGroup) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return f"PlacementGroup({self.id[:8]}, {self.strategy}, {len(self.bundle_specs)} bundles)"

    def __reduce__(self):
        return (PlacementGroup, (self.id, self.bundle_specs, self.strategy))


def placement_group(bundles, strategy="PACK", name="", lifetime=None):
    """Reserves ``bundles`` (e.g. ``[{"CPU": 1}, {"CPU": 1, "GPU": 1}]``) all-or-nothing:
    PACK, SPREAD, STRICT_PACK or STRICT_SPREAD. It is removed when this driver's job ends,
    unless ``lifetime="detached"``. As in Ray, a group no node of the cluster could hold
    stays pending (a node that has what it asks may join), with a warning saying why."""
    _ensure_init()
    if strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
        raise ValueError(f"strategy={strategy!r}: give PACK, SPREAD, STRICT_PACK or "
                         f"STRICT_SPREAD")
    if lifetime not in (None, "detached"):
        raise ValueError(f"lifetime={lifetime!r}: give 'detached' or None")
    converted = []
    for b in bundles:
        converted.append({("memory" if k == "memory" else k): float(v) for k, v in b.items()})
    pg_id, reason = _native.create_placement_group(converted, strategy, name or "",
                                                    lifetime == "detached",  # PlacementGroupError
                                                    pend_if_infeasible=True)
    if reason.startswith("INFEASIBLE"):
        import warnings
        warnings.warn(f"placement group {pg_id[:8]} cannot be placed on any node of the "
                      f"cluster now ({reason}); it waits for a node that has it to join",
                      stacklevel=2)
    return PlacementGroup(pg_id, bundles, strategy)


def _group_from(info):
    return PlacementGroup(info["placement_group_id"], [dict(b) for b in info["bundles"]],
                          info["strategy"])


def get_placement_group(name):
    """The live placement group named ``name`` (Ray's ``ray.util.get_placement_group``);
    ValueError if there is none."""
    _ensure_init()
    for info in _native.list_placement_groups():
        if info["name"] == name and info["state"] != "REMOVED":
            return _group_from(info)
    raise ValueError(f"there is no placement group named {name!r} (placement_group("
                     f"..., name={name!r}) creates one)")


def get_current_placement_group():
    """The placement group this actor or task runs in; None in a driver or outside a group."""
    pg_id = os.environ.get(PG_ENV)
    if not pg_id:
        return None
    for info in _native.list_placement_groups():
        if info["placement_group_id"] == pg_id:
            return _group_from(info)
    return PlacementGroup(pg_id, [], "")


def placement_group_table(placement_group=None):
    """Ray's table of placement groups, by id (or one group's entry): id, name, strategy,
    state, bundles by index and the node of each bundle."""
    _ensure_init()
    table = {}
    for info in _native.list_placement_groups():
        table[info["placement_group_id"]] = {
            "placement_group_id": info["placement_group_id"], "name": info["name"],
            "strategy": info["strategy"], "state": info["state"],
            "bundles": dict(enumerate(info["bundles"])),
            "bundles_to_node_id": dict(enumerate(info["bundle_nodes"])),
            "stats": {"scheduling_state": info["pending_reason"] or info["state"]}}
    if placement_group is not None:
        return table.get(placement_group.id, {})
    return table


def remove_placement_group(pg):
    _native.remove_placement_group(pg.id)


# Ray's introspection calls that read the cluster: each connects a driver that has not called
# init() yet, as Ray's do.
def get_runtime_context():
    _ensure_init()
    return RuntimeContext()


def nodes():
    """Every node the cluster knows, dead ones included, in Ray's shape."""
    _ensure_init()
    out = []
    for n in _native.nodes():
        host, _, port = n["address"].rpartition(":")
        out.append({"NodeID": n["node_id"], "Alive": n["alive"],
                    "NodeManagerAddress": host.strip("[]"), "NodeManagerPort": int(port or 0),
                    "NodeManagerHostname": n["hostname"], "IsHead": n["is_head"],
                    "Resources": dict(n["resources"]) if n["alive"] else {},
                    # What its object store holds, as its last heartbeat said.
                    "ObjectStore": dict(n["object_store"])})
    return out


def _sum(field):
    _ensure_init()
    total = {}
    for n in _native.nodes():
        if n["alive"]:
            for k, v in n[field].items():
                total[k] = total.get(k, 0.0) + v
    return total


def cluster_resources():
    """The resources of the cluster's live nodes, summed."""
    return _sum("resources")


def available_resources():
    """What the live nodes have free now, summed."""
    return {k: v for k, v in _sum("available").items() if v > 0}
