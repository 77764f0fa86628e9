"""Each candidate batch of a trace indexed once by original query: counts, positions and a row's place.

A report reads a hundred queries of stages of a thousand candidates each:
scanning a whole batch for every query (``origin_index == q``) or for every
hit of every query would cost their product.  :class:`BatchIndex` sorts a
batch's positions by original query once (a stable sort: positions within a
query stay in batch order, as ``np.flatnonzero`` gives them) and answers
from the slices; it is also the :class:`~irflow.engine.explain.Locate` that
explanations of many hits share.
"""

from __future__ import annotations

import numpy as np

from irflow.engine.batches import Candidates

__all__ = ["BatchIndex"]


class _Sorted:
    """One batch's positions grouped by original query, and each query's rows and ranks (made on demand)."""

    def __init__(self, candidates: Candidates, n_queries: int) -> None:
        origin = np.asarray(candidates.origin_index, dtype=np.int64)
        if origin.size < 2 or bool(np.all(origin[1:] >= origin[:-1])):
            self.order = np.arange(origin.size, dtype=np.int64)  # grouped already (every batch irflow makes)
            ordered = origin
        else:
            self.order = np.argsort(origin, kind="stable")
            ordered = origin[self.order]
        self.bounds = np.searchsorted(ordered, np.arange(n_queries + 1), side="left")
        self.blocks: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.known: dict[int, dict[int, int | None]] = {}  # query -> row -> position (prefetched)

    def positions(self, query: int) -> np.ndarray:
        positions: np.ndarray = self.order[int(self.bounds[query]):int(self.bounds[query + 1])]
        return positions

    def block(self, candidates: Candidates, query: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        found = self.blocks.get(query)
        if found is None:
            positions = self.positions(query)
            found = self.blocks[query] = (positions, candidates.row[positions], candidates.rank[positions])
        return found


class BatchIndex:
    """Positions and counts of original queries in candidate batches, each batch sorted once (by identity)."""

    def __init__(self, n_queries: int) -> None:
        self.n_queries = n_queries
        self._sorted: dict[int, tuple[Candidates, _Sorted]] = {}

    def _of(self, candidates: Candidates) -> _Sorted:
        known = self._sorted.get(id(candidates))
        if known is None or known[0] is not candidates:
            known = self._sorted[id(candidates)] = (candidates, _Sorted(candidates, self.n_queries))
        return known[1]

    def query_positions(self, candidates: Candidates, query: int) -> np.ndarray:
        """The positions of original ``query``'s candidates, in batch order."""
        return self._of(candidates).positions(query)

    def count(self, candidates: Candidates, query: int) -> int:
        """How many candidates original ``query`` has."""
        bounds = self._of(candidates).bounds
        return int(bounds[query + 1] - bounds[query])

    def position(self, candidates: Candidates, query: int, row: int) -> int | None:
        """The position of ``row``'s best-ranked entry among ``query``'s candidates (the first of equal ranks)."""
        known = self._of(candidates).known.get(query)
        if known is not None and row in known:
            return known[row]
        positions, rows, ranks = self._of(candidates).block(candidates, query)
        hits = np.flatnonzero(rows == row)
        if not hits.size:
            return None
        return int(positions[hits[np.argmin(ranks[hits])]])

    def prefetch(self, candidates: Candidates, query: int, rows: np.ndarray) -> None:
        """Find where each of ``rows`` is among ``query``'s candidates at once (then :meth:`position` looks up)."""
        grouped = self._of(candidates)
        positions, block_rows, ranks = grouped.block(candidates, query)
        order = np.lexsort((ranks, block_rows))  # by row, then rank; stable: equal ranks keep batch order
        ordered = block_rows[order]
        wanted = np.asarray(rows, dtype=np.int64)
        at = np.minimum(np.searchsorted(ordered, wanted), max(ordered.size - 1, 0))
        found = (ordered[at] == wanted) if ordered.size else np.zeros(wanted.size, dtype=bool)
        best = positions[order[at]] if ordered.size else np.zeros(wanted.size, dtype=np.int64)
        known = grouped.known.setdefault(query, {})
        for row, hit, position in zip(wanted.tolist(), found.tolist(), best.tolist()):
            known[row] = position if hit else None
