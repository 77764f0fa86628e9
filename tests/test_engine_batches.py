"""QueryBatch, Scale and Candidates: the data every stage passes on."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_fakes import cands
from irflow.engine.batches import Candidates, QueryBatch, Scale, fill_value, frozen_array


# -- QueryBatch ---------------------------------------------------------------


def test_query_batch_raw_is_its_own_root():
    b = QueryBatch.of(["a", "b"])
    assert b.texts == ("a", "b") and b.originals == ("a", "b")
    assert b.origin.tolist() == [0, 1] and b.n_original == 2
    assert b.is_root and b.root() is b and len(b) == 2


def test_query_batch_expand_keeps_origins():
    b = QueryBatch.of(["a", "b"]).expand([["a1", "a2"], ["b1"]])
    assert b.texts == ("a1", "a2", "b1")
    assert b.origin.tolist() == [0, 0, 1]
    assert not b.is_root
    assert b.root() == QueryBatch.of(["a", "b"])
    again = b.expand([["x"], [], ["y", "z"]])
    assert again.origin.tolist() == [0, 1, 1] and again.originals == ("a", "b")


def test_query_batch_equality_and_hash():
    assert QueryBatch.of(["a"]) == QueryBatch.of(["a"])
    assert hash(QueryBatch.of(["a"])) == hash(QueryBatch.of(["a"]))
    assert QueryBatch.of(["a"]) != QueryBatch.of(["b"])
    assert QueryBatch(("a", "a"), [0, 0], ("a",)) != QueryBatch.of(["a", "a"])


@pytest.mark.parametrize("bad, message", [
    ("abc", "single string"),
    ([1], "must be a string"),
])
def test_query_batch_rejects_non_strings(bad, message):
    with pytest.raises(TypeError, match=message):
        QueryBatch.of(bad)


def test_query_batch_validates_origin():
    with pytest.raises(ValueError, match="origin has 1 entries for 2"):
        QueryBatch(("a", "b"), [0], ("a", "b"))
    with pytest.raises(ValueError, match="must index the 1 original"):
        QueryBatch(("a", "b"), [0, 1], ("a",))
    with pytest.raises(ValueError, match="one list per query text"):
        QueryBatch.of(["a"]).expand([])


# -- Scale ------------------------------------------------------------------------


def test_scale_values_docs_and_ordinality():
    assert Scale("rrf") is Scale.RRF and str(Scale.COSINE) == "cosine"
    assert Scale.RRF.ordinal and not Scale.COSINE.ordinal and not Scale.BM25.ordinal
    assert all(s.doc for s in Scale)
    with pytest.raises(ValueError):
        Scale("nope")


# -- Candidates ---------------------------------------------------------------------


def test_ranks_follow_order_within_each_query():
    c = cands(["q0", "q1", "q2"], [[(5, 0.9), (3, 0.5), (1, 0.1)], [], [(2, 1.0)]])
    assert c.rank.tolist() == [1, 2, 3, 1]
    assert c.counts().tolist() == [3, 0, 1]
    assert c.offsets.tolist() == [0, 3, 3, 4]
    rows, scores = c.per_query(0)
    assert rows.tolist() == [5, 3, 1] and scores.tolist() == [0.9, 0.5, 0.1]
    assert c.per_query(1)[0].size == 0
    assert c.query_slice(2) == slice(3, 4)
    assert len(c) == 4 and c.n_queries == 3
    with pytest.raises(IndexError):
        c.per_query(3)


def test_columns_have_fixed_dtypes_and_are_read_only():
    c = cands(["q"], [[(1, 0.5), (2, 0.25)]], name="dense")
    assert c.query_index.dtype == np.int32 and c.row.dtype == np.int64
    assert c.score.dtype == np.float64 and c.rank.dtype == np.int32
    for array in (c.query_index, c.row, c.score, c.rank, *c.provenance.values()):
        with pytest.raises(ValueError):
            array[0] = 0
    with pytest.raises(TypeError):
        c.provenance["x"] = np.zeros(2)  # type: ignore[index]


def test_read_only_views_leave_the_callers_array_writable():
    rows = np.array([1, 2])
    c = Candidates(QueryBatch.of(["q"]), [0, 0], rows, [1.0, 0.5], "cosine")
    rows[0] = 7  # the caller's array keeps its flags (and is not copied)
    assert rows.flags.writeable
    assert frozen_array([1, 2], np.int64).flags.writeable is False
    assert c.row.dtype == np.int64


@pytest.mark.parametrize("kwargs, message", [
    ({"query_index": [0, 0], "row": [1], "score": [1.0, 2.0]}, "one entry per candidate"),
    ({"query_index": [1, 0], "row": [1, 2], "score": [1.0, 2.0]}, "grouped by query"),
    ({"query_index": [0, 2], "row": [1, 2], "score": [1.0, 2.0]}, "within \\[0, 2\\)"),
    ({"query_index": [0], "row": [1], "score": [float("nan")]}, "must not be NaN"),
])
def test_invalid_columns_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Candidates(QueryBatch.of(["a", "b"]), scale="cosine", **kwargs)


def test_provenance_must_be_row_aligned():
    with pytest.raises(ValueError, match="provenance column 'x' has shape"):
        Candidates(QueryBatch.of(["a"]), [0], [1], [1.0], "cosine", {"x": [1, 2]})
    with pytest.raises(TypeError, match="non-empty strings"):
        Candidates(QueryBatch.of(["a"]), [0], [1], [1.0], "cosine", {"": [1]})


def test_inactive_is_empty():
    c = Candidates.inactive(QueryBatch.of(["a"]))
    assert not c.active and len(c) == 0 and c.scale is Scale.NONE
    with pytest.raises(ValueError, match="inactive Candidates batch must be empty"):
        Candidates(QueryBatch.of(["a"]), [0], [1], [1.0], "cosine", active=False)
    assert len(Candidates.empty(QueryBatch.of(["a", "b"]))) == 0


def test_take_gathers_provenance_and_renumbers_ranks():
    c = cands(["a", "b"], [[(1, 0.9), (2, 0.8), (3, 0.7)], [(4, 0.6)]], name="dense")
    t = c.take([2, 0, 3])
    assert t.row.tolist() == [3, 1, 4]
    assert t.rank.tolist() == [1, 2, 1]
    assert t.provenance["dense.rank"].tolist() == [3, 1, 1]  # the channel's rank survives
    with pytest.raises(ValueError, match="grouped by query"):
        c.take([3, 0])


def test_select_cut_and_sorted_by_score_is_stable():
    c = cands(["a", "b"], [[(1, 0.1), (3, 0.5), (2, 0.5), (4, 0.9)], [(6, 0.3), (5, 0.3)]])
    s = c.sorted_by_score()
    assert s.row.tolist() == [4, 3, 2, 1, 6, 5]  # 3 before 2 and 6 before 5: equal scores keep their order
    assert s.cut(2).row.tolist() == [4, 3, 6, 5]
    assert s.cut(10) is s
    assert s.cut(0).row.tolist() == []
    assert c.select(c.score > 0.2).row.tolist() == [3, 2, 4, 6, 5]
    with pytest.raises(ValueError, match="k >= 0"):
        c.cut(-1)
    with pytest.raises(ValueError, match="keep has shape"):
        c.select([True])


def test_ranked_sorts_unordered_columns():
    b = QueryBatch.of(["a", "b"])
    c = Candidates.ranked(b, [1, 0, 1, 0], [10, 13, 12, 11], [0.2, 0.4, 0.9, 0.4], "bm25", {"x": [1, 2, 3, 4]})
    assert c.query_index.tolist() == [0, 0, 1, 1]
    assert c.row.tolist() == [11, 13, 12, 10]  # 11 before 13: a tie goes to the lower row, not the given order
    assert c.provenance["x"].tolist() == [4, 2, 3, 1]


def test_with_scores_and_with_provenance_do_not_touch_the_original():
    c = cands(["a"], [[(1, 0.9), (2, 0.8)]], name="dense")
    w = c.with_scores(c.score * 2, "weighted", {"weight.factor": [2.0, 2.0]})
    assert w.score.tolist() == [1.8, 1.6] and w.scale is Scale.WEIGHTED
    assert set(w.provenance) == {"dense.score", "dense.rank", "weight.factor"}
    assert set(c.provenance) == {"dense.score", "dense.rank"} and c.score.tolist() == [0.9, 0.8]
    assert c.with_provenance({"x": [1, 2]}).column("x").tolist() == [1, 2]
    assert c.column("rank").tolist() == [1, 2]
    with pytest.raises(KeyError, match="columns: row, score"):
        c.column("nope")


def test_equality_fingerprint_and_origin_index():
    a = cands(["a"], [[(1, 0.9), (2, 0.8)]], name="dense")
    b = cands(["a"], [[(1, 0.9), (2, 0.8)]], name="dense")
    assert a == b and a.fingerprint() == b.fingerprint()
    assert a != cands(["a"], [[(1, 0.9), (2, 0.7)]], name="dense")
    assert a != a.with_provenance({"x": [1, 2]}) and a.fingerprint() != a.with_provenance({"x": [1, 2]}).fingerprint()
    nan = a.with_provenance({"f": [np.nan, 1.0]})
    assert nan == a.with_provenance({"f": [np.nan, 1.0]})
    with pytest.raises(TypeError):
        hash(a)
    expanded = QueryBatch.of(["a", "b"]).expand([["a1", "a2"], ["b"]])
    c = Candidates(expanded, [0, 1, 2], [5, 6, 7], [1.0, 1.0, 1.0], "cosine")
    assert c.origin_index.tolist() == [0, 0, 1]
    assert "3 queries, 3 candidates, scale=cosine" in repr(c)


def test_fill_values():
    assert np.isnan(fill_value(np.float64)) and fill_value(np.int32) == 0
    assert fill_value(bool) is False and fill_value(object) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 50), st.sampled_from([0.0, 0.5]) | st.floats(-5, 5)), max_size=6),
                min_size=1, max_size=5),
       st.integers(0, 7))
def test_sort_cut_invariants(per_query, k):
    c = cands([f"q{i}" for i in range(len(per_query))], per_query)
    s = c.sorted_by_score()
    for i in range(c.n_queries):
        rows, scores = s.per_query(i)
        assert np.all(np.diff(scores) <= 0)
        # stable: equal scores keep the order they had (sorted() is stable)
        expected = [r for r, _ in sorted(per_query[i], key=lambda pair: -pair[1])]
        assert rows.tolist() == expected
    cut = s.cut(k)
    assert cut.counts().tolist() == [min(len(h), k) for h in per_query]
    assert np.all(cut.rank <= k) if len(cut) else True


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-1, 2), max_size=8), st.integers(1, 3))
def test_grouping_check_and_ranks_hold_for_one_query_as_for_many(query_index, n):
    # one query takes a shortcut (no np.diff / searchsorted): the same batches pass, the same ranks follow
    qi = np.asarray(query_index, dtype=np.int32)
    m = qi.size
    batch = QueryBatch.of([f"q{i}" for i in range(n)])
    valid = bool(np.all((qi >= 0) & (qi < n)) and np.all(np.diff(qi) >= 0))
    if not valid:
        with pytest.raises(ValueError, match="grouped by query"):
            Candidates(batch, qi, np.arange(m), np.zeros(m), Scale.NONE)
        return
    c = Candidates(batch, qi, np.arange(m), np.zeros(m), Scale.NONE)
    offsets = [sum(1 for q in query_index if q < i) for i in range(n + 1)]
    assert c.offsets.tolist() == offsets and c.offsets.dtype == np.int64
    assert c.rank.tolist() == [j - offsets[q] + 1 for j, q in enumerate(query_index)] and c.rank.dtype == np.int32
    assert not c.rank.flags.writeable and not c.offsets.flags.writeable


def test_an_inactive_batch_equals_the_checked_construction():
    batch = QueryBatch.of(["a", "b"])
    fast = Candidates.inactive(batch)
    checked = Candidates(batch, np.empty(0, np.int32), np.empty(0, np.int64), np.empty(0), Scale.NONE, active=False)
    assert fast == checked and not fast.active
    assert fast.offsets.tolist() == checked.offsets.tolist() == [0, 0, 0] and fast.rank.dtype == np.int32


def test_channel_columns_are_the_batchs_own_score_and_rank():
    batch = QueryBatch.of(["a", "b"])
    c = Candidates(batch, [0, 0, 1], [7, 3, 5], [0.9, 0.4, 0.8], "cosine", {"x.score": [1.0, 2.0, 3.0]})
    tagged = c.with_channel_columns("dense")
    assert tagged == c.with_provenance({"dense.score": c.score, "dense.rank": c.rank})
    assert tagged.provenance["dense.rank"].tolist() == [1, 2, 1]
    assert not tagged.provenance["dense.score"].flags.writeable
    assert set(c.provenance) == {"x.score"}  # the original is unchanged


@pytest.mark.parametrize("size", [0, 1, 7, 4096])  # larger batches own their columns
def test_the_columns_one_query_batches_share_cannot_be_made_writeable(size):
    # one-query batches share their offsets and ranks (and inactive ones their empty columns): a caller
    # turning a flag back must not be able to change them for every later batch
    batch = Candidates(QueryBatch.of(["q"]), np.zeros(size, np.int32), np.arange(size), np.zeros(size), "cosine")
    assert batch.rank.tolist() == list(range(1, size + 1)) and batch.offsets.tolist() == [0, size]
    inactive = Candidates.inactive(QueryBatch.of(["q"]))
    for column in (batch.rank, batch.offsets, inactive.row, inactive.offsets, inactive.rank):
        with pytest.raises(ValueError):
            column.flags.writeable = True


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 6), min_size=1, max_size=4), seed=st.integers(0, 99))
def test_already_ranked_columns_make_the_batch_the_checked_constructor_makes(sizes, seed):
    rng = np.random.default_rng(seed)
    queries = QueryBatch.of([f"q{i}" for i in range(len(sizes))])
    query_index = np.repeat(np.arange(len(sizes)), sizes)
    row, score = rng.integers(0, 50, query_index.size), -np.sort(-rng.random(query_index.size))
    trusted = Candidates.already_ranked(queries, query_index, row, score, Scale.COSINE)
    assert trusted == Candidates(queries, query_index, row, score, Scale.COSINE)
    assert trusted.rank.tolist() == Candidates(queries, query_index, row, score, Scale.COSINE).rank.tolist()
    with pytest.raises(ValueError, match="NaN"):
        Candidates.already_ranked(queries, [0], [1], [np.nan], Scale.COSINE)
