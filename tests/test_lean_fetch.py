"""A per-artifact search over one channel fetches k rows on a corpus of one record per artifact: the same hits.

The seed over-fetches (``max(5 k, 50)``) so that the collapse to each
artifact's best surface still finds ``k`` artifacts.  Where every live
record is an artifact of its own, the first ``k`` rows of a ranking are
``k`` artifacts, so the built-in recipes' first stages fetch ``k`` there
(``lean``), unless a reranker, surface weights or a boost reads the depth.

Checked here against independent expectations: the corpus fact against a
naive count of live artifact ids over random updates; the hits against the
collapse, written by hand, of the kernel's full ranking; the depth fetched
through the trace.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine_fakes  # noqa: F401  (maps irflow.stages / irflow.recipes in a bare checkout)
import irflow
from irflow.engine.recipe import load_recipe
from irflow.shard import shard
from surface_corpus import FakeReranker

WORDS = ["parser", "python", "data", "json", "fast", "tree", "graph", "http"]


def _records(n: int, surfaces: int = 1, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for a in range(n):
        for s in range(surfaces):
            words = rng.choice(WORDS, size=int(rng.integers(2, 7))).tolist()
            out.append({"id": f"r{a}-{s}", "artifact_id": f"a{a}", "surface_kind": "doc" if s == 0 else f"k{s}",
                        "text": " ".join(words) + f" tok{a % 13}"})
    return out


def _naive_unique(corpus) -> bool:
    artifacts = [r.artifact_id for r in corpus]  # the live records, in the corpus's order
    return len(set(artifacts)) == len(artifacts)


def _best_per_artifact(corpus, rows: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[str, float]]:
    """The collapse, by hand: each artifact's first (best) row of a full ranking, in ranking order, cut to k."""
    seen: dict[str, float] = {}
    for artifact, record, score in zip(corpus.artifact_ids_of(rows).tolist(), corpus.record_ids_of(rows).tolist(),
                                       scores.tolist()):
        if artifact not in seen:
            seen[artifact] = (record, score)
    return list(seen.values())[:k]


def _expected(corpus, text: str, mode: str, k: int) -> list[tuple[str, float]]:
    mask = corpus.candidate_mask()
    if mode == "lexical":
        top = corpus.bm25_topk(corpus.tokenize_queries([text]), mask, corpus.n_rows)
    else:
        top = corpus.dense_topk(corpus.embed_queries([text]), mask, corpus.n_rows)
    rows, scores = top.per_query(0)
    return _best_per_artifact(corpus, rows, scores, k)


def _hits(hits) -> list[tuple[str, float]]:
    return [(h.record_id, h.score) for h in hits]


def _fetched(result, stage: str) -> int:
    return len(result.outputs[stage])


@pytest.fixture(scope="module")
def unique():
    return irflow.build(_records(120), embedder="hash")


@pytest.fixture(scope="module")
def surfaces():
    return irflow.build(_records(60, surfaces=3), embedder="hash")


def test_the_corpus_fact(unique, surfaces):
    assert unique.one_record_per_artifact() is True
    assert surfaces.one_record_per_artifact() is False


@pytest.mark.parametrize("mode", ["lexical", "dense"])
@pytest.mark.parametrize("k", [1, 3, 10, 40])
def test_same_hits_as_the_full_ranking_collapsed(unique, surfaces, mode, k):
    for corpus in (unique, surfaces):
        for text in ("parser json", "tok3 fast", "graph http data tree"):
            expected = _expected(corpus, text, mode, k)
            assert _hits(irflow.search(corpus, text, mode=mode, k=k)) == expected
            result = load_recipe(mode).run(corpus, [text, "python"], k=k)
            assert _hits(result.hits[0]) == expected


@pytest.mark.parametrize("mode", ["lexical", "dense"])
def test_the_depth_fetched(unique, surfaces, mode):
    """k rows on a corpus of one record per artifact; the seed's over-fetch elsewhere or when a later stage reads it."""
    text = "parser json"
    assert _fetched(load_recipe(mode).run(unique, text, k=5, trace=True), mode) == 5
    assert _fetched(load_recipe("search").run(unique, text, mode=mode, k=5, trace=True), mode) == 5
    assert _fetched(load_recipe(mode).run(surfaces, text, k=5, trace=True), mode) == 50
    # a reranker, surface weights or a boost sees the fetched candidates: the seed's depth
    search = load_recipe("search")
    for later in ({"surface_weights": {"doc": 2.0}}, {"dep_boost": lambda hit: 0.0},
                  {"rerank": FakeReranker()}):
        result = search.run(unique, text, mode=mode, k=5, trace=True, **later)
        assert _fetched(result, mode) == 50, later
    # a fetch_k given is the depth, as given; per_artifact off needs only k anyway
    assert _fetched(load_recipe(mode).run(unique, text, k=5, fetch_k=30, trace=True), mode) == 30
    assert _fetched(load_recipe(mode).run(unique, text, k=5, per_artifact=False, trace=True), mode) == 5
    # the derived parameter given at run time wins
    assert _fetched(load_recipe(mode).run(unique, text, k=5, lean=False, trace=True), mode) == 50
    assert _fetched(load_recipe("search").run(unique, text, mode=mode, k=5, lean=False, trace=True), mode) == 50


@pytest.mark.parametrize("mode", ["lexical", "dense"])
def test_formulated_queries_keep_their_sub_search_depth(unique, mode):
    """A query formulated into several texts merges their union: each text keeps its depth, the hits stay."""
    def formulate(query: str) -> list[str]:
        return [query, "tree " + query, "http"]

    search = load_recipe("search")
    for text in ("parser json", "fast tok5"):
        lean = search.run(unique, [text, "data"], mode=mode, k=7, formulate=formulate)
        full = search.run(unique, [text, "data"], mode=mode, k=7, formulate=formulate, lean=False)
        assert [_hits(h) for h in lean.hits] == [_hits(h) for h in full.hits]


def test_hybrid_is_not_lean(unique):
    result = load_recipe("search").run(unique, "parser json", mode="hybrid", k=5, trace=True)
    assert _fetched(result, "lexical") == 50 and _fetched(result, "dense") == 50


OPERATIONS = st.lists(st.tuples(st.sampled_from(["add_new", "add_surface", "upsert", "delete", "put", "drop"]),
                                st.integers(0, 30)), min_size=1, max_size=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS)
def test_the_fact_follows_every_update(operations):
    """one_record_per_artifact() equals a naive count of the live records' artifacts after any updates."""
    corpus = irflow.build(_records(20), embedder="hash")
    fresh = 1000
    for op, n in operations:
        live = [r.id for r in corpus]
        artifacts = list(dict.fromkeys(r.artifact_id for r in corpus))
        if op == "add_new":
            corpus.add([{"id": f"n{fresh}", "artifact_id": f"new{fresh}", "surface_kind": "doc", "text": "json new"}])
        elif op == "add_surface" and artifacts:
            corpus.add([{"id": f"n{fresh}", "artifact_id": artifacts[n % len(artifacts)], "surface_kind": "title",
                         "text": "parser title"}])
        elif op == "upsert" and live:
            record = next(r for r in corpus if r.id == live[n % len(live)])
            corpus.upsert([{"id": record.id, "artifact_id": record.artifact_id, "surface_kind": record.surface_kind,
                            "text": record.text + " changed"}])
        elif op == "delete" and live:
            corpus.delete([live[n % len(live)]])
        elif op == "put" and artifacts:
            artifact = artifacts[n % len(artifacts)]
            corpus.put_artifact(artifact, [{"id": f"p{fresh}-{j}", "artifact_id": artifact, "surface_kind": kind,
                                            "text": "tree graph"} for j, kind in enumerate(["doc", "title"][:1 + n % 2])])
        elif op == "drop" and artifacts:
            corpus.delete_artifact(artifacts[n % len(artifacts)])
        fresh += 1
        assert corpus.one_record_per_artifact() == _naive_unique(corpus), op
        if len(corpus):
            for mode in ("lexical", "dense"):
                assert _hits(irflow.search(corpus, "parser json", mode=mode, k=4)) == \
                    _expected(corpus.snapshot(), "parser json", mode, 4)


def test_sharded_corpora_decide_as_the_single_corpus(tmp_path):
    single = irflow.build(_records(80), embedder="hash")
    sharded = shard(single, 3, tmp_path / "sharded")
    try:
        assert sharded.one_record_per_artifact() is True
        for mode in ("lexical", "dense"):
            one = load_recipe(mode).run(single, ["parser json", "fast"], k=6, trace=True)
            many = load_recipe(mode).run(sharded, ["parser json", "fast"], k=6, trace=True)
            assert [_hits(h) for h in one.hits] == [_hits(h) for h in many.hits]
            assert _fetched(many, mode) == _fetched(one, mode) == 12
        for corpus in (single, sharded):  # a second surface of a3: the seed's depth again
            corpus.add([{"id": "x", "artifact_id": "a3", "surface_kind": "title", "text": "parser json"}])
            assert corpus.one_record_per_artifact() is False
        one = load_recipe("lexical").run(single, "python", k=6, trace=True)
        many = load_recipe("lexical").run(sharded, "python", k=6, trace=True)
        assert _hits(one.hits) == _hits(many.hits)
        assert _fetched(many, "lexical") == _fetched(one, "lexical") > 6
    finally:
        sharded.close()
