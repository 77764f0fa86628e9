"""Every rule of issue 4 §1 for search(), each against an independent expectation.

Expectations come from numpy cosine over the corpus vectors, rank_bm25 over
the candidates' tokens and hand computations (tests/search_reference.py),
never from the engine's own stages.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from irflow.engine.batches import Candidates
from irflow.store.corpus import build
from irflow.errors import FilterError
from irflow.engine.recipe import load_recipe
from irflow.api.retrieve import SearchError, dependency_evidence_boost, search
from search_reference import (
    artifact_text,
    candidate_rows,
    collapse,
    dense_channel,
    fuse,
    lexical_channel,
    records,
    reference_search,
)

Q = "fast python parser"


def ids(hits):
    return [h.record_id for h in hits]


def pairs_to_ids(corpus, pairs):
    return [corpus.record(row).id for row, _ in pairs]


def scores(pairs):
    return [s for _, s in pairs]


# -- candidates ------------------------------------------------------------------------------


def test_filter_and_surfaces_make_one_candidate_set_shared_by_both_channels(corpus):
    flt, surfaces = {"tags": "parsing"}, ["description", "readme_chunk"]
    result = load_recipe("search").run(corpus, Q, mode="hybrid", filter=flt, surfaces=surfaces)
    allowed = set(candidate_rows(corpus, flt, surfaces))
    assert set(result.output("dense").row.tolist()) == allowed  # fetch 50 >= every candidate
    lexical = lexical_channel(corpus, Q, sorted(allowed), 50, None)
    assert result.output("lexical").row.tolist() == [row for row, _ in lexical]
    assert all(h.surface_kind in surfaces and "parsing" in h.metadata["tags"] for h in result.hits)


@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
def test_no_candidates_give_no_hits(corpus, mode):
    assert search(corpus, Q, mode=mode, filter={"owner": "nobody"}) == []
    assert search(corpus, Q, mode=mode, surfaces=["deps"], filter={"owner": "nobody"}) == []
    with pytest.raises(FilterError, match="holds no surface kind 'no_such_kind'"):  # a typo is not "no candidates"
        search(corpus, Q, mode=mode, surfaces=["no_such_kind"])
    assert search(corpus, Q, mode=mode, filter={"owner": "nobody"}, rerank=lambda q, s: [1.0] * len(s),
                  formulate=lambda q: [q, "graph"], dep_boost=lambda hit: 1.0, surface_weights={"name": 2}) == []


def test_lexical_without_a_matching_token_gives_no_hits(corpus):
    assert search(corpus, "zzzz qqqq", mode="lexical") == []


# -- the fetch depth -------------------------------------------------------------------------


@pytest.mark.parametrize("params, fetch", [
    ({"k": 3}, 50), ({"k": 12}, 60), ({"k": 3, "fetch_k": 7}, 7), ({"k": 3, "per_artifact": False}, 3),
    ({"k": 3, "per_artifact": False, "rerank": lambda q, s: [0] * len(s)}, 50),
    ({"k": 3, "per_artifact": False, "surface_weights": {"deps": 2.0}}, 50),
    ({"k": 3, "per_artifact": False, "dep_boost": lambda hit: 0.0}, 50),
    ({"k": 3, "per_artifact": False, "fetch_k": 5, "rerank": lambda q, s: [0] * len(s)}, 5),
])
def test_fetch_is_fetch_k_else_over_fetch_when_collapsing_reranking_weighing_or_boosting(corpus, params, fetch):
    result = load_recipe("search").run(corpus, Q, **params)
    assert result.params["fetch_k"] == fetch
    assert len(result.output("dense")) == min(fetch, corpus.n_rows)


# -- channels --------------------------------------------------------------------------------


def test_dense_is_the_top_fetch_by_cosine(corpus):
    rows = candidate_rows(corpus, None, None)
    expected = dense_channel(corpus, Q, rows, 6)
    got = load_recipe("search").run(corpus, Q, k=2, fetch_k=6).output("dense")
    assert got.row.tolist() == [row for row, _ in expected]
    assert got.score.tolist() == pytest.approx(scores(expected), abs=1e-6)


@pytest.mark.parametrize("bm25", [None, {"k1": 1.2, "b": 0.5}, {"epsilon": 0.9}])
def test_lexical_is_bm25_over_the_candidates_with_candidate_statistics(corpus, bm25):
    flt = {"owner": {"$ne": "bob"}}
    rows = candidate_rows(corpus, flt, None)  # statistics over these rows, not the corpus
    expected = lexical_channel(corpus, Q, rows, 50, bm25)
    got = load_recipe("search").run(corpus, Q, mode="lexical", filter=flt, bm25=bm25).output("lexical")
    assert got.row.tolist() == [row for row, _ in expected]
    assert got.score.tolist() == pytest.approx(scores(expected), rel=1e-9)
    tokens = set(corpus.tokenizer(Q))
    assert all(tokens & set(corpus.tokenizer(corpus.record(r).text)) for r in got.row.tolist())


@pytest.mark.parametrize("fusion", ["rrf", "blend"])
def test_hybrid_fuses_each_channels_own_top_fetch(corpus, fusion):
    rows = candidate_rows(corpus, None, None)
    dense, lexical = dense_channel(corpus, Q, rows, 5), lexical_channel(corpus, Q, rows, 5, None)
    fused = fuse(dense, lexical, fusion, 60, 0.3, 4.0)
    result = load_recipe("search").run(corpus, Q, mode="hybrid", fusion=fusion, fetch_k=5, alpha=0.3,
                                       bm25_sat_k=4.0, per_artifact=False, k=10)
    assert result.output("fuse").row.tolist() == [row for row, _ in fused]
    assert ids(result.hits) == pairs_to_ids(corpus, fused[:5])  # the union cut to fetch, then k
    assert [h.score for h in result.hits] == pytest.approx(scores(fused[:5]), abs=1e-6)


def test_rrf_sums_reciprocal_ranks_by_hand(corpus):
    rows = candidate_rows(corpus, None, None)
    dense, lexical = dense_channel(corpus, Q, rows, 4), lexical_channel(corpus, Q, rows, 4, None)
    expected = {}
    for channel in (dense, lexical):
        for rank, (row, _) in enumerate(channel, start=1):
            expected[row] = expected.get(row, 0.0) + 1.0 / (10 + rank)
    fused = load_recipe("search").run(corpus, Q, mode="hybrid", fetch_k=4, rrf_k=10).output("fuse")
    assert dict(zip(fused.row.tolist(), fused.score.tolist())) == pytest.approx(expected, rel=1e-12)


def test_an_empty_lexical_channel_lets_the_dense_ranking_pass_with_cosine_scores(corpus):
    query = "zzzz qqqq"  # no token in the corpus
    for fusion in ("rrf", "blend"):
        got = search(corpus, query, mode="hybrid", fusion=fusion, per_artifact=False, k=5)
        expected = dense_channel(corpus, query, candidate_rows(corpus, None, None), 5)
        assert ids(got) == pairs_to_ids(corpus, expected)
        assert [h.score for h in got] == pytest.approx(scores(expected), abs=1e-6)


def test_blend_with_an_empty_dense_channel_keeps_raw_bm25(corpus):
    recipe = load_recipe("search")
    empty = Candidates.empty(recipe.run(corpus, Q, mode="dense").output("dense").queries, "cosine")
    result = recipe.run(corpus, Q, mode="hybrid", fusion="blend", per_artifact=False, k=5, overrides={"dense": empty})
    expected = lexical_channel(corpus, Q, candidate_rows(corpus, None, None), 5, None)
    assert ids(result.hits) == pairs_to_ids(corpus, expected)
    assert [h.score for h in result.hits] == pytest.approx(scores(expected), rel=1e-9)


# -- surface weights --------------------------------------------------------------------------


def test_surface_weights_multiply_the_fused_score_and_reorder_the_union_before_the_cut(corpus):
    weights = {"deps": 3.0, "name": 0.25}
    rows = candidate_rows(corpus, None, None)
    fused = fuse(dense_channel(corpus, Q, rows, 4), lexical_channel(corpus, Q, rows, 4, None), "rrf", 60, .5, 8.)
    weighted = sorted(((r, s * weights.get(corpus.record(r).surface_kind, 1.0)) for r, s in fused),
                      key=lambda pair: -pair[1])[:4]
    got = search(corpus, Q, mode="hybrid", fetch_k=4, per_artifact=False, surface_weights=weights)
    assert ids(got) == pairs_to_ids(corpus, weighted)
    assert [h.score for h in got] == pytest.approx(scores(weighted), rel=1e-12)


def test_weights_of_kinds_the_corpus_lacks_are_ignored(corpus):
    plain = search(corpus, Q, mode="lexical", fetch_k=50)
    assert search(corpus, Q, mode="lexical", fetch_k=50, surface_weights={"no_such_kind": 7.0}) == plain


@pytest.mark.parametrize("weights", [{"deps": -1.0}, {"deps": math.nan}, {"deps": math.inf}, {"deps": "2"},
                                     {"deps": True}, ["deps"], {1: 2.0}])
def test_weights_must_be_finite_and_non_negative(corpus, weights):
    with pytest.raises(ValueError, match="surface_weights"):
        search(corpus, Q, surface_weights=weights)
    with pytest.raises(ValueError, match=r"surface_weights=.*\(read by stage weight\)"):
        load_recipe("search").run(corpus, Q, surface_weights=weights)


def test_formulated_sub_searches_inherit_the_weights(corpus):
    weights = {"deps": 4.0}
    got = search(corpus, Q, surface_weights=weights, formulate=lambda q: [q, "networkx graph"], k=6)
    pool = [(h.record_id, h.score) for text in (Q, "networkx graph")
            for h in search(corpus, text, surface_weights=weights, per_artifact=False, k=6)]
    best = {}
    for record_id, score in pool:
        artifact = corpus.record(corpus.row_of(record_id)).artifact_id
        if artifact not in best or score > best[artifact][1]:
            best[artifact] = (record_id, score)
    expected = sorted(best.values(), key=lambda pair: -pair[1])[:6]
    assert ids(got) == [record_id for record_id, _ in expected]
    # a batch of texts is one float32 matrix product: scores agree with single searches to ~1e-7
    assert [h.score for h in got] == pytest.approx([score for _, score in expected], abs=1e-6)


# -- rerank -----------------------------------------------------------------------------------


class Recording:
    """A reranker that records its calls and scores by text length."""

    def __init__(self):
        self.calls = []

    def __call__(self, query, segments):
        self.calls.append((query, [dict(s) for s in segments]))
        return [float(len(s["text"])) for s in segments]


def test_the_reranker_is_called_once_with_the_documented_segments(corpus):
    reranker = Recording()
    got = search(corpus, Q, mode="hybrid", rerank=reranker, fetch_k=6, per_artifact=False)
    assert len(reranker.calls) == 1
    query, segments = reranker.calls[0]
    assert query == Q
    rows = candidate_rows(corpus, None, None)
    fused = fuse(dense_channel(corpus, Q, rows, 6), lexical_channel(corpus, Q, rows, 6, None), "rrf", 60, .5, 8.)[:6]
    assert [set(s) for s in segments] == [{"text", "id", "metadata"}] * 6  # the full list, up to fetch
    assert [s["id"] for s in segments] == pairs_to_ids(corpus, fused)
    assert [s["text"] for s in segments] == [corpus.record(r).text for r, _ in fused]
    assert [s["metadata"] for s in segments] == [corpus.record(r).metadata for r, _ in fused]
    # its score replaces the candidate score; equal lengths keep the first-stage order (a stable sort)
    expected = sorted(((r, float(len(corpus.record(r).text))) for r, _ in fused), key=lambda p: -p[1])
    assert [(h.record_id, h.score) for h in got] == list(zip(pairs_to_ids(corpus, expected), scores(expected)))


def test_a_constant_reranker_keeps_the_first_stage_order(corpus):
    # every fetched surface ties at 0.5: the ties keep their incoming order (the seed's rerank), so each
    # artifact is represented by its best first-stage surface and the hits come in first-stage order
    first = search(corpus, Q, fetch_k=50)
    got = search(corpus, Q, fetch_k=50, rerank=lambda q, s: [0.5] * len(s))
    assert ids(got) == ids(first) and {h.score for h in got} == {0.5}


def test_rerank_text_artifact_joins_the_siblings_in_plan_order_and_is_truncated(corpus):
    reranker = Recording()
    search(corpus, Q, rerank=reranker, rerank_text="artifact", rerank_max_chars=40, fetch_k=5)
    segments = reranker.calls[0][1]
    for s in segments:
        artifact = corpus.record(corpus.row_of(s["id"])).artifact_id
        assert s["text"] == artifact_text(corpus, artifact)[:40]
    assert any("\n" in s["text"] for s in segments)


def test_rerank_text_callable_gets_corpus_and_metadata(corpus):
    reranker, seen = Recording(), []

    def text(c, meta):
        seen.append(c)
        return f"{meta['owner']} owns it " * 20

    search(corpus, Q, rerank=reranker, rerank_text=text, rerank_max_chars=15, fetch_k=3)
    assert seen and all(c is corpus for c in seen)
    assert [s["text"] for s in reranker.calls[0][1]] == [
        (f"{s['metadata']['owner']} owns it " * 20)[:15] for s in reranker.calls[0][1]]


def test_the_reranker_sees_each_formulated_sub_query(corpus):
    reranker = Recording()
    search(corpus, Q, rerank=reranker, formulate=lambda q: [q, "graph queue"])
    assert [query for query, _ in reranker.calls] == [Q, "graph queue"]


# -- boost, collapse ---------------------------------------------------------------------------


def test_dep_boost_is_added_after_the_reranker_before_the_collapse(corpus):
    boost = dependency_evidence_boost({"networkx"}, weight=0.5)
    got = search(corpus, Q, rerank=lambda q, s: [1.0] * len(s), dep_boost=boost, fetch_k=50, k=12)
    for hit in got:
        assert hit.score == pytest.approx(1.0 + (0.5 if any("networkx" in d for d in hit.metadata["deps"]) else 0))
    # the collapse came after: an artifact depending on networkx ranks above every artifact that does not
    boosted = [h.score > 1.0 for h in got]
    assert boosted == sorted(boosted, reverse=True) and any(boosted) and not all(boosted)


def test_per_artifact_keeps_the_best_surface_per_artifact_then_cuts_to_k(corpus):
    rows = candidate_rows(corpus, None, None)
    lexical = lexical_channel(corpus, Q, rows, 50, None)
    got = search(corpus, Q, mode="lexical", k=4)
    assert ids(got) == pairs_to_ids(corpus, collapse(corpus, lexical, True, 4))
    assert len({h.artifact_id for h in got}) == 4
    records = search(corpus, Q, mode="lexical", k=4, per_artifact=False)
    assert ids(records) == pairs_to_ids(corpus, lexical[:4])


def test_a_tie_between_surfaces_goes_to_the_earlier_ranked_one(corpus):
    # a constant reranker ties every surface: the first-stage order decides, not the corpus row
    first = search(corpus, Q, mode="lexical", per_artifact=False, k=50, fetch_k=50)
    got = search(corpus, Q, mode="lexical", fetch_k=50, k=50, rerank=lambda q, s: [1.0] * len(s))
    rows: dict[str, list[int]] = {}
    for hit in first:
        rows.setdefault(hit.artifact_id, []).append(corpus.row_of(hit.record_id))
    assert ids(got) == [corpus.record(r[0]).id for r in rows.values()]  # each artifact's first, in order
    # the first stage ranks some artifact's surfaces out of row order, so the rule shows
    assert any(r != sorted(r) for r in rows.values())


# -- formulate ---------------------------------------------------------------------------------


def test_formulate_returning_one_text_replaces_the_query(corpus):
    for out in ("graph network", ["graph network"], ["graph network", "", "   "]):
        got = search(corpus, Q, mode="hybrid", formulate=lambda q, out=out: out)
        assert got == search(corpus, "graph network", mode="hybrid")


def test_formulate_leaving_nothing_keeps_the_original_query(corpus):
    for out in ("", "  ", [], ["", "\t"]):
        assert search(corpus, Q, formulate=lambda q, out=out: out) == search(corpus, Q)


@pytest.mark.parametrize("per_artifact", [True, False])
@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_several_texts_run_sub_searches_whose_union_collapses(corpus, mode, per_artifact):
    texts = [Q, "graph queue", "sql schema"]
    got = search(corpus, Q, mode=mode, per_artifact=per_artifact, k=5, formulate=lambda q: texts)
    # each text: the whole path with per_artifact=False (its own fetch rule), cut to k
    pool = [(corpus.row_of(h.record_id), h.score) for t in texts
            for h in search(corpus, t, mode=mode, per_artifact=False, k=5)]
    expected = collapse(corpus, pool, per_artifact, 5)
    assert ids(got) == pairs_to_ids(corpus, expected)
    assert [h.score for h in got] == pytest.approx(scores(expected), abs=1e-6)  # float32 batch vs single
    reference = reference_search(corpus, Q, mode=mode, per_artifact=per_artifact, k=5, formulate=lambda q: texts)
    assert ids(got) == ids(reference)


def test_formulate_is_given_the_query_and_may_come_from_the_registry(corpus):
    import irflow.engine.registry as registry

    seen = []
    with registry.registered("two_ways", lambda q: seen.append(q) or [q, q.upper()]):
        got = load_recipe("search").run(corpus, Q, formulate="two_ways").hits
    assert seen == [Q] and got == search(corpus, Q, formulate=lambda q: [q, q.upper()])


# -- errors, hit fields --------------------------------------------------------------------------


def test_unknown_mode_or_fusion_lists_the_choices(corpus):
    with pytest.raises(SearchError, match=r"unknown mode 'hybird'; valid modes: dense, lexical, hybrid"):
        search(corpus, Q, mode="hybird")
    for mode in ("dense", "lexical", "hybrid"):  # fusion is checked even where it is not used
        with pytest.raises(ValueError, match=r"unknown fusion 'rff'; valid fusions: rrf, blend"):
            search(corpus, Q, mode=mode, fusion="rff")
    with pytest.raises(ValueError, match=r"fusion='rff': must be one of 'rrf', 'blend'; did you mean fusion='rrf'\?"):
        load_recipe("search").run(corpus, Q, fusion="rff")


def test_every_hit_carries_source_surface_index_and_record_id(corpus):
    for hit in search(corpus, Q, mode="hybrid", k=8):
        record = corpus.record(corpus.row_of(hit.record_id))
        assert hit.source == "toys"
        assert (hit.surface_index, hit.artifact_id, hit.surface_kind, hit.text) == (
            record.surface_index, record.artifact_id, record.surface_kind, record.text)
    unnamed = build(records()[:6], embedder="hash")
    hits = search(unnamed, Q, mode="hybrid")
    assert hits and all(h.source is None and h.record_id and h.surface_index is not None for h in hits)
    assert np.all([isinstance(h.surface_index, int) for h in hits])
