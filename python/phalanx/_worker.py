"""The Python worker: ``python3 -m phalanx._worker``, started by a node manager to host one
actor. The native module runs the worker host (gRPC, calls, lanes) and calls ``create`` and
``call`` below, holding the GIL only while Python code runs."""

import asyncio
import collections
import inspect
import os
import pickle
import sys
import threading
import traceback

from phalanx import _native

from . import _context
from . import _serialization as ser
from ._api import RETRY_KWARG, TASK_NAME_KWARG, has_ref_args, resolve_args
from .actor import _end_this_actor, _ExitActor
from ._objects import STREAM_KWARG
from ._task import TASK_METHOD as _TASK_METHOD
from ._task import generated
from ._task import TaskWorker as _TaskWorker


# What ActorClass.remote tells this actor's worker beside its class: max_task_retries (the
# retries of a method's retry_exceptions) and concurrency_groups.
_settings = {}


def create(init_args: bytes):
    """Builds the actor object from its pickled (class, args, kwargs)."""
    if not ser.is_pickled(init_args):
        raise RuntimeError("this actor's constructor arguments are not pickled: a Python actor "
                           "is created from Python (phalanx.remote)")
    paths, payload, *settings = pickle.loads(init_args)
    _settings.update(settings[0] if settings else {})
    for p in paths:
        if p not in sys.path:
            sys.path.append(p)
    task = None
    try:
        cls, args, kwargs = pickle.loads(payload)
        if cls is not _TaskWorker:
            task = _context.enter_task(f"{cls.__name__}.__init__",
                                       f"{cls.__module__}.{cls.__qualname__}.__init__", "")
        return cls(*args, **kwargs)
    except Exception:
        raise RuntimeError(traceback.format_exc().rstrip()) from None
    finally:
        if task is not None:
            _context.leave_task(task)


def concurrency_groups(obj):
    """({group: max concurrency}, {method: group}) of the actor: its concurrency_groups
    option, and the methods that @phalanx.method(concurrency_group=...) puts in one."""
    groups = dict(_settings.get("concurrency_groups") or {})
    methods = {}
    for name in dir(type(obj)):
        group = getattr(getattr(type(obj), name, None), "__phalanx_concurrency_group__", None)
        if group in groups:
            methods[name] = group
    return groups, methods


def _retry_policy(fn, kwargs):
    """(retry_exceptions, retries) of a call: the call's own options, else its method's
    @phalanx.method marks, the retries defaulting to the actor's max_task_retries; None when
    the call is not retried on an exception."""
    own = kwargs.pop(RETRY_KWARG, None) if isinstance(kwargs, dict) else None
    retry, retries = own if own is not None else (None, None)
    if retry is None:
        retry = getattr(fn, "__phalanx_retry_exceptions__", None)
    if retries is None:
        retries = getattr(fn, "__phalanx_max_task_retries__", None)
    if retries is None:
        retries = _settings.get("max_task_retries", 0)
    if not retry or retries == 0:
        return None
    return retry, retries


def _retries_on(error, retry):
    return retry is True or isinstance(error, retry)


def _retrying(fn, policy):
    """`fn` run again on an exception its policy names, as many times as it allows (-1:
    without limit); a coroutine function stays one."""
    retry, retries = policy
    if inspect.iscoroutinefunction(fn):
        async def run_async(*args, **kwargs):
            left = retries
            while True:
                try:
                    return await fn(*args, **kwargs)
                except Exception as e:  # noqa: BLE001 - raised again unless retried
                    if left == 0 or not _retries_on(e, retry):
                        raise
                    left -= 1
        return run_async

    def run(*args, **kwargs):
        left = retries
        while True:
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001
                if left == 0 or not _retries_on(e, retry):
                    raise
                left -= 1
    return run


def _task_names(obj, method, kwargs):
    """(name, function name) of a call of ``obj.method``, as Ray's runtime context gives
    them: "Class.method" (or the name the call was given), "module.Class.method"."""
    cls = type(obj)
    given = kwargs.pop(TASK_NAME_KWARG, None) if isinstance(kwargs, dict) else None
    return (given or f"{cls.__name__}.{method}",
            f"{cls.__module__}.{cls.__qualname__}.{method}")


def call(obj, method: str, payload: bytes, done=None):
    """Runs ``obj.method`` on the decoded arguments: (ok, value, error kind, message); with an
    error, ``value`` is its detail (a TaskError's exception, see _cause_type). With `done`, an
    async method's coroutine is started on the actor's event loop and None is returned: `done`
    gets the tuple from the loop's thread when the coroutine ends, so no thread waits for
    it."""
    if method == _TASK_METHOD and isinstance(obj, _TaskWorker):
        return obj._run_interruptible(payload)
    fn = getattr(obj, method, None) if not method.startswith("_") else None
    if fn is None or not callable(fn):
        return (False, b"", "InvalidCall",
                f"actor class {type(obj).__name__} has no method '{method}'")
    try:
        args, kwargs, encoding = ser.loads_call(payload)
    except Exception as e:  # noqa: BLE001
        return False, b"", "InvalidCall", f"cannot decode the arguments of {method}: {e}"
    stream_id = kwargs.pop(STREAM_KWARG, None) if isinstance(kwargs, dict) else None
    names = _task_names(obj, method, kwargs)
    policy = _retry_policy(fn, kwargs)
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        return False, b"", "InvalidCall", f"{type(obj).__name__}.{method}: {e}"
    except ValueError:
        pass  # builtins without a signature: let the call say it
    key = _native.current_call()
    with _calls_lock:
        _running[key] = None
    later = False
    if policy is not None:
        fn = _retrying(fn, policy)
    task = _context.enter_task(*names, key)  # a coroutine started below copies it
    try:
        args, kwargs = resolve_args(args, kwargs)
        ser.read_only(args), ser.read_only(kwargs)  # as Ray's: not to be written into
        result = fn(*args, **kwargs)
        if inspect.iscoroutine(result) and done is not None and stream_id is None:
            def finish(future):
                try:
                    error = future.exception()
                except BaseException as e:  # noqa: BLE001 - cancelled
                    error = e
                reply = _outcome(obj, method, key, encoding, None if error else future.result(),
                                 error)
                if reply is not None:
                    done(reply)
            _start_coroutine(result, key).add_done_callback(finish)
            later = True
            return None
        if inspect.iscoroutine(result):
            result = _run_coroutine(result, key)
        result = generated(result, stream_id, lambda c: _run_coroutine(c, key))
    except (_ExitActor, SystemExit, Exception, asyncio.CancelledError) as e:  # noqa: BLE001
        return _outcome(obj, method, key, encoding, None, e, wait_on_exit=True)
    finally:
        _context.leave_task(task)
        if not later:
            _forget(key)
    return _outcome(obj, method, key, encoding, result, None)


def _forget(key):
    with _calls_lock:
        _running.pop(key, None)
        _cancelled.pop(key, None)


def _outcome(obj, method, key, encoding, result, error, wait_on_exit=False):
    """call's tuple for a method's `result` or the `error` it raised; None for an actor that
    ends (exit_actor() or sys.exit(): its caller gets ActorDiedError, as in Ray; no reply is
    sent). A plain call's thread waits there for the end (`wait_on_exit`)."""
    _forget(key)
    if isinstance(error, SystemExit) and error.code not in (None, 0):
        _crash(error.code)
    if isinstance(error, (_ExitActor, SystemExit)):
        if not wait_on_exit:
            _end_this_actor()
            return None
        # The worker host writes the answers of the calls before this one, then ends the
        # actor (end_actor) and holds this call until the process ends (WaitForExit).
        return (False, b"", "ActorExiting",
                f"{type(obj).__name__}.{method} ended its actor (exit_actor() or sys.exit())")
    if error is not None:
        tb = "".join(traceback.format_exception(type(error), error,
                                                error.__traceback__)).rstrip()
        return (False, _cause_type(error), "TaskError",
                f"{type(error).__name__}: {error}\n\n{type(obj).__name__}.{method} raised:\n{tb}")
    try:
        return True, ser.dumps_value(result, encoding), "", ""
    except Exception as e:  # noqa: BLE001
        return False, _cause_type(e), "TaskError", f"{type(obj).__name__}.{method}: the result " \
                                                   f"cannot be sent back ({type(e).__name__}: {e})"


def end_actor():
    """The worker host ends this actor, once the answers before its exit are written."""
    _end_this_actor()


def interrupt(obj):
    """Raises KeyboardInterrupt in the task a task worker runs now (phalanx.cancel without
    force, as Ray's); whether there was one. Other actors' calls are not interrupted."""
    return isinstance(obj, _TaskWorker) and obj._phalanx_interrupt()


# The actor calls running now ("<caller>/<seq>" -> the future of an async one, else None),
# and those cancelled (phalanx.cancel of an actor call; kept a while for one that was about
# to start when its cancel came).
_calls_lock = threading.Lock()
_running = {}
_cancelled = collections.OrderedDict()
_CANCELLED_KEEP = 1024


def cancel(key):
    """Cancels the running actor call `key`, as Ray does: an async method's asyncio task is
    cancelled (CancelledError at its await); a plain one runs on, and sees is_canceled()."""
    with _calls_lock:
        _cancelled[key] = True
        while len(_cancelled) > _CANCELLED_KEEP:
            _cancelled.popitem(last=False)
        future = _running.get(key)
    if isinstance(future, asyncio.Future):  # a queued call's task, on the loop's thread
        future.get_loop().call_soon_threadsafe(future.cancel)
    elif future is not None:
        future.cancel()


def is_canceled():
    """Whether the actor call this thread runs was cancelled (RuntimeContext.is_canceled)."""
    if threading.current_thread().name == "phalanx-asyncio":
        raise RuntimeError("is_canceled() is for a plain actor method or a task; an async "
                           "method that is cancelled gets asyncio.CancelledError at its await")
    key = _native.current_call()
    if not key:
        raise RuntimeError("is_canceled() is for a method of an actor or a task; the driver "
                           "runs none")
    with _calls_lock:
        return key in _cancelled


# RuntimeContext.is_canceled asks this process's worker side (phalanx._context imports none of
# the package's upper modules).
_context.set_cancel_probe(is_canceled)

_loop = None
_loop_lock = threading.Lock()


def _event_loop():
    """The actor's one event loop, on a thread of its own started with the first call that
    needs it, as Ray's async actors have: calls interleave at their awaits, and what one
    creates (asyncio.Lock, Queue, tasks) the next can use."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="phalanx-asyncio",
                             daemon=True).start()
        return _loop


def _start_coroutine(coroutine, key=None):
    """Starts an async method's coroutine on the actor's event loop. Its concurrent future,
    registered under `key` so that cancel() reaches it."""
    future = asyncio.run_coroutine_threadsafe(coroutine, _event_loop())
    if key is not None:
        with _calls_lock:
            _running[key] = future
            cancelled = key in _cancelled
        if cancelled:
            future.cancel()
    return future


def loop_method(obj, method):
    """Whether calls of `method` may go straight to the event loop (attach_call_queue): a
    coroutine function of the actor."""
    fn = getattr(obj, method, None) if not method.startswith("_") else None
    return fn is not None and inspect.iscoroutinefunction(fn)


def attach_call_queue(obj, fd, take):
    """Has the event loop start the calls of loop_method methods itself: the worker host
    queues them without the GIL and makes `fd` (an eventfd) readable once per batch; the loop
    then `take`s the batch, [(method, payload, key, reply)], and starts each as a task. So
    no thread hands each call over to the loop (a context switch and a GIL hand-over per
    call)."""
    loop = _event_loop()

    def drain():
        try:
            os.read(fd, 8)
        except BlockingIOError:
            pass
        for method, payload, key, reply in take():
            _start_queued(obj, method, payload, key, reply)
    loop.call_soon_threadsafe(loop.add_reader, fd, drain)


def _start_queued(obj, method, payload, key, reply):
    with _calls_lock:
        _running[key] = None
    task = _loop.create_task(_run_queued(obj, method, payload, key, reply))
    with _calls_lock:
        if key in _running:
            _running[key] = task
        cancelled = key in _cancelled
    if cancelled:
        task.cancel()


async def _run_queued(obj, method, payload, key, reply):
    """(On the loop.) `call` of a queued async method: `reply` gets its tuple (none for an
    actor that ends). Arguments that are refs are read off the loop's thread."""
    fn = getattr(obj, method)
    try:
        args, kwargs, encoding = ser.loads_call(payload)
    except Exception as e:  # noqa: BLE001
        _forget(key)
        return reply((False, b"", "InvalidCall", f"cannot decode the arguments of {method}: {e}"))
    if isinstance(kwargs, dict) and STREAM_KWARG in kwargs:  # a stream: call() runs it
        _forget(key)
        return threading.Thread(target=lambda: reply(call(obj, method, payload)),
                                daemon=True).start()
    _context.enter_task(*_task_names(obj, method, kwargs), key)  # this task's own context
    policy = _retry_policy(fn, kwargs)
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        _forget(key)
        return reply((False, b"", "InvalidCall", f"{type(obj).__name__}.{method}: {e}"))
    except ValueError:
        pass
    if policy is not None:
        fn = _retrying(fn, policy)
    result, error = None, None
    try:
        if has_ref_args(args, kwargs):
            args, kwargs = await _loop.run_in_executor(None, resolve_args, args, kwargs)
        ser.read_only(args), ser.read_only(kwargs)
        result = fn(*args, **kwargs)
        if inspect.iscoroutine(result):
            result = await result
    except (_ExitActor, SystemExit, Exception, asyncio.CancelledError) as e:  # noqa: BLE001
        error = e
    outcome = _outcome(obj, method, key, encoding, result, error)
    if outcome is not None:
        reply(outcome)


def _crash(code):
    """sys.exit(code) with a failing code in a method: the worker process ends with it, as a
    crash (the actor restarts as its max_restarts allows, and the calls in flight are
    retried as max_task_retries allows), as in Ray. exit_actor() and sys.exit(0) end the
    actor for good instead."""
    print(f"[phalanx worker] a method called sys.exit({code!r}): the worker exits",
          file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(code if isinstance(code, int) and 0 < code < 256 else 1)


def _run_coroutine(coroutine, key=None):
    """_start_coroutine, and its result: this call's thread waits for it, without the GIL
    (a generator's coroutines)."""
    return _start_coroutine(coroutine, key).result()


def _cause_type(e):
    """A TaskError's detail, which travels beside its message: the exception's class name
    and the pickled exception (phalanx.exceptions._remote_detail)."""
    from .exceptions import _remote_detail
    return _remote_detail(e)


def _preimport():
    """Imports the modules in $PHALANX_WORKER_IMPORTS (comma-separated) before the worker
    takes its actor: a prestarted worker of a torch job pays for ``import torch`` while it
    waits, not when it replaces a rank. A module that fails to import is reported and skipped
    (the actor's own import then raises as it would have)."""
    import importlib
    import time
    for name in filter(None, os.environ.get("PHALANX_WORKER_IMPORTS", "").split(",")):
        t0 = time.perf_counter()
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - any import error, e.g. a broken package
            print(f"[phalanx worker] preimport {name} failed: {type(e).__name__}: {e}",
                  file=sys.stderr, flush=True)
            continue
        print(f"[phalanx worker] preimported {name} in {time.perf_counter() - t0:.2f} s",
              file=sys.stderr, flush=True)


def main():
    from phalanx import _native
    _preimport()
    code = _native.run_worker()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
