"""Every built-in recipe: TOML == YAML == Python builder, valid, and sane when run on a real corpus.

Runs each recipe of ``irflow.engine.recipe.builtin_recipes()`` on a small real corpus
(``irflow.store.corpus.build``, embedder "hash", several surfaces per artifact),
with a deterministic fake reranker registered in ``irflow.registry`` and with
``rerank`` left at None, and checks: results sorted by score, ``k``
respected, one hit per artifact, and the reranker called once per query with
exactly the segments of the candidates that reach the rerank stage.
"""

from __future__ import annotations

import math
from importlib.resources import files

import pytest

import irflow.engine.registry as registry
from irflow.engine.recipe import Recipe, builtin_recipes, load_recipe
from irflow.recipes.builders import BUILDERS
from irflow.engine.kinds import _source_subpackage
from surface_corpus import FakeReranker, build_corpus, fake_score

NAMES = builtin_recipes()
QUERIES = ["sql parser", "async http client", "json cache tool"]
K = 3


@pytest.fixture(scope="module")
def corpus():
    return build_corpus("builtins")


def _text(name: str, suffix: str) -> str:
    return (files(_source_subpackage("recipes")) / f"{name}{suffix}").read_text(encoding="utf-8")


def _rerank_stages(recipe: Recipe) -> list[str]:
    return [name for name, spec in recipe.stages.items() if spec.kind == "rerank"]


def test_the_issue_recipes_are_built_in():
    assert {"search", "hybrid-rerank", "expand-rerank"} <= set(NAMES)
    assert set(BUILDERS) == set(NAMES)  # every built-in has a Python builder, and no builder lacks a file


@pytest.mark.parametrize("name", NAMES)
def test_toml_yaml_and_builder_are_equal_and_valid(name):
    toml = Recipe.from_toml(_text(name, ".toml"), source=f"recipes/{name}.toml")
    yaml = Recipe.from_yaml(_text(name, ".yaml"), source=f"recipes/{name}.yaml")
    built = BUILDERS[name]()
    assert toml == yaml == built == load_recipe(name)
    assert toml.name == name
    for recipe in (toml, yaml, built):
        assert recipe.problems() == []


# every built-in without a reranker; those with a rerank parameter also with the fake one
RUNS = [(name, False) for name in NAMES] + [(name, True) for name in NAMES if "rerank" in load_recipe(name).params]


@pytest.mark.parametrize("name, with_reranker", RUNS, ids=[f"{n}-{'fake' if r else 'none'}" for n, r in RUNS])
def test_every_builtin_runs_sanely(corpus, name, with_reranker):
    recipe = load_recipe(name)
    reranks = _rerank_stages(recipe)
    reranker = FakeReranker()
    params = {"k": K}
    if with_reranker:
        params["rerank"] = "fake_rerank"
    with registry.registered("fake_rerank", reranker):
        result = recipe.run(corpus, QUERIES, **params)
    assert len(result.hits) == len(QUERIES)
    for query, hits in zip(QUERIES, result.hits):
        assert len(hits) == K  # 8 artifacts, every query finds at least K by cosine
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        assert len({h.artifact_id for h in hits}) == K  # per_artifact defaults to true
        for h in hits:
            assert corpus.store.get(h.record_id).artifact_id == h.artifact_id
            assert h.source == "builtins"
            if with_reranker:
                assert math.isclose(h.score, fake_score(query, {"text": h.text, "id": h.record_id}))
    if not with_reranker:
        assert reranker.calls == []
        return
    assert len(reranks) == 1
    # once per query, with one segment per candidate entering the rerank stage, in its order
    assert [q for q, _ in reranker.calls] == QUERIES
    (upstream,) = recipe.stages[reranks[0]].upstream_names()
    entering = result.output(upstream)
    for i, (_, seen) in enumerate(reranker.calls):
        rows, _ = entering.per_query(i)
        assert seen == [corpus.record_ids[r] for r in rows]
        if "expand" not in recipe.stages:  # the seed: the reranker sees at most fetch_k candidates
            assert len(seen) <= result.params["fetch_k"]


def test_expand_rerank_reranks_more_than_it_retrieved(corpus):
    reranker = FakeReranker()
    with registry.registered("fake_rerank", reranker):
        result = load_recipe("expand-rerank").run(corpus, "sql parser", k=K, fetch_k=5, rerank="fake_rerank")
    ((_, seen),) = reranker.calls
    assert len(result.output("cut")) == 5 and len(seen) > 5
    assert len(set(seen)) == len(seen)  # overlapping windows were merged


def test_hybrid_rerank_without_a_reranker_is_hybrid(corpus):
    # rerank=None passes through: the recipe then ranks exactly as hybrid with the same fetch depth
    for query in QUERIES:
        ours = load_recipe("hybrid-rerank").run(corpus, query, k=K).hits
        assert ours == load_recipe("hybrid").run(corpus, query, k=K).hits


# -- descriptions tell the truth ----------------------------------------------------------------------

_FUSION_WORDS = {"the blend": "blend", "RRF": "rrf"}


def _claims(recipe: Recipe) -> list[str]:
    """Every claim of ``recipe``'s description that its stages and parameters do not bear out (none: it is true)."""
    import re

    text, kinds, params = recipe.description, {s.kind for s in recipe.stages.values()}, recipe.params
    wrong = []

    def check(ok: bool, claim: str) -> None:
        if not ok:
            wrong.append(claim)

    # the channels
    check(("dense" in text or "cosine" in text) == ("dense" in kinds), "names a dense channel iff it has one")
    check(("BM25" in text or "lexical" in text) == ("lexical" in kinds), "names BM25 iff it has a lexical stage")
    # the fusion: "fused by X" is the default method, "fusion=Y" the alternatives a run may pick
    fused = re.findall(r"fused by (the blend|RRF)", text)
    fusion = recipe.fusion()
    check(bool(fused) == (fusion is not None), "says how it fuses iff it fuses")
    if fused and fusion is not None:
        check([_FUSION_WORDS[f] for f in fused] == [fusion["method"]], f"fused by {fused[0]}: the default fusion")
        others = re.findall(r"fusion=(\w+)", text)
        check(set(others) == set(fusion["choices"]) - {fusion["method"]}, f"names the other fusions {others}")
    # the reranker: named iff there is a rerank stage; "none by default" iff no reranker is set
    check(("rerank" in text) == ("rerank" in kinds), "names reranking iff it has a rerank stage")
    if "rerank" in kinds:
        check(("none by default" in text) == (params.get("rerank") is None), "says whether a reranker is set")
    check(("expanded" in text) == ("expand" in kinds), "says expanded iff it has an expand stage")
    # the collapse
    check(("best surface per artifact" in text) == (params.get("per_artifact") is True and "collapse" in kinds),
          "best surface per artifact iff per_artifact defaults to true")
    for mode in re.findall(r"mode=(\w+), the default", text):
        check(params.get("mode") == mode, f"mode={mode} is the default")
    return wrong


@pytest.mark.parametrize("name", NAMES)
def test_every_description_tells_the_truth(name):
    assert _claims(load_recipe(name)) == []


def test_the_description_check_catches_a_false_claim():
    hybrid = load_recipe("hybrid")
    assert _claims(hybrid.with_params(fusion="rrf")) == ["fused by the blend: the default fusion",
                                                         "names the other fusions ['rrf']"]
    lying = Recipe.from_dict({**hybrid.to_dict(), "recipe": {**hybrid.to_dict()["recipe"],
                              "description": "dense and BM25 fused by RRF, the top fetch_k reranked"}})
    assert len(_claims(lying)) >= 3  # the fusion, the alternatives, a reranker it lacks, the collapse unsaid
