"""Exact MaxScore pruning for the numpy kernel: score the rare terms' rows, look the common terms up.

A query over common words would otherwise touch most of the corpus: the
rows holding a rarer ("essential") term get their partial scores, a
threshold from the best of them bounds the k-th score, and only the rows
whose partial score plus the common terms' bounds can still reach it get
the common terms added.  Exact: see ``pruned``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from irflow.kernels.bm25.scratch import _scratch, _Term

if TYPE_CHECKING:
    from irflow.kernels.bm25.scorer import _Scorer

__all__ = ["pruned", "add_common", "PRUNE_BUDGET_FRACTION", "PRUNE_LIMIT_FRACTION", "FULL_SCORE_ROWS"]

#: Pruning starts with the essential terms whose postings fit in this fraction
#: of the rows (the rarest term always counts as essential)...
PRUNE_BUDGET_FRACTION = 1 / 16
#: ...and gives up for the exhaustive path once they exceed this fraction.
PRUNE_LIMIT_FRACTION = 1.0
#: Up to this many essential rows, the common terms are looked up in all of
#: them at once; beyond, only in the best few first (to set the threshold) and
#: then in the rows that can still reach it.  Fewer numpy calls win below it.
FULL_SCORE_ROWS = 8192


def pruned(scorer: "_Scorer", terms: list[_Term], k: int,
           constant: float = 0.0) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Exact top candidates found without scoring the common terms' rows, or (None, None).

    MaxScore, vectorized.  ``terms`` (canonical order, ascending size)
    split into essential terms, a prefix, and common ones, the rest; the
    candidate rows holding an essential term get their essential
    ("partial") scores, which are their canonical sums so far.  Full scores
    of the rows with the best partial scores give ``theta``, a lower bound
    of the k-th best score.  A row's full score is at most its partial
    score plus the common terms' bounds, so a row holding common terms only
    (partial 0) cannot reach the top k when the bounds sum to less than
    ``theta``, nor can a row whose partial score plus that sum falls short
    — strictly short, so not even by a tie.  Only the rows left get the
    common terms added, in order, so their scores are the canonical sums.
    If the check fails, ``theta`` decides which common terms must become
    essential (the largest ones stay common while their bounds fit under
    it) and the check runs again.  ``constant`` (BM25Plus's, added to every
    score later) widens the safety margin so that adding it cannot round a
    pruned row up to a tie.
    """
    n_rows = scorer.postings.n_rows
    budget = PRUNE_BUDGET_FRACTION * n_rows
    sizes = [scorer.size(t) for t in terms]
    if sum(sizes) <= budget:
        return None, None  # every term is rare: scoring them all is cheaper
    # essential: the rarest terms within budget, at least the rarest one (a
    # prefix of the canonical order, even when a floored Okapi idf makes a
    # commoner term the strongest)
    split, size = 1, sizes[0]
    while split < len(terms) and size + sizes[split] <= budget:
        size += sizes[split]
        split += 1
    seed = max(2 * k, 32)
    while split < len(terms) and size <= PRUNE_LIMIT_FRACTION * n_rows:
        common = terms[split:]
        rows, partial = scorer._scores(terms[:split])
        if rows.size >= k:
            if rows.size <= FULL_SCORE_ROWS:  # few rows: score them all at once
                best, full = None, add_common(scorer, common, rows, partial)
            else:  # any rows' full scores bound the k-th score: no need for exact ranks
                best = np.argpartition(partial, rows.size - seed)[rows.size - seed:] \
                    if seed < rows.size else np.arange(rows.size)
                full = add_common(scorer, common, rows[best], partial[best])
            theta = np.partition(full, full.size - k)[full.size - k]
            # a margin far above rounding error keeps the shortcut exact
            limit = theta - 1e-9 * max(1.0, abs(theta), abs(constant))
            bound = sum(t.bound for t in common)
            if bound < limit:
                if best is None:
                    return rows, full
                alive = np.flatnonzero(partial >= limit - bound)
                return rows[alive], add_common(scorer, common, rows[alive], partial[alive])
            # the largest terms (the order's end) stay common while their bounds fit
            keep, total = len(terms), 0.0
            while keep > split and total + terms[keep - 1].bound < limit:
                keep -= 1
                total += terms[keep].bound
            moved = max(keep, split + 1)  # the bounds of all common terms do not fit
        else:  # too few rows to set a threshold: widen with the next rarest term
            moved = split + 1
        size += sum(sizes[split:moved])
        split = moved
    return None, None  # everything became essential: the exhaustive path does it best

def add_common(scorer: "_Scorer", common: list[_Term], rows: np.ndarray, partial: np.ndarray) -> np.ndarray:
    """``partial`` plus the common terms' contributions to ``rows``, added in ``common``'s order.

    ``rows`` are distinct (any order) and ``partial`` their scores so far;
    ``partial`` is left as it is.
    """
    out = partial.copy()
    block = None
    if scorer.dense_ok:
        # head terms all at once: a (terms, rows) block of frequencies from the
        # columns; tf = 0 contributes an exact 0 here, no need to find the holders
        heads = [t for t in common if t.column >= 0]
        if heads:
            columns = np.array([t.column for t in heads])
            tfs = scorer.head[columns[:, None], rows[None, :]]
            weights = np.array([t.weight for t in heads])[:, None]
            block = iter(scorer._contribution(weights, rows, tfs))
    s = _scratch(scorer.postings)
    mapped = False
    try:
        for term in common:
            if term.column >= 0:
                if block is not None:
                    out += next(block)
                    continue
                tfs = scorer.head[term.column][rows]
                found = np.flatnonzero(tfs)
                hits, tfs = rows[found], tfs[found]
            else:
                # rare enough to walk its postings: map rows to positions once
                if not mapped:
                    s.pos[rows] = np.arange(rows.size, dtype=s.pos.dtype)
                    mapped = True
                term_rows = scorer.postings.post_rows[term.lo:term.hi].astype(np.intp)
                at = s.pos[term_rows]
                inside = np.flatnonzero(at >= 0)
                found = at[inside]
                hits, tfs = term_rows[inside], scorer.postings.post_tfs[term.lo:term.hi][inside]
            if found.size:
                out[found] += scorer._contribution(term.weight, hits, tfs)  # distinct positions
    finally:
        if mapped:
            s.pos[rows] = -1
    return out
