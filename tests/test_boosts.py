"""dependency_evidence_boost (issue 4 §2, seed ir.retrieve.dependency_evidence_boost) and the module constants."""

from __future__ import annotations

import doctest
import math
import typing

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import irflow.api.boosts as boosts_module
import irflow.api.constants as constants
from irflow.api.boosts import BoostError, DependencyEvidenceBoost, dependency_evidence_boost, normalize_name, requirement_name
from irflow.errors import IrflowError
from irflow.store.records import SearchHit

# The seed's example, verbatim except the import line (ir.base -> irflow.store.records).
SEED_EXAMPLE = '''
>>> from irflow.store.records import SearchHit
>>> boost = dependency_evidence_boost({"networkx"}, weight=0.1)
>>> boost(SearchHit("unbox", "description", 0.4, "", {"deps": ["networkx>=3"]}))
0.1
>>> boost(SearchHit("au", "description", 0.5, "", {"deps": ["anyio"]}))
0.0
'''


def with_deps(deps, field="deps"):
    return SearchHit("art", "description", 0.5, "", {field: deps} if deps is not ... else {})


def test_seed_doctest_example_runs():
    test = doctest.DocTestParser().get_doctest(SEED_EXAMPLE, {"dependency_evidence_boost": dependency_evidence_boost}, "seed", None, 0)
    runner = doctest.DocTestRunner()
    runner.run(test)
    assert runner.summarize(verbose=False) == doctest.TestResults(failed=0, attempted=4)


def test_seed_values_are_exact_floats():
    boost = dependency_evidence_boost({"networkx"}, weight=0.1)
    up = boost(SearchHit("unbox", "description", 0.4, "", {"deps": ["networkx>=3"]}))
    down = boost(SearchHit("au", "description", 0.5, "", {"deps": ["anyio"]}))
    assert (type(up), up, repr(up)) == (float, 0.1, "0.1")
    assert (type(down), down, repr(down)) == (float, 0.0, "0.0")


def test_module_docstrings_are_valid_doctests():
    result = doctest.testmod(boosts_module)
    assert result.attempted > 0 and result.failed == 0


# --- name reduction --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, name",
    [
        ("networkx", "networkx"),
        ("networkx>=3", "networkx"),
        ("NetworkX >= 3.0, < 4", "networkx"),
        ("requests[security,socks]>=2.8", "requests"),
        ("tomli>=2.0; python_version < '3.11'", "tomli"),
        ("importlib_metadata ; python_version<'3.8'", "importlib-metadata"),
        ("my_pkg @ https://example.com/my_pkg-1.0.zip", "my-pkg"),
        ("pkg@git+https://example.com/pkg.git", "pkg"),
        ("  Zope.Interface  ", "zope-interface"),
        ("numpy (>=1.2, <2)", "numpy"),
        ("ruamel.yaml.clib~=0.2", "ruamel-yaml-clib"),
        ("A__B--C..d===1", "a-b-c-d"),
        ("pkg!=1.0", "pkg"),
        ("", None),
        ("   ", None),
        (">=1.0", None),
        ("; python_version < '3'", None),
        ("https://example.com/x.zip", None),
        ("git+https://example.com/x.git", None),
    ],
)
def test_requirement_name_reduces_to_the_bare_pep503_name(spec, name):
    assert requirement_name(spec) == name


def test_normalize_name_follows_pep_503():
    assert normalize_name("Friendly-Bard") == normalize_name("FRIENDLY-BARD") == normalize_name("friendly.bard") == "friendly-bard"
    assert normalize_name("friendly_bard") == normalize_name("friendly--bard") == normalize_name("FrIeNdLy-._.-bArD") == "friendly-bard"


# --- the boost -------------------------------------------------------------------------------


def test_relevant_libs_are_normalized_like_the_dependencies():
    boost = dependency_evidence_boost(["Scikit_Learn>=1", "typing.extensions"], weight=1.0)
    assert boost.relevant_libs == frozenset({"scikit-learn", "typing-extensions"})
    assert boost(with_deps(["scikit-learn[alldeps] (>=1.0)"])) == 1.0
    assert boost(with_deps(["Typing_Extensions>=4; python_version<'3.12'"])) == 1.0


def test_a_single_string_relevant_lib_is_one_name():
    assert dependency_evidence_boost("networkx", weight=0.5)(with_deps(["networkx"])) == 0.5


def test_saturation_counts_distinct_relevant_names():
    boost = dependency_evidence_boost({"numpy", "scipy", "pandas"}, weight=0.3, saturate=2)
    assert boost(with_deps(["numpy>=1"])) == 0.3 * 1 / 2
    assert boost(with_deps(["numpy>=1", "scipy"])) == 0.3 * 2 / 2
    assert boost(with_deps(["numpy>=1", "scipy", "pandas"])) == 0.3  # capped at saturate
    # the same library twice (two markers, other spellings) counts once
    assert boost(with_deps(["numpy>=1; python_version<'3.9'", "NumPy>=2; python_version>='3.9'", "numpy"])) == 0.15
    assert boost(with_deps(["requests", "flask"])) == 0.0


def test_default_saturate_gives_full_weight_for_one_match():
    boost = dependency_evidence_boost({"a", "b"}, weight=0.2)
    assert boost(with_deps(["a"])) == boost(with_deps(["a", "b"])) == 0.2


def test_a_single_deps_string_is_split_into_requirements():
    boost = dependency_evidence_boost({"scipy", "numpy", "b"}, weight=1.0, saturate=3)
    # commas inside [..] and (..) do not split; a bare version clause names nothing
    assert boost(with_deps("numpy>=1,<2")) == pytest.approx(1 / 3)
    assert boost(with_deps("pkg[a,b] (>=1, <2), scipy\nnumpy")) == pytest.approx(2 / 3)
    assert boost(with_deps("networkx")) == 0.0


def test_missing_or_odd_deps_fields_give_no_boost():
    boost = dependency_evidence_boost({"numpy"}, weight=0.4)
    assert boost(with_deps(...)) == 0.0
    assert boost(with_deps(None)) == 0.0
    assert boost(with_deps(42)) == 0.0
    assert boost(with_deps([None, 3, "numpy"])) == 0.4  # junk entries are skipped, not fatal
    assert boost(with_deps(("numpy",))) == 0.4  # any iterable of strings


def test_deps_field_selects_the_metadata_key():
    boost = dependency_evidence_boost({"numpy"}, weight=0.4, deps_field="requires")
    assert boost(with_deps(["numpy"], field="requires")) == 0.4
    assert boost(with_deps(["numpy"])) == 0.0


def test_negative_weight_is_a_penalty_and_no_match_is_plain_zero():
    boost = dependency_evidence_boost({"numpy"}, weight=-0.25)
    assert boost(with_deps(["numpy"])) == -0.25
    no_match = boost(with_deps(["scipy"]))
    assert no_match == 0.0 and math.copysign(1.0, no_match) == 1.0  # not -0.0


def test_matches_explains_the_boost_and_the_repr_is_stable():
    boost = dependency_evidence_boost({"b-lib", "a_lib"}, weight=0.1)
    assert boost.matches(with_deps(["A.Lib>=1", "c"])) == frozenset({"a-lib"})
    assert repr(boost) == "DependencyEvidenceBoost(relevant_libs=['a-lib', 'b-lib'], weight=0.1, saturate=1, deps_field='deps')"


def test_the_boost_is_a_frozen_parameter_object():
    boost = dependency_evidence_boost({"x"}, weight=0.1)
    assert isinstance(boost, DependencyEvidenceBoost)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        boost.weight = 2.0  # type: ignore[misc]
    assert boost == dependency_evidence_boost(["X"], weight=0.1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"weight": math.nan}, "weight"),
        ({"weight": math.inf}, "weight"),
        ({"weight": "0.1"}, "weight"),
        ({"weight": True}, "weight"),
        ({"weight": 0.1, "saturate": 0}, "saturate"),
        ({"weight": 0.1, "saturate": 1.5}, "saturate"),
        ({"weight": 0.1, "saturate": True}, "saturate"),
        ({"weight": 0.1, "deps_field": ""}, "deps_field"),
    ],
)
def test_invalid_parameters_are_rejected(kwargs, match):
    with pytest.raises(BoostError, match=match) as info:
        dependency_evidence_boost({"x"}, **kwargs)
    assert isinstance(info.value, ValueError) and isinstance(info.value, IrflowError)


@pytest.mark.parametrize("libs", [[""], [">=1"], [None], 42])
def test_unusable_relevant_libs_are_rejected(libs):
    with pytest.raises(BoostError, match="relevant_libs"):
        dependency_evidence_boost(libs, weight=0.1)


def test_weight_is_required():
    with pytest.raises(TypeError):
        dependency_evidence_boost({"x"})  # type: ignore[call-arg]


NAMES = st.sampled_from(["numpy", "scipy", "pandas", "networkx", "attrs", "click"])
DECOR = st.sampled_from(["", ">=1", "[extra]", " (>=1,<2)", "; python_version>'3'", " @ https://x.org/p.zip", "==2.0"])


@given(
    st.sets(NAMES, max_size=4),
    st.lists(st.tuples(NAMES, DECOR, st.booleans()), max_size=8),
    st.floats(-2, 2, allow_nan=False),
    st.integers(1, 4),
)
def test_property_boost_is_weight_times_capped_distinct_matches(relevant, deps, weight, saturate):
    specs = [(name.upper() if upper else name) + decor for name, decor, upper in deps]
    boost = dependency_evidence_boost(relevant, weight=weight, saturate=saturate)
    n = len({name for name, _, _ in deps} & relevant)
    expected = 0.0 if n == 0 else weight * min(n, saturate) / saturate
    assert boost(with_deps(specs)) == expected


# --- constants --------------------------------------------------------------------------------


def test_module_constants_match_the_seed():
    assert constants.MODES == ("dense", "lexical", "hybrid")
    assert constants.FUSIONS == ("rrf", "blend")
    assert constants.DFLT_RRF_K == 60 and isinstance(constants.DFLT_RRF_K, int)
    assert constants.DFLT_BLEND_ALPHA == 0.5
    assert constants.DFLT_BM25_SAT_K == 8.0 and isinstance(constants.DFLT_BM25_SAT_K, float)


def test_type_aliases_have_the_seed_shapes():
    assert typing.get_origin(constants.ScoreBoost) is typing.get_origin(typing.Callable[[int], float])
    assert typing.get_args(constants.ScoreBoost) == ([SearchHit], float)
    assert typing.get_args(constants.Retriever)[1] == list[SearchHit]
    identity_args = typing.get_args(constants.Identity)
    assert str in identity_args and type(None) in identity_args
    assert any(typing.get_args(a) == ([SearchHit], typing.Any) for a in identity_args)
    assert isinstance(dependency_evidence_boost({"x"}, weight=1.0), typing.get_origin(constants.ScoreBoost))
