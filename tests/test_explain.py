"""result.explain(hit): every stage's score and rank for one hit, checked against a hand computation."""

from __future__ import annotations

import json

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from irflow.store.corpus import Corpus, build
from irflow.errors import IrflowError
from irflow.engine.explain import Explanation, label_for
from irflow.engine.trace import NotInTrace, Trace

WORDS = ["parser", "http", "client", "graph", "sql", "async", "python", "fast", "json", "tool"]
QUERY = "python parser"


def _records() -> list[dict]:
    rng = np.random.default_rng(11)
    records = []
    for i in range(14):
        words = rng.choice(WORDS, size=5)
        records.append({"artifact_id": f"pkg{i}", "surface_kind": "name", "text": f"pkg{i} {words[0]}"})
        records.append({"artifact_id": f"pkg{i}", "surface_kind": "description", "text": " ".join(words)})
    return records


@pytest.fixture(scope="module")
def corpus():
    return build(_records(), embedder="hash", name="explaintest")


@pytest.fixture(scope="module")
def traced(corpus, hybrid):
    return hybrid.run(corpus, QUERY, k=3, rrf_k=10, trace=True)


def _ranks(rows: np.ndarray, scores: np.ndarray) -> dict[int, tuple[int, float]]:
    """row -> (rank, score): best score first, ties by row (the kernels' order)."""
    order = np.lexsort((rows, -scores))
    return {int(rows[i]): (rank, float(scores[i])) for rank, i in enumerate(order, start=1)}


def _channels(corpus, query: str) -> tuple[dict, dict]:
    rows = np.arange(corpus.n_rows)
    vectors = np.asarray(corpus.vectors, dtype=np.float64)
    qv = corpus.embed_queries([query])[0].astype(np.float64)
    dense = _ranks(rows, vectors @ qv)
    tokens = corpus.tokenize_queries([query])[0]
    docs = [corpus.analyzer(corpus.record(int(r)).text) for r in rows]
    bm25 = np.asarray(BM25Okapi(docs).get_scores(tokens), dtype=np.float64)
    matched = np.array([bool(set(tokens) & set(doc)) for doc in docs])
    return dense, _ranks(rows[matched], bm25[matched])


def test_explain_tells_each_channel_and_the_rrf_contribution_by_hand(corpus, traced):
    hit = traced.hits[0]
    why = traced.explain(hit)
    assert isinstance(why, Explanation) and why.traced
    assert (why.record_id, why.artifact_id, why.surface_kind) == (hit.record_id, hit.artifact_id, hit.surface_kind)
    assert why.rank == 1 and why.score == hit.score and why.query == QUERY and why.scale == "rrf"
    row = corpus.row_of(hit.record_id)
    dense, lexical = _channels(corpus, QUERY)
    d_rank, d_score = dense[row]
    l_rank, l_score = lexical[row]
    assert why.step("dense").rank == d_rank == why.value("dense.rank") == why.value("fuse.dense.rank")
    assert why.step("dense").score == pytest.approx(d_score, abs=1e-5) and why.step("dense").scale == "cosine"
    assert why.value("dense.score") == pytest.approx(d_score, abs=1e-5)
    assert why.step("lexical").rank == l_rank == why.value("lexical.rank")
    assert why.value("lexical.score") == pytest.approx(l_score, rel=1e-9) and why.step("lexical").scale == "bm25"
    assert why.value("fuse.dense.contribution") == pytest.approx(1 / (10 + d_rank))
    assert why.value("fuse.lexical.contribution") == pytest.approx(1 / (10 + l_rank))
    assert why.step("fuse").score == pytest.approx(1 / (10 + d_rank) + 1 / (10 + l_rank))
    assert why.step("fuse").note == f"rrf = dense 1/(10+{d_rank}) + lexical 1/(10+{l_rank})"
    assert why.step("candidates").present is True and why.step("candidates").note == "in the candidate set"
    collapse = why.step("collapse")
    assert collapse.present and collapse.rank == 1 and collapse.note.startswith(f"kept: it represents artifact {hit.artifact_id}")
    assert [s.stage for s in why.steps] == ["candidates", "dense", "lexical", "fuse", "collapse"]


def test_explain_without_a_trace_reads_the_output_provenance(corpus, hybrid, traced):
    untraced = hybrid.run(corpus, QUERY, k=3, rrf_k=10)
    assert untraced.trace is None
    hit = untraced.hits[0]
    why = untraced.explain(hit)
    full = traced.explain(traced.hits[0])
    assert not why.traced and "trace=True" in why.notes[0]
    assert [s.stage for s in why.steps] == ["dense", "lexical", "fuse", "collapse"]
    for column in ("dense.score", "dense.rank", "lexical.score", "lexical.rank", "fuse.dense.contribution",
                   "fuse.lexical.contribution", "fuse.score", "collapse.merged"):
        assert why.value(column) == full.value(column)
    assert why.step("dense").rank == full.step("dense").rank and why.step("dense").present is True
    assert why.step("fuse").note == full.step("fuse").note  # rrf_k comes from the run's parameters
    assert why.rank == 1 and why.step("collapse").note.startswith("kept")


def test_explain_reruns_nothing(corpus, hybrid, monkeypatch):
    result = hybrid.run(corpus, QUERY, k=3)
    traced = hybrid.run(corpus, QUERY, k=3, trace=True)

    def forbidden(*args, **kwargs):
        raise AssertionError("explain re-ran a retrieval kernel")

    for name in ("embed_queries", "tokenize_queries", "dense_topk", "bm25_topk", "candidate_mask"):
        monkeypatch.setattr(Corpus, name, forbidden)
    assert result.explain(result.hits[0]).rank == 1
    assert traced.explain(traced.hits[1]).rank == 2


def test_a_hit_a_record_id_and_an_artifact_id_name_the_same_record(traced):
    hit = traced.hits[1]
    by_hit = traced.explain(hit).to_dict()
    assert traced.explain(hit.record_id).to_dict() == by_hit
    assert traced.explain(hit.artifact_id).to_dict() == by_hit


def test_a_surface_the_collapse_dropped_says_who_represents_its_artifact(corpus, hybrid, traced):
    hit = traced.hits[0]
    other = next(r for r in range(corpus.n_rows)
                 if corpus.artifact_ids[r] == hit.artifact_id and corpus.record_ids[r] != hit.record_id)
    why = traced.explain(corpus.record_ids[other])
    assert why.rank is None and why.score is None
    assert why.step("fuse").present is True
    collapse = why.step("collapse")
    assert collapse.present is False
    assert collapse.note == (f"not kept: artifact {hit.artifact_id} is represented by its {hit.surface_kind} "
                             f"surface (record {hit.record_id}, rank 1)")
    assert why.notes == ("not in the output: it left at stage 'collapse'",)
    assert "not in the output of 'collapse'" in why.table()
    untraced = hybrid.run(corpus, QUERY, k=3)
    with pytest.raises(IrflowError, match="run with trace=True"):
        untraced.explain(corpus.record_ids[other])


def test_explain_in_a_batch_finds_the_query_of_the_hit(corpus, hybrid):
    result = hybrid.run(corpus, [QUERY, "http client"], k=2, trace=True)
    hit = result.hits[1][0]
    why = result.explain(hit)
    assert why.query_index == 1 and why.query == "http client" and why.rank == 1
    assert result.explain(hit.record_id, query=1).to_dict() == why.to_dict()
    with pytest.raises(IrflowError, match="out of range"):
        result.explain(hit, query=2)
    with pytest.raises(NotInTrace, match="neither a record id nor an artifact id"):
        result.explain("no-such-thing")


def test_a_loaded_trace_explains_like_the_live_one(traced, tmp_path):
    loaded = Trace.load(traced.trace.dump(tmp_path / "run.jsonl"))
    for hit in traced.hits:
        assert loaded.explain(hit.record_id).to_dict() == traced.explain(hit).to_dict()


def test_a_passed_through_query_says_so(corpus, hybrid):
    result = hybrid.run(corpus, "zebra pkg3", k=2, trace=True)  # only pkg3's name matches lexically
    nothing = hybrid.run(corpus, "zebra", k=2, trace=True)  # no token matches: dense passes through
    why = nothing.explain(nothing.hits[0])
    assert why.value("fuse.passthrough") is True
    assert why.step("fuse").note.startswith("passed through unfused")
    assert why.step("lexical").note == "not among its candidates"
    assert result.explain(result.hits[0]).value("fuse.passthrough") is False


def test_blend_contributions(corpus, hybrid):
    result = hybrid.run(corpus, QUERY, k=2, fusion="blend", alpha=0.25, trace=True)
    why = result.explain(result.hits[0])
    cosine, bm25 = why.value("dense.score"), why.value("lexical.score")
    assert why.value("fuse.dense.contribution") == pytest.approx(0.25 * cosine)
    assert why.value("fuse.lexical.contribution") == pytest.approx(0.75 * bm25 / (bm25 + 8.0))
    assert why.step("fuse").score == pytest.approx(0.25 * cosine + 0.75 * bm25 / (bm25 + 8.0))
    assert why.step("fuse").note == "" and why.scale == "blend"


def test_rendering_and_dict(traced):
    why = traced.explain(traced.hits[0])
    text = str(why)
    assert text == why.table()
    for piece in ("candidates", "dense", "lexical", "fuse", "collapse", "cosine", "bm25 score",
                  "dense contribution", "lexical contribution", "fuse.lexical.contribution", "rrf = dense"):
        assert piece in text
    data = why.to_dict()
    json.dumps(data, allow_nan=False)
    assert data["steps"][1]["details"][0] == {"column": "dense.score", "label": "cosine",
                                              "value": why.value("dense.score")}
    with pytest.raises(KeyError, match="no provenance column 'x'"):
        why.value("x")
    with pytest.raises(KeyError, match="no step 'x'"):
        why.step("x")


def test_labels_are_friendly_for_known_columns_and_generic_otherwise():
    assert label_for("dense", "score") == "cosine"
    assert label_for("lexical", "score") == "bm25 score"
    assert label_for("rerank", "score") == "rerank score"
    assert label_for("weight", "factor") == "weight applied"
    assert label_for("boost", "value") == "boost"
    assert label_for("rerank", "input_rank") == "rank before this stage"
    assert label_for("fuse", "dense.contribution", ["dense", "lexical"]) == "dense contribution"
    assert label_for("collapse", "merged") == "entries merged into this hit"
    assert label_for("mystery", "odd_thing") == "odd thing"
