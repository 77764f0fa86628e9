"""The record store, record preparation, and ledger-backed sibling lookup (records_for_artifact)."""

from __future__ import annotations

import numpy as np
import pytest

from irflow.store.corpus import build
from irflow.errors import CorpusError, IrflowError, NoLedgerEntry
from irflow.store.ledger import records_for_artifact, resolve_store
from irflow.store.records import Record
from irflow.store.record_store import CorpusStore, prepare_records


def _records() -> list[Record]:
    # Input order deliberately differs from plan order for "unbox" (explicit indices).
    return [
        Record("unbox", "readme_chunk", "Unbox extracts zip and tar archives.", {"owner": "ann"}, surface_index=2),
        Record("unbox", "name", "unbox", {"owner": "ann"}, surface_index=0),
        Record("graphy", "name", "graphy", {"owner": "bob"}),
        Record("unbox", "description", "Unpack any archive.", {"owner": "ann"}, surface_index=1),
        Record("graphy", "description", "Graph algorithms on networkx.", {"owner": "bob"}),
        Record("graphy", "readme_chunk", "Shortest paths and DAG utilities.", {"owner": "bob"}),
    ]


@pytest.fixture
def store() -> CorpusStore:
    return CorpusStore.from_records(prepare_records(_records()), name="demo")


# -- prepare_records ---------------------------------------------------------------------


def test_omitted_surface_index_is_position_among_the_artifacts_records() -> None:
    prepared = prepare_records(
        [
            {"artifact_id": "a", "surface_kind": "name", "text": "a"},
            {"artifact_id": "b", "surface_kind": "name", "text": "b"},
            {"artifact_id": "a", "surface_kind": "readme_chunk", "text": "x"},
            {"artifact_id": "a", "surface_kind": "readme_chunk", "text": "y"},
        ]
    )
    assert [(r.artifact_id, r.surface_index) for r in prepared] == [("a", 0), ("b", 0), ("a", 1), ("a", 2)]
    assert prepared[2].id == Record.make_id("a", "readme_chunk", 1)


def test_explicit_indices_and_ids_are_kept() -> None:
    prepared = prepare_records([Record("a", "name", "a", surface_index=7, id="custom-id")])
    assert prepared[0].surface_index == 7 and prepared[0].id == "custom-id"


def test_duplicate_artifact_index_is_an_error_naming_both() -> None:
    with pytest.raises(CorpusError, match=r"#0 and #1 .*surface_index 0 of artifact 'a'"):
        prepare_records([Record("a", "name", "a", surface_index=0), Record("a", "description", "d", surface_index=0)])


def test_omitted_index_colliding_with_an_explicit_one_is_an_error() -> None:
    with pytest.raises(CorpusError, match="surface_index 1"):
        prepare_records([Record("a", "name", "a", surface_index=1), Record("a", "description", "d")])


def test_duplicate_ids_are_an_error() -> None:
    with pytest.raises(CorpusError, match="same id 'x'"):
        prepare_records([Record("a", "name", "a", id="x", surface_index=0), Record("b", "name", "b", id="x", surface_index=0)])


def test_invalid_inputs_name_the_record() -> None:
    with pytest.raises(CorpusError, match="record #1 is invalid"):
        prepare_records([Record("a", "name", "a"), {"artifact_id": "b", "surface_kind": "name", "txt": "typo"}])
    with pytest.raises(CorpusError, match="record #0 is a str"):
        prepare_records(["not a record"])


# -- CorpusStore -------------------------------------------------------------------------


def test_lookup_by_id_iteration_and_len(store: CorpusStore) -> None:
    first = store.record_ids[0]
    assert store[first].text == "Unbox extracts zip and tar archives."
    assert store.get(first) == store[first]
    assert first in store and "nope" not in store and 3 not in store
    assert [r.id for r in store] == list(store.record_ids)
    assert len(store) == store.n_rows == 6
    with pytest.raises(KeyError, match="'nope'"):
        store.get("nope")


def test_records_carry_no_vector_and_columns_are_read_only(store: CorpusStore) -> None:
    assert all(r.vector is None for r in store)
    assert store.kinds == ("readme_chunk", "name", "description")
    assert store.kind_codes.dtype == np.int32 and store.surface_indices.dtype == np.int64
    assert store.record_ids.dtype == object
    with pytest.raises(ValueError):
        store.live[0] = False


def test_ledger_is_in_plan_order_and_read_only(store: CorpusStore) -> None:
    unbox = [store[i] for i in store.ledger["unbox"]]
    assert [r.surface_index for r in unbox] == [0, 1, 2]
    assert [r.surface_kind for r in unbox] == ["name", "description", "readme_chunk"]
    assert store.artifacts() == ("unbox", "graphy")
    with pytest.raises(TypeError):
        store.ledger["new"] = ()  # type: ignore[index]


def test_delete_record_tombstones_but_leaves_the_ledger(store: CorpusStore) -> None:
    victim = store.ledger["unbox"][1]
    ledger_before = dict(store.ledger)
    version = store.version
    store.delete_record(victim)
    assert dict(store.ledger) == ledger_before
    assert victim not in store and len(store) == 5 and store.n_rows == 6
    assert victim not in [r.id for r in store]
    assert store.version == version + 1
    with pytest.raises(KeyError, match=f"{victim}.*deleted"):
        store.get(victim)
    with pytest.raises(KeyError, match=victim):
        store.delete_record(victim)


# -- records_for_artifact ----------------------------------------------------------------


def test_records_for_artifact_orders_by_surface_index(store: CorpusStore) -> None:
    records = records_for_artifact(store, "unbox")
    assert [r.surface_index for r in records] == [0, 1, 2]
    assert [r.text for r in records] == ["unbox", "Unpack any archive.", "Unbox extracts zip and tar archives."]


def test_records_for_artifact_surface_kind(store: CorpusStore) -> None:
    assert [r.surface_kind for r in records_for_artifact(store, "graphy", surface_kind="readme_chunk")] == ["readme_chunk"]
    assert records_for_artifact(store, "graphy", surface_kind="deps") == []


def test_unknown_artifact_raises_no_ledger_entry(store: CorpusStore) -> None:
    with pytest.raises(NoLedgerEntry) as caught:
        records_for_artifact(store, "ghost")
    assert isinstance(caught.value, KeyError) and isinstance(caught.value, IrflowError)
    assert "ghost" in str(caught.value)


def test_stale_ledger_raises_plain_key_error_naming_record_and_artifact(store: CorpusStore) -> None:
    victim = store.ledger["graphy"][2]
    store.delete_record(victim)
    with pytest.raises(KeyError) as caught:
        records_for_artifact(store, "graphy")
    assert type(caught.value) is KeyError  # corruption, not the benign NoLedgerEntry miss
    message = str(caught.value)
    assert victim in message and "graphy" in message and "stale" in message
    # Other artifacts are unaffected.
    assert len(records_for_artifact(store, "unbox")) == 3


def test_accepts_store_corpus_or_anything_with_store(store: CorpusStore) -> None:
    corpus = build(_records(), embedder=None)

    class Holder:
        def __init__(self, s: CorpusStore) -> None:
            self.store = s

    assert resolve_store(store) is store
    assert resolve_store(corpus) is corpus.store
    assert resolve_store(Holder(store)) is store
    assert len(records_for_artifact(corpus, "unbox")) == 3
    with pytest.raises(TypeError, match="CorpusStore"):
        records_for_artifact(42, "unbox")
