"""Exact cosine top-k over a candidate mask, for a batch of queries.

The corpus keeps L2-normalized float32 vectors, so cosine is a dot product and
a whole batch of queries is one matrix product — the fastest exact search numpy
can do (a matrix-vector product runs at memory bandwidth; a batch runs at BLAS
speed).  A filter changes the plan: when it keeps few rows, copying those rows
and multiplying only them is cheaper than reading the whole matrix; when it
keeps many, the full product with the dropped rows set to -inf wins.  The
crossover was measured on 100k x 384 (2 cores): about 20% kept for a single
query (a product that is memory-bound), higher for batches (compute-bound):
the gather still won at 70% for a batch of 64.

Queries are cast to the matrix's dtype: a float64 query against a float32
matrix would upcast the whole matrix on every call (4-8x slower).

Example::

    >>> m = np.eye(3, dtype=np.float32)
    >>> top = dense_topk(m, np.array([[0.6, 0.8, 0.0]], np.float32), None, 2)
    >>> top.per_query(0)[0].tolist()
    [1, 0]
"""

from __future__ import annotations

import numpy as np

from irflow.errors import EmbedderError, IrflowError
from irflow.topk import TopK, topk_matrix

__all__ = ["dense_topk", "gather_fraction"]

#: Gather the candidate rows when the mask keeps at most this fraction of rows,
#: for one query, a small batch (< 16 queries), and a larger batch.
GATHER_FRACTION_SINGLE = 0.2
GATHER_FRACTION_SMALL_BATCH = 0.5
GATHER_FRACTION_BATCH = 0.7


def gather_fraction(n_queries: int) -> float:
    """Kept-row fraction below which ``dense_topk`` gathers the candidate rows."""
    if n_queries <= 1:
        return GATHER_FRACTION_SINGLE
    return GATHER_FRACTION_SMALL_BATCH if n_queries < 16 else GATHER_FRACTION_BATCH


def _as_queries(queries: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    queries = np.asarray(queries)
    if queries.ndim == 1:
        queries = queries[None, :]
    if queries.ndim != 2:
        raise EmbedderError(f"query vectors must be 1-d or 2-d (q, d), got shape {queries.shape}")
    if queries.shape[1] != matrix.shape[1]:
        raise EmbedderError(
            f"query vectors have dimension {queries.shape[1]} but the corpus vectors have "
            f"dimension {matrix.shape[1]}; embed queries with the corpus's embedder"
        )
    # same dtype as the matrix, so the product never upcasts the matrix
    return np.ascontiguousarray(queries, dtype=matrix.dtype)


def dense_topk(matrix: np.ndarray, queries: np.ndarray, mask: np.ndarray | None,
               fetch_k: int) -> TopK:
    """Top ``fetch_k`` rows of ``matrix`` by dot product with each query, exactly.

    ``matrix`` (n, d) and ``queries`` (q, d) or (d,) are expected
    L2-normalized, so the scores are cosines; ``mask`` (bool, n) keeps the
    candidate rows (None: all).  Scores are the float32 products as float64;
    ties break by row order.

    >>> m = np.array([[1, 0], [0, 1], [1, 0]], dtype=np.float32)
    >>> top = dense_topk(m, np.array([1, 0], np.float32), np.array([False, True, True]), 5)
    >>> top.per_query(0)
    (array([2, 1]), array([1., 0.]))
    """
    matrix = np.asarray(matrix)
    if matrix.ndim != 2:
        raise IrflowError(f"the corpus vectors must be a 2-d (n, d) array, got shape {matrix.shape}")
    queries = _as_queries(queries, matrix)
    n_queries, n_rows = queries.shape[0], matrix.shape[0]
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_ or mask.shape != (n_rows,):
            raise IrflowError(
                f"mask must be a boolean array of shape ({n_rows},) (one entry per corpus row), "
                f"got {mask.dtype} {mask.shape}"
            )
    if fetch_k <= 0 or n_queries == 0 or n_rows == 0:
        return TopK.empty(n_queries)

    rows = None  # column j of the scores is row j, unless gathered
    if mask is None:
        scores = queries @ matrix.T
        k = fetch_k
    else:
        kept = np.flatnonzero(mask)
        if kept.size == 0:
            return TopK.empty(n_queries)
        k = min(fetch_k, kept.size)  # never reach the -inf of a dropped row
        if kept.size <= gather_fraction(n_queries) * n_rows:
            rows = kept  # ascending, so column ties are row ties
            scores = queries @ np.take(matrix, kept, axis=0).T
        else:
            scores = queries @ matrix.T
            np.copyto(scores, -np.inf, where=~mask[None, :])
    query, column, values = topk_matrix(scores, k)
    return TopK._trusted(query, column if rows is None else rows[column], values, n_queries)
