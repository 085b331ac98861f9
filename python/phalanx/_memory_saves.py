"""``phalanx run --memory-saves``: a torchrun program's own snapshots through the node's memory.

A torchrun program saves its snapshot with ``torch.save(obj, path)`` and loads it after a
restart with ``torch.load(path)``. With the option, in each worker of the job:

- ``torch.save(obj, path)`` (a path, not a file object) serializes ``obj`` once, puts the bytes
  into the node's shared-memory store beside the job's snapshots (node/snapshot_store.h:
  ``<store>/.snapshots/<job>/file-<digest>.pt``, whole or not at all), and returns; the file at
  ``path`` is written from those bytes by a thread of its own (a newer save of the same path
  replaces one that waits). The step does not wait for the disk.
- ``torch.load(path)`` of a path whose newest save this node holds reads it from memory: after
  a restart of the worker group (the processes killed, or restarted by the runtime) the
  program resumes with no disk read.
- When the group starts (again), every copy the node holds whose file is missing or older is
  written out first, so that the program's ``os.path.exists(path)`` finds its snapshot even
  when the process died before the background write.
- ``os.replace``/``os.rename`` of a saved path (a program's own atomic save: ``torch.save`` to
  ``path.tmp``, then a rename) moves the save: a write still waiting goes to the new name, and
  so does the node's copy; nothing waits for the disk there either.
- The loop waits for the pending writes before it returns (a final save is on disk when the
  job ends). The store frees the copies when the job ends.

Other ranks' nodes hold no copy of rank 0's saves: they load from the file, as before.
"""

import hashlib
import io
import os
import sys
import threading

_lock = threading.Lock()
_state = {"dir": None, "installed": False, "announced": set()}
_pending = {}  # path -> bytes, the newest save of each path not yet on disk
_cond = threading.Condition(_lock)
_writer = None
_writing = [None]  # the path the writer thread is writing now
_original = {}


def _copy_name(path):
    digest = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:24]
    return f"file-{digest}.pt"


def _path_of(f):
    if isinstance(f, (str, bytes, os.PathLike)):
        path = os.fsdecode(f)
        return os.path.abspath(path)
    return None


def install(job_id):
    """Routes torch.save/torch.load of this process through the node's store of job
    ``job_id`` (idempotent), and writes out the copies whose file is missing or older."""
    import torch
    node = os.environ.get("PHALANX_NODE_ID", "")
    store = f"/dev/shm/phalanx-objects-{node}"
    if not node or not os.path.isdir(store):
        print("phalanx run: --memory-saves: this worker's node has no object store: torch.save "
              "and torch.load go to disk", file=sys.stderr, flush=True)
        return
    directory = os.path.join(store, ".snapshots", job_id)
    with _lock:
        _state["dir"] = directory
        if not _state["installed"]:
            _original["save"], _original["load"] = torch.save, torch.load
            _original["replace"], _original["rename"] = os.replace, os.rename
            torch.save, torch.load = _save, _load
            os.replace, os.rename = _renamer("replace"), _renamer("rename")
            _state["installed"] = True
    _materialize(directory)


def _materialize(directory):
    """Every copy the node holds, on disk where its file is missing or older."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not (name.startswith("file-") and name.endswith(".pt")):
            continue
        copy = os.path.join(directory, name)
        try:
            with open(copy + ".path") as f:
                path = f.read()
            if os.path.exists(path) and os.path.getmtime(path) >= os.path.getmtime(copy):
                continue
            with open(copy, "rb") as f:
                _write_file(path, f.read())
        except OSError:
            continue


def _real_replace(src, dst):
    return _original.get("replace", os.replace)(src, dst)


def _write_file(path, data):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    _real_replace(tmp, path)


def _renamer(which):
    def rename(src, dst, *args, **kwargs):
        s, d = _path_of(src), _path_of(dst)
        directory = _state["dir"]
        if s is None or d is None or directory is None or args or kwargs:
            return _original[which](src, dst, *args, **kwargs)
        copy_s = os.path.join(directory, _copy_name(s))
        with _cond:
            while _writing[0] == s:  # a write of it under way ends first (milliseconds)
                _cond.wait()
            data = _pending.pop(s, None)
            if data is not None:
                _pending[d] = data  # not on disk yet: it is written under the new name
                _cond.notify_all()
        # The node's copy goes with it.
        try:
            if os.path.exists(copy_s):
                copy_d = os.path.join(directory, _copy_name(d))
                with open(copy_d + ".path", "w") as out:
                    out.write(d)
                _real_replace(copy_s, copy_d)
                os.unlink(copy_s + ".path")
        except OSError:
            pass
        if data is not None:
            return None
        return _original[which](src, dst)
    return rename


def _save(obj, f, *args, **kwargs):
    path = _path_of(f)
    directory = _state["dir"]
    if path is None or directory is None:
        return _original["save"](obj, f, *args, **kwargs)
    buffer = io.BytesIO()
    _original["save"](obj, buffer, *args, **kwargs)
    data = buffer.getvalue()
    copy = os.path.join(directory, _copy_name(path))
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        with open(copy + ".path", "w") as out:
            out.write(path)
        tmp = f"{copy}.tmp.{os.getpid()}"
        with open(tmp, "wb") as out:
            out.write(data)
        os.replace(tmp, copy)
    except OSError as e:
        # No room in the node's memory: the file is written here, as without the option.
        print(f"phalanx run: --memory-saves: {path} was not kept in the node's memory ({e}); "
              f"written to disk", file=sys.stderr, flush=True)
        _write_file(path, data)
        return None
    global _writer
    with _cond:
        _pending[path] = data
        if _writer is None:
            _writer = threading.Thread(target=_write_pending, name="memory-saves", daemon=True)
            _writer.start()
        _cond.notify_all()
    return None


def _write_pending():
    while True:
        with _cond:
            while not _pending:
                _cond.wait()
            path = next(iter(_pending))
            data = _pending[path]
            _writing[0] = path
        try:
            _write_file(path, data)
        except OSError as e:
            print(f"phalanx run: --memory-saves: cannot write {path}: {e}", file=sys.stderr,
                  flush=True)
        with _cond:
            _writing[0] = None
            if _pending.get(path) is data:
                del _pending[path]
            _cond.notify_all()


def flush(timeout=60.0):
    """Waits until every save so far is on disk; False when `timeout` ran out."""
    with _cond:
        return _cond.wait_for(lambda: not _pending, timeout)


def _load(f, *args, **kwargs):
    path = _path_of(f)
    directory = _state["dir"]
    if path is not None and directory is not None:
        copy = os.path.join(directory, _copy_name(path))
        try:
            with open(copy, "rb") as source:
                data = source.read()
        except OSError:
            data = None
        if data is not None:
            with _lock:
                first = path not in _state["announced"]
                _state["announced"].add(path)
            if first:
                print(f"phalanx run: torch.load({path}) read {len(data)} bytes from the node's "
                      f"memory (no disk read)", file=sys.stderr, flush=True)
            return _original["load"](io.BytesIO(data), *args, **kwargs)
    return _original["load"](f, *args, **kwargs)
