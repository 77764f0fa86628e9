"""A batch of BM25 queries answers each query as it alone would: any batch, chunking and thread count.

The compiled kernel scans a batch a chunk of queries per call, chunks shared
by the threads ``limit_threads`` (``--threads``) asks for
(``irflow.kernels.bm25.batch``); each query must still get exactly its own
rows and score bits, which the single-query path (``compiled.topk``) and the
numpy kernel give.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import irflow
from irflow.kernels.bm25 import BM25Params, bm25_topk, kernel as kernel_module
from irflow.kernels.bm25 import batch as batch_module
from irflow.kernels.postings import Postings
from irflow.util.threads import limit_threads

compiled = pytest.importorskip("irflow.kernels.bm25.compiled")  # numba installed: the batch path exists

WORDS = [f"w{i}" for i in range(12)]


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Chunks of 2 queries and blocks of 3 rows: a small batch spans several chunks, a small corpus many blocks."""
    monkeypatch.setattr(batch_module, "CHUNK", 2)
    monkeypatch.setattr(kernel_module, "COMPILED_BLOCK", 3)
    with kernel_module.use_kernel("numba"):
        yield


def same(a: Any, b: Any) -> bool:
    """Rows and score bits equal."""
    return bool(np.array_equal(a[0], b[0]) and np.array_equal(np.asarray(a[1]).view(np.int64),
                                                              np.asarray(b[1]).view(np.int64)))


def singles(postings: Postings, queries: list[list[str]], mask: Any, k: int, params: BM25Params,
            floor: Any = None) -> list[Any]:
    """Each query's answer asked alone (the single-query path), as (rows, scores)."""
    return [bm25_topk(postings, [q], mask, k, params, floor=None if floor is None else floor[i:i + 1]).per_query(0)
            for i, q in enumerate(queries)]


docs_strategy = st.lists(st.lists(st.sampled_from(WORDS[:10]), min_size=1, max_size=8), min_size=1, max_size=40)
queries_strategy = st.lists(st.lists(st.sampled_from(WORDS), min_size=0, max_size=5), min_size=2, max_size=9)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=docs_strategy, queries=queries_strategy, k=st.integers(1, 12),
       variant=st.sampled_from(["okapi", "bm25l", "bm25plus"]), masked=st.booleans(), seed=st.integers(0, 99))
def test_a_batch_answers_each_query_as_alone_at_1_and_2_threads(small_chunks: None, docs: list[list[str]],
                                                                queries: list[list[str]], k: int, variant: str,
                                                                masked: bool, seed: int) -> None:
    postings = Postings.build(docs)
    params = BM25Params(variant=variant)
    mask = np.random.default_rng(seed).random(len(docs)) < 0.6 if masked else None
    alone = singles(postings, queries, mask, k, params)
    with kernel_module.use_kernel("numpy"):
        numpy_alone = singles(postings, queries, mask, k, params)
    assert all(same(a, b) for a, b in zip(alone, numpy_alone))  # the kernels agree, query by query
    for threads in (1, 2):
        with limit_threads(threads):
            top = bm25_topk(postings, queries, mask, k, params)
        assert top.n_queries == len(queries)
        for i, want in enumerate(alone):
            assert same(top.per_query(i), want), (threads, i, queries[i])


def test_floors_apply_per_query_in_a_batch(small_chunks: None) -> None:
    docs = [[WORDS[(i * 7 + j) % 10] for j in range(1 + i % 6)] for i in range(60)]
    postings = Postings.build(docs)
    queries = [["w1", "w2"], ["w3"], ["w0", "w9", "w9"], [], ["w5", "w11"]]
    params = BM25Params()
    full = singles(postings, queries, None, 20, params)
    floor = np.array([float(np.median(s)) if s.size else -np.inf for _, s in full])
    for threads in (1, 2):
        with limit_threads(threads):
            top = bm25_topk(postings, queries, None, 20, params, floor=floor)
        for i, want in enumerate(singles(postings, queries, None, 20, params, floor)):
            assert same(top.per_query(i), want)
            assert (want[1] > floor[i]).all()


def test_a_deep_k_takes_fewer_queries_a_chunk(small_chunks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch_module, "CHUNK_ENTRIES", 50)  # a chunk of k = 40 rows holds one query
    postings = Postings.build([[WORDS[(i * 3 + j) % 10] for j in range(1 + i % 4)] for i in range(90)])
    queries = [["w1"], ["w2", "w4"], ["w7", "w0"]]
    top = bm25_topk(postings, queries, None, 40)
    assert all(same(top.per_query(i), want) for i, want in enumerate(singles(postings, queries, None, 40,
                                                                             BM25Params())))


def test_a_batch_under_limit_threads_scans_on_that_many_threads(small_chunks: None,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    postings = Postings.build([[WORDS[(i + j) % 10] for j in range(3)] for i in range(30)])
    queries = [["w1"], ["w2"], ["w3"], ["w4"], ["w5"], ["w6"]]
    seen: set[int] = set()
    meet = threading.Barrier(2, timeout=10)  # both threads must be scanning at once, or this breaks
    scan = compiled.topk_many

    def recorded(*args: Any) -> Any:
        if threading.get_ident() not in seen:
            seen.add(threading.get_ident())
            meet.wait()
        return scan(*args)

    monkeypatch.setattr(compiled, "topk_many", recorded)
    with limit_threads(2):
        top = bm25_topk(postings, queries, None, 5)
    assert len(seen) == 2
    assert all(same(top.per_query(i), want)
               for i, want in enumerate(singles(postings, queries, None, 5, BM25Params())))
    seen.clear()
    meet.reset()
    monkeypatch.setattr(compiled, "topk_many", lambda *args: (seen.add(threading.get_ident()), scan(*args))[1])
    bm25_topk(postings, queries, None, 5)  # outside limit_threads: the caller's thread only
    assert seen == {threading.get_ident()}


def test_the_lexical_recipe_answers_a_batch_as_its_single_queries(small_chunks: None) -> None:
    texts = [" ".join(WORDS[(i * 5 + j) % 10] for j in range(1 + i % 7)) for i in range(80)]
    corpus = irflow.build([irflow.Record(f"a{i // 2}", "text", t) for i, t in enumerate(texts)], embedder=None)
    queries = ["w1 w2", "w3", "w0 w9 w9", "w5 w11", "w4 w4 w6", "w8 w1", "w2"]
    recipe = irflow.load_recipe("lexical")
    key = lambda hits: [(h.artifact_id, h.record_id, h.score) for h in hits]  # noqa: E731
    alone = [key(recipe.run(corpus, [q], k=3).hits[0]) for q in queries]
    for threads in (1, 2):
        with limit_threads(threads):
            batch = recipe.run(corpus, queries, k=3).hits
        assert [key(h) for h in batch] == alone


def test_a_corpus_of_several_segments_answers_a_batch_as_its_single_queries_and_a_fresh_build(
        small_chunks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = [" ".join(WORDS[(i * 5 + j * 3) % 10] for j in range(1 + i % 7)) for i in range(90)]
    records = [irflow.Record(f"a{i}", "text", t) for i, t in enumerate(texts)]
    corpus = irflow.build(records[:30], embedder=None)
    corpus.add(records[30:60])
    corpus.add(records[60:])
    corpus.delete([corpus.record_ids[3], corpus.record_ids[44]])
    assert len(corpus.segments) >= 2
    fresh = irflow.build([r for i, r in enumerate(records) if i not in (3, 44)], embedder=None)
    queries = [["w1", "w2"], ["w3"], ["w0", "w9", "w9"], [], ["w5", "w11"], ["w4", "w4", "w6"], ["w8"]]
    scans = []
    scan = compiled.topk_many
    monkeypatch.setattr(compiled, "topk_many", lambda *args: (scans.append(1), scan(*args))[1])
    for k in (1, 4, 50):
        alone = [corpus.bm25_topk([q], None, k).per_query(0) for q in queries]
        rebuilt = fresh.bm25_topk(queries, None, k)
        for threads in (1, 2):
            scans.clear()
            with limit_threads(threads):
                top = corpus.bm25_topk(queries, None, k)
            assert len(scans) >= len(corpus.segments)  # the batch path, segment by segment
            for i, want in enumerate(alone):
                assert same(top.per_query(i), want), (k, threads, i)
                # the fresh build's rows are numbered without the deleted records: compare ids and score bits
                rows, scores = top.per_query(i)
                fresh_rows, fresh_scores = rebuilt.per_query(i)
                assert corpus.record_ids[rows].tolist() == fresh.record_ids[fresh_rows].tolist()
                assert np.array_equal(scores.view(np.int64), fresh_scores.view(np.int64))
