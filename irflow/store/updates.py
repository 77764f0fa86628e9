"""Validating a batch of updates against a corpus state, in call order, and what it changes.

The five operations a corpus takes (``add``, ``upsert``, ``delete``,
``put_artifact``, ``delete_artifact``; see :class:`irflow.store.corpus.Corpus`)
are recorded as :class:`Operation` values and applied here to a working copy
of one committed state, one after the other, as the caller made them: a
record added then deleted in the same batch is simply absent, an id deleted
earlier may be added again.  Nothing is changed until the whole batch is
valid; a refusal raises one :class:`~irflow.errors.CorpusError` naming the
records at fault (the first few and the count) and the fix, and the corpus
stays as it was.

The result, a :class:`Change`, is what a commit needs: per segment the rows
to tombstone (and unlist: every operation here takes what it removes off
the ledger), and the records of the one new segment, in the order they were
written (an upsert's new version goes to the end).  Rules, as a fresh
``build`` of the live records would hold them:

- record ids are unique among live records; ``add`` of a live id is refused
  ("use upsert"); ``upsert`` of one replaces it;
- ``(artifact, surface_index)`` is unique among live records;
- an omitted ``surface_index`` is the record's position among the call's
  records of its artifact, after the highest index the artifact has live
  (surfaces are appended); ``put_artifact`` numbers from 0, the artifact's
  old surfaces being gone.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterable, Sequence

import attrs
import numpy as np

from irflow.errors import CorpusError, MissingRecordWarning
from irflow.store.newvectors import named
from irflow.store.prepare import _to_record, prepare_records
from irflow.store.records import Record
from irflow.store.segment import SegmentView

__all__ = ["Operation", "Change", "UpdateReport", "apply_operations", "MISSING"]

#: What ``delete`` and ``delete_artifact`` do with an id or artifact the corpus does not hold live.
MISSING = ("error", "ok")
KINDS = ("add", "upsert", "delete", "put_artifact", "delete_artifact")


def _missing(instance: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in MISSING:
        raise ValueError(f"missing must be one of {MISSING}, got {value!r}")


@attrs.frozen
class Operation:
    """One operation of a batch: its kind, its records (converted, not yet numbered), ids or artifact."""

    kind: str = attrs.field(validator=attrs.validators.in_(KINDS))
    records: tuple[Record, ...] = ()
    ids: tuple[str, ...] = ()
    artifact: str = ""
    missing: str = attrs.field(default="error", validator=_missing)

    @classmethod
    def of_records(cls, kind: str, records: Iterable[Any], artifact: str = "") -> "Operation":
        """An add, upsert or put_artifact of *records* (Record objects or dicts, checked as ``build`` checks them)."""
        if isinstance(records, (Record, dict, str, bytes)):
            raise CorpusError(f"{kind} takes an iterable of records (Record objects or dicts); got a single "
                              f"{type(records).__name__} — wrap it in a list")
        return cls(kind, records=tuple(_to_record(item, i) for i, item in enumerate(records)), artifact=artifact)

    @classmethod
    def of_ids(cls, ids: Iterable[str] | str, missing: str) -> "Operation":
        """A delete of record ids (a single id string is one id)."""
        items = [ids] if isinstance(ids, str) else list(ids)
        odd = [repr(i) for i in items if not isinstance(i, str)]
        if odd:
            raise CorpusError(f"delete takes record ids (strings); got {named(odd)}")
        return cls("delete", ids=tuple(dict.fromkeys(items)), missing=missing)


@attrs.frozen
class UpdateReport:
    """What one commit (an operation, or a batch of them) did.

    ``added``: records new to the corpus; ``replaced``: records whose id
    was live before and has a new version; ``deleted``: live records removed
    and not replaced; ``embedded``: texts embedded; ``reused``: vectors
    taken from rows holding the same text; ``segments``: segments after the
    commit (and its merges); ``generation``: the on-disk generation now live
    (None in memory); ``merged``: segments the merge policy merged after it.
    """

    added: int = 0
    replaced: int = 0
    deleted: int = 0
    embedded: int = 0
    reused: int = 0
    segments: int = 0
    generation: str | None = None
    merged: int = 0


@attrs.frozen(eq=False)
class Change:
    """A validated batch: per segment the local rows it removes (tombstoned and unlisted), and the new records."""

    removed: tuple[np.ndarray, ...]
    records: tuple[Record, ...]
    added: int
    replaced: int
    deleted: int
    #: per segment, deleted rows still listed (``delete_record``'s) that the batch takes off the ledger: the
    #: same id written again, or their artifact put or deleted
    unlisted: tuple[np.ndarray, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.records and not any(r.size for r in (*self.removed, *self.unlisted))


class _Working:
    """A state's live records as a batch changes them: what it removed, what it will add, per artifact."""

    def __init__(self, parts: Sequence[SegmentView], label: str) -> None:
        self.parts = parts
        self.label = label
        self.removed: list[set[int]] = [set() for _ in parts]
        self.unlist: list[set[int]] = [set() for _ in parts]  # deleted rows still listed, to take off the ledger
        self.removed_ids: set[str] = set()  # ids live at the start that the batch removed
        self.pending: dict[str, Record] = {}  # new records by id, in the order written
        self._by_artifact: dict[str, dict[int, str]] = {}  # artifact -> surface_index -> live id
        self._rows_of: dict[str, np.ndarray] = {}  # record id -> its row in each segment (-1: none)

    # -- lookups (each operation's ids and artifacts looked up at once, per segment) ---------

    def prefetch(self, record_ids: Iterable[str] = (), artifacts: Iterable[str] = ()) -> None:
        """Look these ids' rows and these artifacts' live surfaces up in every segment, once."""
        ids = [i for i in dict.fromkeys(record_ids) if i not in self._rows_of]
        if ids:
            table = np.stack([part.store.rows_of_ids(ids) for part in self.parts], axis=1)
            self._rows_of.update(zip(ids, table))
        names = [a for a in dict.fromkeys(artifacts) if a not in self._by_artifact]
        if not names:
            return
        found: dict[str, dict[int, str]] = {a: {} for a in names}
        for s, part in enumerate(self.parts):
            siblings = part.store.sibling_rows(names)
            if not siblings.rows.size:
                continue
            rows = siblings.rows
            indices = part.store.surface_indices_of(rows).tolist()
            ids_of = part.store.record_ids_of(rows).tolist()
            removed = self.removed[s]
            for i, artifact in enumerate(names):
                for j in range(int(siblings.offsets[i]), int(siblings.offsets[i + 1])):
                    if int(rows[j]) not in removed:
                        found[artifact][indices[j]] = ids_of[j]
        for record in self.pending.values():
            if record.artifact_id in found:
                found[record.artifact_id][int(record.surface_index)] = str(record.id)  # type: ignore[arg-type]
        self._by_artifact.update(found)

    def _rows(self, record_id: str) -> np.ndarray:
        rows = self._rows_of.get(record_id)
        if rows is None:
            self.prefetch([record_id])
            rows = self._rows_of[record_id]
        return rows

    def existing(self, record_id: str) -> tuple[int, int] | None:
        """(segment, local row) of a record live at the start and not removed since."""
        for s, row in enumerate(self._rows(record_id).tolist()):
            if row >= 0 and row not in self.removed[s] and self.parts[s].store.live_row_at(row):
                return s, row
        return None

    def is_live(self, record_id: str) -> bool:
        return record_id in self.pending or self.existing(record_id) is not None

    def surfaces(self, artifact: str) -> dict[int, str]:
        """surface_index -> id of the artifact's live records (those live at the start read from the ledgers)."""
        if artifact not in self._by_artifact:
            self.prefetch(artifacts=[artifact])
        return self._by_artifact[artifact]

    def next_index(self, artifact: str) -> int:
        """Where an omitted surface_index of *artifact* starts: after its highest live one."""
        held = self.surfaces(artifact)
        return max(held) + 1 if held else 0

    # -- changes -------------------------------------------------------------------------

    def remove(self, record_id: str) -> None:
        """Take a live record out (a pending one is dropped; one live at the start is tombstoned and unlisted)."""
        record = self.pending.pop(record_id, None)
        if record is not None:
            self._forget(record.artifact_id, int(record.surface_index), record_id)  # type: ignore[arg-type]
            return
        where = self.existing(record_id)
        if where is None:
            raise KeyError(record_id)
        s, row = where
        store = self.parts[s].store
        self.removed[s].add(row)
        self.removed_ids.add(record_id)
        if self._by_artifact:  # keep the artifacts looked up so far right (one row's strings decoded)
            record = store.record(row)
            self._forget(record.artifact_id, int(record.surface_index), record_id)  # type: ignore[arg-type]

    def _forget(self, artifact: str, index: int, record_id: str) -> None:
        held = self._by_artifact.get(artifact)
        if held is not None and held.get(index) == record_id:
            del held[index]

    def insert(self, record: Record) -> None:
        record_id = str(record.id)
        for s, row in enumerate(self._rows(record_id).tolist()):  # an old row of the id still listed: unlist it
            if row >= 0 and bool(self.parts[s].store.stale_of(np.array([row]))[0]):
                self.unlist[s].add(row)
        self.pending[record_id] = record
        self.surfaces(record.artifact_id)[int(record.surface_index)] = record_id  # type: ignore[arg-type]

    def artifact_ids(self, artifact: str) -> list[str]:
        return list(self.surfaces(artifact).values())

    def unlist_artifact(self, artifact: str) -> None:
        """Take the artifact's deleted rows still listed off the ledger (it is put anew, or deleted)."""
        for s, part in enumerate(self.parts):
            self.unlist[s].update(part.store.stale_rows(artifact=artifact).tolist())


def _refuse(what: str, ids: Sequence[str], fix: str) -> None:
    if ids:
        raise CorpusError(f"{what}: {named(ids)}; {fix}")


def _add(work: _Working, records: Sequence[Record], replace: bool, first: bool) -> None:
    """add (``replace=False``) or upsert of prepared records; ``first``: number omitted indices from 0."""
    work.prefetch(artifacts=[r.artifact_id for r in records])
    prepared = prepare_records(records, first_index=None if first else work.next_index)
    work.prefetch(record_ids=[str(r.id) for r in prepared])
    if not replace:
        taken = [str(r.id) for r in prepared if work.is_live(str(r.id))]
        _refuse(f"{len(taken)} record(s) already in {work.label}", taken,
                "use upsert to replace a record (or delete it first)")
    clashes = []
    for record in prepared:
        record_id = str(record.id)
        if replace and work.is_live(record_id):
            work.remove(record_id)
        holder = work.surfaces(record.artifact_id).get(int(record.surface_index))  # type: ignore[arg-type]
        if holder is not None and holder != record_id:
            clashes.append(f"{record_id} (surface_index {record.surface_index} of artifact "
                           f"{record.artifact_id!r}, held by {holder})")
            continue
        work.insert(record)
    _refuse(f"{len(clashes)} record(s) take a surface another live record of their artifact holds", clashes,
            "give each surface of an artifact its own surface_index (or omit it: new surfaces go after the "
            "artifact's own), or upsert the record holding it")


def _missing_ones(what: str, names: list[str], missing: str, work: _Working) -> None:
    if not names:
        return
    message = f"{len(names)} {what} not in {work.label} (unknown, or deleted already): {named(names)}"
    if missing == "error":
        raise CorpusError(f"{message}; pass missing='ok' to delete the others and be warned instead")
    warnings.warn(MissingRecordWarning(message + "; the others were deleted"), stacklevel=5)


def _apply(work: _Working, op: Operation) -> None:
    if op.kind in ("add", "upsert"):
        _add(work, op.records, replace=op.kind == "upsert", first=False)
    elif op.kind == "delete":
        work.prefetch(record_ids=op.ids)
        gone = [record_id for record_id in op.ids if not work.is_live(record_id)]
        _missing_ones("record id(s)", gone, op.missing, work)
        for record_id in op.ids:
            if record_id not in gone:
                work.remove(record_id)
    elif op.kind == "delete_artifact":
        held = work.artifact_ids(op.artifact)
        if not held:
            _missing_ones("artifact", [op.artifact], op.missing, work)
        for record_id in held:
            work.remove(record_id)
        work.unlist_artifact(op.artifact)
    else:  # put_artifact
        strangers = [f"{r.id or '#' + str(i)} (artifact {r.artifact_id!r})" for i, r in enumerate(op.records)
                     if r.artifact_id != op.artifact]
        _refuse(f"put_artifact({op.artifact!r}) got {len(strangers)} record(s) of other artifacts", strangers,
                f"every record must have artifact_id {op.artifact!r}")
        for record_id in work.artifact_ids(op.artifact):
            work.remove(record_id)
        work.unlist_artifact(op.artifact)
        if op.records:
            _add(work, op.records, replace=False, first=True)


def apply_operations(parts: Sequence[SegmentView], operations: Sequence[Operation], label: str) -> Change:
    """The change *operations* make to a state of these segments, validated in call order (CorpusError otherwise)."""
    work = _Working(parts, label)
    for op in operations:
        _apply(work, op)
    records = tuple(work.pending.values())
    replaced = sum(1 for r in records if str(r.id) in work.removed_ids)
    return Change(
        removed=tuple(np.array(sorted(rows), dtype=np.int64) for rows in work.removed),
        records=records,
        added=len(records) - replaced,
        replaced=replaced,
        deleted=len(work.removed_ids) - replaced,
        unlisted=tuple(np.array(sorted(rows), dtype=np.int64) for rows in work.unlist),
    )


class Batch:
    """Several operations committed as one (``with corpus.batch() as b: b.add(...); b.delete(...)``).

    The same five methods as the corpus; nothing happens until the ``with``
    block ends, when they are validated in call order and committed at once
    (at most one new segment).  An error — in the block, or in validating
    them — commits nothing.  ``report`` is the commit's
    :class:`UpdateReport` afterwards.
    """

    def __init__(self, commit: Any) -> None:
        self._commit = commit
        self._operations: list[Operation] = []
        self.report: UpdateReport | None = None

    def add(self, records: Iterable[Any]) -> None:
        """Add new records (their ids must not be live in the corpus)."""
        self._operations.append(Operation.of_records("add", records))

    def upsert(self, records: Iterable[Any]) -> None:
        """Add records, replacing the live record of the same id."""
        self._operations.append(Operation.of_records("upsert", records))

    def delete(self, record_ids: Iterable[str] | str, *, missing: str = "error") -> None:
        """Delete records by id (``missing="ok"``: warn about ids the corpus does not hold live)."""
        self._operations.append(Operation.of_ids(record_ids, missing))

    def put_artifact(self, artifact_id: str, records: Iterable[Any]) -> None:
        """Replace every surface of an artifact by *records* (all of that artifact; empty: delete it)."""
        self._operations.append(Operation.of_records("put_artifact", records, artifact=str(artifact_id)))

    def delete_artifact(self, artifact_id: str, *, missing: str = "error") -> None:
        """Delete every live record of an artifact."""
        self._operations.append(Operation("delete_artifact", artifact=str(artifact_id), missing=missing))

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        if kind is None:
            self.report = self._commit(self._operations)
