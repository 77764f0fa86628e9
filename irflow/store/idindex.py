"""record id -> row for a store's id column: a dict in memory, a digest index over a stored column.

Built on first use and shared by every tombstone state of the same records
(:meth:`irflow.store.record_store.CorpusStore.with_tombstones`): a corpus of
a million records opens without it, and its first lookup by id digests the
stored ids at once (:class:`irflow.kernels.digests.KeyIndex`) instead of
decoding them into a dict.  Duplicate ids are damage, found when either is
built (:meth:`irflow.kernels.digests.KeyIndex.duplicate`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from irflow.errors import CorpusError
from irflow.kernels.digests import KeyIndex
from irflow.store.columnar import StringColumn

__all__ = ["IdIndex"]


class IdIndex:
    """record id -> row (see the module docstring)."""

    __slots__ = ("row_of", "keys")

    def __init__(self) -> None:
        self.row_of: dict[str, int] | None = None
        self.keys: KeyIndex | None = None

    def as_dict(self, ids: StringColumn | np.ndarray) -> dict[str, int]:
        """The ids as a dict (for records in memory, or a stored column decoded whole)."""
        if self.row_of is None:
            values = (ids.to_array() if isinstance(ids, StringColumn) else ids).tolist()
            row_of = dict(zip(values, range(len(values))))
            if len(row_of) != len(values):
                raise _duplicates(ids, None)
            self.row_of = row_of
        return self.row_of

    def find(self, ids: StringColumn | np.ndarray, record_ids: Sequence[str]) -> np.ndarray:
        """The row of each record id in *ids*, -1 for one it lacks."""
        if isinstance(ids, StringColumn) and self.row_of is None:
            if self.keys is None:
                keys = KeyIndex(ids.blob, ids.offsets)
                twice = keys.duplicate()  # an id held twice is damage, found now
                if twice is not None:
                    raise _duplicates(ids, twice)
                self.keys = keys
            return self.keys.find(list(record_ids))
        get = self.as_dict(ids).get
        return np.fromiter((get(i, -1) for i in record_ids), dtype=np.int64, count=len(record_ids))


def _duplicates(ids: Any, example: str | None) -> CorpusError:
    where = f"{ids.where}: " if isinstance(ids, StringColumn) else ""
    which = "" if example is None else f" (e.g. {example!r})"
    return CorpusError(f"{where}the store holds duplicate record ids{which}; the corpus is damaged — rebuild it")
