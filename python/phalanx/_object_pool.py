"""The files of an owner's freed values, written again by its next puts (as Ray's plasma store
reuses the memory of its arena).

A value's file in /dev/shm is new memory: a put into it costs what a copy into new pages costs
(each 4 KiB page faults in), a fifth of a copy into memory already touched. So an owner keeps
the files of large values it frees, renamed to ``POOL_PREFIX<id>`` in its store directory, with
its own shared mapping of each, and a put of about the same size copies into one of those
mappings instead (pages in memory and mapped: a memcpy).

A freed value may still be read: a reader's array is a view of the file's pages. So every
reader holds a shared ``flock`` on the file while its mapping lives (``hold_for_reading``;
Python's mmap keeps a duplicate of the descriptor the lock was taken on, so the lock goes when
the last view of the mapping does, or when the reader dies). The owner writes into a file only
while it holds the exclusive lock, which it gets only when no reader holds one; a file some
reader still maps waits in the pool. A reader checks, under its lock, that the path it opened
still names the file, so one that opened a value just as its owner freed it and wrote another
into it sees the value gone, never the other one.

Bounded: files under ``POOL_MIN_BYTES`` are unlinked as before; at most ``POOL_MAX_ENTRIES``
wait, holding at most ``POOL_MAX_FRACTION`` of the store's capacity; one unused for
``POOL_IDLE_S`` goes (the sweeper of _objects.py trims); and a put that would not fit in the
store empties the pool first. The node counts the files as used memory, not as objects
(node/object_store.h's kObjectPoolPrefix).
"""

import fcntl
import mmap
import os
import threading
import time

# The name of a pooled file in its owner's directory: this, then the id of the value it held
# (node/object_store.h's kObjectPoolPrefix).
POOL_PREFIX = ".free-"
# Files of freed values smaller than this are unlinked, not kept.
POOL_MIN_BYTES = 1 << 20
# The most files one process keeps, and the most live values it keeps a mapping of.
POOL_MAX_ENTRIES = 8
POOL_MAX_MAPPED = 16
# The share of the store's capacity the files one process keeps may take.
POOL_MAX_FRACTION = 0.5
# A kept file unused this long is unlinked.
POOL_IDLE_S = 10.0
# A file at most 1/POOL_SLACK (and a page) larger than a value may hold it.
POOL_SLACK = 8
_PAGE = mmap.PAGESIZE
# Bytes copied at a time, so that other threads run between the pieces of a large value.
_COPY_CHUNK = 64 << 20


def hold_for_reading(fd, path):
    """Takes a reader's shared lock on object file `fd`, opened from `path`, for as long as a
    mapping made from fd (or a duplicate of it) lives. FileNotFoundError when `path` names
    that file no more: its owner freed it (and may be writing another value into it)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:  # the owner holds it to write: it is a freed value's file
        raise FileNotFoundError(path) from None
    mine, named = os.fstat(fd), os.stat(path)
    if (mine.st_ino, mine.st_dev) != (named.st_ino, named.st_dev):
        raise FileNotFoundError(path)


class _File:
    """A file this process writes values into: its descriptor (opened for writing), its
    shared mapping once made, its size and its current path."""

    def __init__(self, fd, size, path):
        self.fd, self.size, self.path = fd, size, path
        self.mapping = None
        self.since = time.monotonic()

    def close(self):
        if self.mapping is not None:
            self.mapping.close()
            self.mapping = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def write(self, head, placed):
        """Copies a value's header and buffers in: through the mapping (made now, its pages
        mapped at once, the first time). Under the exclusive lock; False when a reader still
        holds the file."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            if self.mapping is None:
                self.mapping = mmap.mmap(self.fd, self.size,
                                         flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
            m = self.mapping
            m[0:len(head)] = head
            for at, buffer in placed:
                view = memoryview(buffer).cast("B")
                for start in range(0, view.nbytes, _COPY_CHUNK):
                    piece = view[start:start + _COPY_CHUNK]
                    m[at + start:at + start + piece.nbytes] = piece
            return True
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)


class Pool:
    """One process's kept files (`free`, oldest first) and the mappings of its live values
    that were written into kept files (`live`, by object id)."""

    def __init__(self):
        self.lock = threading.RLock()  # re-entrant: a ref's __del__ may free during a put
        self.free = []
        self.live = {}

    def write(self, path, object_id, head, placed, total):
        """Writes a `total`-byte value into a kept file of about its size and renames that to
        `path`; False when none is free (the caller writes a new file)."""
        with self.lock:
            fits = sorted((f for f in self.free
                           if total <= f.size <= total + total // POOL_SLACK + _PAGE),
                          key=lambda f: f.size)
        for f in fits:
            with self.lock:
                if f not in self.free:
                    continue
                self.free.remove(f)
            try:
                written = f.write(head, placed)
            except OSError:
                f.close()
                unlink_quietly(f.path)
                continue
            if not written:  # a reader still maps it: it waits
                with self.lock:
                    self.free.append(f)
                continue
            try:
                os.rename(f.path, path)
            except OSError:  # gone (its node removed the directory): write a new file
                f.close()
                return False
            f.path = path
            with self.lock:
                if len(self.live) < POOL_MAX_MAPPED:
                    self.live[object_id] = f
                    return True
            f.close()
            return True
        return False

    def keep(self, path, object_id, limit):
        """Keeps the file of freed value `object_id` at `path` for later puts, within `limit`
        bytes; False when it is not kept (the caller unlinks it)."""
        with self.lock:
            f = self.live.pop(object_id, None)
        try:
            size = os.stat(path).st_size
        except OSError:
            size = 0
        if size < POOL_MIN_BYTES or size > limit:
            if f is not None:
                f.close()
            return False
        with self.lock:
            while self.free and (len(self.free) >= POOL_MAX_ENTRIES or
                                 sum(k.size for k in self.free) + size > limit):
                self._drop(self.free.pop(0))
        kept = os.path.join(os.path.dirname(path), POOL_PREFIX + object_id)
        try:
            if f is None:
                f = _File(os.open(path, os.O_RDWR | os.O_CLOEXEC), size, path)
            os.rename(path, kept)
        except OSError:
            if f is not None:
                f.close()
            return False
        f.path, f.size, f.since = kept, size, time.monotonic()
        with self.lock:
            self.free.append(f)
        return True

    def trim(self, drop_all=False):
        """Unlinks the kept files unused for POOL_IDLE_S (all of them with `drop_all`), and
        lets go of the mappings of live values whose file left the store (the node spilled it
        to disk). Whether anything is left to watch."""
        now = time.monotonic()
        with self.lock:
            old = [f for f in self.free if drop_all or now - f.since >= POOL_IDLE_S]
            self.free = [f for f in self.free if f not in old]
            moved = [i for i, f in self.live.items() if _unlinked(f.fd)]
            gone = [self.live.pop(i) for i in moved]
        for f in old:
            self._drop(f)
        for f in gone:
            f.close()
        with self.lock:
            return bool(self.free or self.live)

    def close(self):
        """Lets go of every descriptor and mapping, unlinking nothing (a forked child's
        copies, or a process whose directory is removed next)."""
        with self.lock:
            files = self.free + list(self.live.values())
            self.free, self.live = [], {}
        for f in files:
            f.close()

    def kept_bytes(self):
        with self.lock:
            return sum(f.size for f in self.free)

    @staticmethod
    def _drop(f):
        f.close()
        unlink_quietly(f.path)


def _unlinked(fd):
    try:
        return os.fstat(fd).st_nlink == 0
    except OSError:
        return True


def unlink_quietly(path):
    """Unlinks `path`, if it is there (a file that went meanwhile is not an error)."""
    try:
        os.unlink(path)
    except OSError:
        pass
