"""search() is the recipe: over a grid of parameters, search == recipe run == the seed reference.

``irflow.api.retrieve.search(c, q, **p)`` must equal
``load_recipe("search").run(c, q, **p).hits`` exactly, and both must equal
``reference_search`` (tests/search_reference.py, written from the seed's
text) — record ids in order, scores to float32 precision.
"""

from __future__ import annotations

import itertools
import random

import pytest

from irflow.engine.recipe import load_recipe
from irflow.api.retrieve import dependency_evidence_boost, search
from search_reference import reference_search

QUERIES = ["fast python parser", "graph network tool", "sql database schema", "http client json", "archive"]


def shared_words(query, segments):
    """A reranker with many ties (shared words), so stability matters."""
    words = set(query.split())
    return [len(words & set(s["text"].split())) for s in segments]


def by_length(query, segments):
    return [len(s["text"]) / 100.0 for s in segments]


def stars_boost(hit):
    return hit.metadata["stars"] / 20000.0


AXES = {
    "mode": ["dense", "lexical", "hybrid"],
    "fusion": ["rrf", "blend"],
    "per_artifact": [True, False],
    "k": [3, 7],
    "fetch_k": [None, 4],
    "filter": [None, {"owner": {"$in": ["alice", "carol"]}}],
    "surfaces": [None, ["description", "readme_chunk", "deps"]],
    "surface_weights": [None, {"deps": 2.0, "name": 0.5, "no_such_kind": 9.0}],
    "rerank": [None, shared_words, by_length],
    "dep_boost": [None, dependency_evidence_boost({"networkx", "requests"}, weight=0.02), stars_boost],
    # (" parser" would make "http client json parser", whose BM25 has an exact tie that the kernel's
    #  pruned path computes 1 ulp apart at fetch_k 3-4: a kernel matter, not the recipe's)
    "formulate": [None, lambda q: f"{q} queue", lambda q: [q, "  ", "graph queue"], lambda q: ["", " "]],
}


def grid(n: int, seed: int) -> list[dict]:
    """``n`` combinations drawn from the full product (every value of every axis appears)."""
    names = list(AXES)
    everything = list(itertools.product(*(range(len(AXES[a])) for a in names)))
    picked = random.Random(seed).sample(everything, n)
    return [{a: AXES[a][i] for a, i in zip(names, combo)} for combo in picked]


def check(corpus, query, params):
    got = search(corpus, query, **params)
    assert got == load_recipe("search").run(corpus, query, **params).hits
    expected = reference_search(corpus, query, **params)
    assert [h.record_id for h in got] == [h.record_id for h in expected], params
    assert [h.score for h in got] == pytest.approx([h.score for h in expected], rel=1e-6, abs=1e-7)
    assert got == [h.__class__(**{**h.to_dict(), "score": g.score}) for h, g in zip(expected, got)]


@pytest.mark.parametrize("index", range(16))
def test_search_equals_the_recipe_and_the_reference_over_a_grid(corpus, index):
    for i, params in enumerate(grid(1200, seed=4)[index * 75:(index + 1) * 75]):
        check(corpus, QUERIES[(index + i) % len(QUERIES)], params)


@pytest.mark.parametrize("mode, fusion", [(m, f) for m in AXES["mode"] for f in AXES["fusion"]])
@pytest.mark.parametrize("per_artifact", [True, False])
def test_every_mode_fusion_and_formulation(corpus, mode, fusion, per_artifact):
    for formulate in AXES["formulate"]:
        for query in QUERIES[:3]:
            check(corpus, query, dict(mode=mode, fusion=fusion, per_artifact=per_artifact, k=4, formulate=formulate))


def test_rerank_text_and_bm25_settings(corpus):
    for rerank_text, max_chars, bm25 in [("artifact", 2000, None), ("artifact", 25, {"k1": 1.2, "b": 0.6}),
                                          (lambda c, meta: meta["owner"] + " " + " ".join(meta["tags"]), 8,
                                           {"epsilon": 0.5})]:
        for mode in AXES["mode"]:
            check(corpus, "graph parser", dict(mode=mode, rerank=by_length, rerank_text=rerank_text,
                                               rerank_max_chars=max_chars, bm25=bm25, k=5))
