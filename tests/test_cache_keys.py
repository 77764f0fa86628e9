"""Type-exact cache keys: no cache answers one value with what it computed for another (issue 10, item 1).

``True == 1 == 1.0`` in Python, so every cache keyed by equality mixed them up:
after ``filter={"n": 1}`` ran, ``filter={"n": True}`` returned the ``n == 1``
record, and ``rrf_k=True`` was accepted once ``rrf_k=1`` had been validated.
The oracle of these tests is a fresh computation (or a fresh process's answer)
and a naive per-record filter evaluator, never the cache itself.
"""

from __future__ import annotations

import math
import struct
from collections import namedtuple
from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import irflow
from irflow import build, search
from irflow.util.cachekey import UnkeyableError, cache_key, stable_digest
from irflow.evaluation.datasets import Collection, Document
from irflow.errors import CorpusError, FilterError, RecipeError, UnknownSurfaceWarning
from irflow.evaluation.cache import _documents_digest
from irflow.evaluation.plans import _system_plans
from irflow.engine.executor import StageCache

from filter_reference import matches

# -- the key itself ----------------------------------------------------------------------------------

Pair = namedtuple("Pair", "a b")


@attrs.frozen
class Frozen:
    x: Any
    y: Any = 0


def identical(a: Any, b: Any) -> bool:
    """The reference: equal AND of the same types, recursively; floats by bit pattern (so -0.0 is not 0.0, NaN is NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, dict):
        if len(a) != len(b):
            return False
        # keys match by the same rule: find each key of a among b's keys
        for ka, va in a.items():
            partners = [kb for kb in b if identical(ka, kb)]
            if len(partners) != 1 or not identical(va, b[partners[0]]):
                return False
        return True
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b))
    if isinstance(a, (set, frozenset)):
        return len(a) == len(b) and all(any(identical(x, y) for y in b) for x in a)
    if isinstance(a, Frozen):
        return identical(a.x, b.x) and identical(a.y, b.y)
    if callable(a):
        return a is b
    return a == b


def _fn_a(x: Any) -> Any:
    return x


def _fn_b(x: Any) -> Any:
    return x


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, 2.0, float("nan")]),
    st.text(max_size=3),
    st.sampled_from(["1", "True", "", "a"]),
    st.binary(max_size=2),
    st.sampled_from([np.int64(1), np.int32(1), np.float32(1.0), np.float64(1.0), np.bool_(True), np.float64(-0.0)]),
    st.sampled_from([_fn_a, _fn_b, len, print]),
)
hashable_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from([0.0, 1.0, -0.0]),
                             st.sampled_from(["1", "a"]))


def _arrays() -> st.SearchStrategy:
    return st.builds(
        lambda values, dtype: np.array(values, dtype=dtype),
        st.lists(st.integers(0, 2), max_size=3),
        st.sampled_from([np.int64, np.int32, np.float32, np.float64, np.bool_]),
    )


values = st.recursive(
    st.one_of(scalars, _arrays()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(hashable_scalars, inner, max_size=3),
        st.frozensets(hashable_scalars, max_size=3),
        st.builds(Pair, inner, inner),
        st.builds(Frozen, inner, inner),
    ),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None)
@given(values, values)
def test_same_key_exactly_when_equal_and_of_the_same_types(a: Any, b: Any) -> None:
    assert (cache_key(a) == cache_key(b)) == identical(a, b)
    if cache_key(a) == cache_key(b):
        assert hash(cache_key(a)) == hash(cache_key(b))


@settings(max_examples=200, deadline=None)
@given(values)
def test_a_value_has_one_key(a: Any) -> None:
    # the same value (or a copy made of the same parts) always gets the same key: caches do hit
    assert cache_key(a) == cache_key(a)
    assert identical(a, a) or a is not a  # the reference agrees (NaN included)


@pytest.mark.parametrize("a, b", [
    (1, True), (0, False), (1, 1.0), (0.0, -0.0), ((1, 2), [1, 2]), ({"n": 1}, {"n": True}),
    ({"n": [1]}, {"n": [1.0]}), ([np.int64(1)], [1]), (np.float32(1), np.float64(1)), ("1", 1),
    (np.array([1, 2], dtype=np.int64), np.array([1, 2], dtype=np.int32)), (np.array([1, 2]), np.array([[1, 2]])),
    (Pair(1, 2), (1, 2)), (Frozen(1), Frozen(True)), (frozenset({1}), {1}),
])
def test_the_named_confusions_get_different_keys(a: Any, b: Any) -> None:
    assert cache_key(a) != cache_key(b)  # Python calls most of these pairs equal; the cache must not


def test_dict_order_does_not_matter_and_callables_go_by_identity() -> None:
    assert cache_key({"a": 1, "b": [2, {"c": 3}]}) == cache_key({"b": [2, {"c": 3}], "a": 1})
    assert cache_key({"f": _fn_a}) == cache_key({"f": _fn_a}) != cache_key({"f": _fn_b})
    box = [1]
    assert cache_key(box.append) == cache_key(box.append)  # bound methods: same object and function
    assert cache_key([].append) != cache_key(box.append)


def test_identity_keys_hold_their_object() -> None:
    # an id() alone could be recycled once its object dies; the key keeps the object alive instead
    key = cache_key(lambda x: x)
    for _ in range(100):
        assert cache_key(lambda x: x) != key


def test_too_deep_or_cyclic_values_have_no_key() -> None:
    deep: Any = 1
    for _ in range(500):
        deep = [deep]
    with pytest.raises(UnkeyableError):
        cache_key(deep)
    loop: list = []
    loop.append(loop)
    with pytest.raises(UnkeyableError):
        cache_key(loop)


def test_stable_digest_is_type_exact_and_the_same_in_every_process() -> None:
    import subprocess
    import sys

    value = {"b": [1, 2.5, True, None, "x"], "a": {"n": np.int64(3)}, "c": frozenset({"p", "q", "r"})}
    code = ("import numpy as np; from irflow.util.cachekey import stable_digest; "
            "print(stable_digest({'b': [1, 2.5, True, None, 'x'], 'a': {'n': np.int64(3)}, "
            "'c': frozenset({'p', 'q', 'r'})}))")
    other = {stable_digest(value)}
    for seed in ("1", "2"):  # another hash seed: set and dict orders differ there
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**__import__("os").environ, "PYTHONHASHSEED": seed})
        other.add(out.stdout.strip())
    assert len(other) == 1
    assert stable_digest([1]) != stable_digest([True]) != stable_digest([1.0])
    assert stable_digest(10 ** 5000) != stable_digest(10 ** 5000 + 1)  # no decimal digit limit
    with pytest.raises(UnkeyableError):
        stable_digest({"f": _fn_a})


# -- search: the answer never depends on which search ran before ---------------------------------------

RECORDS = [
    {"artifact_id": "one", "surface_kind": "name", "text": "alpha beta", "metadata": {"n": 1, "flag": 0}},
    {"artifact_id": "true", "surface_kind": "name", "text": "alpha gamma", "metadata": {"n": True, "flag": False}},
    {"artifact_id": "float", "surface_kind": "name", "text": "alpha delta", "metadata": {"n": 1.5, "flag": 0.0}},
    {"artifact_id": "str", "surface_kind": "name", "text": "alpha", "metadata": {"n": "1", "flag": "0"}},
    {"artifact_id": "list", "surface_kind": "name", "text": "alpha", "metadata": {"n": [2, True], "flag": [False]}},
]
FILTER_VALUES = [1, True, 1.0, 0, False, 0.0, "1", "0", None, [1], [True], [False], [2, True], [2.0, True], 2, 1.5,
                 {"$in": [1]}, {"$in": [True]}, {"$gte": 1}, {"$ne": True}, {"$ne": 1}]


def _expected(spec: dict) -> list[str]:
    return sorted(r["artifact_id"] for r in RECORDS if matches(r["metadata"], spec))


@pytest.fixture(scope="module")
def corpus() -> irflow.Corpus:
    return build(RECORDS, embedder="hash:16")


def test_the_issue_sequences(corpus: irflow.Corpus) -> None:
    def hits(f: dict) -> list[str]:
        return sorted(h.artifact_id for h in search(corpus, "alpha", mode="lexical", filter=f, k=10))

    assert hits({"n": 1}) == ["one"]
    assert hits({"n": True}) == ["list", "true"]  # was ["one"]: the instance cached for {"n": 1}
    assert hits({"flag": 0}) == ["float", "one"]
    assert hits({"flag": False}) == ["list", "true"]  # was []: the instance of {"flag": 0}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["n", "flag"]), st.sampled_from(FILTER_VALUES)), min_size=1, max_size=6))
def test_any_sequence_of_filters_gets_the_answers_of_a_fresh_process(corpus: irflow.Corpus, sequence: list) -> None:
    """Whatever ran before, each filter's hits are what a naive evaluator says (1 and 1.0 agree, true and 1 do not)."""
    for path, value in sequence:
        spec = {path: value}
        got = sorted(h.artifact_id for h in search(corpus, "alpha", mode="lexical", filter=spec, k=10))
        assert got == _expected(spec), spec
        assert np.flatnonzero(corpus.candidate_mask(spec)).tolist() == [
            row for row, r in enumerate(RECORDS) if matches(r["metadata"], spec)]


def test_a_cache_hit_never_skips_validation(corpus: irflow.Corpus) -> None:
    with pytest.raises(RecipeError, match="rrf_k"):
        search(corpus, "alpha", mode="hybrid", rrf_k=True)
    search(corpus, "alpha", mode="hybrid", rrf_k=1)
    with pytest.raises(RecipeError, match="rrf_k"):  # was accepted: the instances cached for rrf_k=1
        search(corpus, "alpha", mode="hybrid", rrf_k=True)
    search(corpus, "alpha", mode="lexical", k=3)
    with pytest.raises(RecipeError):
        search(corpus, "alpha", mode="lexical", k=3.0)
    search(corpus, "alpha", mode="lexical", per_artifact=False)
    with pytest.raises(RecipeError):
        search(corpus, "alpha", mode="lexical", per_artifact=0)


def test_resolved_parameters_are_remembered_but_hold_the_callers_objects() -> None:
    """search() resolves a set of arguments once per recipe; a hit never hands back an earlier call's object."""
    recipe = irflow.load_recipe("search")
    first_filter = {"n": 1}
    first = recipe.resolve_params({"mode": "lexical", "filter": first_filter})
    first_filter["n"] = 2  # the caller reuses its dict
    fresh = {"n": 1}
    again = recipe.resolve_params({"mode": "lexical", "filter": fresh})
    assert again["filter"] is fresh and again == {**first, "filter": {"n": 1}}
    assert again is not recipe.resolve_params({"mode": "lexical", "filter": fresh})  # a new dict every time
    assert recipe.resolve_params({"mode": "lexical", "k": 3})["k"] == 3
    with pytest.raises(RecipeError, match="k"):  # type-exact: 3.0 is not 3's entry
        recipe.resolve_params({"mode": "lexical", "k": 3.0})


def test_stage_cache_keys_parameters_by_type(corpus: irflow.Corpus) -> None:
    recipe = irflow.load_recipe("search")
    cache = StageCache()
    first = recipe.run(corpus, "alpha", mode="lexical", filter={"n": 1}, cache=cache, trace=True)
    second = recipe.run(corpus, "alpha", mode="lexical", filter={"n": True}, cache=cache, trace=True)
    assert [h.artifact_id for h in first.hits] == ["one"]
    assert sorted(h.artifact_id for h in second.hits) == ["list", "true"]  # was ["one"]: {"n": 1}'s mask
    assert second.trace.event("candidates").status == "ran"
    again = recipe.run(corpus, "alpha", mode="lexical", filter={"n": 1}, cache=cache, trace=True)
    assert again.trace.event("candidates").status == "cached" and again.hits == first.hits  # equal values do hit


@pytest.mark.filterwarnings("ignore::irflow.errors.UnknownFieldWarning")  # the field "deep" is meant to be absent
def test_stage_cache_skips_a_parameter_it_cannot_key(corpus: irflow.Corpus, monkeypatch: pytest.MonkeyPatch) -> None:
    # run arguments nest at most 64 levels (irflow.util.fileio): lower the key's limit to reach the unkeyable path
    monkeypatch.setattr("irflow.util.cachekey.MAX_DEPTH", 8)
    recipe = irflow.load_recipe("search")
    cache = StageCache()
    deep: Any = "x"
    for _ in range(20):
        deep = {"a": deep}
    spec = {"$or": [{"n": 1}, {"deep": deep}]}
    for _ in range(2):
        result = recipe.run(corpus, "alpha", mode="lexical", filter=spec, cache=cache, trace=True)
        assert [h.artifact_id for h in result.hits] == ["one"]
        assert result.trace.event("candidates").status == "ran"
        assert result.trace.event("lexical").status == "ran"  # downstream of an unkeyed output never hits


def test_mask_cache_keys_surface_kinds_by_type(corpus: irflow.Corpus) -> None:
    assert corpus.candidate_mask(surfaces=["name"]).all()
    with pytest.raises(FilterError):  # no kind held: refused, never a cached mask of another key
        corpus.candidate_mask(surfaces=[np.str_("other")])
    with pytest.warns(UnknownSurfaceWarning):
        assert corpus.candidate_mask(surfaces=("name", "name", "x")).all()  # repeats and order do not matter


# -- the other caches ------------------------------------------------------------------------------------


def test_eval_cache_digest_tells_types_apart() -> None:
    def digest(value: Any) -> str:
        return _documents_digest(Collection("c", None, {"d": Document("d", "", "text", {"v": value})}, {}, {}))

    digests = {digest(v) for v in ("1", 1, True, 1.0, np.int64(1), [1], [True])}
    assert len(digests) == 7  # with json default=str, "1" and numpy.int64(1) were one key
    assert digest({"a": 1, "b": 2}) == digest({"b": 2, "a": 1})
    with pytest.raises(CorpusError, match="use_cache=False"):
        digest(object())


def test_sweep_settings_are_deduplicated_by_type() -> None:
    recipe = irflow.load_recipe("search")
    plans = _system_plans("s", recipe, {}, [{"per_artifact": True}, {"per_artifact": 1}, {"per_artifact": True}],
                          depth=10, per_document=False)
    assert [p.params["per_artifact"] for p in plans] == [True, 1]  # 1 was hidden behind True


def test_module_docstrings_are_valid_doctests() -> None:
    import doctest

    import irflow.util.cachekey
    import irflow.store.generations

    for module in (irflow.util.cachekey, irflow.store.generations):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__
