"""Dense top-k over a corpus's segments in one int8 scan carried from segment to segment: the same bits.

``irflow.kernels.dense_parts`` encodes the queries once, scans each part's
codes with one heap and floor per query handed on, cuts every part's
candidates by the final floor and ranks them once.  Whatever the vectors
(ties, near-ties, clusters), the cuts, the masks, k and the batch, the
answer must be a brute-force exact ranking of the stacked rows — and a
segmented corpus with deletions must answer as a fresh build of its live
records, rows and score bits, through the carried scan (not part by part).
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import irflow
from irflow.kernels import dense as dense_module
from irflow.kernels import dense_kernel
from irflow.kernels.dense_parts import DensePart, parts_topk
from irflow.store import segment as segment_module
from irflow.store import segments as segments_module
from test_dense_index import as_tuples, brute_force, compiled_index, make_matrix

pytest.importorskip("numba")  # the compiled scan; without it every corpus ranks part by part (BLAS)

KINDS = ["gaussian", "clustered", "duplicates", "near-ties", "code-steps", "integers"]


def _parts(matrix: np.ndarray, mask: np.ndarray | None, cuts: list[int]) -> list[DensePart]:
    bounds = [0, *sorted(set(cuts)), matrix.shape[0]]
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        rows = np.ascontiguousarray(matrix[lo:hi])
        out.append(DensePart(rows, compiled_index(rows), None if mask is None else mask[lo:hi], lo))
    return out


@settings(max_examples=120, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    n=st.integers(1, 300),
    d=st.sampled_from([2, 16, 48]),
    q=st.integers(1, 9),
    k=st.integers(1, 320),
    cuts=st.lists(st.integers(0, 300), max_size=6),
    keep=st.sampled_from([None, 0.75, 0.95]),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_carried_scan_ranks_the_stacked_rows_exactly(kind: str, n: int, d: int, q: int, k: int,
                                                          cuts: list[int], keep: float | None, seed: int) -> None:
    rng = np.random.default_rng(seed)
    matrix = make_matrix(kind, n, d, rng)
    queries = rng.standard_normal((q, d)).astype(np.float32)
    queries[0] = matrix[rng.integers(0, n)]  # a query equal to a row: exact ties (or a zero query)
    mask = None if keep is None else rng.random(n) < keep
    parts = _parts(matrix, mask, [c for c in cuts if 0 < c < n])
    with dense_kernel.use_kernel("numba"):
        top = parts_topk(parts, queries, k)
    selective = mask is not None and any(
        0 < np.count_nonzero(p.mask) <= dense_module.gather_fraction(q) * p.matrix.shape[0] < p.matrix.shape[0]
        for p in parts)
    if not queries.any(axis=1).all() or selective:
        assert top is None  # ranked part by part by the caller
        return
    assert top is not None
    assert as_tuples(top) == brute_force(matrix, queries, mask, k)
    for j in range(q):  # a query alone: the same bits as in the batch
        with dense_kernel.use_kernel("numba"):
            alone = parts_topk(parts, queries[j:j + 1], k)
        assert alone is not None and as_tuples(alone) == as_tuples(top)[j:j + 1]


def test_it_does_not_apply_without_codes_the_compiled_scan_or_within_a_large_batch() -> None:
    rng = np.random.default_rng(1)
    matrix = make_matrix("gaussian", 200, 16, rng)
    queries = rng.standard_normal((3, 16)).astype(np.float32)
    parts = _parts(matrix, None, [90])
    with dense_kernel.use_kernel("numba"):
        assert parts_topk(parts, queries, 5) is not None
        assert parts_topk([parts[0], attrs.evolve(parts[1], index=None)], queries, 5) is None
        limit = dense_module.SCAN_MAX_QUERIES_GROUPED if dense_kernel.grouped_scan() else dense_module.SCAN_MAX_QUERIES
        big = rng.standard_normal((limit + 1, 16)).astype(np.float32)
        assert parts_topk(parts, big, 5) is None
        assert parts_topk(parts, queries, 0) is not None and parts_topk(parts, queries, 0).row.size == 0
    with dense_kernel.use_kernel("numpy"):
        assert parts_topk(parts, queries, 5) is None


def _records(matrix: np.ndarray, lo: int, hi: int) -> list[dict]:
    return [{"artifact_id": f"a{i}", "surface_kind": "doc" if i % 3 else "title", "text": f"w{i % 5}",
             "vector": matrix[i], "metadata": {"group": i % 4}} for i in range(lo, hi)]


def _segmented(matrix: np.ndarray, sizes: list[int], deleted: float, rng: np.random.Generator) -> irflow.Corpus:
    """A build, then one ``add`` per further size (no merges), then a random share of the records deleted."""
    bounds = np.cumsum([0, *sizes]).tolist()
    corpus = irflow.build(_records(matrix, bounds[0], bounds[1]), embedder=None)
    corpus.merge_policy = irflow.MergePolicy.never()
    for lo, hi in zip(bounds[1:], bounds[2:]):
        corpus.add(_records(matrix, lo, hi))
    ids = [r.id for r in corpus]
    gone = [i for i in ids if rng.random() < deleted]
    if gone:
        corpus.delete(gone)
    return corpus


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(KINDS),
    sizes=st.lists(st.integers(1, 120), min_size=2, max_size=5),
    deleted=st.sampled_from([0.0, 0.1, 0.3]),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_segmented_corpus_with_deletions_answers_as_a_fresh_build_through_the_carried_scan(
        kind: str, sizes: list[int], deleted: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    matrix = make_matrix(kind, sum(sizes), 16, rng)
    matrix[np.abs(matrix).sum(axis=1) == 0, 0] = 1.0  # no zero rows: every query below is nonzero
    corpus = _segmented(matrix, sizes, deleted, rng)
    live = list(corpus)
    if not live:
        return
    by_id = {f"a{i}": matrix[i] for i in range(matrix.shape[0])}
    fresh = irflow.build([attrs.evolve(r, vector=by_id[r.artifact_id]) for r in live], embedder=None)
    queries = np.concatenate([rng.standard_normal((4, 16)).astype(np.float32),
                              matrix[rng.integers(0, matrix.shape[0], 3)]])
    filters = [None, {"group": {"$in": [0, 1, 2]}}, {"group": 1}]
    with dense_kernel.use_kernel("numba"):
        for flt, surfaces in [(f, None) for f in filters] + [(None, ["doc"])]:
            mask, expected_mask = (None, None) if flt is None and surfaces is None else \
                (corpus.candidate_mask(flt, surfaces), fresh.candidate_mask(flt, surfaces))
            for k in (1, 7, 40):
                for batch in (queries[:1], queries[1:3], queries):
                    got, expected = corpus.dense_topk(batch, mask, k), fresh.dense_topk(batch, expected_mask, k)
                    assert [corpus.record_ids_of(got.per_query(j)[0]).tolist() for j in range(len(batch))] == \
                        [fresh.record_ids_of(expected.per_query(j)[0]).tolist() for j in range(len(batch))]
                    assert [got.per_query(j)[1].tobytes() for j in range(len(batch))] == \
                        [expected.per_query(j)[1].tobytes() for j in range(len(batch))]


def test_a_segmented_corpus_encodes_the_queries_once_and_scans_each_segment_with_the_floor_carried(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No segment is ranked alone; the heap's floor reaches the later segments (their candidates are few)."""
    rng = np.random.default_rng(7)
    matrix = make_matrix("gaussian", 3000, 16, rng)
    matrix[np.abs(matrix).sum(axis=1) == 0, 0] = 1.0
    corpus = _segmented(matrix, [1000, 1000, 1000], 0.1, rng)
    alone, scans = [], []
    real_topk, module = segment_module._dense.dense_topk, dense_kernel.SWITCH.load(required=True)
    real_scan = module.scan_carry
    monkeypatch.setattr(segment_module._dense, "dense_topk", lambda *a, **kw: alone.append(1) or real_topk(*a, **kw))

    def scan(*args):
        out = real_scan(*args)
        scans.append(out[0].size)
        return out

    monkeypatch.setattr(module, "scan_carry", scan)
    queries = rng.standard_normal((2, 16)).astype(np.float32)
    with dense_kernel.use_kernel("numba"):
        got = corpus.dense_topk(queries, None, 5)
    assert alone == [] and len(scans) == 3
    assert scans[2] < 2 * 5 * 2  # the last segment starts from the floor of 2,000 rows: few candidates
    monkeypatch.setattr(segments_module, "parts_topk", lambda *a: None)  # the part-by-part plan: the same bits
    with dense_kernel.use_kernel("numba"):
        assert as_tuples(corpus.dense_topk(queries, None, 5)) == as_tuples(got)
    assert len(alone) == 3
