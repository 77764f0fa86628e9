"""BM25 over a corpus's parts (segments) in ONE compiled call: each part's scan into one heap, no call per part.

``irflow.kernels.bm25.parts`` scans the parts in row order into one heap
(``compiled.scan``, each part pruning from the k-th score the parts before
it found).  Called from Python once per part, that costs numba's dispatch
per call (typing some twenty arguments: 10-20 us each, on the order of a
whole query's scan at 1M rows when a corpus has ten segments).  This
module makes the loop over the parts compiled too.

The parts' arrays are of different lengths and live in different files, so
they cannot be one array, and numba's typed lists of arrays are built by
code compiled anew in every process (seconds).  Instead the caller passes
each array's address and shape (``table``: one row per part, an address and
two extents per array), and the loop rebuilds the arrays from them
(``carray``), with the first part's arrays as the type of each.  The
caller keeps the arrays alive (the scorers hold them) and checks they are
C-contiguous; the scan itself is ``compiled.scan``, unchanged, so the rows
and score bits are those of the calls one by one (a part's deleted rows
left out by its mask or by NaN norms, as ``compiled.scan`` says).

numba's cache on disk is checked against this file only, though the scan
is compiled into it from ``compiled.py``: a change there must come with
a change here (or the ``__pycache__/*.nbi`` files removed), or a stale
loop runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import carray, njit, types
from numba.extending import intrinsic

from irflow.kernels.bm25.compiled import _ranked, _scan, scratch

__all__ = ["ARRAYS", "scan_parts", "stack"]

#: Arrays per part, in ``compiled.scan``'s order: post_rows, post_tfs, norms, head, mask, kept, kept_head, kept_norms.
ARRAYS = 8


@intrinsic
def _pointer(typingctx: Any, address: Any, like: Any) -> Any:
    """``address`` (an int64) as a pointer to ``like``'s element type."""
    signature = types.CPointer(like.dtype)(address, like)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.inttoptr(args[0], context.get_value_type(sig.return_type))

    return signature, codegen


@njit(inline="always")
def _one(table, p, i, like):  # pragma: no cover - compiled
    return carray(_pointer(table[p, 3 * i], like), (table[p, 3 * i + 1],))  # type: ignore[call-arg]


@njit(inline="always")
def _two(table, p, i, like):  # pragma: no cover - compiled
    shape = (table[p, 3 * i + 1], table[p, 3 * i + 2])
    return carray(_pointer(table[p, 3 * i], like), shape)  # type: ignore[call-arg]


@njit(nogil=True, cache=True, error_model="numpy")
def scan_parts(term_ints, term_floats, bounds, offsets, table, post_rows, post_tfs, norms, head, mask, kept,
               kept_head, kept_norms, k, variant, k1, delta, constant, margin, prune,
               block):  # pragma: no cover - compiled
    """Top ``k`` (rows, scores) over the parts, best first: ``compiled.scan`` of each part in turn, one heap.

    Part ``p``'s terms are ``term_ints[bounds[p]:bounds[p + 1]]`` (and
    ``term_floats``); its rows start at ``offsets[p]``; ``table[p]`` holds
    its eight arrays' (address, extent, extent); the arrays passed after it
    are the first part's, read for their types only.  A part whose terms'
    bounds cannot reach the k-th score found before it is not scanned.
    """
    hs = np.empty(k)
    hr = np.empty(k, np.int64)
    m = 0
    limit = -np.inf
    acc, flag, touched, alive = scratch(block)  # once for every part
    for p in range(offsets.size):
        a, b = bounds[p], bounds[p + 1]
        if a == b:
            continue
        if prune and m == k:
            reach = 0.0
            for t in range(a, b):
                reach += term_floats[t, 1]
            if reach + constant < limit:
                continue  # no row of this part can reach the k-th score found (the scan would stop at once)
        m, limit = _scan(term_ints[a:b], term_floats[a:b], _one(table, p, 0, post_rows), _one(table, p, 1, post_tfs),
                         _one(table, p, 2, norms), _two(table, p, 3, head), _one(table, p, 4, mask),
                         _one(table, p, 5, kept), _two(table, p, 6, kept_head), _one(table, p, 7, kept_norms),
                         k, variant, k1, delta, constant, margin, prune, block, offsets[p], hs, hr, m, limit,
                         -np.inf, False, acc, flag, touched, alive)
    return _ranked(hs, hr, m, False, -np.inf)


@njit(nogil=True, cache=True, error_model="numpy")
def stack(ints, scales, factors):  # pragma: no cover - compiled
    """A query's terms as :func:`scan_parts` takes them: part after part, each part's terms in the given order.

    ``ints[t, p]``: term ``t``'s (lo, hi, column, how) in part ``p`` (``hi ==
    lo``: no postings there, left out); ``scales[t]``: its weight * (k1 + 1);
    ``factors[t, p]``: its bound's factor there.  Returns ``term_ints``,
    ``term_floats`` (scale, bound = max(scale * factor, 0)), the parts'
    ``bounds`` and, per part, whether a term is read at its candidates
    (``how`` 2).
    """
    n_terms, n_parts = ints.shape[0], ints.shape[1]
    n = 0
    for t in range(n_terms):
        for p in range(n_parts):
            n += ints[t, p, 1] > ints[t, p, 0]
    term_ints = np.empty((n, 4), np.int64)
    term_floats = np.empty((n, 2))
    bounds = np.zeros(n_parts + 1, np.int64)
    via = np.zeros(n_parts, np.bool_)
    i = 0
    for p in range(n_parts):
        for t in range(n_terms):
            if ints[t, p, 1] > ints[t, p, 0]:
                for c in range(4):
                    term_ints[i, c] = ints[t, p, c]
                term_floats[i, 0] = scales[t]
                term_floats[i, 1] = max(scales[t] * factors[t, p], 0.0)
                via[p] |= ints[t, p, 3] == 2
                i += 1
        bounds[p + 1] = i
    return term_ints, term_floats, bounds, via


def table_row(arrays: tuple[np.ndarray, ...], like: tuple[np.ndarray, ...]) -> np.ndarray | None:
    """One part's row of ``table`` (int64: address and two extents per array).

    None when an array is not C-contiguous or differs from ``like`` (the
    first part's) in dtype or dimensions: the caller scans part by part.
    """
    row = np.zeros(3 * ARRAYS, dtype=np.int64)
    for i, (array, first) in enumerate(zip(arrays, like)):
        if not array.flags.c_contiguous or array.ndim != first.ndim or array.dtype != first.dtype:
            return None
        row[3 * i] = array.ctypes.data
        row[3 * i + 1:3 * i + 1 + array.ndim] = array.shape
    return row
