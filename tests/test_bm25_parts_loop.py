"""BM25 over a corpus's segments in one compiled call: the same rows and score bits as the parts called one by one.

``irflow.kernels.bm25.compiled_parts`` loops over the segments inside
numba (their arrays passed by address), so a query pays numba's dispatch
once, not once per segment.  Whatever the texts, variant, filter, deletes
and block size, it must rank exactly as the Python loop over
``compiled.scan`` and as a fresh build of the live records.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import irflow

pytest.importorskip("numba")

from irflow.kernels.bm25 import BM25Params, compiled, compiled_parts, kernel, use_kernel  # noqa: E402

WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]


def _corpus(texts: list[str], cuts: list[int], deleted: list[int]) -> irflow.Corpus:
    records = [{"artifact_id": f"a{i}", "surface_kind": "doc", "text": t, "metadata": {"even": i % 2 == 0}}
               for i, t in enumerate(texts)]
    corpus = irflow.build(records[:cuts[0]], embedder=None, analyzer="plain")
    corpus.merge_policy = irflow.MergePolicy.never()
    for lo, hi in zip(cuts, cuts[1:] + [len(records)]):
        if hi > lo:
            corpus.add(records[lo:hi])
    ids = corpus.record_ids
    corpus.delete(sorted({ids[i % len(ids)] for i in deleted}), missing="ok")
    return corpus


def _answers(corpus: irflow.Corpus, queries: list[list[str]], params: BM25Params) -> list[tuple]:
    """Each query's top rows and score bits, asked one by one (the loop over the segments in one compiled call)
    and as one batch (the batched kernel, part by part): both must agree."""
    out = []
    for mask in (None, corpus.candidate_mask(filter={"even": True})):
        batch = corpus.bm25_topk(queries, mask, 7, params)
        for j, query in enumerate(queries):
            rows, scores = corpus.bm25_topk([query], mask, 7, params).per_query(0)
            answer = (tuple(corpus.record_ids_of(rows).tolist()), scores.tobytes())
            rows, scores = batch.per_query(j)
            assert (tuple(corpus.record_ids_of(rows).tolist()), scores.tobytes()) == answer
            out.append(answer)
    return out


@settings(max_examples=40, deadline=None)
@given(
    docs=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12), min_size=12, max_size=60),
    parts=st.integers(2, 5),
    deleted=st.lists(st.integers(0, 200), max_size=10),
    variant=st.sampled_from(["okapi", "bm25l", "bm25plus"]),
    block=st.sampled_from([4, 16, 4096]),
    seed=st.integers(0, 1000),
)
def test_one_compiled_call_ranks_as_the_parts_one_by_one(docs, parts, deleted, variant, block, seed) -> None:
    rng = np.random.default_rng(seed)
    texts = [" ".join(d) for d in docs]
    cuts = sorted({int(c) for c in rng.integers(1, len(texts), parts - 1)} | {max(1, len(texts) // parts)})
    queries = [list(rng.choice(WORDS, int(rng.integers(1, 5)))) for _ in range(4)] + [["alpha", "alpha", "beta"]]
    params = BM25Params(variant=variant)
    saved_block, saved_row = kernel.COMPILED_BLOCK, compiled_parts.table_row
    try:
        kernel.COMPILED_BLOCK = block
        with use_kernel("numba"):
            corpus = _corpus(texts, cuts, deleted)
            loop = _answers(corpus, queries, params)
            fresh = _answers(irflow.build(list(corpus), embedder=None, analyzer="plain"), queries, params)
            compiled_parts.table_row = lambda arrays, like: None  # every array refused: the parts one by one
            one_by_one = _answers(_corpus(texts, cuts, deleted), queries, params)
    finally:
        kernel.COMPILED_BLOCK, compiled_parts.table_row = saved_block, saved_row
    assert loop == one_by_one == fresh


def test_a_corpus_of_segments_calls_the_compiled_kernel_once_per_query(monkeypatch) -> None:
    texts = [" ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 6)) for i in range(60)]
    corpus = _corpus(texts, [20, 35, 50], [3, 40])
    assert len(corpus.segments) == 4
    calls = []
    real = compiled.scan

    def counted(*args):
        calls.append(args[18])  # the part's row offset
        return real(*args)

    queries = [["alpha", "gamma"], ["beta"], ["zeta", "eta", "theta"]]
    with use_kernel("numba"):
        monkeypatch.setattr(compiled, "scan", counted)
        fast = _answers(corpus, queries, BM25Params())
        assert calls == []  # no call per segment from Python
        monkeypatch.setattr(compiled_parts, "table_row", lambda arrays, like: None)
        fresh = irflow.build(list(corpus), embedder=None, analyzer="plain")
        slow = _answers(_corpus(texts, [20, 35, 50], [3, 40]), queries, BM25Params())
        assert len(calls) > len(queries)  # the parts one by one (the fallback)
        assert fast == slow == _answers(fresh, queries, BM25Params())


def test_a_token_is_described_once_per_part_then_read_from_the_parts_table(monkeypatch) -> None:
    """The second query holding a token asks no part's scorer about it again; the answers stay a fresh build's."""
    from irflow.kernels.bm25.parts import PartsScorer

    texts = [" ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 6)) for i in range(60)]
    corpus = _corpus(texts, [20, 35, 50], [3, 40])
    asked = []
    real = PartsScorer._known

    def counted(self, scorer, token):
        asked.append(token)
        return real(self, scorer, token)

    monkeypatch.setattr(PartsScorer, "_known", counted)
    fresh = irflow.build(list(corpus), embedder=None, analyzer="plain")
    with use_kernel("numba"):
        first = _answers(corpus, [["alpha", "gamma"]], BM25Params())
        before = len(asked)
        assert before >= 2 * len(corpus.segments)  # each token described by each part once
        again = _answers(corpus, [["gamma", "alpha", "alpha"], ["gamma"]], BM25Params())
        assert len(asked) == before  # known tokens: no part asked again
        assert first == _answers(fresh, [["alpha", "gamma"]], BM25Params())
        assert again == _answers(fresh, [["gamma", "alpha", "alpha"], ["gamma"]], BM25Params())


def test_deleted_rows_are_left_out_by_nan_norms_never_ranked_even_with_room_in_the_top(monkeypatch) -> None:
    """A segment's live mask reaches the kernel as NaN norms at its deleted rows (and no mask): a deleted row
    holding the query's only tokens is never returned, even when fewer than k rows match (nothing prunes then),
    and every answer stays a fresh build's of the live records."""
    texts = [" ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 6)) for i in range(60)]
    texts[5] = texts[41] = "omega omega alpha"  # the only rows holding omega: both deleted below
    texts[47] = "omega beta"
    corpus = _corpus(texts, [20, 35, 50], [5, 41])
    passed = []
    real = compiled_parts.scan_parts

    def seen(*args):
        passed.append(args[4])  # the parts' table: addresses and extents of their arrays
        return real(*args)

    monkeypatch.setattr(compiled_parts, "scan_parts", seen)
    queries = [["omega"], ["omega", "alpha"], ["alpha", "gamma"], ["beta", "omega", "eta"]]
    fresh = irflow.build(list(corpus), embedder=None, analyzer="plain")
    with use_kernel("numba"):
        for query in queries:  # no filter: the segments' live masks only
            corpus.bm25_topk([query], None, 10)
        assert len(passed) == len(queries) and all((table[:, 3 * 4 + 1] == 0).all() for table in passed)  # no mask
        rows, _ = corpus.bm25_topk([["omega"]], None, 10).per_query(0)
        assert corpus.record_ids_of(rows).tolist() == [corpus.record_ids[47]]
        assert _answers(corpus, queries, BM25Params()) == _answers(fresh, queries, BM25Params())  # filtered too
    view = corpus._state.view
    scorer = next(iter(view._scorer_lists.values()))[1]  # the segments' scorers, as the queries used them
    lives = [part.effective_mask(None) for part in view.parts]
    assert sum(live is not None for live in lives) == 2  # the two segments holding a deleted row
    for (one, _), live in zip(scorer.parts, lives):  # NaN norms exactly at the deleted rows, no mask then
        nan_norms, mask = one._compiled_arrays(False)[2], one._compiled_arrays(False)[4]
        if live is None:
            assert np.array_equal(nan_norms, one.norms)
            continue
        assert np.isnan(nan_norms[~live]).all() and np.array_equal(nan_norms[live], one.norms[live])
        assert mask.size == 0


def test_a_single_segments_deleted_rows_are_left_out_by_nan_norms_too(monkeypatch) -> None:
    """A corpus of one segment with deletes (a compacted corpus deleted from): no mask per posting either,
    no deleted row ranked, the answers a fresh build's; a filter still reaches the kernel as a mask."""
    texts = [" ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 6)) for i in range(60)]
    texts[5] = texts[41] = "omega omega alpha"
    texts[47] = "omega beta"
    corpus = _corpus(texts, [60], [5, 41])
    assert len(corpus.segments) == 1
    masks = []
    real = compiled.topk

    def seen(*args):
        masks.append(args[6].size)  # the mask passed (size 0: none)
        return real(*args)

    monkeypatch.setattr(compiled, "topk", seen)
    queries = [["omega"], ["omega", "alpha"], ["alpha", "gamma"], ["beta", "omega", "eta"]]
    fresh = irflow.build(list(corpus), embedder=None, analyzer="plain")
    with use_kernel("numba"):
        rows, _ = corpus.bm25_topk([["omega"]], None, 10).per_query(0)
        assert corpus.record_ids_of(rows).tolist() == [corpus.record_ids[47]] and masks == [0]
        corpus.bm25_topk([["alpha"]], corpus.candidate_mask(filter={"even": True}), 10)
        assert masks[-1] == len(texts)  # a filter's candidates: the mask, read per posting
        assert _answers(corpus, queries, BM25Params()) == _answers(fresh, queries, BM25Params())
