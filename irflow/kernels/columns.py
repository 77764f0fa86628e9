"""Columnar, typed view of record metadata, built lazily per dotted path.

Filters are evaluated with numpy over these columns, never record by record:
``MetadataColumns`` walks the metadata once per path the first time a filter
reads it (build time) and keeps typed arrays (kinds, float64 numbers, string
codes into a *sorted* vocabulary, booleans, list sizes, and canonical keys
of lists and dicts, computed on first use: :mod:`.typed_values`) that every
later query reuses.  A filter naming many new paths first indexes every
field in one walk (:mod:`.field_index`): then a path costs only the records
holding its first key, and a path no record has costs nothing.

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

import functools
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Callable

import attrs
import numpy as np

from irflow.kernels.field_index import FieldIndex, index_fields
from irflow.kernels.typed_values import KIND_ABSENT, KIND_BOOL, KIND_DICT, KIND_LIST, KIND_NULL, KIND_NUMBER, \
    KIND_OTHER, KIND_STRING, BlockBuilder, KeyIndex, TypedValues, absent_block, as_list, canonical_key

__all__ = [
    "DIRECT_PATHS",
    "SPARSE_BELOW",
    "absent_column",
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

#: A filter reading more new paths than this builds the field index first (one walk) instead of one walk each.
DIRECT_PATHS = 4
#: With the index, a path held by fewer than 1 / SPARSE_BELOW of the rows gets a sparse column.
SPARSE_BELOW = 4


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
    elements = as_list(value)
    if elements is not None:
        # Only mapping elements continue the path; scalars and nested lists
        # are skipped, exactly as MongoDB's implicit array traversal does.
        found: list[Any] = []
        for element in elements:
            if isinstance(element, Mapping):
                found.extend(resolve_path(element, parts))
        return found
    return [MISSING]


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

    A path few rows have is kept sparse (``sparse``): its candidates all in
    the exploded block, the row-aligned block a read-only view of "absent",
    ``present`` and ``missing`` made on demand from the rows that have it:
    memory by the rows holding the path, not by the corpus (a filter naming
    2,000 rare or misspelled fields must not cost 2,000 full columns).
    """

    path: str
    n_rows: int
    # dense: the (n,) bool arrays; sparse: the rows that have an item, and the rows that do not miss the path
    _present: np.ndarray = attrs.field(alias="present")
    _missing: np.ndarray = attrs.field(alias="missing")
    scalar: TypedValues
    exploded: TypedValues
    rows: np.ndarray
    vocab: tuple[str, ...]
    string_codes: Mapping[str, int] = attrs.field(repr=False)
    key_index: KeyIndex = attrs.field(repr=False)
    sparse: bool = False

    @property
    def present(self) -> np.ndarray:
        """(n,) bool: the row has at least one item at the path (``$exists``); do not modify it."""
        if not self.sparse:
            return self._present
        out = np.zeros(self.n_rows, dtype=bool)
        out[self._present] = True
        return out

    @property
    def missing(self) -> np.ndarray:
        """(n,) bool: some branch of the path ends early in the row; do not modify it."""
        if not self.sparse:
            return self._missing
        out = np.ones(self.n_rows, dtype=bool)
        out[self._missing] = False
        return out

    def present_in(self, rows: np.ndarray) -> bool:
        """Whether a row selected by the (n,) bool ``rows`` has an item at the path."""
        if self.sparse:
            return bool(rows[self._present].any())
        return bool((self._present & rows).any())

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


def absent_column(path: str, n: int) -> PathColumn:
    """The column of a path no row has an item at and every row misses (a misspelled field): no memory per row."""
    keys, scalar, exploded = _absent_blocks(n)
    return PathColumn(path, n, _NO_ROWS, _NO_ROWS, scalar, exploded, _NO_ROWS, (), {}, keys, sparse=True)


@functools.lru_cache(maxsize=8)
def _absent_blocks(n: int) -> tuple[KeyIndex, TypedValues, TypedValues]:
    # shared by every absent column of n rows: read-only views, and a key index no value ever enters
    keys = KeyIndex()
    _, exploded = BlockBuilder().finish({}, keys, length=None)
    return keys, absent_block(n, keys), exploded


_NO_ROWS = np.empty(0, dtype=np.int64)
_NO_ROWS.setflags(write=False)


def _build_column(metadata: Sequence[Mapping[str, Any]], path: str, rows: np.ndarray | None = None, *,
                  sparse: bool = False) -> PathColumn:
    """Walk the records once and lay out the typed columns of one path (build time).

    With ``rows`` (ascending), only those records are walked: the others lack the path's first key,
    so they miss it.  ``sparse`` lays the column out by the rows that have it (see :class:`PathColumn`).
    """
    parts = tuple(path.split("."))
    head = parts[0] if len(parts) == 1 else None
    n = len(metadata)
    absent_rows: list[int] = []  # rows with a MISSING branch
    found_rows: list[int] = []  # rows with at least one item
    scalar, exploded = BlockBuilder(), BlockBuilder()
    single = exploded if sparse else scalar  # where a row's one non-list item goes
    walked = enumerate(metadata) if rows is None else ((row, metadata[row]) for row in rows.tolist())
    for row, record in walked:
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
            elements = as_list(item)
            if elements is None:
                single.add(row, item)
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
            elements = as_list(item)
            if elements is None:
                exploded.add(row, item)
            else:
                exploded.add_list(row, item, elements)
        if found:
            found_rows.append(row)
    vocab = tuple(sorted(set(scalar.strings).union(exploded.strings)))
    codes = {s: i for i, s in enumerate(vocab)}
    keys = KeyIndex()
    found_at = np.asarray(found_rows, dtype=np.int64)
    absent = np.asarray(absent_rows, dtype=np.int64)
    exploded_rows, exploded_values = exploded.finish(codes, keys, length=None)
    if sparse:
        walked_rows = np.arange(n, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
        clean = np.setdiff1d(walked_rows, absent, assume_unique=True)
        return PathColumn(path, n, found_at, clean, absent_block(n, keys), exploded_values, exploded_rows, vocab, codes,
                          keys, sparse=True)
    present = np.zeros(n, dtype=bool)
    present[found_at] = True
    missing = np.zeros(n, dtype=bool) if rows is None else np.ones(n, dtype=bool)
    if rows is not None:
        missing[rows] = False
    missing[absent] = True
    _, scalar_values = scalar.finish(codes, keys, length=n)
    return PathColumn(path, n, present, missing, scalar_values, exploded_values, exploded_rows, vocab, codes, keys)


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
        self._index: FieldIndex | None = None
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

    @property
    def index(self) -> FieldIndex:
        """The fields the metadata holds (one walk over every record, on first use; see :mod:`.field_index`)."""
        if self._index is None:
            with self._lock:
                if self._index is None:
                    self._index = index_fields(self._metadata)
        return self._index

    def prepare(self, paths: Iterable[str]) -> None:
        """Build the columns of ``paths`` not built yet, with a cost that does not grow with their number.

        A few paths are each walked for (one pass over the records each, as
        :meth:`column` does); more than :data:`DIRECT_PATHS` build the
        :attr:`index` (one pass) and then cost only the rows holding each
        path's first key: a misspelled field costs nothing more.
        """
        todo = [path for path in dict.fromkeys(paths) if path not in self._columns]
        if len(todo) > DIRECT_PATHS:
            self.index  # noqa: B018  -- built once, before the columns that use it
            for path in todo:
                self.column(path)

    def column(self, path: str) -> PathColumn:
        """The typed column of a dotted path, built on first use and cached."""
        found = self._columns.get(path)
        if found is None:
            with self._lock:
                found = self._columns.get(path)
                if found is None:
                    found = self._columns[path] = self._build(path)
        return found

    def _build(self, path: str) -> PathColumn:
        index = self._index
        if index is None:  # no index yet: one walk over every record
            return _build_column(self._metadata, path)
        parts = tuple(path.split("."))
        if index.surely_absent(parts):
            return absent_column(path, self.n_rows)
        rows = index.rows_with_head(parts[0])
        return _build_column(self._metadata, path, rows, sparse=len(rows) * SPARSE_BELOW < self.n_rows)

    def __repr__(self) -> str:
        return f"MetadataColumns(n_rows={self.n_rows}, cached_paths={list(self._columns)})"
