"""Stages that declare they pass an input through (Stage.passes_through): the promise holds, and the engine skips them.

An untraced, uncached run does not call a stage whose ``passes_through``
names a port: its output is that input.  That is only correct when ``run``
would have returned that very object, so every built-in kind is held to it
here, over parameter values drawn by hypothesis — and every recipe's hits
are the same with the skipping (untraced) and without it (traced).
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_fakes import fake_corpus
from irflow.engine import get_stage_class, register_stage, stage_kinds, unregister_stage
from irflow.engine.batches import Candidates, QueryBatch, Scale
from irflow.engine.ports import CANDIDATES, Port
from irflow.engine.recipe import RecipeBuilder, builtin_recipes, load_recipe
from irflow.engine.stage import Stage, StageContext


def _candidates(queries: QueryBatch, sizes: list[int], seed: int) -> Candidates:
    rng = np.random.default_rng(seed)
    qi = np.repeat(np.arange(len(sizes)), sizes)
    rows = np.concatenate([rng.choice(8, size=n, replace=False) for n in sizes]) if sizes else np.empty(0)
    return Candidates.ranked(queries, qi, rows, rng.random(qi.size), Scale.COSINE)


#: Parameter values per kind that may make a stage pass through (and some that make it work).
_PARAMS = {
    "formulate": st.fixed_dictionaries({"formulator": st.sampled_from([None, str.upper, lambda q: [q, q + " x"]])}),
    "rerank": st.fixed_dictionaries({"reranker": st.sampled_from([None, lambda q, segs: [1.0] * len(segs)])}),
    "boost": st.fixed_dictionaries({"boost": st.sampled_from([None, lambda hit: 0.5])}),
    "weight": st.fixed_dictionaries({"weights": st.sampled_from([None, {}, {"name": 2.0}]),
                                     "fetch_k": st.sampled_from([None, 1, 3, 50])}),
    "fuse": st.fixed_dictionaries({"method": st.sampled_from(["rrf"])}),
}


def test_every_builtin_kind_that_passes_through_is_tested_here():
    declared = {kind for kind in stage_kinds()
                if get_stage_class(kind).passes_through is not Stage.passes_through
                and get_stage_class(kind).__module__.startswith("irflow.stages")}
    assert declared == set(_PARAMS)


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(sorted(_PARAMS)), data=st.data(), n_queries=st.integers(1, 3), seed=st.integers(0, 99))
def test_a_declared_pass_through_returns_that_very_input(kind, data, n_queries, seed):
    corpus = fake_corpus()
    cls = get_stage_class(kind)
    stage = cls(**data.draw(_PARAMS[kind]))
    queries = QueryBatch.of([f"python http client {i}" for i in range(n_queries)])
    sizes = data.draw(st.lists(st.integers(0, 5), min_size=n_queries, max_size=n_queries))
    ctx = StageContext(corpus, kind, queries)
    if kind == "formulate":
        inputs = {"query": queries}
    elif kind == "fuse":
        n_live = data.draw(st.integers(1, 2))
        inputs = {"inputs": {f"c{j}": _candidates(queries, sizes, seed + j) for j in range(n_live)}}
    else:
        inputs = {"candidates": _candidates(queries, sizes, seed)}
    live = {port: len(value) if isinstance(value, dict) else 1 for port, value in inputs.items()}
    port = stage.passes_through(live)
    out = stage.run(ctx, **inputs)
    if port is not None:
        value = inputs[port]
        expected = next(iter(value.values())) if isinstance(value, dict) else value
        assert out is expected


@attrs.frozen
class _Counted(Stage):
    kind = "test_counted_through"
    inputs = (Port("candidates", CANDIDATES, "anything"),)
    output = CANDIDATES
    calls = []  # class-level: the frozen instance cannot count

    def passes_through(self, live):
        return "candidates"

    def run(self, ctx, candidates):
        _Counted.calls.append(1)
        return candidates


@pytest.fixture
def counted():
    register_stage(_Counted)
    _Counted.calls.clear()
    yield
    unregister_stage("test_counted_through")


def test_the_engine_skips_a_pass_through_stage_only_when_nothing_records_it(counted):
    recipe = (RecipeBuilder("through", output="through")
              .stage("candidates", "filter")
              .stage("lexical", "lexical", inputs=["candidates"], fetch_k=5)
              .stage("through", "test_counted_through", inputs=["lexical"])
              .build())
    corpus = fake_corpus()
    plain = recipe.run(corpus, "sql parser")
    assert _Counted.calls == []  # skipped: its output is its input
    assert plain.output("through") is plain.output("lexical")
    traced = recipe.run(corpus, "sql parser", trace=True)
    assert _Counted.calls == [1]  # a trace shows every stage, so it runs
    assert [h.record_id for h in traced.hits] == [h.record_id for h in plain.hits]


@pytest.mark.parametrize("name", builtin_recipes())
@pytest.mark.parametrize("query", ["python http client", "sql parser", ""])
def test_every_builtin_recipe_gives_the_same_answer_with_and_without_skipping(name, query):
    recipe = load_recipe(name)
    corpus = fake_corpus()
    plain = recipe.run(corpus, query)
    traced = recipe.run(corpus, query, trace=True)  # traced: every stage runs
    for stage, value in traced.outputs.items():
        assert stage in plain.outputs
        if isinstance(value, Candidates):
            assert plain.outputs[stage] == value, stage
    assert [(h.record_id, h.score) for h in plain.hits] == [(h.record_id, h.score) for h in traced.hits]


@attrs.frozen
class _OffOnQuery(Stage):
    """Its input, or an inactive batch for a query containing "off": a stage switching itself off at run time."""

    kind = "test_off_on_query"
    inputs = (Port("candidates", CANDIDATES, "anything"),)
    output = CANDIDATES

    def run(self, ctx, candidates):
        if any("off" in text for text in ctx.queries.texts):
            return Candidates.inactive(ctx.queries)
        return candidates


@pytest.fixture
def off_on_query():
    register_stage(_OffOnQuery)
    yield
    unregister_stage("test_off_on_query")


@pytest.mark.parametrize("query", ["sql parser off", "sql parser"])
def test_a_stage_that_switches_itself_off_at_run_time_reaches_the_planned_stages_downstream(off_on_query, query):
    # the plan expects both channels live; at run time one may come out inactive, and the
    # stages after it must then see what a traced run (every stage the general way) sees
    recipe = (RecipeBuilder("switching", output="top")
              .stage("candidates", "filter")
              .stage("lexical", "lexical", inputs=["candidates"], fetch_k=5)
              .stage("dense", "dense", inputs=["candidates"], fetch_k=5)
              .stage("maybe", "test_off_on_query", inputs=["dense"])
              .stage("fuse", "fuse", inputs=["lexical", "maybe"], method="rrf")
              .stage("top", "collapse", inputs=["fuse"], k=3)
              .build())
    corpus = fake_corpus()
    plain = recipe.run(corpus, query)
    traced = recipe.run(corpus, query, trace=True)
    assert plain.output("maybe").active is ("off" not in query)
    for stage, value in traced.outputs.items():
        if isinstance(value, Candidates):
            assert plain.outputs[stage] == value, stage
    assert [(h.record_id, h.score) for h in plain.hits] == [(h.record_id, h.score) for h in traced.hits]
    if "off" in query:  # the fuse of one live channel is that channel, as a traced run gives
        assert plain.output("fuse").row.tolist() == plain.output("lexical").row.tolist()


@attrs.frozen
class _OptionalThrough(Stage):
    """Passes its one optional input through: a planned run must not call it, even when that input is off."""

    kind = "test_optional_through"
    inputs = (Port("candidates", CANDIDATES, "optional", required=False),)
    output = CANDIDATES
    calls = []

    def passes_through(self, live):
        return "candidates"

    def run(self, ctx, candidates=None):
        _OptionalThrough.calls.append(candidates.active)
        return candidates


@pytest.fixture
def optional_through():
    register_stage(_OptionalThrough)
    _OptionalThrough.calls.clear()
    yield
    unregister_stage("test_optional_through")


@pytest.mark.parametrize("on", [True, False])
def test_a_pass_through_of_a_switched_off_upstream_is_its_inactive_output_without_a_call(optional_through, on):
    recipe = (RecipeBuilder("optional", output="top").param("on", False)
              .stage("candidates", "filter")
              .stage("lexical", "lexical", inputs=["candidates"], fetch_k=5, when={"on": [True]})
              .stage("maybe", "test_optional_through", inputs=["lexical"])
              .stage("top", "collapse", inputs=["maybe"], k=3)
              .build())
    corpus = fake_corpus()
    plain = recipe.run(corpus, "sql parser", on=on)
    assert _OptionalThrough.calls == []
    assert plain.output("maybe") is plain.output("lexical")
    assert plain.output("maybe").active is on and plain.output("top").active is on
    traced = recipe.run(corpus, "sql parser", on=on, trace=True)
    assert [(h.record_id, h.score) for h in plain.hits] == [(h.record_id, h.score) for h in traced.hits]
