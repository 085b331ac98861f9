"""How arguments and results travel: pickled (cloudpickle) between Python processes,
msgpack to and from C++ actors. A pickled payload starts with the PROTO opcode 0x80,
which no msgpack array does, so a worker can tell them apart."""

import importlib
import io
import pickle
import sys
import types

import cloudpickle
import msgpack

PICKLE = "pickle"
MSGPACK = "msgpack"


class _Pickler(cloudpickle.CloudPickler):
    """cloudpickle, plus: a module object of a ModuleType subclass (torch.backends.cudnn is a
    CudnnModule) travels as its name and is imported where it lands, as plain modules do."""

    def reducer_override(self, obj):
        if isinstance(obj, types.ModuleType) and type(obj) is not types.ModuleType and \
                sys.modules.get(obj.__name__) is obj:
            return importlib.import_module, (obj.__name__,)
        return super().reducer_override(obj)


def dumps_function(fn, *rest, what="the function"):
    """Pickles (fn, *rest) for another process. Something fn refers to that cannot be
    pickled (a lock, an open file, a CUDA handle) raises a TypeError naming it and the fix."""
    buffer = io.BytesIO()
    try:
        _Pickler(buffer, protocol=5).dump((fn, *rest))
        return buffer.getvalue()
    except Exception as e:  # noqa: BLE001 - named below
        culprit = _unpicklable_reference(fn)
        if culprit is None:
            raise TypeError(f"{what} cannot be sent to the workers: {e}") from e
        name, value = culprit
        raise TypeError(
            f"{what} refers to {name!r} (a {type(value).__name__}), which cannot be pickled "
            f"({e}): create it inside {what} instead of outside, or pass what it needs in "
            f"the config") from e


def _unpicklable_reference(fn):
    """(name, value) of the first global or closure variable of fn that does not pickle."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    candidates = []
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= set(const.co_names)
    for n in sorted(names):
        if n in getattr(fn, "__globals__", {}):
            candidates.append((n, fn.__globals__[n]))
    for n, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            candidates.append((n, cell.cell_contents))
        except ValueError:
            pass
    for name, value in candidates:
        try:
            _Pickler(io.BytesIO(), protocol=5).dump(value)
        except Exception:  # noqa: BLE001 - this is the one
            return name, value
    return None


def is_pickled(payload: bytes) -> bool:
    return payload[:1] == b"\x80"


def dumps_call(args, kwargs, encoding):
    if encoding == PICKLE:
        return cloudpickle.dumps((args, kwargs), protocol=5)
    if kwargs:
        raise TypeError("C++ actors take positional arguments only (got keyword arguments "
                        + ", ".join(kwargs) + ")")
    try:
        return msgpack.packb(list(args), use_bin_type=True)
    except TypeError as e:
        raise TypeError(f"arguments to a C++ actor must be msgpack types (numbers, str, bytes, "
                        f"lists, dicts): {e}") from None


def loads_call(payload):
    """(args, kwargs, encoding of the reply)."""
    if is_pickled(payload):
        args, kwargs = pickle.loads(payload)
        return tuple(args), dict(kwargs), PICKLE
    return tuple(msgpack.unpackb(payload, raw=False)), {}, MSGPACK


def dumps_value(value, encoding):
    if encoding == PICKLE:
        return cloudpickle.dumps(value, protocol=5)
    return msgpack.packb(value, use_bin_type=True)


def loads_value(payload, encoding):
    if encoding == PICKLE:
        return pickle.loads(payload)
    return msgpack.unpackb(payload, raw=False)


def read_only(value, depth=2):
    """Marks the numpy arrays in `value` (itself, or inside lists, tuples and dicts, `depth`
    levels down) read-only, and returns it: as in Ray, an argument or a result that crossed
    processes is not to be written into (``arr = arr.copy()`` first to change it). Values of
    the object store come read-only already (zero-copy views, _objects._decode)."""
    np = sys.modules.get("numpy")
    if np is None:
        return value
    if type(value) is np.ndarray:
        value.flags.writeable = False
    elif depth > 0 and isinstance(value, (list, tuple)):
        for v in value:
            read_only(v, depth - 1)
    elif depth > 0 and isinstance(value, dict):
        for v in value.values():
            read_only(v, depth - 1)
    return value

