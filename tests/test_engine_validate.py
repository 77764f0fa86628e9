"""Every validation rule, its message (file, stage, fix), and all problems reported together."""

from __future__ import annotations

import textwrap

import pytest

from irflow.errors import RecipeError
from irflow.engine.recipe import Recipe, RecipeBuilder, ref
from irflow.engine.validate import analyze, validate_recipe

GOOD = """
[recipe]
name = "t"
output = "collapse"

[params]
k = 10

[stages.candidates]
kind = "filter"

[stages.dense]
kind = "dense"
inputs = ["candidates"]

[stages.lexical]
kind = "lexical"
inputs = ["candidates"]

[stages.fuse]
kind = "fuse"
inputs = ["dense", "lexical"]

[stages.collapse]
kind = "collapse"
inputs = ["fuse"]
k = "$k"
"""


def problems(text: str, source: str = "t.toml") -> list[str]:
    with pytest.raises(RecipeError) as info:
        Recipe.from_toml(textwrap.dedent(text), source=source)
    assert info.value.source == source
    return list(info.value.problems)


def one(text: str, *needles: str) -> str:
    """The single problem of ``text``; it names the file and contains every needle."""
    found = problems(text)
    assert len(found) == 1, found
    message = found[0]
    assert message.startswith("t.toml: "), message
    for needle in needles:
        assert needle in message, (needle, message)
    return message


def test_the_good_recipe_is_valid():
    recipe = Recipe.from_toml(GOOD, source="t.toml")
    assert recipe.problems() == []
    validate_recipe(recipe)


# -- kinds and parameters -----------------------------------------------------------


def test_unknown_kind_lists_known_kinds_and_the_closest():
    message = one(GOOD.replace('kind = "dense"', 'kind = "dens"'),
                  "stage 'dense'", "unknown kind 'dens'", "did you mean 'dense'?",
                  "known kinds: ", "irflow.register_stage", '"irflow.stages"')
    listed = message.split("known kinds: ", 1)[1].split(" (", 1)[0].split(", ")
    assert listed == sorted(listed) and {"collapse", "dense", "filter", "fuse", "lexical"} <= set(listed)


def test_unknown_parameter_lists_valid_parameters():
    one(GOOD.replace('inputs = ["candidates"]\n\n[stages.lexical]', 'inputs = ["candidates"]\nfetchk = 5\n\n[stages.lexical]'),
        "stage 'dense' (dense)", "unknown parameter 'fetchk'", "did you mean 'fetch_k'?",
        "valid parameters of dense: fetch_k: int = 50")


@pytest.mark.parametrize("line, needles", [
    ('fetch_k = "ten"', ["parameter fetch_k = 'ten'", "must be a positive integer", "valid: fetch_k: int = 50"]),
    ("fetch_k = 0", ["parameter fetch_k = 0", "must be a positive integer"]),
    ("fetch_k = true", ["parameter fetch_k = True", "must be a positive integer"]),
    ('bm25 = { k2 = 1.0 }', ["parameter bm25 = {'k2': 1.0}", "k2", "valid keys"]),
    ('bm25 = "okapi"', ["parameter bm25 = 'okapi'", "must be a table"]),
])
def test_ill_typed_parameters_name_the_stage_and_what_fits(line, needles):
    text = GOOD.replace('[stages.lexical]\nkind = "lexical"', f'[stages.lexical]\nkind = "lexical"\n{line}')
    one(text, "stage 'lexical' (lexical)", *needles)


def test_choice_parameters_suggest_the_closest():
    one(GOOD.replace('inputs = ["dense", "lexical"]', 'inputs = ["dense", "lexical"]\nmethod = "rff"'),
        "stage 'fuse' (fuse)", "parameter method = 'rff'", "must be one of 'rrf', 'blend'", "did you mean 'rrf'?")


def test_filter_parameters_are_checked_by_the_filter_language():
    one(GOOD.replace('kind = "filter"', 'kind = "filter"\nfilter = { stars = { "$gt5" = 1 } }'),
        "stage 'candidates' (filter)", "parameter filter", "$gt5")


def test_ill_typed_default_of_a_referenced_parameter():
    one(GOOD.replace("k = 10", 'k = "ten"'),
        "stage 'collapse' (collapse)", "parameter k = 'ten' (from recipe parameter $k)", "must be a positive integer")


def test_missing_required_parameter():
    import attrs

    from engine_fakes import ShiftStage
    from irflow.engine import register_stage, unregister_stage

    @attrs.frozen
    class Needy(ShiftStage):
        kind = "needy"
        amount: float = attrs.field(kw_only=True)

    register_stage(Needy)
    try:
        text = GOOD.replace('inputs = ["fuse"]', 'inputs = ["needy"]') + '\n[stages.needy]\nkind = "needy"\ninputs = ["fuse"]\n'
        one(text, "stage 'needy' (needy)", "missing required parameter amount")
    finally:
        unregister_stage("needy")


def test_unknown_parameter_reference():
    one(GOOD.replace('k = "$k"', 'k = "$kk"'),
        "stage 'collapse' (collapse)", "refers to $kk, which is not a recipe parameter", "did you mean 'k'?",
        "declare it under [params]")


def test_malformed_reference():
    one(GOOD.replace('k = "$k"', 'k = "$1k"'), "stage 'collapse'", "is not a valid reference", '"$$...')


def test_escaped_dollar_is_a_literal():
    recipe = Recipe.from_toml(GOOD.replace('kind = "filter"', 'kind = "filter"\nfilter = { owner = "$$me" }'))
    assert recipe.problems() == []  # "$$me" is the literal "$me", not a reference


# -- wiring ------------------------------------------------------------------------------


def test_unconnected_input_names_the_port_and_the_call_to_make():
    one(GOOD.replace('[stages.dense]\nkind = "dense"\ninputs = ["candidates"]', '[stages.dense]\nkind = "dense"'),
        "stage 'dense' (dense)", "input port mask (Mask) is not connected",
        'inputs = { mask = "candidates" }', "stages here that output Mask: candidates")


def test_unconnected_input_without_a_fitting_stage_names_the_kind_to_add():
    text = """
    [recipe]
    name = "t"
    output = "dense"
    [stages.dense]
    kind = "dense"
    """
    one(text, "stage 'dense' (dense)", "is not connected, and no stage here outputs Mask",
        "add a stage of kind filter", 'inputs = { mask = "<that stage>" }')


def test_variadic_port_needs_at_least_one_input():
    text = GOOD.replace('inputs = ["dense", "lexical"]', "inputs = []")
    found = problems(text)
    assert "stage 'fuse' (fuse): input port inputs (Candidates, any number) is not connected" in found[0]
    assert 'e.g. inputs = ["dense", "lexical"]' in found[0]
    assert all("unreachable" in p for p in found[1:])  # dense and lexical really lead nowhere now


def test_type_mismatch_names_both_ports_their_types_and_what_fits():
    text = GOOD.replace('[stages.collapse]\nkind = "collapse"\ninputs = ["fuse"]',
                        '[stages.collapse]\nkind = "collapse"\ninputs = ["candidates"]')
    found = problems(text)
    mismatch = [p for p in found if "cannot take" in p]
    assert len(mismatch) == 1, found
    message = mismatch[0]
    for needle in ("t.toml: stage 'collapse' (collapse)", "input port candidates (Candidates)",
                   "stage 'candidates' (filter), whose output is Mask", "the port needs Candidates",
                   "dense, lexical, fuse"):
        assert needle in message, (needle, message)
    # the fuse no longer leads to the output: reported too, in the same error
    assert any("stage 'fuse' (fuse) is unreachable" in p for p in found)


def test_variadic_port_minimum():
    import attrs

    from irflow.engine.ports import CANDIDATES, Port
    from irflow.engine import register_stage, Stage, unregister_stage

    @attrs.frozen
    class Pair(Stage):
        kind = "pair"
        inputs = (Port("inputs", CANDIDATES, variadic=True, minimum=2),)

        def run(self, ctx, inputs):
            return next(iter(inputs.values()))

    register_stage(Pair)
    try:
        text = GOOD.replace('inputs = ["fuse"]', 'inputs = ["pair"]') + '\n[stages.pair]\nkind = "pair"\ninputs = ["fuse"]\n'
        one(text, "stage 'pair' (pair)", "input port inputs (Candidates, any number) needs at least 2 stages, got 1")
    finally:
        unregister_stage("pair")


def test_type_mismatch_without_fitting_stage_suggests_a_kind():
    text = """
    [recipe]
    name = "t"
    output = "collapse"
    [stages.candidates]
    kind = "filter"
    [stages.collapse]
    kind = "collapse"
    inputs = ["candidates"]
    """
    one(text, "input port candidates (Candidates) cannot take stage 'candidates' (filter)",
        "add a stage of kind dense or lexical between them")


def test_unknown_upstream_stage():
    one(GOOD.replace('inputs = ["dense", "lexical"]', 'inputs = ["dense", "lexicl"]'),
        "stage 'fuse' (fuse)", "input 'lexicl' is not a stage of this recipe", "did you mean 'lexical'?")


def test_unknown_port_in_table_form():
    one(GOOD.replace('inputs = ["fuse"]', 'inputs = { candidate = "fuse" }'),
        "stage 'collapse' (collapse)", "has no input port 'candidate'", "did you mean 'candidates'?",
        "its ports: candidates (Candidates)")


def test_too_many_inputs_in_list_form():
    one(GOOD.replace('inputs = ["fuse"]', 'inputs = ["fuse", "dense"]'),
        "stage 'collapse' (collapse)", "takes the inputs candidates (Candidates) but 2 were given",
        "remove 'dense'")


def test_two_stages_for_a_single_port():
    one(GOOD.replace('inputs = ["fuse"]', 'inputs = { candidates = ["fuse", "dense"] }'),
        "input port candidates (Candidates) takes exactly one stage")


def test_table_form_and_explicit_query_port_are_valid():
    text = GOOD.replace('[stages.dense]\nkind = "dense"\ninputs = ["candidates"]',
                        '[stages.dense]\nkind = "dense"\ninputs = { mask = "candidates", query = "query" }')
    assert Recipe.from_toml(text).problems() == []


# -- the graph ------------------------------------------------------------------------


def test_cycle_names_the_stages_on_it():
    text = GOOD + '\n[stages.a]\nkind = "collapse"\ninputs = ["b"]\n[stages.b]\nkind = "collapse"\ninputs = ["a"]\n'
    found = problems(text)
    assert any("stages 'a' -> 'b' -> 'a' form a cycle" in p and "remove one of these inputs" in p for p in found)


def test_self_loop_is_a_cycle():
    found = problems(GOOD.replace('inputs = ["fuse"]', 'inputs = ["collapse"]'))
    assert any("'collapse' -> 'collapse' form a cycle" in p for p in found), found


def test_unreachable_stage():
    one(GOOD + '\n[stages.extra]\nkind = "dense"\ninputs = ["candidates"]\n',
        "stage 'extra' (dense) is unreachable", "does not lead to the output 'collapse'", "or remove it")


def test_missing_output():
    one(GOOD.replace('output = "collapse"\n', ""), "[recipe] has no output", 'add output = "<stage>"',
        "stages: candidates, dense, lexical, fuse, collapse")


def test_unknown_output():
    one(GOOD.replace('output = "collapse"', 'output = "colapse"'),
        "output 'colapse' is not a stage", "did you mean 'collapse'?")


def test_builder_without_output():
    with pytest.raises(RecipeError, match=r"<python>: the recipe has no output; call .output"):
        RecipeBuilder("x").stage("candidates", "filter").build()


# -- names, params, when, choices, derived ------------------------------------------------


def test_reserved_and_invalid_stage_names():
    text = GOOD.replace("[stages.candidates]", "[stages.query]").replace('["candidates"]', '["query"]')
    found = problems(text)
    assert any("stage name 'query' is reserved for the raw query batch" in p for p in found), found
    found = problems(GOOD.replace("[stages.candidates]", '[stages."cand.idates"]').replace(
        '["candidates"]', '["cand.idates"]'))
    assert any("stage name 'cand.idates' is not valid" in p for p in found), found


def test_reserved_and_invalid_parameter_names():
    one(GOOD.replace("k = 10", "k = 10\ntrace = true"), "recipe parameter name 'trace' is reserved", "rename it")
    one(GOOD.replace("k = 10", 'k = 10\n"my k" = 1'), "recipe parameter name 'my k' is not an identifier")


def test_bad_when_key_and_value():
    one(GOOD.replace('inputs = ["dense", "lexical"]', 'inputs = ["dense", "lexical"]\nwhen = { mde = ["x"] }'),
        "stage 'fuse' (fuse)", "when refers to 'mde', which is not a recipe parameter", "declare it under [params]")
    text = GOOD.replace("k = 10", 'k = 10\nmode = "dense"\n\n[choices]\nmode = ["dense", "hybrid"]').replace(
        'inputs = ["dense", "lexical"]', 'inputs = ["dense", "lexical"]\nwhen = { mode = ["hybird"] }')
    one(text, "when.mode lists 'hybird', which is not one of the choices of mode", "did you mean 'hybrid'?")
    one(GOOD.replace('inputs = ["dense", "lexical"]', 'inputs = ["dense", "lexical"]\nwhen = { k = [{ a = 1 }] }'),
        "when.k must be a value or a non-empty list of values")
    one(GOOD.replace('inputs = ["dense", "lexical"]', 'inputs = ["dense", "lexical"]\nwhen = 3'),
        "when must be a table param = [values]")


def test_choices_must_name_params_and_hold_the_default():
    one(GOOD.replace("k = 10", 'k = 10\n\n[choices]\nmode = ["a"]'), "[choices] names 'mode', which is not a recipe parameter")
    one(GOOD.replace("k = 10", 'k = 10\n\n[choices]\nk = [5, 20]'), "the default of parameter 'k' (10) is not among its [choices]")
    one(GOOD.replace("k = 10", 'k = 10\n\n[choices]\nk = "x"'), "[choices] k must be a non-empty list")


def test_derived_rules_are_checked():
    base = GOOD.replace("k = 10", "k = 10\nper_artifact = true")
    one(base + '\n[derived.fetch]\nrule = "overfetch"\nk = "$k"\n', "derived parameter 'fetch'",
        "unknown rule 'overfetch'", "did you mean 'over_fetch'?", "rules: over_fetch")
    one(base + '\n[derived.fetch]\nrule = "over_fetch"\nk = "$k"\nfactr = 2\n',
        "rule 'over_fetch' has no argument 'factr'", "did you mean 'factor'?", "its arguments: k, if_any, factor, minimum")
    one(base + '\n[derived.fetch]\nrule = "over_fetch"\nk = "$k"\nif_any = ["$per_artifct"]\n',
        "argument if_any refers to '$per_artifct', which is not a recipe parameter", "did you mean 'per_artifact'?")
    one(base + '\n[derived.fetch]\nrule = "over_fetch"\nk = 0\n', "derived parameter 'fetch' (rule 'over_fetch')",
        "must be a positive integer")
    one(base + '\n[derived.fetch]\nk = 1\n', "[derived.fetch] needs rule =")


def test_a_derived_when_is_checked_and_leaves_the_rule_out_when_it_does_not_hold():
    base = GOOD.replace("k = 10", 'k = 10\nfetch_k = 7\nmode = "one"\n\n[choices]\nmode = ["one", "two"]')
    deepen = '\n[derived.deepen_to]\nrule = "deepen"\nk = "$k"\n'
    one(base + deepen + 'when = { mde = ["one"] }\n', "derived parameter 'deepen_to'",
        "when refers to 'mde', which is not a recipe parameter", "did you mean 'mode'?")
    one(base + deepen + 'when = { mode = ["tow"] }\n', "when.mode lists 'tow', which is not one of the choices of mode",
        "did you mean 'two'?")
    one(base + deepen + "when = 3\n", "derived parameter 'deepen_to'", "when must be a table param = [values]")
    one(base + deepen + "when = { mode = [] }\n", "when.mode must be a value or a non-empty list of values")
    recipe = Recipe.from_toml(base + deepen + 'given = "$fetch_k"\nwhen = { mode = "one" }\n', source="t.toml")
    assert recipe.problems() == []
    assert recipe.resolve_params({"fetch_k": None})["deepen_to"] == 10
    assert recipe.resolve_params({"fetch_k": None, "mode": "two"})["deepen_to"] is None  # when does not hold
    assert recipe.resolve_params({})["deepen_to"] is None  # a fetch_k is given (7): no deepening
    assert recipe.resolve_params({"mode": "two", "deepen_to": 3})["deepen_to"] == 3  # the caller's own value
    assert Recipe.from_dict(recipe.to_dict()) == recipe and Recipe.from_yaml(recipe.to_yaml()) == recipe


# -- structure -------------------------------------------------------------------------------


@pytest.mark.parametrize("edit, needles", [
    (lambda t: t + "\n[stage.x]\nkind = 'dense'\n", ["unknown top-level table 'stage'", "did you mean 'stages'?"]),
    (lambda t: t.replace('name = "t"', 'name = "t"\noutptu = "x"'), ["unknown key 'outptu' in [recipe]"]),
    (lambda t: t.replace('name = "t"\n', ""), ["[recipe] needs a name"]),
    (lambda t: t.replace('[stages.candidates]\nkind = "filter"', '[stages.candidates]\nsurfaces = ["a"]'),
     ["stage 'candidates' has no kind; add kind ="]),
    (lambda t: t.replace('kind = "filter"', "kind = 3"), ["stage 'candidates': kind must be a string"]),
    (lambda t: t.replace('inputs = ["fuse"]', "inputs = 3"), ["stage 'collapse': inputs must be a list of stage names"]),
    (lambda t: t.replace("k = 10", "k = 10\n\n[recipe.extra]\n"), ["unknown key 'extra' in [recipe]"]),
])
def test_structural_problems(edit, needles):
    found = problems(edit(GOOD))
    assert len(found) == 1, found
    for needle in needles:
        assert needle in found[0], (needle, found[0])


def test_no_stages_and_null_params_conflict():
    found = problems('[recipe]\nname = "x"\noutput = "a"\nnull_params = ["k"]\n[params]\nk = 1\n')
    assert any("no stages" in p for p in found)
    assert any("'k' is listed in null_params but has the default 1" in p for p in found)


def test_toml_and_yaml_syntax_errors_name_the_file():
    with pytest.raises(RecipeError, match=r"t.toml: not valid TOML"):
        Recipe.from_toml("[recipe", source="t.toml")
    with pytest.raises(RecipeError, match=r"t.yaml: not valid YAML"):
        Recipe.from_yaml("a: [", source="t.yaml")
    with pytest.raises(RecipeError, match=r"t.yaml: a recipe file must hold a mapping"):
        Recipe.from_yaml("- 1", source="t.yaml")


# -- scales ---------------------------------------------------------------------------------


def test_blend_needs_a_cosine_and_a_bm25_input():
    text = GOOD.replace('[stages.lexical]\nkind = "lexical"', '[stages.lexical]\nkind = "dense"').replace(
        'inputs = ["dense", "lexical"]', 'inputs = ["dense", "lexical"]\nmethod = "blend"')
    one(text, "stage 'fuse' (fuse)", 'method "blend" needs one input on the cosine scale',
        "got dense (cosine), lexical (cosine)", 'Use method = "rrf"')


def test_blend_fuses_exactly_two_inputs():
    text = GOOD.replace('inputs = ["dense", "lexical"]', 'inputs = ["dense", "lexical", "dense2"]\nmethod = "blend"') + \
        '\n[stages.dense2]\nkind = "dense"\ninputs = ["candidates"]\n'
    one(text, 'method "blend" fuses exactly two inputs', "got 3")


def test_fuse_weights_are_keyed_by_input_stage_name():
    one(GOOD.replace('inputs = ["dense", "lexical"]', 'inputs = ["dense", "lexical"]\nweights = { "0" = 2.0 }'),
        "stage 'fuse' (fuse)", "weights names '0', which is not an input of this stage (inputs: dense, lexical)")
    one(GOOD.replace('inputs = ["dense", "lexical"]',
                     'inputs = ["dense", "lexical"]\nmethod = "blend"\nweights = { dense = 2.0 }'),
        'weights apply to method "rrf" only')
    one(GOOD.replace('inputs = ["dense", "lexical"]', 'inputs = ["dense", "lexical"]\nweights = { dense = -1 }'),
        "values must be finite numbers >= 0")


def test_scale_problems_are_found_next_to_a_cycle():
    text = GOOD.replace('inputs = ["dense", "lexical"]', 'inputs = ["dense", "dense2"]\nmethod = "blend"') + \
        '\n[stages.dense2]\nkind = "dense"\ninputs = ["candidates"]\n' + \
        '\n[stages.a]\nkind = "collapse"\ninputs = ["b"]\n[stages.b]\nkind = "collapse"\ninputs = ["a"]\n'
    found = problems(text)
    assert any("form a cycle" in p for p in found)
    assert any('method "blend" needs one input on the cosine scale' in p for p in found)


# -- all together --------------------------------------------------------------------------------


def test_many_problems_are_reported_together():
    text = """
    [recipe]
    name = "bad"
    output = "collapse"

    [params]
    k = 10

    [stages.candidates]
    kind = "filtr"

    [stages.dense]
    kind = "dense"
    fetchk = 5

    [stages.lexical]
    kind = "lexical"
    inputs = ["candidates"]
    fetch_k = "many"

    [stages.fuse]
    kind = "fuse"
    inputs = ["dense", "lexicl"]
    when = { mode = ["hybrid"] }

    [stages.collapse]
    kind = "collapse"
    inputs = ["fuse"]
    k = "$kk"

    [stages.orphan]
    kind = "collapse"
    inputs = ["fuse"]
    """
    found = problems(text, source="bad.toml")
    expected = [
        "stage 'candidates': unknown kind 'filtr'",
        "stage 'dense' (dense): unknown parameter 'fetchk'",
        "stage 'lexical' (lexical): parameter fetch_k = 'many'",
        "stage 'fuse' (fuse): when refers to 'mode'",
        "stage 'collapse' (collapse): parameter k refers to $kk",
        "stage 'dense' (dense): input port mask (Mask) is not connected",
        "stage 'fuse' (fuse): input 'lexicl' is not a stage",
        "stage 'orphan' (collapse) is unreachable",
    ]
    for needle in expected:
        assert any(needle in p for p in found), (needle, found)
    assert all(p.startswith("bad.toml: ") for p in found)
    assert len(found) == len(expected), found
    with pytest.raises(RecipeError) as info:
        Recipe.from_toml(textwrap.dedent(text), source="bad.toml")
    assert str(info.value).startswith(f"invalid recipe in bad.toml: {len(expected)} problems")


def test_python_and_dict_sources_are_named():
    with pytest.raises(RecipeError) as info:
        RecipeBuilder("x", output="c").stage("c", "colapse").build()
    assert info.value.problems[0].startswith("<python>: stage 'c': unknown kind 'colapse'")
    with pytest.raises(RecipeError) as info:
        Recipe.from_dict({"recipe": {"name": "x", "output": "c"}, "stages": {"c": {"kind": "colapse"}}})
    assert info.value.problems[0].startswith("<dict>: stage 'c'")


def test_analysis_exposes_static_scales():
    analysis = analyze(Recipe.from_toml(GOOD))
    assert analysis.problems == ()
    assert {s.value for s in analysis.scales["dense"]} == {"cosine"}
    assert {s.value for s in analysis.scales["lexical"]} == {"bm25"}
    assert {"rrf", "cosine"} <= {s.value for s in analysis.scales["collapse"]}


def test_validation_without_raising():
    recipe = Recipe.from_toml(GOOD.replace('kind = "dense"', 'kind = "dens"'), validate=False)
    assert len(recipe.problems()) == 1
    with pytest.raises(RecipeError):
        recipe.validate()
    with pytest.raises(RecipeError):
        recipe.run(None, "q")
    assert RecipeBuilder("x", output="c").stage("c", "dense", fetch_k=ref("f")).build(validate=False).problems()


def test_a_python_stage_without_kind():
    with pytest.raises(RecipeError, match=r"<python>: stage 'c' has no kind; give it one of: .*collapse, dense"):
        RecipeBuilder("x", output="c").stage("c", "").build()


def test_an_edited_recipe_is_a_python_recipe():
    loaded = Recipe.from_toml(GOOD, source="t.toml")
    edited = loaded.with_stage("collapse", "collapse", k="ten")
    assert edited.source == "<python>"
    assert edited.problems()[0].startswith("<python>: stage 'collapse' (collapse): parameter k = 'ten'")
