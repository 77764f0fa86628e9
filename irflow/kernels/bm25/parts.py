"""BM25 over the parts of one corpus (segments in row order): one top-k, as one index of all their rows gives.

Each part has its own postings and its own scorer, all scoring with the
same (the corpus's) statistics, so a row's score is the same bits in its
part as in one index of every row.  :class:`PartsScorer` ranks a query over
all of them:

- with the compiled kernel, into ONE heap ordered by (score desc, global
  row asc): the query's terms described once, each part's scan
  (``compiled.scan``) starting from the heap the parts before it filled, so
  it prunes from the k-th score they found — a part whose bounds cannot
  reach it is not even scanned; the loop over the parts is compiled too
  (``compiled_parts``: one call per query, not one per part);
- otherwise part after part, each told the k-th score found before it (a
  floor: its rows scoring at or below it lose to those rows, which hold
  lower rows), and the parts' tops concatenated in row order, so a stable
  sort by score keeps ties by row.

Both give exactly the rows and score bits of one index (the kernels are
bit for bit the same on any part), which ``tests/test_living.py`` checks
against fresh builds.
"""

from __future__ import annotations

import heapq
import importlib
from typing import Any, Sequence

import numpy as np

from irflow.kernels.bm25 import kernel
from irflow.kernels.bm25.batch import top_many
from irflow.kernels.bm25.scorer import DENSE_TERM_FRACTION, _PRUNE_MARGIN, _Scorer

__all__ = ["PartsScorer"]

_NO_ROWS = np.empty(0, dtype=np.int64)
_NO_SCORES = np.empty(0, dtype=np.float64)
_NO_INTS = np.empty((0, 4), dtype=np.int64)
_NO_FLOATS = np.empty((0, 2), dtype=np.float64)
#: A token as the first part describes it, and its (lo, hi, column, how) row and bound's factor in every part
#: (see ``PartsScorer._token``).
_TokenParts = tuple[tuple[int, int, int, int, float, float], np.ndarray, np.ndarray]
_LOOP: list[Any] = []  # [irflow.kernels.bm25.compiled_parts], imported with the compiled kernel (numba)


def _compiled_loop() -> Any:
    """The compiled loop over the parts (imported where the compiled kernel is: numba is optional)."""
    if not _LOOP:
        _LOOP.append(importlib.import_module("irflow.kernels.bm25.compiled_parts"))
    return _LOOP[0]


class PartsScorer:
    """The scorers of a corpus's parts (None: nothing scores there) and where each part's rows start."""

    def __init__(self, scorers: Sequence[_Scorer | None], offsets: Sequence[int]) -> None:
        self.parts = [(s, int(o)) for s, o in zip(scorers, offsets) if s is not None]
        self._offsets = np.array([o for _, o in self.parts], dtype=np.int64)
        self._tables: dict[tuple[bool, ...], tuple[np.ndarray, tuple[np.ndarray, ...]] | None] = {}  # _table_of
        self._tokens: dict[str, _TokenParts] = {}

    def top(self, tokens: Sequence[str], k: int, corpus_rows: int) -> tuple[np.ndarray, np.ndarray]:
        """(global rows, scores) of the top ``k`` rows holding a query token, best first, ties by row."""
        compiled = kernel.compiled_module(corpus_rows)
        if compiled is not None and len(self.parts) > 1:
            return self._compiled(compiled, tokens, k)
        return self._one_by_one(tokens, k, corpus_rows)

    def top_many(self, queries: Sequence[Sequence[str]], k: int,
                 corpus_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Each query's :meth:`top` for a batch, through the compiled batch kernel (None: numpy scores here).

        Part after part, as :meth:`_one_by_one` does for one query: every
        query of the batch scanned in the part (``batch.top_many``: chunks of
        queries on ``--threads`` threads), each above the k-th score the parts
        before it found for that query (its floor); then each query's rows of
        all parts, concatenated in row order, sorted by score stably (ties by
        row) and cut to ``k``.  Returns (rows, scores, counts per query).
        """
        compiled = kernel.compiled_module(corpus_rows)
        if compiled is None:
            return None
        n = len(queries)
        floors = np.full(n, -np.inf)
        qi, rows, scores = np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64)
        for scorer, offset in self.parts:
            found, found_scores, counts = top_many(compiled, scorer, queries, k, floors.tolist())
            qi = np.concatenate([qi, np.repeat(np.arange(n, dtype=np.int64), counts)])
            rows = np.concatenate([rows, found + offset])
            scores = np.concatenate([scores, found_scores])
            # each query's best k so far: a stable sort keeps the parts' (row) order among equal scores
            order = np.lexsort((-scores, qi))
            qi, rows, scores = qi[order], rows[order], scores[order]
            rank = np.arange(qi.size) - np.searchsorted(qi, qi, side="left")
            keep = rank < k
            qi, rows, scores = qi[keep], rows[keep], scores[keep]
            full = rank[keep] == k - 1  # the k-th score of a query holding k: the next part's floor
            floors[qi[full]] = scores[full]
        return rows, scores, np.bincount(qi, minlength=n)

    def _one_by_one(self, tokens: Sequence[str], k: int, corpus_rows: int) -> tuple[np.ndarray, np.ndarray]:
        found_rows, found_scores = [], []
        best: list[float] = []  # the k highest scores so far (a min-heap): the next part's floor
        floor = -np.inf
        for scorer, offset in self.parts:
            rows, scores = scorer.top(tokens, k, corpus_rows, floor)
            if not rows.size:
                continue
            found_rows.append(rows + offset)
            found_scores.append(scores)
            for value in scores.tolist():
                if len(best) < k:
                    heapq.heappush(best, value)
                elif value > best[0]:
                    heapq.heapreplace(best, value)
            if len(best) == k:
                floor = best[0]
        if len(found_rows) <= 1:
            return (found_rows[0], found_scores[0]) if found_rows else (_NO_ROWS, _NO_SCORES)
        rows, scores = np.concatenate(found_rows), np.concatenate(found_scores)
        keep = np.argsort(-scores, kind="stable")[:k]  # parts in row order: ties stay by row
        return rows[keep], scores[keep]

    def _known(self, scorer: _Scorer, token: str) -> tuple[int, int, int, int, float, float]:
        """A token as the scorer describes it (kept by the scorer: its statistics never change)."""
        cache = scorer._tokens
        known = cache.get(token)
        if known is None:
            known = scorer._describe(token)
            if len(cache) >= 1 << 16:
                cache.clear()
            cache[token] = known
        return known

    def _token(self, token: str) -> _TokenParts:
        """A token as the first part describes it (its df and idf: the corpus's), and its row in every part.

        Per part ``(lo, hi, column, how)`` (``hi == lo``: no postings there;
        ``how`` 0 walk the postings, 1 a pass over the head column, 2 the
        column read at the candidates, as ``_Scorer._via_column``) and the
        bound's factor (BM25L's largest tf, else 1).  Kept per token: the
        parts' statistics never change, and a query then costs one lookup
        per token, not one per part and token.
        """
        found = self._tokens.get(token)
        if found is None:
            first = self.parts[0][0]
            bm25l = first.variant == "bm25l"
            ints = np.zeros((len(self.parts), 4), dtype=np.int64)
            factors = np.ones(len(self.parts), dtype=np.float64)
            for p, (scorer, _) in enumerate(self.parts):
                _df, lo, hi, column, _idf, top_tf = self._known(scorer, token)
                if hi == lo:
                    continue  # no posting in this part
                how = 0
                if column >= 0:
                    if scorer.mask is not None and 4 * scorer.n_kept < hi - lo:
                        how = 2
                    elif scorer.dense_ok and hi - lo > DENSE_TERM_FRACTION * scorer.postings.n_rows:
                        how = 1
                ints[p] = (lo, hi, column, how)
                if bm25l:
                    factors[p] = top_tf
            found = (self._known(first, token), ints, factors)
            if len(self._tokens) >= 1 << 16:
                self._tokens.clear()
            self._tokens[token] = found
        return found

    def _table(self, tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, tuple[bool, ...]]:
        """The parts' term tables stacked: the query's terms in the canonical order, each part's spans.

        The order, weights and BM25Plus's constant come from the corpus's
        statistics, the same for every part (what ``_Scorer.terms`` gives each
        part); a part lists the terms it holds postings of.  Returns the
        compiled loop's ``term_ints`` (lo, hi, column, how) and
        ``term_floats`` (weight * (k1 + 1), bound) of part after part, where
        each part's rows start (``bounds``), the constant and, per part,
        whether a term is read at its candidates there (``_table_of``'s ``vias``).
        The tokens' rows are laid out by one compiled call (``compiled_parts.stack``):
        numpy's calls over a few terms cost more than the scan of a small segment.
        """
        first = self.parts[0][0]
        counts: dict[str, int] = {}
        for token in tokens:
            counts[token] = counts.get(token, 0) + 1
        known = [(self._token(token), token, count) for token, count in counts.items()]
        ordered = sorted(((d, t, c) for d, t, c in known if d[0][0] != 0), key=lambda f: (f[0][0][0], f[1]))
        scale1 = first.k1 + 1.0
        constant = 0.0
        scales, ints, factors = [], [], []
        for ((_df, _lo, _hi, _column, idf, _top), rows, factor), _token, count in ordered:
            weight = count * idf
            if first.variant == "bm25plus":
                constant += weight * first.delta
            scales.append(weight * scale1)
            ints.append(rows)
            factors.append(factor)
        if not ints:
            n_parts = len(self.parts)
            return _NO_INTS, _NO_FLOATS, np.zeros(n_parts + 1, dtype=np.int64), constant, (False,) * n_parts
        term_ints, term_floats, bounds, via = _compiled_loop().stack(np.array(ints), np.array(scales),
                                                                     np.array(factors))
        return term_ints, term_floats, bounds, constant, tuple(via.tolist())

    def _table_of(self, vias: tuple[bool, ...]) -> tuple[np.ndarray, tuple[np.ndarray, ...]] | None:
        """The parts' arrays as the compiled loop takes them: addresses and extents, and the first part's arrays.

        Made once per scorer and choice of arrays (the parts' scorers keep
        the arrays, so the addresses stay valid while this object lives);
        ``vias[p]``: part ``p`` with its candidates' columns (a term read at
        the candidates).  None when an array cannot be passed so (the parts
        are then called one by one).
        """
        if vias not in self._tables:
            arrays = [scorer._compiled_arrays(via) for (scorer, _), via in zip(self.parts, vias)]
            rows = [_compiled_loop().table_row(a, arrays[0]) for a in arrays]
            table = None if any(r is None for r in rows) else np.stack(rows)
            if table is not None:
                table.flags.writeable = False
            if len(self._tables) >= 64:
                self._tables.clear()
            self._tables[vias] = None if table is None else (table, arrays[0])
        return self._tables[vias]

    def _compiled(self, compiled: Any, tokens: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """The parts scanned in row order into one heap (see the module docstring)."""
        term_ints, term_floats, bounds, constant, vias = self._table(tokens)
        if not term_ints.size:
            return _NO_ROWS, _NO_SCORES
        term_ints.flags.writeable = False  # numba's read-only signature, as _Scorer._compiled_top
        term_floats.flags.writeable = False
        first = self.parts[0][0]
        variant, k1, delta = 1 if first.variant == "bm25l" else 0, float(first.k1), float(first.delta)
        prune, block = bool(first.prune_ok), int(kernel.COMPILED_BLOCK or compiled.BLOCK)
        table = self._table_of(vias)
        if table is not None:  # one compiled call for every part
            found_all: tuple[np.ndarray, np.ndarray] = _compiled_loop().scan_parts(
                term_ints, term_floats, bounds, self._offsets, table[0], *table[1], int(k),
                variant, k1, delta, float(constant), _PRUNE_MARGIN, prune, block)
            return found_all
        hs, hr = np.empty(k), np.empty(k, dtype=np.int64)
        m, limit = 0, -np.inf
        work = compiled.scratch(block)
        for (scorer, offset), a, b, via in zip(self.parts, bounds[:-1].tolist(), bounds[1:].tolist(), vias):
            if a == b:
                continue
            if prune and m == k and sum(term_floats[a:b, 1].tolist()) + constant < limit:
                continue  # no row of this part can reach the k-th score found (the kernel would stop at once)
            arrays = scorer._compiled_arrays(via)
            m, limit = compiled.scan(term_ints[a:b], term_floats[a:b], *arrays, int(k), variant, k1, delta,
                                     float(constant), _PRUNE_MARGIN, prune, block, offset, hs, hr, m, limit,
                                     -np.inf, False, *work)
        found: tuple[np.ndarray, np.ndarray] = compiled.ranked(hs, hr, m, False, -np.inf)
        return found
