"""Columnar, typed view of record metadata, built lazily per dotted path.

Filters are evaluated with numpy over these columns, never record by record:
``MetadataColumns`` walks the metadata once per path the first time a filter
reads it (build time) and keeps typed arrays (kinds, float64 numbers, string
codes into a *sorted* vocabulary, booleans, list sizes, and canonical keys
of lists and dicts, computed on first use) that every later query reuses.

Path resolution follows MongoDB.  ``resolve_path(doc, ("a", "b"))`` returns
the *items* found at ``a.b``: a mapping step looks the key up (absent ->
``MISSING``); a list met on the way is traversed through its mapping
elements only (``{"a": [{"b": 1}, {}]}`` gives ``[1, MISSING]``; scalar and
nested-list elements are skipped, so ``{"a": []}`` gives no item at all);
a scalar met on the way gives ``MISSING``.  Path components are always
mapping keys: ``"a.0"`` does not index into a list (unlike MongoDB).

The *candidates* a value operator is tested against are every found item
plus, when an item is a list, each of its elements (one level, as MongoDB
does).  A row whose only item is a single non-list value is stored in the
row-aligned ``scalar`` block; every other candidate goes to the
``exploded`` block, a (row, candidate) layout with the same typed columns.

>>> cols = MetadataColumns([{"owner": "me", "tags": ["a", "b"]}, {"owner": "you"}])
>>> cols.column("owner").vocab
('me', 'you')
>>> cols.column("tags").present.tolist()
[True, False]
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import attrs
import numpy as np

__all__ = [
    "KIND_ABSENT",
    "KIND_NULL",
    "KIND_BOOL",
    "KIND_NUMBER",
    "KIND_STRING",
    "KIND_LIST",
    "KIND_DICT",
    "KIND_OTHER",
    "MISSING",
    "MetadataColumns",
    "PathColumn",
    "TypedValues",
    "canonical_key",
    "resolve_path",
]

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


class _Missing:
    """The marker of a path step that found no key (MongoDB's "missing")."""

    _instance: "_Missing | None" = None

    def __new__(cls) -> "_Missing":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def _as_list(value: Any) -> list[Any] | tuple[Any, ...] | None:
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


def resolve_path(value: Any, parts: Sequence[str]) -> list[Any]:
    """The items found at a dotted path (split into ``parts``), MongoDB-style.

    ``MISSING`` marks a branch where the path ends early; an empty result
    means the path leads only into lists without mapping elements.

    >>> resolve_path({"a": [{"b": 1}, {"c": 2}, 5]}, ("a", "b"))
    [1, MISSING]
    """
    if not parts:
        return [value]
    if isinstance(value, Mapping):
        if parts[0] in value:
            return resolve_path(value[parts[0]], parts[1:])
        return [MISSING]
    elements = _as_list(value)
    if elements is not None:
        # Only mapping elements continue the path; scalars and nested lists
        # are skipped, exactly as MongoDB's implicit array traversal does.
        found: list[Any] = []
        for element in elements:
            if isinstance(element, Mapping):
                found.extend(resolve_path(element, parts))
        return found
    return [MISSING]


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
    elements = _as_list(value)
    if elements is not None:
        return "[" + ",".join(canonical_key(e) for e in elements) + "]"
    return f"<{type(value).__qualname__}:{value!r}>"


def _to_float(value: int | float) -> float:
    try:
        return float(value) + 0.0  # + 0.0 folds -0.0 into 0.0, so both compare equal
    except OverflowError:  # ints beyond float64 range: keep their sign and order
        return math.inf if value > 0 else -math.inf


class _KeyIndex:
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
    key_index: _KeyIndex = attrs.field(repr=False)
    _cache: dict[str, np.ndarray] = attrs.field(factory=dict, init=False, repr=False)

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    def keys(self) -> np.ndarray:
        """Canonical-key codes (int32) of the list and dict slots, -1 elsewhere; cached."""
        found = self._cache.get("keys")
        if found is None:
            found = np.full(len(self), -1, dtype=np.int32)
            if len(self.composite_positions):
                found[self.composite_positions] = self.key_index.encode(self.composite_values)
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


class _BlockBuilder:
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
        elif isinstance(value, Mapping) or _as_list(value) is not None:
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

    def finish(self, codes: Mapping[str, int], keys: _KeyIndex, length: int | None) -> tuple[np.ndarray, TypedValues]:
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


@attrs.frozen(eq=False)
class PathColumn:
    """Everything filters need to know about one dotted path, as numpy arrays.

    ``present`` (n,): the row has at least one item at the path
    (``$exists``).  ``missing`` (n,): some branch of the path ends early
    (matches ``None`` equality).  ``scalar``: row-aligned candidates of rows
    whose only item is one non-list value.  ``exploded`` with ``rows``: all
    other candidates.  ``vocab``: every string seen, sorted, so string
    equality and ranges are integer comparisons on ``string`` codes;
    ``string_codes`` maps a string to its code.  ``key_index`` holds the
    codes of canonical keys of lists and dicts (filled lazily).
    """

    path: str
    n_rows: int
    present: np.ndarray
    missing: np.ndarray
    scalar: TypedValues
    exploded: TypedValues
    rows: np.ndarray
    vocab: tuple[str, ...]
    string_codes: Mapping[str, int] = attrs.field(repr=False)
    key_index: _KeyIndex = attrs.field(repr=False)

    def rows_where(self, predicate: Callable[[TypedValues], np.ndarray], *, scalar: bool = True) -> np.ndarray:
        """Rows (n,) with at least one candidate for which ``predicate`` holds.

        ``predicate`` maps a block to a fresh bool array of its length; the
        exploded hits are scattered onto their rows.  ``scalar=False`` skips
        the row-aligned block when it cannot match (``$size`` needs lists).
        """
        out = predicate(self.scalar) if scalar else np.zeros(self.n_rows, dtype=bool)
        if len(self.rows):
            hits = predicate(self.exploded)
            out[self.rows[hits]] = True
        return out


def _build_column(metadata: Sequence[Mapping[str, Any]], path: str) -> PathColumn:
    """Walk the records once and lay out the typed columns of one path (build time)."""
    parts = tuple(path.split("."))
    head = parts[0] if len(parts) == 1 else None
    n = len(metadata)
    absent_rows: list[int] = []  # rows with a MISSING branch
    found_rows: list[int] = []  # rows with at least one item
    scalar, exploded = _BlockBuilder(), _BlockBuilder()
    for row, record in enumerate(metadata):
        if head is not None:  # a top-level field: one dict lookup, no recursion
            if head not in record:
                absent_rows.append(row)
                continue
            items = [record[head]]
        else:
            items = resolve_path(record, parts)
        if len(items) == 1:
            item = items[0]
            if item is MISSING:
                absent_rows.append(row)
                continue
            found_rows.append(row)
            elements = _as_list(item)
            if elements is None:
                scalar.add(row, item)
            else:
                exploded.add_list(row, item, elements)
            continue
        found = False
        for item in items:
            if item is MISSING:
                if not absent_rows or absent_rows[-1] != row:
                    absent_rows.append(row)
                continue
            found = True
            elements = _as_list(item)
            if elements is None:
                exploded.add(row, item)
            else:
                exploded.add_list(row, item, elements)
        if found:
            found_rows.append(row)
    present = np.zeros(n, dtype=bool)
    present[np.asarray(found_rows, dtype=np.int64)] = True
    missing = np.zeros(n, dtype=bool)
    missing[np.asarray(absent_rows, dtype=np.int64)] = True
    vocab = tuple(sorted(set(scalar.strings).union(exploded.strings)))
    codes = {s: i for i, s in enumerate(vocab)}
    keys = _KeyIndex()
    _, scalar_values = scalar.finish(codes, keys, length=n)
    rows, exploded_values = exploded.finish(codes, keys, length=None)
    return PathColumn(path, n, present, missing, scalar_values, exploded_values, rows, vocab, codes, keys)


def _record_metadata(value: Any, row: int) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"metadata of row {row} must be a mapping, got {type(value).__name__}")
    return value


class MetadataColumns:
    """A columnar view of a list of metadata mappings, one typed column per dotted path.

    Columns are built the first time a path is read and cached, so a corpus
    pays only for the fields its filters use.  Treat the metadata as
    immutable once handed over.

    >>> cols = MetadataColumns([{"n": 1}, {"n": 2.5}, {}])
    >>> cols.n_rows, cols.column("n").present.tolist()
    (3, [True, True, False])
    """

    def __init__(self, metadata: Sequence[Mapping[str, Any] | None]) -> None:
        self._metadata: tuple[Mapping[str, Any], ...] = tuple(
            _record_metadata(m, row) for row, m in enumerate(metadata)
        )
        self._columns: dict[str, PathColumn] = {}
        self._lock = threading.Lock()  # two threads asking for one path build it once

    @property
    def n_rows(self) -> int:
        """The number of rows (records) the view covers."""
        return len(self._metadata)

    def __len__(self) -> int:
        return self.n_rows

    @property
    def cached_paths(self) -> tuple[str, ...]:
        """The paths whose columns are built so far."""
        return tuple(self._columns)

    def column(self, path: str) -> PathColumn:
        """The typed column of a dotted path, built on first use and cached."""
        found = self._columns.get(path)
        if found is None:
            with self._lock:
                found = self._columns.get(path)
                if found is None:
                    found = self._columns[path] = _build_column(self._metadata, path)
        return found

    def __repr__(self) -> str:
        return f"MetadataColumns(n_rows={self.n_rows}, cached_paths={list(self._columns)})"
