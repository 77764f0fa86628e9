"""The exact score of (query, row) pairs, and how far a BLAS score can be from it.

Step 2 of ``irflow.kernels.dense`` (its docstring has the whole argument):
a pair's score is the products of the float32 components in float64
(exact: two 24-bit significands fit in 53 bits), summed by a fixed pairwise
fold over the dimension, in plain numpy, so the bits depend on the two
vectors only.  And step 1's bound: a BLAS float32 score is within
``gamma_d * |row| * |query|`` of the exact one whatever its summation order,
so ``score_windows`` gives each query the margin below its k-th best that a
candidate must reach.  The rows' largest norm enters the bound
(``row_norm_bound``: cached for a read-only matrix).  Then the top k of
the scored pairs, ranked by (score desc, row asc): ``best_pairs``.
"""

from __future__ import annotations

import functools
import math
import threading
import weakref
from typing import Any

import numpy as np

from irflow.kernels.topk import TopK

__all__ = ["EXACT_CHUNK", "best_pairs", "exact_scores", "row_norm_bound", "score_windows"]

#: (query, row) pairs scored exactly per chunk (float64 products: 64 x d x 8 bytes, cache-sized).
EXACT_CHUNK = 64
#: Absolute slack of the error bound: covers gradual underflow (d * 2**-149 per product).
_ABS_SLACK = 1e-30


def _fold_sum(products: np.ndarray) -> np.ndarray:
    """Column sums of ``products`` (d, c) float64, modified in place, in a fixed pairwise order.

    Height h folds onto its first ceil(h/2) rows until one is left: the
    order depends on d only, never on the number of columns or on the CPU's
    vector width (numpy's elementwise add rounds each element alone).  The
    (d, c) layout makes every fold one contiguous block.
    """
    height = products.shape[0]
    if height == 0:
        return np.zeros(products.shape[1])
    while height > 1:
        half = (height + 1) // 2
        np.add(products[:height - half], products[half:height], out=products[:height - half])
        height = half
    total: np.ndarray = products[0]
    return total


def exact_scores(matrix: np.ndarray, queries: np.ndarray, query_index: np.ndarray,
                 rows: np.ndarray) -> np.ndarray:
    """The score of each (``queries[query_index[i]]``, ``matrix[rows[i]]``) pair, float64.

    Products in float64 (exact for float32 vectors), summed by a fixed
    pairwise fold; no BLAS, so the result depends on the two vectors only.

    >>> m = np.array([[0.5, 0.25], [1.0, 0.0]], np.float32)
    >>> exact_scores(m, np.array([[2.0, 4.0]], np.float32), np.array([0, 0]), np.array([0, 1])).tolist()
    [2.0, 2.0]
    """
    rows = np.asarray(rows, dtype=np.intp)
    query_index = np.asarray(query_index, dtype=np.intp)
    out = np.empty(rows.size, dtype=np.float64)
    # (the chunk bounds cache use; the bits do not depend on them: each pair is summed alone)
    d, chunk = matrix.shape[1], max(1, min(EXACT_CHUNK, rows.size))
    buffers = np.empty((d, chunk)), np.empty((chunk, d), matrix.dtype), np.empty((chunk, d), queries.dtype)
    for lo in range(0, rows.size, chunk):
        hi = min(rows.size, lo + chunk)
        vectors = np.take(matrix, rows[lo:hi], axis=0, mode="clip", out=buffers[1][:hi - lo])
        these = queries[0][:, None] if queries.shape[0] == 1 else \
            np.take(queries, query_index[lo:hi], axis=0, mode="clip", out=buffers[2][:hi - lo]).T
        products = np.multiply(vectors.T, these, out=buffers[0][:, :hi - lo], dtype=np.float64)
        out[lo:hi] = _fold_sum(products)
    out += 0.0  # -0.0 (every product -0.0) becomes 0.0
    return out


def best_pairs(query: np.ndarray, row: np.ndarray, score: np.ndarray, k: int, n_queries: int) -> TopK:
    """The top ``k`` of each query's (row, score) pairs, by score desc then row asc (rows distinct per query)."""
    if n_queries == 1:
        order = np.lexsort((row, -score))[:k]
        return TopK._trusted(np.zeros(order.size, np.int32), row[order], score[order], 1,
                             np.array([0, order.size], dtype=np.int64))
    order = np.lexsort((row, -score, query))
    query, row, score = query[order], row[order], score[order]
    starts = np.searchsorted(query, np.arange(n_queries))
    keep = np.arange(query.size) - starts[query] < k
    return TopK._trusted(query[keep], row[keep], score[keep], n_queries)


# -- the error bound ------------------------------------------------------------------

_norms_lock = threading.Lock()
_norms: dict[int, tuple[weakref.ref[np.ndarray], tuple[Any, ...], float]] = {}


def _compute_norm_bound(matrix: np.ndarray) -> float:
    """The largest row norm, rounded up: one pass (sums of squares in the matrix's dtype)."""
    largest = 0.0
    for lo in range(0, matrix.shape[0], 65536):
        block = matrix[lo:lo + 65536]
        if block.size:
            largest = max(largest, float(np.einsum("ij,ij->i", block, block).max()))
    # a float sum of d squares is at most gamma_d below the true sum (any order)
    u = float(np.finfo(matrix.dtype).eps) / 2
    d = matrix.shape[1]
    return math.sqrt(largest / (1 - d * u / (1 - d * u))) * (1 + 1e-6)


def row_norm_bound(matrix: np.ndarray) -> float:
    """An upper bound of the L2 norms of ``matrix``'s rows.

    Cached by identity for a read-only array (a corpus's vectors, a
    memory-mapped file), computed on every call for a writeable one, which
    could have changed since.

    >>> row_norm_bound(np.array([[3.0, 4.0], [1.0, 0.0]])) >= 5.0
    True
    """
    if matrix.flags.writeable:
        return _compute_norm_bound(matrix)
    key = (matrix.__array_interface__["data"][0], matrix.shape, matrix.strides, matrix.dtype.str)
    with _norms_lock:
        entry = _norms.get(id(matrix))
        if entry is not None and entry[0]() is matrix and entry[1] == key:
            return entry[2]
    bound = _compute_norm_bound(matrix)
    ident = id(matrix)

    def forget(_ref: weakref.ref[np.ndarray]) -> None:
        with _norms_lock:
            if _norms.get(ident, (None,))[0] is _ref:
                del _norms[ident]

    with _norms_lock:
        _norms[ident] = (weakref.ref(matrix, forget), key, bound)
    return bound


@functools.lru_cache(maxsize=64)
def _relative_error(dtype: np.dtype, d: int) -> float:
    """Bound on |BLAS score - exact score| / (|row| |query|) for d dimensions of ``dtype``."""
    u = float(np.finfo(dtype).eps) / 2
    u64 = 2.0 ** -53
    depth = max(1, math.ceil(math.log2(max(d, 1)))) + 1  # the fold's additions plus the product

    def gamma(n: int, unit: float) -> float:
        # beyond n * u >= 1/2 (float16 with thousands of dimensions) no useful bound: every row is a candidate
        return n * unit / (1 - n * unit) if n * unit < 0.5 else math.inf

    return (gamma(d, u) + gamma(depth, u64)) * (1 + 1e-6)


def score_windows(matrix: np.ndarray, queries: np.ndarray, norm_bound: float) -> np.ndarray:
    """Per query: twice the largest gap between an approximate (BLAS) score and the exact one."""
    q_norms = np.sqrt(np.einsum("ij,ij->i", queries, queries, dtype=np.float64)) * (1 + 1e-6)
    windows: np.ndarray = 2 * (_relative_error(matrix.dtype, matrix.shape[1]) * norm_bound * q_norms + _ABS_SLACK)
    return windows
