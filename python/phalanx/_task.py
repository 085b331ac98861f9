"""Remote functions (tasks): ``@phalanx.remote`` on a function, as in Ray.

    @phalanx.remote(num_cpus=1, max_retries=3)
    def square(x):
        return x * x

    refs = [square.remote(i) for i in range(100)]
    total = phalanx.get(add_all.remote(*refs))      # refs as arguments: resolved first

A task runs on a pooled task worker (``TaskWorker`` below, a Python actor), leased by this
process per shape (resources, placement, environment) and kept while there is work: one actor
call per task, not a process start. The pool, the retries and the resolution of ObjectRef
arguments are the runtime's (actors/internal/task_pool.h), shared with C++'s
``phalanx::Task``.

The function itself travels once: it is pickled into the GCS's key-value store, and a worker
loads it by its hash the first time it runs it.
"""

import asyncio
import hashlib
import inspect
import os
import pickle
import struct
import sys
import threading
import traceback

import cloudpickle

from phalanx import _native

from . import _context, _objects
from . import _serialization as ser
from ._api import (ActorClass, ObjectRef, _ArgRef, _check_known_and_amounts, _check_retries,
                   _check_retry_exceptions, _check_streamable, _ensure_init, _native_options,
                   _returns, _stream_kwargs, check_num_returns, collect_yielded,
                   collect_yielded_async, stream_out, stream_out_async)
from ._context import TASK_WORKER_CLASS, begin_children, end_children, note_child
from ._objects import STREAM_KWARG

# The key-value namespace of pickled functions (key: "fn/<sha256 of the pickle>").
FUNCTION_NAMESPACE = "phalanx_tasks"
# The method that runs one task on a TaskWorker (a framed payload, see _unframe).
TASK_METHOD = "__phalanx_task__"
# An exception that retry_exceptions names is marked so on its error's detail; the runtime
# strips the mark and sends the task again (python/src/driver.cc).
_RETRYABLE_MARK = "\nretryable"

_TASK_OPTION_NAMES = {"num_cpus", "num_gpus", "memory", "resources", "max_retries",
                      "retry_exceptions", "scheduling_strategy", "runtime_env", "num_returns",
                      "name"}


class _Dep:
    """Stands for the i-th ObjectRef argument of a task in its pickled call."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def __reduce__(self):
        return (_Dep, (self.index,))


def _dumps(value):
    """pickle where it can (several times faster on small values), cloudpickle where it must:
    lambdas and closures (pickle refuses them) and anything of __main__ (pickle would name it,
    and no worker can import the driver's __main__). pickle.loads reads both."""
    try:
        blob = pickle.dumps(value, protocol=5)
        if b"__main__" not in blob:
            return blob
    except (pickle.PicklingError, TypeError, AttributeError):
        pass
    return cloudpickle.dumps(value, protocol=5)


def _unframe(payload):
    (count,) = struct.unpack_from("<I", payload, 0)
    frames, at = [], 4
    for _ in range(count):
        (n,) = struct.unpack_from("<I", payload, at)
        at += 4
        frames.append(payload[at:at + n])
        at += n
    return frames


def generated(result, stream_id, run):
    """What a call returns for its result: a generator's values are sent on the call's stream
    (the number of them is returned), or listed when the call has none (num_returns=n or
    "dynamic"). `run` runs a coroutine to its end."""
    if stream_id is not None:
        if inspect.isasyncgen(result):
            return run(stream_out_async(stream_id, result))
        if not inspect.isgenerator(result):
            result = _check_streamable(result)
        return stream_out(stream_id, result)
    # A generator's values (the refs of num_returns read them), and its error if it raised.
    if inspect.isgenerator(result):
        return collect_yielded(result, result.__qualname__)
    if inspect.isasyncgen(result):
        return run(collect_yielded_async(result, result.__qualname__))
    return result


class TaskWorker:
    """The actor that runs tasks: hosts any number of functions, loaded by key."""

    def __init__(self):
        self._functions = {}
        self._lock = threading.Lock()
        self._running = None  # the thread running a task now (its ident), for _interrupt
        self._interrupted = False  # an interrupt was raised in the running task

    def _phalanx_interrupt(self):
        """Raises KeyboardInterrupt in the running task, at its next Python instruction (a
        call into C that blocks sees it when it returns)."""
        import ctypes
        with self._lock:
            if self._running is None:
                return False
            self._interrupted = ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(self._running), ctypes.py_object(KeyboardInterrupt)) == 1
            return self._interrupted

    def _run_interruptible(self, payload):
        with self._lock:
            self._running, self._interrupted = threading.get_ident(), False
        begin_children()
        cancelled = False
        try:
            return self._phalanx_run_task(payload)
        except KeyboardInterrupt:
            cancelled = True
            return False, b"KeyboardInterrupt", "TaskError", "the task was cancelled"
        finally:
            end_children(cancelled)
            import ctypes
            with self._lock:
                if self._interrupted:  # not raised yet: it must not reach the next task
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(self._running), None)
                self._running, self._interrupted = None, False

    def ready(self):
        return True

    def _function(self, key):
        with self._lock:
            fn = self._functions.get(key)
        if fn is None:
            blob = _native.kv_get(FUNCTION_NAMESPACE, key)
            if blob is None:
                raise RuntimeError(f"the task's function ({key}) is not in the cluster's "
                                   f"key-value store; was the cluster restarted without it?")
            fn = pickle.loads(blob)
            with self._lock:
                self._functions[key] = fn
        return fn

    def _phalanx_run_task(self, payload):
        """Runs one task: (ok, value, error kind, message), as _worker.call returns."""
        frames = _unframe(payload)
        key, name, task_name, args, kwargs, encodings, retry = pickle.loads(frames[0])
        task = _context.enter_task(task_name, name, _native.current_call())
        try:
            values = [ser.loads_value(v, e) for v, e in zip(frames[1:], encodings)]
            args = [values[a.index] if isinstance(a, _Dep) else a for a in args]
            kwargs = {k: values[v.index] if isinstance(v, _Dep) else v for k, v in kwargs.items()}
            from ._api import resolve_args
            args, kwargs = resolve_args(args, kwargs)
            ser.read_only(args), ser.read_only(kwargs)  # as Ray's: not to be written into
            stream_id = kwargs.pop(STREAM_KWARG, None)
            fn = self._function(key)
            result = fn(*args, **kwargs)
            if inspect.iscoroutine(result):
                result = asyncio.run(result)
            result = generated(result, stream_id, asyncio.run)
        except Exception as e:  # noqa: BLE001 - handed to the caller as a TaskError
            from .exceptions import _remote_detail
            detail = _remote_detail(e)  # the class name and the pickled exception
            if retry is True or (retry and isinstance(e, retry)):
                detail += _RETRYABLE_MARK.encode()  # last: the runtime strips it
            tb = traceback.format_exc().rstrip()
            return False, detail, "TaskError", \
                f"{type(e).__name__}: {e}\n\ntask {name} raised:\n{tb}"
        finally:
            _context.leave_task(task)
        try:
            return True, _dumps(result), "", ""
        except Exception as e:  # noqa: BLE001
            return False, type(e).__name__.encode(), "TaskError", \
                f"task {name}: the result cannot be sent back ({type(e).__name__}: {e})"


def _check_task_options(options):
    _check_known_and_amounts(options, _TASK_OPTION_NAMES, "task")
    check_num_returns(options.get("num_returns", 1))
    _check_retries(options.get("max_retries", 3), "max_retries")
    _check_retry_exceptions(options.get("retry_exceptions", False))


# The task worker's constructor arguments, per import path (what ActorClass.remote sends).
_init_args_cache = {}


def _worker_init_args():
    key = (tuple(sys.path), os.getcwd() if "" in sys.path or not sys.path[0] else "")
    blob = _init_args_cache.get(key)
    if blob is None:
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        if key[1]:
            paths.insert(0, key[1])
        blob = cloudpickle.dumps((paths, cloudpickle.dumps((TaskWorker, (), {}), protocol=5)),
                                 protocol=5)
        _init_args_cache[key] = blob
    return blob


class RemoteFunction:
    """What ``@phalanx.remote`` makes of a function: ``.remote(*args)`` runs it as a task and
    returns an ObjectRef; ``.options(...)`` overrides the decorator's options for one call."""

    def __init__(self, fn, options):
        _check_task_options(options)
        self._fn = fn
        self._options = dict(options)
        self._name = f"{fn.__module__}.{fn.__qualname__}"
        self._key = None  # "fn/<hash>" once stored
        self._stored_in = None  # the cluster it was stored in
        self._native = None  # the task worker's options, as the runtime takes them
        self._lock = threading.Lock()
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", "task")

    def options(self, **options):
        merged = dict(self._options)
        merged.update(options)
        clone = RemoteFunction(self._fn, merged)
        clone._key, clone._stored_in = self._key, self._stored_in
        return clone

    def __call__(self, *args, **kwargs):
        raise TypeError(f"remote functions are called with .remote(): {self._name}.remote(...)")

    # A remote function travels (in the globals of another task's function, of an actor's
    # class, or as an argument) as its function and options; the lock and the cluster's key
    # are this process's. State, not __reduce__ arguments: pickle remembers the object before
    # its state, so a function that starts itself (fib.remote(n - 1)) pickles.
    def __getstate__(self):
        return {"fn": self._fn, "options": self._options}

    def __setstate__(self, state):
        self.__init__(state["fn"], state["options"])

    def _function_key(self):
        cluster = _native.cluster()[0]
        with self._lock:
            if self._key is None or self._stored_in != cluster:
                blob = cloudpickle.dumps(self._fn, protocol=5)
                key = "fn/" + hashlib.sha256(blob).hexdigest()
                _native.kv_put(FUNCTION_NAMESPACE, key, blob, True)
                self._key, self._stored_in = key, cluster
            return self._key

    def bind(self, *args, **kwargs):
        """A node of a DAG (phalanx.dag) that runs this function when the DAG runs."""
        from .dag import FunctionNode
        return FunctionNode(self, args, kwargs)

    def remote(self, *args, **kwargs):
        _ensure_init()
        key = self._function_key()
        deps, encodings, pins = [], [], []

        def swap(value):
            if isinstance(value, ObjectRef):
                if value._ref is None or value._index is not None:
                    # A value of the store, or one of a call's several values: the worker
                    # reads it from the store.
                    pins.append(value)
                    return _ArgRef(value._store_obj())
                deps.append(value._ref)
                encodings.append(value._encoding)
                return _Dep(len(deps) - 1)
            return value
        args = tuple(swap(a) for a in args)
        kwargs = {k: swap(v) for k, v in kwargs.items()}
        o = self._options
        num_returns = o.get("num_returns")
        if num_returns is None:  # Ray's default: a generator gives an ObjectRefGenerator
            num_returns = "streaming" if (inspect.isgeneratorfunction(self._fn) or
                                          inspect.isasyncgenfunction(self._fn)) else 1
        retry = o.get("retry_exceptions", False)
        if isinstance(retry, list):
            retry = tuple(retry)
        kwargs, stream_id = _stream_kwargs(kwargs, num_returns)
        with _objects.collecting() as inside:  # refs inside the arguments: pinned too
            call = _dumps((key, self._name, o.get("name") or self.__name__, args, kwargs,
                           encodings, retry))
        pins.extend(inside)
        if self._native is None:
            worker_options = {k: v for k, v in o.items()
                              if k in ("num_cpus", "num_gpus", "memory", "resources",
                                       "scheduling_strategy", "runtime_env")}
            worker_options.setdefault("num_cpus", 1)
            self._native = _native_options(worker_options)
            self._native["max_concurrency"] = 1
        # A call's result inside the arguments may be one of this process's tasks, which
        # must not queue behind this one on its worker (it would wait for it in get).
        exclusive = any(p._ref is not None for p in pins)
        ref = _native.submit_task(self._name, TASK_WORKER_CLASS, _worker_init_args(),
                                   _READY_ARGS, self._native, TASK_METHOD, call, deps,
                                   int(o.get("max_retries", 3)), exclusive)
        note_child(ref)
        return _returns(ref, ser.PICKLE, num_returns, pins or None, stream_id)

    def __repr__(self):
        return f"RemoteFunction({self._name})"


_READY_ARGS = ser.dumps_call((), {}, ser.PICKLE)
# phalanx._context names this class by its path, as the node reports a hosted actor's class.
assert f"{TaskWorker.__module__}.TaskWorker" == TASK_WORKER_CLASS, \
    "phalanx._context.TASK_WORKER_CLASS no longer names phalanx._task.TaskWorker"


def remote(*args, **options):
    """``@phalanx.remote`` on a class (an actor) or a function (a task), bare or with options:
    ``@phalanx.remote(num_cpus=1, memory=2 << 30, max_restarts=3, max_task_retries=-1,
    max_concurrency=4, resources={...})`` on a class; ``@phalanx.remote(num_cpus=1,
    max_retries=3, retry_exceptions=[IOError])`` on a function."""
    def make(target, opts):
        if inspect.isclass(target):
            return ActorClass(target, opts)
        if callable(target):
            return RemoteFunction(target, opts)
        raise TypeError(f"phalanx.remote applies to classes (actors) and functions (tasks), "
                        f"not {type(target).__name__}")
    if len(args) == 1 and not options:
        return make(args[0], {})
    if args:
        raise TypeError("use @phalanx.remote or @phalanx.remote(option=value, ...)")
    return lambda target: make(target, options)
