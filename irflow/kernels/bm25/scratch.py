"""Per-thread scratch buffers and the query-term record the BM25 kernels share.

Their own module so the numpy scorer and MaxScore pruning both import them
without importing each other.
"""

from __future__ import annotations

import numpy as np

from irflow.kernels.postings import Postings

__all__ = ["_Scratch", "_Term", "_scratch", "_sorted_unique"]


class _Scratch:
    """One thread's reusable buffers; ``scores``, ``seen``, ``pos`` are clean between queries."""

    def __init__(self, n_rows: int) -> None:
        self.scores = np.zeros(n_rows, dtype=np.float64)
        self.seen = np.zeros(n_rows, dtype=bool)
        self.pos: np.ndarray = np.full(n_rows, -1, dtype=np.int32 if n_rows < 2**31 else np.int64)
        self.tf = np.zeros(n_rows, dtype=np.float64)
        self.hit = np.zeros(n_rows, dtype=bool)
        self.work = np.zeros(n_rows, dtype=np.float64)
        self.work2 = np.zeros(n_rows, dtype=np.float64)
        self.work3: np.ndarray | None = None  # BM25L's dense passes only: made on first need
        self.touched: list[np.ndarray] = []  # sparse rows written since the last reset
        self.wholesale = False  # a dense pass wrote everywhere: reset by memset

    def reset(self) -> None:
        """Clean for the next query: memset when much was touched, else scatter zeros."""
        if self.wholesale or sum(r.size for r in self.touched) * 8 >= self.scores.size:
            self.scores.fill(0.0)
            self.seen.fill(False)
        else:
            for rows in self.touched:
                self.scores[rows] = 0.0
                self.seen[rows] = False
        self.touched.clear()
        self.wholesale = False

    def matched(self) -> np.ndarray:
        """Ascending distinct rows marked in ``seen``."""
        touched = self.touched
        if self.wholesale or sum(r.size for r in touched) * 32 >= self.seen.size:
            return np.flatnonzero(self.seen)  # a linear scan beats sorting that many
        if not touched:
            return np.empty(0, dtype=np.intp)
        return _sorted_unique(np.concatenate(touched))  # few matches: sort them, skip the scan


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` for a small int array, without its hashing overhead."""
    values = np.sort(values)
    keep = np.empty(values.size, dtype=bool)
    keep[:1] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def _scratch(postings: Postings) -> _Scratch:
    """This thread's scratch buffers for ``postings`` (never shared between threads)."""
    local = postings.scratch
    scratch = getattr(local, "bm25", None)
    if scratch is None or scratch.scores.size != postings.n_rows:
        local.bm25 = scratch = _Scratch(postings.n_rows)
    return scratch


class _Term:
    """One distinct known query term: postings slice, head column, weight, score bound."""

    __slots__ = ("lo", "hi", "column", "weight", "bound")

    def __init__(self, lo: int, hi: int, column: int, weight: float, bound: float) -> None:
        self.lo, self.hi, self.column, self.weight, self.bound = lo, hi, column, weight, bound

    @property
    def size(self) -> int:
        return self.hi - self.lo
