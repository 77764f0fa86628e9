"""The record store of a corpus: records by id and by row, the ledger, and tombstones.

Rows are the records in the order given to :func:`irflow.build`; everything a
corpus computes (vectors, postings, metadata columns) is aligned to them.  The
*ledger* maps each artifact to its record ids in plan order (by
``surface_index``) and is written once, at build time: sibling lookup
(:func:`irflow.store.ledger.records_for_artifact`) trusts it and never re-derives
ids.  ``delete_record`` is deliberately out of band — it tombstones a row and
leaves the ledger alone, which is exactly how a stale ledger arises.

>>> store = CorpusStore.from_records(prepare_records([Record("unbox", "name", "unbox")]))
>>> [r.text for r in store], store.ledger["unbox"] == (store.record_ids[0],)
(['unbox'], True)
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from irflow.errors import CorpusError
from irflow.store.columnar import JsonColumn, LedgerTable, StringColumn
from irflow.store.idindex import IdIndex
from irflow.store.ledger_view import LedgerPart, LedgerView, ledger_of
from irflow.store.prepare import prepare_records
from irflow.store.protocol import Siblings
from irflow.store.records import Record

__all__ = ["CorpusStore", "prepare_records"]  # prepare_records: from irflow.store.prepare, as before

#: Callback that persists a new tombstone set and returns the set now in force
#: (it may be larger: another process may have deleted rows meanwhile).
TombstoneWriter = Callable[[np.ndarray], np.ndarray]
#: What a corpus's store calls for ``delete_record`` instead of changing itself (the corpus
#: commits the delete as a new state; the store it hands out next holds it).
DeleteHook = Callable[[str], None]


def _rows(rows: Any) -> np.ndarray:
    """Row numbers as a flat integer array (what the ``*_of`` lookups index with)."""
    return np.asarray(rows, dtype=np.int64).reshape(-1)


def _strings(column: "StringColumn | np.ndarray | Sequence[str]", rows: np.ndarray) -> list[str]:
    """The strings of a column (stored, an object array or a list) at *rows* (int64), as a list."""
    if isinstance(column, StringColumn):
        return column.take_list(rows)
    if isinstance(column, np.ndarray):
        found: list[str] = column[rows].tolist()
        return found
    return [column[row] for row in rows.tolist()]


def _readonly(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.setflags(write=False)
    return view


class CorpusStore:
    """Records of one corpus, addressable by id and by row, with the ledger and tombstones.

    Built by :meth:`from_records` or loaded by :mod:`irflow.store.persist`; not
    constructed by users.  Lookups by id see live records only.
    """

    _ledger: LedgerTable | LedgerView
    _table: LedgerTable

    def __init__(
        self,
        *,
        record_ids: Sequence[str],
        artifact_ids: Sequence[str],
        surface_kinds: Sequence[str],
        surface_indices: Sequence[int] | np.ndarray,
        texts: Sequence[str],
        metadata: Sequence[Mapping[str, Any]],
        ledger: Mapping[str, Sequence[str]],
        deleted_rows: np.ndarray | Sequence[int] = (),
        name: str | None = None,
        tombstone_writer: TombstoneWriter | None = None,
    ) -> None:
        n = len(record_ids)
        lengths = {len(artifact_ids), len(surface_kinds), len(surface_indices), len(texts), len(metadata)}
        if lengths != {n}:
            raise CorpusError(
                f"store columns have different lengths ({n} ids, others {sorted(lengths)}); the corpus is damaged — rebuild it"
            )
        ids = np.array(record_ids, dtype=object) if n else np.empty(0, dtype=object)
        # Kinds get small integer codes in order of first appearance, so masks are integer compares.
        kinds: dict[str, int] = {}
        codes = np.fromiter((kinds.setdefault(k, len(kinds)) for k in surface_kinds), dtype=np.int32, count=n)
        self._setup(
            name=name, record_ids=ids,
            artifact_ids=np.array(artifact_ids, dtype=object) if n else np.empty(0, dtype=object),
            kinds=tuple(kinds), kind_codes=codes,
            surface_indices=np.asarray(surface_indices, dtype=np.int64).reshape(n),
            texts=list(texts), metadata=list(metadata), deleted_rows=deleted_rows, tombstone_writer=tombstone_writer)
        row_of = self._id_index()  # built now: the ledger's ids are resolved through it
        self._set_ledger(LedgerTable.of(ledger, row_of, self.record_ids_of), None)

    @classmethod
    def from_columns(
        cls,
        *,
        record_ids: StringColumn,
        artifact_ids: StringColumn,
        kinds: Sequence[str],
        kind_codes: np.ndarray,
        surface_indices: np.ndarray,
        texts: StringColumn,
        metadata: JsonColumn,
        ledger: Callable[[Callable[[np.ndarray], np.ndarray]], LedgerTable],
        deleted_rows: np.ndarray,
        name: str | None = None,
    ) -> "CorpusStore":
        """A store over stored columns (:mod:`irflow.store.persist`), checked for shape, decoded only on demand.

        Nothing per record happens here: ids, texts and metadata are decoded
        when read, the id -> row dict is built on the first lookup by id.
        ``ledger`` makes the ledger table given the store's ``record_ids_of``.
        """
        store = cls.__new__(cls)
        store._setup(name=name, record_ids=record_ids, artifact_ids=artifact_ids, kinds=tuple(kinds),
                     kind_codes=kind_codes, surface_indices=surface_indices, texts=texts, metadata=metadata,
                     deleted_rows=deleted_rows, tombstone_writer=None)
        store._set_ledger(ledger(store.record_ids_of), None)
        return store

    def _setup(self, *, name: str | None, record_ids: np.ndarray | StringColumn, artifact_ids: np.ndarray | StringColumn,
               kinds: tuple[str, ...], kind_codes: np.ndarray, surface_indices: np.ndarray, texts: Sequence[str],
               metadata: Sequence[Mapping[str, Any]], deleted_rows: np.ndarray | Sequence[int],
               tombstone_writer: TombstoneWriter | None) -> None:
        self.name = name
        # ids and artifact ids: an object array, or a stored column decoded on demand
        self._ids = record_ids
        self._artifacts = artifact_ids
        self._kinds = kinds
        self._kind_codes = kind_codes
        self._surface_indices = surface_indices
        self._texts = texts
        self._metadata = metadata
        self._index = IdIndex()
        self._live = np.ones(len(record_ids), dtype=bool)
        self._apply_deleted(np.asarray(deleted_rows, dtype=np.int64))
        self._tombstone_writer = tombstone_writer
        self._delete_hook: DeleteHook | None = None
        #: Bumped by every delete, so derived caches (candidate masks) know to refresh.
        self.version = 0

    def _id_index(self) -> dict[str, int]:
        """record id -> row as a dict (records in memory), built on first use; duplicates are damage."""
        return self._index.as_dict(self._ids)

    def rows_of_ids(self, record_ids: Sequence[str]) -> np.ndarray:
        """The row of each record id, -1 for an id the store does not hold (deleted rows included)."""
        return self._index.find(self._ids, record_ids)

    def _row(self, record_id: str) -> int | None:
        found = int(self.rows_of_ids([record_id])[0])
        return None if found < 0 else found

    def _set_ledger(self, table: LedgerTable, unlisted: np.ndarray | None) -> None:
        self._table = table
        self._unlisted = unlisted
        part = LedgerPart(table, 0, unlisted)
        self._ledger = ledger_of([part], self.record_ids_of, self.surface_indices_of)

    def with_tombstones(self, deleted_rows: np.ndarray | Sequence[int],
                        unlisted_rows: np.ndarray | Sequence[int] = ()) -> "CorpusStore":
        """The same records (columns, ledger and id index shared, nothing copied) with these tombstones.

        ``deleted_rows`` are not live; ``unlisted_rows`` (deleted too) are
        also off the ledger — what an update removed, as opposed to an
        out-of-band ``delete_record``, which leaves its row listed.
        """
        store = CorpusStore.__new__(CorpusStore)
        store.__dict__.update(self.__dict__)
        store._live = np.ones(self.n_rows, dtype=bool)
        store._apply_deleted(np.asarray(deleted_rows, dtype=np.int64))
        unlisted = np.asarray(unlisted_rows, dtype=np.int64)
        mask = None
        if unlisted.size:
            mask = np.zeros(self.n_rows, dtype=bool)
            mask[unlisted] = True
            if bool(store._live[unlisted].any()):
                raise CorpusError("an unlisted row must be deleted too; the corpus is damaged — rebuild it")
        store._set_ledger(self._table, mask)
        store._tombstone_writer = None
        store._delete_hook = None
        store.version = 0
        return store

    @classmethod
    def from_records(cls, records: Sequence[Record], *, name: str | None = None) -> "CorpusStore":
        """A store of prepared records (see :func:`prepare_records`); the ledger lists ids by surface_index."""
        per_artifact: dict[str, list[tuple[int, str]]] = {}
        for record in records:
            index = int(record.surface_index)  # type: ignore[arg-type]  # filled by prepare_records
            per_artifact.setdefault(record.artifact_id, []).append((index, str(record.id)))
        ledger = {artifact: [rid for _, rid in sorted(pairs)] for artifact, pairs in per_artifact.items()}
        return cls(
            record_ids=[str(r.id) for r in records],
            artifact_ids=[r.artifact_id for r in records],
            surface_kinds=[r.surface_kind for r in records],
            surface_indices=np.array([r.surface_index for r in records], dtype=np.int64),
            texts=[r.text for r in records],
            metadata=[r.metadata for r in records],
            ledger=ledger,
            name=name,
        )

    # -- columns (row-aligned, read-only views) -------------------------------------------

    @property
    def n_rows(self) -> int:
        """Rows including deleted ones (row ids stay stable across deletes)."""
        return len(self._ids)

    @property
    def record_ids(self) -> np.ndarray:
        """Record id per row (object array; a stored column is decoded whole on first access)."""
        ids = self._ids
        return _readonly(ids.to_array() if isinstance(ids, StringColumn) else ids)

    @property
    def artifact_ids(self) -> np.ndarray:
        """Artifact id per row (object array; a stored column is decoded whole on first access)."""
        artifacts = self._artifacts
        return _readonly(artifacts.to_array() if isinstance(artifacts, StringColumn) else artifacts)

    @property
    def id_column(self) -> np.ndarray | StringColumn:
        """Record id per row as held: an object array, or a stored column indexable without decoding it whole."""
        return self._ids

    @property
    def artifact_column(self) -> np.ndarray | StringColumn:
        """Artifact id per row as held (see :attr:`id_column`)."""
        return self._artifacts

    @property
    def kinds(self) -> tuple[str, ...]:
        """Surface kinds, in order of first appearance; ``kind_codes`` index into it."""
        return self._kinds

    @property
    def kind_codes(self) -> np.ndarray:
        """Surface kind code per row (int32), indexing ``kinds``."""
        return _readonly(self._kind_codes)

    @property
    def surface_indices(self) -> np.ndarray:
        """Plan-global surface index per row (int64)."""
        return _readonly(self._surface_indices)

    @property
    def live(self) -> np.ndarray:
        """True for rows not deleted."""
        return _readonly(self._live)

    @property
    def texts(self) -> Sequence[str]:
        """Text per row."""
        return self._texts

    @property
    def metadata(self) -> Sequence[Mapping[str, Any]]:
        """Metadata mapping per row (treat as read-only)."""
        return self._metadata

    @property
    def deleted_rows(self) -> np.ndarray:
        """Row ids of tombstoned records, ascending."""
        return np.flatnonzero(~self._live).astype(np.int64)

    @property
    def unlisted_rows(self) -> np.ndarray:
        """Rows an update removed from the ledger (deleted too), ascending; empty for a fresh build."""
        unlisted = self._unlisted
        return np.empty(0, np.int64) if unlisted is None else np.flatnonzero(unlisted).astype(np.int64)

    # -- records -------------------------------------------------------------------------

    def record(self, row: int) -> Record:
        """The record at *row* (deleted rows included: rows are positions, not lookups). No vector: see Corpus.vectors."""
        row = int(row)
        return Record(
            artifact_id=self._artifacts[row],
            surface_kind=self._kinds[self._kind_codes[row]],
            text=self._texts[row],
            metadata=self._metadata[row],
            surface_index=int(self._surface_indices[row]),
            id=self._ids[row],
        )

    def row_of(self, record_id: str) -> int:
        """The row of a live record (KeyError naming the id when absent or deleted)."""
        row = self._row(record_id)
        if row is None:
            raise KeyError(f"record {record_id!r} is not in {self._label()}")
        if not self._live[row]:
            raise KeyError(f"record {record_id!r} was deleted from {self._label()} (delete_record)")
        return row

    def live_row_at(self, row: int) -> bool:
        return bool(self._live[row])  # whether *row* is live

    def live_row(self, record_id: str) -> int | None:
        """The row of a live record, or None (absent or deleted): a lookup that never raises."""
        row = self._row(record_id)
        return row if row is not None and self._live[row] else None

    def stale_of(self, rows: np.ndarray) -> np.ndarray:
        """For each row: deleted, and still listed by the ledger (``delete_record``'s)."""
        rows = _rows(rows)
        dead: np.ndarray = ~self._live[rows]
        return dead if self._unlisted is None else dead & ~self._unlisted[rows]

    def stale_rows(self, *, record_id: str | None = None, artifact: str | None = None,
                   every: bool = False) -> np.ndarray:
        """Deleted rows the ledger still lists (``delete_record``'s): of a record id, of an artifact, or ``every`` one."""
        if every:
            rows = np.flatnonzero(~self._live).astype(np.int64)
        elif record_id is not None:
            row = self._row(record_id)
            rows = np.array([] if row is None else [row], dtype=np.int64)
        else:
            found = self._ledger.entry(str(artifact))
            rows = np.empty(0, np.int64) if found is None else found[0][found[0] >= 0]
        unlisted = self._unlisted
        keep = ~self._live[rows] if unlisted is None else ~self._live[rows] & ~unlisted[rows]
        return rows[keep]

    def get(self, record_id: str) -> Record:
        """The live record with this id (KeyError naming the id when absent or deleted)."""
        return self.record(self.row_of(record_id))

    def __getitem__(self, record_id: str) -> Record:
        return self.get(record_id)

    def __contains__(self, record_id: object) -> bool:
        row = self._row(record_id) if isinstance(record_id, str) else None
        return row is not None and bool(self._live[row])

    def __iter__(self) -> Iterator[Record]:
        """Live records in row order."""
        for row in np.flatnonzero(self._live):
            yield self.record(int(row))

    def __len__(self) -> int:
        """Number of live records."""
        return int(self._live.sum())

    # -- rows (the corpus protocol's row lookups: numpy in, numpy out) -----------------------

    def record_ids_of(self, rows: Any) -> np.ndarray:
        """Record id of each row (object array)."""
        ids = self._ids
        found: np.ndarray = ids.take(_rows(rows)) if isinstance(ids, StringColumn) else ids[_rows(rows)]
        return found

    def artifact_ids_of(self, rows: Any) -> np.ndarray:
        """Artifact id of each row (object array).

        A stored column is decoded whole on the first call (at 1M short ids, ~0.1 s once):
        every search reads the artifact ids of all its candidates (the collapse per artifact),
        which decoded row by row cost ~20 µs per search.
        """
        artifacts = self._artifacts
        if isinstance(artifacts, StringColumn):
            artifacts = artifacts.to_array()
        found: np.ndarray = artifacts[_rows(rows)]
        return found

    def texts_of(self, rows: Any) -> list[str]:
        """Text of each row."""
        return _strings(self._texts, _rows(rows))

    def metadata_of(self, rows: Any) -> list[Mapping[str, Any]]:
        """Metadata mapping of each row (treat as read-only)."""
        metadata = self._metadata
        if isinstance(metadata, JsonColumn):
            found: list[Mapping[str, Any]] = metadata.take(_rows(rows))
            return found
        return [metadata[row] for row in _rows(rows).tolist()]

    def hit_strings(self, rows: np.ndarray) -> tuple[list[str], list[str], list[Mapping[str, Any]]]:
        """Record ids, texts and metadata of *rows* (an int64 array), as lists: :meth:`hit_columns`'s decoded part."""
        return _strings(self._ids, rows), _strings(self._texts, rows), self.metadata_of(rows)

    def hit_reader(self) -> Callable[[int], tuple[str, str, Mapping[str, Any]]]:
        """A function giving one row's record id, text and metadata (0 <= row < n_rows: the caller's bound).

        For hits spread over several segments (a row or two in each): read
        row by row, with none of :meth:`hit_strings`'s set-up per call.
        """
        columns: list[Callable[[int], Any]] = [
            column.reader() if isinstance(column, (StringColumn, JsonColumn)) else column.__getitem__
            for column in (self._ids, self._texts, self._metadata)]
        ids, texts, metadata = columns
        return lambda row: (ids(row), texts(row), metadata(row))

    def hit_columns(self, rows: np.ndarray) -> tuple[list[str], list[str], list[int], list[int], list[str],
                                                     list[Mapping[str, Any]]]:
        """Artifact ids, record ids, kind codes, surface indices, texts and metadata of *rows*, as lists.

        *rows* an int64 array.  What a batch of hits reads, each column looked
        up once for these rows only (a stored corpus decodes just their
        strings): a fixed cost of every ``search()``.
        """
        ids, texts, metadata = self.hit_strings(rows)
        return (self.artifact_ids_of(rows).tolist(), ids, self._kind_codes[rows].tolist(),
                self._surface_indices[rows].tolist(), texts, metadata)

    def kind_codes_of(self, rows: Any) -> np.ndarray:
        """Surface kind code of each row (int32), indexing :attr:`kinds`."""
        found: np.ndarray = self._kind_codes[_rows(rows)]
        return found

    def surface_indices_of(self, rows: Any) -> np.ndarray:
        """Plan-global surface index of each row (int64)."""
        found: np.ndarray = self._surface_indices[_rows(rows)]
        return found

    def records(self, rows: Any) -> list[Record]:
        """The records of these rows, in order (each column looked up once for the batch)."""
        rows = _rows(rows)
        kinds, codes = self._kinds, self._kind_codes[rows].tolist()
        return [Record(artifact_id=artifact, surface_kind=kinds[code], text=text, metadata=metadata,
                       surface_index=index, id=record_id)
                for artifact, code, text, metadata, index, record_id in zip(
                    self.artifact_ids_of(rows).tolist(), codes, self.texts_of(rows), self.metadata_of(rows),
                    self._surface_indices[rows].tolist(), self.record_ids_of(rows).tolist())]

    # -- ledger ---------------------------------------------------------------------------

    @property
    def ledger(self) -> Mapping[str, tuple[str, ...]]:
        """Read-only artifact_id -> listed record ids in plan order (as written at build time, less what updates removed)."""
        return self._ledger

    @property
    def ledger_table(self) -> LedgerTable:
        """The ledger of these records as arrays, as written with them (what is stored; unlisted rows included)."""
        return self._table

    def artifacts(self) -> tuple[str, ...]:
        """Artifact ids of the ledger, in order of first appearance at build time."""
        return tuple(self._ledger)

    def sibling_rows(self, artifact_ids: Sequence[str]) -> Siblings:
        """Each artifact's live rows in plan order, through the ledger (see :class:`~irflow.store.protocol.Siblings`).

        Ledger rows are read, never re-derived; a deleted record is left out
        silently, a listed id the store does not hold is reported as stale.
        The Python work is per artifact, the rows are numpy.
        """
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
            rows = rows[rows >= 0]
            self.check_ledger_rows(artifact, rows)
            rows = rows[self._live[rows]]
            # the ledger is written in plan order; sorting keeps the promise for a hand-made one
            groups.append(rows[np.argsort(self._surface_indices[rows], kind="stable")])
        offsets = np.concatenate(([0], np.cumsum([g.size for g in groups], dtype=np.int64)))
        flat = np.concatenate(groups) if groups else np.empty(0, np.int64)
        return Siblings(offsets, flat, listed, stale)

    def check_ledger_rows(self, artifact: str, rows: np.ndarray) -> None:
        """CorpusError when the ledger lists, under ``artifact``, a row of another artifact (checked per lookup)."""
        if not rows.size:
            return
        owners = self.artifact_ids_of(rows)
        wrong = np.flatnonzero(owners != artifact)
        if wrong.size:
            row = int(rows[wrong[0]])
            raise CorpusError(f"{self._ledger.where}: the ledger lists record {self.record_ids_of([row])[0]!r} under "
                              f"artifact {artifact!r}, but it is a record of {owners[wrong[0]]!r}; the corpus is "
                              "damaged — rebuild it")

    # -- deletes --------------------------------------------------------------------------

    def delete_record(self, record_id: str) -> None:
        """Tombstone one record, out of band: the ledger is NOT updated (that is the seed's stale-ledger case).

        The row drops out of every candidate mask.  For an on-disk corpus the
        new tombstone set is written as a new generation first, atomically, so
        memory never claims a delete the disk does not hold.
        """
        if self._delete_hook is not None:  # a corpus's store: the corpus commits it (see set_delete_hook)
            self._delete_hook(record_id)
            return
        row = self.row_of(record_id)
        deleted = np.union1d(self.deleted_rows, np.array([row], dtype=np.int64))
        if self._tombstone_writer is not None:
            deleted = self._tombstone_writer(deleted)
        self._apply_deleted(deleted)
        self.version += 1

    def set_tombstone_writer(self, writer: TombstoneWriter | None) -> None:
        """Make deletes durable through *writer* (set by irflow.store.persist for on-disk corpora)."""
        self._tombstone_writer = writer

    def set_delete_hook(self, hook: DeleteHook | None) -> None:
        """Hand ``delete_record`` to *hook* (a corpus: it commits a new state, and this store stays as it was)."""
        self._delete_hook = hook

    def _apply_deleted(self, rows: np.ndarray) -> None:
        if rows.size and (rows.min() < 0 or rows.max() >= self.n_rows):
            raise CorpusError(f"tombstones name rows outside 0..{self.n_rows - 1}; the corpus is damaged — rebuild it")
        self._live[rows] = False

    def _label(self) -> str:
        return f"corpus {self.name!r}" if self.name else "the corpus store"

    def __repr__(self) -> str:
        return f"CorpusStore(name={self.name!r}, records={len(self)}, rows={self.n_rows}, artifacts={len(self._ledger)})"
