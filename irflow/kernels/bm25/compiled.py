"""BM25 top-k compiled with numba (optional): block-at-a-time MaxScore over the postings.

The numpy kernel (``irflow.kernels.bm25``) pays a few microseconds per numpy call and
several passes over memory per term; a query over common words reads most
of the postings several times.  This kernel does the same arithmetic in one
compiled pass: the rows are cut into blocks of ``BLOCK`` rows, and in each
block

1. the *essential* terms (a prefix of the canonical order: the rarest) add
   their contributions into a block-local accumulator, term after term —
   a term in a large share of the rows by a dense, vectorizable pass over
   its frequency column (``Postings.head_columns``), the others by walking
   their postings (each term's postings are row-ordered, so a cursor per
   term moves from block to block);
2. every row an essential term reached is either dropped, when its partial
   score plus the upper bounds of the other (*non-essential*) terms falls
   strictly short of the k-th best full score found so far (``theta``), or
   gets the non-essential terms added, in order, by lookups (a column read,
   or a binary search in the term's postings of this block), and competes
   for the top k in a heap ordered by (score desc, row asc);
3. after each block the essential prefix shrinks to the shortest one whose
   complement's bounds still sum to less than ``theta`` (MaxScore).

Exact, and the same bits as the numpy kernel: a row's score is the sum of
its terms' contributions in the canonical order, starting from 0.0, each
contribution computed with the same IEEE operations in the same order
(``tf * scale / (norm + tf)``; BM25L's formula as the numpy kernel writes
it), and numba compiles without fast-math, so nothing is reassociated or
fused.  A row is dropped only when its bound is below ``theta`` by a margin
far above rounding error, so no row that could reach the top k, or tie with
it, is lost.  ``tests/test_bm25_paths.py`` compares the kernels bit for bit.

Imported only when numba is installed (the ``fast`` extra) and
chosen (``irflow.kernels.bm25.kernel``: by default for indexes of 50k rows and
more); numpy scores otherwise.  The machine code is cached on disk (numba's
``cache=True``): compiled once per machine (10-20 s), loaded in each process
on first use (about 1.5 s with numba's import).  The scorer passes every
array read-only and in one layout, so one compiled signature serves indexes
built in memory and opened memory-mapped.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["topk", "topk_many", "scan", "scratch", "ranked", "BLOCK"]

#: Rows per block: the accumulator (8 bytes a row), flags and touched list stay in L1/L2.
BLOCK = 4096

OKAPI, BM25L = 0, 1


@njit(inline="always")
def _worse(s1: float, r1: int, s2: float, r2: int) -> bool:
    return s1 < s2 or (s1 == s2 and r1 > r2)


@njit(inline="always")
def _push(hs, hr, m, k, s, r):  # pragma: no cover - compiled
    """Offer (s, r) to the min-heap of the k best (root: the worst kept); returns the new size."""
    if m < k:
        j = m
        while j > 0:
            parent = (j - 1) >> 1
            if not _worse(s, r, hs[parent], hr[parent]):
                break
            hs[j] = hs[parent]
            hr[j] = hr[parent]
            j = parent
        hs[j] = s
        hr[j] = r
        return m + 1
    if _worse(s, r, hs[0], hr[0]):
        return m
    j = 0
    while True:
        c = 2 * j + 1
        if c >= k:
            break
        if c + 1 < k and _worse(hs[c + 1], hr[c + 1], hs[c], hr[c]):
            c += 1
        if not _worse(hs[c], hr[c], s, r):
            break
        hs[j] = hs[c]
        hr[j] = hr[c]
        j = c
    hs[j] = s
    hr[j] = r
    return m


@njit(inline="always")
def _contribution(variant, tf, scale, norm, k1, delta):  # pragma: no cover - compiled
    # The numpy kernel's operations, in its order (irflow.kernels.bm25.scorer._Scorer._contribution).
    if variant == BM25L:
        ctd = tf / norm
        return scale * tf * (ctd + delta) / (k1 + ctd + delta)
    out = tf * scale
    return out / (norm + tf)


@njit(inline="always")
def _find(post_rows, lo, hi, r):  # pragma: no cover - compiled
    """Position of row ``r`` in the ascending ``post_rows[lo:hi]``, or -1."""
    while lo < hi:
        mid = (lo + hi) >> 1
        v = post_rows[mid]
        if v < r:
            lo = mid + 1
        elif v > r:
            hi = mid
        else:
            return mid
    return -1


@njit(nogil=True, cache=True, error_model="numpy")
def _scan(term_ints, term_floats, post_rows, post_tfs, norms, head, mask, kept, kept_head, kept_norms,
          k, variant, k1, delta, constant, margin, prune, block, offset, hs, hr, m, limit, least,
          floored, acc, flag, touched, alive):  # pragma: no cover - compiled
    """One index's rows offered to the heap ``hs``/``hr`` of the ``m`` best so far (rows pushed as ``offset`` + row).

    What :func:`topk` does for one index, and what a corpus of several
    indexes (segments, ``irflow.kernels.bm25.parts``) does for each in turn:
    the heap, its size ``m`` and the pruning ``limit`` go in and come out, so
    an index after others starts pruning from the k-th score they found.
    ``acc``, ``flag`` (zeros), ``touched`` and ``alive``: ``block`` entries
    of scratch each (``scratch``), made once by the caller for every index
    it scans, left as they came (zeros where they were).
    Rows can be left out two ways: ``mask`` (size 0: none), read per
    posting, or a NaN in ``norms`` (what a segment's deleted rows get,
    ``_Scorer._compiled_arrays``): every contribution to such a row is NaN,
    so its partial score is NaN and it is never alive — no read of a mask
    per posting, no branch mispredicted on a deleted row.
    Returns ``(m, limit)``.
    """
    n = norms.size
    n_terms = term_ints.shape[0]
    los = term_ints[:, 0].copy()
    his = term_ints[:, 1].copy()
    columns = term_ints[:, 2].copy()
    dense = term_ints[:, 3].copy()
    scales = term_floats[:, 0].copy()
    bounds = term_floats[:, 1].copy()
    masked = mask.size > 0
    cur = los.copy()
    suffix = np.zeros(n_terms + 1)
    for j in range(n_terms - 1, -1, -1):
        suffix[j] = suffix[j + 1] + bounds[j]
    # flag: 1 reached by an essential term; 2 alive after the bound check
    kc = 0  # cursor in kept
    own = kept_head.shape[1] > 0  # the candidates' own copy of the head columns: read in order
    at_kept = np.empty(block if own else 0, np.int64)
    e = n_terms
    for b0 in range(0, n, block):
        b1 = min(b0 + block, n)
        width = b1 - b0
        # essential prefix: the shortest whose complement's bounds sum below theta (with a margin)
        if prune and (m == k or floored):
            while e > 0 and suffix[e - 1] + constant < limit:
                e -= 1
            if e == 0:
                break  # no row left can reach the k-th score
        k_lo = kc
        if kept.size > 0:
            while kc < kept.size and kept[kc] < b1:
                if own:
                    at_kept[kept[kc] - b0] = kc  # where this row's entries are in kept_head
                kc += 1
        nt = 0
        scan = False
        for j in range(e):
            scale = scales[j]
            if dense[j] == 1:  # a pass over the block's column: rows lacking the term add an exact 0
                col = head[columns[j], b0:b1]
                nrm = norms[b0:b1]
                for x in range(width):
                    acc[x] += _contribution(variant, col[x], scale, nrm[x], k1, delta)
                for x in range(width):
                    flag[x] |= col[x] > 0
                scan = True
                continue
            if dense[j] == 2:  # the candidates' column entries only (a selective mask)
                col = kept_head[columns[j]] if own else head[columns[j]]
                for i in range(k_lo, kc):
                    r = kept[i]
                    tf = col[i] if own else col[r]
                    if tf > 0:
                        x = r - b0
                        acc[x] += _contribution(variant, tf, scale, kept_norms[i] if own else norms[r], k1, delta)
                        touched[nt] = x
                        nt += 1 - flag[x]
                        flag[x] = 1
                continue
            i = cur[j]
            h = his[j]
            while i < h:
                r = post_rows[i]
                if r >= b1:
                    break
                if not masked or mask[r]:
                    x = r - b0
                    acc[x] += _contribution(variant, post_tfs[i], scale, norms[r], k1, delta)
                    touched[nt] = x
                    nt += 1 - flag[x]  # branchless: a row reached again is listed once
                    flag[x] = 1
                i += 1
            cur[j] = i
        # rows that can still reach the top k ("alive"), listed without branches
        rest = suffix[e] + constant
        check = prune and (m == k or floored)
        n_alive = 0
        if scan:
            floor = limit if check else -np.inf
            if masked:
                for x in range(width):
                    alive[n_alive] = x
                    n_alive += (flag[x] != 0) & mask[b0 + x] & ((acc[x] + rest >= floor) | (not check))
            else:  # a NaN partial score: a row left out by its NaN norm (see the docstring)
                for x in range(width):
                    alive[n_alive] = x
                    n_alive += (flag[x] != 0) & (acc[x] == acc[x]) & ((acc[x] + rest >= floor) | (not check))
        else:
            floor = limit if check else -np.inf
            for t in range(nt):  # rows reached through postings or the candidates: all in the mask
                x = touched[t]
                alive[n_alive] = x
                n_alive += (acc[x] == acc[x]) & ((acc[x] + rest >= floor) | (not check))
        for t in range(n_alive):
            flag[alive[t]] = 2
        # the non-essential terms, in order, added to the alive rows only
        for j in range(e, n_terms):
            scale = scales[j]
            c = columns[j]
            if c >= 0 and dense[j] == 1 and 4 * n_alive > width:
                # most rows alive: the vectorized pass beats lookups (the others are cleared below)
                col = head[c, b0:b1]
                nrm = norms[b0:b1]
                for x in range(width):
                    acc[x] += _contribution(variant, col[x], scale, nrm[x], k1, delta)
                scan = True
                continue
            if c >= 0:
                if own:  # alive rows are candidates: read the candidates' copy, not gather the column
                    col = kept_head[c]
                    for t in range(n_alive):
                        x = alive[t]
                        tf = col[at_kept[x]]
                        if tf > 0:
                            acc[x] += _contribution(variant, tf, scale, kept_norms[at_kept[x]], k1, delta)
                else:
                    col = head[c]
                    for t in range(n_alive):
                        x = alive[t]
                        tf = col[b0 + x]
                        if tf > 0:
                            acc[x] += _contribution(variant, tf, scale, norms[b0 + x], k1, delta)
                continue
            i = cur[j]
            h = his[j]
            if i < h and post_rows[i] < b0:  # essential in an earlier block: its cursor may lag
                lo, hi = i, h
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if post_rows[mid] < b0:
                        lo = mid + 1
                    else:
                        hi = mid
                i = lo
            # the end of this block's postings: binary search, so few alive rows skip the walk
            lo, hi = i, h
            while lo < hi:
                mid = (lo + hi) >> 1
                if post_rows[mid] < b1:
                    lo = mid + 1
                else:
                    hi = mid
            end = lo
            if n_alive * 8 < end - i:
                for t in range(n_alive):
                    x = alive[t]
                    at = _find(post_rows, i, end, b0 + x)
                    if at >= 0:
                        acc[x] += _contribution(variant, post_tfs[at], scale, norms[b0 + x], k1, delta)
            else:
                for a in range(i, end):
                    x = post_rows[a] - b0
                    if flag[x] == 2:
                        acc[x] += _contribution(variant, post_tfs[a], scale, norms[b0 + x], k1, delta)
            cur[j] = end
        for t in range(n_alive):
            x = alive[t]
            m = _push(hs, hr, m, k, acc[x] + constant + 0.0, offset + b0 + x)  # + 0.0: -0.0 becomes 0.0
            if m == k:
                theta = hs[0]
                limit = max(theta - margin * max(1.0, abs(theta), abs(constant)), least)
        if scan:
            acc[:width] = 0.0
            flag[:width] = 0
        else:
            for t in range(nt):
                x = touched[t]
                acc[x] = 0.0
                flag[x] = 0
    return m, limit


@njit(nogil=True, cache=True, error_model="numpy")
def scratch(block):  # pragma: no cover - compiled
    """``_scan``'s scratch for blocks of ``block`` rows: (acc, flag, touched, alive)."""
    return np.zeros(block), np.zeros(block, np.uint8), np.empty(block, np.int64), np.empty(block, np.int64)


@njit(nogil=True, cache=True, error_model="numpy")
def _ranked(hs, hr, m, floored, least_score):  # pragma: no cover - compiled
    """The heap's rows and scores, best first (score desc, row asc), less those at or below ``least_score``."""
    order = np.argsort(hr[:m], kind="mergesort")
    rows = hr[:m][order]
    scores = hs[:m][order]
    order = np.argsort(-scores, kind="mergesort")  # stable: equal scores stay by row
    rows, scores = rows[order], scores[order]
    if floored:
        above = scores > least_score
        rows, scores = rows[above], scores[above]
    return rows, scores


@njit(nogil=True, cache=True, error_model="numpy")
def topk(term_ints, term_floats, post_rows, post_tfs, norms, head, mask, kept, kept_head, kept_norms,
         k, variant, k1, delta, constant, margin, prune, block, least_score):  # pragma: no cover - compiled
    """Top ``k`` rows and scores (score desc, row asc) of one query; see the module docstring.

    Terms, in canonical order, one row each of ``term_ints`` (lo, hi, column,
    how) and ``term_floats`` (scale, bound): postings
    ``post_rows[lo:hi]``, head column (-1: none), scale = weight * (k1 + 1),
    score bound.  ``how``: 0 walk its postings, 1 a pass over the block's
    column, 2 its column read at the candidates only (``kept``: the
    candidate rows, ascending; a selective mask; ``kept_head`` and
    ``kept_norms``: the head columns and the norms at those rows, read in
    order instead of gathered, or empty arrays).  A non-essential term is
    looked up in its column when it has one, else in its postings.
    ``mask`` (size 0: every row) selects the candidates.  ``constant``
    (BM25Plus) is added to every score before ranking; ``margin`` the
    relative safety margin of pruning; ``prune`` false scores every row;
    ``block``: rows per block (``BLOCK``; tests use tiny blocks);
    ``least_score`` (-inf: none): rows scoring at or below it are left out,
    and pruning starts from it as if it were the k-th score already found.
    """
    hs = np.empty(k)
    hr = np.empty(k, np.int64)
    floored = least_score > -np.inf
    least = least_score - margin * max(1.0, abs(least_score), abs(constant)) if floored else -np.inf
    acc, flag, touched, alive = scratch(block)
    m, limit = _scan(term_ints, term_floats, post_rows, post_tfs, norms, head, mask, kept, kept_head, kept_norms,
                     k, variant, k1, delta, constant, margin, prune, block, 0, hs, hr, 0, least, least, floored,
                     acc, flag, touched, alive)
    return _ranked(hs, hr, m, floored, least_score)


@njit(nogil=True, cache=True, error_model="numpy")
def topk_many(term_ints, term_floats, starts, constants, floors, post_rows, post_tfs, norms, head, mask, kept,
              kept_head, kept_norms, k, variant, k1, delta, margin, prune, block, out_rows, out_scores,
              counts):  # pragma: no cover - compiled
    """:func:`topk` of several queries in one call, one after the other (no GIL held: threads share a batch).

    Query ``q``'s terms are ``term_ints[starts[q]:starts[q + 1]]`` (and
    ``term_floats``), its BM25Plus constant ``constants[q]`` and its floor
    ``floors[q]`` (``least_score`` of :func:`topk`).  Its rows and scores go
    to ``out_rows`` / ``out_scores`` from ``q * width`` on (``width`` =
    their length over the number of queries), best first, and their number
    to ``counts[q]``.  Each query is exactly :func:`topk`'s call on its own
    (the same scan, from an empty heap), so its rows and score bits are the
    same in any batch and any split of a batch between threads.
    """
    width = out_rows.size // max(counts.size, 1)
    hs = np.empty(k)
    hr = np.empty(k, np.int64)
    acc, flag, touched, alive = scratch(block)
    for q in range(counts.size):
        a, b = starts[q], starts[q + 1]
        if a == b:
            counts[q] = 0
            continue
        least_score = floors[q]
        constant = constants[q]
        floored = least_score > -np.inf
        least = least_score - margin * max(1.0, abs(least_score), abs(constant)) if floored else -np.inf
        m, limit = _scan(term_ints[a:b], term_floats[a:b], post_rows, post_tfs, norms, head, mask, kept, kept_head,
                         kept_norms, k, variant, k1, delta, constant, margin, prune, block, 0, hs, hr, 0, least,
                         least, floored, acc, flag, touched, alive)
        rows, scores = _ranked(hs, hr, m, floored, least_score)
        at = q * width
        out_rows[at:at + rows.size] = rows
        out_scores[at:at + rows.size] = scores
        counts[q] = rows.size
    return counts


#: The scan of one index into a heap of several's, and the heap's ranking (the public names of the two).
scan = _scan
ranked = _ranked
