"""A filter's cost does not grow with fields × records: thousands of misspelled fields, $in values, $or branches.

A filter naming 2,000 misspelled fields used to walk every record's
metadata twice per field (its column, then the fields its warning lists).
Now the fields of the metadata are indexed in one walk, a path no record has
gets a column that costs nothing per row, and the fields a warning lists are
gathered once per corpus state.  Work is counted (metadata accesses, calls,
allocation), never timed; the warnings users see are unchanged.
"""

from __future__ import annotations

import difflib
import tracemalloc
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import engine_fakes  # noqa: F401  (maps irflow.stages / irflow.recipes in a bare checkout)
import irflow.kernels.columns as columns_module
from filter_reference import MISSING, lookup, matches as reference_matches
from irflow.errors import UnknownFieldWarning
from irflow.kernels.columns import MetadataColumns
from irflow.kernels.field_index import index_fields
from irflow.kernels.filters import compile_filter
from irflow.shard import shard
from irflow.shard.worker import ShardWorker
from irflow.store.corpus import build

N_RECORDS = 3000


class CountingDict(dict):
    """A record's metadata that counts how often it is read: a walk over the metadata reads every record."""

    reads = 0

    def __contains__(self, key: object) -> bool:
        CountingDict.reads += 1
        return super().__contains__(key)

    def __getitem__(self, key: Any) -> Any:
        CountingDict.reads += 1
        return super().__getitem__(key)

    def items(self):  # type: ignore[override]
        CountingDict.reads += 1
        return super().items()


def _records(n: int = N_RECORDS) -> list[dict[str, Any]]:
    return [{"artifact_id": f"a{i}", "surface_kind": "name", "text": f"pkg {i} tool",
             "metadata": {"owner": f"o{i % 7}", "stars": i % 100,
                          "repo": {"lang": "py", "deps": [{"name": f"d{i % 5}"}]}}} for i in range(n)]


def _counted_corpus(n: int = N_RECORDS):
    corpus = build(_records(n), embedder="hash:16", name="bounds")
    # every metadata read of the corpus (its filter columns, the fields a warning lists) goes through these
    corpus.store._metadata = [CountingDict(m) for m in corpus.store._metadata]
    return corpus


def _reads_of(corpus, spec: Mapping[str, Any]) -> tuple[int, list[str]]:
    CountingDict.reads = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        corpus.candidate_mask(spec)
    return CountingDict.reads, [str(w.message) for w in caught if w.category is UnknownFieldWarning]


def _expected_warning(path: str, known: list[str]) -> str:
    """The warning as users have always seen it, composed here independently."""
    close = difflib.get_close_matches(path, known, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (f"filter: no record of corpus 'bounds' has the field {path!r}{hint}, so conditions on it see a missing "
            f"field (equality matches nothing); its fields are {', '.join(known)}")


KNOWN = ["owner", "repo", "repo.deps", "repo.deps.name", "repo.lang", "stars"]


def test_two_thousand_misspelled_fields_cost_a_few_walks_over_the_metadata():
    one = _counted_corpus()
    reads_one, warned_one = _reads_of(one, {"ownr": "x"})
    assert warned_one == [_expected_warning("ownr", KNOWN)]
    many = _counted_corpus()
    spec = {f"ownr{i}": "x" for i in range(1000)} | {f"repo.lnag{i}": "py" for i in range(1000)}
    reads_many, warned_many = _reads_of(many, spec)
    # the same warnings as ever: one per field, with its suggestion and the fields the corpus has
    assert sorted(warned_many) == sorted(_expected_warning(path, KNOWN) for path in spec)
    assert "(did you mean 'owner'?)" in warned_many[0]
    # a few walks over the records, however many fields: not 2,000 walks (6 million reads before)
    assert reads_many <= 4 * N_RECORDS
    assert reads_many <= 2 * reads_one + N_RECORDS
    # and asking again reads nothing: the columns are kept
    assert _reads_of(many, spec) == (0, [])


def test_misspelled_fields_take_no_memory_per_row():
    corpus = build(_records(), embedder="hash:16", name="bounds")
    spec = {"$and": [{f"ownr{i}": {"$ne": "x"}} for i in range(2000)]}  # no early exit: every clause runs
    compile_filter(spec)
    tracemalloc.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mask = corpus.candidate_mask(spec)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert mask.all()  # $ne on a field no record has matches every record
    # 2,000 full columns of 3,000 rows took ~150 MB; the index and the warnings' texts take a few
    assert peak < 20 << 20


def test_a_sharded_corpus_gathers_the_fields_a_warning_lists_once(tmp_path, monkeypatch):
    single = build(_records(200), embedder="hash:16", name="bounds")
    sharded = shard(single, 3, tmp_path / "bounds.sharded")
    calls = []
    original = ShardWorker.field_paths
    monkeypatch.setattr(ShardWorker, "field_paths", lambda self: calls.append(1) or original(self))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sharded.candidate_mask({f"ownr{i}": "x" for i in range(300)})
    finally:
        sharded.close()
    assert len(caught) == 300
    assert str(caught[0].message) == _expected_warning("ownr0", KNOWN)
    assert len(calls) <= 3  # once per shard, not once per field and shard


def test_many_in_values_and_or_branches_are_bounded():
    """$in with 2,000 values and $or of 2,000 branches over one field: one column, vectorized clauses."""
    corpus = _counted_corpus()
    CountingDict.reads = 0
    in_mask = corpus.candidate_mask({"owner": {"$in": [f"o{i}" for i in range(2000)]}})
    or_mask = corpus.candidate_mask({"$or": [{"owner": f"o{i}"} for i in range(2000)]})
    nested = {"owner": "o1"}
    for _ in range(30):
        nested = {"$or": [nested, {"stars": {"$lt": 0}}]}
    deep_mask = corpus.candidate_mask(nested)
    assert CountingDict.reads <= 2 * 2 * N_RECORDS  # the owner and stars columns, each walked once (2 reads a record)
    assert in_mask.all() and or_mask.all()
    assert np.array_equal(deep_mask, corpus.candidate_mask({"owner": "o1"}))


# -- the index and the columns made from it agree with the reference evaluator --------------------------------

KEYS = ("a", "b", "c")
PATHS = ("a", "b", "c", "a.b", "a.c", "b.a", "a.b.c", "c.a.b", "z", "a.z", "a.b.z")
SCALARS = st.sampled_from([None, True, 0, 1, 2.5, "", "a", "b"])
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(KEYS), inner, max_size=3), max_leaves=8)
RECORDS = st.lists(st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=3), min_size=1, max_size=10)
FILTER_VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=2), st.dictionaries(st.sampled_from(KEYS), SCALARS,
                                                                                   max_size=2))
CONDITIONS = st.one_of(
    FILTER_VALUES,
    st.builds(lambda v: {"$ne": v}, FILTER_VALUES),
    st.builds(lambda v: {"$in": v}, st.lists(FILTER_VALUES, max_size=3)),
    st.builds(lambda b: {"$exists": b}, st.booleans()),
    st.builds(lambda s: {"$size": s}, st.integers(0, 2)),
    st.builds(lambda v: {"$gte": v}, st.sampled_from([0, 1, "", "a"])),
)


def _reference_present(record: Mapping[str, Any], parts: list[str]) -> bool:
    return any(item is not MISSING for item in lookup(record, parts))


@settings(max_examples=150, deadline=None)
@given(records=RECORDS)
def test_the_index_knows_exactly_which_paths_some_record_has(records):
    index = index_fields(records)
    assert index.exact
    for path in PATHS:
        parts = tuple(path.split("."))
        somewhere = any(_reference_present(record, list(parts)) for record in records)
        assert (parts[0] in index.heads if len(parts) == 1 else parts in index.paths) == somewhere, path
        if index.surely_absent(parts):  # then no record has it and every record misses it
            assert not somewhere
            assert all(MISSING in lookup(record, list(parts)) for record in records), path
        rows = [i for i, record in enumerate(records) if parts[0] in record]
        assert index.rows_with_head(parts[0]).tolist() == rows


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=RECORDS, fields=st.lists(st.tuples(st.sampled_from(PATHS), CONDITIONS), min_size=1, max_size=6))
def test_columns_made_from_the_index_agree_with_the_reference(records, fields):
    """Every path through the index (DIRECT_PATHS 0), held by few rows or many (sparse or dense columns)."""
    for sparse_below in (1, 10**9):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(columns_module, "DIRECT_PATHS", 0)
            patch.setattr(columns_module, "SPARSE_BELOW", sparse_below)
            columns = MetadataColumns(records)
            for path, condition in fields:
                clause = {path: condition}
                expected = [reference_matches(record, clause) for record in records]
                assert compile_filter(clause).mask(columns).tolist() == expected, (clause, sparse_below)
                column = columns.column(path)
                live = np.ones(len(records), dtype=bool)
                assert column.present_in(live) == any(_reference_present(r, path.split(".")) for r in records)


def test_a_shared_or_cyclic_container_makes_the_index_inexact_not_wrong():
    shared = {"b": 1}
    cyclic: dict[str, Any] = {"b": 2}
    cyclic["a"] = cyclic
    records = [{"a": shared, "c": shared}, {"a": cyclic}, {"a": []}]
    index = index_fields(records)  # ends, though one record holds itself
    assert not index.exact and not index.surely_absent(("a", "z"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(columns_module, "DIRECT_PATHS", 0)
        columns = MetadataColumns(records)
        assert compile_filter({"a.a.a.b": 2}).mask(columns).tolist() == [False, True, False]
        assert compile_filter({"a.z": None}).mask(columns).tolist() == [True, True, False]  # [] ends cleanly
