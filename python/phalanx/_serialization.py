"""How arguments and results travel: pickled (cloudpickle) between Python processes,
msgpack to and from C++ actors. A pickled payload starts with the PROTO opcode 0x80,
which no msgpack array does, so a worker can tell them apart."""

import pickle

import cloudpickle
import msgpack

PICKLE = "pickle"
MSGPACK = "msgpack"


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
