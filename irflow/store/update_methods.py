"""The update methods every changing corpus offers — a corpus and a sharded corpus alike — over one ``_commit``.

A class mixing this in defines ``_commit(operations, progress, batch_size)``:
apply the :class:`~irflow.store.updates.Operation` list as one atomic commit
and return its :class:`~irflow.store.updates.UpdateReport`.  The methods
here only say what each operation is, so both kinds of corpus take exactly
the same calls.

>>> # corpus.add(records); corpus.delete(["id-1"]); with corpus.batch() as b: b.upsert(records)
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from irflow.store.mergepolicy import MergePolicy
from irflow.store.records import Record
from irflow.store.updates import Batch, Operation, UpdateReport

__all__ = ["UpdateMethods"]

Records = Iterable[Record | Mapping[str, Any]]


class UpdateMethods:
    """add / upsert / delete / put_artifact / delete_artifact / batch, each one commit of ``_commit``; the merge policy."""

    _merge_policy: MergePolicy

    def _commit(self, operations: Sequence[Operation], progress: bool, batch_size: int) -> UpdateReport:
        raise NotImplementedError

    def add(self, records: Records, *, progress: bool = False, batch_size: int = 512) -> UpdateReport:
        """Add records (Record objects or dicts, as :func:`irflow.build` takes them) as one commit.

        A record whose id is live in the corpus is refused ("use upsert");
        so are a duplicate id or ``(artifact, surface_index)`` within the
        call or against the live records.  An omitted ``surface_index``
        numbers the record after the surfaces its artifact holds already.
        Only texts the corpus lacks are embedded (see :mod:`irflow.store.newvectors`).
        Afterwards the corpus answers every query exactly as a fresh
        ``build`` of its live records (``list(corpus)``) would.
        """
        return self._commit([Operation.of_records("add", records)], progress, batch_size)

    def upsert(self, records: Records, *, progress: bool = False, batch_size: int = 512) -> UpdateReport:
        """Add records; one whose id is live replaces it (the old row is deleted, the new one goes at the end)."""
        return self._commit([Operation.of_records("upsert", records)], progress, batch_size)

    def delete(self, record_ids: Iterable[str] | str, *, missing: str = "error") -> UpdateReport:
        """Delete records by id, off the ledger too; an id not live is an error (``missing="ok"``: a warning)."""
        return self._commit([Operation.of_ids(record_ids, missing)], False, 512)

    def put_artifact(self, artifact_id: str, records: Records, *, progress: bool = False,
                     batch_size: int = 512) -> UpdateReport:
        """Replace every surface of an artifact by *records* at once (surface indices from 0; empty: delete it)."""
        return self._commit([Operation.of_records("put_artifact", records, artifact=str(artifact_id))], progress,
                            batch_size)

    def delete_artifact(self, artifact_id: str, *, missing: str = "error") -> UpdateReport:
        """Delete every live record of an artifact (an unknown one is an error; ``missing="ok"``: a warning)."""
        return self._commit([Operation("delete_artifact", artifact=str(artifact_id), missing=missing)], False, 512)

    def batch(self, *, progress: bool = False, batch_size: int = 512) -> Batch:
        """Several operations as one commit: ``with corpus.batch() as b: b.add(...); b.delete(...)``."""
        return Batch(lambda operations: self._commit(operations, progress, batch_size))

    @property
    def merge_policy(self) -> MergePolicy:
        """When segments merge by themselves after a commit (:class:`~irflow.store.mergepolicy.MergePolicy`;
        a sharded corpus applies it to each shard by itself)."""
        return self._merge_policy

    @merge_policy.setter
    def merge_policy(self, policy: MergePolicy) -> None:
        if not isinstance(policy, MergePolicy):
            raise TypeError(f"merge_policy must be a MergePolicy, got {type(policy).__name__}")
        self._merge_policy = policy
