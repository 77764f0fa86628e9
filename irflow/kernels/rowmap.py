"""Exact top-k of a row space split into parts (shards, segments): the parts' tops merged by global row.

A corpus split into parts — the shards of a sharded corpus, the segments of a
corpus updated in place — numbers its rows globally, each part holding some
of them.  Each part answers with its own top ``k`` per query, best first,
in local rows.  The whole row space's top ``k`` of a query is among the
union of those (a row outside its part's top ``k`` has ``k`` better rows in
its own part already), and with the same scores to the bit (exact kernels)
the union sorted by (score desc, global row asc) and cut to ``k`` is exactly
what one index over every row returns.

>>> rows = RowMap([np.array([0, 1, 2]), np.array([3, 4])])
>>> top = merge_topk([(np.array([0]), np.array([2]), np.array([0.5])),
...                   (np.array([0, 0]), np.array([0, 1]), np.array([0.5, 0.9]))], rows, 1, 2)
>>> top.row.tolist(), top.score.tolist()
([4, 2], [0.9, 0.5])
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from irflow.kernels.topk import TopK

__all__ = ["RowMap", "merge_topk"]

__all__ = ["RowMap", "merge_topk"]


class RowMap:
    """Global rows of each part (shard, segment): ``global = rows[shard][local]``; ascending within a shard.

    Contiguous shards (the usual layout) are served by offsets, without a
    per-row array lookup; the reverse map (global -> shard, local) is a
    binary search over the shards' first rows, or over a per-row table
    when shards interleave.
    """

    def __init__(self, rows: Sequence[np.ndarray]) -> None:
        self._rows: list[np.ndarray] | None = [np.asarray(r, dtype=np.int64) for r in rows]
        self.n_shards = len(self._rows)
        self.sizes = np.array([r.size for r in self._rows], dtype=np.int64)
        self.n_rows = int(self.sizes.sum())
        self.first = np.array([int(r[0]) if r.size else 0 for r in self._rows], dtype=np.int64)
        self.contiguous = all(r.size == 0 or int(r[-1]) - int(r[0]) + 1 == r.size for r in self._rows) \
            and bool(np.all(np.diff(self.first) > 0))
        self._shard_of: np.ndarray | None = None
        self._local_of: np.ndarray | None = None
        if not self.contiguous:
            shard_of = np.empty(self.n_rows, dtype=np.int32)
            local_of = np.empty(self.n_rows, dtype=np.int64)
            for s, r in enumerate(self._rows):
                shard_of[r] = s
                local_of[r] = np.arange(r.size)
            self._shard_of, self._local_of = shard_of, local_of

    @classmethod
    def of_sizes(cls, sizes: Sequence[int]) -> "RowMap":
        """Parts of these sizes, one after the other (segments): offsets only, nothing per row.

        >>> RowMap.of_sizes([3, 0, 2]).to_local(np.array([4, 0]))[0].tolist()
        [2, 0]
        """
        rowmap = cls.__new__(cls)
        rowmap._rows = None
        rowmap.n_shards = len(sizes)
        rowmap.sizes = np.asarray(sizes, dtype=np.int64).reshape(-1)
        rowmap.n_rows = int(rowmap.sizes.sum())
        rowmap.first = np.zeros(rowmap.n_shards, dtype=np.int64)
        np.cumsum(rowmap.sizes[:-1], out=rowmap.first[1:])
        rowmap.contiguous = True
        rowmap._shard_of = rowmap._local_of = None
        return rowmap

    @property
    def rows(self) -> list[np.ndarray]:
        """The global rows of each part (made on first use for a map of sizes)."""
        if self._rows is None:
            self._rows = [np.arange(f, f + n, dtype=np.int64) for f, n in zip(self.first.tolist(), self.sizes.tolist())]
        return self._rows

    def to_global(self, shard: int, local: np.ndarray) -> np.ndarray:
        local = np.asarray(local, dtype=np.int64)
        found: np.ndarray = local + self.first[shard] if self.contiguous else self.rows[shard][local]
        return found

    def to_local(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard, local row) of each global row (IndexError for a row outside the corpus)."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if rows.size and (rows.min() < 0 or rows.max() >= self.n_rows):
            bad = rows[(rows < 0) | (rows >= self.n_rows)][0]
            raise IndexError(f"row {int(bad)} is outside the corpus's {self.n_rows} rows")
        if self.contiguous:
            # the part whose end is past the row (an empty part ends where it starts: never chosen)
            shard = np.searchsorted(self.first + self.sizes, rows, side="right")
            return shard.astype(np.int32), rows - self.first[shard]
        return self._shard_of[rows], self._local_of[rows]  # type: ignore[index]

    def split(self, mask: np.ndarray) -> list[np.ndarray]:
        """A global bool array's part on each shard."""
        if self.contiguous:
            return [mask[f:f + n] for f, n in zip(self.first.tolist(), self.sizes.tolist())]
        return [mask[r] for r in self.rows]

    def join(self, parts: Sequence[np.ndarray], dtype: type = bool) -> np.ndarray:
        """The global array made of each shard's per-row part."""
        if self.contiguous:
            return np.concatenate([np.asarray(p, dtype=dtype) for p in parts]) if parts else np.empty(0, dtype)
        out: np.ndarray = np.empty(self.n_rows, dtype=dtype)
        for r, p in zip(self.rows, parts):
            out[r] = p
        return out


def merge_topk(parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], rows: RowMap, n_queries: int,
               k: int) -> TopK:
    """The top ``k`` per query of the shards' answers ``(query_index, local row, score)``, in shard order.

    By score descending, then global row ascending: one machine's order.
    """
    if k <= 0 or not parts:
        return TopK.empty(n_queries)
    query = np.concatenate([np.asarray(p[0], dtype=np.int64) for p in parts])
    row = np.concatenate([rows.to_global(s, p[1]) for s, p in enumerate(parts)])
    score = np.concatenate([np.asarray(p[2], dtype=np.float64) for p in parts])
    if query.size == 0:
        return TopK.empty(n_queries)
    order = np.lexsort((row, -score, query))
    query, row, score = query[order], row[order], score[order]
    starts = np.searchsorted(query, np.arange(n_queries))
    keep = np.arange(query.size) - starts[query] < k
    return TopK._trusted(query[keep].astype(np.int32), row[keep], score[keep], n_queries)
