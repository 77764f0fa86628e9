"""Which mask reaches the BM25 kernel from a corpus, and what a query costs besides the kernel.

``search(mode="lexical")`` without a filter passes the filter stage's mask of
every live row; the kernel has a faster unmasked path, so the corpus must
recognise that mask (by identity, in O(1)) and pass None — and still pass the
live rows once something is deleted.  No query may count the live rows or
digest its mask again: both are O(rows) per query at 1M records.
"""

from __future__ import annotations

import numpy as np
import pytest

import irflow
from irflow.kernels import bm25 as bm25_module
from irflow.kernels.bm25 import BM25Params
from irflow.store.corpus import build
from irflow.kernels.postings import Postings
from irflow.store.records import Record
from irflow.store.record_store import CorpusStore


def _records(n: int = 60) -> list[Record]:
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
    return [Record(f"a{i}", "text", " ".join(words[(i * j) % 6] for j in range(1, 2 + i % 5)),
                   {"group": i % 3, "all": 1}) for i in range(n)]


@pytest.fixture
def corpus():
    return build(_records(), embedder=None, analyzer="plain")


@pytest.fixture
def kernel_masks(monkeypatch):
    """The ``mask`` and ``corpus_mask`` every call of the kernel received."""
    seen: list[tuple] = []
    original = bm25_module.bm25_topk

    def spy(postings, tokens, mask, fetch_k, params=BM25Params(), **kwargs):
        seen.append((mask, kwargs.get("corpus_mask")))
        return original(postings, tokens, mask, fetch_k, params, **kwargs)

    monkeypatch.setattr(bm25_module, "bm25_topk", spy)
    return seen


def test_search_without_filter_takes_the_unmasked_kernel(corpus, kernel_masks) -> None:
    hits = irflow.search(corpus, "alpha beta", mode="lexical", k=5)
    assert hits and kernel_masks == [(None, None)]
    # a filter every record passes selects every live row too
    kernel_masks.clear()
    assert irflow.search(corpus, "alpha beta", mode="lexical", k=5, filter={"all": 1}) == hits
    assert kernel_masks == [(None, None)]
    # a real filter keeps its mask
    kernel_masks.clear()
    irflow.search(corpus, "alpha beta", mode="lexical", k=5, filter={"group": 1})
    (mask, corpus_mask), = kernel_masks
    assert mask is not None and mask.sum() == 20 and corpus_mask is None


def test_after_a_delete_the_live_rows_are_the_mask_and_old_masks_lose_the_deleted_row(corpus, kernel_masks) -> None:
    everything = corpus.candidate_mask()
    group = corpus.candidate_mask({"group": 0})
    corpus.store.delete_record(corpus.record_ids[0])  # row 0 is in group 0
    top = corpus.bm25_topk([["alpha"]], everything, 100)
    assert 0 not in top.row.tolist()
    mask, corpus_mask = kernel_masks[-1]
    assert corpus_mask is not None and not corpus_mask[0] and corpus_mask.sum() == 59
    assert not mask[0] and mask.sum() == 59
    top = corpus.bm25_topk([["alpha"]], group, 100)  # made before the delete: ANDed with the live rows
    assert 0 not in top.row.tolist()
    assert not kernel_masks[-1][0][0] and kernel_masks[-1][0].sum() == 19
    # a mask made after the delete is known again, and the whole-corpus one is the live rows
    kernel_masks.clear()
    corpus.bm25_topk([["alpha"]], corpus.candidate_mask(), 100)
    assert kernel_masks[-1][0] is kernel_masks[-1][1]


def test_a_query_does_not_count_live_rows_or_digest_its_mask(corpus, monkeypatch) -> None:
    masks = [corpus.candidate_mask(), corpus.candidate_mask({"group": 2})]
    for mask in masks:  # first queries: statistics and caches are made here
        corpus.bm25_topk([["alpha", "beta"]], mask, 5)
    want = [corpus.bm25_topk([["alpha", "beta"]], mask, 5) for mask in masks]

    def refuse(*args, **kwargs):
        raise AssertionError("O(rows) work per query")

    monkeypatch.setattr(CorpusStore, "__len__", refuse)
    monkeypatch.setattr(np, "packbits", refuse)  # the digest of a mask
    monkeypatch.setattr(np, "count_nonzero", refuse)
    for mask, expected in zip(masks, want):
        assert corpus.bm25_topk([["alpha", "beta"]], mask, 5) == expected


def test_remembered_masks_are_found_by_identity_not_by_content() -> None:
    postings = Postings.build([["a"], ["b"], ["a", "b"]])
    mask = np.array([True, False, True])
    mask.setflags(write=False)
    digest = postings.mask_digest(mask)
    postings.remember_mask(mask)
    assert postings.mask_digest(mask) == digest
    same_content = mask.copy()
    assert postings.mask_digest(same_content) == digest  # computed, equal
    other = np.array([False, True, True])
    assert postings.mask_digest(other) != digest
