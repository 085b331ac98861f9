"""Ray's ``ray.util.multiprocessing.Pool``: the standard library's ``multiprocessing.Pool``
API, its processes being actors of the cluster.

    from phalanx.util.multiprocessing import Pool

    with Pool() as pool:                       # one actor per CPU of the cluster
        print(pool.map(f, range(1000)))        # sent in chunks, each actor kept busy

What each call costs: ``map``/``starmap`` cut the items into chunks (``chunksize``, by
default about four per actor) and send each chunk as one actor call, to the actor with the
fewest calls in flight; ``imap``/``imap_unordered`` keep ``IMAP_CHUNKS_PER_PROCESS`` chunks
per actor sent ahead of the caller; ``apply_async`` is one call. The function is
pickled once per operation, and each actor unpickles it once (it keeps the last few).

An exception in the function comes back with its item and is raised where the result is
read (``get``, the iterator's ``next``), with the remote traceback as its ``__cause__``, as
the standard library's pool does. A Pool may be used from several threads at once.
"""

import collections
import itertools
import logging
import os
import pickle
import threading
import time
import traceback
import weakref
from multiprocessing import TimeoutError
from multiprocessing.pool import RemoteTraceback

import cloudpickle

from ... import _serialization as ser
from ..._api import _machine_cluster_answers, cluster_resources, get, init, is_initialized
from ..._api import kill, put, wait
from ..._task import remote
from ...exceptions import GetTimeoutError

__all__ = ["Pool", "AsyncResult", "IMapIterator", "TimeoutError"]

logger = logging.getLogger(__name__)

# Chunks of an imap sent ahead of the caller per actor (in flight, or finished and not yet
# taken): enough that an actor seldom waits for the driver between small chunks, few
# enough that an endless or huge input is read only as the results are taken.
IMAP_CHUNKS_PER_PROCESS = 8
# How many functions each actor keeps unpickled.
FUNCTIONS_KEPT = 16
# A pickled function at least this big (a closure over data) goes to the object store once
# per operation, and the chunks carry its ref, not its bytes.
FUNCTION_BY_REF_BYTES = 64 << 10

# How a chunk's items are passed to the function.
_ONE_ARG, _STAR_ARGS, _ARGS_KWARGS = 0, 1, 2


class _PoolActor:
    """One process of a Pool: runs the initializer once, then chunks of calls, one at a
    time (a plain actor: its calls run in the order they were sent)."""

    def __init__(self, initializer, initargs):
        self._functions = collections.OrderedDict()  # pickled function -> function
        if initializer is not None:
            initializer(*(initargs or ()))

    def ping(self):
        return os.getpid()

    def run_batch(self, function_blob, mode, batch):
        """(values, failures): the function's result for each item (None for one that
        raised), and None or [(index, exception, traceback text)] of those that raised."""
        fn = self._function(function_blob)
        values, failures = [], None
        for index, item in enumerate(batch):
            try:
                if mode == _ONE_ARG:
                    values.append(fn(item))
                elif mode == _STAR_ARGS:
                    values.append(fn(*item))
                else:
                    values.append(fn(*item[0], **item[1]))
            except Exception as e:  # noqa: BLE001 - handed back with its item
                values.append(None)
                failures = failures or []
                failures.append((index, _sendable(e), traceback.format_exc()))
        return values, failures

    def retire(self):
        """Ends this actor; sent after its last chunk, so it runs after all of them."""
        from ...actor import exit_actor
        exit_actor()

    def _function(self, blob):
        fn = self._functions.get(blob)
        if fn is None:
            fn = pickle.loads(blob)[0]
            self._functions[blob] = fn
            if len(self._functions) > FUNCTIONS_KEPT:
                self._functions.popitem(last=False)
        else:
            self._functions.move_to_end(blob)
        return fn


def _sendable(error):
    """The exception itself where it pickles, else a RuntimeError that names it."""
    try:
        cloudpickle.dumps(error)
        return error
    except Exception:  # noqa: BLE001 - any pickling failure
        return RuntimeError(f"{type(error).__name__}: {error} (the exception itself cannot "
                            f"be pickled)")


def _raised(error, remote_traceback):
    """The function's exception as the caller sees it: the remote traceback its cause."""
    if remote_traceback and error.__cause__ is None:
        error.__cause__ = RemoteTraceback(remote_traceback)
    return error


class _Slot:
    """One of the pool's processes: its actor, the chunks sent to it that may still be
    running (in the order sent, which is the order they finish), and how many it was sent."""

    __slots__ = ("actor", "in_flight", "sent")

    def __init__(self, actor):
        self.actor = actor
        self.in_flight = collections.deque()
        self.sent = 0

    def load(self):
        while self.in_flight and self.in_flight[0].done():
            self.in_flight.popleft()
        return len(self.in_flight)


class _Retirement(threading.Thread):
    """Ends an actor of the pool once the chunks it was sent are done. Not sooner: an actor
    that exits right after its last calls may take their replies with it, so the exit is
    asked for once the results are here."""

    def __init__(self, actor, in_flight):
        super().__init__(name="phalanx-pool-retire", daemon=True)
        self.actor = actor
        self._in_flight = [ref for ref in in_flight if not ref.done()]
        self.start()

    def run(self):
        try:
            if self._in_flight:
                wait(self._in_flight, num_returns=len(self._in_flight))
            self._in_flight = None
            exited = self.actor.retire.remote()
            wait([exited], num_returns=1)
        except Exception:  # noqa: BLE001 - the actor is gone already (terminate)
            pass


class Pool:
    """A pool of actors with ``multiprocessing.Pool``'s API (Ray's
    ``ray.util.multiprocessing.Pool``).

    ``processes``: how many actors; by default the cluster's CPUs. More than the cluster
    has is refused, as in Ray. The actors take no CPU of their own unless
    ``ray_remote_args`` says so (e.g. ``{"num_cpus": 1}``, ``{"num_gpus": 1}``).
    ``initializer(*initargs)`` runs once in each actor as it starts (and in the actors that
    replace those that ran ``maxtasksperchild`` chunks). ``context`` is ignored, as in Ray.
    ``ray_address``: the cluster to connect to when this process has not called
    ``phalanx.init()`` yet; without it, the Pool connects as ``init()`` does, or starts a
    local cluster of ``processes`` CPUs.
    """

    def __init__(self, processes=None, initializer=None, initargs=None, maxtasksperchild=None,
                 context=None, ray_address=None, ray_remote_args=None):
        if processes is not None and (not isinstance(processes, int) or processes < 1):
            raise ValueError(f"processes={processes!r}: give a whole number >= 1, or None for "
                             f"one per CPU of the cluster")
        if maxtasksperchild is not None and (not isinstance(maxtasksperchild, int) or
                                             maxtasksperchild < 1):
            raise ValueError(f"maxtasksperchild={maxtasksperchild!r}: give a whole number "
                             f">= 1, or None to keep each actor for the pool's life")
        if initializer is not None and not callable(initializer):
            raise TypeError(f"initializer={initializer!r} is not callable")
        if context is not None:
            logger.warning("Pool(context=...) is ignored: the pool's processes are actors "
                           "of the cluster")
        self._processes = _connect(processes, ray_address)
        self._actor_class = remote(_PoolActor).options(
            **dict({"num_cpus": 0}, **(ray_remote_args or {})))
        self._initializer = initializer
        self._initargs = tuple(initargs or ())
        self._maxtasksperchild = maxtasksperchild
        self._lock = threading.Lock()
        self._state = "RUN"                 # RUN -> CLOSE (close) or TERMINATE (terminate)
        self._retiring = []                 # _Retirement of actors asked to exit
        self._iterators = weakref.WeakSet()  # imap iterators that may still send chunks
        self._slots = []
        self._turn = itertools.count()      # where the search for the least busy starts
        try:
            self._slots = [_Slot(self._new_actor()) for _ in range(self._processes)]
            get([slot.actor.ping.remote() for slot in self._slots])
        except BaseException:
            self._kill_all()  # an initializer that raised: none of the actors is left
            raise

    def __repr__(self):
        return f"<{type(self).__module__}.Pool state={self._state} " \
               f"processes={self._processes}>"

    # ---- the calls --------------------------------------------------------------------

    def apply(self, func, args=(), kwds=None, *, kwargs=None):
        """``func(*args, **kwds)`` on one of the actors; its result (or its exception)."""
        return self.apply_async(func, args, kwds, kwargs=kwargs).get()

    def apply_async(self, func, args=(), kwds=None, callback=None, error_callback=None, *,
                    kwargs=None):
        """``apply`` without waiting: an AsyncResult. ``callback(result)`` or
        ``error_callback(exception)`` runs on a thread of the pool's when it is known.
        (``kwargs=`` is Ray's name for ``kwds``.)"""
        self._check_running()
        call_kwargs = kwds if kwds is not None else kwargs
        refs = self._submit(_pickled(func), _ARGS_KWARGS,
                            [[(tuple(args or ()), dict(call_kwargs or {}))]])
        return AsyncResult(refs, True, callback, error_callback)

    def map(self, func, iterable, chunksize=None):
        """``[func(x) for x in iterable]``, computed by the actors in chunks."""
        return self._map_async(func, iterable, chunksize, _ONE_ARG, None, None).get()

    def map_async(self, func, iterable, chunksize=None, callback=None, error_callback=None):
        """``map`` without waiting: an AsyncResult of the list. ``callback(list)`` runs
        when all are done without an error, else ``error_callback(first exception)``."""
        return self._map_async(func, iterable, chunksize, _ONE_ARG, callback, error_callback)

    def starmap(self, func, iterable, chunksize=None):
        """``[func(*args) for args in iterable]``, computed by the actors in chunks."""
        return self._map_async(func, iterable, chunksize, _STAR_ARGS, None, None).get()

    def starmap_async(self, func, iterable, chunksize=None, callback=None,
                      error_callback=None):
        """``starmap`` without waiting: an AsyncResult, as ``map_async``."""
        if callable(chunksize) and error_callback is None:
            # Ray's starmap_async takes (func, iterable, callback, error_callback).
            chunksize, callback, error_callback = None, chunksize, callback
        return self._map_async(func, iterable, chunksize, _STAR_ARGS, callback,
                               error_callback)

    def imap(self, func, iterable, chunksize=1):
        """An iterator of ``func(x)`` for each x, in order, read from ``iterable`` as the
        results are taken (so it may be endless); an item's exception raises at its turn."""
        return self._imap(func, iterable, chunksize, ordered=True)

    def imap_unordered(self, func, iterable, chunksize=1):
        """``imap``, the results in the order they finish."""
        return self._imap(func, iterable, chunksize, ordered=False)

    # ---- the pool's life --------------------------------------------------------------

    def close(self):
        """Takes no more work; the actors exit once what was given to them is done. An
        imap's items not yet sent are sent now (so an endless imap that is still held
        would never end: drop it first)."""
        with self._lock:
            if self._state != "RUN":
                return
            self._state = "CLOSE"
            iterators, self._iterators = list(self._iterators), weakref.WeakSet()
        for it in iterators:
            it._submit_rest()
        with self._lock:
            for slot in self._slots:
                self._retire(slot)

    def terminate(self):
        """Takes no more work and kills the actors now; results not yet computed raise
        ActorDiedError."""
        with self._lock:
            self._state = "TERMINATE"
            self._iterators = weakref.WeakSet()
        self._kill_all()

    def join(self):
        """Waits for the actors of a closed (or terminated) pool to exit."""
        if self._state == "RUN":
            raise ValueError("Pool is still running: close() or terminate() it before "
                             "join()")
        for retirement in list(self._retiring):
            retirement.join()
        self._retiring = []

    def __enter__(self):
        self._check_running()
        return self

    def __exit__(self, exc_type, exc_value, tb):
        self.terminate()  # as multiprocessing.Pool's

    # ---- inside -----------------------------------------------------------------------

    def _check_running(self):
        if self._state != "RUN":
            raise ValueError(f"Pool not running (it was {self._state.lower()}d): make a "
                             f"new Pool")

    def _new_actor(self):
        return self._actor_class.remote(self._initializer, self._initargs)

    def _submit(self, blob, mode, chunks, accepted=False):
        """Sends each chunk to the actor with the fewest chunks in flight: their refs. All
        or none: a close() comes before or after them. `accepted`: the rest of an imap
        that was taken before a close()."""
        with self._lock:
            if not accepted:
                self._check_running()
            refs = []
            for chunk in chunks:
                start = next(self._turn) % len(self._slots)
                slot = min(self._slots[start:] + self._slots[:start], key=_Slot.load)
                ref = slot.actor.run_batch.remote(blob, mode, chunk)
                refs.append(ref)
                slot.in_flight.append(ref)
                slot.sent += 1
                if self._maxtasksperchild is not None and \
                        slot.sent >= self._maxtasksperchild:
                    self._retire(slot)
                    slot.actor, slot.in_flight, slot.sent = \
                        self._new_actor(), collections.deque(), 0
            return refs

    def _retire(self, slot):
        """(Under the lock.) Has the slot's actor exit once the chunks it was sent are
        done."""
        self._retiring = [r for r in self._retiring if r.is_alive()]
        self._retiring.append(_Retirement(slot.actor, list(slot.in_flight)))

    def _kill_all(self):
        actors = [slot.actor for slot in self._slots] + [r.actor for r in self._retiring]
        for actor in actors:
            try:
                kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass

    def _map_async(self, func, iterable, chunksize, mode, callback, error_callback):
        self._check_running()
        items = iterable if isinstance(iterable, (list, tuple)) else list(iterable)
        if chunksize is None:
            chunksize = max(1, -(-len(items) // (4 * self._processes)))
        _check_chunksize(chunksize)
        refs = self._submit(_pickled(func), mode, [items[i:i + chunksize]
                                                   for i in range(0, len(items), chunksize)])
        return AsyncResult(refs, False, callback, error_callback)

    def _imap(self, func, iterable, chunksize, ordered):
        self._check_running()
        _check_chunksize(chunksize)
        it = IMapIterator(self, _pickled(func), iterable, chunksize, ordered)
        with self._lock:
            self._check_running()  # then a close() finds it among those to finish
            self._iterators.add(it)
        it._top_up()
        return it


def _connect(processes, address):
    """Connects this process as Ray's Pool does (when it has not yet): to `address`; else as
    init() does (the job's cluster, or this machine's); else a local cluster of `processes`
    CPUs. The pool's size: `processes`, or the cluster's CPUs."""
    if not is_initialized():
        if address is None and processes is not None and \
                not os.environ.get("PHALANX_ADDRESS") and not _machine_cluster_answers():
            init(num_cpus=processes)
        else:
            init(address=address)
    cpus = int(cluster_resources().get("CPU", 0))
    if processes is None:
        if cpus < 1:
            raise ValueError("the cluster has no CPU to size the pool by: give Pool(processes=N)")
        return cpus
    if processes > cpus:
        raise ValueError(f"Pool(processes={processes}) asks for more processes than the "
                         f"cluster's {cpus} CPUs (as Ray refuses): give processes <= {cpus}, "
                         f"or a cluster with more CPUs")
    return processes


def _check_chunksize(chunksize):
    if not isinstance(chunksize, int) or isinstance(chunksize, bool) or chunksize < 1:
        raise ValueError(f"chunksize={chunksize!r}: give a whole number >= 1")


def _pickled(func):
    if not callable(func):
        raise TypeError(f"{func!r} is not callable")
    name = getattr(func, "__qualname__", None) or type(func).__name__
    blob = ser.dumps_function(func, what=f"the pool's function {name}")
    return put(blob) if len(blob) >= FUNCTION_BY_REF_BYTES else blob


def _fetch(refs, deadline):
    """The values of chunk calls (a list of refs, or one), waiting until `deadline` (None:
    as long as it takes); multiprocessing.TimeoutError after it. A call that failed (its
    actor died) gives its exception in its place."""
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        return get(refs, timeout=left)
    except GetTimeoutError:
        raise TimeoutError("the result was not ready within the timeout") from None
    except Exception as e:  # noqa: BLE001 - one call failed: the others are read alone
        if not isinstance(refs, list):
            return e
    return [_fetch(ref, deadline) for ref in refs]


def _items(chunk, count=None):
    """[(ok, value or exception)] of a chunk's items; a chunk call's own failure stands for
    each of its `count` items (one where unknown)."""
    if isinstance(chunk, BaseException):
        return [(False, chunk)] * (count or 1)
    values, failures = chunk
    out = [(True, v) for v in values]
    for index, error, remote_tb in failures or ():
        out[index] = (False, _raised(error, remote_tb))
    return out


class AsyncResult:
    """The result of ``apply_async``, ``map_async`` or ``starmap_async``: ``get``, ``wait``,
    ``ready``, ``successful``, as ``multiprocessing.pool.AsyncResult``. Thread-safe."""

    def __init__(self, refs, single, callback=None, error_callback=None):
        self._refs = refs
        self._single = single
        self._lock = threading.Lock()
        self._outcome = None  # (values, first exception or None), once read
        self._notifier = None
        if callback is not None or error_callback is not None:
            # The callbacks run before get() returns, as the standard library's do.
            self._notifier = threading.Thread(target=self._notify,
                                              args=(callback, error_callback),
                                              name="phalanx-pool-callback", daemon=True)
            self._notifier.start()

    def ready(self):
        """Whether the result is known (and the callbacks, if any, have run)."""
        if self._notifier is not None:
            return not self._notifier.is_alive()
        return self._outcome is not None or all(ref.done() for ref in self._refs)

    def wait(self, timeout=None):
        """Waits until ready, at most `timeout` seconds (None: as long as it takes)."""
        try:
            self._read(timeout)
        except TimeoutError:
            pass

    def get(self, timeout=None):
        """The result (a list, but for apply_async), or the first exception raised;
        multiprocessing.TimeoutError if it is not known within `timeout` seconds."""
        values, error = self._read(timeout)
        if error is not None:
            raise error
        return values[0] if self._single else values

    def successful(self):
        """Whether the call(s) raised nothing; ValueError while not ready."""
        if not self.ready():
            raise ValueError(f"{self!r} not ready")
        return self._read()[1] is None

    def _read(self, timeout=None):
        """(values, first exception or None), read once (a get of all the chunks at once,
        not a wait then a get: a wait costs a wake-up per chunk)."""
        if self._notifier is not None and threading.current_thread() is not self._notifier:
            self._notifier.join(timeout)
            if self._notifier.is_alive():
                raise TimeoutError(f"the result was not ready within {timeout} s")
            return self._outcome
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError(f"the result was not ready within {timeout} s")
        try:
            if self._outcome is None:
                values, error = [], None
                for chunk in _fetch(list(self._refs), deadline):
                    for ok, value in _items(chunk):
                        if ok:
                            values.append(value)
                        elif error is None:
                            error = value
                self._outcome = (values, error)
                self._refs = ()  # the values are read: the calls' results may go
            return self._outcome
        finally:
            self._lock.release()

    def _notify(self, callback, error_callback):
        values, error = self._read()
        try:
            if error is not None:
                if error_callback is not None:
                    error_callback(error)
            elif callback is not None:
                callback(values[0] if self._single else values)
        except Exception:  # noqa: BLE001 - a callback's own error must not kill the pool
            logger.exception("a Pool callback raised")


class IMapIterator:
    """What ``imap`` and ``imap_unordered`` return: an iterator whose ``next(timeout)``
    raises multiprocessing.TimeoutError when no result comes within `timeout` seconds.

    Chunks are sent as results are taken, on the caller's thread, up to
    IMAP_CHUNKS_PER_PROCESS per actor ahead of the caller. Thread-safe."""

    def __init__(self, pool, blob, iterable, chunksize, ordered):
        self._pool = pool
        self._blob = blob
        self._mode = _ONE_ARG
        self._source = iter(iterable)
        self._source_done = False
        self._chunksize = chunksize
        self._ordered = ordered
        self._pending = collections.deque()  # (ref, item count), in the order sent
        self._results = collections.deque()  # (ok, value) ready to hand out
        self._lock = threading.RLock()

    def __iter__(self):
        return self

    def next(self, timeout=None):
        """The next result (or the next item's exception, raised)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while not self._results:
                self._top_up()
                if not self._pending:
                    raise StopIteration
                if self._ordered:
                    # A get of the first chunk, not a wait: the others, sent after it,
                    # seldom finish first.
                    ref, count = self._pending[0]
                    chunk = _fetch(ref, deadline)
                    self._pending.popleft()
                else:
                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    ready, _ = wait([ref for ref, _ in self._pending], num_returns=1,
                                    timeout=left)
                    if not ready:
                        raise TimeoutError(f"no result within {timeout} s")
                    entry = next(e for e in self._pending if e[0] is ready[0])
                    self._pending.remove(entry)
                    ref, count = entry
                    chunk = _fetch(ref, None)
                self._results.extend(_items(chunk, count))
                self._top_up()
            ok, value = self._results.popleft()
        if not ok:
            raise value
        return value

    __next__ = next

    def _top_up(self):
        """Sends chunks until IMAP_CHUNKS_PER_PROCESS per actor are ahead of the caller."""
        ahead = IMAP_CHUNKS_PER_PROCESS * self._pool._processes
        with self._lock:
            while not self._source_done and len(self._pending) < ahead:
                if not self._send_one():
                    return

    def _send_one(self):
        chunk = list(itertools.islice(self._source, self._chunksize))
        if not chunk:
            self._source_done = True
            return False
        if self._pool._state == "TERMINATE":
            self._source_done = True
            return False
        ref, = self._pool._submit(self._blob, self._mode, [chunk], accepted=True)
        self._pending.append((ref, len(chunk)))
        return True

    def _submit_rest(self):
        """The pool is closing: every item left is sent now, as the standard library's
        pool has them all already."""
        with self._lock:
            while not self._source_done:
                self._send_one()

