"""BM25 kernel: scores equal rank_bm25 (Okapi, BM25L, BM25Plus) to 1e-9, and the postings layout."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from typing import Iterator, Sequence

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25L, BM25Okapi, BM25Plus

from irflow.kernels import postings as postings_module
from irflow.kernels.bm25 import kernel as kernel_module
from irflow.kernels.bm25 import pruning as pruning_module
from irflow.kernels.bm25 import scorer as scorer_module
from irflow.kernels.bm25 import BM25Params, BM25ParamError, bm25_scores, bm25_topk
from irflow.errors import CorpusError, IrflowError
from irflow.kernels.postings import Postings

RANK_CLASSES = {"okapi": BM25Okapi, "bm25l": BM25L, "bm25plus": BM25Plus}
TOL = 1e-9


def rank_model(docs: Sequence[Sequence[str]], params: BM25Params):
    extra = {"epsilon": params.epsilon} if params.variant == "okapi" else {"delta": params.effective_delta}
    return RANK_CLASSES[params.variant]([list(d) for d in docs], k1=params.k1, b=params.b, **extra)


def expected_many(docs: Sequence[Sequence[str]], queries: Sequence[Sequence[str]],
                  mask: np.ndarray | None, params: BM25Params,
                  corpus_mask: np.ndarray | None = None) -> list[dict[int, float]]:
    """rank_bm25's score of every candidate holding a query token, by row, per query."""
    n = len(docs)
    candidates = np.ones(n, bool) if mask is None else mask
    if params.stats == "candidates":
        stats_rows = np.flatnonzero(candidates)
    else:
        stats_rows = np.arange(n) if corpus_mask is None else np.flatnonzero(corpus_mask)
    stats_docs = [docs[i] for i in stats_rows]
    if not stats_docs or sum(map(len, stats_docs)) == 0:
        return [{} for _ in queries]  # rank_bm25 divides by zero here; nothing can match anyway
    model = rank_model(stats_docs, params)
    position = {int(row): i for i, row in enumerate(stats_rows)}
    holders = [(int(row), set(docs[row])) for row in np.flatnonzero(candidates)]
    out = []
    for query in queries:
        with np.errstate(invalid="ignore"):  # rank_bm25: 0/0 for empty documents when b == 1
            scores = model.get_scores(list(query))
        wanted = set(query)
        out.append({row: float(scores[position[row]]) for row, terms in holders if wanted & terms})
    return out


def expected(docs: Sequence[Sequence[str]], query: Sequence[str], mask: np.ndarray | None,
             params: BM25Params, corpus_mask: np.ndarray | None = None) -> dict[int, float]:
    """``expected_many`` for one query."""
    return expected_many(docs, [query], mask, params, corpus_mask)[0]


def check_top(rows: np.ndarray, scores: np.ndarray, reference: dict[int, float], k: int) -> None:
    """``rows`` / ``scores`` are a correct top ``k`` of ``reference`` (to 1e-9, ties by row)."""
    best = sorted(reference.values(), reverse=True)[:k]
    assert len(rows) == len(best), (rows.tolist(), reference)
    assert len(set(rows.tolist())) == len(rows)
    np.testing.assert_allclose(scores, best, rtol=0, atol=TOL)
    for row, score in zip(rows.tolist(), scores.tolist()):
        assert row in reference, (row, reference)
        assert abs(reference[row] - score) <= TOL
    # exact ties in our scores are listed in row order
    for i in range(len(rows) - 1):
        if scores[i] == scores[i + 1]:
            assert rows[i] < rows[i + 1]
    assert np.all(np.diff(scores) <= 0)


try:
    from irflow.kernels.bm25 import compiled as bm25_numba
except ImportError:  # numba not installed: the compiled paths are skipped
    bm25_numba = None


@contextlib.contextmanager
def kernel_paths(path: str) -> Iterator[None]:
    """Force one of the kernel's scoring paths by moving its thresholds.

    The numpy paths run with the compiled kernel switched off; the
    ``compiled*`` ones run the compiled kernel (skipped without numba) with
    tiny blocks, so that a small corpus spans many blocks (cursors moving
    between blocks, the essential prefix shrinking as the threshold rises).
    """
    compiled_paths = {  # path -> (block rows, the numpy settings its head columns and dense terms follow)
        "compiled": (None, "default"),
        "compiled_block1": (1, "default"),
        "compiled_block3": (3, "prune_heads"),
        "compiled_dense": (2, "dense"),
        "compiled_sparse": (5, "sparse"),
        "compiled_heads": (4, "prune_seeded"),
    }
    if path in compiled_paths:
        if bm25_numba is None:
            pytest.skip("numba is not installed: no compiled kernel to test")
        block, numpy_path = compiled_paths[path]
        saved_block = kernel_module.COMPILED_BLOCK
        kernel_module.COMPILED_BLOCK = block
        try:
            with kernel_paths(numpy_path), kernel_module.use_kernel("numba"):
                yield
        finally:
            kernel_module.COMPILED_BLOCK = saved_block
        return
    names = [(scorer_module, "DENSE_TERM_FRACTION"), (pruning_module, "PRUNE_BUDGET_FRACTION"),
             (pruning_module, "PRUNE_LIMIT_FRACTION"), (pruning_module, "FULL_SCORE_ROWS"),
             (postings_module, "HEAD_TERMS"), (postings_module, "HEAD_MIN_SHARE")]
    saved = tuple(getattr(module, name) for module, name in names)
    settings_for = {
        "default": saved,
        "sparse": (10.0, 10.0, 1.0, 8192, 0, 16),  # no dense terms, no pruning
        "dense": (0.0, 10.0, 1.0, 8192, 64, 10**9),  # every term dense through head columns
        "dense_scatter": (0.0, 10.0, 1.0, 8192, 0, 16),  # dense without head columns
        "prune_heads": (0.5, 0.3, 1.0, 8192, 64, 10**9),  # pruning, common terms from columns
        "prune_postings": (10.0, 0.3, 1.0, 8192, 0, 16),  # pruning, common terms from postings
        "prune_seeded": (0.5, 0.3, 1.0, 0, 64, 10**9),  # threshold from the best rows first
        "prune_tight": (0.5, 0.01, 0.5, 0, 2, 10**9),  # essential set starts tiny, limit cuts early
        "prune_rarest": (0.5, 0.0, 1.0, 8192, 64, 10**9),  # always tried, from the rarest term alone
        "prune_rarest_seeded": (0.5, 0.0, 1.0, 0, 0, 16),  # the same, seeded, no head columns
    }[path]
    for (module, name), value in zip(names, settings_for):
        setattr(module, name, value)
    try:
        with kernel_module.use_kernel("numpy"):
            yield
    finally:
        for (module, name), value in zip(names, saved):
            setattr(module, name, value)


NUMPY_PATHS = ["default", "sparse", "dense", "dense_scatter", "prune_heads", "prune_postings", "prune_seeded",
               "prune_tight", "prune_rarest", "prune_rarest_seeded"]
COMPILED_PATHS = ["compiled", "compiled_block1", "compiled_block3", "compiled_dense", "compiled_sparse",
                  "compiled_heads"]
PATHS = NUMPY_PATHS + COMPILED_PATHS


@st.composite
def scenarios(draw: st.DrawFn) -> dict:
    vocab = [f"w{i}" for i in range(draw(st.integers(1, 6)))]
    n = draw(st.integers(1, 10))
    docs = [draw(st.lists(st.sampled_from(vocab), max_size=7)) for _ in range(n)]
    mask = draw(st.none() | st.lists(st.booleans(), min_size=n, max_size=n).map(np.array))
    tokens = st.sampled_from(vocab + ["zz"])  # "zz" is never in a document
    queries = draw(st.lists(st.lists(tokens, max_size=6), min_size=1, max_size=3))
    return {"docs": docs, "mask": mask, "queries": queries, "params": draw(bm25_params()),
            "k": draw(st.integers(1, 12)), "path": draw(st.sampled_from(PATHS))}


@st.composite
def bm25_params(draw: st.DrawFn) -> BM25Params:
    return BM25Params(
        variant=draw(st.sampled_from(["okapi", "bm25l", "bm25plus"])),
        k1=draw(st.floats(0.05, 3.0)),
        b=draw(st.floats(0.0, 1.0)),
        epsilon=draw(st.floats(-1.0, 1.0)),
        delta=draw(st.none() | st.floats(0.0, 2.0)),
        stats=draw(st.sampled_from(["candidates", "corpus"])),
    )


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_matches_rank_bm25(case: dict) -> None:
    docs, mask, params, k = case["docs"], case["mask"], case["params"], case["k"]
    with kernel_paths(case["path"]):
        postings = Postings.build(docs)
        top = bm25_topk(postings, case["queries"], mask, k, params)
    assert top.n_queries == len(case["queries"])
    for i, reference in enumerate(expected_many(docs, case["queries"], mask, params)):
        check_top(*top.per_query(i), reference, k)


@settings(max_examples=80, deadline=None)
@given(scenarios(), st.data())
def test_corpus_statistics_with_corpus_mask(case: dict, data: st.DataObject) -> None:
    docs, params, k = case["docs"], attrs_evolve(case["params"], stats="corpus"), case["k"]
    n = len(docs)
    corpus_mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    mask = corpus_mask & np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    with kernel_paths(case["path"]):
        top = bm25_topk(Postings.build(docs), case["queries"], mask, k, params, corpus_mask=corpus_mask)
    for i, query in enumerate(case["queries"]):
        check_top(*top.per_query(i), expected(docs, query, mask, params, corpus_mask), k)


def attrs_evolve(params: BM25Params, **changes) -> BM25Params:
    import attrs
    return attrs.evolve(params, **changes)


@settings(max_examples=80, deadline=None)
@given(scenarios())
def test_full_score_vector_matches_rank_bm25(case: dict) -> None:
    docs, mask, params = case["docs"], case["mask"], case["params"]
    query = case["queries"][0]
    scores = bm25_scores(Postings.build(docs), query, mask, params)
    candidates = np.ones(len(docs), bool) if mask is None else mask
    assert np.all(np.isneginf(scores[~candidates]))
    rows = np.flatnonzero(candidates)
    stats_docs = [docs[i] for i in (rows if params.stats == "candidates" else range(len(docs)))]
    if not stats_docs or sum(map(len, stats_docs)) == 0:
        assert np.all(scores[candidates] == 0)
        return
    with np.errstate(invalid="ignore"):
        reference = rank_model(stats_docs, params).get_scores(query)
    if params.stats == "corpus":
        reference = reference[rows]
    finite = np.isfinite(reference)  # rank_bm25: 0/0 for an empty document when b == 1
    np.testing.assert_allclose(scores[rows][finite], reference[finite], rtol=0, atol=TOL)


# -- a larger corpus: real thresholds, pruning and dense terms at their defaults ------------


def zipf_docs(n: int, vocab: int, seed: int) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    law = 1.0 / np.arange(1, vocab + 1) ** 1.1
    law /= law.sum()
    lengths = rng.integers(0, 30, n)
    tokens = rng.choice(vocab, size=int(lengths.sum()), p=law)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    return [[f"t{t}" for t in tokens[bounds[i]:bounds[i + 1]]] for i in range(n)]


@pytest.fixture(scope="module")
def zipf_corpus() -> tuple[list[list[str]], Postings, list[list[str]]]:
    docs = zipf_docs(3000, 800, seed=7)
    rng = np.random.default_rng(8)
    law = 1.0 / np.arange(1, 801) ** 1.1
    law /= law.sum()
    queries = [[f"t{t}" for t in rng.choice(800, size=int(rng.integers(1, 7)), p=law)] for _ in range(40)]
    return docs, Postings.build(docs), queries


@pytest.mark.parametrize("variant", ["okapi", "bm25l", "bm25plus"])
@pytest.mark.parametrize("keep", [None, 0.5, 0.97])
@pytest.mark.parametrize("path", ["default", "prune_seeded", "compiled", "compiled_heads"])
def test_zipf_corpus_matches_rank_bm25(zipf_corpus, variant: str, keep: float | None, path: str) -> None:
    docs, postings, queries = zipf_corpus
    mask = None if keep is None else np.random.default_rng(3).random(len(docs)) < keep
    params = BM25Params(variant=variant)
    with kernel_paths(path):
        top = bm25_topk(postings, queries, mask, 10, params)
    for i, reference in enumerate(expected_many(docs, queries, mask, params)):
        check_top(*top.per_query(i), reference, 10)


@pytest.mark.parametrize("variant", ["okapi", "bm25l", "bm25plus"])
@pytest.mark.parametrize("keep", [None, 0.5, 0.02])
@pytest.mark.parametrize("stats", ["candidates", "corpus"])
def test_zipf_corpus_compiled_kernel_gives_the_numpy_bits(zipf_corpus, variant: str, keep: float | None,
                                                          stats: str) -> None:
    """The compiled kernel, at its own block size and at small ones, returns the numpy kernel's rows and bits.

    keep=0.02 leaves 60 candidates: common terms are then read from their columns at the candidates.
    """
    docs, postings, queries = zipf_corpus
    mask = None if keep is None else np.random.default_rng(11).random(len(docs)) < keep
    params = BM25Params(variant=variant, stats=stats)
    for k in (1, 10, 100):
        with kernel_paths("default"):
            want = bm25_topk(postings, queries, mask, k, params)
        for path in ("compiled", "compiled_block3", "compiled_heads"):
            with kernel_paths(path):
                got = bm25_topk(postings, queries, mask, k, params)
            assert got.row.tolist() == want.row.tolist(), (path, k)
            assert got.score.tobytes() == want.score.tobytes(), (path, k)


def test_batch_equals_single_queries(zipf_corpus) -> None:
    docs, postings, queries = zipf_corpus
    mask = np.random.default_rng(4).random(len(docs)) < 0.6
    batch = bm25_topk(postings, queries, mask, 7)
    for i, query in enumerate(queries):
        single = bm25_topk(postings, [query], mask, 7)
        assert batch.per_query(i)[0].tolist() == single.per_query(0)[0].tolist()
        assert batch.per_query(i)[1].tolist() == single.per_query(0)[1].tolist()


def test_threads_get_their_own_buffers(zipf_corpus) -> None:
    docs, postings, queries = zipf_corpus
    want = bm25_topk(postings, queries, None, 10)
    results: list = []

    def work() -> None:
        for _ in range(5):
            results.append(bm25_topk(postings, queries, None, 10))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 20 and all(r == want for r in results)


# -- rank_bm25's edge cases, one by one ---------------------------------------------------


def scores_of(docs, query, mask=None, params=BM25Params(), k=50) -> dict[int, float]:
    rows, scores = bm25_topk(Postings.build(docs), [query], mask, k, params).per_query(0)
    return dict(zip(rows.tolist(), scores.tolist()))


def test_epsilon_floor_uses_average_idf_over_the_whole_candidate_vocabulary() -> None:
    docs = [["a", "b"], ["a", "c"], ["a", "d", "e"], ["f"]]
    # "a" is in 3 of 4 documents: negative idf, floored to epsilon * mean idf of a..f
    ours = scores_of(docs, ["a"], params=BM25Params(epsilon=0.5))
    reference = BM25Okapi(docs, epsilon=0.5)
    assert reference.idf["a"] == pytest.approx(0.5 * reference.average_idf)
    assert set(ours) == {0, 1, 2}
    for row, score in ours.items():
        assert score == pytest.approx(reference.get_scores(["a"])[row], abs=TOL)


def test_candidate_statistics_change_the_floor() -> None:
    docs = [["a", "x"], ["a", "y"], ["a", "z"], ["b"], ["c"]]
    mask = np.array([True, True, True, False, True])
    ours = scores_of(docs, ["a"], mask)
    reference = BM25Okapi([docs[i] for i in np.flatnonzero(mask)]).get_scores(["a"])
    for position, row in enumerate(np.flatnonzero(mask)):
        if row in ours:
            assert ours[row] == pytest.approx(reference[position], abs=TOL)
    assert set(ours) == {0, 1, 2}


def test_repeated_query_tokens_count_twice() -> None:
    docs = [["a", "b"], ["b", "c"], ["c", "d"], ["d", "e"], ["e"]]
    once, twice = scores_of(docs, ["a"]), scores_of(docs, ["a", "a"])
    assert twice[0] == pytest.approx(2 * once[0], abs=TOL)
    assert twice[0] == pytest.approx(BM25Okapi(docs).get_scores(["a", "a"])[0], abs=TOL)


def test_unknown_terms_contribute_nothing() -> None:
    docs = [["a", "b"], ["b", "c"], ["c", "d"], ["d"]]
    assert scores_of(docs, ["a", "nope"]) == pytest.approx(scores_of(docs, ["a"]))
    assert scores_of(docs, ["nope", "never"]) == {}
    assert scores_of(docs, []) == {}


def test_bm25plus_adds_delta_for_absent_terms_but_returns_only_holders() -> None:
    docs = [["a"], ["b"], ["c"], ["c", "d"]]
    params = BM25Params(variant="bm25plus", delta=1.0)
    ours = scores_of(docs, ["a", "b"], params=params)
    reference = BM25Plus(docs, delta=1.0).get_scores(["a", "b"])
    assert set(ours) == {0, 1}  # rows 2 and 3 score the delta part too, but hold no token
    assert ours[0] == pytest.approx(reference[0], abs=TOL)
    assert reference[2] > 0  # the constant part rank_bm25 gives everyone


def test_bm25l_absent_terms_contribute_zero_like_rank_bm25() -> None:
    docs = [["a"], ["b"], ["c"], ["a", "b"]]
    params = BM25Params(variant="bm25l")
    ours = scores_of(docs, ["a", "b"], params=params)
    reference = BM25L(docs).get_scores(["a", "b"])
    assert reference[2] == 0
    for row in (0, 1, 3):
        assert ours[row] == pytest.approx(reference[row], abs=TOL)


@pytest.mark.parametrize("variant", ["okapi", "bm25l", "bm25plus"])
def test_tiny_corpora(variant: str) -> None:
    params = BM25Params(variant=variant)
    for docs in ([["a"]], [["a", "a"], ["a"]], [["a"], ["b"]], [["a", "b"], ["a"]]):
        for query in (["a"], ["a", "b"], ["b", "b"]):
            reference = expected(docs, query, None, params)
            rows, scores = bm25_topk(Postings.build(docs), [query], None, 5, params).per_query(0)
            check_top(rows, scores, reference, 5)
    one = scores_of([["a"]], ["a"])
    assert one[0] < 0  # a single document: negative idf, floored to a negative mean


def test_term_in_exactly_half_the_documents_has_idf_zero() -> None:
    docs = [["a", "x"], ["a", "y"], ["b"], ["c"]]
    assert BM25Okapi(docs).idf["a"] == 0.0
    ours = scores_of(docs, ["a"])
    assert ours == {0: 0.0, 1: 0.0}  # returned (they hold the token), not floored


def test_empty_candidates_and_empty_documents() -> None:
    docs = [["a"], [], ["a", "b"], []]
    postings = Postings.build(docs)
    assert len(bm25_topk(postings, [["a"]], np.zeros(4, bool), 5)) == 0
    assert len(bm25_topk(postings, [["a"]], np.array([False, True, False, True]), 5)) == 0
    # empty documents count in N and the average length, and are never returned
    ours = scores_of(docs, ["a", "b"])
    reference = BM25Okapi(docs).get_scores(["a", "b"])
    assert set(ours) == {0, 2}
    assert ours[2] == pytest.approx(reference[2], abs=TOL)
    assert len(bm25_topk(Postings.build([]), [["a"]], None, 5)) == 0
    assert len(bm25_topk(Postings.build([[], []]), [["a"]], None, 5)) == 0


def test_ties_break_by_row_order() -> None:
    docs = [["x", "y"], ["a", "b"], ["z"], ["a", "b"], ["b", "a"], ["q"]]
    rows, scores = bm25_topk(Postings.build(docs), [["a"]], None, 10).per_query(0)
    assert rows.tolist() == [1, 3, 4] and scores[0] == scores[1] == scores[2]
    rows, _ = bm25_topk(Postings.build(docs), [["a"]], None, 2).per_query(0)
    assert rows.tolist() == [1, 3]


def test_k1_zero_is_finite_where_rank_bm25_divides_zero_by_zero() -> None:
    docs = [["a"], ["b"], ["a", "b"], ["c"], ["d"]]
    params = BM25Params(k1=0.0)
    ours = scores_of(docs, ["a", "b"], params=params)
    with np.errstate(invalid="ignore"):
        reference = BM25Okapi(docs, k1=0.0).get_scores(["a", "b"])
    assert np.isnan(reference[0])  # rank_bm25: 0/0 for "b" in row 0
    assert all(np.isfinite(list(ours.values())))
    assert ours[2] == pytest.approx(reference[2], abs=TOL)  # holds both: no 0/0
    assert ours[0] == pytest.approx(scores_of(docs, ["a"], params=params)[0], abs=TOL)


def test_fetch_k_and_mask_validation() -> None:
    postings = Postings.build([["a"], ["a"], ["b"]])
    assert len(bm25_topk(postings, [["a"]], None, 0)) == 0
    assert bm25_topk(postings, [["a"]], None, 100).counts().tolist() == [2]
    assert bm25_topk(postings, [], None, 5).n_queries == 0
    with pytest.raises(IrflowError, match="boolean array of shape"):
        bm25_topk(postings, [["a"]], np.ones(2, bool), 5)
    with pytest.raises(IrflowError, match="boolean array of shape"):
        bm25_topk(postings, [["a"]], np.ones(3, int), 5)


def test_mask_mutated_in_place_gets_fresh_statistics() -> None:
    docs = [["a", "b"], ["a"], ["c", "a"], ["d"], ["a", "e"]]
    postings = Postings.build(docs)
    mask = np.ones(5, bool)
    first = bm25_topk(postings, [["a"]], mask, 5)
    mask[[3]] = False  # the cache key is the mask's content, not its identity
    second = bm25_topk(postings, [["a"]], mask, 5)
    reference = expected(docs, ["a"], mask, BM25Params())
    check_top(*second.per_query(0), reference, 5)
    assert first != second


def test_mask_none_equals_all_true() -> None:
    docs = zipf_docs(300, 60, seed=1)
    postings = Postings.build(docs)
    queries = [["t0", "t5"], ["t1"], ["t3", "t3", "t40"]]
    assert bm25_topk(postings, queries, None, 10) == bm25_topk(postings, queries, np.ones(300, bool), 10)


# -- one canonical sum: a row's score never depends on fetch_k or on the path --------------


@contextlib.contextmanager
def pruned_answers() -> Iterator[list[bool]]:
    """Record, for each ``_pruned`` call, whether the pruned path answered (not gave up)."""
    answers: list[bool] = []
    original = scorer_module._Scorer._pruned

    def spy(self, *args, **kwargs):
        rows, scores = original(self, *args, **kwargs)
        answers.append(rows is not None)
        return rows, scores

    scorer_module._Scorer._pruned = spy
    try:
        yield answers
    finally:
        scorer_module._Scorer._pruned = original


def assert_prefixes(postings: Postings, queries, mask, params: BM25Params, ks) -> None:
    """Every ``fetch_k`` in ``ks`` gives exactly (same rows, same bits) a prefix of the widest answer."""
    widest = bm25_topk(postings, queries, mask, postings.n_rows + 1, params)  # the exhaustive path
    for i in range(len(queries)):
        rows, scores = widest.per_query(i)
        tied = scores[1:] == scores[:-1]
        assert np.all(rows[1:][tied] > rows[:-1][tied]), "exact ties must come in row order"
        # the full score vector sums the same way (== : it may keep a -0.0 that top k turns into 0.0)
        assert np.array_equal(bm25_scores(postings, queries[i], mask, params)[rows], scores)
    for k in ks:
        top = bm25_topk(postings, queries, mask, k, params)
        for i in range(len(queries)):
            rows, scores = top.per_query(i)
            want_rows, want_scores = widest.per_query(i)
            assert rows.tolist() == want_rows[:k].tolist(), (k, i)
            assert scores.tobytes() == want_scores[:k].tobytes(), (k, i, scores, want_scores[:k])


@st.composite
def prefix_scenarios(draw: st.DrawFn) -> dict:
    vocab = [f"w{i}" for i in range(draw(st.integers(2, 8)))]
    # skewed frequencies (w0 the commonest): common terms to prune, rare ones to be essential;
    # few words and short rows make rows with equal scores, often through different terms
    word = st.integers(0, len(vocab) - 1).flatmap(lambda top: st.integers(0, top)).map(vocab.__getitem__)
    n = draw(st.integers(2, 40))
    docs = draw(st.lists(st.lists(word, max_size=6), min_size=n, max_size=n))
    mask = draw(st.none() | st.lists(st.booleans(), min_size=n, max_size=n).map(np.array))
    query = st.lists(st.sampled_from(vocab + ["zz"]), min_size=2, max_size=6)
    return {"docs": docs, "mask": mask, "queries": draw(st.lists(query, min_size=1, max_size=3)),
            "params": draw(bm25_params()), "path": draw(st.sampled_from(PATHS))}


@settings(max_examples=300, deadline=None)
@given(prefix_scenarios())
def test_every_fetch_k_is_a_prefix_of_the_same_ranking(case: dict) -> None:
    """The pruned answer for a small fetch_k is bit for bit the start of the exhaustive one."""
    docs = case["docs"]
    with kernel_paths(case["path"]), pruned_answers() as answers:
        postings = Postings.build(docs)
        assert_prefixes(postings, case["queries"], case["mask"], case["params"], range(1, len(docs) + 1))
    event(f"pruned path answered: {any(answers)}")


# the paths that share head-column settings (and so the canonical order), grouped
SAME_HEADS = [["sparse", "dense_scatter", "prune_postings", "prune_rarest_seeded", "compiled_sparse"],
              ["dense", "prune_heads", "prune_seeded", "prune_rarest", "compiled_dense", "compiled_heads",
               "compiled_block3"]]


@settings(max_examples=150, deadline=None)
@given(prefix_scenarios(), st.integers(1, 12), st.sampled_from(SAME_HEADS))
def test_every_path_gives_the_same_bits(case: dict, k: int, paths: list[str]) -> None:
    results = []
    for path in paths:
        if path in COMPILED_PATHS and bm25_numba is None:
            continue
        with kernel_paths(path):
            top = bm25_topk(Postings.build(case["docs"]), case["queries"], case["mask"], k, case["params"])
        results.append((top.row.tolist(), top.score.tobytes()))
    assert all(result == results[0] for result in results), paths


@pytest.mark.parametrize("variant", ["okapi", "bm25l", "bm25plus"])
@pytest.mark.parametrize("keep", [None, 0.5])
@pytest.mark.parametrize("path", ["default", "compiled", "compiled_heads"])
def test_zipf_corpus_fetch_k_prefixes_at_default_thresholds(zipf_corpus, variant: str, keep: float | None,
                                                            path: str) -> None:
    docs, postings, queries = zipf_corpus
    mask = None if keep is None else np.random.default_rng(5).random(len(docs)) < keep
    with kernel_paths(path), pruned_answers() as answers:
        assert_prefixes(postings, queries, mask, BM25Params(variant=variant), [1, 2, 3, 5, 8, 13, 21, 34])
    if path == "default":  # the numpy pruned path answered many of them (BM25L's bounds are loose)
        assert 4 * sum(answers) > len(answers)


@pytest.mark.parametrize("path", ["default", "compiled", "compiled_block1"])
def test_fetch_k_does_not_change_equal_scores_of_the_search_corpus(path: str) -> None:
    """Regression: rows 28 and 31 score the same, and did not when fetch_k=4 went through pruning."""
    from search_reference import records  # the small corpus of the search tests

    from irflow.kernels.text import get_analyzer

    analyzer = get_analyzer()  # the corpus default
    surfaces = records()
    postings = Postings.build(analyzer.tokenize_many([r["text"] for r in surfaces]))
    mask = np.array([r["surface_kind"] in ("description", "readme_chunk", "deps") for r in surfaces])
    query = analyzer("http client json parser")
    with kernel_paths(path):
        with pruned_answers() as answers:
            rows, scores = bm25_topk(postings, [query], mask, 4).per_query(0)
        assert_prefixes(postings, [query], mask, BM25Params(), range(1, postings.n_rows + 1))
    assert answers == ([True] if path == "default" else [])
    assert rows.tolist() == [13, 1, 28, 31] and scores[2] == scores[3]
    reference = expected([analyzer(r["text"]) for r in surfaces], query, mask, BM25Params())
    check_top(rows, scores, reference, 4)


# -- parameters ---------------------------------------------------------------------------


def test_params_defaults_and_from_mapping() -> None:
    params = BM25Params()
    assert (params.variant, params.k1, params.b, params.epsilon, params.stats) == ("okapi", 1.5, 0.75, 0.25, "candidates")
    assert BM25Params(variant="bm25l").effective_delta == 0.5
    assert BM25Params(variant="bm25plus").effective_delta == 1.0
    assert BM25Params.from_mapping({"k1": 1.2, "b": 0.5}) == BM25Params(k1=1.2, b=0.5)
    assert BM25Params.from_mapping(None) == BM25Params()
    assert BM25Params.from_mapping(params) is params
    assert BM25Params.from_mapping({"k1": 2}).k1 == 2.0
    assert BM25Params(k1=1, b=1).to_dict()["b"] == 1.0


@pytest.mark.parametrize("bad", [
    {"variant": "bm99"}, {"k1": -0.1}, {"b": 1.5}, {"b": -0.1}, {"epsilon": float("nan")},
    {"delta": float("inf")}, {"k1": "1.5"}, {"k1": True}, {"stats": "everything"},
])
def test_params_validation(bad: dict) -> None:
    with pytest.raises(BM25ParamError):
        BM25Params(**bad)
    with pytest.raises(ValueError):  # BM25ParamError is a ValueError too
        BM25Params.from_mapping(bad)


def test_unknown_key_names_the_valid_keys() -> None:
    with pytest.raises(BM25ParamError, match="valid keys are variant, k1, b, epsilon, delta, stats"):
        BM25Params.from_mapping({"k1": 1.5, "kl": 1.2})
    with pytest.raises(IrflowError, match="mapping"):
        BM25Params.from_mapping([("k1", 1.0)])  # type: ignore[arg-type]


# -- postings layout ----------------------------------------------------------------------


def test_postings_build_matches_counts() -> None:
    docs = zipf_docs(200, 50, seed=2) + [[]]
    postings = Postings.build(docs)
    assert postings.n_rows == 201 and postings.doc_lengths.tolist() == [len(d) for d in docs]
    assert postings.vocab_size == len({t for d in docs for t in d})
    for term, term_id in postings.vocab.items():
        rows, tfs = postings.postings(term_id)
        assert np.all(np.diff(rows) > 0)
        want = {i: Counter(d)[term] for i, d in enumerate(docs) if term in d}
        assert dict(zip(rows.tolist(), tfs.tolist())) == want
    for row, doc in enumerate(docs):
        assert sorted(postings.row_term_ids(row).tolist()) == sorted(postings.vocab[t] for t in set(doc))
    assert postings.term_ids(["t0", "nope"]).tolist() == [postings.vocab["t0"], -1]
    assert postings.vocab_terms[postings.vocab["t3"]] == "t3"
    assert postings.post_tfs.dtype.kind in "ui"  # integers: float32 would keep float32 arithmetic


def test_postings_arrays_roundtrip_through_npy(tmp_path) -> None:
    docs = zipf_docs(100, 30, seed=3)
    postings = Postings.build(docs)
    for name, array in postings.arrays().items():
        np.save(tmp_path / f"{name}.npy", array, allow_pickle=False)
    loaded = {name: np.load(tmp_path / f"{name}.npy", mmap_mode="r", allow_pickle=False)
              for name in postings.arrays()}
    again = Postings.from_arrays(postings.vocab_terms, loaded)
    assert isinstance(again.post_rows, np.memmap)
    queries = [["t0", "t7"], ["t2", "t2", "t9"]]
    assert bm25_topk(again, queries, None, 10) == bm25_topk(postings, queries, None, 10)
    # the row-major arrays are optional on disk: rebuilt when absent
    partial = {k: v for k, v in postings.arrays().items() if not k.startswith("row_")}
    rebuilt = Postings.from_arrays(postings.vocab_terms, partial)
    assert np.array_equal(rebuilt.row_terms, postings.row_terms)
    assert np.array_equal(rebuilt.row_offsets, postings.row_offsets)


def test_postings_from_arrays_rejects_inconsistent_arrays() -> None:
    postings = Postings.build([["a", "b"], ["b"]])
    arrays = postings.arrays()
    with pytest.raises(CorpusError, match="term_offsets"):
        Postings.from_arrays(["a"], arrays)
    with pytest.raises(CorpusError, match="post_tfs"):
        Postings.from_arrays(postings.vocab_terms, {**arrays, "post_tfs": arrays["post_tfs"][:1]})
    with pytest.raises(CorpusError, match="missing"):
        Postings.from_arrays(postings.vocab_terms, {k: v for k, v in arrays.items() if k != "post_rows"})
    with pytest.raises(CorpusError, match="twice"):
        Postings.from_arrays(["a", "a"], arrays)


def test_head_columns_hold_the_common_terms() -> None:
    docs = zipf_docs(500, 40, seed=4)
    postings = Postings.build(docs)
    index, columns = postings.head_columns()
    df = postings.document_frequencies()
    assert np.all(df[index >= 0] * postings_module.HEAD_MIN_SHARE >= postings.n_rows)
    for term in np.flatnonzero(index >= 0).tolist():
        rows, tfs = postings.postings(term)
        dense = np.zeros(postings.n_rows, dtype=np.int64)
        dense[rows] = tfs
        assert np.array_equal(columns[index[term]], dense)
