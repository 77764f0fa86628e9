"""Ties, the seed's rule: a first ranking breaks them by corpus row, a stage that re-sorts keeps its input order.

- The kernels (the dense and lexical channels: first rankings) order equal
  scores by corpus row, lowest first.
- A stage that re-sorts what it received keeps the order it received among
  equal scores (a stable sort, as the seed's ``sorted`` and dicts do):
  weight, rerank and boost sort their input stably; fuse keeps first-seen
  order (inputs in port order, each in rank order); collapse keeps, per
  artifact, the highest score and on a tie the surface that came first in
  its input, and orders the survivors by score, equal scores in the order
  their artifact first appeared (``subquery_k`` cuts each sub-query's stable
  ranking first).

The properties, on random corpora full of exact ties (duplicate texts give
equal cosines and equal BM25 scores; RRF gives the first of each channel
1/(rrf_k + 1); a coarse reranker, ``rerank_text="artifact"`` (every surface
of an artifact judged on one text) and a coarse boost tie many candidates):
every stage output of every built-in recipe follows its rule, checked
against the very input the trace recorded for it; and ``search()`` equals
the plain-Python seed reference (``tests/search_reference.py``).  Expand is
not a re-sorting stage: its output is in expansion order.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from irflow.api.retrieve import search
from irflow.engine.batches import Candidates, QueryBatch
from irflow.engine.events import is_inactive
from irflow.engine.recipe import builtin_recipes, load_recipe
from irflow.store.corpus import build
from irflow.store.records import Record
from search_reference import reference_search

TEXTS = ["sql parser", "fast sql parser", "http client", "graph tool", "parser", "sql parser tool", "json"]
KINDS = ["name", "description", "readme_chunk", "deps"]
QUERIES = ["sql parser", "parser tool", "http graph", "json fast"]


def coarse_reranker(query: str, segments: list[dict]) -> list[float]:
    """Query words found in the text: small integers, so many candidates tie."""
    words = set(query.split())
    return [float(len(words & set(s["text"].split()))) for s in segments]


def coarse_boost(hit) -> float:
    return 0.5 if hit.surface_kind == "deps" else 0.0


def two_texts(q: str) -> list[str]:
    return [q, "parser"]


def three_words(q: str) -> list[str]:
    return [q, "tool sql parser"]


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
        params["rerank"] = draw(st.sampled_from([None, coarse_reranker]))
    if "rerank_text" in recipe.params:
        params["rerank_text"] = draw(st.sampled_from(["surface", "artifact"]))
    if "dep_boost" in recipe.params:
        params["dep_boost"] = draw(st.sampled_from([None, coarse_boost]))
    if "surface_weights" in recipe.params:
        params["surface_weights"] = draw(st.sampled_from([None, {"name": 2.0, "deps": 0.5}]))
    if "formulate" in recipe.params:
        # sub-queries whose candidates tie across texts (the coarse reranker scores word overlap)
        params["formulate"] = draw(st.sampled_from([None, two_texts, three_words]))
    if "window" in recipe.params:
        params["window"] = draw(st.sampled_from([0, 1, None]))
    return params


# -- each stage's rule, checked against the input the trace recorded ---------------------------


def _rows(batch: Candidates, i: int) -> list[int]:
    return batch.per_query(i)[0].tolist()


def _pairs(batch: Candidates, i: int) -> list[tuple[int, float]]:
    rows, scores = batch.per_query(i)
    return list(zip(rows.tolist(), scores.tolist()))


def check_first_ranking(output: Candidates, where: str) -> None:
    """dense, lexical: score descending, equal scores by corpus row, lowest first."""
    for i in range(output.n_queries):
        keys = [(-s, r) for r, s in _pairs(output, i)]
        assert keys == sorted(keys), f"{where}, text {i}: not ordered by (score desc, row asc): {keys}"


def check_stable(output: Candidates, inputs: list[Candidates], where: str) -> None:
    """Score descending, equal scores in first-seen order over ``inputs`` (in order, each in rank order)."""
    for i in range(output.n_queries):
        seen: dict[int, int] = {}
        for batch in inputs:
            for row in _rows(batch, i):
                seen.setdefault(row, len(seen))
        keys = [(-s, seen[r]) for r, s in _pairs(output, i)]
        assert keys == sorted(keys), f"{where}, text {i}: equal scores out of their input order: {keys}"


def reference_collapse(corpus, candidates: Candidates, k: int, per_artifact: bool,
                       subquery_k: int | None) -> list[list[tuple[int, float]]]:
    """The seed's collapse per original query: sub-searches cut stably, then a dict of best entries."""
    texts_of = [[i for i in range(candidates.n_queries) if candidates.queries.origin[i] == q]
                for q in range(candidates.queries.n_original)]
    out = []
    for texts in texts_of:
        pool: list[tuple[int, float]] = []
        for i in texts:
            entries = _pairs(candidates, i)
            if subquery_k is not None and len(texts) > 1:  # a sub-search: its best records, sorted stably
                entries = sorted(entries, key=lambda e: -e[1])[:subquery_k]
            pool.extend(entries)
        best: dict = {}
        for row, score in pool:
            key = corpus.record(row).artifact_id if per_artifact else row
            if key not in best or score > best[key][1]:  # a tie keeps the earlier entry
                best[key] = (row, score)
        out.append(sorted(best.values(), key=lambda e: -e[1])[:k])  # the dict keeps first-seen order
    return out


def check_stage(corpus, event, where: str) -> None:
    output = event.output
    if not isinstance(output, Candidates) or not output.active:
        return
    candidates = [(n, v) for n, v in event.inputs.items() if isinstance(v, Candidates) and not is_inactive(v)]
    if event.kind in ("dense", "lexical"):
        check_first_ranking(output, where)
    elif event.kind == "fuse":
        ordered = [event.inputs[n] for n in event.ports["inputs"] if not is_inactive(event.inputs[n])]
        check_stable(output, ordered, where)
    elif event.kind in ("weight", "rerank", "boost"):
        (_, before), = candidates
        if event.params[{"weight": "weights", "rerank": "reranker", "boost": "boost"}[event.kind]] is None:
            # nothing to re-score: the input passes through (weight: cut to fetch_k), in its own order
            assert all(_rows(before, i)[:len(_rows(output, i))] == _rows(output, i)
                       for i in range(output.n_queries)), where
        else:
            check_stable(output, [before], where)
    elif event.kind == "collapse":
        (_, before), = candidates
        p = event.params
        expected = reference_collapse(corpus, before, p["k"], p["per_artifact"], p["subquery_k"])
        assert [_pairs(output, q) for q in range(output.n_queries)] == expected, where


@settings(max_examples=40, deadline=None)
@given(corpora(), st.data())
def test_every_stage_of_every_builtin_follows_the_tie_rule(records, data):
    corpus = build(records, embedder="hash", name="ties")
    queries = data.draw(st.lists(st.sampled_from(QUERIES), min_size=1, max_size=3))
    for name in builtin_recipes():
        recipe = load_recipe(name)
        params = params_for(name, data.draw)
        result = recipe.run(corpus, queries, trace=True, **params)
        for event in result.trace:
            check_stage(corpus, event, f"{name} {params} stage {event.name!r} ({event.kind})")
        assert recipe.run(corpus, queries, **params).hits == result.hits  # the planned (untraced) path agrees


# -- search() equals the seed ------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(corpora(), st.data())
def test_search_equals_the_seed_reference_on_tie_heavy_corpora(records, data):
    corpus = build(records, embedder="hash", name="ties")
    query = data.draw(st.sampled_from(QUERIES))
    params = params_for("search", data.draw)
    params["fetch_k"] = data.draw(st.sampled_from([None, 2, 5]))
    got = search(corpus, query, **params)
    expected = reference_search(corpus, query, **params)
    assert [h.record_id for h in got] == [h.record_id for h in expected], params
    # the reference's cosine is numpy's over the stored float32 vectors: equal to float32 precision
    assert [h.score for h in got] == pytest.approx([h.score for h in expected], rel=1e-6, abs=1e-7)


# -- what the rule is for -----------------------------------------------------------------------


def _packages() -> list[Record]:
    # each artifact's name comes first (the lower row); its description is what matches "sql parser"
    return [Record("sqlparse", "name", "sqlparse", surface_index=0),
            Record("sqlparse", "description", "fast sql parser for python", surface_index=1),
            Record("httpx", "name", "httpx", surface_index=0),
            Record("httpx", "description", "http client", surface_index=1),
            Record("lark", "name", "lark", surface_index=0),
            Record("lark", "description", "parser toolkit", surface_index=1)]


def test_rerank_text_artifact_keeps_the_surface_that_matched():
    # rerank_text="artifact" judges every surface of an artifact on the same text, so they score the
    # same: the tie keeps the first-stage order and the collapse keeps the description that ranked
    # first, not the artifact's lowest row (its name, which does not match at all)
    corpus = build(_packages(), embedder="hash", name="packages")
    for mode in ("dense", "hybrid"):
        params = dict(mode=mode, rerank=coarse_reranker, rerank_text="artifact", k=3)
        result = load_recipe("search").run(corpus, "sql parser", trace=True, **params)
        first = result.output("weight")  # the first-stage ranking the reranker received
        assert [corpus.record(r).surface_kind for r in first.row[:1].tolist()] == ["description"]
        top = result.hits[0]
        assert (top.artifact_id, top.surface_kind, top.score) == ("sqlparse", "description", 2.0), mode
        reranked = result.output("rerank")
        tied = [corpus.record(r).surface_kind for r in reranked.row.tolist()
                if corpus.record(r).artifact_id == "sqlparse"]
        assert tied == ["description", "name"]  # both 2.0: in the order they came
        assert search(corpus, "sql parser", **params) == result.hits
        assert [h.record_id for h in result.hits] == [h.record_id for h in
                                                      reference_search(corpus, "sql parser", **params)]
        explanation = result.explain(top)
        assert (explanation.surface_kind, explanation.rank, explanation.score) == ("description", 1, 2.0)
        assert explanation.step("rerank").score == 2.0


def test_rrf_ties_at_the_top_keep_first_seen_order_through_to_the_hits():
    # dense ranks row 5 first, lexical row 3: both score 1/61, and row 5 comes first (dense's, seen first)
    corpus = build([Record(f"a{i}", "name", f"text {i}", surface_index=0) for i in range(6)], embedder="hash")
    batch = QueryBatch.of(["anything"])
    dense = Candidates(batch, [0, 0], [5, 4], [0.9, 0.8], "cosine")
    lexical = Candidates(batch, [0, 0], [3, 1], [2.0, 1.0], "bm25")
    result = load_recipe("hybrid").run(corpus, "anything", fusion="rrf", trace=True,
                                       overrides={"dense": dense, "lexical": lexical})
    fused = result.output("fuse")
    assert fused.row.tolist()[:2] == [5, 3] and fused.score[0] == fused.score[1] == 1 / 61
    assert fused.row.tolist()[2:] == [4, 1] and fused.score[2] == fused.score[3] == 1 / 62
    assert [corpus.row_of(h.record_id) for h in result.hits] == [5, 3, 4, 1]
