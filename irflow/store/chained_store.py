"""The records of a corpus of several segments as one :class:`~irflow.store.record_store.CorpusStore`.

``corpus.store`` stays a working store whatever the corpus's segments:
sibling lookup (:func:`irflow.store.ledger.records_for_artifact`),
expansion and every inspection read it.  A :class:`SegmentedStore` chains
the stores of the segments' views: global row ``r`` is local row ``r -
first[s]`` of segment ``s`` (a binary search over the segments' first rows),
and every lookup splits its rows by segment, asks each segment's store and
puts the answers back in order.  Nothing per record happens when one is made
(a corpus of a million rows in ten segments opens as fast as in one); whole
columns (``record_ids``, ``live``...) are concatenated on first access.

Surface kinds: the segments' kinds in order of first appearance in the
global row order (deleted rows included: a row is a position), so a row's
kind code indexes :attr:`kinds` as a single store's does.  The ledger is the
segments' ledgers read through what updates unlisted
(:class:`~irflow.store.ledger_view.LedgerView`).

>>> from irflow.store.records import Record
>>> a = CorpusStore.from_records([Record("x", "name", "x", surface_index=0)])
>>> b = CorpusStore.from_records([Record("x", "readme", "more", surface_index=1)])
>>> store = SegmentedStore([a, b])
>>> [r.text for r in store], store.ledger["x"] == (a.record_ids[0], b.record_ids[0]), store.kinds
(['x', 'more'], True, ('name', 'readme'))
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from irflow.errors import CorpusError
from irflow.kernels.rowmap import RowMap
from irflow.store.columnar import LedgerTable
from irflow.store.ledger_view import LedgerPart, LedgerView
from irflow.store.protocol import Siblings
from irflow.store.record_store import CorpusStore
from irflow.store.records import Record

#: Up to this many rows, :meth:`SegmentedStore._groups` splits them in plain Python.
_FEW_ROWS = 64

__all__ = ["SegmentedStore", "Chained"]


def _rows(rows: Any) -> np.ndarray:
    return np.asarray(rows, dtype=np.int64).reshape(-1)


class Chained(Sequence[Any]):
    """Several sequences read as one (the segments' texts or metadata, in row order)."""

    def __init__(self, parts: Sequence[Sequence[Any]], rowmap: RowMap) -> None:
        self.parts = list(parts)
        self.rowmap = rowmap

    def __len__(self) -> int:
        return self.rowmap.n_rows

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        row = range(len(self))[index]
        part, local = self.rowmap.to_local(np.array([row]))
        return self.parts[int(part[0])][int(local[0])]

    def __iter__(self) -> Iterator[Any]:
        for part in self.parts:
            yield from part


class SegmentedStore(CorpusStore):
    """The stores of a corpus's segments (each with its tombstones) as one store over global rows."""

    def __init__(self, parts: Sequence[CorpusStore], *, name: str | None = None) -> None:
        self._parts = list(parts)
        self.name = name
        self._rowmap = RowMap.of_sizes([p.n_rows for p in self._parts])
        # where each segment's rows start and end, as Python ints: a search's few hits are split by
        # segment in plain Python (numpy's sort and searches cost more than ten rows' bisections)
        self._starts: list[int] = self._rowmap.first.tolist()
        self._ends: list[int] = (self._rowmap.first + self._rowmap.sizes).tolist()
        kinds = dict.fromkeys(k for p in self._parts for k in p.kinds)
        self._kinds = tuple(kinds)
        index = {kind: code for code, kind in enumerate(self._kinds)}
        self._code_maps = [np.array([index[k] for k in p.kinds], dtype=np.int32) for p in self._parts]
        offsets = self._starts
        self._ledger = LedgerView([LedgerPart(p.ledger_table, off, p._unlisted) for p, off in zip(self._parts, offsets)],
                                  self.record_ids_of, self.surface_indices_of)
        self._whole: dict[str, np.ndarray] = {}
        self._hit_readers: list[Callable[[int], tuple[str, str, Mapping[str, Any]]]] = []  # hit_columns's, made once
        self._tombstone_writer = None
        self._delete_hook = None
        self.version = 0

    @property
    def parts(self) -> list[CorpusStore]:
        """The segments' stores, in row order."""
        return self._parts

    # -- splitting rows by segment --------------------------------------------------------

    def _groups(self, rows: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """(segment, positions in *rows*, local rows) for each segment holding some of *rows*."""
        if not rows.size:
            return []
        few = self._few_segments(rows)
        if few is not None:
            return self._few_groups(*few)
        part, local = self._rowmap.to_local(rows)
        first = int(part[0])
        if bool((part == first).all()):  # the common case: hits of one segment
            return [(first, np.arange(rows.size), local)]
        order = np.argsort(part, kind="stable")  # one sort, then each segment's run of it
        ordered = part[order]
        bounds = np.flatnonzero(np.diff(ordered)) + 1
        return [(int(part[run[0]]), run, local[run]) for run in
                (order[a:b] for a, b in zip([0, *bounds.tolist()], [*bounds.tolist(), rows.size]))]

    def _few_segments(self, rows: np.ndarray) -> tuple[list[int], list[int]] | None:
        """A few rows of the corpus as a list and each one's segment, by bisection (None: many, or one out of range).

        A row out of range is left to the row map, whose error names it.
        """
        if rows.size > _FEW_ROWS or rows.ndim != 1 or not rows.size:
            return None
        index = rows.tolist()
        if min(index) < 0 or max(index) >= self._rowmap.n_rows:
            return None
        ends = self._ends  # a row's segment: the first whose end is past it (an empty one is never chosen)
        return index, [bisect_right(ends, row) for row in index]

    def _few_groups(self, index: list[int], segment: list[int]) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """:meth:`_groups` of a few rows and their segments (lists): segments ascending, positions in order."""
        starts = self._starts
        runs: dict[int, tuple[list[int], list[int]]] = {}
        for position, (row, p) in enumerate(zip(index, segment)):
            run = runs.get(p)
            if run is None:
                run = runs[p] = ([], [])
            run[0].append(position)
            run[1].append(row - starts[p])
        if len(runs) == 1:
            p, (_, local) = runs.popitem()
            return [(p, np.arange(len(index)), np.array(local, dtype=np.int64))]
        return [(p, np.array(positions, dtype=np.int64), np.array(local, dtype=np.int64))
                for p, (positions, local) in sorted(runs.items())]

    def _gather(self, rows: Any, take: Callable[[int, CorpusStore, np.ndarray], Any], dtype: Any) -> np.ndarray:
        rows = _rows(rows)
        groups = self._groups(rows)
        if len(groups) == 1:  # one segment's rows, in order
            p, _, local = groups[0]
            found = take(p, self._parts[p], local)
            return found if isinstance(found, np.ndarray) and found.dtype == dtype else np.asarray(found, dtype=dtype)
        out = np.empty(rows.size, dtype=dtype)
        for p, positions, local in groups:
            values = take(p, self._parts[p], local)
            if dtype is object:
                for position, value in zip(positions.tolist(), values):
                    out[position] = value
            else:
                out[positions] = values
        return out

    def _gather_list(self, rows: Any, take: Callable[[CorpusStore, np.ndarray], list[Any]]) -> list[Any]:
        rows = _rows(rows)
        out: list[Any] = [None] * rows.size
        for p, positions, local in self._groups(rows):
            for position, value in zip(positions.tolist(), take(self._parts[p], local)):
                out[position] = value
        return out

    def _concat(self, name: str, make: Callable[[int, CorpusStore], np.ndarray], dtype: Any) -> np.ndarray:
        found = self._whole.get(name)
        if found is None:
            parts = [make(i, p) for i, p in enumerate(self._parts)]
            found = np.concatenate(parts) if parts else np.empty(0, dtype)
            found.setflags(write=False)
            self._whole[name] = found
        return found

    # -- columns --------------------------------------------------------------------------

    @property
    def n_rows(self) -> int:
        return self._rowmap.n_rows

    @property
    def record_ids(self) -> np.ndarray:
        return self._concat("record_ids", lambda _, p: p.record_ids, object)

    @property
    def artifact_ids(self) -> np.ndarray:
        return self._concat("artifact_ids", lambda _, p: p.artifact_ids, object)

    @property
    def id_column(self) -> np.ndarray:
        return self.record_ids

    @property
    def artifact_column(self) -> np.ndarray:
        return self.artifact_ids

    @property
    def kinds(self) -> tuple[str, ...]:
        return self._kinds

    @property
    def kind_codes(self) -> np.ndarray:
        return self._concat("kind_codes", lambda i, p: self._code_maps[i][p.kind_codes], np.int32)

    @property
    def surface_indices(self) -> np.ndarray:
        return self._concat("surface_indices", lambda _, p: p.surface_indices, np.int64)

    @property
    def live(self) -> np.ndarray:
        return self._concat("live", lambda _, p: p.live, bool)

    @property
    def texts(self) -> Sequence[str]:
        return Chained([p.texts for p in self._parts], self._rowmap)

    @property
    def metadata(self) -> Sequence[Mapping[str, Any]]:
        return Chained([p.metadata for p in self._parts], self._rowmap)

    @property
    def deleted_rows(self) -> np.ndarray:
        return self._concat("deleted", lambda i, p: p.deleted_rows + self._rowmap.first[i], np.int64)

    @property
    def unlisted_rows(self) -> np.ndarray:
        return self._concat("unlisted", lambda i, p: p.unlisted_rows + self._rowmap.first[i], np.int64)

    @property
    def ledger_table(self) -> LedgerTable:
        raise CorpusError("a corpus of several segments has one ledger table per segment (store.parts[i].ledger_table)")

    # -- records --------------------------------------------------------------------------

    def record(self, row: int) -> Record:
        part, local = self._rowmap.to_local(np.array([int(row)]))
        return self._parts[int(part[0])].record(int(local[0]))

    def row_of(self, record_id: str) -> int:
        deleted = False
        for i, part in enumerate(self._parts):
            local = part._row(record_id)
            if local is None:
                continue
            if part._live[local]:
                return int(local + self._rowmap.first[i])
            deleted = True
        if deleted:
            raise KeyError(f"record {record_id!r} was deleted from {self._label()}")
        raise KeyError(f"record {record_id!r} is not in {self._label()}")

    def __contains__(self, record_id: object) -> bool:
        return any(record_id in part for part in self._parts)

    def __iter__(self) -> Iterator[Record]:
        for part in self._parts:
            yield from part

    def __len__(self) -> int:
        return sum(len(part) for part in self._parts)

    # -- rows -----------------------------------------------------------------------------

    def record_ids_of(self, rows: Any) -> np.ndarray:
        return self._gather(rows, lambda _, p, local: p.record_ids_of(local), object)

    def artifact_ids_of(self, rows: Any) -> np.ndarray:
        """Artifact id of each row: from the segments' decoded columns, joined once per state (what every
        search's collapse reads for its candidates)."""
        found: np.ndarray = self.artifact_ids[_rows(rows)]
        return found

    def kind_codes_of(self, rows: Any) -> np.ndarray:
        found: np.ndarray = self.kind_codes[_rows(rows)]
        return found

    def surface_indices_of(self, rows: Any) -> np.ndarray:
        found: np.ndarray = self.surface_indices[_rows(rows)]
        return found

    def texts_of(self, rows: Any) -> list[str]:
        return self._gather_list(rows, lambda p, local: p.texts_of(local))

    def metadata_of(self, rows: Any) -> list[Mapping[str, Any]]:
        return self._gather_list(rows, lambda p, local: p.metadata_of(local))

    def hit_columns(self, rows: np.ndarray) -> tuple[list[str], list[str], list[int], list[int], list[str],
                                                     list[Mapping[str, Any]]]:
        """The columns a batch of hits reads, each segment's rows looked up once; kind codes index :attr:`kinds`."""
        ids: list[Any]
        texts: list[Any]
        metadata: list[Any]
        few = self._few_hits(rows)
        if few is not None:
            ids, texts, metadata = few
        else:
            groups = self._groups(rows)
            n = rows.size
            if len(groups) == 1:  # one segment's rows, in order
                ids, texts, metadata = self._parts[groups[0][0]].hit_strings(groups[0][2])
            else:
                ids, texts, metadata = [None] * n, [None] * n, [None] * n
                for p, positions, local in groups:  # the strings of these rows only, each segment's at once
                    for position, record_id, text, meta in zip(positions.tolist(), *self._parts[p].hit_strings(local)):
                        ids[position], texts[position], metadata[position] = record_id, text, meta
        return (self.artifact_ids_of(rows).tolist(), ids, self.kind_codes_of(rows).tolist(),
                self.surface_indices_of(rows).tolist(), texts, metadata)

    def _few_hits(self, rows: np.ndarray) -> tuple[list[Any], list[Any], list[Any]] | None:
        """Record ids, texts and metadata of a few rows over several segments, read row by row (None: not so).

        A search's ten hits fall in about five segments of ten: asking each
        segment for its one or two rows cost its three columns' set-up per
        segment (~5 us each), more than the rows' decoding; one function per
        segment (:meth:`CorpusStore.hit_reader`) reads a row with none.
        """
        few = self._few_segments(rows)
        if few is None:
            return None
        index, segment = few
        if segment.count(segment[0]) == len(segment):
            return None  # one segment's rows: one call of its own
        starts = self._starts
        readers = self._hit_readers
        if not readers:
            readers = self._hit_readers = [part.hit_reader() for part in self._parts]
        ids, texts, metadata = [], [], []
        for row, p in zip(index, segment):
            record_id, text, meta = readers[p](row - starts[p])
            ids.append(record_id)
            texts.append(text)
            metadata.append(meta)
        return ids, texts, metadata

    def records(self, rows: Any) -> list[Record]:
        return self._gather_list(rows, lambda p, local: p.records(local))

    # -- ledger ---------------------------------------------------------------------------

    def sibling_rows(self, artifact_ids: Sequence[str]) -> Siblings:
        """Each artifact's live rows across segments in plan order (see :class:`~irflow.store.protocol.Siblings`)."""
        groups: list[np.ndarray] = []
        listed: list[bool] = []
        stale: list[tuple[str, str]] = []
        artifact_ids = list(artifact_ids)
        for artifact, found in zip(artifact_ids, self._ledger.entries(artifact_ids)):
            listed.append(found is not None)
            if found is None:
                groups.append(np.empty(0, np.int64))
                continue
            rows, missing = found
            stale.extend((artifact, record_id) for record_id in missing)
            groups.append(rows[rows >= 0])
        # every artifact's rows at once: which are live, their plan positions, then one stable sort by
        # (artifact, surface index) keeps each artifact's ledger order among equal positions
        flat = np.concatenate(groups).astype(np.int64, copy=False) if groups else np.empty(0, np.int64)
        owner = np.repeat(np.arange(len(groups)), [g.size for g in groups])
        live = self._live_of(flat)
        flat, owner = flat[live], owner[live]
        order = np.lexsort((self.surface_indices_of(flat), owner))
        offsets = np.zeros(len(groups) + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner, minlength=len(groups)), out=offsets[1:])
        return Siblings(offsets, flat[order], listed, stale)

    def _live_of(self, rows: np.ndarray) -> np.ndarray:
        return self._gather(rows, lambda _, p, local: p._live[local], bool)

    # -- deletes --------------------------------------------------------------------------

    def with_tombstones(self, deleted_rows: Any, unlisted_rows: Any = ()) -> CorpusStore:
        raise CorpusError("the store of a corpus of several segments takes its tombstones from the segments")

    def delete_record(self, record_id: str) -> None:
        """Tombstone one record, out of band (the ledger keeps listing it), through the corpus that owns this store."""
        if self._delete_hook is None:
            raise CorpusError("this store of several segments belongs to no corpus; delete through the corpus")
        self._delete_hook(record_id)

    def __repr__(self) -> str:
        return (f"CorpusStore(name={self.name!r}, records={len(self)}, rows={self.n_rows}, "
                f"segments={len(self._parts)})")
