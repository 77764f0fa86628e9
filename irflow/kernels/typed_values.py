"""Typed blocks of candidate values: what a metadata column holds for filters to compare with numpy.

A block (:class:`TypedValues`) lays candidate values out as parallel arrays:
a kind per slot, and float64 numbers, string codes, booleans, list sizes and
canonical keys of lists and dicts.  :class:`BlockBuilder` fills one during
the walk of a path; :func:`canonical_key` defines equality of whole lists
and dicts (MongoDB's, with dict key order ignored).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import attrs
import numpy as np

__all__ = ["KIND_ABSENT", "KIND_NULL", "KIND_BOOL", "KIND_NUMBER", "KIND_STRING", "KIND_LIST", "KIND_DICT",
           "KIND_OTHER", "BlockBuilder", "KeyIndex", "TypedValues", "absent_block", "as_list", "canonical_key"]

# Kind codes of one candidate value (int8).  Booleans are their own kind, so
# True never equals 1 (MongoDB, unlike Python); ints and floats share NUMBER.
KIND_ABSENT = 0  # no candidate in this slot (scalar block rows held elsewhere)
KIND_NULL = 1
KIND_BOOL = 2
KIND_NUMBER = 3
KIND_STRING = 4
KIND_LIST = 5
KIND_DICT = 6
KIND_OTHER = 7  # a type filters cannot name (bytes, datetime, ...): present, never equal


def as_list(value: Any) -> list[Any] | tuple[Any, ...] | None:
    """The value as a sequence when it is a list-like metadata value, else None."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is dict:  # the common cases, fast
        return None
    if kind is list or isinstance(value, (list, tuple)):
        return value  # type: ignore[no-any-return]  # a list or tuple, checked above
    if isinstance(value, np.ndarray) and value.ndim > 0:
        listed: list[Any] = value.tolist()
        return listed
    return None


def _canonical_number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value.is_integer():
        # 1.0 and 1 must share a key (MongoDB compares numbers by value); int()
        # of an integral float is exact, so huge floats stay exact too.
        return str(int(value))
    return repr(value)


def canonical_key(value: Any) -> str:
    """A string equal for two values exactly when MongoDB-style equality holds.

    Numbers compare by value across int/float, booleans are not numbers,
    dict key order does not matter (a deliberate, documented difference from
    MongoDB's order-sensitive documents), lists compare element-wise.

    >>> canonical_key({"b": [1.0, True], "a": None}) == canonical_key({"a": None, "b": [1, True]})
    True
    """
    if value is None:
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return _canonical_number(float(value))
    if isinstance(value, str):
        return json.dumps(value)  # quoted and escaped: never clashes with a number
    if isinstance(value, Mapping):
        entries = sorted(f"{canonical_key(k)}:{canonical_key(v)}" for k, v in value.items())
        return "{" + ",".join(entries) + "}"
    elements = as_list(value)
    if elements is not None:
        return "[" + ",".join(canonical_key(e) for e in elements) + "]"
    return f"<{type(value).__qualname__}:{value!r}>"


def _to_float(value: int | float) -> float:
    try:
        return float(value) + 0.0  # + 0.0 folds -0.0 into 0.0, so both compare equal
    except OverflowError:  # ints beyond float64 range: keep their sign and order
        return math.inf if value > 0 else -math.inf


class KeyIndex:
    """Codes of canonical keys, shared by both blocks of a path so their codes agree.

    Filled lazily: canonical keys cost a string per list or dict, and only
    filters that compare whole lists or dicts need them.
    """

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self._lock = threading.Lock()  # setdefault(k, len(codes)) is not atomic as a pair

    def lookup(self, key: str) -> int:
        """The code of a canonical key, or -1 when no encoded value has it."""
        return self.codes.get(key, -1)

    def encode(self, values: Sequence[Any]) -> list[int]:
        with self._lock:
            codes = self.codes
            return [codes.setdefault(canonical_key(v), len(codes)) for v in values]


@attrs.frozen(eq=False)
class TypedValues:
    """Typed columns of a block of candidate values (all arrays the same length).

    ``kind`` says which of the other columns is meaningful per slot;
    ``number`` is NaN wherever the slot is not a number (so comparisons are
    false there without a kind test); ``string`` is the code into the path's
    sorted vocabulary or -1; ``boolean`` is True only for True booleans;
    ``size`` a list item's length, or -1 (elements of a list never count
    for ``$size``).  ``keys()`` gives the canonical-key codes of list and
    dict slots (-1 elsewhere), computed on first use.
    """

    kind: np.ndarray  # int8
    number: np.ndarray  # float64
    string: np.ndarray  # int32
    boolean: np.ndarray  # bool
    size: np.ndarray  # int64
    composite_positions: np.ndarray = attrs.field(repr=False)  # slots holding a list or dict
    composite_values: tuple[Any, ...] = attrs.field(repr=False)
    key_index: KeyIndex = attrs.field(repr=False)
    _cache: dict[str, np.ndarray] = attrs.field(factory=dict, init=False, repr=False)

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    def keys(self) -> np.ndarray:
        """Canonical-key codes (int32) of the list and dict slots, -1 elsewhere; cached."""
        found = self._cache.get("keys")
        if found is None:
            if len(self.composite_positions):
                found = np.full(len(self), -1, dtype=np.int32)
                found[self.composite_positions] = self.key_index.encode(self.composite_values)
            else:  # no list or dict here: a read-only view, no memory per row
                found = np.broadcast_to(np.int32(-1), (len(self),))
            self._cache["keys"] = found
        return found


_PLAIN_TYPES = (str, int, float, bool)


def _plain(value: Any) -> Any:
    """numpy scalars and subclasses of the plain types (an IntEnum, a str subclass) as plain values."""
    if isinstance(value, np.generic) or (isinstance(value, np.ndarray) and value.ndim == 0):
        value = value.item()
    if isinstance(value, bool):  # before int: bool is an int subclass
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)  # the characters, not a subclass's __str__ (Enum names)
    return value


class BlockBuilder:
    """Accumulates candidates during the one build-time walk of a path.

    One kind per slot plus sparse (slot, value) lists per type: fewer
    appends than a full row of every column per candidate, which is what
    dominates build time.
    """

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.kinds: list[int] = []
        self.number_slots: list[int] = []
        self.numbers: list[float] = []
        self.string_slots: list[int] = []
        self.strings: list[str] = []
        self.true_slots: list[int] = []
        self.composite_slots: list[int] = []
        self.composites: list[Any] = []
        self.size_slots: list[int] = []
        self.sizes: list[int] = []

    def add(self, row: int, value: Any) -> None:
        kind = type(value)
        if kind not in _PLAIN_TYPES and value is not None:
            value = _plain(value)
            kind = type(value)
        slot = len(self.kinds)
        self.rows.append(row)
        if kind is str:
            self.kinds.append(KIND_STRING)
            self.string_slots.append(slot)
            self.strings.append(value)
        elif kind is int or kind is float:
            self.kinds.append(KIND_NUMBER)
            self.number_slots.append(slot)
            self.numbers.append(_to_float(value))
        elif value is None:
            self.kinds.append(KIND_NULL)
        elif kind is bool:
            self.kinds.append(KIND_BOOL)
            if value:
                self.true_slots.append(slot)
        elif isinstance(value, Mapping) or as_list(value) is not None:
            self.kinds.append(KIND_DICT if isinstance(value, Mapping) else KIND_LIST)
            self.composite_slots.append(slot)
            self.composites.append(value)
        else:
            self.kinds.append(KIND_OTHER)

    def add_list(self, row: int, value: Any, elements: Sequence[Any]) -> None:
        """A list item: the list itself (with its size, for $size) and then each element."""
        self.size_slots.append(len(self.kinds))
        self.sizes.append(len(elements))
        self.rows.append(row)
        self.composite_slots.append(len(self.kinds))
        self.composites.append(value)
        self.kinds.append(KIND_LIST)
        for element in elements:
            self.add(row, element)

    def finish(self, codes: Mapping[str, int], keys: KeyIndex, length: int | None) -> tuple[np.ndarray, TypedValues]:
        """The rows and typed columns; with ``length``, laid out row-aligned (slot = row)."""
        rows = np.asarray(self.rows, dtype=np.int64)
        m = len(self.kinds)
        # Row-aligned blocks hold at most one slot per row, so a slot maps to its row.
        place: Callable[[Any], np.ndarray] = (lambda slots: rows[np.asarray(slots, dtype=np.int64)]) if length is not None else (
            lambda slots: np.asarray(slots, dtype=np.int64)
        )
        size = m if length is None else length
        kind = np.full(size, KIND_ABSENT, dtype=np.int8)
        kind[place(range(m))] = np.asarray(self.kinds, dtype=np.int8)
        number = np.full(size, math.nan)
        number[place(self.number_slots)] = np.asarray(self.numbers, dtype=np.float64)
        string = np.full(size, -1, dtype=np.int32)
        string[place(self.string_slots)] = np.asarray([codes[s] for s in self.strings], dtype=np.int32)
        boolean = np.zeros(size, dtype=bool)
        boolean[place(self.true_slots)] = True
        sizes = np.full(size, -1, dtype=np.int64)
        sizes[place(self.size_slots)] = np.asarray(self.sizes, dtype=np.int64)
        values = TypedValues(
            kind, number, string, boolean, sizes, place(self.composite_slots), tuple(self.composites), keys
        )
        return rows, values


def absent_block(n: int, keys: KeyIndex) -> TypedValues:
    """A row-aligned block of ``n`` slots holding no candidate: read-only broadcast views, no memory per row."""
    return TypedValues(np.broadcast_to(np.int8(KIND_ABSENT), (n,)), np.broadcast_to(np.float64(math.nan), (n,)),
                       np.broadcast_to(np.int32(-1), (n,)), np.broadcast_to(np.False_, (n,)),
                       np.broadcast_to(np.int64(-1), (n,)), np.empty(0, dtype=np.int64), (), keys)
