"""Ties break by corpus row everywhere: every stage that ranks orders equal scores by row, lowest first.

The property: on random corpora full of exact ties (duplicate texts give
equal cosines and equal BM25 scores; RRF gives equal fused scores to the
first of each channel; a coarse reranker and boost tie many candidates),
every stage output of every built-in recipe is ordered by (score desc,
row asc) within each query text, and so are the final hits.  The one
exception is by design: expand's output is in expansion order (artifacts by
their best hit, surfaces in plan order), re-sorted by the rerank after it.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from irflow.engine.batches import Candidates, QueryBatch
from irflow.engine.recipe import builtin_recipes, load_recipe
from irflow.store.corpus import build
from irflow.store.records import Record

TEXTS = ["sql parser", "fast sql parser", "http client", "graph tool", "parser", "sql parser tool", "json"]
KINDS = ["name", "description", "readme_chunk", "deps"]
QUERIES = ["sql parser", "parser tool", "http graph", "json fast"]


def coarse_reranker(query: str, segments: list[dict]) -> list[float]:
    """Query words found in the text: small integers, so many candidates tie."""
    words = set(query.split())
    return [float(len(words & set(s["text"].split()))) for s in segments]


def coarse_boost(hit) -> float:
    return 0.5 if hit.surface_kind == "deps" else 0.0


@st.composite
def corpora(draw):
    """Records of 2-5 artifacts, texts drawn from a small pool (many duplicates), rows in shuffled order."""
    out = []
    for a in range(draw(st.integers(2, 5))):
        for index in range(draw(st.integers(1, 4))):
            out.append(Record(f"a{a}", draw(st.sampled_from(KINDS)), draw(st.sampled_from(TEXTS)),
                              surface_index=index))
    return draw(st.permutations(out))


def params_for(name: str, draw) -> dict:
    params = draw(st.fixed_dictionaries({"k": st.integers(1, 4), "per_artifact": st.booleans()}))
    recipe = load_recipe(name)
    if "fusion" in recipe.params:
        params["fusion"] = draw(st.sampled_from(["rrf", "blend"]))
    if "mode" in recipe.params:
        params["mode"] = draw(st.sampled_from(["dense", "lexical", "hybrid"]))
    if "rerank" in recipe.params:
        params["rerank"] = draw(st.sampled_from([None, coarse_reranker])) if "expand" not in recipe.stages \
            else coarse_reranker  # without a reranker, expand's order reaches the collapse unsorted: by design
    if "dep_boost" in recipe.params:
        params["dep_boost"] = draw(st.sampled_from([None, coarse_boost]))
    if "surface_weights" in recipe.params:
        params["surface_weights"] = draw(st.sampled_from([None, {"name": 2.0, "deps": 0.5}]))
    if "formulate" in recipe.params:
        # sub-queries whose candidates tie across texts (the coarse reranker scores word overlap)
        params["formulate"] = draw(st.sampled_from([None, lambda q: [q, "parser"], lambda q: [q, "tool sql parser"]]))
    if "window" in recipe.params:
        params["window"] = draw(st.sampled_from([0, 1, None]))
    return params


def assert_ranked_by_score_then_row(candidates: Candidates, where: str) -> None:
    for i in range(candidates.n_queries):
        rows, scores = candidates.per_query(i)
        pairs = list(zip((-scores).tolist(), rows.tolist()))
        assert pairs == sorted(pairs), f"{where}, query text {i}: not ordered by (score desc, row asc): {pairs}"


@settings(max_examples=60, deadline=None)
@given(corpora(), st.data())
def test_every_stage_of_every_builtin_orders_equal_scores_by_row(records, data):
    corpus = build(records, embedder="hash", name="ties")
    queries = data.draw(st.lists(st.sampled_from(QUERIES), min_size=1, max_size=3))
    for name in builtin_recipes():
        recipe = load_recipe(name)
        params = params_for(name, data.draw)
        result = recipe.run(corpus, queries, trace=True, **params)
        for stage in result.trace.stages:
            output = result.output(stage)
            if isinstance(output, Candidates) and recipe.stages[stage].kind != "expand":
                assert_ranked_by_score_then_row(output, f"{name} {params} stage {stage!r}")
        for hits in result.hits:
            pairs = [(-h.score, corpus.row_of(h.record_id)) for h in hits]
            assert pairs == sorted(pairs), f"{name} {params}: hits"


def test_rrf_ties_at_the_top_go_by_row_through_to_the_hits():
    # dense ranks row 5 first, lexical row 3: both score 1/61, and row 3 comes first (not dense's, seen first)
    corpus = build([Record(f"a{i}", "name", f"text {i}", surface_index=0) for i in range(6)], embedder="hash")
    batch = QueryBatch.of(["anything"])
    dense = Candidates(batch, [0, 0], [5, 4], [0.9, 0.8], "cosine")
    lexical = Candidates(batch, [0, 0], [3, 1], [2.0, 1.0], "bm25")
    result = load_recipe("hybrid").run(corpus, "anything", fusion="rrf", trace=True,
                                       overrides={"dense": dense, "lexical": lexical})
    fused = result.output("fuse")
    assert fused.row.tolist()[:2] == [3, 5] and fused.score[0] == fused.score[1] == 1 / 61
    assert fused.row.tolist()[2:] == [1, 4] and fused.score[2] == fused.score[3] == 1 / 62
    assert [corpus.row_of(h.record_id) for h in result.hits] == [3, 5, 1, 4]
