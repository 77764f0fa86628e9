"""The int8 codes and the compiled scan: the same answers to the bit as the BLAS plan, and a bound that holds.

The scan only chooses candidates; the answer is their exact rescoring.  So
the property is: whatever the matrix (near-ties, duplicates, zero rows,
clusters, vectors with one large component), the mask and k (k beyond the
rows), ``dense_topk`` with the index returns the same rows and score bits
as without it, and as a brute-force exact ranking of every row.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import irflow
from irflow.errors import IrflowError
from irflow.kernels import dense as dense_module
from irflow.kernels import dense_index as dense_index_module
from irflow.kernels import dense_kernel
from irflow.kernels.dense import dense_topk
from irflow.kernels.dense_exact import exact_scores
from irflow.kernels.dense_index import SLACK, DenseIndex, encode_queries

numba = pytest.importorskip("numba")  # the compiled scan; without it BLAS ranks (tests/test_dense.py)
dense_scan = pytest.importorskip("irflow.kernels.dense_scan")


def compiled_index(matrix: np.ndarray) -> DenseIndex:
    index = DenseIndex.build(matrix, dense_kernel.SWITCH.load(required=True).encode)
    assert index is not None
    return index


def brute_force(matrix: np.ndarray, queries: np.ndarray, mask: np.ndarray | None, k: int) -> list[tuple]:
    """Every row scored exactly, sorted by (score desc, row asc): independent of both ranking plans."""
    n = matrix.shape[0]
    rows = np.arange(n) if mask is None else np.flatnonzero(mask)
    out = []
    for j in range(queries.shape[0]):
        if rows.size == 0:
            out.append(((), b""))
            continue
        scores = exact_scores(matrix, queries[j:j + 1], np.zeros(rows.size, np.intp), rows)
        order = np.lexsort((rows, -scores))[:k]
        out.append((tuple(rows[order].tolist()), scores[order].tobytes()))
    return out


def as_tuples(top: irflow.TopK) -> list[tuple]:
    out = []
    for j in range(top.n_queries):
        rows, scores = top.per_query(j)
        out.append((tuple(rows.tolist()), scores.tobytes()))
    return out


def make_matrix(kind: str, n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    m = rng.standard_normal((n, d))
    if kind == "clustered":  # a few centres, tiny spread: many rows within the window of the k-th best
        m = m[rng.integers(0, min(3, n), n)] + 1e-3 * rng.standard_normal((n, d))
    elif kind == "duplicates":  # exact ties
        m = m[rng.integers(0, max(1, n // 4), n)]
    elif kind == "near-ties":  # rows one float32 step apart
        base = m[rng.integers(0, min(2, n), n)].astype(np.float32)
        steps = rng.integers(-2, 3, (n, d)).astype(np.float32)
        m = np.nextafter(base, base + steps)
        return np.ascontiguousarray(m, dtype=np.float32)
    elif kind == "code-steps":  # one row moved by about a code step: estimates reorder near the k-th best
        base = m[0] / np.linalg.norm(m[0])
        m = base + rng.uniform(-1, 1, (n, d)) * np.abs(base).max() / 127
    elif kind == "spiky":  # one huge component: a coarse scale for the rest of the row
        m[:, 0] *= 1e4
    elif kind == "integers":  # small integers: exact products, real ties
        m = rng.integers(-2, 3, (n, d)).astype(np.float64)
    m[rng.random(n) < 0.1] = 0.0  # zero rows
    if kind != "integers":
        m /= np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-30)
    return np.ascontiguousarray(m, dtype=np.float32)


@settings(max_examples=120, deadline=None)
@given(
    kind=st.sampled_from(["gaussian", "clustered", "duplicates", "near-ties", "code-steps", "spiky", "integers"]),
    n=st.integers(1, 300),
    d=st.sampled_from([1, 2, 5, 16, 64]),
    q=st.integers(1, 9),
    k=st.integers(1, 320),
    keep=st.sampled_from([None, 0.0, 0.1, 0.5, 1.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_scan_gives_the_bits_of_the_blas_plan_and_of_brute_force(kind: str, n: int, d: int, q: int, k: int,
                                                                      keep: float | None, seed: int) -> None:
    rng = np.random.default_rng(seed)
    matrix = make_matrix(kind, n, d, rng)
    queries = rng.standard_normal((q, d)).astype(np.float32)
    queries[0] = matrix[rng.integers(0, n)]  # a query equal to a row (maybe a zero row: a zero query)
    if kind == "code-steps" and q > 2:
        queries[2] = matrix[0] + rng.uniform(-1, 1, d).astype(np.float32) * np.abs(matrix[0]).max() / 127
    if q > 1:
        queries[1] = -queries[0]
    mask = None if keep is None else rng.random(n) < keep
    with dense_kernel.use_kernel("numba"):
        got = dense_topk(matrix, queries, mask, k, index=compiled_index(matrix))
    with dense_kernel.use_kernel("numpy"):
        blas = dense_topk(matrix, queries, mask, k, index=compiled_index(matrix))  # numpy: the index is ignored
    assert as_tuples(got) == as_tuples(blas)
    assert as_tuples(got) == brute_force(matrix, queries, mask, min(k, n if mask is None else int(mask.sum())))


def test_the_window_bounds_every_score() -> None:
    """|exact score - estimate| <= window for every (row, query): the bound the filter rests on."""
    rng = np.random.default_rng(7)
    for kind in ("gaussian", "clustered", "spiky", "integers"):
        matrix = make_matrix(kind, 500, 48, rng)
        queries = np.concatenate([rng.standard_normal((8, 48)), matrix[:8] * 3]).astype(np.float32)
        index = compiled_index(matrix)
        codes = encode_queries(queries)
        dots = index.codes.astype(np.int64) @ codes.codes.T.astype(np.int64)  # exact integers
        est = dots * (index.scale[:, None] * codes.scale[None, :])
        window = (index.error[:, None] * codes.coded_norm[None, :]
                  + index.norm[:, None] * (codes.error + SLACK * codes.norm)[None, :])
        rows, which = np.divmod(np.arange(500 * 16), 16)
        exact = exact_scores(matrix, queries, which, rows).reshape(500, 16)
        gap = np.abs(exact - est)
        assert (gap <= window).all(), kind
        # and the window is not vacuous: the codes' rounding, well under 1 % of |v| |q| at d = 48
        live = np.ix_(index.norm > 0, codes.norm > 0)
        relative = window[live] / np.outer(index.norm, codes.norm)[live]
        assert np.median(relative) < 0.01, kind


def test_numpy_and_compiled_encoders_agree() -> None:
    rng = np.random.default_rng(3)
    matrix = make_matrix("spiky", 1000, 33, rng)
    numpy_index = DenseIndex.build(matrix)
    assert numpy_index is not None
    compiled = compiled_index(matrix)
    assert np.array_equal(numpy_index.codes, compiled.codes)
    assert np.array_equal(numpy_index.scale, compiled.scale)
    np.testing.assert_allclose(numpy_index.error, compiled.error, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(numpy_index.norm, compiled.norm, rtol=1e-12)
    assert numpy_index.codes.dtype == np.int8 and np.abs(numpy_index.codes).max() <= 127


def test_equal_rows_everywhere_keep_the_first_k_by_row() -> None:
    """Every row ties: the candidate list outgrows its first size and compacts; the answer is rows 0..k-1."""
    row = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    matrix = np.tile(row / np.linalg.norm(row), (20_000, 1))
    with dense_kernel.use_kernel("numba"):
        top = dense_topk(matrix, row[None, :], None, 7, index=compiled_index(matrix))
    assert top.per_query(0)[0].tolist() == list(range(7))
    assert len(set(top.per_query(0)[1].tolist())) == 1


def test_one_strong_row_in_a_block_of_weak_ones_is_found() -> None:
    """The block bound must not hide a block's one good row (row 130: the third block's third row)."""
    rng = np.random.default_rng(5)
    matrix = make_matrix("gaussian", 5000, 32, rng)
    query = rng.standard_normal(32).astype(np.float32)
    matrix[130] = query / np.linalg.norm(query)
    with dense_kernel.use_kernel("numba"):
        top = dense_topk(matrix, query, None, 1, index=compiled_index(matrix))
    assert top.per_query(0)[0].tolist() == [130]


def test_no_index_for_what_cannot_be_bounded() -> None:
    bad = np.ones((4, 3), np.float32)
    bad[2, 1] = np.nan
    assert DenseIndex.build(bad) is None
    assert DenseIndex.build(bad, dense_kernel.SWITCH.load(required=True).encode) is None
    assert DenseIndex.build(np.ones((3, 2), np.int64)) is None
    assert DenseIndex.build(np.ones((3, 0), np.float32)) is None


def test_an_index_of_another_shape_is_refused() -> None:
    matrix = np.eye(4, dtype=np.float32)
    with pytest.raises(IrflowError, match="shape"):
        dense_topk(matrix, matrix[:1], None, 2, index=compiled_index(np.eye(5, dtype=np.float32)))


def test_the_kernel_switch() -> None:
    with dense_kernel.use_kernel("numpy"):
        assert dense_kernel.kernel_name() == "numpy"
        assert dense_kernel.build_index(np.eye(3, dtype=np.float32)) is None
    with dense_kernel.use_kernel("numba"):
        assert dense_kernel.kernel_name(10) == "numba"
    with dense_kernel.use_kernel("auto"):
        assert dense_kernel.kernel_name(dense_kernel.AUTO_MIN_ROWS - 1) == "numpy"
        assert dense_kernel.kernel_name(dense_kernel.AUTO_MIN_ROWS) == "numba"
    with pytest.raises(IrflowError, match="one of auto, numba, numpy"):
        with dense_kernel.use_kernel("fast"):
            pass


def _index(corpus: irflow.Corpus) -> dense_kernel.IndexSlot:
    """The slot of a one-segment corpus's int8 codes (kept by its segment, shared by every state of it)."""
    (part,) = corpus._state.parts
    return part.segment.index


def test_a_corpus_builds_its_codes_once_and_answers_as_without_them() -> None:
    rng = np.random.default_rng(11)
    matrix = make_matrix("duplicates", 3000, 16, rng)
    records = [{"artifact_id": f"a{i}", "surface_kind": "doc", "text": f"w{i % 7}", "vector": matrix[i],
                "metadata": {"even": i % 2 == 0}} for i in range(matrix.shape[0])]
    corpus = irflow.build(records, embedder=None)
    queries = np.concatenate([matrix[:3], rng.standard_normal((2, 16)).astype(np.float32)])
    mask = corpus.candidate_mask(filter={"even": True})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with dense_kernel.use_kernel("numpy"):
            expected = [as_tuples(corpus.dense_topk(queries, m, 25)) for m in (None, mask)]
            assert _index(corpus).get(corpus.vectors) is None
        with dense_kernel.use_kernel("numba"):
            got = [as_tuples(corpus.dense_topk(queries, m, 25)) for m in (None, mask)]
            index = _index(corpus).get(corpus.vectors)
            assert index is not None and _index(corpus).get(corpus.vectors) is index  # built once
    assert got == expected
    assert index.codes.shape == matrix.shape and not index.codes.flags.writeable
    with dense_kernel.use_kernel("numba"):
        assert _index(corpus.with_embedder("hash:16")).get(corpus.vectors) is index  # shared, not rebuilt
    assert index.nbytes < matrix.nbytes  # a quarter of the vectors, plus a few numbers per row


def test_block_bounds_cover_their_rows() -> None:
    rng = np.random.default_rng(2)
    index = compiled_index(make_matrix("spiky", 1000, 8, rng))
    block = dense_index_module.BLOCK
    for b in range(index.blocks.shape[0]):
        rows = slice(b * block, (b + 1) * block)
        assert index.blocks[b, 0] == index.scale[rows].max() and index.blocks[b, 1] == index.scale[rows].min()
        assert index.blocks[b, 2] == index.error[rows].max() and index.blocks[b, 3] == index.norm[rows].max()


def test_large_batches_go_to_blas_and_small_ones_to_the_scan_with_the_same_bits() -> None:
    rng = np.random.default_rng(4)
    matrix = make_matrix("duplicates", 2000, 32, rng)
    queries = rng.standard_normal((60, 32)).astype(np.float32)
    index = compiled_index(matrix)
    answers = []
    saved = dense_module.SCAN_MAX_QUERIES, dense_module.SCAN_MAX_QUERIES_GROUPED
    with dense_kernel.use_kernel("numba"):
        for limit in (0, 1000):  # 60 queries: BLAS, then the scan (in groups of four where it can)
            dense_module.SCAN_MAX_QUERIES = dense_module.SCAN_MAX_QUERIES_GROUPED = limit
            try:
                answers.append(as_tuples(dense_topk(matrix, queries, None, 9, index=index)))
            finally:
                dense_module.SCAN_MAX_QUERIES, dense_module.SCAN_MAX_QUERIES_GROUPED = saved
    assert answers[0] == answers[1] == brute_force(matrix, queries, None, 9)


def test_four_queries_at_once_keep_the_candidates_of_one_at_a_time() -> None:
    """``group`` 4 (``dense_scan.dot4``: vector code on x86 with AVX2) and 1 choose the same rows."""
    rng = np.random.default_rng(8)
    for kind in ("gaussian", "code-steps", "duplicates"):
        matrix = make_matrix(kind, 3000, 48, rng)
        queries = np.concatenate([rng.standard_normal((9, 48)), matrix[:2]]).astype(np.float32)
        index = compiled_index(matrix)
        mask = rng.random(3000) < 0.7
        with dense_kernel.use_kernel("numba"):
            for m in (None, mask):
                one = dense_kernel.scan_candidates(index, queries, m, 7, group=1)
                four = dense_kernel.scan_candidates(index, queries, m, 7, group=4)
                assert one is not None and four is not None
                assert sorted(zip(*(x.tolist() for x in one))) == sorted(zip(*(x.tolist() for x in four)))


def test_dot4_gives_the_exact_integers_at_the_extremes() -> None:
    """The largest codes (127 x 32767 in every component, d = 384): no lane overflows."""
    @numba.njit
    def four(codes: np.ndarray, qcodes: np.ndarray, r: int) -> tuple:
        return dense_scan.dot4(codes, r, qcodes, 0, codes.shape[1]), \
            dense_scan.dot4_loops(codes, r, qcodes, 0, codes.shape[1])

    rng = np.random.default_rng(9)
    codes = np.vstack([np.full(384, 127), np.full(384, -127), rng.integers(-127, 128, 384)]).astype(np.int8)
    qcodes = np.vstack([np.full(384, 32767), np.full(384, -32767), rng.integers(-32767, 32768, (2, 384))]
                       ).astype(np.int16)
    expected = codes.astype(np.int64) @ qcodes.T.astype(np.int64)
    assert np.abs(expected).max() == 384 * 127 * 32767 < 2 ** 31
    for r in range(3):
        vector, loops = four(codes, qcodes, r)
        assert list(vector) == list(loops) == expected[r].tolist(), r
