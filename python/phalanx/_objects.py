"""The object store: values by reference, as Ray's ``put``/``get`` and refs passed anywhere.

Where a value lives:
- A small one (under ``INLINE_MAX`` bytes) travels inside its ref, as Ray inlines small objects.
- A larger one is a file of the node's store, ``/dev/shm/phalanx-objects-<node id>/<owner>/<id>``
  (node/object_store.h), written once by its owner. A reader on the same machine maps
  it: numpy arrays and torch CPU tensors come back as views of that memory (copy-on-write, so
  a reader's writes stay its own), without a copy. A reader on another node has the holding
  node's manager stream it into a file of its own machine (ReadObject), once per get.

Ownership, as in Ray: the process that put a value (or whose call a published result belongs
to) owns it, and frees it when nothing holds a ref to it any more:
- the owner's own refs, counted here;
- calls in flight: a ref passed to a call, as an argument or anywhere inside one, is pinned by
  the caller until the call has finished (whether or not its result is kept);
- values that contain it: a ref inside a value given to ``put`` lives while that value does;
- borrowers: another process that holds a ref it received (inside an argument, or in a value
  it read) registers itself in the GCS's key-value store (``BORROW_NS``) while it holds one,
  and the owner frees the value once the last borrower dropped it, or died (a borrower on this
  machine, or on a node the GCS no longer lists alive).
A ref that leaves a process any other way (inside a call's result, or pickled by the user) is
kept by that process until it exits, as the receiver cannot be known. An owner's values die
with it: the node manager removes the directory of an owner that died, and readers get
``OwnerDiedError`` naming it.
The file of a large value the owner frees is kept for its next puts of about that size
(_object_pool.py): they copy into pages already in memory. Readers hold a shared lock on
each file they map, so the owner never writes into one a reader's array still views.

The file: ``MAGIC``, then kind, buffer count and metadata length, then (offset, length) of each
buffer, the metadata and the buffers (each at a multiple of ``_ALIGN``). Kinds: a pickle with
its out-of-band buffers (protocol 5); a call's raw result (metadata: its encoding); an error
(metadata: the pickled exception, raised by every reader).
"""

import collections
import contextlib
import io
import itertools
import mmap
import os
import pickle
import socket
import struct
import sys
import threading
import time
import uuid

import cloudpickle

from phalanx import _native

from . import _serialization as ser
from ._context import RuntimeContext
from ._object_pool import POOL_MAX_FRACTION, Pool, hold_for_reading
from ._object_pool import unlink_quietly as _unlink

# Values smaller than this, pickled, travel inside their ref (Ray: 100 KiB).
INLINE_MAX = 100 * 1024
# How often a reader looks again for a value that is not written yet (at most).
POLL_MAX_S = 0.05
# The directory, in a node's store, of its copies of other nodes' values
# (node/object_store.h's kObjectCacheDir).
CACHE_DIR = ".cache"
# A reader waiting for another process of its node to fetch a value into the node's cache
# reads a copy of its own once that copy has not been written for this long (its fetcher
# may be stopped).
CACHE_STALL_S = 5.0

MAGIC = b"PHXOBJ1\0"
KIND_PICKLE, KIND_RAW, KIND_ERROR = 0, 1, 2
_HEADER = struct.Struct("<8sIIQ")
_BUFFER = struct.Struct("<QQ")
_ALIGN = 64
_WRITE_CHUNK = 64 << 20  # bytes per pwrite
# The GCS key-value namespace of borrowers: "<owner key>/<object id>/<borrower key>".
BORROW_NS = "phalanx-borrows"
# How often a process looks again at what its borrowers and calls in flight still hold.
SWEEP_S = 0.2
# How often an owner asks another node whether its borrowers there still run (and how long
# it waits for the answer).
REMOTE_BORROWER_CHECK_S = 2.0
# The GCS key-value namespace of a streaming generator's values: "<stream id>/<index>" holds
# the pickled ref of the index-th value until its reader takes it.
STREAM_NS = "phalanx-streams"
# The keyword argument that names a streaming call's stream to the worker (taken out before
# the function sees its arguments).
STREAM_KWARG = "__phalanx_stream__"

# What travels for a ref: its id; the node whose store holds it ("" when inline) and that
# node's hostname; the owner's directory ("<pid>-<start time>") and a description of it for
# errors; the inline bytes; whether it is a call's result that may not be written yet; and
# whether it went to the node's spill directory on disk (the store was full).
Obj = collections.namedtuple("Obj", "id node host owner label inline pending spilled")


def _store_root(node_id):
    return f"/dev/shm/phalanx-objects-{node_id}"


def _store_file(root, name):
    try:
        with open(os.path.join(root, name)) as f:
            return f.read().strip()
    except OSError:
        return ""


def _spill_root(node_id):
    """The spill directory of a node of this machine (its store's .spill file names it)."""
    return _store_file(_store_root(node_id), ".spill")


def _paths_of(obj):
    """Where a value of a node of this machine may be: its store, then its spill directory
    (the other way round for one put there; a call's result goes where it fits when it
    arrives, after its ref was made)."""
    roots = [_store_root(obj.node), _spill_root(obj.node)]
    if obj.spilled:
        roots.reverse()
    return [os.path.join(r, obj.owner, obj.id) for r in roots if r]


def _map_first(paths):
    """The mapping of the first of `paths` that exists (FileNotFoundError if none)."""
    for path in paths:
        try:
            return _map_file(path)
        except FileNotFoundError:
            continue
    raise FileNotFoundError(paths[0] if paths else "")


def _start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return ""
    fields = stat[stat.rfind(")") + 1:].split()
    return fields[19] if len(fields) > 19 else ""


def owner_alive(owner):
    """Whether the process an owner directory names runs (on this machine)."""
    pid, _, started = owner.partition("-")
    return pid.isdigit() and started != "" and _start_time(int(pid)) == started


class _Here:
    """This process as an owner and borrower: where its values go, and who holds refs to
    them."""

    def __init__(self):
        # Re-entrant: ObjectRef.__del__ takes it, and a collection may run it anywhere.
        self.lock = threading.RLock()
        self.pid = None
        self.node = None      # this machine's node id ("" when none runs here)
        self.dir = None       # this process's directory of the store
        self.spill_dir = None  # and of the node's spill directory on disk
        self.capacity = None  # the store's, in bytes (None: no limit known)
        self.owner = None
        self.host = None
        self.label = None
        self._reset()

    def _reset(self):
        self.counts = {}      # object id -> refs held here (of values owned here)
        self.escaped = set()  # ids that left inside a result or a user's pickle: kept to exit
        self.shared = set()   # owned ids sent inside an argument or a value: may be borrowed
        self.lent = set()     # owned ids held here no more, freed when no borrower is left
        self.contained = {}   # owned id -> the ObjectRefs inside its value (kept while it is)
        self.borrows = {}     # id of another owner's value -> refs held here
        self.registered = {}  # borrowed id -> its key in BORROW_NS
        self.dropped = set()  # borrowed ids held no more, to be unregistered
        self.in_flight = []   # (call, pins): a dropped result's call, and the refs it carries
        self.streamed = {}    # STREAM_NS key -> refs in a streamed value, until it is taken
        self.streams_dropped = {}  # stream whose reader went -> its call: keys deleted until done
        self.kv_lock = threading.Lock()  # orders a borrow's registration and its removal
        self.remote_checked = 0.0  # when borrowers on other nodes were last asked about
        self.wake = threading.Event()
        self.sweeper = None
        old, self.pool = getattr(self, "pool", None), Pool()  # freed values' files
        if old is not None:
            old.close()

    def key(self):
        """How borrowers name this process: "<node or host>:<pid>-<start time>"."""
        return f"{self.node or self.host}:{self.owner}"

    def ensure(self):
        """Sets the fields up (again in a forked child)."""
        if self.pid == os.getpid():
            return
        with self.lock:
            if self.pid == os.getpid():
                return
            ctx = RuntimeContext()
            node = ctx.get_node_id() or ""
            self.owner = f"{os.getpid()}-{_start_time(os.getpid())}"
            hosted = _native.hosted_actor()
            actor = ctx.get_actor_id()
            who = (f"actor {actor[:8]}" if actor else
                   f"the task worker {hosted[0][:8]}" if hosted else "the driver")
            self.host = socket.gethostname()
            self.label = f"{who} (pid {os.getpid()} on {self.host})"
            self.node = node
            self.dir = os.path.join(_store_root(node), self.owner) if node else None
            spill = _spill_root(node) if node else ""
            self.spill_dir = os.path.join(spill, self.owner) if spill else None
            capacity = _store_file(_store_root(node), ".capacity") if node else ""
            self.capacity = int(capacity) if capacity.isdigit() else None
            self._reset()
            self.pid = os.getpid()

    # -- values owned here

    def hold(self, object_id):
        with self.lock:
            self.counts[object_id] = self.counts.get(object_id, 0) + 1

    def release(self, object_id):
        with self.lock:
            if not _count_down(self.counts, object_id):
                return
            if object_id in self.escaped:
                return
            if object_id in self.shared:  # the sweeper asks the GCS who borrows it
                self.lent.add(object_id)
                self._start_sweeper()
                return
        self.free(object_id)

    def free(self, object_id):
        with self.lock:
            self.shared.discard(object_id)
            self.lent.discard(object_id)
            inside = self.contained.pop(object_id, None)
        self.release_files(object_id)
        del inside  # its refs are released (outside the lock)

    def release_files(self, object_id):
        """A freed value's file goes: into the pool, for this process's next puts, when it is
        large and in the store; else unlinked."""
        if self.dir:
            path = os.path.join(self.dir, object_id)
            limit = int(self.capacity * POOL_MAX_FRACTION) if self.capacity else 0
            if self.pool.keep(path, object_id, limit):
                with self.lock:
                    self._start_sweeper()  # it unlinks the kept files left unused
            else:
                _unlink(path)
        if self.spill_dir:
            _unlink(os.path.join(self.spill_dir, object_id))

    def wanted(self, object_id):
        with self.lock:
            return object_id in self.counts or object_id in self.escaped or \
                object_id in self.lent

    def contain(self, object_id, refs):
        with self.lock:
            self.contained[object_id] = refs

    def keep_streamed(self, key, refs):
        """Keeps the refs of a value sent on a stream until its reader has taken it."""
        with self.lock:
            self.streamed[key] = refs
            self._start_sweeper()

    def drop_stream(self, stream_id, call=None):
        """A stream's reader is gone: the values it did not take are deleted, and those its
        generator yields later too, until its `call` is done."""
        self.ensure()  # a driver that has not put or borrowed anything yet
        with self.lock:
            self.streams_dropped[stream_id] = call
            self._start_sweeper()

    def keep_until_done(self, call, pins):
        """Keeps a call's pinned refs until the call has finished (its result was dropped)."""
        self.ensure()  # a driver that has not put or borrowed anything yet
        with self.lock:
            self.in_flight.append((call, pins))
            self._start_sweeper()

    # -- values of other owners held here

    def borrow(self, obj):
        """Counts a ref to another process's value; the first registers this process as one
        of its borrowers, before the ref that brought it here (pinned by its sender) can
        drop."""
        borrow_key = f"{obj.node or obj.host}:{obj.owner}/{obj.id}/{self.key()}"
        with self.kv_lock:
            with self.lock:
                self.borrows[obj.id] = self.borrows.get(obj.id, 0) + 1
                self.dropped.discard(obj.id)
                if obj.id in self.registered:
                    return
                self.registered[obj.id] = borrow_key
            try:
                _native.kv_put(BORROW_NS, borrow_key, self.host.encode(), True)
            except Exception:  # noqa: BLE001 - no cluster (a ref unpickled outside one)
                with self.lock:
                    self.registered.pop(obj.id, None)

    def unborrow(self, object_id):
        with self.lock:
            if not _count_down(self.borrows, object_id):
                return
            if object_id in self.registered and object_id not in self.escaped:
                self.dropped.add(object_id)
                self._start_sweeper()

    # -- the sweeper: calls that finished, borrows dropped, lent values no longer borrowed

    def _start_sweeper(self):
        """(Under the lock.) Wakes the sweeper, started on first use."""
        if self.sweeper is None:
            self.sweeper = threading.Thread(target=self._sweep, name="phalanx-refs",
                                            daemon=True)
            self.sweeper.start()
        self.wake.set()

    def _sweep(self):
        pid = os.getpid()
        while self.pid == pid:
            self.wake.wait(SWEEP_S)
            self.wake.clear()
            try:
                busy = self.sweep_once()
            except Exception:  # noqa: BLE001 - the GCS may be away a while: try again
                busy = True
            if not busy:
                self.wake.wait()

    def sweep_once(self):
        """One pass; whether anything is left to watch."""
        with self.lock:
            in_flight = self.in_flight
            self.in_flight = []
        going = [(c, p) for c, p in in_flight if not c.done()]
        with self.lock:
            self.in_flight.extend(going)
        del in_flight  # the finished calls' pins are released here
        with self.kv_lock:
            with self.lock:
                gone = [(i, self.registered.pop(i)) for i in self.dropped
                        if i in self.registered and i not in self.borrows]
                self.dropped.clear()
            for _, key in gone:
                _native.kv_delete(BORROW_NS, key, False)
        with self.lock:
            dropped_streams, self.streams_dropped = self.streams_dropped, {}
            streams = {k.split("/", 1)[0] for k in self.streamed}
        for stream_id, call in dropped_streams.items():
            done = call is None or call.done()  # before the delete: none is written after
            _native.kv_delete(STREAM_NS, f"{stream_id}/", True)
            if not done:  # the generator still runs: its next values go too
                with self.lock:
                    self.streams_dropped.setdefault(stream_id, call)
        for stream_id in streams:
            left = set(_native.kv_list(STREAM_NS, f"{stream_id}/"))
            with self.lock:
                taken = [k for k in self.streamed
                         if k.startswith(f"{stream_id}/") and k not in left]
                refs = [self.streamed.pop(k) for k in taken]
            del refs  # taken (or dropped): the reader borrows them now
        with self.lock:
            lent = set(self.lent)
        if lent:
            borrowed = self._borrowed()
            for object_id in lent - borrowed:
                with self.lock:
                    free = object_id in self.lent and object_id not in self.counts
                if free:
                    self.free(object_id)
        pooled = self.pool.trim()
        with self.lock:
            return bool(self.in_flight or self.lent or self.dropped or self.streamed or
                        self.streams_dropped or pooled)

    def _borrowed(self):
        """The ids of this process's values that live borrowers hold. The key of a borrower
        that exited is removed: on this node, by its pid and start time; on another, once the
        GCS lists that node dead, or once that node says the process does not run (asked at
        most every REMOTE_BORROWER_CHECK_S; a node that does not answer keeps its keys)."""
        keys = _native.kv_list(BORROW_NS, f"{self.key()}/")
        nodes = None
        alive = {}   # key -> whether its borrower runs (as far as known)
        remote = {}  # node id -> keys of its borrowers, to ask that node
        now = time.monotonic()
        ask = now - self.remote_checked >= REMOTE_BORROWER_CHECK_S
        for key in keys:
            where, _, process = key.split("/", 2)[2].rpartition(":")
            if where in (self.node, self.host):
                alive[key] = owner_alive(process)
                continue
            # A process of another node: alive while its node is (a host: unknown), and
            # while that node says it runs.
            if nodes is None:
                nodes = {n["node_id"]: (n["alive"], n["address"]) for n in _native.nodes()}
            node_alive, address = nodes.get(where, (True, ""))
            alive[key] = node_alive
            if node_alive and ask and address:
                remote.setdefault(address, []).append((key, process))
        if ask:
            self.remote_checked = now
        for address, entries in remote.items():
            try:
                running = _native.processes_alive(address, _native.cluster()[1],
                                                   [p for _, p in entries],
                                                   REMOTE_BORROWER_CHECK_S)
            except Exception:  # noqa: BLE001 - not answered now: kept, asked again later
                continue
            for (key, _), yes in zip(entries, running):
                alive[key] = yes
        borrowed = set()
        for key, yes in alive.items():
            if yes:
                borrowed.add(key.split("/", 2)[1])
            else:
                _native.kv_delete(BORROW_NS, key, False)
        return borrowed

    def goodbye(self):
        """At exit: this process's borrower keys, and those of its own values, go."""
        with self.lock:
            keys = list(self.registered.values())
            self.registered.clear()
        try:
            for key in keys:
                _native.kv_delete(BORROW_NS, key, False)
            _native.kv_delete(BORROW_NS, f"{self.key()}/", True)
        except Exception:  # noqa: BLE001 - disconnected already: the keys outlive it
            pass


def _count_down(counts, object_id):
    """Takes one from counts[object_id]; whether none is left (the entry is gone then)."""
    left = counts.get(object_id, 0) - 1
    if left > 0:
        counts[object_id] = left
        return False
    counts.pop(object_id, None)
    return True


_here = _Here()


def forget_all():
    """This process's values are gone (it disconnects, or exits): its directories are
    removed, and the next put sets up again (perhaps in another cluster)."""
    with _here.lock:
        if _here.pid != os.getpid():
            return
        dirs = (_here.dir, _here.spill_dir)
        _here.pid = None
        _here.pool.close()
    _here.goodbye()
    _here.wake.set()  # the sweeper sees the pid change and ends
    import shutil
    for d in dirs:
        if d:
            shutil.rmtree(d, ignore_errors=True)


import atexit  # noqa: E402 - registered once the module is whole
atexit.register(forget_all)


# ---- refs sent inside values ------------------------------------------------------------------

_collector = threading.local()


@contextlib.contextmanager
def collecting():
    """Collects the ObjectRefs pickled in the block (a call's arguments, a put value), so
    the caller keeps them while the call or the value needs them."""
    outer = getattr(_collector, "refs", None)
    _collector.refs = []
    try:
        yield _collector.refs
    finally:
        _collector.refs = outer


def borrow(obj):
    """Whether a new ObjectRef to obj counts as a borrow (obj is another process's value in
    a store); if so, it was counted."""
    if obj.inline is not None:
        return False
    try:
        _here.ensure()
    except Exception:  # noqa: BLE001 - not connected: nothing to register with
        return False
    if obj.owner == _here.owner:
        return False
    _here.borrow(obj)
    return True


def sent(ref, obj):
    """A ref is pickled: into what a `collecting` block holds on to (its value may now be
    borrowed), or elsewhere (kept by this process until it exits). Whether the receiver must
    register as a borrower (not for a kept one: that saves a GCS call per ref of a list of
    refs that a task returns)."""
    refs = getattr(_collector, "refs", None)
    if obj.inline is not None:
        return False
    _here.ensure()
    if refs is not None:
        refs.append(ref)
        if obj.owner == _here.owner:
            with _here.lock:
                _here.shared.add(obj.id)
        return True
    with _here.lock:
        _here.escaped.add(obj.id)
    return False


# ---- encoding ---------------------------------------------------------------------------------

class _Pickler(cloudpickle.CloudPickler):
    """cloudpickle, with torch CPU tensors as numpy arrays (whose data go out of band)."""

    def reducer_override(self, obj):
        torch = sys.modules.get("torch")
        if torch is not None and type(obj) is torch.Tensor and obj.device.type == "cpu" and \
                not obj.requires_grad and obj.layout == torch.strided and \
                obj.dtype not in (torch.bfloat16,) and not obj.is_quantized:
            try:
                return _tensor_from_numpy, (obj.detach().contiguous().numpy(),)
            except (TypeError, RuntimeError):
                pass
        return super().reducer_override(obj)


def _tensor_from_numpy(array):
    import warnings

    import torch
    with warnings.catch_warnings():
        # A read-only view of a private (copy-on-write) mapping: writes stay this process's,
        # so the tensor may be written into, as Ray's deserialized tensors may.
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


def _encode(kind, meta, buffers):
    """The bytes of the file header, and [(offset, buffer)] after it; and the total size."""
    offsets, at = [], _HEADER.size + _BUFFER.size * len(buffers) + len(meta)
    for b in buffers:
        at = (at + _ALIGN - 1) // _ALIGN * _ALIGN
        offsets.append((at, b.nbytes))
        at += b.nbytes
    head = _HEADER.pack(MAGIC, kind, len(buffers), len(meta)) + \
        b"".join(_BUFFER.pack(o, n) for o, n in offsets) + meta
    return head, [(o, b) for (o, _), b in zip(offsets, buffers)], at


def serialize(value):
    """(kind, metadata, [memoryview]): a value, pickled with its large buffers out of band."""
    buffers = []
    out = io.BytesIO()
    _Pickler(out, protocol=5, buffer_callback=lambda b: buffers.append(b.raw())).dump(value)
    return KIND_PICKLE, out.getvalue(), buffers


def _to_bytes(kind, meta, buffers):
    head, placed, total = _encode(kind, meta, buffers)
    blob = bytearray(total)
    blob[:len(head)] = head
    for at, b in placed:
        blob[at:at + b.nbytes] = b
    return bytes(blob)


def _pwrite_all(fd, data, at):
    view = memoryview(data).cast("B")
    done = 0
    while done < view.nbytes:
        done += os.pwrite(fd, view[done:done + _WRITE_CHUNK], at + done)


def _write_file(path, head, placed, total):
    """Writes an object (`_encode`'s parts) to a new file at `path` (whole, or not at all: it
    appears by rename). Written with pwrite, one copy into new pages (as fast as a copy
    through a mapping of them, which faults on each); a full /dev/shm is an ENOSPC here, not
    a SIGBUS later."""
    tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        try:
            _pwrite_all(fd, head, 0)
            for at, b in placed:
                _pwrite_all(fd, b, at)
            os.ftruncate(fd, total)
        except OSError as e:
            from .exceptions import ObjectStoreFullError
            raise ObjectStoreFullError(
                f"no room for a {total}-byte object in {os.path.dirname(path)} ({e.strerror}): "
                f"free some refs, or give /dev/shm more room") from None
        os.rename(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    finally:
        os.close(fd)


def _decode(buf):
    """The value an object's bytes hold (views into `buf` for out-of-band buffers)."""
    view = memoryview(buf)
    magic, kind, count, meta_len = _HEADER.unpack_from(view, 0)
    if magic != MAGIC:
        raise ValueError("not an object of the phalanx object store")
    at = _HEADER.size
    spans = [_BUFFER.unpack_from(view, at + i * _BUFFER.size) for i in range(count)]
    at += _BUFFER.size * count
    meta = bytes(view[at:at + meta_len])
    # Read-only, as Ray's: numpy arrays come back as read-only views of the object's memory
    # (torch tensors stay writable, copy-on-write; _tensor_from_numpy).
    buffers = [view[o:o + n].toreadonly() for o, n in spans]
    if kind == KIND_PICKLE:
        return pickle.loads(meta, buffers=buffers)
    if kind == KIND_RAW:
        return ser.loads_value(bytes(buffers[0]), meta.decode())
    raise pickle.loads(meta)


def _map_file(path):
    """A private mapping of an object file, which its owner does not write into while the
    mapping (or a view of it) lives (_object_pool.hold_for_reading)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if not size:
            return b""
        hold_for_reading(f.fileno(), path)
        return mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)


# ---- put, publish, read ----------------------------------------------------------------------

_ids = itertools.count()


def _new_id():
    return f"{uuid.uuid4().hex[:16]}{next(_ids):x}"


def _store_used(root):
    """The bytes the values in a store's owner directories and its cache take, and the elastic
    jobs' snapshots kept there (node/snapshot_store.h), which the capacity counts too."""
    used = 0
    try:
        owners = [e for e in os.scandir(root) if e.is_dir() and not e.name.startswith(".")]
    except OSError:
        return 0
    cache = os.path.join(root, CACHE_DIR)
    try:
        owners += [o for n in os.scandir(cache) if n.is_dir()
                   for o in os.scandir(n.path) if o.is_dir()]
    except OSError:
        pass
    try:
        owners += [j for j in os.scandir(os.path.join(root, ".snapshots")) if j.is_dir()]
    except OSError:
        pass
    for owner in owners:
        try:
            used += sum(f.stat().st_size for f in os.scandir(owner.path))
        except OSError:
            pass
    return used


def _place(size):
    """(this process's directory for a `size`-byte value, whether it is the spill one): the
    store while the value fits in its capacity (this process's kept files given up first),
    else the node's spill directory on disk."""
    def over():
        return _here.spill_dir is not None and _here.capacity is not None and \
            _store_used(os.path.dirname(_here.dir)) + size > _here.capacity
    spill = over()
    if spill and _here.pool.kept_bytes():
        _here.pool.trim(drop_all=True)
        spill = over()
    where = _here.spill_dir if spill else _here.dir
    os.makedirs(where, mode=0o700, exist_ok=True)
    return where, spill


def _write_placed(object_id, kind, meta, buffers):
    """Writes an object where it fits; whether it went to disk."""
    head, placed, total = _encode(kind, meta, buffers)
    where, spilled = _place(total)
    path = os.path.join(where, object_id)
    if spilled or not _here.pool.write(path, object_id, head, placed, total):
        from .exceptions import ObjectStoreFullError
        try:
            _write_file(path, head, placed, total)
        except ObjectStoreFullError:
            if not _here.pool.kept_bytes():
                raise
            _here.pool.trim(drop_all=True)  # /dev/shm is full: the kept files make room
            _write_file(path, head, placed, total)
    return spilled


def put(value):
    """An Obj for `value`, owned by this process (the ObjectRef made of it counts it)."""
    _here.ensure()
    with collecting() as inside:
        kind, meta, buffers = serialize(value)
    size = len(meta) + sum(b.nbytes for b in buffers)
    object_id = _new_id()
    if size < INLINE_MAX or not _here.dir:
        _escape(inside)  # travels by value: no one knows how long the refs in it live
        return Obj(object_id, "", "", _here.owner, _here.label, _to_bytes(kind, meta, buffers),
                   False, False)
    spilled = _write_placed(object_id, kind, meta, buffers)
    if inside:
        _here.contain(object_id, inside)
    return Obj(object_id, _here.node, _here.host, _here.owner, _here.label, None, False,
               spilled)


def _pickled_error(error):
    """The metadata of a KIND_ERROR object: the pickled exception, or a PhalanxError with its
    text where it cannot be pickled."""
    try:
        return cloudpickle.dumps(error)
    except Exception:  # noqa: BLE001
        from .exceptions import PhalanxError
        return pickle.dumps(PhalanxError(str(error)))


def put_error(error):
    """An Obj whose readers raise `error`, owned by this process (it travels by value)."""
    _here.ensure()
    return Obj(_new_id(), "", "", _here.owner, _here.label,
               _to_bytes(KIND_ERROR, _pickled_error(error), []), False, False)


def _escape(refs):
    with _here.lock:
        _here.escaped.update(r._obj.id for r in refs)


def _result(native_ref, encoding, index, returned):
    """(kind, metadata, buffers) of a call's result, or of its index-th value."""
    (payload,) = _native.get([native_ref], -1.0)
    if index is None:
        return KIND_RAW, encoding.encode(), [memoryview(payload)]
    return serialize(returned(ser.loads_value(payload, encoding), index))


def publish(native_ref, encoding, index, returned):
    """An Obj for the result of a call of this process (or its index-th value, num_returns):
    a thread writes it to the store when it arrives (or the call's error). Counted like a
    put. `returned(value, index)` is the index-th value of a call's result (the API's
    reading of num_returns)."""
    _here.ensure()
    if not _here.dir:
        # No node here to serve it: the ref carries the value (this waits for it).
        with collecting() as inside:
            item = _result(native_ref, encoding, index, returned)
        _escape(inside)
        return Obj(_new_id(), "", "", _here.owner, _here.label, _to_bytes(*item), False, False)
    object_id = _new_id()
    _here.hold(object_id)

    def write():
        inside = []
        try:
            with collecting() as inside:
                item = _result(native_ref, encoding, index, returned)
        except BaseException as e:  # noqa: BLE001 - every reader raises it
            item = (KIND_ERROR, _pickled_error(e), [])
        if _here.wanted(object_id):
            _write_placed(object_id, *item)
            if inside:
                _here.contain(object_id, inside)
            if not _here.wanted(object_id):  # dropped while it was written
                _here.free(object_id)
    threading.Thread(target=write, name="phalanx-publish", daemon=True).start()
    return Obj(object_id, _here.node, _here.host, _here.owner, _here.label, None, True, False)


def is_owned(obj):
    return obj.inline is None and _here.pid == os.getpid() and obj.owner == _here.owner


def _lost(obj, why):
    from .exceptions import ObjectFreedError, OwnerDiedError
    if why == "owner_dead":
        return OwnerDiedError(f"object {obj.id} is lost: its owner, {obj.label}, died (an "
                              f"object lives as long as the process that put it or made the "
                              f"call; put it from a detached actor to keep it longer)",
                              obj.id, obj.label)
    return ObjectFreedError(f"object {obj.id} of {obj.label} was freed: its owner holds no "
                            f"ref to it any more", obj.id, obj.label)


def _node_address(node_id):
    for n in _native.nodes():
        if n["node_id"] == node_id:
            return n["address"] if n["alive"] else None
    return None


def _is_local(obj):
    """Whether the node that holds obj runs on this machine (its store is this one's)."""
    return obj.host == socket.gethostname() and os.path.isdir(_store_root(obj.node))


def ready(obj):
    """Whether a get of obj would not wait."""
    if obj.inline is not None or not obj.pending:
        return True
    if _is_local(obj):
        return any(os.path.exists(p) for p in _paths_of(obj)) or not owner_alive(obj.owner)
    cache = _cache_dir(obj)
    if cache is not None and os.path.exists(os.path.join(cache, obj.id)):
        return True
    address = _node_address(obj.node)
    return address is None or _native.read_object(
        address, _native.cluster()[1], obj.owner, obj.id, "", 30.0) != "missing"


class Polling:
    """The pauses of a poll (1 ms, doubling to POLL_MAX_S), in a ``with`` block: from the
    first pause on, a task worker lends its CPU (``_native.Blocked``), as in get."""

    def __init__(self):
        self._pause = 0.001
        self._blocked = None

    def __enter__(self):
        return self

    def pause(self):
        if self._blocked is None:
            self._blocked = _native.Blocked()
            self._blocked.__enter__()
        time.sleep(self._pause)
        self._pause = min(self._pause * 2, POLL_MAX_S)

    def __exit__(self, *exc):
        if self._blocked is not None:
            self._blocked.__exit__(*exc)


def read(obj, deadline):
    """The value of obj; waits (until `deadline`, a time.monotonic(), or None) for a call's
    result that is not written yet."""
    if obj.inline is not None:
        return _decode(obj.inline)
    local = _is_local(obj)
    node = {}  # the holding node's address, read from the GCS once, not once per poll
    with Polling() as polling:
        while True:
            if local:
                try:
                    data = _map_first(_paths_of(obj))
                    why = None if owner_alive(obj.owner) else "owner_dead"  # not yet swept
                except FileNotFoundError:
                    why = "missing" if owner_alive(obj.owner) else "owner_dead"
                if why is None:
                    return _decode(data)
            else:
                why = _fetch(obj, deadline, node)
                if not isinstance(why, str):
                    return why[0]
            if why == "owner_dead" or not obj.pending:
                raise _lost(obj, why)
            if deadline is not None and time.monotonic() >= deadline:
                from .exceptions import GetTimeoutError
                raise GetTimeoutError(f"object {obj.id} of {obj.label} was not ready in time")
            polling.pause()


def _cache_dir(obj):
    """This node's cache directory for the values of obj's owner (node/object_store.h:
    a value crosses the network once per node); None when no node runs here."""
    if not _here.node or not obj.node or not os.path.isdir(_store_root(_here.node)):
        return None
    return os.path.join(_store_root(_here.node), CACHE_DIR, obj.node, obj.owner)


def _map_cached(path):
    """(value,) of a cached copy, marked as read now (the node drops the least recently read
    ones first), or None when there is none."""
    try:
        data = _map_file(path)
    except FileNotFoundError:
        return None
    with contextlib.suppress(OSError):
        os.utime(path)
    return (_decode(data),)


def _await_cached(path, lock, deadline):
    """Waits while another process of this node fetches the value into `path` under `lock`:
    (value,) once it is there; "retry" when the lock went without a copy (that fetch failed:
    try again); "alone" when the fetcher died or its copy has not changed for CACHE_STALL_S."""
    last, since = -1, time.monotonic()
    with Polling() as polling:
        while True:
            got = _map_cached(path)
            if got is not None:
                return got
            try:
                with open(lock) as f:
                    reader = f.read().strip()
            except FileNotFoundError:
                got = _map_cached(path)
                return "retry" if got is None else got
            if reader and not owner_alive(reader):
                _unlink(lock)
                return "retry"
            try:  # its copy's progress: written chunk by chunk into space allocated first
                st = os.stat(os.path.join(os.path.dirname(path),
                                          f".{os.path.basename(path)}.{reader}"))
                progress = (st.st_size, st.st_mtime_ns)
            except OSError:
                progress = None
            now = time.monotonic()
            if progress != last:
                last, since = progress, now
            elif now - since > CACHE_STALL_S:
                return "alone"
            if deadline is not None and now >= deadline:
                from .exceptions import GetTimeoutError
                raise GetTimeoutError(f"object {os.path.basename(path)} was not ready in time")
            polling.pause()


def _take_cache_lock(obj, deadline):
    """(the cache path of obj, its lock) when this process is to fetch obj into the node's
    cache, (None, None) to fetch a private copy, or (value,) when another process of this
    node fetched it meanwhile."""
    cache = _cache_dir(obj)
    if cache is None:
        return None, None
    path = os.path.join(cache, obj.id)
    lock = os.path.join(cache, f".{obj.id}.lock")
    for _ in range(3):
        got = _map_cached(path)
        if got is not None:
            return got
        try:
            os.makedirs(cache, mode=0o700, exist_ok=True)
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            got = _await_cached(path, lock, deadline)
            if got == "alone":
                return None, None
            if got != "retry":
                return got
            continue
        except OSError:
            return None, None  # the cache cannot be written (its node went): a private copy
        try:
            os.write(fd, _here.owner.encode())
        finally:
            os.close(fd)
        got = _map_cached(path)  # fetched between the look and the lock
        if got is not None:
            _unlink(lock)
            return got
        return path, lock
    return None, None


def _fetch(obj, deadline, node=None):
    """(value,) read from another node, or why not ('missing', 'owner_dead'). The value is
    copied once into this node's cache (`_cache_dir`), where this node's other readers map
    it; a process of a machine with no node, or one whose fetcher stalled, reads a private
    copy. `node` keeps the holding node's address between polls; after a failed read it is
    looked up again, and a node the GCS no longer lists alive means the owner's values are
    lost."""
    node = {} if node is None else node
    _here.ensure()
    taken = _take_cache_lock(obj, deadline)
    if len(taken) == 1:
        return taken
    cached, lock = taken
    try:
        return _fetch_into(obj, deadline, node, cached)
    finally:
        if lock is not None:
            _unlink(lock)


def _fetch_into(obj, deadline, node, cached):
    """_fetch's copy: into `cached` (renamed there once whole) or, when None, a private
    file unlinked once mapped."""
    if "address" not in node:
        node["address"] = _node_address(obj.node)
    address = node["address"]
    if address is None:
        return "owner_dead"
    if cached is not None:
        path = os.path.join(os.path.dirname(cached), f".{obj.id}.{_here.owner}")
    elif _here.dir:
        os.makedirs(_here.dir, mode=0o700, exist_ok=True)
        path = os.path.join(_here.dir, f"fetch-{obj.id}-{uuid.uuid4().hex[:8]}")
    else:
        import tempfile
        fd, path = tempfile.mkstemp(prefix="phalanx-fetch-", dir="/dev/shm")
        os.close(fd)
    left = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        try:
            why = _native.read_object(address, _native.cluster()[1], obj.owner, obj.id, path,
                                       left if left >= 0 else 3600.0)
        except Exception:
            node.pop("address", None)
            if _node_address(obj.node) is None:
                return "owner_dead"
            raise
        if why != "ok":
            return why
        if cached is not None:
            os.rename(path, cached)
            path = cached  # kept: the node drops it once its holder frees the value
            return (_decode(_map_file(cached)),)
        return (_decode(_map_file(path)),)
    finally:
        if path != cached:
            _unlink(path)  # the mapping keeps the bytes while the value uses them
