"""The data that flows between stages: query batches and columnar candidates.

A stage never sees one candidate at a time.  It receives a whole batch — all
the queries of a run and, for each, its ranked candidates — as a handful of
flat numpy columns, and returns a new batch.  Everything here is immutable:
arrays are read-only views and every helper returns a new object, so a stage
can never disturb what an earlier stage (or a trace) holds.

- :class:`QueryBatch` — the query texts of a run, and for each text the
  original query it came from (a formulate stage turns one query into
  several; the collapse stage merges them back).
- :class:`Scale` — what a score means (cosine, bm25, rrf, ...), so validation
  can refuse what makes no sense on it and traces can say what a number is.
- :class:`Candidates` — ranked candidates of every query of a batch: columns
  ``query_index``, ``row``, ``score``, ``rank`` (1-based within its query),
  plus named *provenance* columns (``"dense.score"``, ``"fuse.dense.rank"``,
  ...) that every later stage carries along so a final hit can still tell
  how each channel ranked it.

>>> batch = QueryBatch.of(["sql parser", "http client"])
>>> c = Candidates(batch, query_index=[0, 0, 1], row=[7, 3, 5], score=[0.9, 0.4, 0.8], scale="cosine")
>>> c.rank.tolist(), c.counts().tolist()
([1, 2, 1], [2, 1])
>>> c.cut(1).row.tolist()
[7, 5]
"""

from __future__ import annotations

import hashlib
from types import MappingProxyType
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from irflow.engine.report.batchview import candidates_view
from irflow.engine.scale import Scale
from irflow.errors import ArgumentError

__all__ = ["Scale", "QueryBatch", "Candidates", "frozen_array", "fill_value"]


def frozen_array(value: Any, dtype: Any) -> np.ndarray:
    """A 1-d read-only view of ``value`` as ``dtype`` (copies only to convert).

    The view is read-only, the caller's array keeps its own flags: a stage
    output can be shared by later stages and traces without defensive copies.
    """
    if (isinstance(value, np.ndarray) and not value.flags.writeable and value.ndim == 1
            and value.dtype == dtype):
        return value  # already frozen: stage outputs pass their columns on without copies or views
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype == dtype:
        array = value.view()
    else:
        array = np.asarray(value, dtype=dtype).reshape(-1).view()
    array.flags.writeable = False
    return array


def _sealed(array: np.ndarray) -> np.ndarray:
    """A read-only view of ``array``, itself made read-only: numpy refuses to make the view writeable again.

    For the columns one module shares with every batch: whoever receives
    one cannot turn its flag back and change it for all the others.
    """
    array.flags.writeable = False
    view = array.view()
    view.flags.writeable = False
    return view


# shared read-only empty columns (of inactive batches)
_EMPTY_INT32, _EMPTY_INT64, _EMPTY_FLOAT64 = (_sealed(np.empty(0, t)) for t in (np.int32, np.int64, np.float64))
_ONE_EMPTY_QUERY = _sealed(np.zeros(2, dtype=np.int64))  # the offsets of one query with no candidates
_ONE_ORIGIN = _sealed(np.zeros(1, dtype=np.int32))  # the origin of a raw batch of one query

#: Largest one-query batch whose offsets and ranks are shared (:func:`_one_query_ranks`).
_SHARED_RANKS_MAX = 4096
_RANKS = _sealed(np.arange(1, _SHARED_RANKS_MAX + 1, dtype=np.int32))  # a batch's ranks: a prefix of it
_ONE_QUERY_OFFSETS: dict[int, np.ndarray] = {}


def _one_query_ranks(m: int) -> tuple[np.ndarray, np.ndarray]:
    """``offsets`` ``[0, m]`` and ``rank`` ``1..m`` of a one-query batch of ``m <= 4096`` candidates, sealed, shared.

    Every stage of every ``search()`` makes a one-query batch: the ranks
    are a prefix of one shared column and the offsets are made once per size
    (at most 4096 two-element arrays), not four numpy calls a batch.
    """
    offsets = _ONE_QUERY_OFFSETS.get(m)
    if offsets is None:  # racing threads make equal entries: either stands
        offsets = _ONE_QUERY_OFFSETS[m] = _sealed(np.array([0, m], dtype=np.int64))
    return offsets, _RANKS[:m]


def _frozen_gather(column: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``column[index]``: a new array (fancy indexing copies), made read-only in place."""
    gathered: np.ndarray = column[index]
    gathered.flags.writeable = False
    return gathered


# the column converters of QueryBatch and Candidates (named functions: attrs and type checkers read them)
def _int32_column(value: Any) -> np.ndarray:
    return frozen_array(value, np.int32)


def _int64_column(value: Any) -> np.ndarray:
    return frozen_array(value, np.int64)


def _float64_column(value: Any) -> np.ndarray:
    return frozen_array(value, np.float64)


def _texts_of(instance: "QueryBatch") -> tuple[str, ...]:
    return instance.texts


def _texts(value: Iterable[str]) -> tuple[str, ...]:
    """The texts of a query batch: a list, tuple or other ordered iterable of strings (ArgumentError otherwise)."""
    if isinstance(value, str):
        raise ArgumentError("query texts must be a sequence of strings, got a single string; wrap it in a list")
    if isinstance(value, Mapping):  # iterating it would run its keys as queries, silently
        raise ArgumentError(f"a query batch must be a list of query strings, got a {type(value).__name__}; "
                            "pass list(d) to run its keys or list(d.values()) to run its values")
    if isinstance(value, (set, frozenset)):  # no order: the hit lists could not be matched to their queries
        raise ArgumentError(f"a query batch must be a list of query strings, got a {type(value).__name__}, which "
                            "has no order; pass a list (e.g. sorted(queries))")
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise ArgumentError(f"a query batch must be a list of query strings, got {type(value).__name__}; "
                            "decode it first (e.g. data.decode('utf-8'))")
    try:
        texts = tuple(value)
    except TypeError:
        raise ArgumentError(f"a query must be a string or a list of strings, got {type(value).__name__}") from None
    for text in texts:
        if not isinstance(text, str):
            shown = repr(text) if len(repr(text)) <= 80 else repr(text)[:77] + "..."
            raise ArgumentError(f"every query must be a string, got {type(text).__name__}: {shown}")
    return texts


def _identity_origin(instance: "QueryBatch") -> np.ndarray:
    return np.arange(len(instance.texts), dtype=np.int32)


@attrs.frozen(eq=False)
class QueryBatch:
    """The query texts of one run, each tied to the original query it came from.

    The raw batch (what the caller passed) has ``origin == arange(n)`` and
    ``originals == texts``.  A formulate stage that turns each original query
    into several texts returns a batch whose ``origin[i]`` is the index of the
    original query text ``i`` came from; ``root()`` gives the original batch
    back (what a collapse stage outputs).

    >>> b = QueryBatch.of(["a", "b"]).expand([["a1", "a2"], ["b"]])
    >>> b.texts, b.origin.tolist(), b.n_original
    (('a1', 'a2', 'b'), [0, 0, 1], 2)
    """

    texts: tuple[str, ...] = attrs.field(converter=_texts)
    origin: np.ndarray = attrs.field(
        default=attrs.Factory(_identity_origin, takes_self=True),
        converter=_int32_column,
    )
    originals: tuple[str, ...] = attrs.field(
        default=attrs.Factory(_texts_of, takes_self=True), converter=_texts
    )
    # True for a batch made by QueryBatch.of: the root by construction (root() without comparing arrays)
    _raw: bool = attrs.field(default=False, init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.origin.size != len(self.texts):
            raise ValueError(f"origin has {self.origin.size} entries for {len(self.texts)} query texts")
        if self.origin.size and (self.origin.min() < 0 or self.origin.max() >= len(self.originals)):
            raise ValueError(f"origin values must index the {len(self.originals)} original queries")

    @classmethod
    def of(cls, texts: Iterable[str]) -> "QueryBatch":
        """The raw batch of ``texts`` (each its own original query)."""
        texts = _texts(texts)
        # what the constructor makes of checked texts (origin 0..n-1, originals = texts), without
        # re-checking them: every run starts with one
        new = object.__new__(cls)
        if len(texts) == 1:  # one query (every search()): a shared, sealed origin
            origin = _ONE_ORIGIN
        else:
            origin = np.arange(len(texts), dtype=np.int32)
            origin.flags.writeable = False
        for name, value in (("texts", texts), ("origin", origin), ("originals", texts), ("_raw", True)):
            object.__setattr__(new, name, value)
        return new

    @property
    def n_original(self) -> int:
        """Number of original queries."""
        return len(self.originals)

    @property
    def is_root(self) -> bool:
        """True when this is the raw batch (no reformulation)."""
        if self._raw:  # made by QueryBatch.of: the root by construction
            return True
        return self.texts == self.originals and bool(np.array_equal(self.origin, np.arange(len(self.texts))))

    def root(self) -> "QueryBatch":
        """The batch of original queries."""
        if self._raw:
            return self
        return self if self.is_root else QueryBatch(self.originals)

    def expand(self, texts_per_query: Sequence[Sequence[str]]) -> "QueryBatch":
        """A new batch with, for each text of this one, the texts it becomes.

        Used by formulation: ``texts_per_query[i]`` replaces ``texts[i]``; the
        new texts keep pointing at the original query ``texts[i]`` came from.
        """
        if len(texts_per_query) != len(self.texts):
            raise ValueError(f"expand needs one list per query text ({len(self.texts)}), got {len(texts_per_query)}")
        sizes = np.fromiter((len(t) for t in texts_per_query), dtype=np.int64, count=len(texts_per_query))
        flat = tuple(text for texts in texts_per_query for text in texts)
        return QueryBatch(flat, np.repeat(self.origin, sizes), self.originals)

    def __len__(self) -> int:
        return len(self.texts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QueryBatch):
            return NotImplemented
        return (self is other) or (
            self.texts == other.texts and self.originals == other.originals
            and bool(np.array_equal(self.origin, other.origin))
        )

    def __hash__(self) -> int:
        return hash((self.texts, self.originals, self.origin.tobytes()))

    def __repr__(self) -> str:
        if self.is_root:
            return f"QueryBatch({list(self.texts)!r})"
        return f"QueryBatch({list(self.texts)!r}, origin={self.origin.tolist()}, n_original={self.n_original})"


def _provenance(value: Mapping[str, Any] | None) -> Mapping[str, np.ndarray]:
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, Mapping):
        raise TypeError(f"provenance must be a mapping of column name -> array, got {type(value).__name__}")
    columns: dict[str, np.ndarray] = {}
    for name, column in value.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"provenance column names must be non-empty strings, got {name!r}")
        if type(column) is np.ndarray and column.ndim == 1 and not column.flags.writeable:
            columns[name] = column  # already a frozen column (carried on from an input): as frozen_array would
            continue
        array = np.asarray(column)
        columns[name] = frozen_array(array, array.dtype)
    return MappingProxyType(columns)


def _fill_value(dtype: np.dtype) -> Any:
    """What an absent provenance entry holds: NaN for floats, 0 for ints, False for bools."""
    if dtype.kind == "f":
        return np.nan
    if dtype.kind == "b":
        return False
    if dtype.kind in "iu":
        return 0
    if dtype.kind in "US":
        return ""
    return None


@attrs.frozen(eq=False)
class Candidates:
    """Ranked candidates of every query of a batch, as flat numpy columns.

    Rows of query ``i`` come before those of query ``i + 1``; within a query
    the order *is* the ranking, and ``rank`` (1-based) is derived from it, so
    it can never disagree with the order.  ``query_index`` indexes
    ``queries.texts``; ``queries.origin[query_index]`` is the original query.

    ``provenance`` holds extra row-aligned columns named ``"<stage>.<what>"``
    (``"dense.score"``, ``"lexical.rank"``, ``"fuse.dense.contribution"``):
    each stage adds its own and carries the others through (:meth:`take`
    gathers them with the candidates), so the final batch still says how
    every channel scored each candidate.

    ``active=False`` marks the output of a stage that a recipe's ``when``
    switched off: it is empty, and a fuse stage ignores it.

    Construct with the columns in ranked order (or use :meth:`ranked` to sort
    by score); every array is converted once and stored read-only.  Ties, the
    seed's rule: a first ranking (the kernels, :meth:`ranked`) orders equal
    scores by corpus row, lowest first; a stage that re-sorts what it
    received (:meth:`sorted_by_score`) keeps the order it received among
    equal scores (a stable sort).
    """

    queries: QueryBatch = attrs.field(validator=attrs.validators.instance_of(QueryBatch))
    query_index: np.ndarray = attrs.field(converter=_int32_column)
    row: np.ndarray = attrs.field(converter=_int64_column)
    score: np.ndarray = attrs.field(converter=_float64_column)
    scale: Scale = attrs.field(converter=Scale)
    provenance: Mapping[str, np.ndarray] = attrs.field(default=None, converter=_provenance)
    active: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    offsets: np.ndarray = attrs.field(init=False, repr=False)
    rank: np.ndarray = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        m = self.query_index.size
        if self.row.size != m or self.score.size != m:
            raise ValueError(
                f"query_index, row and score need one entry per candidate; got lengths {m}, "
                f"{self.row.size}, {self.score.size}"
            )
        n = len(self.queries)
        # one query (every search()): grouped and in range means all zero, one check without np.diff
        misplaced = m and (self.query_index.any() if n == 1 else self.query_index[0] < 0
                           or self.query_index[-1] >= n or np.any(np.diff(self.query_index) < 0))
        if misplaced:
            raise ValueError(
                f"query_index must be grouped by query (non-decreasing) and within [0, {n}); "
                "use Candidates.ranked(...) to build a batch from unordered columns"
            )
        if m and np.isnan(self.score).any():
            raise ValueError("candidate scores must not be NaN")
        for name, column in self.provenance.items():
            if column.ndim != 1 or column.size != m:
                raise ValueError(f"provenance column {name!r} has shape {column.shape}; expected ({m},)")
        if not self.active and m:
            raise ValueError("an inactive Candidates batch must be empty")
        self._set_ranks()

    def _set_ranks(self) -> None:
        """``offsets`` and ``rank`` from the (grouped) ``query_index``."""
        n, m = len(self.queries), self.query_index.size
        if n == 1 and m == 0:  # one query, nothing found (a switched-off channel of every search())
            object.__setattr__(self, "offsets", _ONE_EMPTY_QUERY)
            object.__setattr__(self, "rank", _EMPTY_INT32)
            return
        if n == 1 and m <= _SHARED_RANKS_MAX:  # one query (every search()): shared read-only columns
            offsets, rank = _one_query_ranks(m)
            object.__setattr__(self, "offsets", offsets)
            object.__setattr__(self, "rank", rank)
            return
        if n == 1:  # what the general rule gives, without searching
            offsets = np.array([0, m], dtype=np.int64)
            rank = np.arange(1, m + 1, dtype=np.int32)
        else:
            offsets = np.searchsorted(self.query_index, np.arange(n + 1), side="left").astype(np.int64)
            rank = (np.arange(1, m + 1, dtype=np.int64) - offsets[self.query_index]).astype(np.int32)
        # both are new arrays of their final dtype: frozen in place
        offsets.flags.writeable = False
        rank.flags.writeable = False
        object.__setattr__(self, "offsets", offsets)
        object.__setattr__(self, "rank", rank)

    # -- construction --------------------------------------------------------

    @classmethod
    def empty(cls, queries: QueryBatch, scale: Scale | str = Scale.NONE) -> "Candidates":
        """A batch in which no query found anything."""
        return cls(queries, np.empty(0, np.int32), np.empty(0, np.int64), np.empty(0, np.float64), scale)

    @classmethod
    def inactive(cls, queries: QueryBatch) -> "Candidates":
        """The output of a stage switched off by ``when``: empty and ``active=False``."""
        if not isinstance(queries, QueryBatch):  # the constructor's own error
            return cls(queries, np.empty(0, np.int32), np.empty(0, np.int64), np.empty(0, np.float64),
                       Scale.NONE, active=False)
        # what the constructor makes of these empty columns, without its checks (nothing to check):
        # every run of a recipe with a switched-off channel builds one
        new = object.__new__(cls)
        for name, value in (("queries", queries), ("query_index", _EMPTY_INT32), ("row", _EMPTY_INT64),
                            ("score", _EMPTY_FLOAT64), ("scale", Scale.NONE), ("provenance", MappingProxyType({})),
                            ("active", False)):
            object.__setattr__(new, name, value)
        new._set_ranks()
        return new

    @classmethod
    def already_ranked(cls, queries: QueryBatch, query_index: Any, row: Any, score: Any,
                       scale: Scale) -> "Candidates":
        """A batch of columns already grouped by query and ranked: a kernel's TopK, spread over a batch.

        Converted (int32 / int64 / float64, frozen) and checked for NaN
        scores only — the caller vouches for the grouping (a TopK is grouped
        and ranked when it is built), which the constructor would check at
        a cost every channel of every run pays.  For columns in any order
        use :meth:`ranked`.
        """
        new = object.__new__(cls)
        score = frozen_array(score, np.float64)
        if score.size and np.isnan(score).any():
            raise ValueError("candidate scores must not be NaN")
        for name, value in (("queries", queries), ("query_index", frozen_array(query_index, np.int32)),
                            ("row", frozen_array(row, np.int64)), ("score", score), ("scale", scale),
                            ("provenance", MappingProxyType({})), ("active", True)):
            object.__setattr__(new, name, value)
        new._set_ranks()
        return new

    @classmethod
    def ranked(cls, queries: QueryBatch, query_index: Any, row: Any, score: Any, scale: Scale | str,
               provenance: Mapping[str, Any] | None = None) -> "Candidates":
        """A first ranking from columns in any order: grouped by query, best score first.

        Equal scores go by corpus row, lowest first (then their given order,
        for a row listed twice), as the kernels rank: the given order of
        unordered columns means nothing.  To re-sort a ranking, keeping its
        order among equal scores, use :meth:`sorted_by_score`.
        """
        query_index = np.asarray(query_index, dtype=np.int32).reshape(-1)
        score = np.asarray(score, dtype=np.float64).reshape(-1)
        row = np.asarray(row, dtype=np.int64).reshape(-1)
        order = np.lexsort((row, -score, query_index))
        columns = {k: np.asarray(v)[order] for k, v in (provenance or {}).items()}
        return cls(queries, query_index[order], row[order], score[order], scale, columns)

    # -- shape ---------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.row.size)

    @property
    def n_queries(self) -> int:
        """Number of query texts in the batch (``len(self.queries)``)."""
        return len(self.queries)

    def counts(self) -> np.ndarray:
        """Candidates per query text, ``(n_queries,)`` int64."""
        return np.diff(self.offsets)

    @property
    def origin_index(self) -> np.ndarray:
        """The original query of each candidate (``queries.origin[query_index]``)."""
        origin: np.ndarray = self.queries.origin[self.query_index]
        return origin

    def query_slice(self, i: int) -> slice:
        """The positions of query ``i``'s candidates."""
        if not 0 <= i < self.n_queries:
            raise IndexError(f"query index {i} out of range for a batch of {self.n_queries}")
        return slice(int(self.offsets[i]), int(self.offsets[i + 1]))

    def per_query(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, scores)`` of query ``i``, best first, as views."""
        s = self.query_slice(i)
        return self.row[s], self.score[s]

    # -- derived batches -----------------------------------------------------

    def take(self, index: Any, columns: Mapping[str, Any] | None = None) -> "Candidates":
        """The candidates at ``index`` (int positions), in that order, with their provenance.

        ``index`` must keep the queries grouped in ascending order (a
        ValueError otherwise); the ranks are renumbered from the new order.
        ``columns`` adds provenance columns, one entry per taken candidate.
        The taken columns are subsets of checked ones: only the grouping is
        checked again (a fixed cost of every stage that re-orders).
        """
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        if len(self.queries) > 1 and index.size > 1 and np.any(np.diff(self.query_index[index]) < 0):
            raise ValueError("take needs an index that keeps the candidates grouped by query (non-decreasing query_index)")
        return self._take_grouped(index, columns)

    def _take_grouped(self, index: np.ndarray, columns: Mapping[str, Any] | None = None) -> "Candidates":
        """:meth:`take` for an int64 ``index`` that keeps the queries grouped by construction.

        For :meth:`select` (positions in order) and :meth:`sorted_by_score`
        (a sort whose first key is the query): every column is a subset of
        columns already checked, gathered into a new array that is frozen in
        place, so only the ranks need computing — not the checks and
        conversions of a batch built from outside.
        """
        new = object.__new__(Candidates)
        provenance = {name: _frozen_gather(column, index) for name, column in self.provenance.items()}
        if columns:
            for name, column in _provenance(columns).items():
                if column.ndim != 1 or column.size != index.size:
                    raise ValueError(f"provenance column {name!r} has shape {column.shape}; expected ({index.size},)")
                provenance[name] = column
        for name, value in (("queries", self.queries), ("query_index", _frozen_gather(self.query_index, index)),
                            ("row", _frozen_gather(self.row, index)), ("score", _frozen_gather(self.score, index)),
                            ("scale", self.scale), ("provenance", MappingProxyType(provenance)),
                            ("active", self.active)):
            object.__setattr__(new, name, value)
        new._set_ranks()
        return new

    def select(self, keep: Any) -> "Candidates":
        """The candidates where the boolean array ``keep`` is True, order kept."""
        keep = np.asarray(keep, dtype=bool)
        if keep.shape != self.row.shape:
            raise ValueError(f"keep has shape {keep.shape}; expected {self.row.shape}")
        return self._take_grouped(np.flatnonzero(keep))

    def sorted_by_score(self) -> "Candidates":
        """Each query's candidates best score first; equal scores keep their current order.

        Stable, the seed's rule for a stage that re-sorts what it received
        (README, "Ties"): the earlier ranking breaks the tie, which is as
        reproducible as the corpus row (that ranking is itself
        deterministic).  lexsort is stable: equal keys keep their positions.
        """
        return self._take_grouped(np.lexsort((-self.score, self.query_index)))

    def cut(self, k: int) -> "Candidates":
        """The first ``k`` candidates of each query."""
        if k < 0:
            raise ValueError(f"cut needs k >= 0, got {k}")
        if len(self) <= k or int(self.counts().max(initial=0)) <= k:
            return self
        return self.select(self.rank <= k)

    def with_scores(self, score: Any, scale: Scale | str, provenance: Mapping[str, Any] | None = None) -> "Candidates":
        """Same candidates and order, new scores (and extra provenance columns); not re-sorted."""
        score = frozen_array(score, np.float64)
        if score.size != len(self):
            raise ValueError(f"with_scores needs {len(self)} scores, got {score.size}")
        if score.size and np.isnan(score).any():
            raise ValueError("candidate scores must not be NaN")
        return self._same_order(score, Scale(scale), provenance)

    def with_channel_columns(self, name: str) -> "Candidates":
        """Same batch with its own score and rank as provenance ``<name>.score`` / ``<name>.rank``.

        What a first stage (a channel) records so later stages still know
        how it ranked each candidate: both are this batch's own checked,
        frozen columns, so nothing is converted or checked again.
        """
        return self._rescored(self.score, self.scale, {**self.provenance, f"{name}.score": self.score,
                                                       f"{name}.rank": self.rank})

    def with_provenance(self, columns: Mapping[str, Any]) -> "Candidates":
        """Same batch with provenance ``columns`` added (or replaced)."""
        return self._same_order(self.score, self.scale, columns)

    def _same_order(self, score: np.ndarray, scale: Scale, columns: Mapping[str, Any] | None) -> "Candidates":
        # the order, grouping and ranks are unchanged, so they are not validated or recomputed again;
        # only the new columns are checked
        added = _provenance(columns)
        for name, column in added.items():
            if column.ndim != 1 or column.size != len(self):
                raise ValueError(f"provenance column {name!r} has shape {column.shape}; expected ({len(self)},)")
        return self._rescored(score, scale, {**self.provenance, **added})

    def _rescored(self, score: np.ndarray, scale: Scale, provenance: dict[str, np.ndarray]) -> "Candidates":
        """This batch's order, grouping and ranks with these (checked, frozen) scores and columns."""
        new = object.__new__(Candidates)
        for name in ("queries", "query_index", "row", "active", "offsets", "rank"):
            object.__setattr__(new, name, getattr(self, name))
        object.__setattr__(new, "score", score)
        object.__setattr__(new, "scale", scale)
        object.__setattr__(new, "provenance", MappingProxyType(provenance))
        return new

    def column(self, name: str) -> np.ndarray:
        """A provenance column, or a core column (``row``, ``score``, ``rank``, ``query_index``)."""
        if name in ("row", "score", "rank", "query_index"):
            core: np.ndarray = getattr(self, name)
            return core
        try:
            return self.provenance[name]
        except KeyError:
            raise KeyError(f"no column {name!r}; columns: row, score, rank, query_index, "
                           f"{', '.join(self.provenance) or '(no provenance)'}") from None

    # -- identity ------------------------------------------------------------

    def fingerprint(self) -> str:
        """A content digest (queries, columns, scale, provenance): equal batches, equal digests."""
        h = hashlib.blake2b(digest_size=16)
        h.update(repr((self.queries.texts, self.queries.originals, self.scale.value, self.active)).encode())
        for array in (self.queries.origin, self.query_index, self.row, self.score):
            h.update(array.tobytes())
        for name in sorted(self.provenance):
            column = self.provenance[name]
            h.update(name.encode() + b"\0" + column.dtype.str.encode())
            h.update(column.tobytes() if column.dtype.kind != "O" else repr(column.tolist()).encode())
        return h.hexdigest()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Candidates):
            return NotImplemented
        if self is other:
            return True
        if (self.scale != other.scale or self.active != other.active or self.queries != other.queries
                or set(self.provenance) != set(other.provenance)):
            return False
        if not (np.array_equal(self.query_index, other.query_index) and np.array_equal(self.row, other.row)
                and np.array_equal(self.score, other.score)):
            return False
        for name, column in self.provenance.items():
            theirs = other.provenance[name]
            nan_ok = column.dtype.kind == "f" and theirs.dtype.kind == "f"
            if not np.array_equal(column, theirs, equal_nan=nan_ok):
                return False
        return True

    __hash__ = None  # type: ignore[assignment]

    def _repr_html_(self) -> str:
        """A notebook's view: the scale and counts, the top rows of the first queries with their provenance."""
        return candidates_view(self)

    def __repr__(self) -> str:
        state = "" if self.active else ", inactive"
        columns = f", provenance={list(self.provenance)}" if self.provenance else ""
        return (f"Candidates({self.n_queries} queries, {len(self)} candidates, scale={self.scale.value}"
                f"{columns}{state})")


def fill_value(dtype: np.dtype) -> Any:
    """The value an absent provenance entry holds for ``dtype`` (NaN / 0 / False / "" / None)."""
    return _fill_value(np.dtype(dtype))
