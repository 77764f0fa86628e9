"""Recipes: built-ins, the three equal forms, round trips, equality by structure, safety."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import irflow.engine.registry as registry
from engine_fakes import fake_corpus
from irflow.errors import RecipeError
from irflow.engine.recipe import (
    DERIVED_RULES,
    FrozenMap,
    OverFetch,
    Recipe,
    RecipeBuilder,
    StageSpec,
    builtin_recipes,
    load_recipe,
    param_ref,
    ref,
)
from irflow.recipes.builders import BUILDERS

BUILTINS = ("dense", "hybrid", "lexical", "search")


# -- built-in recipes ---------------------------------------------------------------------


def test_builtin_names():
    assert set(BUILTINS) <= set(builtin_recipes())
    assert set(BUILDERS) == set(builtin_recipes())  # every built-in (tests/test_builtin_recipes.py runs them all)


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_recipes_equal_their_python_builders_and_run(name):
    recipe = load_recipe(name)
    assert recipe.source == f"recipes/{name}.toml"
    assert recipe == BUILDERS[name]()
    assert recipe.problems() == []
    result = recipe.run(fake_corpus(), ["python http client", "sql parser"], k=2)
    assert [len(h) for h in result.hits] == [2, 2]


def test_hybrid_yaml_equals_hybrid_toml():
    from importlib.resources import files

    from irflow.engine.kinds import _source_subpackage

    text = (files(_source_subpackage("recipes")) / "hybrid.yaml").read_text()
    assert Recipe.from_yaml(text, source="recipes/hybrid.yaml") == load_recipe("hybrid")


def test_unknown_builtin_lists_the_builtins():
    with pytest.raises(RecipeError, match=r"'hybird' is neither a recipe file nor a built-in recipe "
                                          r"\(did you mean 'hybrid'\?\); built-in recipes: dense, expand-rerank, hybrid, "):
        load_recipe("hybird")
    with pytest.raises(RecipeError, match=r"nope.toml: no such recipe file"):
        load_recipe("nope.toml")


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".yml"])
def test_save_and_load_a_file(tmp_path, suffix):
    recipe = load_recipe("hybrid")
    path = recipe.save(tmp_path / f"mine{suffix}")
    loaded = load_recipe(path)
    assert loaded == recipe and loaded.source == str(path)
    assert load_recipe(str(path)) == recipe
    with pytest.raises(ValueError, match="use a .toml, .yaml or .yml suffix"):
        recipe.save(tmp_path / "mine.txt")


def test_a_file_without_suffix_is_read_as_toml_then_yaml(tmp_path):
    (tmp_path / "r1").write_text(load_recipe("dense").to_toml())
    (tmp_path / "r2").write_text(load_recipe("dense").to_yaml())
    assert load_recipe(tmp_path / "r1") == load_recipe(tmp_path / "r2") == load_recipe("dense")


def test_problems_in_a_file_name_the_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(load_recipe("dense").to_toml().replace('kind = "dense"', 'kind = "dens"'))
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert info.value.problems[0].startswith(f"{path}: stage 'dense': unknown kind 'dens'")
    assert str(info.value).startswith(f"invalid recipe in {path}:")
    assert load_recipe(path, validate=False).problems()


# -- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUILTINS)
def test_round_trips_of_every_form(name):
    recipe = load_recipe(name)
    via_toml = Recipe.from_toml(recipe.to_toml())
    via_yaml = Recipe.from_yaml(recipe.to_yaml())
    via_dict = Recipe.from_dict(recipe.to_dict())
    assert via_toml == via_yaml == via_dict == recipe
    assert Recipe.from_yaml(via_toml.to_yaml()).to_toml() == recipe.to_toml()
    assert via_dict.source == "<dict>" and via_toml.source == "<toml>"


def test_equality_is_by_structure():
    a = load_recipe("hybrid")
    d = a.to_dict()
    d["stages"] = dict(reversed(list(d["stages"].items())))  # declaration order is not structure
    d["params"] = dict(reversed(list(d["params"].items())))
    b = Recipe.from_dict(d)
    assert a == b and hash(a) == hash(b)
    assert a != a.with_params(k=11)
    assert a != a.with_stage("fuse", "fuse", inputs=["lexical", "dense"])  # input order is structure
    assert {a, b} == {a}


def test_none_params_in_each_form():
    recipe = load_recipe("hybrid")
    assert recipe.params["filter"] is None and recipe.params["fetch_k"] is None
    toml = recipe.to_toml()
    assert 'null_params = ["filter", "surfaces", "bm25", "fetch_k"]' in toml
    assert "filter: null" in recipe.to_yaml()
    assert recipe.to_dict()["params"]["filter"] is None


def test_a_none_stage_parameter_is_the_same_as_leaving_it_out():
    with_none = RecipeBuilder("r", output="c").stage("c", "filter", filter=None).build()
    without = RecipeBuilder("r", output="c").stage("c", "filter").build()
    assert with_none == without and "filter" not in with_none.stages["c"].params


def test_toml_refuses_what_it_cannot_hold():
    recipe = load_recipe("dense").with_stage("candidates", "filter", filter={"owner": None})
    with pytest.raises(RecipeError, match=r"stages.candidates.filter.owner is None, which TOML cannot hold"):
        recipe.to_toml()
    assert Recipe.from_yaml(recipe.to_yaml(), validate=False) == recipe
    with_callable = load_recipe("dense").with_params(scorer=len)
    with pytest.raises(RecipeError, match=r"params.scorer holds the Python object .* register it with "
                                          r"irflow.registry.register\('<name>', obj\)"):
        with_callable.to_toml()
    with pytest.raises(RecipeError, match="which YAML cannot name|register it with irflow.registry"):
        with_callable.to_yaml()


def test_quoted_keys_and_odd_strings_survive_toml():
    recipe = RecipeBuilder("odd", output="c").param("greeting", 'say "hi"\n\tand\\bye \x7f').stage(
        "c", "filter", filter={"weird key": {"$in": ["a b", "ü"]}, "": 1}).build(validate=False)
    assert Recipe.from_toml(recipe.to_toml(), validate=False) == recipe
    assert Recipe.from_yaml(recipe.to_yaml(), validate=False) == recipe


# -- safety -----------------------------------------------------------------------------------


def test_yaml_is_loaded_safely():
    evil = "recipe: !!python/object/apply:os.system ['echo pwned']\n"
    with pytest.raises(RecipeError, match="not valid YAML"):
        Recipe.from_yaml(evil)


def test_strings_never_become_code():
    # an import-path-looking string is only ever data (or a registry name, never imported)
    recipe = RecipeBuilder("r", output="c").param("hook", "os:system").stage("c", "filter").build()
    assert recipe.params["hook"] == "os:system"
    with pytest.raises(registry.UnknownEntry, match=r"no callable named 'os:system' in irflow.registry"):
        registry.resolve("os:system")


def test_registry():
    def scorer(x):
        return x

    with registry.registered("my_scorer", scorer):
        assert registry.resolve("my_scorer") is scorer
        assert "my_scorer" in registry.names()
        with pytest.raises(registry.UnknownEntry, match=r"did you mean 'my_scorer'\?.*registered names: .*my_scorer"):
            registry.lookup("my_scorr")
        with pytest.raises(ValueError, match="is taken"):
            registry.register("my_scorer", len)
    assert "my_scorer" not in registry.names()
    assert registry.resolve(None) is None and registry.resolve(len) is len
    with pytest.raises(TypeError, match="name of an irflow.registry entry"):
        registry.resolve(3)
    with pytest.raises(ValueError, match="identifier-like"):
        registry.register("bad name", len)
    with pytest.raises(KeyError):  # UnknownEntry is a KeyError
        registry.lookup("absent")


# -- editing, references, derived ----------------------------------------------------------------


def test_swapping_a_stage_keeps_its_wiring():
    recipe = load_recipe("dense").with_stage("dense", "lexical", fetch_k="$fetch_k")
    assert recipe.stages["dense"].inputs == ("candidates",) and recipe.stages["dense"].kind == "lexical"
    assert recipe.problems() == []
    result = recipe.run(fake_corpus(), "parser")
    assert result.output("dense").scale.value == "bm25"


def test_without_stage_and_with_output():
    recipe = load_recipe("hybrid").without_stage("collapse").with_output("fuse")
    assert "collapse" not in recipe.stages and recipe.output == "fuse" and recipe.problems() == []
    with pytest.raises(KeyError, match="has no stage 'x'"):
        recipe.without_stage("x")


def test_param_references():
    assert ref("k") == "$k" and param_ref("$k") == "k" and param_ref("k") is None
    assert param_ref("$$k") is None and param_ref("$1") == "$1"


def test_over_fetch_rule():
    assert DERIVED_RULES["over_fetch"] is OverFetch
    assert OverFetch(k=10, if_any=(False, None, {}))(None) == 10
    assert OverFetch(k=20, if_any=(True,))(None) == 100
    assert OverFetch(k=2, if_any=("x",), factor=3, minimum=0)(None) == 6
    assert OverFetch(k=2)(9) == 9


def test_stage_spec_forms():
    spec = StageSpec("f", "fuse", "dense", {"rrf_k": 5, "weights": None}, {"mode": "hybrid"})
    assert spec.inputs == ("dense",) and spec.when == {"mode": ("hybrid",)} and "weights" not in spec.params
    table = StageSpec("d", "dense", {"mask": "candidates", "query": "q2"})
    assert table.upstream_names() == ("candidates", "q2")
    assert table.to_dict() == {"kind": "dense", "inputs": {"mask": "candidates", "query": "q2"}}
    assert isinstance(table.inputs, FrozenMap) and FrozenMap({"a": 1}) == {"a": 1}


def test_pipeline_graph_queries_and_renderings():
    pipeline = load_recipe("hybrid").pipeline()
    assert pipeline.order == ("candidates", "dense", "lexical", "fuse", "collapse")
    assert pipeline.upstream("fuse") == {"candidates", "dense", "lexical"}
    assert pipeline.downstream("dense") == {"fuse", "collapse"}
    assert pipeline.needed("fuse", overrides=["dense"]) == ("candidates", "dense", "lexical", "fuse")
    assert pipeline.needed("fuse", overrides=["dense", "lexical"]) == ("dense", "lexical", "fuse")
    assert pipeline.graph.has_edge("query", "dense") and pipeline.graph.edges["candidates", "dense"]["ports"] == ["mask"]
    assert "dense -->|inputs| fuse" in pipeline.to_mermaid()
    assert '"candidates" -> "dense" [label="mask"];' in pipeline.to_dot()
    with pytest.raises(KeyError, match="has no stage 'fusion'"):
        pipeline.upstream("fusion")
    assert load_recipe("hybrid").pipeline() is not pipeline  # each recipe object validates once
    recipe = load_recipe("hybrid")
    assert recipe.pipeline() is recipe.pipeline()


# -- generated recipes ----------------------------------------------------------------------------

_names = st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True).filter(lambda n: n != "query")
_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
_scalars = st.one_of(
    _text, st.booleans(), st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=True),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(_text, inner, max_size=3)),
    max_leaves=8,
)


@st.composite
def recipes(draw):
    stage_names = draw(st.lists(_names, min_size=1, max_size=5, unique=True))
    params = draw(st.dictionaries(_names, st.one_of(st.none(), _values), max_size=4))
    stages = {}
    for name in stage_names:
        kind = draw(st.sampled_from(["filter", "dense", "lexical", "fuse", "collapse", "third_party"]))
        body = {"kind": kind}
        others = [n for n in stage_names if n != name]
        if others and draw(st.booleans()):
            if draw(st.booleans()):
                body["inputs"] = draw(st.lists(st.sampled_from(others), min_size=1, max_size=3))
            else:
                body["inputs"] = {draw(_names): draw(st.sampled_from(others))}
        if params and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(params)))
            body["when"] = {key: draw(st.lists(st.one_of(_text, st.integers(-5, 5), st.booleans()),
                                               min_size=1, max_size=3))}
        stage_params = draw(st.dictionaries(_text.filter(lambda k: k not in ("kind", "inputs", "when")),
                                            st.one_of(_values, st.sampled_from([f"${p}" for p in params] or ["$x"])),
                                            max_size=3))
        body.update(stage_params)
        stages[name] = body
    data = {"recipe": {"name": draw(_text.filter(bool)), "description": draw(_text), "output": draw(st.sampled_from(stage_names))},
            "stages": stages}
    if params:
        data["params"] = params
        if draw(st.booleans()):
            key = draw(st.sampled_from(sorted(params)))
            data["choices"] = {key: draw(st.lists(_scalars, min_size=1, max_size=3))}
    if draw(st.booleans()):
        data["derived"] = {draw(_names): {"rule": "over_fetch", "k": draw(st.integers(1, 9)),
                                          "if_any": [draw(_text)]}}
    return Recipe.from_dict(data, validate=False)


@settings(max_examples=int(__import__("os").environ.get("IRFLOW_HYPOTHESIS_EXAMPLES", 40)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(recipes())
def test_generated_recipes_round_trip_through_every_form(recipe):
    assert Recipe.from_toml(recipe.to_toml(), validate=False) == recipe
    assert Recipe.from_yaml(recipe.to_yaml(), validate=False) == recipe
    assert Recipe.from_dict(recipe.to_dict(), validate=False) == recipe
    assert Recipe.from_yaml(Recipe.from_toml(recipe.to_toml(), validate=False).to_yaml(), validate=False) == recipe


def test_floats_survive():
    recipe = RecipeBuilder("f", output="c").param("a", 0.1).param("b", math.inf).param("c", -0.0).stage(
        "c", "filter").build()
    again = Recipe.from_toml(recipe.to_toml())
    assert again.params["a"] == 0.1 and again.params["b"] == math.inf
    assert again == Recipe.from_yaml(recipe.to_yaml())
