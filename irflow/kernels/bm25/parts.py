"""BM25 over the parts of one corpus (segments in row order): one top-k, as one index of all their rows gives.

Each part has its own postings and its own scorer, all scoring with the
same (the corpus's) statistics, so a row's score is the same bits in its
part as in one index of every row.  :class:`PartsScorer` ranks a query over
all of them:

- with the compiled kernel, in ONE call (``compiled.topk_parts``): the
  parts' term tables stacked, their arrays handed as numba typed lists
  (made once per scorer set), one heap ordered by (score desc, global row
  asc) — each part prunes from the k-th score the parts before it found,
  and no Python runs between parts;
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
import threading
from typing import Any, Sequence

import numpy as np

from irflow.kernels.bm25 import kernel
from irflow.kernels.bm25.scorer import DENSE_TERM_FRACTION, _PRUNE_MARGIN, _Scorer

__all__ = ["PartsScorer"]

_NO_ROWS = np.empty(0, dtype=np.int64)
_NO_SCORES = np.empty(0, dtype=np.float64)


class PartsScorer:
    """The scorers of a corpus's parts (None: nothing scores there) and where each part's rows start."""

    def __init__(self, scorers: Sequence[_Scorer | None], offsets: Sequence[int]) -> None:
        self.parts = [(s, int(o)) for s, o in zip(scorers, offsets) if s is not None]
        self._lists: tuple[Any, ...] | None = None
        self._lock = threading.Lock()

    def top(self, tokens: Sequence[str], k: int, corpus_rows: int) -> tuple[np.ndarray, np.ndarray]:
        """(global rows, scores) of the top ``k`` rows holding a query token, best first, ties by row."""
        compiled = kernel.compiled_module(corpus_rows)
        if compiled is not None and len(self.parts) > 1 and self._uniform():
            return self._compiled(compiled, tokens, k)
        return self._one_by_one(tokens, k, corpus_rows)

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

    def _uniform(self) -> bool:
        """Whether every part's arrays share one type (one compiled signature takes them as lists)."""
        first = self.parts[0][0]
        return all(s.postings.post_tfs.dtype == first.postings.post_tfs.dtype and s.head.dtype == first.head.dtype
                   and s.prune_ok == first.prune_ok for s, _ in self.parts)

    def _typed(self, compiled: Any) -> tuple[Any, ...]:
        """Each array of the parts' as a typed list (with the candidates' own rows and columns), made once."""
        if self._lists is None:
            with self._lock:
                if self._lists is None:
                    # the candidates' own rows only where a term can be read at them (a selective mask):
                    # the kernel walks them block by block, which costs a pass for a mask of most rows
                    arrays = [s._compiled_arrays(s.mask is not None and 4 * s.n_kept < s.postings.n_rows)
                              for s, _ in self.parts]
                    lists = tuple(compiled.typed_list([a[i] for a in arrays]) for i in range(len(arrays[0])))
                    offsets = np.array([o for _, o in self.parts], dtype=np.int64)
                    offsets.flags.writeable = False
                    self._lists = (offsets, *lists)
        return self._lists

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

    def _table(self, tokens: Sequence[str]) -> tuple[list[tuple[int, int, int, int]], list[tuple[float, float]],
                                                     list[int], float]:
        """The parts' term tables stacked: the query's terms in the canonical order, each part's spans.

        The order, weights and BM25Plus's constant come from the corpus's
        statistics, the same for every part (what ``_Scorer.terms`` gives each
        part); a part lists the terms it holds postings of.
        """
        first = self.parts[0][0]
        counts: dict[str, int] = {}
        for token in tokens:
            counts[token] = counts.get(token, 0) + 1
        known = [(self._known(first, token), token, count) for token, count in counts.items()]
        ordered = sorted(((d, t, c) for d, t, c in known if d[0] != 0), key=lambda f: (f[0][0], f[1]))
        scale1 = first.k1 + 1.0
        bm25l = first.variant == "bm25l"
        constant = 0.0
        weights = []
        for (_df, _lo, _hi, _column, idf, _top), _token, count in ordered:
            weight = count * idf
            if first.variant == "bm25plus":
                constant += weight * first.delta
            weights.append(weight)
        ints: list[tuple[int, int, int, int]] = []
        floats: list[tuple[float, float]] = []
        bounds = [0]
        for scorer, _ in self.parts:
            dense_limit = DENSE_TERM_FRACTION * scorer.postings.n_rows
            for (_d, token, _c), weight in zip(ordered, weights):
                _df, lo, hi, column, _idf, top_tf = self._known(scorer, token)
                if hi == lo:
                    continue  # no posting in this part
                size = hi - lo
                how = 0
                if column >= 0:
                    if scorer.mask is not None and 4 * scorer.n_kept < size:
                        how = 2  # read at the candidates (as _Scorer._via_column)
                    elif scorer.dense_ok and size > dense_limit:
                        how = 1
                bound = weight * scale1 * (top_tf if bm25l else 1.0)
                ints.append((lo, hi, column, how))
                floats.append((weight * scale1, max(bound, 0.0)))
            bounds.append(len(ints))
        return ints, floats, bounds, constant

    def _compiled(self, compiled: Any, tokens: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """The parts' term tables stacked, and one compiled call (see the module docstring)."""
        ints, floats, bounds, constant = self._table(tokens)
        if not ints:
            return _NO_ROWS, _NO_SCORES
        term_ints, term_floats = np.array(ints, dtype=np.int64), np.array(floats, dtype=np.float64)
        term_offsets = np.array(bounds, dtype=np.int64)
        for array in (term_ints, term_floats, term_offsets):
            array.flags.writeable = False
        first = self.parts[0][0]
        found: tuple[np.ndarray, np.ndarray] = compiled.topk_parts(
            term_ints, term_floats, term_offsets, *self._typed(compiled), int(k),
            1 if first.variant == "bm25l" else 0, float(first.k1), float(first.delta), float(constant),
            _PRUNE_MARGIN, bool(first.prune_ok), int(kernel.COMPILED_BLOCK or compiled.BLOCK), -np.inf)
        return found
