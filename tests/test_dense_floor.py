"""Dense top-k over a corpus's segments: each segment pruned by the k-th score of those before it, answers unchanged.

A corpus of several segments ranks them in row order; a segment's rows
lose ties to the rows before them, so once the segments before have k
rows scoring at least ``least``, a row scoring at or below it cannot enter
the top k.  ``dense_topk(..., least=)`` lets the ranking step drop such
rows (the int8 scan starts its floor there); the rows above it must come
back exactly as without it.  And a corpus large enough for the int8 scan
scans its small segments with it too (the corpus's size decides).
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import irflow
from irflow.errors import IrflowError
from irflow.kernels import dense_kernel
from irflow.kernels.dense import dense_topk
from irflow.store import segment as segment_module
from test_dense_index import brute_force, compiled_index, make_matrix

pytest.importorskip("numba")  # the compiled scan (BLAS's single-query path is checked too)


def _merged(first: list[tuple], second: list[tuple], offset: int, k: int) -> list[tuple]:
    """Two parts' (rows, score bytes) per query merged by (score desc, row asc): the corpus's order."""
    out = []
    for (rows_a, bytes_a), (rows_b, bytes_b) in zip(first, second):
        pairs = list(zip(np.frombuffer(bytes_a).tolist(), rows_a)) + \
            list(zip(np.frombuffer(bytes_b).tolist(), (r + offset for r in rows_b)))
        pairs.sort(key=lambda p: (-p[0], p[1]))
        pairs = pairs[:k]
        out.append((tuple(r for _, r in pairs), np.array([s for s, _ in pairs], dtype=np.float64).tobytes()))
    return out


def _tuples(top: irflow.TopK) -> list[tuple]:
    return [(tuple(top.per_query(j)[0].tolist()), top.per_query(j)[1].tobytes()) for j in range(top.n_queries)]


@settings(max_examples=80, deadline=None)
@given(
    kind=st.sampled_from(["gaussian", "clustered", "duplicates", "near-ties", "code-steps", "integers"]),
    n=st.integers(2, 240),
    d=st.sampled_from([2, 16, 48]),
    q=st.integers(1, 5),
    k=st.integers(1, 40),
    cut=st.floats(0.05, 0.95),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_part_ranked_from_the_floor_of_the_parts_before_merges_into_the_whole_answer(
        kind: str, n: int, d: int, q: int, k: int, cut: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    matrix = make_matrix(kind, n, d, rng)
    queries = np.concatenate([rng.standard_normal((q, d)).astype(np.float32), matrix[:1]])
    mask = rng.random(n) < 0.8
    s = max(1, min(n - 1, int(n * cut)))
    first = brute_force(matrix[:s], queries, mask[:s], k)
    least = np.array([np.frombuffer(b)[k - 1] if len(r) >= k else -np.inf for r, b in first])
    whole = brute_force(matrix, queries, mask, k)
    rest = np.ascontiguousarray(matrix[s:])
    index = compiled_index(rest)
    for kernel, idx in (("numba", index), ("numpy", None)):
        with dense_kernel.use_kernel(kernel):
            for one in range(queries.shape[0]):  # one query at a time (BLAS's single-query path) and all at once
                got = _tuples(dense_topk(rest, queries[one:one + 1], mask[s:], k, index=idx, least=least[one:one + 1]))
                assert _merged(first[one:one + 1], got, s, k) == whole[one:one + 1]
            got = _tuples(dense_topk(rest, queries, mask[s:], k, index=idx, least=least))
            assert _merged(first, got, s, k) == whole
            # every row of the part's own top k that scores above the floor comes back, same bits
            alone = _tuples(dense_topk(rest, queries, mask[s:], k, index=idx))
            for (rows_a, bytes_a), (rows_f, bytes_f), floor in zip(alone, got, least):
                above = [(r, x) for r, x in zip(rows_a, np.frombuffer(bytes_a).tolist()) if x > floor]
                assert list(zip(rows_f, np.frombuffer(bytes_f).tolist()))[:len(above)] == above


def test_the_scan_keeps_no_row_below_the_floor_and_every_row_without_one() -> None:
    rng = np.random.default_rng(3)
    matrix = make_matrix("gaussian", 2000, 32, rng)
    queries = rng.standard_normal((3, 32)).astype(np.float32)
    index = compiled_index(matrix)
    with dense_kernel.use_kernel("numba"):
        plain = dense_kernel.scan_candidates(index, queries, None, 5)
        same = dense_kernel.scan_candidates(index, queries, None, 5, least=np.full(3, -np.inf))
        none = dense_kernel.scan_candidates(index, queries, None, 5, least=np.full(3, 1e6))  # above any score
    assert plain is not None and same is not None and none is not None
    assert [a.tolist() for a in plain] == [a.tolist() for a in same]
    assert none[0].size == 0 and none[1].size == 0
    with pytest.raises(IrflowError, match="one score per query"):
        dense_topk(matrix, queries, None, 5, least=np.zeros(2))


def _records(matrix: np.ndarray, lo: int, hi: int) -> list[dict]:
    return [{"artifact_id": f"a{i}", "surface_kind": "doc", "text": f"w{i % 5}", "vector": matrix[i]}
            for i in range(lo, hi)]


def test_a_corpus_of_small_segments_scans_them_with_codes_and_each_from_the_floor_before(monkeypatch) -> None:
    """The corpus's size decides the scan (not each segment's); segments after the first get a floor."""
    rng = np.random.default_rng(5)
    matrix = make_matrix("gaussian", 240, 16, rng)
    monkeypatch.setattr(dense_kernel.SWITCH, "min_rows", 200)  # the corpus (240 rows) is "large", each segment not
    corpus = irflow.build(_records(matrix, 0, 80), embedder=None)
    corpus.merge_policy = irflow.MergePolicy.never()
    corpus.add(_records(matrix, 80, 160))
    corpus.add(_records(matrix, 160, 240))
    corpus.delete([r.id for r in list(corpus)[::7]])
    by_id = {f"a{i}": matrix[i] for i in range(240)}
    fresh = irflow.build([attrs.evolve(r, vector=by_id[r.artifact_id]) for r in corpus], embedder=None)
    floors = []
    real = segment_module._dense.dense_topk

    def spy(*args, **kwargs):
        floors.append(None if kwargs.get("least") is None else kwargs["least"].copy())
        return real(*args, **kwargs)

    monkeypatch.setattr(segment_module._dense, "dense_topk", spy)
    # matrix[1] is a zero row: a batch with a zero query ranks segment by segment (not in one carried
    # scan, tests/test_dense_parts.py), each segment from the floor of those before
    queries = np.concatenate([rng.standard_normal((3, 16)), matrix[:2]]).astype(np.float32)
    assert not queries[4].any()
    with dense_kernel.use_kernel("auto"):
        got = corpus.dense_topk(queries, None, 10)
        expected = fresh.dense_topk(queries, None, 10)
        assert all(part.segment.index.get(part.segment.vectors, corpus.n_rows) is not None
                   for part in corpus._state.parts)
    ids = [corpus.record_ids_of(got.per_query(j)[0]).tolist() for j in range(5)]
    assert ids == [fresh.record_ids_of(expected.per_query(j)[0]).tolist() for j in range(5)]
    assert [got.per_query(j)[1].tobytes() for j in range(5)] == [expected.per_query(j)[1].tobytes() for j in range(5)]
    assert len(floors) == 4  # three segments, then the fresh build's one
    assert np.all(floors[0] == -np.inf) and np.all(np.isfinite(floors[1])) and np.all(floors[2] >= floors[1])
