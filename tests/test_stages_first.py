"""The first-stage kinds filter, dense and lexical over the Corpus facade (a numpy fake here)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25Okapi

from engine_fakes import FakeTopK, embed, fake_corpus, tokens
from irflow.engine.batches import QueryBatch, Scale
from irflow.engine import get_stage_class, StageContext
from irflow.engine.stage import stage_params
from irflow.stages._util import spread, unique_texts
from irflow.stages.dense import Dense
from irflow.stages.filter import Filter
from irflow.stages.lexical import Lexical


@pytest.fixture
def corpus():
    return fake_corpus()


def ctx(corpus, name, texts):
    return StageContext(corpus, name, QueryBatch.of(texts))


def test_kinds_are_registered_with_their_parameters():
    assert get_stage_class("filter") is Filter and get_stage_class("dense") is Dense
    assert list(stage_params(Dense)) == ["fetch_k", "subquery_fetch_k", "deepen_to", "lean"]
    assert list(stage_params(Lexical)) == ["fetch_k", "subquery_fetch_k", "bm25", "deepen_to", "lean"]
    assert stage_params(Filter)["surfaces"].doc


def test_filter_builds_one_mask(corpus):
    mask = Filter(filter={"owner": "psf"}, surfaces=["description"]).run(ctx(corpus, "f", ["q"]))
    assert np.flatnonzero(mask).tolist() == [5]
    assert Filter(surfaces="name").surfaces == ("name",)
    assert Filter().run(ctx(corpus, "f", ["q"])).all()
    with pytest.raises(ValueError, match="must be a list of strings"):
        Filter(surfaces=[1])
    with pytest.raises(ValueError, match="must be a table"):
        Filter(filter=["owner"])


def test_dense_is_exact_cosine_over_the_candidates(corpus):
    mask = corpus.candidate_mask(surfaces=["description"])
    texts = ["python http client", "sql parser"]
    out = Dense(fetch_k=3).run(ctx(corpus, "dense", texts), mask=mask, query=QueryBatch.of(texts))
    assert out.scale is Scale.COSINE and out.counts().tolist() == [3, 3]
    cosine = embed(texts) @ corpus.vectors.T
    for i in range(2):
        rows = np.flatnonzero(mask)
        expected = rows[np.argsort(-cosine[i, rows], kind="stable")][:3]
        assert out.per_query(i)[0].tolist() == expected.tolist()
        assert out.per_query(i)[1] == pytest.approx(cosine[i, expected])
    assert out.provenance["dense.score"].tolist() == out.score.tolist()
    assert out.provenance["dense.rank"].tolist() == [1, 2, 3, 1, 2, 3]


def test_lexical_is_bm25_over_the_candidates(corpus):
    mask = corpus.candidate_mask(surfaces=["description"])
    rows = np.flatnonzero(mask)
    out = Lexical(fetch_k=10, bm25={"k1": 1.2}).run(ctx(corpus, "lex", ["python parser"]), mask=mask,
                                                      query=QueryBatch.of(["python parser"]))
    bm = BM25Okapi([corpus.row_tokens[r] for r in rows], k1=1.2)
    scores = bm.get_scores(["python", "parser"])
    matched = [r for r, s in zip(rows, scores) if {"python", "parser"} & set(corpus.row_tokens[r])]
    assert sorted(out.row.tolist()) == sorted(matched)
    assert out.scale is Scale.BM25 and "lex.rank" in out.provenance
    with pytest.raises(ValueError, match="k2"):
        Lexical(bm25={"k2": 1})


def test_duplicate_texts_are_embedded_once_and_spread_back(corpus):
    texts = ["sql parser", "python", "sql parser", "sql parser"]
    batch = QueryBatch.of(texts)
    out = Dense(fetch_k=2).run(ctx(corpus, "dense", texts), mask=corpus.candidate_mask(), query=batch)
    assert corpus.embedded == [["sql parser", "python"]] and corpus.calls["dense"] == 1
    assert out.counts().tolist() == [2, 2, 2, 2]
    assert out.per_query(0)[0].tolist() == out.per_query(2)[0].tolist() == out.per_query(3)[0].tolist()
    lex = Lexical(fetch_k=2).run(ctx(corpus, "lexical", texts), mask=corpus.candidate_mask(), query=batch)
    assert corpus.calls["bm25"] == 1 and lex.per_query(0)[0].tolist() == lex.per_query(3)[0].tolist()


def test_no_candidates_or_no_queries_give_empty_channels(corpus):
    none = np.zeros(corpus.n_rows, bool)
    for stage, name in ((Dense(), "dense"), (Lexical(), "lexical")):
        out = stage.run(ctx(corpus, name, ["q"]), mask=none, query=QueryBatch.of(["q"]))
        assert len(out) == 0 and f"{name}.score" in out.provenance
        assert len(stage.run(ctx(corpus, name, []), mask=corpus.candidate_mask(), query=QueryBatch.of([]))) == 0
    assert corpus.calls["embed"] == 0 and corpus.calls["bm25"] == 0


def test_formulated_batches_keep_their_origin(corpus):
    batch = QueryBatch.of(["a"]).expand([["sql parser", "python"]])
    out = Dense(fetch_k=1).run(StageContext(corpus, "dense", QueryBatch.of(["a"])), mask=corpus.candidate_mask(),
                               query=batch)
    assert out.queries is batch and out.origin_index.tolist() == [0, 0]


def test_unique_texts():
    texts, inverse = unique_texts(["b", "a", "b", "c", "a"])
    assert texts == ["b", "a", "c"] and inverse.tolist() == [0, 1, 0, 2, 1]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=5), st.lists(st.integers(0, 3), min_size=5, max_size=5))
def test_spread_matches_a_python_loop(inverse, sizes):
    n_unique = max(inverse) + 1
    sizes = sizes[:n_unique]
    qi = np.repeat(np.arange(n_unique), sizes)
    rows = np.arange(qi.size) * 10
    top = FakeTopK(qi.astype(np.int32), rows, rows / 7.0, n_unique)
    got_q, got_rows, got_scores = spread(top, np.asarray(inverse))
    want_q = [i for i, u in enumerate(inverse) for _ in range(sizes[u])]
    want_rows = [r for u in inverse for r in rows[qi == u]]
    assert got_q.tolist() == want_q and got_rows.tolist() == want_rows
    assert got_scores.tolist() == pytest.approx([r / 7.0 for r in want_rows])


def test_tokens_helper():
    assert tokens("A b") == ["a", "b"]
