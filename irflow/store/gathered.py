"""The vectors of a filter's rows, gathered once and kept while the filter is used again.

A selective filter's dense search scores a few thousand rows; finding them
(a pass over the mask) and copying their vectors out of the corpus matrix
(one cache miss per row, from a memory map) cost more than scoring them —
about 0.4 ms of a 0.5 ms single query at 100k x 384 with a 1 % filter.  The
same filter comes back query after query (a tenant, a language, a
product line), so the corpus keeps, per candidate mask it made, the rows
and their vectors, within a byte budget, least recently used dropped first.

Only masks the corpus made itself and still knows are used (see
:meth:`irflow.store.masks.CandidateMasks.known`): they are read-only, and a
delete makes new ones.  What is kept for a mask goes when the corpus's mask
cache drops that mask (evicted, or cleared after a delete: ``discard``).
The answers do not change, to the bit: the kernel scores the same vectors
(``irflow.kernels.dense.dense_topk``, ``gathered``).

>>> import numpy as np
>>> kept = GatheredVectors(budget=1 << 20)
>>> matrix = np.eye(4, dtype=np.float32)
>>> mask = np.array([True, False, True, False])
>>> rows, vectors = kept.get(mask, matrix)
>>> rows.tolist(), vectors.shape, kept.get(mask, matrix)[1] is vectors
([0, 2], (2, 4), True)
>>> kept.get(mask.copy(), matrix, max_fraction=0.2) is None  # half the rows: more than asked
True
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

__all__ = ["GatheredVectors", "GATHERED_BYTES"]

#: Bytes of gathered rows and vectors a corpus keeps at most (all masks together).
GATHERED_BYTES = 64 << 20
#: Masks remembered at most (a corpus keeps 64 candidate masks).
MAX_MASKS = 64


def _size(rows: np.ndarray | None, vectors: np.ndarray | None) -> int:
    return 0 if rows is None or vectors is None else int(rows.nbytes + vectors.nbytes)


class GatheredVectors:
    """Per mask (by identity, the mask held): its rows ascending and ``matrix[rows]``, read-only."""

    def __init__(self, budget: int = GATHERED_BYTES) -> None:
        self.budget = budget
        # id(mask) -> (mask, rows, vectors); rows and vectors None: too many rows to keep
        self._kept: OrderedDict[int, tuple[np.ndarray, np.ndarray | None, np.ndarray | None]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, mask: np.ndarray, matrix: np.ndarray,
            max_fraction: float = 1.0) -> tuple[np.ndarray, np.ndarray] | None:
        """``(rows, matrix[rows])`` of ``mask``'s rows, gathered on the first call for this mask.

        None when the mask keeps more than ``max_fraction`` of the rows or
        its vectors would take more than half the budget (remembered too:
        the mask is counted once): the kernel then scores it its own way.
        """
        with self._lock:
            found = self._kept.get(id(mask))
            if found is not None and found[0] is mask:
                self._kept.move_to_end(id(mask))
                _, rows, vectors = found
                return None if rows is None or vectors is None else (rows, vectors)
        n_kept = int(np.count_nonzero(mask))
        row_bytes = int(matrix.shape[1]) * matrix.itemsize + 8  # its vector and its row number
        if n_kept > max_fraction * matrix.shape[0] or 2 * n_kept * row_bytes > self.budget:
            rows = vectors = None  # too many to keep: remembered as such
        else:
            rows = np.flatnonzero(mask)
            vectors = matrix[rows]  # a copy: the rows' vectors side by side
            rows.flags.writeable = False
            vectors.flags.writeable = False
        with self._lock:
            self._pop(id(mask))  # another thread's entry for it
            self._kept[id(mask)] = (mask, rows, vectors)
            self._bytes += _size(rows, vectors)
            while self._bytes > self.budget or len(self._kept) > MAX_MASKS:
                self._pop(next(iter(self._kept)))
        return None if rows is None or vectors is None else (rows, vectors)

    def discard(self, mask: np.ndarray) -> None:
        """Forget what was kept for ``mask`` (the corpus no longer knows it)."""
        with self._lock:
            found = self._kept.get(id(mask))
            if found is not None and found[0] is mask:
                self._pop(id(mask))

    def _pop(self, key: int) -> None:
        """Drop one entry (under the lock)."""
        entry = self._kept.pop(key, None)
        if entry is not None:
            self._bytes -= _size(entry[1], entry[2])

    @property
    def nbytes(self) -> int:
        """Bytes kept now (rows and vectors)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._kept)
