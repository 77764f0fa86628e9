"""The ledger of a corpus made of parts (segments), or of one part some of whose records were unlisted.

Each segment of a corpus writes the ledger of its own records (a
:class:`~irflow.store.columnar.LedgerTable`: artifact -> rows in plan order)
once, with the segment; it never changes.  What changes is which of those
records are still *listed*: an update that removes a record (``delete``,
``upsert``'s old version, ``put_artifact``'s replaced surfaces) unlists it,
while the out-of-band ``CorpusStore.delete_record`` tombstones a row and
leaves it listed — how a stale ledger arises, on purpose (see
:func:`irflow.store.ledger.records_for_artifact`).  A :class:`LedgerView`
reads the parts' tables through their unlisted rows, in global rows:

- an artifact is listed when some part lists at least one of its entries
  still (a part whose every entry of it was unlisted does not list it);
- its entries come in plan order: one part's in ledger order, several
  parts' merged by ``surface_index`` (stable; a listed id the store lacks
  keeps its place after the entry before it);
- artifacts iterate in order of their first listed row, as the ledger of a
  fresh build of the live records lists them.

Nothing is computed per artifact until asked: an entry is looked up part by
part, the order is made on first iteration.

>>> from irflow.store.columnar import LedgerTable
>>> ids = np.array(["a0", "b0", "a1"], dtype=object)
>>> table = LedgerTable(["a", "b"], np.array([0, 2, 3]), np.array([0, 2, 1]), [], lambda rows: ids[rows])
>>> view = LedgerView([LedgerPart(table, 0, np.array([True, False, False]))], lambda rows: ids[rows],
...                   lambda rows: np.asarray(rows))
>>> dict(view), list(view)
({'b': ('b0',), 'a': ('a1',)}, ['b', 'a'])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import attrs
import numpy as np

from irflow.kernels.digests import digests_of
from irflow.store.columnar import LedgerTable, StringColumn

__all__ = ["LedgerPart", "LedgerView", "ledger_of"]

_NOWHERE = np.iinfo(np.int64).max


@attrs.frozen(eq=False)
class LedgerPart:
    """One part's ledger table, where its rows start globally, and its unlisted rows (bool per row, or None)."""

    table: LedgerTable
    offset: int
    unlisted: np.ndarray | None = None


def _names(artifacts: Sequence[str]) -> list[str]:
    return artifacts.to_array().tolist() if isinstance(artifacts, StringColumn) else list(artifacts)


def _carry_forward(keys: np.ndarray, present: np.ndarray, missing_key: int) -> np.ndarray:
    """``keys`` where ``present``; elsewhere the key of the last present entry before (``missing_key`` if none)."""
    positions = np.where(present, np.arange(keys.size), -1)
    np.maximum.accumulate(positions, out=positions)
    return np.where(positions >= 0, keys[np.maximum(positions, 0)], missing_key)


class LedgerView(Mapping[str, tuple[str, ...]]):
    """A ledger over parts (see the module docstring): artifact -> listed record ids in plan order."""

    def __init__(self, parts: Sequence[LedgerPart], record_ids_of: Callable[[np.ndarray], np.ndarray],
                 surface_indices_of: Callable[[np.ndarray], np.ndarray]) -> None:
        self.parts = tuple(parts)
        self._record_ids_of = record_ids_of
        self._surface_indices_of = surface_indices_of
        self._order: list[str] | None = None

    @property
    def where(self) -> str:
        """How messages name this ledger: the parts' ledger files."""
        return ", ".join(dict.fromkeys(part.table.where for part in self.parts))

    @staticmethod
    def _listed(part: LedgerPart, found: tuple[np.ndarray, list[str]] | None) -> tuple[np.ndarray, list[str]] | None:
        """A part's entry less its unlisted rows (None when they were all unlisted)."""
        if found is None or part.unlisted is None:
            return found
        rows, missing = found
        keep = (rows < 0) | ~part.unlisted[np.maximum(rows, 0)]
        if keep.all():
            return found
        if not keep.any():
            return None  # every entry of the artifact in this part was unlisted
        return rows[keep], missing  # -1 entries are always kept: their ids stay in order

    def entry(self, artifact: str) -> tuple[np.ndarray, list[str]] | None:
        """(listed global rows in plan order, -1 for an id the store lacks; those ids), or None when unlisted."""
        return self.entries([artifact])[0]

    def entries(self, artifacts: Sequence[str]) -> list[tuple[np.ndarray, list[str]] | None]:
        """:meth:`entry` of each artifact (each part looked up once for all of them, the names digested once)."""
        artifacts = list(artifacts)
        stored = sum(isinstance(part.table.artifacts, StringColumn) for part in self.parts)
        digests = digests_of(artifacts) if stored > 1 else None  # stored tables find names by digest
        per_part = [part.table.entries(artifacts, digests=digests) for part in self.parts]
        return [self._combine([(part, self._listed(part, found[i])) for part, found in zip(self.parts, per_part)])
                for i in range(len(artifacts))]

    def _combine(self, found: list[tuple[LedgerPart, tuple[np.ndarray, list[str]] | None]]
                 ) -> tuple[np.ndarray, list[str]] | None:
        rows_parts: list[np.ndarray] = []
        missing: list[str] = []
        for part, entry in found:
            if entry is None:
                continue
            rows, gone = entry
            rows_parts.append(np.where(rows >= 0, rows + part.offset, -1) if part.offset else np.asarray(rows))
            missing.extend(gone)
        if not rows_parts:
            return None
        if len(rows_parts) == 1:
            return rows_parts[0], missing
        rows = np.concatenate(rows_parts).astype(np.int64, copy=False)
        present = rows >= 0
        keys = np.full(rows.size, -1, dtype=np.int64)
        keys[present] = self._surface_indices_of(rows[present])
        order = np.argsort(_carry_forward(keys, present, -1), kind="stable")
        if missing:
            old = np.flatnonzero(rows < 0).tolist()
            by_position = dict(zip(old, missing))
            missing = [by_position[i] for i in order[rows[order] < 0].tolist()]
        return rows[order], missing

    def __getitem__(self, artifact: str) -> tuple[str, ...]:
        found = self.entry(artifact)
        if found is None:
            raise KeyError(artifact)
        rows, missing = found
        ids = self._record_ids_of(np.maximum(rows, 0)).tolist()
        for position, record_id in zip(np.flatnonzero(rows < 0).tolist(), missing):
            ids[position] = record_id
        return tuple(ids)

    def __contains__(self, artifact: object) -> bool:
        return isinstance(artifact, str) and self.entry(artifact) is not None

    def _part_order(self, part: LedgerPart) -> list[str]:
        """The part's listed artifacts by their first listed row (ledger order when nothing is unlisted)."""
        table = part.table
        names = _names(table.artifacts)
        if part.unlisted is None:
            return names
        rows = np.asarray(table.rows, dtype=np.int64)
        offsets = np.asarray(table.offsets, dtype=np.int64)
        valid = (rows >= 0) & ~part.unlisted[np.maximum(rows, 0)]
        kept = valid | (rows < 0)
        sizes = np.diff(offsets)
        starts = offsets[:-1]
        filled = sizes > 0
        kept_count = np.zeros(sizes.size, dtype=np.int64)
        first = np.full(sizes.size, _NOWHERE, dtype=np.int64)
        if rows.size:
            kept_count[filled] = np.add.reduceat(kept.astype(np.int64), starts[filled])
            first[filled] = np.minimum.reduceat(np.where(valid, rows, _NOWHERE), starts[filled])
        listed = ~filled | (kept_count > 0)
        index = np.flatnonzero(listed)
        keys = _carry_forward(first[index], first[index] != _NOWHERE, -1)
        return [names[i] for i in index[np.argsort(keys, kind="stable")].tolist()]

    def _ordered(self) -> list[str]:
        if self._order is None:
            order: dict[str, None] = {}
            for part in self.parts:
                order.update(dict.fromkeys(a for a in self._part_order(part) if a not in order))
            self._order = list(order)
        return self._order

    def __iter__(self) -> Iterator[str]:
        return iter(self._ordered())

    def __len__(self) -> int:
        return len(self._ordered())


def ledger_of(parts: Sequence[LedgerPart], record_ids_of: Callable[[np.ndarray], np.ndarray],
              surface_indices_of: Callable[[np.ndarray], np.ndarray]) -> "LedgerTable | LedgerView":
    """The plain table of a single part with nothing unlisted (what a fresh build has), else a view over the parts."""
    if len(parts) == 1 and parts[0].unlisted is None and parts[0].offset == 0:
        return parts[0].table
    return LedgerView(parts, record_ids_of, surface_indices_of)

