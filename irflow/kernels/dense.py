"""Exact cosine top-k over a candidate mask, for a batch of queries, reproducible to the bit.

A query's scores must not depend on how they were computed: alone or in a
batch of a thousand, with the filter's rows gathered or the full matrix
masked, one BLAS thread or two, under any OpenBLAS kernel
(``OPENBLAS_CORETYPE``), on one machine or split into shards.  BLAS cannot
promise that: a matrix-vector product (one query) and a matrix product (a
batch) add the terms of a dot product in different orders, and a kernel's
order can depend on where a row or a query sits in the block it computes
(OpenBLAS's Haswell sgemm splits some positions into even/odd partial sums;
its SkylakeX and Sandybridge kernels use one fused or unfused chain).  So
the work is split in two steps, each doing what it is good at:

1. **Rank with BLAS.**  One query is a matrix-vector product (memory speed),
   a batch a matrix product over row tiles (BLAS speed) with a running top-k
   per query, so no call holds the whole rows x queries score matrix.  The
   float32 scores are approximate, but their error is bounded whatever the
   summation order, blocking, FMA or thread split (Higham, *Accuracy and
   Stability of Numerical Algorithms*, 2nd ed., section 3.1):
   ``|fl(a.q) - a.q| <= gamma_d * sum|a_i q_i| <= gamma_d * |a| |q|`` with
   ``gamma_d = d u / (1 - d u)`` (u = 2**-24 for float32).  Every row whose
   approximate score is within twice that bound of the k-th best stays a
   candidate: a row left out scores, exactly, strictly below k others.
2. **Score exactly** (``irflow.kernels.dense_exact``).  The candidates
   (about k per query) get their score from plain numpy: the products of
   the float32 components in float64 (exact: two 24-bit significands fit
   in 53 bits), summed by a fixed pairwise fold over the dimension.  Elementwise IEEE arithmetic, no BLAS:
   the bits depend on the two vectors only, on any machine.

Then the top k by (score desc, row asc).  The scores are float64 cosines
accurate to about 1e-15 (the float32 product was accurate to about 1e-7).

Step 1 has a second form that reads 4x fewer bytes: given the matrix's int8
codes (``index``: ``irflow.kernels.dense_index``, a corpus builds them on its
first dense query where numba is installed), a compiled scan
(``irflow.kernels.dense_scan``) bounds every row's score from its codes and
keeps the rows that can still reach the top k.  Step 2 is unchanged, so the
answer is the same to the bit; ``IRFLOW_DENSE_KERNEL`` chooses
(``irflow.kernels.dense_kernel``).  One query at 1M x 384 is memory-bound:
the scan wins there; a large batch is compute-bound (``SCAN_MAX_QUERIES``).

The rows' largest norm enters the bound: pass ``norm_bound`` (a corpus
keeps it), or it is computed — once for a read-only array (cached by
identity), on every call for a writeable one.

A filter changes the plan: when it keeps few rows, copying those rows and
multiplying only them is cheaper than reading the whole matrix; when it
keeps many, the full product with the dropped rows excluded wins.  The
crossover was measured on 100k x 384 (2 cores): about 20% kept for a single
query (a product that is memory-bound), higher for batches (compute-bound):
the gather still won at 70% for a batch of 64.  Either plan gives the same
answer to the bit, since only step 1 differs.

Queries are cast to the matrix's dtype: a float64 query against a float32
matrix would upcast the whole matrix on every call (4-8x slower).

Example::

    >>> m = np.eye(3, dtype=np.float32)
    >>> top = dense_topk(m, np.array([[0.6, 0.8, 0.0]], np.float32), None, 2)
    >>> top.per_query(0)[0].tolist()
    [1, 0]
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from irflow.errors import EmbedderError, IrflowError
from irflow.kernels.dense_exact import best_pairs, exact_scores, row_norm_bound, score_windows
from irflow.kernels.dense_index import DenseIndex
from irflow.kernels.dense_kernel import grouped_scan, scan_candidates
from irflow.kernels.topk import TopK

__all__ = ["dense_topk", "exact_scores", "gather_fraction", "row_norm_bound"]

#: Gather the candidate rows when the mask keeps at most this fraction of rows,
#: for one query, a small batch (< 16 queries), and a larger batch.
GATHER_FRACTION_SINGLE = 0.2
GATHER_FRACTION_SMALL_BATCH = 0.5
GATHER_FRACTION_BATCH = 0.7

#: Approximate scores per tile of a batch's product (rows x queries float32: 4 MB, one reused
#: block; never the whole rows x queries matrix).  A tile costs ~20 numpy calls besides its one
#: pass over the scores; 1 MB tiles (in a core's L2) measured no faster: the calls outweighed it.
TILE_SCORES = 1 << 20
#: Rows per tile at least (a tile is one BLAS call; fewer calls for small batches).
TILE_MIN_ROWS = 2048
#: The pass over a tile reads it as rows of at least this many scores (a few matrix rows side
#: by side): numpy's reductions cost a fixed time per inner row, so short rows (a batch of 8
#: queries) would make the pass slower than the product.
WIDE_SCORES = 1024
#: Wide rows per block: the pass keeps one maximum per (block, column) and looks inside a block
#: only where that maximum reaches the query's floor.
ROW_BLOCK = 16
#: Bytes of gathered rows per tile on the gather plan (a reused buffer).
GATHER_BYTES = 16 << 20
#: Kept (query, row) entries of a batch, at least, before the floors are raised from them.
CANDIDATE_BUDGET = 1 << 12
#: Batches of at most this many queries are ranked by the int8 scan (given the codes), larger by BLAS.
#: A batch is compute-bound; the scan's plain loop multiplies at about BLAS's rate: 5x BLAS at 2
#: queries, 1.2x at 48, 0.95x at 64 (300k x 384, one thread).  With four queries at once
#: (``dense_scan.dot4``, x86 with AVX2): 1.34x at 64, 1.06x at 256, hence ``SCAN_MAX_QUERIES_GROUPED``.
SCAN_MAX_QUERIES = 48
SCAN_MAX_QUERIES_GROUPED = 256


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
    queries = np.ascontiguousarray(queries, dtype=matrix.dtype)
    if queries.dtype.kind == "f" and not np.isfinite(queries).all():
        bad = np.flatnonzero(~np.isfinite(queries).all(axis=1))
        if bad.size:
            raise EmbedderError(
                f"query vector {int(bad[0])} has NaN or infinite components; check the embedder's output"
            )
    return queries


# -- step 1: candidates from the BLAS products -----------------------------------------


def _tiles(matrix: np.ndarray, mask: np.ndarray | None, kept: np.ndarray | None,
           n_queries: int, unit: int = 1,
           block: np.ndarray | None = None) -> Iterator[tuple[np.ndarray | int, np.ndarray, np.ndarray | None]]:
    """``(rows, tile, tile_mask)`` over the candidate rows, ascending.

    ``rows`` is the tile's row ids (gathered) or its first row (a slice of
    the matrix); ``tile_mask`` marks the tile's candidate rows (None: all).
    Tiles hold a multiple of ``unit`` rows when they hold that many at all.
    ``block``: ``matrix[kept]``, gathered before (tiles are its slices).
    """
    n, d = matrix.shape
    step = n if n_queries == 1 else max(TILE_MIN_ROWS, TILE_SCORES // n_queries)
    if block is not None:
        step = min(step, max(1, block.shape[0]))
        if step >= unit:
            step -= step % unit
        for lo in range(0, block.shape[0], step):
            yield kept[lo:lo + step], block[lo:lo + step], None  # type: ignore[index]
        return
    if kept is not None:
        step = max(1, min(step, GATHER_BYTES // max(1, d * matrix.itemsize)))
    if step >= unit:
        step -= step % unit
    if kept is None:
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            yield lo, matrix[lo:hi], None if mask is None else mask[lo:hi]
        return
    buffer = np.empty((min(step, kept.size), d), dtype=matrix.dtype)
    for lo in range(0, kept.size, step):
        rows = kept[lo:lo + step]
        tile = buffer[:rows.size]
        np.take(matrix, rows, axis=0, out=tile, mode="clip")  # "raise" would buffer the copy
        yield rows, tile, None


def _kth_lower_bounds(scores: np.ndarray, k: int) -> np.ndarray:
    """Per column of ``scores`` (t, q), a value at least ``k`` of its entries reach (t >= k).

    The k-th largest of block maxima: each of the k blocks with the largest
    maxima holds one entry at least that high.  Block j holds rows j,
    j + b, j + 2b, ... so the maxima are elementwise maxima of contiguous
    slices (a reduction over a short inner axis is many times slower).
    """
    t, q = scores.shape
    n_blocks = max(min(t // 16, 64 * k), k)
    size = t // n_blocks
    maxima = scores[:n_blocks * size].reshape(size, n_blocks * q).max(axis=0).reshape(n_blocks, q)
    bounds: np.ndarray = np.partition(maxima, n_blocks - k, axis=0)[n_blocks - k]
    return bounds


def _round_down(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``values`` in ``dtype``, rounded toward -inf but at least the lowest finite value.

    A threshold never rises by the cast, so ``score >= threshold`` keeps
    every finite score it kept in float64; -inf (a dropped row) never passes.
    """
    with np.errstate(over="ignore"):
        cast = values.astype(dtype)
    up = cast.astype(np.float64) > values
    cast[up] = np.nextafter(cast[up], dtype.type(-np.inf))
    floor: np.ndarray = np.maximum(cast, np.finfo(dtype).min, out=cast)
    return floor


class _Candidates:
    """Per-query candidates (query, row, approximate score) with thresholds that only rise.

    ``floor[j]`` is a lower bound of query j's k-th best approximate score
    minus its window: nothing below it can make the top k.  The first tile
    sets it from block maxima; then it rises with the exact k-th best of the
    entries kept so far, each time they pile up past a budget.

    A tile (rows x queries) costs one pass: it is read as wide rows of
    ``group`` matrix rows side by side (``WIDE_SCORES`` scores at least),
    and each block of ``ROW_BLOCK`` wide rows keeps its maximum per column.
    Once the floors are set, few (block, column) maxima reach them (the k
    best of what came before are hard to beat): only those blocks' columns
    are read again, ``ROW_BLOCK`` scores each.
    """

    def __init__(self, n_queries: int, k: int, windows: np.ndarray, dtype: np.dtype) -> None:
        self.k, self.windows, self.dtype = k, windows, dtype
        self.group = max(1, WIDE_SCORES // n_queries)  # matrix rows per wide row
        self.block = max(1, ROW_BLOCK)  # wide rows per block
        self.unit = self.group * self.block  # matrix rows per block
        self.floor = np.full(n_queries, -np.inf)  # float64
        self._raise_floor(self.floor)
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.size = 0
        self.budget = max(CANDIDATE_BUDGET, 4 * k * n_queries)
        self.seeded = False
        self.offsets = np.arange(self.block) * (self.group * n_queries)  # a block's wide rows, flat
        self._maxima = np.empty((0, self.group * n_queries), dtype=dtype)
        self._reach = np.empty((0, self.group * n_queries), dtype=np.bool_)

    def _raise_floor(self, values: np.ndarray) -> None:
        np.fmax(self.floor, values - self.windows, out=self.floor)
        self.cast = _round_down(self.floor, self.dtype)  # the floor in the scores' dtype, rounded down
        self.wide = np.tile(self.cast, self.group)  # per column of a wide row

    def _block_hits(self, flat: np.ndarray, n_rows: int, n_queries: int) -> tuple[np.ndarray, np.ndarray]:
        """(flat positions, scores) at or above the floors in the first ``n_rows`` rows (a multiple of ``unit``)."""
        width, block = self.group * n_queries, self.block
        blocks = flat[:n_rows * n_queries].reshape(-1, block, width)
        if self._maxima.shape[0] < blocks.shape[0]:  # reused by every full tile (no page faults per tile)
            self._maxima = np.empty((blocks.shape[0], width), dtype=flat.dtype)
            self._reach = np.empty((blocks.shape[0], width), dtype=np.bool_)
        maxima = np.maximum.reduce(blocks, axis=1, out=self._maxima[:blocks.shape[0]])
        if not self.seeded:
            self._seed(maxima.reshape(-1, self.group, n_queries))
        # (block, column) pairs whose maximum reaches the floor, as block * width + column
        reach = np.flatnonzero(np.greater_equal(maxima, self.wide, out=self._reach[:blocks.shape[0]]))
        # their scores: from block * block_rows * width + column, one wide row (width) apart
        positions = (reach + reach // width * ((block - 1) * width))[:, None] + self.offsets
        values = flat[positions]
        hit = values >= self.cast[reach % n_queries, None]
        return positions[hit], values[hit]

    def _seed(self, maxima: np.ndarray) -> None:
        """The first floors, from a tile's (block, group position, query) maxima.

        Maxima of disjoint row sets: the k-th largest per query is reached by
        k rows.  Whole blocks (``unit`` rows) when there are k of them: fewer
        values to partition, and the k best rows of a tile seldom share one.
        """
        per_block = maxima.max(axis=1) if maxima.shape[0] >= self.k else maxima.reshape(-1, maxima.shape[2])
        if per_block.shape[0] >= self.k:
            per_query = np.ascontiguousarray(per_block.T)  # (a partition along contiguous rows)
            self._raise_floor(np.partition(per_query, per_query.shape[1] - self.k, axis=1)[:, -self.k])
            self.seeded = True

    def add(self, rows: np.ndarray | int, scores: np.ndarray) -> None:
        """Keep the entries of one tile's ``scores`` (t, q), C-contiguous, at or above the floors."""
        n_rows, n_queries = scores.shape
        flat = scores.reshape(-1)
        blocked = n_rows - n_rows % self.unit
        if blocked:
            hits, values = self._block_hits(flat, blocked, n_queries)
        if blocked < n_rows:  # rows short of a block (a small tile, the last one): compared one by one
            if not self.seeded and n_rows >= self.k:
                self._raise_floor(_kth_lower_bounds(scores, self.k))
                self.seeded = True
            tail = np.flatnonzero(scores[blocked:] >= self.cast) + blocked * n_queries
            hits, values = (tail, flat[tail]) if not blocked else \
                (np.concatenate((hits, tail)), np.concatenate((values, flat[tail])))
        if hits.size == 0:
            return
        position, query = np.divmod(hits, n_queries)
        row = position + rows if isinstance(rows, int) else rows[position]
        self.parts.append((query, row.astype(np.int64, copy=False), values))
        self.size += hits.size
        if self.size > self.budget:
            self.compact()
            self.budget = max(self.budget, 2 * self.size)

    def compact(self) -> tuple[np.ndarray, np.ndarray]:
        """Drop what the exact k-th best kept so far rules out; return (query, row)."""
        if len(self.parts) == 1:
            query, row, score = self.parts[0]
        else:
            query, row, score = (np.concatenate(p) for p in zip(*self.parts)) if self.parts else \
                (np.empty(0, np.intp), np.empty(0, np.int64), np.empty(0, self.dtype))
        n_queries = self.floor.size
        counts = np.bincount(query, minlength=n_queries)
        width = int(counts.max(initial=0))
        if width >= self.k:
            # (a 16-bit key sorts by radix, in linear time)
            order = np.argsort(query.astype(np.uint16) if n_queries <= 1 << 16 else query, kind="stable")
            starts = np.zeros(n_queries + 1, dtype=np.int64)
            np.cumsum(counts, out=starts[1:])
            grouped = score[order]
            kth = np.full(n_queries, -np.inf)
            if n_queries * width <= 1 << 22:  # one partition over a padded (queries, width) grid
                grid = np.full((n_queries, width), -np.inf, dtype=score.dtype)
                sorted_query = query[order]
                grid[sorted_query, np.arange(query.size) - starts[sorted_query]] = grouped
                kth[:] = np.partition(grid, width - self.k, axis=1)[:, width - self.k]
            else:
                for j in np.flatnonzero(counts >= self.k).tolist():
                    segment = grouped[starts[j]:starts[j + 1]]
                    kth[j] = np.partition(segment, segment.size - self.k)[segment.size - self.k]
            kth[counts < self.k] = -np.inf  # fewer than k kept: no k-th best yet
            self._raise_floor(kth)
            keep = np.flatnonzero(score >= self.cast[query])
            query, row, score = query[keep], row[keep], score[keep]
        self.parts = [(query, row, score)]
        self.size = query.size
        return query, row


def _round_down_scalar(value: float, dtype: np.dtype) -> np.floating:
    """``_round_down`` for one value (a numpy scalar of ``dtype``, so comparisons stay exact)."""
    with np.errstate(over="ignore"):
        cast = dtype.type(value)
    if float(cast) > value:
        cast = np.nextafter(cast, dtype.type(-np.inf))
    return max(cast, dtype.type(np.finfo(dtype).min))


def _one_query_candidates(matrix: np.ndarray, query: np.ndarray, mask: np.ndarray | None,
                          kept: np.ndarray | None, k: int, window: float,
                          block: np.ndarray | None = None, least: float = -math.inf) -> np.ndarray:
    """Rows that may reach one query's top k (and ``least``): ``_Candidates`` with fewer numpy calls.

    A selective filter leaves a product of a few hundred microseconds, so
    the bookkeeping around it must stay small.
    """
    rows_parts, score_parts = [], []
    floor = least - window
    for rows, tile, tile_mask in _tiles(matrix, mask, kept, 1, block=block):
        scores = tile @ query  # a matrix-vector product: memory speed
        if tile_mask is not None:
            np.copyto(scores, -np.inf, where=~tile_mask)
        if scores.size > max(4096, k):  # a lower bound of the k-th best first: one pass, no partition
            floor = max(floor, float(_kth_lower_bounds(scores[:, None], k)[0]) - window)
            hits = np.flatnonzero(scores >= _round_down_scalar(floor, scores.dtype))
            rows_parts.append(hits + rows if isinstance(rows, int) else rows[hits])
            score_parts.append(scores[hits])
        else:
            rows_parts.append(np.arange(rows, rows + scores.size) if isinstance(rows, int) else rows)
            score_parts.append(scores)
    rows = rows_parts[0] if len(rows_parts) == 1 else np.concatenate(rows_parts)
    scores = score_parts[0] if len(score_parts) == 1 else np.concatenate(score_parts)
    if scores.size > k:
        kth = float(np.partition(scores, scores.size - k)[scores.size - k])
        floor = max(floor, kth - window)
    return rows[scores >= _round_down_scalar(floor, scores.dtype)]


def _candidates(matrix: np.ndarray, queries: np.ndarray, mask: np.ndarray | None,
                kept: np.ndarray | None, k: int, windows: np.ndarray,
                block: np.ndarray | None = None, least: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(query, row) of every candidate row whose approximate score may reach the top k (``least``: one query's)."""
    n_queries = queries.shape[0]
    if n_queries == 1:
        single = _one_query_candidates(matrix, queries[0], mask, kept, k, float(windows[0]), block,
                                       -math.inf if least is None else float(least[0]))
        return np.zeros(single.size, dtype=np.intp), single
    found = _Candidates(n_queries, k, windows, matrix.dtype)
    buffer: np.ndarray | None = None  # one (rows, queries) block reused by every tile
    for rows, tile, tile_mask in _tiles(matrix, mask, kept, n_queries, found.unit, block):
        if buffer is None:
            buffer = np.empty((tile.shape[0], n_queries), dtype=np.result_type(queries, tile))
        # (rows, queries): the layout OpenBLAS's sgemm kernels (SkylakeX above all) write fastest
        scores: np.ndarray = np.matmul(tile, queries.T, out=buffer[:tile.shape[0]])
        if tile_mask is not None:
            scores[~tile_mask] = -np.inf
        found.add(rows, scores)
    return found.compact()


# -- the kernel -----------------------------------------------------------------------


def dense_topk(matrix: np.ndarray, queries: np.ndarray, mask: np.ndarray | None,
               fetch_k: int, *, norm_bound: float | None = None,
               gathered: tuple[np.ndarray, np.ndarray] | None = None, index: DenseIndex | None = None,
               least: np.ndarray | None = None) -> TopK:
    """Top ``fetch_k`` rows of ``matrix`` by dot product with each query, exactly.

    ``matrix`` (n, d) and ``queries`` (q, d) or (d,) are expected
    L2-normalized, so the scores are cosines; ``mask`` (bool, n) keeps the
    candidate rows (None: all).  Scores are float64, computed from the two
    vectors alone (see the module docstring), so a query's answer is the
    same to the bit in any batch, under any plan, thread count or BLAS
    kernel; ties break by row.  ``norm_bound``: an upper bound of the rows'
    norms (default: computed, cached for a read-only matrix).  ``gathered``:
    ``(rows, vectors)``, the mask's rows ascending (``np.flatnonzero(mask)``)
    and ``matrix[rows]``, gathered before — a filter used again (see
    ``Corpus.dense_topk``) is scored without finding and copying its rows
    again; the answer is the same to the bit (candidates are chosen with a
    margin over any float32 rounding, then scored exactly from ``matrix``).
    Trusted to be that pair (only their shapes are checked: the mask is not
    read again); ignored without a mask.  ``index``: the matrix's int8 codes
    (``irflow.kernels.dense_index``, ``dense_kernel.build_index``), trusted to
    be of this matrix: the compiled scan reads them instead of the float32
    rows to find the candidates (4x fewer bytes), unless the rows are
    gathered or the batch is large (``SCAN_MAX_QUERIES``); the same answer
    to the bit.  ``least`` (one float per query): the k-th best score of
    rows ranked before these (a corpus's earlier segments, whose rows win
    ties); rows scoring at or below it are not wanted, so the ranking step
    may leave them out: the answer holds every row of the top k that scores
    above it, ranked and scored as without ``least``, and perhaps some
    below it after them (the int8 scan and one query's product prune from it).

    >>> m = np.array([[1, 0], [0, 1], [1, 0]], dtype=np.float32)
    >>> top = dense_topk(m, np.array([1, 0], np.float32), np.array([False, True, True]), 5)
    >>> top.per_query(0)
    (array([2, 1]), array([1., 0.]))
    """
    matrix = np.asarray(matrix)
    if matrix.ndim != 2:
        raise IrflowError(f"the corpus vectors must be a 2-d (n, d) array, got shape {matrix.shape}")
    if matrix.dtype.kind != "f":
        raise IrflowError(f"the corpus vectors must be floating point (float32), got {matrix.dtype}")
    queries = _as_queries(queries, matrix)
    n_queries, n_rows = queries.shape[0], matrix.shape[0]
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_ or mask.shape != (n_rows,):
            raise IrflowError(
                f"mask must be a boolean array of shape ({n_rows},) (one entry per corpus row), "
                f"got {mask.dtype} {mask.shape}"
            )
    if least is not None:
        least = np.asarray(least, dtype=np.float64)
        if least.shape != (n_queries,):
            raise IrflowError(f"least must hold one score per query ({n_queries}), got shape {least.shape}")
    if fetch_k <= 0 or n_queries == 0 or n_rows == 0:
        return TopK.empty(n_queries)
    kept = block = None
    n_allowed = n_rows
    if gathered is not None and mask is not None:
        kept, block = gathered
        if kept.ndim != 1 or block.shape != (kept.size, matrix.shape[1]) or block.dtype != matrix.dtype:
            raise IrflowError(f"gathered must be (rows, matrix[rows]): got rows of shape {kept.shape} and vectors "
                              f"of shape {block.shape} ({block.dtype}) for a matrix of {matrix.shape} ({matrix.dtype})")
        n_allowed = int(kept.size)
        if n_allowed == 0:
            return TopK.empty(n_queries)
    elif mask is not None:
        n_allowed = int(np.count_nonzero(mask))
        if n_allowed == 0:
            return TopK.empty(n_queries)
        if n_allowed == n_rows:
            mask = None  # every row (a search without a filter): nothing to exclude, no pass to do it
        elif n_allowed <= gather_fraction(n_queries) * n_rows:
            kept = np.flatnonzero(mask)  # else the full product, dropped rows excluded after it
    k = min(int(fetch_k), n_allowed)
    # a zero query scores exactly 0 everywhere: its top k are the first k candidates
    # (and would make every row a candidate of the ranking step)
    live = np.flatnonzero(queries.any(axis=1)) if n_queries > 1 else np.arange(int(queries.any()))
    parts = []
    if live.size:
        subset = queries if live.size == n_queries else queries[live]
        floors = None if least is None else least[live]
        found = None
        limit = SCAN_MAX_QUERIES_GROUPED if grouped_scan() else SCAN_MAX_QUERIES
        if index is not None and kept is None and subset.shape[0] <= limit:
            if index.codes.shape != matrix.shape:
                raise IrflowError(f"index holds codes of shape {index.codes.shape} for a matrix of {matrix.shape}")
            found = scan_candidates(index, subset, mask, k, least=floors)  # None: no compiled scan here
        if found is None:
            bound = row_norm_bound(matrix) if norm_bound is None else float(norm_bound)
            found = _candidates(matrix, subset, mask, kept, k, score_windows(matrix, subset, bound), block, floors)
        query, row = found
        parts.append((live[query], row))
    if live.size < n_queries:
        zero = np.setdiff1d(np.arange(n_queries), live)
        first = np.arange(k) if mask is None else (np.flatnonzero(mask) if kept is None else kept)[:k]
        parts.append((np.repeat(zero, k), np.tile(first, zero.size)))
    query, row = (np.concatenate(p) for p in zip(*parts))
    return best_pairs(query, row, exact_scores(matrix, queries, query, row), k, n_queries)
