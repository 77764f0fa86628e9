"""The Mongo-style metadata filter language, compiled to numpy predicates (validated by :mod:`irflow.kernels.filter_spec`).

A filter is a mapping: ``{"owner": "me", "stars": {"$gte": 10}}``.  Top-level
keys are dotted field paths (implicit AND) or the document operators
``$and $or $nor`` (non-empty lists of filter documents).  A field takes a
plain value (equality) or an operator document with ``$eq $ne $gt $gte $lt
$lte $in $nin $exists $all $size $not``.

Semantics follow MongoDB (see ``irflow.kernels.columns`` for path resolution):

- A value operator matches when *any candidate* matches: the value found at
  the path or, for a list, any of its elements (``{"tags": "x"}`` matches
  ``["x", "y"]``; ``{"tags": ["x", "y"]}`` matches the list itself).
  Through lists of mappings too: ``{"a.b": 1}`` matches ``{"a": [{"b": 1}]}``.
- Types: numbers (int and float together: 1 == 1.0), strings, booleans (a
  type of their own: True != 1), None, lists, dicts (key order ignored).
  Ranges compare numbers with numbers and strings with strings
  (lexicographic by code point); across types, or on a missing field, false.
- Missing fields: ``{f: None}``, ``$eq: None`` and ``$in`` holding None match
  null *or* missing; ``$exists: False`` matches missing; ``$ne``, ``$nin``
  and ``$not`` are the row-level negations, so they match missing fields.
- ``$all`` is an AND of equalities (an empty list matches nothing);
  ``$size`` matches a list of exactly that length.

Not supported, rejected with a ``FilterError``: ``$regex``, ``$elemMatch``,
``$type``, ``$expr`` and other operators; NaN (it equals nothing); keys
starting with ``$`` inside plain values.  Numbers are compared as float64,
so integers beyond 2**53 compare approximately; path parts never index
into lists (``"a.0"`` is the key ``"0"``).

>>> from irflow.kernels.columns import MetadataColumns
>>> cols = MetadataColumns([{"owner": "me", "tags": ["cli"]}, {"owner": "you"}, {}])
>>> compile_filter({"$or": [{"owner": "me"}, {"tags": {"$exists": False}}]}).mask(cols).tolist()
[True, True, True]
>>> compile_filter({"owner": {"$ne": "me"}}).mask(cols).tolist()
[False, True, True]
"""

from __future__ import annotations

import bisect
import functools
import json
import math
import threading
from collections.abc import Mapping
from typing import Any, Protocol

import attrs
import numpy as np

from irflow.kernels.columns import KIND_BOOL, KIND_NULL, MetadataColumns, PathColumn, TypedValues, canonical_key
from irflow.kernels.filter_spec import FIELD_OPERATORS, LOGICAL_OPERATORS, normalize_filter
from irflow.util.cachekey import UnkeyableError, cache_key

__all__ = [
    "FIELD_OPERATORS",
    "LOGICAL_OPERATORS",
    "CompiledFilter",
    "compile_filter",
    "normalize_filter",
]

# --------------------------------------------------------------------------------------
# The plan: a small tree of nodes, each turning columns into a fresh bool row mask with
# numpy operations only.
# --------------------------------------------------------------------------------------


class _Node(Protocol):
    def mask(self, columns: MetadataColumns) -> np.ndarray: ...


@attrs.frozen(eq=False)
class _Every:
    def mask(self, columns: MetadataColumns) -> np.ndarray:
        return np.ones(columns.n_rows, dtype=bool)


@attrs.frozen(eq=False)
class _Nothing:
    def mask(self, columns: MetadataColumns) -> np.ndarray:
        return np.zeros(columns.n_rows, dtype=bool)


@attrs.frozen(eq=False)
class _AllOf:
    children: tuple[_Node, ...]

    def mask(self, columns: MetadataColumns) -> np.ndarray:
        out = self.children[0].mask(columns)
        for child in self.children[1:]:
            if not out.any():  # nothing left to narrow: skip the remaining clauses
                break
            out &= child.mask(columns)
        return out


@attrs.frozen(eq=False)
class _AnyOf:
    children: tuple[_Node, ...]

    def mask(self, columns: MetadataColumns) -> np.ndarray:
        out = self.children[0].mask(columns)
        for child in self.children[1:]:
            out |= child.mask(columns)
        return out


@attrs.frozen(eq=False)
class _Negate:
    """Row-level NOT: this is what makes $ne, $nin, $not and $nor match missing fields."""

    child: _Node

    def mask(self, columns: MetadataColumns) -> np.ndarray:
        out = self.child.mask(columns)
        negated: np.ndarray = np.logical_not(out, out=out)
        return negated


@attrs.frozen(eq=False)
class _Exists:
    path: str
    wanted: bool

    def mask(self, columns: MetadataColumns) -> np.ndarray:
        present = columns.column(self.path).present
        return present.copy() if self.wanted else ~present


@attrs.frozen(eq=False)
class _Size:
    path: str
    size: int

    def mask(self, columns: MetadataColumns) -> np.ndarray:
        # Lists always live in the exploded block, so the row-aligned one is skipped.
        return columns.column(self.path).rows_where(lambda block: block.size == self.size, scalar=False)


def _as_float(value: int | float) -> float:
    try:
        return float(value) + 0.0
    except OverflowError:  # same rule as the columns: huge ints become +-inf
        return math.inf if value > 0 else -math.inf


@attrs.frozen(eq=False)
class _Equal:
    """Any candidate equals one of ``values`` ($eq, implicit equality, $in); None adds missing."""

    path: str
    numbers: np.ndarray
    strings: tuple[str, ...]
    booleans: tuple[bool, ...]
    none: bool
    keys: tuple[str, ...]  # canonical keys of list and dict values

    @classmethod
    def of(cls, path: str, values: list[Any]) -> "_Equal":
        numbers: list[float] = []
        strings: list[str] = []
        booleans: set[bool] = set()
        keys: list[str] = []
        none = False
        for value in values:
            if value is None:
                none = True
            elif isinstance(value, bool):
                booleans.add(value)
            elif isinstance(value, (int, float)):
                numbers.append(_as_float(value))
            elif isinstance(value, str):
                strings.append(value)
            else:
                keys.append(canonical_key(value))
        return cls(path, np.asarray(sorted(set(numbers)), dtype=np.float64), tuple(dict.fromkeys(strings)),
                   tuple(sorted(booleans)), none, tuple(dict.fromkeys(keys)))

    def _block(self, block: TypedValues, column: PathColumn) -> np.ndarray:
        hits: list[np.ndarray] = []
        if self.numbers.size == 1:
            hits.append(block.number == self.numbers[0])
        elif self.numbers.size:
            hits.append(np.isin(block.number, self.numbers))
        _codes_equal(hits, block.string, [column.string_codes.get(s, -1) for s in self.strings])
        if self.keys:
            # keys() first: it registers this block's lists and dicts in the shared index.
            block_keys = block.keys()
            _codes_equal(hits, block_keys, [column.key_index.lookup(k) for k in self.keys])
        if self.booleans:
            is_bool = block.kind == KIND_BOOL
            hits.append(is_bool if len(self.booleans) == 2 else is_bool & (block.boolean == self.booleans[0]))
        if self.none:
            hits.append(block.kind == KIND_NULL)
        if not hits:
            return np.zeros(len(block), dtype=bool)
        out = hits[0]
        for hit in hits[1:]:
            out |= hit
        return out

    def mask(self, columns: MetadataColumns) -> np.ndarray:
        column = columns.column(self.path)
        out = column.rows_where(lambda block: self._block(block, column))
        if self.none:
            out |= column.missing
        return out


def _codes_equal(hits: list[np.ndarray], codes: np.ndarray, wanted: list[int]) -> None:
    """Append the slots whose code is one of ``wanted`` (-1, a value the column never saw, is dropped)."""
    wanted = [c for c in wanted if c >= 0]
    if len(wanted) == 1:
        hits.append(codes == wanted[0])
    elif wanted:
        hits.append(np.isin(codes, wanted))


@attrs.frozen(eq=False)
class _Range:
    path: str
    op: str
    bound: float | str

    def mask(self, columns: MetadataColumns) -> np.ndarray:
        column = columns.column(self.path)
        if isinstance(self.bound, str):
            return self._strings(column)
        bound, op = self.bound, self.op
        # Non-numbers hold NaN in ``number``, and every comparison with NaN is false.
        compare = {"$gt": np.greater, "$gte": np.greater_equal, "$lt": np.less, "$lte": np.less_equal}[op]
        return column.rows_where(lambda block: compare(block.number, bound))

    def _strings(self, column: PathColumn) -> np.ndarray:
        # The vocabulary is sorted, so a string range is a range of codes.
        vocab, bound = column.vocab, self.bound
        if self.op == "$gt":
            low, high = bisect.bisect_right(vocab, bound), len(vocab)
        elif self.op == "$gte":
            low, high = bisect.bisect_left(vocab, bound), len(vocab)
        elif self.op == "$lt":
            low, high = 0, bisect.bisect_left(vocab, bound)
        else:
            low, high = 0, bisect.bisect_right(vocab, bound)
        if low >= high:
            return np.zeros(column.n_rows, dtype=bool)
        return column.rows_where(lambda block: (block.string >= low) & (block.string < high))


def _all_of(nodes: list[_Node]) -> _Node:
    if not nodes:
        return _Every()
    return nodes[0] if len(nodes) == 1 else _AllOf(tuple(nodes))


def _is_operators(value: Any) -> bool:
    # After normalization plain dict values hold no '$' keys, so this test is exact.
    return isinstance(value, dict) and bool(value) and all(k.startswith("$") for k in value)


def _compile_operators(path: str, ops: dict[str, Any]) -> _Node:
    nodes: list[_Node] = []
    for op, arg in ops.items():
        if op == "$eq":
            nodes.append(_Equal.of(path, [arg]))
        elif op == "$ne":
            nodes.append(_Negate(_Equal.of(path, [arg])))
        elif op == "$in":
            nodes.append(_Equal.of(path, arg))
        elif op == "$nin":
            nodes.append(_Negate(_Equal.of(path, arg)))
        elif op == "$all":  # MongoDB: an AND of equalities; an empty $all matches nothing
            nodes.append(_all_of([_Equal.of(path, [v]) for v in arg]) if arg else _Nothing())
        elif op == "$exists":
            nodes.append(_Exists(path, arg))
        elif op == "$size":
            nodes.append(_Size(path, arg))
        elif op == "$not":
            nodes.append(_Negate(_compile_operators(path, arg)))
        else:
            nodes.append(_Range(path, op, arg if isinstance(arg, str) else _as_float(arg)))
    return _all_of(nodes)


def _compile_document(doc: dict[str, Any], fields: set[str]) -> _Node:
    nodes: list[_Node] = []
    for key, value in doc.items():
        if key in LOGICAL_OPERATORS:
            children = tuple(_compile_document(sub, fields) for sub in value)
            if key == "$and":
                nodes.append(_all_of(list(children)))
            else:
                any_of = children[0] if len(children) == 1 else _AnyOf(children)
                nodes.append(any_of if key == "$or" else _Negate(any_of))
        else:
            fields.add(key)
            nodes.append(_compile_operators(key, value) if _is_operators(value) else _Equal.of(key, [value]))
    return _all_of(nodes)


@attrs.frozen
class CompiledFilter:
    """A validated filter compiled to a vectorized predicate; equal and hashed by its canonical form.

    ``canonical`` is the normalized spec as canonical JSON (keys sorted),
    ``spec`` a fresh copy of it as a dict, ``fields`` the dotted paths it
    reads.  ``mask(columns)`` runs numpy operations only.

    >>> cols = MetadataColumns([{"stars": 3}, {"stars": 12}, {}])
    >>> compile_filter({"stars": {"$gte": 10}}).mask(cols).tolist()
    [False, True, False]
    """

    canonical: str
    fields: tuple[str, ...] = attrs.field(eq=False)
    _plan: _Node = attrs.field(eq=False, repr=False, alias="plan")

    @property
    def spec(self) -> dict[str, Any]:
        """The normalized filter (a fresh copy: mutating it does not touch the cache)."""
        spec: dict[str, Any] = json.loads(self.canonical)
        return spec

    @property
    def matches_all(self) -> bool:
        """True for the empty filter, so callers can skip masking altogether."""
        return self.canonical == "{}"

    def mask(self, columns: MetadataColumns) -> np.ndarray:
        """The rows (bool, shape (n_rows,)) the filter keeps."""
        if not isinstance(columns, MetadataColumns):
            raise TypeError(f"CompiledFilter.mask needs MetadataColumns, got {type(columns).__name__}")
        columns.prepare(self.fields)  # many new paths: one walk indexing every field, not one walk each
        return self._plan.mask(columns)


@functools.lru_cache(maxsize=1024)
def _compile_canonical(canonical: str) -> CompiledFilter:
    fields: set[str] = set()
    plan = _compile_document(json.loads(canonical), fields)
    return CompiledFilter(canonical, tuple(sorted(fields)), plan)


#: Compiled filters by the type-exact key of the spec as given (oldest dropped past 1024).
_COMPILED: dict[Any, CompiledFilter] = {}
_COMPILED_LOCK = threading.Lock()

#: The canonical form of "no filter" (what normalize_filter makes of None, as JSON).
_NO_FILTER = json.dumps(normalize_filter(None), sort_keys=True, separators=(",", ":"))


def compile_filter(spec: Mapping[str, Any] | CompiledFilter | None) -> CompiledFilter:
    """Validate and compile a filter, cached by its canonical form.

    The cache key is canonical JSON of the normalized spec: key order does
    not matter, and ``True`` and ``1`` stay distinct (they would collide as
    Python dict keys).  ``None`` and ``{}`` keep every row.  A spec seen
    before (the same type-exact value, :func:`~irflow.util.cachekey.cache_key`)
    is found without normalizing it again: a filter passed with every query
    is validated once.

    >>> compile_filter({"a": 1, "b": 2}) is compile_filter({"b": 2, "a": 1})
    True
    """
    if isinstance(spec, CompiledFilter):
        return spec
    if spec is None:  # no filter (every search() without one): the same compiled "every row", without JSON
        return _compile_canonical(_NO_FILTER)
    try:
        key: Any = cache_key(spec)  # type-exact: {"n": True} never finds the filter of {"n": 1}
    except UnkeyableError:
        key = None
    found = _COMPILED.get(key) if key is not None else None
    if found is not None:  # this very filter was validated and compiled before (a search() per query)
        return found
    normalized = normalize_filter(spec)
    compiled = _compile_canonical(json.dumps(normalized, sort_keys=True, separators=(",", ":")))
    if key is not None:
        with _COMPILED_LOCK:
            if len(_COMPILED) >= 1024:
                _COMPILED.pop(next(iter(_COMPILED)))
            _COMPILED[key] = compiled
    return compiled
