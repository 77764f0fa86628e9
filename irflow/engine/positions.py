"""Where a row is among a query's candidates: what an explanation asks of every stage's batch.

:class:`Scan` looks it up by scanning the batch (one explanation: nothing to
index first); a report explaining many hits of one trace passes a
:class:`Locate` that indexes each batch once
(:class:`irflow.engine.report.locate.BatchIndex`).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from irflow.engine.batches import Candidates

__all__ = ["position", "Locate", "Scan"]


def position(candidates: Candidates, query: int, row: int) -> int | None:
    """The position of ``row``'s best entry among original ``query``'s candidates.

    Several entries exist when a query was reformulated into sub-queries:
    the best rank wins, then the earlier sub-query.
    """
    hits = np.flatnonzero((candidates.origin_index == query) & (candidates.row == row))
    if not hits.size:
        return None
    return int(hits[np.argmin(candidates.rank[hits])])  # argmin keeps the first of equal ranks


class Locate(Protocol):
    """Where a row is among a query's candidates: :class:`Scan` looks each time; a report that explains
    many hits of one trace passes one that indexes each batch once."""

    def position(self, candidates: Candidates, query: int, row: int) -> int | None:
        """The position of ``row``'s best entry among original ``query``'s candidates (None: absent)."""
        ...

    def query_positions(self, candidates: Candidates, query: int) -> np.ndarray:
        """The positions of original ``query``'s candidates, in batch order."""
        ...


class Scan:
    """:class:`Locate` by scanning the batch on each call (one explanation: nothing to index first)."""

    def position(self, candidates: Candidates, query: int, row: int) -> int | None:
        return position(candidates, query, row)

    def query_positions(self, candidates: Candidates, query: int) -> np.ndarray:
        return np.flatnonzero(candidates.origin_index == query)
