"""Format 2's record columns: strings and JSON as blob + offsets, the ledger as arrays, and what opening costs."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import irflow
from irflow.errors import CorpusError
from irflow.kernels.postings import Postings
from irflow.store.columnar import JsonColumn, LedgerTable, StringColumn
from irflow.store.genfiles import StreamedArray, write_file
from irflow.store.ledger import records_for_artifact
from irflow.store.persist import load_store, save_corpus
from irflow.store.record_store import CorpusStore
from irflow.store.records import Record

texts = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12), max_size=40)
json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=5)
                           | st.floats(allow_nan=False, allow_infinity=False),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                         max_size=3), max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(texts, st.data())
def test_string_column_gives_back_every_string(values: list[str], data: st.DataObject) -> None:
    column = StringColumn.of(values)
    assert len(column) == len(values) and list(column) == values
    assert column.blob.tobytes() == "".join(values).encode("utf-8")
    rows = data.draw(st.lists(st.integers(0, len(values) - 1), max_size=10)) if values else []
    assert column.take(rows).tolist() == [values[r] for r in rows]
    assert [column[r] for r in rows] == [values[r] for r in rows]
    assert column[1:4] == values[1:4] and column.to_array().tolist() == values


def test_string_column_refuses_rows_out_of_range_and_names_a_bad_blob() -> None:
    column = StringColumn.of(["a", "b"])
    with pytest.raises(IndexError):
        column.take([2])
    with pytest.raises(IndexError):
        _ = column[2]
    assert column[-1] == "b" and column.take([-2]).tolist() == ["a"]
    bad = StringColumn(np.frombuffer(b"ok\xff", dtype=np.uint8), np.array([0, 2, 3]), where="x/records.text.bytes.npy")
    assert bad[0] == "ok"
    with pytest.raises(CorpusError, match=r"x/records.text.bytes.npy is not UTF-8.*rebuild"):
        _ = bad[1]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=6), json_values, max_size=4), max_size=20), st.data())
def test_json_column_rows_alone_and_all_at_once_agree(values: list[dict], data: st.DataObject) -> None:
    column = JsonColumn.of(values)
    column.validate()
    expected = json.loads(json.dumps(values))  # what JSON gives back (tuples become lists, and so on)
    if values:
        row = data.draw(st.integers(0, len(values) - 1))
        assert column[row] == expected[row]
    fresh = JsonColumn(column.strings)
    assert fresh.to_list() == expected and list(fresh) == expected


@settings(max_examples=150, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=6), json_values, max_size=4), min_size=1, max_size=20), st.data())
def test_json_column_takes_several_rows_as_each_row_alone(values: list[dict], data: st.DataObject) -> None:
    # several rows are decoded by one scan of their joined texts: the same values as row by row
    column = JsonColumn.of(values)
    rows = data.draw(st.lists(st.integers(-len(values), len(values) - 1), max_size=12))
    assert column.take(np.array(rows, dtype=np.int64)) == [column[row] for row in rows]


def test_json_column_refuses_a_row_holding_two_values_among_others() -> None:
    # "1,2," would shift the values after it: the rows are then decoded alone, which names the damage
    column = JsonColumn(StringColumn(np.frombuffer(b'{},1,2,{},', dtype=np.uint8), np.array([0, 3, 7, 10]),
                                     where="g/records.metadata.bytes.npy"))
    assert column.take(np.array([0, 2])) == [{}, {}]
    with pytest.raises(CorpusError, match=r"g/records.metadata.bytes.npy is not valid JSON"):
        column.take(np.array([0, 1, 2]))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=6), json_values, max_size=4), min_size=1, max_size=12),
       st.lists(st.text(max_size=8), min_size=1, max_size=12), st.booleans(), st.data())
def test_a_columns_row_reader_gives_each_rows_own_value(values: list[dict], strings: list[str], decoded: bool,
                                                        data: st.DataObject) -> None:
    # what hits over several segments read row by row: the values of a stored or a decoded column alike
    texts, metadata = StringColumn.of(strings), JsonColumn.of(values)
    if decoded:
        texts.to_array()
        metadata.to_list()
    text_at, value_at = texts.reader(), metadata.reader()
    for row in data.draw(st.lists(st.integers(0, len(strings) - 1), max_size=6)):
        assert text_at(row) == strings[row]
    for row in data.draw(st.lists(st.integers(0, len(values) - 1), max_size=6)):
        assert value_at(row) == json.loads(json.dumps(values[row]))


def test_a_columns_row_reader_names_the_damage_as_a_take_does() -> None:
    bad = StringColumn(np.frombuffer(b"ok\xff", dtype=np.uint8), np.array([0, 2, 3]), where="x/records.text.bytes.npy")
    assert bad.reader()(0) == "ok"
    with pytest.raises(CorpusError, match=r"x/records.text.bytes.npy is not UTF-8.*rebuild"):
        bad.reader()(1)
    column = JsonColumn(StringColumn(np.frombuffer(b'{"a":1}x,{,[],', dtype=np.uint8), np.array([0, 9, 11, 14]),
                                     where="g/records.metadata.bytes.npy"),
                        check=lambda value: type(value) is dict, what="a metadata mapping")
    for row in (0, 1):
        with pytest.raises(CorpusError, match=r"g/records.metadata.bytes.npy is not valid JSON.*rebuild"):
            column.reader()(row)
    with pytest.raises(CorpusError, match=r"row 2 holds a list, expected a metadata mapping"):
        column.reader()(2)


def test_json_column_names_the_record_that_cannot_be_written() -> None:
    with pytest.raises(CorpusError, match="cannot write the metadata of r2 as JSON"):
        JsonColumn.of([{}, {"a": 1}, {"when": object()}], name=lambda row: f"the metadata of r{row}")


def test_a_streamed_array_is_written_as_np_save_writes_it(tmp_path: Path) -> None:
    values = ["héllo", "", "wörld €", "x" * 70_000]
    column = StringColumn.of(values)
    write_file(tmp_path / "a.npy", StreamedArray(np.uint8, column.blob.size,
                                                lambda: iter([v.encode() for v in values])))
    saved = io.BytesIO()
    np.save(saved, column.blob, allow_pickle=False)
    assert (tmp_path / "a.npy").read_bytes() == saved.getvalue()
    with pytest.raises(ValueError, match="b.npy: 3 bytes streamed for 4 items of uint8"):
        write_file(tmp_path / "b.npy", StreamedArray(np.uint8, 4, lambda: iter([b"abc"])))


def test_ledger_table_lists_ids_in_order_and_keeps_those_the_store_lacks() -> None:
    ids = np.array(["r0", "r1", "r2"], dtype=object)
    ledger = {"a": ["r1", "ghost", "r0"], "b": [], "c": ["r2", "gone"]}
    table = LedgerTable.of(ledger, {"r0": 0, "r1": 1, "r2": 2}, lambda rows: ids[rows])
    assert table.rows.tolist() == [1, -1, 0, 2, -1] and table.missing == ["ghost", "gone"]
    assert dict(table) == {a: tuple(v) for a, v in ledger.items()} and list(table) == ["a", "b", "c"]
    assert table.entry("c")[1] == ["gone"] and table.entry("zzz") is None and "b" in table and 5 not in table


def _store(n: int = 12, ghost: bool = False) -> CorpusStore:
    records = [Record(f"pkg{i % 4}", ("name", "description", "readme")[i // 4], f"text {i} über", {"i": i, "tags": ["x"]})
               for i in range(n)]
    store = CorpusStore.from_records(irflow.store.record_store.prepare_records(records))
    if ghost:  # the ledger of a shard or an interrupted build: it lists an id the store lacks
        ledger = dict(store.ledger, pkg1=(*store.ledger["pkg1"][:1], "ghost-id", *store.ledger["pkg1"][1:]),
                      nothing=())
        store = CorpusStore(record_ids=store.record_ids.tolist(), artifact_ids=store.artifact_ids.tolist(),
                            surface_kinds=[store.kinds[c] for c in store.kind_codes.tolist()],
                            surface_indices=store.surface_indices, texts=list(store.texts),
                            metadata=list(store.metadata), ledger=ledger, deleted_rows=[5])
    return store


@pytest.mark.parametrize("ghost", [False, True])
def test_a_stored_store_answers_as_the_one_in_memory(tmp_path: Path, ghost: bool) -> None:
    store = _store(ghost=ghost)
    save_corpus(tmp_path / "c", store=store, postings=Postings.build([t.split() for t in store.texts]), vectors=None,
                analyzer=irflow.kernels.text.get_analyzer(None).to_dict(), embedder=None)
    loaded = load_store(tmp_path / "c")
    artifacts = [*store.ledger, "unknown"]
    assert dict(loaded.ledger) == dict(store.ledger) and loaded.artifacts() == store.artifacts()
    assert [r.to_dict() for r in loaded] == [r.to_dict() for r in store]
    mine, theirs = loaded.sibling_rows(artifacts), store.sibling_rows(artifacts)
    assert mine.offsets.tolist() == theirs.offsets.tolist() and mine.rows.tolist() == theirs.rows.tolist()
    assert list(mine.listed) == list(theirs.listed) and list(mine.stale) == list(theirs.stale)
    assert loaded.live.tolist() == store.live.tolist()
    rows = [3, 0, 11, 5]
    assert loaded.record_ids_of(rows).tolist() == store.record_ids_of(rows).tolist()
    assert loaded.artifact_ids_of(rows).tolist() == store.artifact_ids_of(rows).tolist()
    assert loaded.texts_of(rows) == store.texts_of(rows)
    if ghost:
        assert ("pkg1", "ghost-id") in list(mine.stale)
        with pytest.raises(KeyError, match="ghost-id.*stale"):
            records_for_artifact(loaded, "pkg1")
        assert records_for_artifact(loaded, "nothing") == []


def test_opening_creates_nothing_per_record(tmp_path: Path) -> None:
    # format 1 parsed every id, text and metadata mapping into Python objects on open (~20 MB here);
    # format 2 maps the columns: what opening allocates does not grow with the records
    records = [Record(f"a{i}", "doc", f"w{i % 97} w{i % 13} w{i % 7}", {"g": i % 100}) for i in range(40_000)]
    irflow.build(records, embedder=None, path=tmp_path / "c")
    tracemalloc.start()
    try:
        corpus = irflow.open_corpus(tmp_path / "c")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000, peak
    assert corpus.hits([39_999], [1.0])[0].metadata == {"g": 99}
    assert corpus.row_of(corpus.record_ids_of([7])[0]) == 7


def test_a_json_row_with_trailing_bytes_or_bad_json_names_its_file() -> None:
    column = JsonColumn(StringColumn(np.frombuffer(b'{"a":1}x,{,[],', dtype=np.uint8), np.array([0, 9, 11, 14]),
                                     where="g/records.metadata.bytes.npy"),
                        check=lambda value: type(value) is dict, what="a metadata mapping")
    for row in (0, 1):
        with pytest.raises(CorpusError, match=r"g/records.metadata.bytes.npy is not valid JSON.*rebuild"):
            column.take(np.array([row]))
        with pytest.raises(CorpusError, match=r"g/records.metadata.bytes.npy is not valid JSON.*rebuild"):
            _ = column[row]
    with pytest.raises(CorpusError, match=r"row 2 holds a list, expected a metadata mapping"):
        column.take(np.array([2]))


def test_json_column_finds_offsets_shifted_onto_a_comma_inside_a_value() -> None:
    # rows '{"a":1,' and '"b":2},{},' are each damaged, though together they hold two values
    blob = b'{"a":1,"b":2},{},'
    for where in (blob, blob.replace(b"1", b'"x,y"')):
        cut = where.index(b",") + 1
        column = JsonColumn(StringColumn(np.frombuffer(where, dtype=np.uint8), np.array([0, cut, len(where)]),
                                         where="g/records.metadata.bytes.npy"), check=lambda value: type(value) is dict)
        column.validate()
        with pytest.raises(CorpusError, match=r"g/records.metadata.bytes.npy is not valid JSON"):
            column.take(np.array([0, 1]))


def test_json_column_takes_rows_of_any_text() -> None:
    values = [{"name": "Zoë"}, {"k": "日本"}, {}, {"a": [1, {"b": "x,y"}]}]
    column = JsonColumn.of(values)
    assert column.take(np.arange(4)) == values and column.take(np.array([3, 0])) == [values[3], values[0]]
