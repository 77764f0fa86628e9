"""Type-exact cache keys: two values share a key only when they are equal and of the same types, all the way down.

Python equality is too coarse for a cache: ``True == 1 == 1.0`` and
``(1, 2) == [1, 2]`` is False but ``{"n": 1} == {"n": True}`` is True, so a
cache keyed by equality hands the answer computed for one value to another
(a filter ``{"n": True}`` answered with ``{"n": 1}``'s rows; ``rrf_k=True``
accepted because ``rrf_k=1`` was validated before).  :func:`cache_key`
spells every value with its exact type, recursively:

- ``None``, ``bool``, ``int``, ``str``, ``bytes``: by type and value;
- ``float`` (and ``complex``): by type and bit pattern (``float.hex``), so
  ``-0.0`` and ``0.0`` are two keys and a NaN is one key;
- numpy scalars and arrays: by class, dtype, shape and bytes (object arrays
  element by element);
- mappings: by class and the set of (key, value) keys — order ignored, as
  mapping equality does; lists, tuples (named tuples too), sets: by class and
  element keys;
- frozen attrs instances with generated equality: by class and field keys;
  bound methods (Python or builtin): by their object and function;
- anything else (functions, callables, models): by identity.  The key holds
  the object, so its ``id`` cannot be recycled while the key lives.

Values too deep or cyclic raise :class:`UnkeyableError` (a TypeError):
callers then skip the cache, which is always correct.  :func:`stable_digest`
turns a key into a hex digest that is the same in every process (for
on-disk caches); it refuses identity-only values.

>>> cache_key({"n": 1}) == cache_key({"n": True}), cache_key({"a": 1, "b": 2}) == cache_key({"b": 2, "a": 1})
(False, True)
"""

from __future__ import annotations

import hashlib
import types
from collections.abc import Hashable, Mapping, Set
from pathlib import PurePath
from typing import Any

import attrs
import numpy as np

__all__ = ["UnkeyableError", "cache_key", "stable_digest"]

#: Deeper values are refused (callers skip caching); far beyond any real parameter.
MAX_DEPTH = 100


class UnkeyableError(TypeError):
    """A value has no type-exact key (too deep or cyclic, or identity-only for a stable digest)."""


class _Same:
    """An object compared by identity; holds it, so its id stays unique while the key lives."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __repr__(self) -> str:
        return f"<same {type(self.obj).__qualname__} at {id(self.obj):#x}>"


# Exact types keyed as (tag, value): a subclass (an IntEnum, a str subclass) is not one of them.
_PLAIN = {type(None): "none", bool: "bool", int: "int", str: "str", bytes: "bytes"}


def cache_key(value: Any) -> Hashable:
    """A hashable key equal for two values exactly when they are equal and of the same types (see module doc).

    >>> cache_key([1, 2]) == cache_key((1, 2)), cache_key(1.0) == cache_key(1)
    (False, False)
    """
    return _key(value, 0)


def _key(value: Any, depth: int) -> Hashable:
    if depth > MAX_DEPTH:
        raise UnkeyableError(f"a value nested deeper than {MAX_DEPTH} levels (or cyclic) has no cache key")
    cls = type(value)
    tag = _PLAIN.get(cls)
    if tag is not None:
        return (tag, value)
    if cls is float:
        return ("float", value.hex())
    if cls is complex:
        return ("complex", value.real.hex(), value.imag.hex())
    depth += 1
    if isinstance(value, np.ndarray):
        return _array_key(value, depth)
    if isinstance(value, np.generic):
        if value.dtype.hasobject:  # pragma: no cover - numpy returns the object itself
            return ("numpy-object", _key(value.item(), depth))
        return ("numpy", cls, value.dtype.str, value.tobytes())
    if isinstance(value, Mapping):
        return ("map", cls, frozenset((_key(k, depth), _key(v, depth)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("seq", cls, tuple(_key(v, depth) for v in value))
    if isinstance(value, Set):
        return ("set", cls, frozenset(_key(v, depth) for v in value))
    if isinstance(value, PurePath):
        return ("path", cls, str(value))
    if isinstance(value, types.MethodType):
        return ("method", _Same(value.__self__), _Same(value.__func__))
    if isinstance(value, types.BuiltinMethodType):  # [].append, len: a new object per attribute access
        return ("builtin", _Same(value.__self__), value.__qualname__)
    if attrs.has(cls) and "__eq__" in cls.__dict__ and _is_frozen(cls):
        # a frozen attrs class with its own generated equality: a value, compared field by field
        fields = tuple((f.name, _key(getattr(value, f.name), depth)) for f in attrs.fields(cls) if f.eq)
        return ("attrs", cls, fields)
    return ("object", _Same(value))


def _is_frozen(cls: type) -> bool:
    # attrs' frozen classes refuse attribute assignment through this one function
    return getattr(getattr(cls, "__setattr__", None), "__name__", "") == "_frozen_setattrs"


def _array_key(array: np.ndarray, depth: int) -> Hashable:
    if array.dtype.hasobject:
        return ("ndarray", type(array), "O", array.shape, tuple(_key(v, depth) for v in array.ravel().tolist()))
    dtype = array.dtype.str if array.dtype.fields is None else repr(array.dtype)
    return ("ndarray", type(array), dtype, array.shape, np.ascontiguousarray(array).tobytes())


def stable_digest(value: Any) -> str:
    """A hex digest (blake2b-128) of :func:`cache_key` that every process computes alike, for on-disk keys.

    Raises :class:`UnkeyableError` for values keyed by identity (callables,
    arbitrary objects): they have no meaning outside this process.

    >>> stable_digest({"a": [1, 2.5]}) == stable_digest({"a": [1, 2.5]}) != stable_digest({"a": [1, 2.5, True]})
    True
    """
    digest = hashlib.blake2b(digest_size=16)
    digest.update(_serialize(cache_key(value)))
    return digest.hexdigest()


def _serialize(key: Any) -> bytes:
    """Length-prefixed bytes of a key; sets are sorted by their members' bytes (hash order differs per process)."""
    if isinstance(key, tuple):
        parts = [_serialize(k) for k in key]
    elif isinstance(key, frozenset):
        parts = sorted(_serialize(k) for k in key)
    elif isinstance(key, type):
        return _frame(b"T", f"{key.__module__}:{key.__qualname__}".encode())
    elif isinstance(key, str):
        return _frame(b"S", key.encode("utf-8", "surrogatepass"))
    elif isinstance(key, bytes):
        return _frame(b"B", key)
    elif isinstance(key, bool) or key is None:
        return _frame(b"L", repr(key).encode())
    elif isinstance(key, int):
        return _frame(b"I", format(key, "x").encode())  # hex: no digit limit on huge ints
    else:
        raise UnkeyableError(f"a {type(key.obj).__qualname__ if isinstance(key, _Same) else type(key).__qualname__} "
                             "is compared by identity and has no digest that other processes could share")
    return _frame(b"(" if isinstance(key, tuple) else b"{", b"".join(parts))


def _frame(kind: bytes, payload: bytes) -> bytes:
    return kind + len(payload).to_bytes(8, "little") + payload
