"""Exact top-k selection (topk_rows, topk_keyed, topk_matrix) and the TopK batch."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from irflow.kernels.topk import TopK, topk_keyed, topk_matrix, topk_rows


def reference(scores: np.ndarray, k: int, keys: np.ndarray | None = None) -> np.ndarray:
    """Best first, ties by smaller key (index when None), NaN counted as -inf."""
    clean = np.where(np.isnan(scores), -np.inf, scores)
    keys = np.arange(scores.size) if keys is None else keys
    return np.lexsort((keys, -clean))[: max(k, 0)]


# few distinct values, so ties are the rule, plus the infinities and NaN
VALUES = st.sampled_from([0.0, 1.0, 2.5, -1.0, 7.0, np.inf, -np.inf, np.nan])


@settings(max_examples=300, deadline=None)
@given(scores=hnp.arrays(np.float64, st.integers(0, 80), elements=VALUES), k=st.integers(0, 90))
def test_topk_rows_matches_lexsort(scores: np.ndarray, k: int) -> None:
    assert topk_rows(scores, k).tolist() == reference(scores, k).tolist()


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(4096, 12000),
    k=st.integers(1, 300),
    distinct=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_topk_rows_large_vectors_with_ties(n: int, k: int, distinct: int, seed: int) -> None:
    # large enough for the block-maxima shortcut, few values so ties straddle the cut
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, distinct, n).astype(np.float64)
    scores[rng.random(n) < 0.3] = -np.inf
    assert topk_rows(scores, k).tolist() == reference(scores, k).tolist()


@pytest.mark.parametrize("case", ["mostly_zero", "mostly_max", "all_equal", "mostly_neg_inf", "random", "nan"])
def test_topk_rows_degenerate_large(case: str) -> None:
    rng = np.random.default_rng(1)
    n = 50_000
    scores = {
        "mostly_zero": np.zeros(n),
        "mostly_max": np.ones(n),
        "all_equal": np.full(n, 3.0),
        "mostly_neg_inf": np.full(n, -np.inf),
        "random": rng.random(n),
        "nan": rng.random(n),
    }[case]
    picks = rng.integers(0, n, 200)
    if case in ("mostly_zero", "mostly_neg_inf"):
        scores[picks] = rng.random(200)
    elif case == "mostly_max":
        scores[picks] = rng.random(200)
    elif case == "nan":
        scores[picks] = np.nan
    for k in (1, 10, 250, n, n + 5):
        assert topk_rows(scores, k).tolist() == reference(scores, k).tolist()


def test_topk_rows_edges() -> None:
    assert topk_rows(np.array([]), 5).tolist() == []
    assert topk_rows(np.array([1.0, 2.0]), 0).tolist() == []
    assert topk_rows(np.array([1.0, 2.0]), -3).tolist() == []
    assert topk_rows(np.array([1.0, 2.0]), 10).tolist() == [1, 0]
    assert topk_rows(np.array([-np.inf, 0.0, -np.inf]), 3).tolist() == [1, 0, 2]
    assert topk_rows(np.array([3, 1, 3], dtype=np.int32), 2).tolist() == [0, 2]
    assert topk_rows(np.array([1.0, 2.0]), 1).dtype == np.int64
    with pytest.raises(ValueError, match="1-d"):
        topk_rows(np.zeros((2, 2)), 1)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), n=st.integers(0, 60), k=st.integers(0, 70))
def test_topk_keyed_breaks_ties_by_key(data: st.DataObject, n: int, k: int) -> None:
    scores = data.draw(hnp.arrays(np.float64, n, elements=VALUES))
    keys = np.array(data.draw(st.permutations(range(1000, 1000 + n)))) if n else np.empty(0, np.int64)
    assert topk_keyed(scores, keys, k).tolist() == reference(scores, k, keys).tolist()


@settings(max_examples=100, deadline=None)
@given(
    q=st.integers(1, 4),
    n=st.sampled_from([1, 7, 100, 5000]),
    k=st.integers(0, 40),
    distinct=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
)
def test_topk_matrix_matches_rows(q: int, n: int, k: int, distinct: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, distinct, (q, n)).astype(np.float32)
    scores[rng.random((q, n)) < 0.2] = -np.inf
    query, column, values = topk_matrix(scores, k)
    assert np.all(np.diff(query) >= 0)
    for i in range(q):
        expected = reference(scores[i].astype(np.float64), k)
        assert column[query == i].tolist() == expected.tolist()
        assert values[query == i].tolist() == scores[i][expected].tolist()


def test_topk_matrix_edges() -> None:
    q, c, v = topk_matrix(np.zeros((0, 5)), 3)
    assert q.size == c.size == v.size == 0
    q, c, v = topk_matrix(np.zeros((2, 3)), 0)
    assert q.size == 0
    with pytest.raises(ValueError, match="2-d"):
        topk_matrix(np.zeros(3), 1)


# -- TopK ---------------------------------------------------------------------------------


def test_topk_per_query_views_and_offsets() -> None:
    top = TopK(query_index=[0, 0, 2], row=[5, 1, 9], score=[0.9, 0.4, 0.1], n_queries=3)
    assert top.offsets.tolist() == [0, 2, 2, 3]
    assert top.counts().tolist() == [2, 0, 1]
    rows, scores = top.per_query(0)
    assert rows.tolist() == [5, 1] and scores.tolist() == [0.9, 0.4]
    assert np.shares_memory(rows, top.row) and np.shares_memory(scores, top.score)
    assert top.per_query(1)[0].size == 0
    assert top.query_index.dtype == np.int32 and top.row.dtype == np.int64
    assert top.score.dtype == np.float64
    assert len(top) == 3
    with pytest.raises(IndexError):
        top.per_query(3)


def test_topk_empty_and_from_parts() -> None:
    empty = TopK.empty(4)
    assert empty.n_queries == 4 and len(empty) == 0
    assert all(empty.per_query(i)[0].size == 0 for i in range(4))
    built = TopK.from_parts([np.array([3, 1]), np.array([], dtype=np.int64), np.array([7])],
                            [np.array([2.0, 1.0]), np.array([]), np.array([0.5])])
    assert built == TopK(query_index=[0, 0, 2], row=[3, 1, 7], score=[2.0, 1.0, 0.5], n_queries=3)
    assert built.offsets.tolist() == [0, 2, 2, 3]
    assert TopK.from_parts([], []) == TopK.empty(0)
    with pytest.raises(ValueError):
        TopK.from_parts([np.array([1])], [np.array([1.0, 2.0])])


def test_topk_validation() -> None:
    with pytest.raises(ValueError, match="grouped"):
        TopK(query_index=[1, 0], row=[1, 2], score=[1.0, 2.0], n_queries=2)
    with pytest.raises(ValueError, match="grouped"):
        TopK(query_index=[0, 2], row=[1, 2], score=[1.0, 2.0], n_queries=2)
    with pytest.raises(ValueError, match="one entry per hit"):
        TopK(query_index=[0], row=[1, 2], score=[1.0], n_queries=1)
    with pytest.raises(ValueError, match="n_queries"):
        TopK(query_index=[], row=[], score=[], n_queries=-1)


def test_topk_is_frozen() -> None:
    top = TopK.empty(1)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        top.n_queries = 2  # type: ignore[misc]
