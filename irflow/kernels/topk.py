"""Exact top-k selection and the flat result batch the kernels return.

Both kernels (dense cosine, BM25) end the same way: pick the best ``k`` of a
score vector, exactly, with ties broken by row order so that results are
reproducible across runs, machines and shards.  A full sort of a large vector
is the slow way to do that; ``argpartition`` finds the k-th best score in
linear time and only the few survivors are sorted.

``TopK`` carries the answers of a whole batch of queries as three flat,
row-aligned columns (query index, row, score) grouped by query then rank,
which is what the stages pass around instead of per-hit Python objects.

Example::

    >>> topk_rows(np.array([0.5, 2.0, 0.5, 1.0]), 3)
    array([1, 3, 0])
"""

from __future__ import annotations

from typing import Any, Sequence

import attrs
import numpy as np

__all__ = ["TopK", "topk_rows", "topk_keyed", "topk_matrix"]


def _clean(scores: np.ndarray) -> np.ndarray:
    """Scores with NaN replaced by -inf (copy only when a NaN is present).

    argpartition sorts NaN as the largest value; a NaN must rank last instead.
    """
    if scores.dtype.kind == "f" and np.isnan(scores).any():
        scores = np.where(np.isnan(scores), -np.inf, scores)
    return scores


def _smallest(keys: np.ndarray, count: int) -> np.ndarray:
    """Positions of the ``count`` smallest (unique) keys, ascending by key."""
    if count <= 0:
        return np.empty(0, dtype=np.int64)
    if count < keys.size:
        part = np.argpartition(keys, count - 1)[:count]
    else:
        part = np.arange(keys.size)
    return part[np.argsort(keys[part], kind="stable")]


def _finish(scores: np.ndarray, keys: np.ndarray | None, above: np.ndarray,
            ties: np.ndarray, k: int) -> np.ndarray:
    """Rank ``above`` (all strictly better than the k-th score) and fill with ``ties``."""
    need = k - above.size
    if keys is None:
        tied = ties[:need]  # flatnonzero is ascending: already in key order
        above_keys = above
    else:
        tied = ties[_smallest(keys[ties], need)]
        above_keys = keys[above]
    best = above[np.lexsort((above_keys, -scores[above]))]
    return np.concatenate([best, tied]).astype(np.int64, copy=False)


def _lower_bound(scores: np.ndarray, k: int) -> float:
    """A value that at least ``k`` scores reach: the k-th largest of block maxima.

    Each of the k blocks with the largest maxima holds one score at least that
    high.  Cutting the vector at this bound first keeps argpartition away from
    large blocks of equal low scores (zeros, -inf), where numpy's introselect
    is up to 20x slower than on distinct values.
    """
    n_blocks = max(min(scores.size // 16, 64 * k), k)
    size = scores.size // n_blocks
    maxima = scores[: n_blocks * size].reshape(n_blocks, size).max(axis=1)
    bound: float = maxima[np.argpartition(maxima, n_blocks - k)[n_blocks - k]]
    return bound


def topk_keyed(scores: np.ndarray, keys: np.ndarray | None, k: int) -> np.ndarray:
    """Positions of the ``k`` best scores, best first, ties by smaller key.

    ``keys`` must be unique (row ids); ``None`` means the position itself.
    Exact: every score strictly above the k-th best is kept, then the ties at
    the k-th best are filled in key order.  Only the survivors are sorted, and
    a large block of ties (a mostly-zero vector) costs linear passes, never a
    sort.  NaN counts as -inf.

    >>> topk_keyed(np.array([1.0, 3.0, 1.0]), np.array([9, 5, 2]), 2)
    array([1, 2])
    """
    scores = np.asarray(scores)
    if scores.ndim != 1:
        raise ValueError(f"scores must be 1-d, got shape {scores.shape}")
    if keys is not None:
        keys = np.asarray(keys)
    n = scores.size
    k = min(int(k), n)
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    scores = _clean(scores)
    if n <= 64:  # tiny: one sort beats the partition machinery's call overhead
        order = np.lexsort((np.arange(n) if keys is None else keys, -scores))
        return order[:k].astype(np.int64, copy=False)
    subset = None
    if n >= 4096 and 16 * k <= n:
        bound = _lower_bound(scores, k)
        above = np.flatnonzero(scores > bound)
        if above.size < k:
            # fewer than k beat the bound yet k reach it: the bound is the k-th score
            return _finish(scores, keys, above, np.flatnonzero(scores == bound), k)
        subset = above
        scores = scores[subset]
        keys = subset if keys is None else keys[subset]
    m = scores.size
    kth = np.partition(scores, m - k)[m - k] if k < m else scores.min()
    if m <= 4096:
        # small: sort everything that reaches the k-th score (ties included) at once
        reach = np.flatnonzero(scores >= kth)
        order = np.lexsort((reach if keys is None else keys[reach], -scores[reach]))[:k]
        picked = reach[order]
    else:
        picked = _finish(scores, keys, np.flatnonzero(scores > kth), np.flatnonzero(scores == kth), k)
    return picked if subset is None else subset[picked]


def topk_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` best scores, best first, ties by smaller index.

    Exact and argpartition-based; ``k >= len(scores)`` ranks everything,
    ``k == 0`` or an empty vector gives an empty result; -inf entries rank
    last among finite scores; NaN counts as -inf.

    >>> topk_rows(np.array([0.0, -np.inf, 0.0, 7.0]), 10)
    array([3, 0, 2, 1])
    """
    return topk_keyed(scores, None, k)


def topk_matrix(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top ``k`` of every row of a ``(q, n)`` score matrix, in one vectorized pass.

    Returns flat ``(query_index, column, score)`` grouped by row, best first,
    ties by smaller column — the same answer as ``topk_rows`` on each row.
    A per-row lower bound of the k-th score (block maxima, as in
    ``topk_rows``) leaves a few candidates per row; one lexsort ranks them
    all, so a batch of queries costs no Python loop.

    >>> topk_matrix(np.array([[0.1, 0.9, 0.9], [0.5, 0.2, 0.7]]), 2)[1]
    array([1, 2, 2, 0])
    """
    scores = np.asarray(scores)
    if scores.ndim != 2:
        raise ValueError(f"scores must be 2-d, got shape {scores.shape}")
    q, n = scores.shape
    k = min(int(k), n)
    if k <= 0 or q == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, scores.dtype)
    if n >= 4096 and 16 * k <= n:
        n_blocks = max(min(n // 16, 64 * k), k)
        size = n // n_blocks

        def block_maxima(values: np.ndarray) -> np.ndarray:
            maxima: np.ndarray = values[:, : n_blocks * size].reshape(q, n_blocks, size).max(axis=2)
            return maxima

        maxima = block_maxima(scores)
        # max propagates NaN, so the maxima reveal one without a pass over everything
        # (only the first n_blocks * size columns are checked there: check the tail too)
        if scores.dtype.kind == "f" and (np.isnan(maxima).any() or np.isnan(scores[:, n_blocks * size:]).any()):
            scores = np.where(np.isnan(scores), -np.inf, scores)
            maxima = block_maxima(scores)
        bound = np.partition(maxima, n_blocks - k, axis=1)[:, n_blocks - k]
    else:
        if scores.dtype.kind == "f" and np.isnan(scores).any():
            scores = np.where(np.isnan(scores), -np.inf, scores)
        bound = np.partition(scores, n - k, axis=1)[:, n - k]
    # flat indices: a 1-d nonzero is several times faster than a 2-d one
    flat = np.flatnonzero(scores >= bound[:, None])
    query, column = np.divmod(flat, n)
    if query.size > 64 * q * k:
        # large blocks of ties at the bound: rank row by row, which handles them linearly
        picks = [topk_rows(scores[i], k) for i in range(q)]
        query = np.repeat(np.arange(q), [p.size for p in picks])
        column = np.concatenate(picks)
        return query, column, scores[query, column]
    values = scores[query, column]
    order = np.lexsort((column, -values, query))
    query, column, values = query[order], column[order], values[order]
    starts = np.searchsorted(query, np.arange(q))
    keep = np.arange(query.size) - starts[query] < k
    return query[keep], column[keep], values[keep]


def _int32_array(value: Any) -> np.ndarray:
    return np.ascontiguousarray(value, dtype=np.int32).reshape(-1)


def _int64_array(value: Any) -> np.ndarray:
    return np.ascontiguousarray(value, dtype=np.int64).reshape(-1)


def _float64_array(value: Any) -> np.ndarray:
    return np.ascontiguousarray(value, dtype=np.float64).reshape(-1)


@attrs.frozen(eq=False)
class TopK:
    """The top hits of a batch of queries as flat columns.

    Rows of query ``i`` come before those of query ``i + 1``; within a query
    they are best first.  ``per_query(i)`` returns views through an offsets
    array computed once, so iterating a batch copies nothing.

    >>> top = TopK(query_index=[0, 0, 1], row=[4, 2, 7], score=[0.9, 0.5, 0.3], n_queries=2)
    >>> top.per_query(0)
    (array([4, 2]), array([0.9, 0.5]))
    """

    query_index: np.ndarray = attrs.field(converter=_int32_array)
    row: np.ndarray = attrs.field(converter=_int64_array)
    score: np.ndarray = attrs.field(converter=_float64_array)
    n_queries: int = attrs.field(converter=int)
    offsets: np.ndarray = attrs.field(init=False, repr=False)

    @n_queries.validator
    def _check(self, attribute: attrs.Attribute[Any], value: int) -> None:
        if value < 0:
            raise ValueError(f"n_queries must be >= 0, got {value}")
        m = self.query_index.size
        if self.row.size != m or self.score.size != m:
            raise ValueError(
                "query_index, row and score must have one entry per hit; got lengths "
                f"{m}, {self.row.size}, {self.score.size}"
            )
        if m and (self.query_index[0] < 0 or self.query_index[-1] >= value
                  or np.any(np.diff(self.query_index) < 0)):
            raise ValueError(
                f"query_index must be grouped (non-decreasing) and within [0, {value}); "
                "build a TopK with TopK.from_parts to get the grouping right"
            )

    def __attrs_post_init__(self) -> None:
        # searchsorted on the grouped index: offsets[i]..offsets[i+1] are query i's hits
        offsets = np.searchsorted(self.query_index, np.arange(self.n_queries + 1), side="left")
        object.__setattr__(self, "offsets", offsets.astype(np.int64))

    def __len__(self) -> int:
        return int(self.row.size)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopK):
            return NotImplemented
        return (self.n_queries == other.n_queries
                and np.array_equal(self.query_index, other.query_index)
                and np.array_equal(self.row, other.row)
                and np.array_equal(self.score, other.score))

    __hash__ = None  # type: ignore[assignment]  # mutable-content arrays: not hashable

    def per_query(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, scores)`` of query ``i``, best first, as views."""
        if not 0 <= i < self.n_queries:
            raise IndexError(f"query index {i} out of range for a batch of {self.n_queries}")
        lo, hi = self.offsets[i], self.offsets[i + 1]
        return self.row[lo:hi], self.score[lo:hi]

    def counts(self) -> np.ndarray:
        """Number of hits per query, ``(n_queries,)`` int64."""
        return np.diff(self.offsets)

    @classmethod
    def empty(cls, n_queries: int) -> "TopK":
        """A batch of ``n_queries`` queries that found nothing."""
        return cls(query_index=np.empty(0, np.int32), row=np.empty(0, np.int64),
                   score=np.empty(0, np.float64), n_queries=n_queries)

    @classmethod
    def from_parts(cls, rows: Sequence[np.ndarray], scores: Sequence[np.ndarray]) -> "TopK":
        """Concatenate per-query ``rows`` / ``scores`` (each best first) into a batch."""
        if len(rows) != len(scores):
            raise ValueError(f"got {len(rows)} row arrays but {len(scores)} score arrays")
        n = len(rows)
        sizes = np.array([len(r) for r in rows], dtype=np.int64)
        if any(len(r) != len(x) for r, x in zip(rows, scores)):
            raise ValueError("each query needs as many scores as rows")
        # grouped by construction: skip the validators
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        return cls._trusted(
            np.repeat(np.arange(n, dtype=np.int32), sizes),
            np.concatenate(rows) if n else np.empty(0, np.int64),
            np.concatenate(scores) if n else np.empty(0), n, offsets)

    @classmethod
    def _trusted(cls, query_index: np.ndarray, row: np.ndarray, score: np.ndarray,
                 n_queries: int, offsets: np.ndarray | None = None) -> "TopK":
        """Build from columns already grouped by query and ranked (kernels only).

        Skips the validators: a kernel builds one per batch and groups by
        construction, and the checks would cost more than the small batches.
        """
        top = object.__new__(cls)
        query_index = np.asarray(query_index, dtype=np.int32)
        if offsets is None:
            offsets = np.searchsorted(query_index, np.arange(n_queries + 1), side="left").astype(np.int64)
        for name, value in (
            ("query_index", query_index),
            ("row", np.asarray(row, dtype=np.int64)),
            ("score", np.asarray(score, dtype=np.float64)),
            ("n_queries", int(n_queries)),
            ("offsets", offsets),
        ):
            object.__setattr__(top, name, value)
        return top
