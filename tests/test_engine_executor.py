"""The executor: needed stages only, once per batch, overrides, when, cache, trace, Result."""

from __future__ import annotations

import importlib.metadata
import json

import numpy as np
import pytest

import irflow.engine.executor
import irflow.engine.stage
from engine_fakes import (
    MODES_RECIPE,
    BrokenStage,
    RaisingStage,
    ShiftStage,
    fake_corpus,
)
from irflow.engine.batches import Candidates, QueryBatch, Scale
from irflow.errors import IrflowError, ParameterError, RecipeError, StageError
from irflow.engine.executor import INACTIVE, StageCache, StageEvent, TraceRecorder, is_inactive
from irflow.store.records import SearchHit
from irflow.engine.recipe import Recipe, load_recipe
from irflow.engine import get_stage_class, register_stage, stage_kinds, unregister_stage


@pytest.fixture
def corpus():
    return fake_corpus()


@pytest.fixture
def hybrid():
    return load_recipe("hybrid")


# -- hits and outputs ------------------------------------------------------------------


def test_one_query_gives_a_list_of_hits(corpus, hybrid):
    result = hybrid.run(corpus, "python http client", k=3)
    assert len(result.hits) == 3
    assert all(isinstance(h, SearchHit) for h in result.hits)
    assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)
    assert len({h.artifact_id for h in result.hits}) == 3  # collapsed per artifact
    assert result.hits[0].source == "fake"
    assert result.hits is result.hits  # computed once


def test_a_batch_gives_one_list_per_query(corpus, hybrid):
    result = hybrid.run(corpus, ["sql parser", "http client"], k=2)
    assert len(result.hits) == 2 and all(len(h) == 2 for h in result.hits)
    assert result.hits[0][0].artifact_id == "sqlparse"
    single = [hybrid.run(corpus, q, k=2).hits for q in ["sql parser", "http client"]]
    assert [[h.record_id for h in hs] for hs in result.hits] == [[h.record_id for h in hs] for hs in single]


def test_an_empty_batch(corpus, hybrid):
    assert hybrid.run(corpus, []).hits == []


def test_each_stage_runs_once_per_batch_and_each_text_is_embedded_once(corpus, hybrid):
    hybrid.run(corpus, ["sql parser", "http client", "sql parser"])
    assert corpus.calls == {"mask": 1, "embed": 1, "dense": 1, "tokenize": 1, "bm25": 1}
    assert corpus.embedded == [["sql parser", "http client"]]


def test_duplicate_queries_get_identical_results(corpus, hybrid):
    result = hybrid.run(corpus, ["sql parser", "http client", "sql parser"])
    assert [h.record_id for h in result.hits[0]] == [h.record_id for h in result.hits[2]]
    dense = result.output("dense")
    assert np.array_equal(dense.per_query(0)[0], dense.per_query(2)[0])


def test_output_of_any_stage(corpus, hybrid):
    result = hybrid.run(corpus, "sql parser", fusion="rrf")  # RRF by name (the default is the blend since issue 14)
    assert isinstance(result.output("fuse"), Candidates) and result.output("fuse").scale is Scale.RRF
    assert result.output("candidates").dtype == bool
    assert result.output("query") == QueryBatch.of(["sql parser"])
    assert result.output() is result.output("collapse") is result.candidates
    with pytest.raises(KeyError, match="has no stage 'fusion'"):
        result.output("fusion")


def test_only_the_stages_an_output_needs_run(corpus, hybrid):
    result = hybrid.run(corpus, "sql parser", output="dense")
    assert set(result.outputs) == {"query", "candidates", "dense"}
    assert corpus.calls["bm25"] == 0 and corpus.calls["dense"] == 1
    assert [h.surface_kind for h in result.hits][:1]  # hits of the dense ranking itself
    assert result.output_name == "dense"
    with pytest.raises(RecipeError, match="output 'dens' is not a stage"):
        hybrid.run(corpus, "q", output="dens")


def test_a_mask_output_has_no_hits(corpus, hybrid):
    result = hybrid.run(corpus, "q", output="candidates")
    with pytest.raises(IrflowError, match="produced ndarray, which has no hits"):
        _ = result.hits
    with pytest.raises(IrflowError, match="not Candidates"):
        _ = result.candidates


# -- parameters ---------------------------------------------------------------------


def test_run_time_parameters_override_defaults(corpus, hybrid):
    result = hybrid.run(corpus, "python", k=2, trace=True)
    assert len(result.hits) == 2 and result.params["k"] == 2
    assert result.trace.event("collapse").params["k"] == 2


def test_unknown_run_time_parameter_lists_the_recipes_parameters(corpus, hybrid):
    with pytest.raises(ParameterError) as info:
        hybrid.run(corpus, "q", kk=3)
    message = str(info.value)
    # the caller's argument is blamed, not the recipe file; each parameter listed once
    assert message.startswith("bad run argument for recipe 'hybrid': kk=3: recipe 'hybrid' has no parameter 'kk'")
    assert "recipes/hybrid.toml" not in message and "invalid recipe" not in message
    assert message.endswith("its parameters are k, fusion, rrf_k, alpha, bm25_sat_k, per_artifact, filter, "
                            "surfaces, bm25, fetch_k; did you mean k=3?")
    assert isinstance(info.value, RecipeError) and info.value.arguments[0][:2] == ("kk", 3)


def test_ill_typed_run_time_parameter_names_the_argument(corpus, hybrid):
    with pytest.raises(ParameterError) as info:
        hybrid.run(corpus, "q", per_artifact="yes", rrf_k=-1)
    found = info.value.problems
    assert found == ("per_artifact='yes': must be true or false, got 'yes' (str) (read by stage collapse); valid: "
                     "bool — true: best surface per artifact; false: each record once; e.g. per_artifact=True",
                     "rrf_k=-1: must be a finite number >= 0, got -1 (int) (read by stage fuse); valid: float — RRF "
                     "rank constant: weight/(rrf_k + rank); e.g. rrf_k=60")
    # k is named, not the derived fetch_k that reads it too
    with pytest.raises(ParameterError, match=r"^bad run argument for recipe 'hybrid': k='ten': must be a positive "
                                             r"integer, got 'ten' \(str\) \(read by stage collapse, derived fetch_k\); "
                                             r"valid: int — .*; e\.g\. k=10$"):
        hybrid.run(corpus, "q", k="ten")
    with pytest.raises(ParameterError, match=r"^bad run argument for recipe 'hybrid': k=0: must be a positive integer"):
        hybrid.run(corpus, "q", k=0)
    with pytest.raises(ParameterError, match=r"filter='\{bad': must be a table .*read by stage candidates"):
        hybrid.run(corpus, "q", filter="{bad")
    assert corpus.calls["mask"] == 0  # nothing ran


def test_the_cli_writes_the_argument_as_the_user_did():
    error = ParameterError("hybrid", [("k", 0, "must be a positive integer", ("k", 10, "e.g.")),
                                      ("filter", {"a": 1}, "bad", None)])
    label = lambda name, value: f"--set {name}={value if isinstance(value, str) else json.dumps(value)}"  # noqa: E731
    assert error.render(label) == ["--set k=0: must be a positive integer; e.g. --set k=10", '--set filter={"a": 1}: bad']
    assert str(error) == ("bad run arguments for recipe 'hybrid':\n  - k=0: must be a positive integer; e.g. k=10\n"
                          "  - filter={'a': 1}: bad")


def test_choices_are_enforced_at_run_time(corpus, hybrid):
    with pytest.raises(ValueError, match=r"fusion='rff': must be one of 'rrf', 'blend'; did you mean fusion='rrf'\?"):
        hybrid.run(corpus, "q", fusion="rff")


def test_derived_fetch_k(corpus, hybrid):
    def fetch(**params):
        return hybrid.run(corpus, "q", trace=True, **params).trace.event("dense").params["fetch_k"]

    assert fetch() == 50
    assert fetch(k=20) == 100
    assert fetch(per_artifact=False) == 10
    assert fetch(per_artifact=False, k=3) == 3
    assert fetch(fetch_k=7) == 7


def test_none_run_time_value_means_the_stage_default(corpus, hybrid):
    result = hybrid.run(corpus, "q", trace=True, bm25=None, filter=None)
    assert result.trace.event("lexical").params["bm25"] is None
    assert result.trace.event("candidates").params["filter"] is None


def test_filter_and_surfaces_reach_the_mask(corpus, hybrid):
    result = hybrid.run(corpus, "python", filter={"owner": "psf"}, surfaces=["description"])
    assert [h.artifact_id for h in result.hits] == ["requests"]
    assert hybrid.run(corpus, "python", filter={"owner": "nobody"}).hits == []


# -- overrides ---------------------------------------------------------------------------


def test_overrides_skip_the_stage_and_what_only_it_needs(corpus, hybrid):
    first = hybrid.run(corpus, "python http")
    calls = dict(corpus.calls)
    injected = first.output("dense").take(np.arange(len(first.output("dense")))[::-1])  # reversed ranking
    injected = Candidates(injected.queries, injected.query_index, injected.row, injected.score, "cosine",
                          dict(first.output("dense").provenance))
    second = hybrid.run(corpus, "python http", overrides={"dense": injected}, trace=True)
    assert corpus.calls["dense"] == calls["dense"] and corpus.calls["embed"] == calls["embed"]
    assert corpus.calls["bm25"] == calls["bm25"] + 1  # lexical still runs
    assert second.output("dense") is injected
    assert second.trace.event("dense").status == "override"
    assert second.output("fuse") != first.output("fuse")

    both = hybrid.run(corpus, "python http", overrides={"dense": first.output("dense"),
                                                        "lexical": first.output("lexical")})
    assert corpus.calls["mask"] == calls["mask"] + 1  # the filter is only needed by overridden stages
    assert both.output("fuse") == first.output("fuse")
    with pytest.raises(KeyError, match="did not run in this call"):
        both.output("candidates")


def test_override_problems(corpus, hybrid):
    good = hybrid.run(corpus, "q").output("dense")
    with pytest.raises(RecipeError, match="overrides names 'dens', which is not a stage"):
        hybrid.run(corpus, "q", overrides={"dens": good})
    with pytest.raises(RecipeError, match="does not fit its output type Candidates: expected Candidates, got list"):
        hybrid.run(corpus, "q", overrides={"dense": [1]})
    with pytest.raises(RecipeError, match="computed for the queries \\['q'\\], not \\['other'\\]"):
        hybrid.run(corpus, "other", overrides={"dense": good})
    with pytest.raises(RecipeError, match="expected a mask of 10 rows"):
        hybrid.run(corpus, "q", overrides={"candidates": np.ones(3, bool)})
    mask = np.zeros(corpus.n_rows, bool)
    mask[[2, 3]] = True
    result = hybrid.run(corpus, "http", overrides={"candidates": mask})
    assert {h.artifact_id for h in result.hits} == {"httpx"}


# -- when ---------------------------------------------------------------------------------


def test_when_switches_stages_off_and_fuse_passes_the_other_through(corpus):
    recipe = Recipe.from_toml(MODES_RECIPE)
    dense_only = recipe.run(corpus, "python parser", mode="dense", trace=True)
    assert corpus.calls["bm25"] == 0 and corpus.calls["tokenize"] == 0
    assert dense_only.trace.event("lexical").status == "inactive"
    assert is_inactive(dense_only.output("lexical"))
    assert dense_only.output("fuse") is dense_only.output("dense")  # one active input: unchanged
    assert dense_only.output().scale is Scale.COSINE

    lexical_only = recipe.run(corpus, "python parser", mode="lexical")
    assert lexical_only.output("fuse") is lexical_only.output("lexical")
    assert lexical_only.output().scale is Scale.BM25

    hybrid = recipe.run(corpus, "python parser")
    assert hybrid.output("fuse").scale is Scale.RRF
    with pytest.raises(RecipeError, match="mode='hybird': must be one of 'dense', 'lexical', 'hybrid'; did you mean mode='hybrid'"):
        recipe.run(corpus, "q", mode="hybird")


def test_an_inactive_required_input_makes_the_stage_inactive(corpus):
    text = MODES_RECIPE.replace('[stages.candidates]\nkind = "filter"',
                                '[stages.candidates]\nkind = "filter"\nwhen = { mode = ["hybrid"] }')
    recipe = Recipe.from_toml(text)
    result = recipe.run(corpus, "q", mode="dense", trace=True)
    assert result.output("candidates") is INACTIVE
    assert [e.status for e in result.trace] == ["inactive"] * 5
    assert result.hits == []
    assert not INACTIVE and repr(INACTIVE) == "INACTIVE"


# -- third-party stages --------------------------------------------------------------------


def test_register_stage_makes_a_kind_usable_in_recipes(corpus, hybrid):
    register_stage(ShiftStage)
    try:
        assert "shift" in stage_kinds() and get_stage_class("shift") is ShiftStage
        recipe = hybrid.with_stage("shifted", "shift", inputs=["fuse"], by=1.0).with_stage(
            "collapse", "collapse", inputs=["shifted"], k="$k", per_artifact="$per_artifact")
        result = recipe.run(corpus, "http client")
        assert result.output("shifted").scale is Scale.CUSTOM
        assert np.allclose(result.output("shifted").score, result.output("fuse").score + 1.0)
        with pytest.raises(ValueError, match="already registered"):
            register_stage(BrokenStage, kind="shift")
    finally:
        unregister_stage("shift")


def test_entry_points_are_loaded_once_and_lazily(monkeypatch):
    loads = []
    good = importlib.metadata.EntryPoint(name="ep_shift", value="engine_fakes:EntryPointStage", group="irflow.stages")
    broken = importlib.metadata.EntryPoint(name="ep_broken", value="no_such_module_xyz:Stage", group="irflow.stages")

    def fake_entry_points():
        loads.append(1)
        return [good, broken]

    monkeypatch.setattr(irflow.engine.kinds, "_entry_points", fake_entry_points)
    irflow.engine.kinds._reset_entry_points()
    try:
        with pytest.warns(UserWarning, match="cannot load stage kind 'ep_broken'"):
            kinds = stage_kinds()
        assert "ep_shift" in kinds and "ep_broken" not in kinds
        stage_kinds()
        assert loads == [1]  # loaded once
        recipe = Recipe.from_toml(MODES_RECIPE.replace('inputs = ["fuse"]', 'inputs = ["moved"]') +
                                  '\n[stages.moved]\nkind = "ep_shift"\ninputs = ["fuse"]\nby = 2.0\n')
        assert recipe.problems() == []
    finally:
        unregister_stage("ep_shift")


def test_a_stage_returning_the_wrong_type_is_a_stage_error(corpus, hybrid):
    register_stage(BrokenStage)
    register_stage(RaisingStage)
    try:
        broken = hybrid.with_stage("collapse", "broken", inputs=["fuse"])
        with pytest.raises(StageError, match="stage 'collapse' \\(broken\\) returned an invalid output: "
                                             "expected Candidates, got list"):
            broken.run(corpus, "q")
        raising = hybrid.with_stage("collapse", "raising", inputs=["fuse"])
        with pytest.raises(ZeroDivisionError) as info:
            raising.run(corpus, "q")
        assert "while running stage 'collapse' (raising)" in info.value.__notes__[0]
    finally:
        unregister_stage("broken")
        unregister_stage("raising")


# -- cache (sweeps) -------------------------------------------------------------------------


def test_cache_reruns_only_stages_whose_inputs_or_params_changed(corpus, hybrid):
    cache = StageCache()
    base = hybrid.run(corpus, ["python", "http"], cache=cache)
    assert cache.executions == {"candidates": 1, "dense": 1, "lexical": 1, "fuse": 1, "collapse": 1}
    for rrf_k in (10, 30):
        hybrid.run(corpus, ["python", "http"], cache=cache, rrf_k=rrf_k)
    # the recipe's blend does not read rrf_k (Fuse.unused_params): every stage reused
    assert cache.executions == {"candidates": 1, "dense": 1, "lexical": 1, "fuse": 1, "collapse": 1}
    for rrf_k in (10, 30):
        hybrid.run(corpus, ["python", "http"], cache=cache, fusion="rrf", rrf_k=rrf_k)
    # a sweep over rrf_k under RRF: the first-stage channels ran once, the fusion once per value
    assert cache.executions == {"candidates": 1, "dense": 1, "lexical": 1, "fuse": 3, "collapse": 3}
    assert corpus.calls["dense"] == 1 and corpus.calls["bm25"] == 1
    again = hybrid.run(corpus, ["python", "http"], cache=cache, trace=True)
    assert [e.status for e in again.trace] == ["cached"] * 5
    assert again.output() == base.output()
    hybrid.run(corpus, ["python", "http"], cache=cache, k=3)  # fetch_k = max(3 * 5, 50) = 50: unchanged
    assert cache.executions["dense"] == 1 and cache.executions["collapse"] == 4
    hybrid.run(corpus, ["python", "http"], cache=cache, k=20)  # fetch_k = 100: the channels re-run
    assert cache.executions["dense"] == 2 and cache.executions["collapse"] == 5
    hybrid.run(corpus, ["python", "http"], cache=cache, k=20, fetch_k=50)  # pinned fetch_k: channels cached
    assert cache.executions["dense"] == 2 and cache.executions["collapse"] == 6
    hybrid.run(corpus, ["other"], cache=cache)
    assert cache.executions["candidates"] == 1  # the mask does not depend on the queries
    assert cache.executions["dense"] == 3
    assert cache.hits > 0 and cache.misses > 0 and "StageCache(" in repr(cache)


def test_cache_is_per_corpus(hybrid):
    cache = StageCache()
    a, b = fake_corpus(), fake_corpus()
    hybrid.run(a, "python", cache=cache)
    hybrid.run(b, "python", cache=cache)
    assert a.calls["dense"] == 1 and b.calls["dense"] == 1


def test_cache_maxsize_and_clear(corpus, hybrid):
    cache = StageCache(maxsize=2)
    hybrid.run(corpus, "python", cache=cache)
    assert len(cache) == 2
    cache.clear()
    assert len(cache) == 0 and cache.hits == cache.misses == 0
    with pytest.raises(ValueError, match="maxsize"):
        StageCache(maxsize=0)


def test_overrides_take_part_in_cache_keys(corpus, hybrid):
    cache = StageCache()
    first = hybrid.run(corpus, "python", cache=cache)
    dense = first.output("dense")
    hybrid.run(corpus, "python", cache=cache, overrides={"dense": dense})
    assert cache.executions["fuse"] == 2  # an override's key is its content, not the stage's key
    hybrid.run(corpus, "python", cache=cache, overrides={"dense": dense})
    assert cache.executions["fuse"] == 2
    changed = dense.with_scores(dense.score, "cosine", {"x": np.zeros(len(dense))})
    hybrid.run(corpus, "python", cache=cache, overrides={"dense": changed})
    assert cache.executions["fuse"] == 3


# -- trace hook --------------------------------------------------------------------------------


def test_trace_records_every_stage_in_execution_order(corpus, hybrid):
    result = hybrid.run(corpus, ["python", "http"], trace=True, k=2, fusion="rrf", bm25_sat_k=8.0)
    trace = result.trace
    assert isinstance(trace, TraceRecorder) and all(isinstance(e, StageEvent) for e in trace)
    assert [e.name for e in trace] == ["candidates", "dense", "lexical", "fuse", "collapse"]
    assert [e.kind for e in trace] == ["filter", "dense", "lexical", "fuse", "collapse"]
    assert all(e.status == "ran" and e.elapsed_ms >= 0 for e in trace)
    fuse = trace.event("fuse")
    assert fuse.params == {"method": "rrf", "rrf_k": 60, "alpha": 0.5, "bm25_sat_k": 8.0, "weights": None}
    assert fuse.inputs["dense"] is result.output("dense") and fuse.inputs["lexical"] is result.output("lexical")
    assert fuse.ports == {"inputs": ("dense", "lexical")}
    assert fuse.output is result.output("fuse")
    dense = trace.event("dense")
    assert set(dense.inputs) == {"candidates", "query"} and dense.ports == {"mask": ("candidates",), "query": ("query",)}
    assert trace.queries == QueryBatch.of(["python", "http"]) and trace.params["k"] == 2
    assert trace.recipe is hybrid and trace.corpus is corpus
    with pytest.raises(KeyError, match="no stage 'x' in this trace"):
        trace.event("x")


def test_no_trace_work_when_tracing_is_off(corpus, hybrid, monkeypatch):
    def forbidden():
        raise AssertionError("a timer ran with trace=False")

    monkeypatch.setattr(irflow.engine.executor.time, "perf_counter", forbidden)
    monkeypatch.setattr(irflow.engine.executor, "StageEvent", None)
    result = hybrid.run(corpus, "python")
    assert result.trace is None and len(result.hits) > 0


def test_result_repr(corpus, hybrid):
    assert repr(hybrid.run(corpus, "q")) == ("Result(recipe='hybrid', queries=1, stages_run=5, traced=False, "
                                             "embedder='fake-embed', analyzer='fake-tokens')")


def test_cache_misses_after_the_corpus_changes(hybrid):
    corpus = fake_corpus()
    corpus.version = 1
    cache = StageCache()
    hybrid.run(corpus, "python", cache=cache)
    hybrid.run(corpus, "python", cache=cache)
    assert cache.executions["dense"] == 1
    corpus.version = 2  # e.g. a record was deleted
    hybrid.run(corpus, "python", cache=cache)
    assert cache.executions["dense"] == 2
