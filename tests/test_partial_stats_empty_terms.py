"""A term with no postings in a segment has document frequency 0 there, whatever was asked before.

A merged segment keeps the vocabulary of the rows it dropped, so a term may
have an empty postings range that starts where the next term's starts.
``partial_stats`` kept each term's df by that start offset, so an empty term
asked after its neighbour got the neighbour's df: the corpus's BM25 then
depended on the queries asked before (``tests/hostile_updates.py`` found it
through the rebuild oracle).
"""

from __future__ import annotations

import irflow
from irflow.kernels.bm25 import BM25Params
from irflow.store.mergepolicy import MergePolicy


def _topk(corpus, query: str) -> list:
    top = corpus.bm25_topk(corpus.tokenize_queries([query]), None, 10, BM25Params(stats="candidates"))
    return list(zip(corpus.record_ids_of(top.row).tolist(), [s.hex() for s in top.score.tolist()]))


def test_an_empty_term_after_its_neighbour_was_asked_counts_zero():
    corpus = irflow.build([irflow.Record("a", "name", "alpha beta"), irflow.Record("b", "name", "beta gamma"),
                           irflow.Record("c", "name", "gamma delta"), irflow.Record("d", "name", "delta epsilon")],
                          embedder=None, analyzer="plain")
    corpus.merge_policy = MergePolicy.never()
    corpus.add([irflow.Record("e", "name", "beta zeta")])
    corpus.delete([corpus.store.ledger["a"][0]])  # 'alpha' was only there
    corpus.compact()  # one merged segment: 'alpha' in its vocabulary, with no postings
    corpus.delete([corpus.store.ledger["c"][0]])  # a tombstone: statistics over a row mask
    corpus.add([irflow.Record("f", "name", "alpha omega"), irflow.Record("g", "name", "alpha beta omega")])
    merged = corpus.snapshot().parts[0].postings
    term = merged.vocab["alpha"]
    assert merged.term_offsets[term] == merged.term_offsets[term + 1]  # the case: an empty term
    fresh = irflow.build(list(corpus), embedder=None, analyzer="plain")
    for query in ("beta gamma", "alpha", "alpha beta"):  # its neighbour first, then the empty term
        assert _topk(corpus, query) == _topk(fresh, query), query

