"""A filter's rows gathered once (irflow.store.gathered): the same answers to the bit, within a budget."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import irflow
from irflow.kernels.dense import dense_topk
from irflow.store.gathered import GatheredVectors


def _unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    matrix = rng.standard_normal((n, d)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix


@settings(max_examples=120, deadline=None)
@given(n=st.integers(1, 300), d=st.integers(1, 16), q=st.integers(1, 6), k=st.integers(1, 60),
       keep=st.floats(0.0, 1.0), ties=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_gathered_rows_give_the_rows_and_bits_of_the_mask(n, d, q, k, keep, ties, seed):
    rng = np.random.default_rng(seed)
    # small integers make real ties (every product exact in float32); normal rows make near-ties
    matrix = rng.integers(-2, 3, (n, d)).astype(np.float32) if ties else _unit_rows(rng, n, d)
    queries = rng.integers(-2, 3, (q, d)).astype(np.float32) if ties else _unit_rows(rng, q, d)
    mask = rng.random(n) < keep
    rows = np.flatnonzero(mask)
    want = dense_topk(matrix, queries, mask, k)
    got = dense_topk(matrix, queries, mask, k, gathered=(rows, matrix[rows]))
    assert got.query_index.tolist() == want.query_index.tolist()
    assert got.row.tolist() == want.row.tolist()
    assert got.score.tobytes() == want.score.tobytes()
    for i in range(q):  # each query alone, with the same gathered rows: the same bits as in the batch
        alone = dense_topk(matrix, queries[i], mask, k, gathered=(rows, matrix[rows]))
        assert alone.score.tobytes() == got.per_query(i)[1].tobytes()


@pytest.fixture
def filtered_corpus():
    rng = np.random.default_rng(7)
    vectors = _unit_rows(rng, 2000, 24)
    records = [irflow.Record(f"a{i}", "text", f"record {i}", {"group": i % 50}, id=f"r{i}", vector=vectors[i])
               for i in range(2000)]
    corpus = irflow.build(records, embedder="hash:24")
    assert np.allclose(corpus.vectors, vectors, atol=1e-6)  # the records' own vectors (normalized again)
    return corpus, np.array(corpus.vectors)


def test_a_filter_used_again_is_scored_from_its_kept_rows_with_the_same_answer(filtered_corpus):
    corpus, vectors = filtered_corpus
    mask = corpus.candidate_mask({"group": 3})
    queries = _unit_rows(np.random.default_rng(1), 5, 24)
    want = dense_topk(vectors, queries, np.asarray(mask), 10)  # the kernel alone, no kept rows
    first = corpus.dense_topk(queries, mask, 10)
    assert len(corpus._gathered) == 1 and corpus._gathered.nbytes == 40 * (24 * 4 + 8)  # 2 % of the rows kept
    second = corpus.dense_topk(queries, mask, 10)
    for got in (first, second):
        assert got.row.tolist() == want.row.tolist()
        assert got.score.tobytes() == want.score.tobytes()
    assert len(corpus._gathered) == 1  # found again, not gathered twice
    hits = irflow.search(corpus, "anything", filter={"group": 3}, k=5)
    assert {hit.metadata["group"] for hit in hits} == {3}


def test_a_wide_filter_or_no_filter_keeps_nothing(filtered_corpus):
    corpus, _ = filtered_corpus
    queries = _unit_rows(np.random.default_rng(2), 1, 24)
    corpus.dense_topk(queries, None, 10)
    corpus.dense_topk(queries, corpus.candidate_mask({"group": {"$lt": 40}}), 10)  # 80 % of the rows
    assert corpus._gathered.nbytes == 0
    corpus.dense_topk(queries, np.ones(2000, bool), 10)  # the caller's own array: not the corpus's, not kept
    assert corpus._gathered.nbytes == 0


def test_after_a_delete_the_old_rows_are_not_used(filtered_corpus):
    corpus, _ = filtered_corpus
    queries = _unit_rows(np.random.default_rng(3), 1, 24)
    before = corpus.dense_topk(queries, corpus.candidate_mask({"group": 5}), 40)
    assert before.row.size == 40
    corpus.store.delete_record(f"r{int(before.row[0])}")
    after = corpus.dense_topk(queries, corpus.candidate_mask({"group": 5}), 40)
    assert int(before.row[0]) not in after.row.tolist()
    assert after.row.tolist() == before.row.tolist()[1:]


def test_the_budget_drops_the_least_recently_used_and_refuses_what_is_too_large():
    matrix = np.ones((100, 10), dtype=np.float32)  # 40 bytes a row, and 8 for its row number
    kept = GatheredVectors(budget=2000)
    masks = [np.zeros(100, bool) for _ in range(3)]
    for i, mask in enumerate(masks):
        mask[i * 20:i * 20 + 20] = True  # 20 rows: 960 bytes each
    for mask in masks:
        assert kept.get(mask, matrix) is not None
    assert len(kept) == 2 and kept.nbytes == 1920  # the first one dropped past 2000 bytes
    big = np.zeros(100, bool)
    big[:30] = True  # 1440 bytes: more than half the budget
    assert kept.get(big, matrix) is None and kept.nbytes == 1920
    kept.discard(masks[1])
    assert len(kept) == 2 and kept.nbytes == 960  # masks[2] and the refused one remain
    kept.discard(masks[1].copy())  # an equal mask is another mask: nothing more goes
    assert kept.nbytes == 960
    assert kept.get(masks[2], matrix, max_fraction=0.1)[0].size == 20  # kept already: found, whatever the limit
    assert kept.get(np.ones(100, bool), matrix, max_fraction=0.2) is None


def test_what_was_kept_for_a_mask_goes_when_the_corpus_drops_the_mask(filtered_corpus, monkeypatch):
    from irflow.store import masks as masks_module

    corpus, _ = filtered_corpus
    queries = _unit_rows(np.random.default_rng(4), 1, 24)
    corpus.dense_topk(queries, corpus.candidate_mask({"group": 1}), 10)
    assert len(corpus._gathered) == 1
    corpus.store.delete_record("r1")  # a delete: the next mask request clears the old masks
    corpus.dense_topk(queries, corpus.candidate_mask({"group": 2}), 10)
    assert len(corpus._gathered) == 1  # group 1's rows went with its mask; group 2's were kept
    monkeypatch.setattr(masks_module, "MASK_CACHE_SIZE", 2)
    for group in (3, 4, 5):
        corpus.dense_topk(queries, corpus.candidate_mask({"group": group}), 10)
    assert len(corpus._gathered) == 2  # masks evicted from the corpus's cache took their rows along
