"""The seed API around search(): the recipe it runs, as_retriever, corpora by path or name, exports."""

from __future__ import annotations

import inspect
import sys
import warnings

import pytest

import irflow.api.retrieve as retrieve
from irflow.store.corpus import build
from irflow.store.paths import HOME_ENV
from irflow.engine.recipe import Recipe, load_recipe
from irflow.recipes.builders import search as search_builder
from irflow.api.retrieve import as_retriever, search
from search_reference import records

Q = "graph network tool"


# -- the recipe ------------------------------------------------------------------------------


def test_the_search_recipe_has_three_equal_forms():
    from importlib.resources import files

    from irflow.engine.kinds import _source_subpackage

    toml = load_recipe("search")
    yaml_text = (files(_source_subpackage("recipes")) / "search.yaml").read_text()
    assert toml.source == "recipes/search.toml"
    assert Recipe.from_yaml(yaml_text, source="recipes/search.yaml") == toml == search_builder()
    assert Recipe.from_toml(toml.to_toml()) == toml == Recipe.from_yaml(toml.to_yaml())
    assert toml.problems() == []


def test_recipe_parameters_are_exactly_the_search_arguments():
    recipe = load_recipe("search")
    signature = inspect.signature(search)
    arguments = {name: p.default for name, p in signature.parameters.items() if p.kind is p.KEYWORD_ONLY}
    assert dict(recipe.params) == arguments
    assert dict(recipe.choices) == {"mode": retrieve.MODES, "fusion": retrieve.FUSIONS}
    assert list(signature.parameters)[:2] == ["corpus", "query"]


def test_search_runs_the_cached_recipe_and_nothing_else(corpus, monkeypatch):
    assert retrieve.search_recipe() is retrieve.search_recipe()
    runs = []
    original = Recipe.run

    def spy(self, *args, **kwargs):
        runs.append(self.name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Recipe, "run", spy)
    hits = search(corpus, Q, mode="hybrid", k=3)
    assert runs == ["search"] and len(hits) == 3


def test_search_takes_one_query_string(corpus):
    with pytest.raises(TypeError, match=r"load_recipe\(\"search\"\).run\(corpus, \[q1, q2, ...\]\)"):
        search(corpus, [Q, Q])
    batch = load_recipe("search").run(corpus, [Q, "sql parser"], k=2).hits
    singles = [search(corpus, Q, k=2), search(corpus, "sql parser", k=2)]
    # one float32 matrix product for the batch: the same hits, scores equal to ~1e-7
    assert [[h.record_id for h in hits] for hits in batch] == [[h.record_id for h in hits] for hits in singles]
    assert [h.score for hits in batch for h in hits] == pytest.approx([h.score for hits in singles for h in hits])


def test_surfaces_may_be_any_iterable(corpus):
    listed = search(corpus, Q, surfaces=["name", "deps"])
    assert search(corpus, Q, surfaces={"deps", "name"}) == listed == search(corpus, Q, surfaces=iter(["name", "deps"]))
    assert search(corpus, Q, surfaces="name") == search(corpus, Q, surfaces=["name"])


# -- corpora by path and by name ---------------------------------------------------------------


def test_a_corpus_by_path_or_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "home"))
    path = tmp_path / "home" / "corpora" / "pkgs"
    in_memory = build(records(), embedder="hash", name="pkgs")
    build(records(), embedder="hash", path=path)
    expected = search(in_memory, Q, mode="hybrid")
    assert search(path, Q, mode="hybrid") == expected
    assert search(str(path), Q, mode="hybrid") == expected
    assert search("pkgs", Q, mode="hybrid") == expected
    assert all(h.source == "pkgs" for h in expected)


# -- as_retriever --------------------------------------------------------------------------------


def test_as_retriever_binds_defaults_and_per_call_overrides_win(corpus):
    retr = as_retriever(corpus, mode="hybrid", k=5)
    assert retr.corpus is corpus and dict(retr.defaults) == {"mode": "hybrid", "k": 5}
    assert retr(Q) == search(corpus, Q, mode="hybrid", k=5)
    assert retr(Q, k=2, filter={"owner": "alice"}) == search(corpus, Q, mode="hybrid", k=2, filter={"owner": "alice"})
    assert retr(Q, mode="lexical") == search(corpus, Q, mode="lexical", k=5)
    assert "mode='hybrid'" in repr(retr)


def test_as_retriever_opens_a_name_once(tmp_path, monkeypatch):
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    build(records(), embedder="hash", path=tmp_path / "corpora" / "pkgs")
    import irflow.api.retrieve

    opened = []
    original = irflow.api.retrieve.open_corpus
    monkeypatch.setattr(irflow.api.retrieve, "open_corpus", lambda *a, **kw: opened.append(a) or original(*a, **kw))
    retr = as_retriever("pkgs", mode="lexical")
    retr(Q)
    retr("sql parser", k=1)
    assert len(opened) == 1 and retr.corpus.name == "pkgs"


def test_as_retriever_refuses_unknown_arguments_and_choices(corpus):
    with pytest.raises(TypeError, match=r"unknown search\(\) argument\(s\) kk; valid: k, filter"):
        as_retriever(corpus, kk=3)
    with pytest.raises(ValueError, match="unknown mode 'vector'"):
        as_retriever(corpus, mode="vector")
    with pytest.raises(TypeError, match="unknown search"):
        as_retriever(corpus)(Q, kk=1)


# -- the cross-encoder extra ---------------------------------------------------------------------


def test_a_missing_cross_encoder_extra_warns_once_and_keeps_the_first_stage_ranking(corpus, monkeypatch):
    from irflow.stages.rerank import RerankerUnavailableWarning, _forget_cross_encoders

    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # the import fails
    _forget_cross_encoders()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = search(corpus, Q, rerank="cross-encoder", mode="hybrid")
            again = search(corpus, Q, rerank="cross-encoder", mode="hybrid")
        unavailable = [w for w in caught if issubclass(w.category, RerankerUnavailableWarning)]
        assert len(unavailable) == 1
        # the hint for this installation: a source checkout installs its own extra
        assert "pip install -e '.[st]'" in str(unavailable[0].message)
        # the first-stage ranking, fetched as deep as a reranked search fetches
        assert first == again == search(corpus, Q, mode="hybrid", fetch_k=50)
    finally:
        _forget_cross_encoders()


def test_cross_encoder_model_names_are_built_lazily_once(corpus, monkeypatch):
    import irflow.stages.rerank as rerank_stage

    built = []

    def fake_factory(model):
        built.append(model)
        return lambda query, segments: [float(len(s["text"])) for s in segments]

    monkeypatch.setattr(rerank_stage, "cross_encoder_reranker", fake_factory)
    rerank_stage._forget_cross_encoders()
    try:
        hits = search(corpus, Q, rerank="cross-encoder:my/model", k=3)
        search(corpus, Q, rerank="cross-encoder:my/model", k=3)
        search(corpus, Q, rerank="cross-encoder", k=3)
        assert built == ["my/model", "cross-encoder/ms-marco-MiniLM-L-6-v2"]
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert hits[0].score == float(len(hits[0].text))
    finally:
        rerank_stage._forget_cross_encoders()


# -- exports ---------------------------------------------------------------------------------------


def test_the_seed_names_are_exported():
    from irflow.api.boosts import dependency_evidence_boost
    from irflow.errors import NoLedgerEntry
    from irflow.api.federate import fuse_hits
    from irflow.store.ledger import records_for_artifact

    assert retrieve.MODES == ("dense", "lexical", "hybrid") and retrieve.FUSIONS == ("rrf", "blend")
    assert (retrieve.DFLT_RRF_K, retrieve.DFLT_BLEND_ALPHA, retrieve.DFLT_BM25_SAT_K) == (60, 0.5, 8.0)
    assert retrieve.dependency_evidence_boost is dependency_evidence_boost
    assert retrieve.fuse_hits is fuse_hits and retrieve.records_for_artifact is records_for_artifact
    assert retrieve.NoLedgerEntry is NoLedgerEntry and issubclass(NoLedgerEntry, KeyError)
    for name in ("ScoreBoost", "Identity", "Retriever"):
        assert getattr(retrieve, name) is not None and name in retrieve.__all__
    assert set(retrieve.__all__) <= set(dir(retrieve))


def test_records_for_artifact_through_retrieve(corpus):
    siblings = retrieve.records_for_artifact(corpus, "lark")
    assert [r.surface_index for r in siblings] == sorted(r.surface_index for r in siblings)
    with pytest.raises(retrieve.NoLedgerEntry):
        retrieve.records_for_artifact(corpus, "nope")


def test_module_docstrings_are_valid_doctests():
    import doctest

    from irflow.stages import formulate, weight

    for module in (retrieve, formulate, weight):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__
