"""A batch of BM25 queries through the compiled kernel: one call per chunk of queries, chunks shared by threads.

Scoring a batch query by query costs, besides the scan itself, a call into
numba per query (two dozen arguments type-checked each time, some 10-20 µs)
and two small array constructions: at 100k rows that is a third of a
query's time.  Here the batch's term tables are stacked once (each query's
terms in the canonical order, as :meth:`_Scorer.terms` gives them), and
``compiled.topk_many`` scans a chunk of queries per call, without the GIL,
so that chunks can run on several threads at once: the threads
:func:`irflow.util.threads.limit_threads` asks for (the command line's
``--threads``; one outside such a block, as every kernel of irflow is serial
unless asked).

Each query is still :func:`compiled.topk`'s scan on its own, from an empty
heap, so its rows and score bits are the same in any batch, any chunking
and any number of threads; chunks are concatenated in query order.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np

from irflow.kernels.bm25 import kernel
from irflow.kernels.bm25.scorer import DENSE_TERM_FRACTION, _PRUNE_MARGIN, _Scorer
from irflow.util.threads import requested_threads

__all__ = ["top_many", "batch_threads", "CHUNK", "CHUNK_ENTRIES"]

#: Queries per compiled call: small enough that threads share the work evenly, large enough that a
#: call's cost vanishes.
CHUNK = 64
#: Most entries (rows and scores) a chunk's output buffers hold: a deep ``k`` gets fewer queries a chunk.
CHUNK_ENTRIES = 1 << 18


def batch_threads() -> int:
    """Threads a batch of BM25 queries runs on: ``limit_threads``' (``--threads``), else 1."""
    return requested_threads() or 1


def _tables(scorer: _Scorer, query_tokens: Sequence[Sequence[str]],
            floors: Sequence[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """The batch's term tables stacked (``ints``, ``floats``), each query's first term (``starts``), its constant.

    A query with no term, or whose bounds cannot beat its floor, gets no
    term (it answers nothing, as :meth:`_Scorer.top` says).  ``via``: some
    term is read at the candidates' columns.
    """
    dense_limit = DENSE_TERM_FRACTION * scorer.postings.n_rows
    scale1 = scorer.k1 + 1.0
    ints: list[tuple[int, int, int, int]] = []
    floats: list[tuple[float, float]] = []
    starts = [0]
    constants = []
    via = False
    for tokens, floor in zip(query_tokens, floors):
        terms, constant = scorer.terms(tokens)
        constants.append(constant)
        if terms and not (floor > -np.inf and scorer.prune_ok and sum(t.bound for t in terms) + constant
                          < floor - _PRUNE_MARGIN * max(1.0, abs(floor), abs(constant))):
            for term in terms:  # how each term is added: as _Scorer._compiled_top decides
                how = 0
                if term.column >= 0:
                    if scorer._via_column(term):
                        how, via = 2, True
                    elif scorer.dense_ok and term.size > dense_limit:
                        how = 1
                ints.append((term.lo, term.hi, term.column, how))
                floats.append((term.weight * scale1, term.bound))
        starts.append(len(ints))
    term_ints = np.array(ints, dtype=np.int64).reshape(-1, 4)
    term_floats = np.array(floats, dtype=np.float64).reshape(-1, 2)
    for array in (term_ints, term_floats):
        array.flags.writeable = False  # numba's read-only signature, as _Scorer._compiled_top
    return term_ints, term_floats, np.array(starts, dtype=np.int64), np.array(constants, dtype=np.float64), via


def top_many(compiled: Any, scorer: _Scorer, query_tokens: Sequence[Sequence[str]], k: int,
             floors: Sequence[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each query's top ``k`` (``counts`` per query; rows and scores concatenated in query order, best first)."""
    n = len(query_tokens)
    term_ints, term_floats, starts, constants, via = _tables(scorer, query_tokens, floors)
    floor_array = np.asarray(floors, dtype=np.float64)
    arrays = scorer._compiled_arrays(via)
    width = int(min(k, scorer.postings.n_rows))
    fixed = (int(k), 1 if scorer.variant == "bm25l" else 0, float(scorer.k1), float(scorer.delta), _PRUNE_MARGIN,
             bool(scorer.prune_ok), int(kernel.COMPILED_BLOCK or compiled.BLOCK))

    step = max(1, min(CHUNK, CHUNK_ENTRIES // max(width, 1)))

    def chunk(lo: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        hi = min(lo + step, n)
        rows = np.empty((hi - lo) * width, dtype=np.int64)
        scores = np.empty((hi - lo) * width, dtype=np.float64)
        counts = np.zeros(hi - lo, dtype=np.int64)
        compiled.topk_many(term_ints, term_floats, starts[lo:hi + 1], constants[lo:hi], floor_array[lo:hi],
                           *arrays, *fixed, rows, scores, counts)
        # each query's entries start at a multiple of width: keep the first counts[q] of each
        keep = (np.arange(width)[None, :] < counts[:, None]).reshape(-1)
        return rows[keep], scores[keep], counts

    threads = min(batch_threads(), -(-n // step))
    if threads <= 1:
        parts = [chunk(lo) for lo in range(0, n, step)]
    else:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="irflow-bm25") as pool:
            parts = list(pool.map(chunk, range(0, n, step)))
    rows, scores, counts = (np.concatenate(column) for column in zip(*parts))
    return rows, scores, counts
