"""Sibling lookup through the ledger: every stored surface of one artifact, in plan order.

The primitive beneath retrieval-time context expansion.  Resolution is
ledger-backed only: the artifact's ledger entry lists its record ids, and
those ids are fetched from the store.  Ids are never re-derived (from a
per-kind ``chunk_index`` or the like) — on multi-kind plans that index differs
from the plan-global ``surface_index`` baked into the id, so derivation would
fetch wrong or missing siblings.

>>> # records_for_artifact(corpus, "unbox") -> [Record(...name...), Record(...description...), ...]
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from irflow.errors import NoLedgerEntry
from irflow.store.paths import resolve_corpus_path
from irflow.store.opening import load_store
from irflow.store.records import Record
from irflow.store.record_store import CorpusStore

__all__ = ["records_for_artifact", "resolve_store"]


def resolve_store(source: Any) -> CorpusStore:
    """The store behind *source*: a CorpusStore, anything with ``.store`` (a Corpus), a path, or a corpus name.

    A path or name opens only the store files (records, ledger, tombstones,
    checksum-verified): sibling lookup never embeds, so no embedder is
    resolved and no vectors or postings are read.
    """
    if isinstance(source, CorpusStore):
        return source
    store = getattr(source, "store", None)
    if isinstance(store, CorpusStore):
        return store
    if isinstance(source, (str, os.PathLike)):
        root = resolve_corpus_path(source)
        return load_store(root, name=root.name)
    raise TypeError(
        f"records_for_artifact needs a CorpusStore, a Corpus (anything with .store), a corpus path or a name; "
        f"got {type(source).__name__}"
    )


def records_for_artifact(store_or_corpus_or_name: Any, artifact_id: str, *, surface_kind: str | None = None) -> list[Record]:
    """All stored records of *artifact_id*, ordered by ``surface_index``; optionally one *surface_kind* only.

    Raises :class:`~irflow.errors.NoLedgerEntry` (a ``KeyError``) when the
    ledger has no entry for the artifact — the benign miss; and a plain
    ``KeyError`` naming the record and the artifact when the entry lists a
    record the store lacks — a stale ledger (an interrupted build or an
    out-of-band ``delete_record``), which is data corruption, not a miss.
    A known artifact with no surface of *surface_kind* yields ``[]``.
    """
    own = getattr(store_or_corpus_or_name, "records_for_artifact", None)
    if own is not None:  # a corpus with its own lookup (a sharded one asks the shard holding the artifact)
        found: list[Record] = own(artifact_id, surface_kind=surface_kind)
        return found
    store = resolve_store(store_or_corpus_or_name)
    try:
        record_ids = store.ledger[artifact_id]
    except KeyError:
        where = f" of corpus {store.name!r}" if store.name else ""
        raise NoLedgerEntry(
            f"the ledger{where} has no entry for artifact {artifact_id!r} (an unknown artifact, or a corpus "
            "built without ledger bookkeeping)"
        ) from None
    records: list[Record] = []
    for record_id in record_ids:
        if record_id not in store:
            raise KeyError(
                f"record {record_id!r} listed by the ledger for artifact {artifact_id!r} is missing from the store: "
                "the ledger is stale (an interrupted build or an out-of-band delete_record); rebuild the corpus to repair it"
            )
        records.append(store.get(record_id))
        if records[-1].artifact_id != artifact_id:
            store.check_ledger_rows(artifact_id, np.array([store.row_of(record_id)], dtype=np.int64))
    if surface_kind is not None:
        records = [r for r in records if r.surface_kind == surface_kind]
    # The ledger is written in plan order already; sorting keeps the promise even for a hand-made ledger.
    records.sort(key=lambda r: r.surface_index)  # type: ignore[arg-type,return-value]
    return records
