"""Dense exact cosine top-k: against plain numpy and a stable argsort, on both plans."""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from irflow.kernels import dense as dense_module
from irflow.kernels.dense import dense_topk, gather_fraction
from irflow.errors import EmbedderError, IrflowError


@contextlib.contextmanager
def plan(name: str) -> Iterator[None]:
    """Force the gather plan, the mask-after plan, or leave the measured thresholds."""
    saved = (dense_module.GATHER_FRACTION_SINGLE, dense_module.GATHER_FRACTION_SMALL_BATCH,
             dense_module.GATHER_FRACTION_BATCH)
    value = {"gather": 1.0, "after": 0.0, "default": None}[name]
    if value is not None:
        (dense_module.GATHER_FRACTION_SINGLE, dense_module.GATHER_FRACTION_SMALL_BATCH,
         dense_module.GATHER_FRACTION_BATCH) = (value, value, value)
    try:
        yield
    finally:
        (dense_module.GATHER_FRACTION_SINGLE, dense_module.GATHER_FRACTION_SMALL_BATCH,
         dense_module.GATHER_FRACTION_BATCH) = saved


def reference(matrix: np.ndarray, queries: np.ndarray, mask: np.ndarray | None, k: int) -> list[list[int]]:
    """Plain numpy: every product in float64, a stable argsort, masked rows dropped."""
    scores = queries.astype(np.float64) @ matrix.astype(np.float64).T
    keep = np.ones(matrix.shape[0], bool) if mask is None else mask
    out = []
    for row_scores in scores:
        rows = np.flatnonzero(keep)
        order = np.argsort(-row_scores[rows], kind="stable")
        out.append(rows[order][:k].tolist())
    return out


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 40),
    d=st.integers(1, 6),
    q=st.integers(1, 5),
    k=st.integers(0, 45),
    keep=st.sampled_from([None, 0.0, 0.05, 0.3, 0.7, 1.0]),
    how=st.sampled_from(["gather", "after", "default"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_matches_argsort_with_exact_ties(n: int, d: int, q: int, k: int, keep: float | None,
                                         how: str, seed: int) -> None:
    # small integers: every product is exact in float32, so ties are real ties
    rng = np.random.default_rng(seed)
    matrix = rng.integers(-2, 3, (n, d)).astype(np.float32)
    queries = rng.integers(-2, 3, (q, d)).astype(np.float32)
    mask = None if keep is None else rng.random(n) < keep
    with plan(how):
        top = dense_topk(matrix, queries, mask, k)
    want = reference(matrix, queries, mask, k)
    assert top.n_queries == q
    for i in range(q):
        rows, scores = top.per_query(i)
        assert rows.tolist() == want[i]
        assert scores.dtype == np.float64
        assert scores.tolist() == (queries[i].astype(np.float64) @ matrix[rows].astype(np.float64).T).tolist()


def normalized(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    x = rng.standard_normal(shape).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("keep", [None, 0.01, 0.1, 0.25, 0.6, 1.0])
@pytest.mark.parametrize("q", [1, 3, 20])
def test_random_normalized_vectors_against_numpy_cosine(keep: float | None, q: int) -> None:
    rng = np.random.default_rng(int(q * 100 + (keep or 0) * 1000))
    matrix, queries = normalized(rng, (3000, 32)), normalized(rng, (q, 32))
    mask = None if keep is None else rng.random(3000) < keep
    top = dense_topk(matrix, queries, mask, 25)
    cosine = queries.astype(np.float64) @ matrix.astype(np.float64).T
    allowed = np.ones(3000, bool) if mask is None else mask
    for i in range(q):
        rows, scores = top.per_query(i)
        assert len(rows) == min(25, int(allowed.sum()))
        assert allowed[rows].all()
        np.testing.assert_allclose(scores, cosine[i, rows], atol=1e-6)
        assert np.all(np.diff(scores) <= 0)
        # a valid top k: nothing left out scores above the last one kept (float32 rounding aside)
        others = np.flatnonzero(allowed)
        others = others[~np.isin(others, rows)]
        if others.size and rows.size:
            assert cosine[i, others].max() <= scores[-1] + 1e-6
        # and the order is numpy's, up to float32 near-ties
        want = reference(matrix, queries[i:i + 1], mask, 25)[0]
        assert np.allclose(cosine[i, want], scores, atol=1e-6)


def test_both_plans_agree_exactly_on_ties() -> None:
    rng = np.random.default_rng(5)
    base = rng.integers(-1, 2, (50, 4)).astype(np.float32)
    matrix = np.repeat(base, 3, axis=0)  # every row three times: ties everywhere
    queries = rng.integers(-1, 2, (6, 4)).astype(np.float32)
    mask = rng.random(150) < 0.5
    with plan("gather"):
        gathered = dense_topk(matrix, queries, mask, 20)
    with plan("after"):
        after = dense_topk(matrix, queries, mask, 20)
    assert gathered == after
    for i in range(6):
        rows, _ = gathered.per_query(i)
        assert rows.tolist() == reference(matrix, queries[i:i + 1], mask, 20)[0]


def test_batch_equals_single_queries() -> None:
    rng = np.random.default_rng(6)
    matrix, queries = normalized(rng, (2000, 16)), normalized(rng, (10, 16))
    for mask in (None, rng.random(2000) < 0.05, rng.random(2000) < 0.8):
        batch = dense_topk(matrix, queries, mask, 15)
        for i in range(10):
            single = dense_topk(matrix, queries[i], mask, 15)
            assert batch.per_query(i)[0].tolist() == single.per_query(0)[0].tolist()
            np.testing.assert_allclose(batch.per_query(i)[1], single.per_query(0)[1], atol=1e-6)


def test_queries_are_cast_to_the_matrix_dtype() -> None:
    rng = np.random.default_rng(7)
    matrix = normalized(rng, (500, 8))
    query = normalized(rng, (1, 8))
    as_float64 = dense_topk(matrix, query.astype(np.float64), None, 10)
    assert as_float64 == dense_topk(matrix, query, None, 10)
    assert dense_topk(matrix, query[0], None, 10) == dense_topk(matrix, query, None, 10)


def test_edges_and_errors() -> None:
    matrix = np.eye(4, dtype=np.float32)
    query = np.array([1, 0, 0, 0], np.float32)
    assert len(dense_topk(matrix, query, None, 0)) == 0
    assert dense_topk(matrix, query, np.zeros(4, bool), 3).counts().tolist() == [0]
    assert dense_topk(matrix, query, np.array([False, True, False, True]), 10).per_query(0)[0].tolist() == [1, 3]
    assert dense_topk(np.zeros((0, 4), np.float32), query, None, 5).counts().tolist() == [0]
    assert dense_topk(matrix, np.zeros((0, 4), np.float32), None, 5).n_queries == 0
    with pytest.raises(EmbedderError, match="dimension 3 but the corpus vectors have dimension 4"):
        dense_topk(matrix, np.ones(3, np.float32), None, 2)
    with pytest.raises(IrflowError, match="boolean array of shape"):
        dense_topk(matrix, query, np.ones(3, bool), 2)
    with pytest.raises(IrflowError, match="2-d"):
        dense_topk(np.ones(4, np.float32), query, None, 2)


def test_gather_thresholds_grow_with_the_batch() -> None:
    assert gather_fraction(1) <= gather_fraction(4) <= gather_fraction(64)
    assert 0 < gather_fraction(1) < 1


@contextlib.contextmanager
def tiling(rows: int, budget: int, wide: int = 1024, block: int = 16) -> Iterator[None]:
    """Tiles of ``rows`` rows, a candidate budget of ``budget`` entries (the floors rise often),
    wide rows of ``wide`` scores and blocks of ``block`` wide rows in the pass over a tile."""
    names = ("TILE_SCORES", "TILE_MIN_ROWS", "CANDIDATE_BUDGET", "WIDE_SCORES", "ROW_BLOCK")
    saved = [getattr(dense_module, name) for name in names]
    for name, value in zip(names, (rows, rows, budget, wide, block)):
        setattr(dense_module, name, value)
    try:
        yield
    finally:
        for name, value in zip(names, saved):
            setattr(dense_module, name, value)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), tile=st.sampled_from([1, 3, 16, 100, 1 << 20]),
       budget=st.sampled_from([1, 50, 1 << 12]), q=st.sampled_from([2, 9, 40]), k=st.sampled_from([1, 5, 30]),
       keep=st.sampled_from([None, 0.05, 0.5, 1.0]), ties=st.booleans(), plan_name=st.sampled_from(["gather", "after"]),
       wide=st.sampled_from([1, 10, 1024]), block=st.sampled_from([1, 3, 16]))
def test_tiled_batches_give_the_rows_and_bits_of_single_queries(seed: int, tile: int, budget: int, q: int, k: int,
                                                                 keep: float | None, ties: bool, plan_name: str,
                                                                 wide: int, block: int) -> None:
    # many tiles (k larger than a tile too), floors raised mid-stream, queries with and without hits in
    # a tile, tiles read by blocks (of one or several matrix rows side by side) and rows short of a
    # block: every query gets the rows and score bits it gets alone with the default tiles, which are
    # the exact top k (rows by score desc, then row asc)
    rng = np.random.default_rng(seed)
    n, d = 600, 24
    if ties:  # few distinct rows: exact ties straddle every cut
        matrix = rng.integers(-1, 2, (8, d)).astype(np.float32)[rng.integers(0, 8, n)]
    else:
        matrix = rng.standard_normal((n, d)).astype(np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    queries = rng.standard_normal((q, d)).astype(np.float32)
    queries[::3] = matrix[rng.integers(0, n, len(queries[::3]))]
    mask = None if keep is None else rng.random(n) < keep
    alone = [dense_topk(matrix, queries[i], mask, k).per_query(0) for i in range(q)]
    with plan(plan_name), tiling(tile, budget, wide, block):
        top = dense_topk(matrix, queries, mask, k)
    for i in range(q):
        rows, scores = top.per_query(i)
        assert rows.tolist() == alone[i][0].tolist()
        assert scores.tobytes() == alone[i][1].tobytes()
    assert [rows.tolist() for rows, _ in alone] == reference(matrix, queries, mask, k)


def test_a_batch_never_holds_the_whole_score_matrix() -> None:
    # 250k rows x 256 queries would be a 256 MB float32 score matrix; the tiles hold 4 MB at a time
    import tracemalloc

    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((250_000, 8)).astype(np.float32)
    matrix.flags.writeable = False
    queries = rng.standard_normal((256, 8)).astype(np.float32)
    dense_topk(matrix, queries, None, 10)  # the norm bound, cached
    tracemalloc.start()
    try:
        top = dense_topk(matrix, queries, None, 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"peak {peak / 2**20:.0f} MB"
    scores = queries.astype(np.float64) @ matrix.astype(np.float64).T
    assert top.per_query(7)[0].tolist() == np.argsort(-scores[7], kind="stable")[:10].tolist()


def test_a_gathered_tile_shorter_than_k_but_over_4096_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    # one query, rows gathered in tiles of 5,000 (GATHER_BYTES / 16-byte rows) and k = 5,500: a tile of
    # fewer rows than k gives no k-th lower bound (it crashed on "zero-size array to reduction")
    monkeypatch.setattr(dense_module, "GATHER_BYTES", 80_000)
    rng = np.random.default_rng(5)
    matrix = rng.standard_normal((40_000, 4)).astype(np.float32)
    mask = np.zeros(40_000, bool)
    mask[rng.choice(40_000, 7_000, replace=False)] = True
    query = rng.standard_normal(4).astype(np.float32)
    top = dense_topk(matrix, query, mask, 5_500)
    assert top.row.tolist() == reference(matrix, query[None, :], mask, 5_500)[0]


def test_gathered_rows_of_the_wrong_shape_are_refused() -> None:
    matrix = np.eye(3, dtype=np.float32)
    mask = np.array([True, False, True])
    with pytest.raises(IrflowError, match=r"gathered must be \(rows, matrix\[rows\]\)"):
        dense_topk(matrix, matrix[0], mask, 2, gathered=(np.array([0, 2]), matrix[[0]]))
    ignored = dense_topk(matrix, matrix[0], None, 2, gathered=(np.array([0, 2]), matrix[[0]]))  # no mask: unused
    assert ignored.row.tolist() == [0, 1]
