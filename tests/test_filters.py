"""Tests of the metadata filter language (irflow.kernels.filters) and its columns (irflow.kernels.columns).

Unit tests pin each operator and each MongoDB missing-field rule (several
cases are MongoDB's own jstests, null_query_semantics.js and null2.js); a
hypothesis property test checks compiled filters against the per-record
reference evaluator in ``filter_reference.py``.
"""

from __future__ import annotations

import enum
import math

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import irflow.kernels.columns as columns_module
from filter_reference import candidates, lookup
from filter_reference import matches as reference_matches
from irflow.kernels.columns import MetadataColumns, canonical_key, resolve_path
from irflow.errors import FilterError, IrflowError
from irflow.kernels.filters import FIELD_OPERATORS, CompiledFilter, compile_filter, normalize_filter

RECORDS = [
    {"owner": "me", "name": "unbox", "stars": 12, "tags": ["cli", "archive"], "meta": {"lang": "py", "score": 0.5}},
    {"owner": "you", "name": "zipit", "stars": 3.0, "tags": ["cli"], "meta": {"lang": "rs"}},
    {"owner": "me", "name": "Alpha", "stars": None, "tags": [], "flag": True},
    {"owner": None, "stars": 1, "flag": 1, "deps": [{"name": "numpy", "pin": 2}, {"name": "attrs"}]},
    {"name": "beta", "stars": "12", "tags": "cli", "flag": False},
    {},
]
COLUMNS = MetadataColumns(RECORDS)


def rows(spec, records: list = RECORDS) -> list[int]:
    """Row indices a filter keeps, checked against the reference evaluator on the way."""
    cols = COLUMNS if records is RECORDS else MetadataColumns(records)
    mask = compile_filter(spec).mask(cols)
    assert mask.dtype == bool and mask.shape == (len(records),)
    kept = np.flatnonzero(mask).tolist()
    assert kept == [i for i, r in enumerate(records) if reference_matches(r, spec)]
    return kept


# ---------------------------------------------------------------- equality ---------


def test_implicit_equality_on_scalars_and_lists():
    assert rows({"owner": "me"}) == [0, 2]
    assert rows({"tags": "cli"}) == [0, 1, 4]  # list contains, and the plain string field
    assert rows({"tags": ["cli"]}) == [1]  # a list value: the list itself
    assert rows({"tags": ["archive", "cli"]}) == []  # order matters for lists
    assert rows({"tags": []}) == [2]
    assert rows({"meta": {"rs": 1}}) == []


def test_equality_of_nested_lists_and_dicts():
    data = [{"x": [[1, 2], 3]}, {"x": [1, 2]}, {"x": {"b": 1, "a": [2.0]}}, {"x": [[1]]}]
    assert rows({"x": [1, 2]}, data) == [0, 1]  # an element equal to the list, or the list itself
    assert rows({"x": 1}, data) == [1]  # one level of elements only: [[1]] does not contain 1
    assert rows({"x": [1]}, data) == [3]
    assert rows({"x": {"a": [2], "b": 1}}, data) == [2]  # dict key order and 2 == 2.0 ignored
    # Dicts stored alone (row-aligned block) and inside lists (exploded block) share key codes.
    data = [{"x": {"a": 1}}, {"x": [{"a": 1.0}, 2]}, {"x": [[{"a": 1}]]}, {"x": {"a": True}}]
    assert rows({"x": {"a": 1}}, data) == [0, 1]
    assert rows({"x": {"$in": [[{"a": 1}], {"a": True}]}}, data) == [2, 3]


def test_numbers_compare_by_value_and_booleans_are_not_numbers():
    assert rows({"stars": 3}) == [1]  # 3 == 3.0
    assert rows({"stars": 12.0}) == [0]  # not the string "12"
    assert rows({"flag": 1}) == [3]  # True is not 1
    assert rows({"flag": True}) == [2]
    assert rows({"flag": False}) == [4]
    assert rows({"flag": 0}) == []
    data = [{"x": [True, 1]}, {"x": [1.0]}, {"x": [False]}, {"x": -0.0}]
    assert rows({"x": [1]}, data) == [1]
    assert rows({"x": [True, 1.0]}, data) == [0]
    assert rows({"x": 0}, data) == [3]  # -0.0 == 0


def test_eq_and_ne_with_missing_fields():
    assert rows({"owner": {"$eq": "me"}}) == [0, 2]
    assert rows({"owner": {"$ne": "me"}}) == [1, 3, 4, 5]  # missing owner matches $ne
    assert rows({"tags": {"$ne": "cli"}}) == [2, 3, 5]  # no element equals "cli"


def test_none_matches_null_or_missing():
    assert rows({"owner": None}) == [3, 4, 5]
    assert rows({"owner": {"$eq": None}}) == [3, 4, 5]
    assert rows({"owner": {"$ne": None}}) == [0, 1, 2]
    assert rows({"stars": None}) == [2, 5]


# ---------------------------------------------------------------- ranges -----------


def test_ranges_on_numbers_skip_other_types_and_missing():
    assert rows({"stars": {"$gt": 3}}) == [0]  # "12" is a string, None and missing are not numbers
    assert rows({"stars": {"$gte": 3}}) == [0, 1]
    assert rows({"stars": {"$lt": 3}}) == [3]
    assert rows({"stars": {"$lte": 3.0}}) == [1, 3]
    assert rows({"stars": {"$gt": 1, "$lt": 12}}) == [1]
    assert rows({"flag": {"$gte": 0}}) == [3]  # booleans are not numbers
    assert rows({"stars": {"$gt": -math.inf}}) == [0, 1, 3]


def test_ranges_on_strings_are_lexicographic_via_sorted_codes():
    assert COLUMNS.column("name").vocab == ("Alpha", "beta", "unbox", "zipit")
    assert rows({"name": {"$gt": "beta"}}) == [0, 1]
    assert rows({"name": {"$gte": "beta"}}) == [0, 1, 4]
    assert rows({"name": {"$lt": "b"}}) == [2]  # bound not in the vocabulary; "A" < "b"
    assert rows({"name": {"$lte": "unbox"}}) == [0, 2, 4]
    assert rows({"name": {"$gt": "zz"}}) == []
    assert rows({"stars": {"$gte": "1"}}) == [4]  # only the string "12"


def test_ranges_on_list_elements_are_independent_per_operator():
    data = [{"x": [1, 10]}, {"x": [5]}, {"x": []}]
    assert rows({"x": {"$gt": 4, "$lt": 6}}, data) == [0, 1]  # like MongoDB: no $elemMatch


# ---------------------------------------------------------------- $in / $nin --------


def test_in_and_nin():
    assert rows({"owner": {"$in": ["you", "nobody"]}}) == [1]
    assert rows({"owner": {"$in": [None]}}) == [3, 4, 5]  # None in $in matches missing
    assert rows({"owner": {"$nin": ["me"]}}) == [1, 3, 4, 5]  # missing matches $nin
    assert rows({"owner": {"$nin": ["me", None]}}) == [1]
    assert rows({"tags": {"$in": ["archive", 3]}}) == [0]
    assert rows({"stars": {"$in": [1.0, "12", True]}}) == [3, 4]
    assert rows({"owner": {"$in": []}}) == []
    assert rows({"owner": {"$nin": []}}) == [0, 1, 2, 3, 4, 5]
    assert rows({"tags": {"$in": [["cli"], []]}}) == [1, 2]


# ---------------------------------------------------------------- $exists / $all / $size


def test_exists():
    assert rows({"stars": {"$exists": True}}) == [0, 1, 2, 3, 4]  # None counts as present
    assert rows({"stars": {"$exists": False}}) == [5]
    assert rows({"meta.score": {"$exists": True}}) == [0]
    assert rows({"deps.pin": {"$exists": True}}) == [3]
    assert rows({"deps.pin": {"$exists": False}}) == [0, 1, 2, 4, 5]


def test_all():
    assert rows({"tags": {"$all": ["archive", "cli"]}}) == [0]
    assert rows({"tags": {"$all": ["cli"]}}) == [0, 1, 4]  # a scalar field equal to the value too
    assert rows({"tags": {"$all": []}}) == []  # MongoDB: an empty $all matches nothing
    assert rows({"owner": {"$all": [None]}}) == [3, 4, 5]


def test_size():
    assert rows({"tags": {"$size": 1}}) == [1]
    assert rows({"tags": {"$size": 0}}) == [2]
    assert rows({"tags": {"$size": 2}}) == [0]
    assert rows({"owner": {"$size": 0}}) == []
    data = [{"x": [[1, 2]]}, {"x": [{"y": [1, 2]}, {"y": [3]}]}]
    assert rows({"x": {"$size": 2}}, data) == [1]  # the outer list only, not its elements
    assert rows({"x.y": {"$size": 1}}, data) == [1]


# ---------------------------------------------------------------- $not and logic ------


def test_not():
    assert rows({"stars": {"$not": {"$gt": 3}}}) == [1, 2, 3, 4, 5]  # missing and non-numbers too
    assert rows({"owner": {"$not": {"$in": ["me", "you"]}}}) == [3, 4, 5]
    assert rows({"stars": {"$not": {"$not": {"$gt": 3}}}}) == [0]
    assert rows({"stars": {"$not": {"$gte": 1, "$lte": 3}}}) == [0, 2, 4, 5]


def test_and_or_nor_and_top_level_mix():
    assert rows({"$and": [{"owner": "me"}, {"tags": "cli"}]}) == [0]
    assert rows({"$or": [{"owner": "you"}, {"flag": True}]}) == [1, 2]
    assert rows({"$nor": [{"owner": "me"}, {"flag": {"$exists": True}}]}) == [1, 5]
    assert rows({"owner": "me", "$or": [{"stars": {"$gt": 5}}, {"flag": True}]}) == [0, 2]
    assert rows({"$and": [{}]}) == [0, 1, 2, 3, 4, 5]
    assert rows({"$or": [{"$and": [{"owner": "me"}, {"name": "unbox"}]}, {"$nor": [{"stars": {"$exists": True}}]}]}) == [0, 5]


def test_empty_filter_keeps_every_row():
    for spec in (None, {}):
        compiled = compile_filter(spec)
        assert compiled.matches_all and compiled.fields == ()
        assert compiled.mask(COLUMNS).all()
    assert compile_filter({}).mask(MetadataColumns([])).shape == (0,)
    assert compile_filter({"x": 1}).mask(MetadataColumns([])).shape == (0,)


# ---------------------------------------------------------------- dotted paths -------


def test_dotted_paths_into_mappings_and_through_lists_of_mappings():
    assert rows({"meta.lang": "rs"}) == [1]
    assert rows({"meta.score": {"$lt": 1}}) == [0]
    assert rows({"deps.name": "attrs"}) == [3]  # {"a.b": 1} matches {"a": [{"b": 1}]}
    assert rows({"deps.name": {"$all": ["numpy", "attrs"]}}) == [3]
    assert rows({"deps.pin": None}) == [0, 1, 2, 3, 4, 5]  # {"name": "attrs"} lacks pin
    data = [{"a": {"b": {"c": [1, 2]}}}, {"a": [{"b": [{"c": 2}]}]}, {"a": [[{"b": {"c": 2}}]]}]
    assert rows({"a.b.c": 2}, data) == [0, 1]  # nested lists are not traversed (MongoDB)
    assert resolve_path({"a": [{"b": 1}, {"c": 2}, 5]}, ("a", "b")) == [1, columns_module.MISSING]


MONGO_NULL_DOCS = {
    # jstests/core/null_query_semantics.js (its `undefined` documents left out)
    "a_empty_subobject": {"a": {}},
    "a_null": {"a": None},
    "a_number": {"a": 4},
    "a_subobject_b_not_null": {"a": {"b": "hi"}},
    "a_subobject_b_null": {"a": {"b": None}},
    "no_a": {},
    "a_double_array": {"a": [[]]},
    "a_empty_array": {"a": []},
    "a_object_array_all_b_nulls": {"a": [{"b": None}, {"b": None}, {}]},
    "a_object_array_no_b_nulls": {"a": [{"b": 1}, {"b": 3}, {"b": "string"}]},
    "a_object_array_some_b_nulls": {"a": [{"b": None}, {"b": 3}, {"b": None}]},
    "a_object_array_some_b_missing": {"a": [{"b": 3}, {}]},
    "a_value_array_all_nulls": {"a": [None, None]},
    "a_value_array_no_nulls": {"a": [1, "string", 4]},
    "a_value_array_with_null": {"a": [1, "string", None, 4]},
}
A_NULL = {"a_null", "a_value_array_all_nulls", "a_value_array_with_null", "no_a"}
A_B_NULL = {
    "a_empty_subobject", "a_null", "a_number", "a_subobject_b_null", "no_a",
    "a_object_array_all_b_nulls", "a_object_array_some_b_nulls", "a_object_array_some_b_missing",
}


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({"a": None}, A_NULL),
        ({"a": {"$ne": None}}, set(MONGO_NULL_DOCS) - A_NULL),
        ({"a": {"$in": [None, 75]}}, A_NULL),
        ({"a": {"$nin": [None, 75]}}, set(MONGO_NULL_DOCS) - A_NULL),
        ({"a.b": None}, A_B_NULL),
        ({"a.b": {"$ne": None}}, set(MONGO_NULL_DOCS) - A_B_NULL),
        ({"a.b": {"$in": [None, 75]}}, A_B_NULL),
        ({"$or": [{"a.b": None}, {"a.b": 75}]}, A_B_NULL),
        ({"a.b": {"$nin": [None, 75]}}, set(MONGO_NULL_DOCS) - A_B_NULL),
    ],
)
def test_mongodb_null_query_semantics(spec, expected):
    names = list(MONGO_NULL_DOCS)
    data = [MONGO_NULL_DOCS[n] for n in names]
    assert {names[i] for i in rows(spec, data)} == expected


def test_mongodb_exists_false_and_null2():
    names = ["no_a", "a_empty_subobject", "a_null", "a_number", "a_subobject_b_not_null", "a_subobject_b_null"]
    data = [MONGO_NULL_DOCS[n] for n in names]
    assert {names[i] for i in rows({"a.b": {"$exists": False}}, data)} == {"no_a", "a_empty_subobject", "a_null", "a_number"}
    # jstests/core/null2.js: only documents with an array element lacking b match.
    data = [{"a": [{"b": 5}]}, {"a": [{}]}, {"a": []}, {"a": [{}, {"b": 5}]}, {"a": [5, {"b": 5}]}]
    assert rows({"a.b": None}, data) == rows({"a.b": {"$in": [None]}}, data) == [1, 3]


# ---------------------------------------------------------------- errors --------------


@pytest.mark.parametrize(
    "spec, fragments",
    [
        ({"owner": {"$regex": "^m"}}, ["unknown operator '$regex' at path 'owner'", "valid operators: $eq, $ne, $gt"]),
        ({"$or": [{"a.b": {"$elemMatch": {}}}]}, ["unknown operator '$elemMatch' at path 'a.b' (in $or[0])", "$not"]),
        ({"tags": {"$in": 3}}, ["$in at path 'tags' needs a list, got int"]),
        ({"tags": {"$nin": "cli"}}, ["$nin at path 'tags' needs a list, got str"]),
        ({"tags": {"$all": {"x": 1}}}, ["$all at path 'tags' needs a list, got dict"]),
        ({"n": {"$size": -1}}, ["$size at path 'n' needs a non-negative integer, got -1"]),
        ({"n": {"$size": 1.0}}, ["$size at path 'n' needs a non-negative integer, got float"]),
        ({"n": {"$size": True}}, ["$size at path 'n' needs a non-negative integer, got bool"]),
        ({"n": {"$exists": 1}}, ["$exists at path 'n' needs true or false, got int"]),
        ({"n": {"$gt": None}}, ["$gt at path 'n' needs a number or a string, got None"]),
        ({"n": {"$lte": True}}, ["$lte at path 'n' needs a number or a string, got bool"]),
        ({"n": {"$lt": [1]}}, ["$lt at path 'n' needs a number or a string, got list"]),
        ({"n": {"$not": 3}}, ["$not at path 'n' needs an operator document", "got int", "$ne"]),
        ({"n": {"$not": {}}}, ["$not at path 'n' needs an operator document", "got dict"]),
        ({"n": {"$not": {"$foo": 1}}}, ["unknown operator '$foo' at path 'n'"]),
        ({"n": {"$gt": 1, "x": 2}}, ["path 'n' mixes operators and plain keys"]),
        ({"n": {"$or": [{"n": 1}]}}, ["operator '$or' at path 'n'", "document level"]),
        ({"n": {"$eq": {"$gt": 1}}}, ["operator '$gt' inside a plain value at path 'n'"]),
        ({"n": {"x": {"$gt": 1}}}, ["{'n.x': {'$gt': ...}}"]),
        ({"n": float("nan")}, ["$eq at path 'n'", "NaN is not allowed"]),
        ({"n": {"$in": [1, float("nan")]}}, ["$in at path 'n'", "NaN"]),
        ({"n": {1, 2}}, ["$eq at path 'n'", "unsupported value type set"]),
        ({"$gt": 3}, ["operator '$gt' at the top level needs a field", "$and, $or, $nor"]),
        ({"$where": "x"}, ["unknown operator '$where' at the top level", "$and, $or, $nor"]),
        ({"$or": []}, ["$or at the top level needs a non-empty list of filter documents, got an empty list"]),
        ({"$and": {"a": 1}}, ["$and at the top level needs a non-empty list", "got dict"]),
        ({"$nor": [1]}, ["$nor[0] must be a filter document (a mapping), got int"]),
        ({"$and": [{"$or": 1}]}, ["$or at $and[0] needs a non-empty list"]),
        ({"a..b": 1}, ["invalid field path 'a..b'"]),
        ({"": 1}, ["invalid field path ''"]),
        ({3: 1}, ["field names must be strings, got int 3"]),
    ],
)
def test_invalid_filters_say_what_and_where(spec, fragments):
    with pytest.raises(FilterError) as info:
        compile_filter(spec)
    for fragment in fragments:
        assert fragment in str(info.value)


@pytest.mark.parametrize("spec", [[{"a": 1}], "owner=me", 3])
def test_non_mapping_filters_are_rejected(spec):
    with pytest.raises(FilterError, match="a filter must be a mapping"):
        compile_filter(spec)
    assert issubclass(FilterError, IrflowError) and issubclass(FilterError, ValueError)


def test_unknown_operator_lists_every_valid_operator():
    with pytest.raises(FilterError) as info:
        compile_filter({"x": {"$type": "string"}})
    assert all(op in str(info.value) for op in FIELD_OPERATORS)


# ---------------------------------------------------------------- compile + cache -----


def test_compiled_filters_are_cached_by_canonical_form():
    first = compile_filter({"owner": "me", "stars": {"$gte": 3, "$lt": 10}})
    assert compile_filter({"stars": {"$lt": 10, "$gte": 3}, "owner": "me"}) is first
    assert compile_filter(first) is first
    assert compile_filter({"flag": True}) is not compile_filter({"flag": 1})  # True and 1 are distinct
    assert compile_filter({"tags": ("a", "b")}) is compile_filter({"tags": ["a", "b"]})
    assert compile_filter({"n": np.int64(3)}) is compile_filter({"n": 3})
    assert first.fields == ("owner", "stars")
    assert isinstance(first, CompiledFilter) and hash(first) == hash(compile_filter({"owner": "me", "stars": {"$lt": 10, "$gte": 3}}))


def test_spec_is_a_normalized_copy():
    compiled = compile_filter({"$or": [{"deps.name": ("a",)}, {"x": {"$exists": np.bool_(True)}}]})
    spec = compiled.spec
    assert spec == {"$or": [{"deps.name": ["a"]}, {"x": {"$exists": True}}]}
    spec["$or"].clear()
    assert compiled.spec["$or"]
    assert compiled.fields == ("deps.name", "x")
    assert normalize_filter(None) == {}


def test_columns_are_built_once_per_path_and_masks_do_not_touch_records(monkeypatch):
    cols = MetadataColumns(RECORDS)
    assert cols.cached_paths == ()
    spec = {"$or": [{"owner": "me"}, {"deps.name": {"$in": ["attrs"]}}, {"name": {"$gt": "a"}}]}
    expected = compile_filter(spec).mask(cols)
    assert set(cols.cached_paths) == {"owner", "deps.name", "name"}

    def no_record_walks(*args, **kwargs):
        raise AssertionError("evaluation walked the records")

    monkeypatch.setattr(columns_module, "resolve_path", no_record_walks)
    assert np.array_equal(compile_filter(spec).mask(cols), expected)
    assert np.array_equal(compile_filter({"$nor": [spec]}).mask(cols), ~expected)


def test_columns_accept_numpy_tuples_and_none_metadata():
    cols = MetadataColumns([{"x": np.int64(3), "v": np.array([1, 2])}, {"x": (3.0, "a")}, None, {"x": np.bool_(True)}])
    assert compile_filter({"x": 3}).mask(cols).tolist() == [True, True, False, False]
    assert compile_filter({"v": 2}).mask(cols).tolist() == [True, False, False, False]
    assert compile_filter({"x": True}).mask(cols).tolist() == [False, False, False, True]
    assert compile_filter({"x": {"$size": 2}}).mask(cols).tolist() == [False, True, False, False]
    assert compile_filter({"x": {"$exists": False}}).mask(cols).tolist() == [False, False, True, False]
    class Colour(str, enum.Enum):
        RED = "red"

    class Level(enum.IntEnum):
        HIGH = 3

    cols = MetadataColumns([{"c": Colour.RED, "n": [Level.HIGH]}, {"c": "Colour.RED"}])
    assert compile_filter({"c": "red"}).mask(cols).tolist() == [True, False]  # the value, not str()
    assert compile_filter({"n": {"$gte": 1}}).mask(cols).tolist() == [True, False]
    with pytest.raises(TypeError, match="metadata of row 0 must be a mapping"):
        MetadataColumns([["not", "a", "mapping"]])


def test_unsupported_metadata_types_exist_but_never_equal():
    cols = MetadataColumns([{"x": b"bytes"}, {"x": {1, 2}}, {}])
    assert compile_filter({"x": {"$exists": True}}).mask(cols).tolist() == [True, True, False]
    assert compile_filter({"x": {"$ne": "bytes"}}).mask(cols).tolist() == [True, True, True]
    assert compile_filter({"x": {"$gte": ""}}).mask(cols).tolist() == [False, False, False]


def test_canonical_key_equality_rules():
    assert canonical_key([1, 2.0, {"b": None, "a": "x"}]) == canonical_key((1.0, 2, {"a": "x", "b": None}))
    assert canonical_key(True) != canonical_key(1)
    assert canonical_key("1") != canonical_key(1)
    assert canonical_key(0.1) != canonical_key(0.1000000001)
    assert canonical_key(10**20) == canonical_key(1e20)


# ---------------------------------------------------------------- property test -------

KEYS = ("a", "b", "c")
PATHS = ("a", "b", "c", "a.b", "a.c", "b.a", "a.b.c", "c.a.b")
# A small pool of values, so that random filters and records collide often; it holds the
# traps: 0/-0.0/False, 1/1.0/True, strings that sort around each other, a NUL, huge numbers.
SCALARS = st.sampled_from(
    [None, True, False, 0, 1, 2, -1, 0.0, -0.0, 1.0, 2.5, -1.5, 1e300, math.inf, -math.inf, 2**53,
     "", "a", "b", "ab", "B", "é", "a\x00", "ba"]
)
BOUNDS = st.sampled_from([-1, 0, 1, 2, 0.5, -0.0, 2.5, math.inf, 1e300, "", "a", "aa", "b", "c", "é"])


def _values(scalars: st.SearchStrategy) -> st.SearchStrategy:
    """Nested values: scalars, lists and dicts over the keys a, b, c."""
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=3),
        max_leaves=6,
    )


RECORD_LISTS = st.lists(
    st.dictionaries(st.sampled_from(KEYS), _values(SCALARS | st.just(math.nan)), max_size=3),  # NaN may be stored
    min_size=1,
    max_size=12,
)
# Fixed shapes appended to every random record list, so each example meets them all.
ZOO = list(MONGO_NULL_DOCS.values()) + [
    {"a": 1, "b": "a", "c": [1, "a", None]},
    {"a": True, "b": [True, 1.0], "c": {"a": {"b": [2.5, "b"]}}},
    {"a": [{"b": [1, 2]}, {"b": {"c": "ab"}}], "b": {"a": [[1], {"c": 0}]}},
    {"a": {"b": {"c": -0.0}, "c": []}, "c": [{"a": {"b": ""}}, {"a": [{"b": None}]}]},
]


def _has_nan(value) -> bool:
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, list):
        return any(_has_nan(v) for v in value)
    if isinstance(value, dict):
        return any(_has_nan(v) for v in value.values())
    return False


def _stored_values(records: list, path: str) -> list:
    """The NaN-free values a path holds in the records (and their list elements), to aim filters at."""
    found = candidates([item for record in records for item in lookup(record, path.split("."))])
    return [value for value in found if not _has_nan(value)]


@attrs.frozen
class _Stored:
    """A placeholder for "some value stored in the records", resolved once they are known.

    ``twin`` asks for an equal value written differently (1 <-> 1.0, dict keys
    reversed), so equality by value, not by representation, is exercised.
    ``bound`` asks for a stored number or string, a valid range operand.
    """

    index: int
    twin: bool = False
    bound: bool = False


def _twin(value):
    if isinstance(value, bool) or not isinstance(value, (int, float, list, dict)):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, list):
        return [_twin(v) for v in value]
    return {k: _twin(value[k]) for k in reversed(list(value))}


def _resolve_value(value, pool: list, bounds: list):
    if isinstance(value, _Stored):
        if value.bound:
            return bounds[value.index % len(bounds)]
        found = pool[value.index % len(pool)]
        return _twin(found) if value.twin else found
    if isinstance(value, list):
        return [_resolve_value(v, pool, bounds) for v in value]
    if isinstance(value, dict):
        return {k: _resolve_value(v, pool, bounds) for k, v in value.items()}
    return value


def _resolve(spec: dict, records: list) -> dict:
    """Replace the placeholders of a field by values stored at that field's path (or anywhere)."""
    out = {}
    for key, value in spec.items():
        if key in ("$and", "$or", "$nor"):
            out[key] = [_resolve(sub, records) for sub in value]
            continue
        pool = _stored_values(records, key) or [None, 1, "a", [1], {"a": 1}]
        bounds = [v for v in pool if isinstance(v, (int, float, str)) and not isinstance(v, bool)] or [0, "a"]
        out[key] = _resolve_value(value, pool, bounds)
    return out


def _filters() -> st.SearchStrategy:
    """Random filter documents: fields with values or operator documents, nested $and/$or/$nor.

    Values come from the fixed pool, from the records themselves (``_Stored``
    placeholders, so that filters hit), or are nested lists and dicts.
    """
    values = st.one_of(SCALARS, st.builds(_Stored, st.integers(0, 10**6), st.booleans()), _values(SCALARS))
    bounds = BOUNDS | st.builds(_Stored, st.integers(0, 10**6), bound=st.just(True))
    leaf_operators = {
        "$eq": values, "$ne": values, "$gt": bounds, "$gte": bounds, "$lt": bounds, "$lte": bounds,
        "$in": st.lists(values, max_size=3), "$nin": st.lists(values, max_size=3),
        "$all": st.lists(values, max_size=3), "$exists": st.booleans(), "$size": st.integers(0, 3),
    }

    def operator_documents(operators: dict) -> st.SearchStrategy:
        names = st.lists(st.sampled_from(sorted(operators)), min_size=1, max_size=3, unique=True)
        return names.flatmap(lambda chosen: st.fixed_dictionaries({op: operators[op] for op in chosen}))

    operators = operator_documents({**leaf_operators, "$not": operator_documents(leaf_operators)})
    # Weights by repetition: mostly operator documents, some plain values, some logic.
    conditions = st.one_of(values, operators, operators, operators)

    def documents(depth: int) -> st.SearchStrategy:
        field = st.tuples(st.sampled_from(PATHS), conditions)
        entry = field
        if depth > 0:
            logical = st.tuples(st.sampled_from(["$and", "$or", "$nor"]), st.lists(documents(depth - 1), min_size=1, max_size=3))
            entry = st.one_of(field, field, logical)
        # Few clauses per document: long conjunctions of random clauses almost never match.
        return st.lists(entry, min_size=int(depth == 2), max_size=2).map(dict)

    return documents(2)


FILTERS = _filters()


def _case(records: list, specs: list) -> tuple[list, list]:
    records = records + ZOO
    return records, [_resolve(spec, records) for spec in specs]


def _clauses(spec: dict):
    """The filter and every part of it that is a filter too: sub-documents, fields, single operators.

    Checking each part, not just the whole, keeps a bug visible when a
    random conjunction would hide it by matching nothing anyway.
    """
    yield spec
    for key, value in spec.items():
        if key in ("$and", "$or", "$nor"):
            for sub in value:
                yield from _clauses(sub)
            continue
        yield {key: value}
        if isinstance(value, dict) and value and all(k.startswith("$") for k in value):
            for op, arg in value.items():
                yield {key: {op: arg}}
                if op == "$not":
                    yield from ({key: {inner: inner_arg}} for inner, inner_arg in arg.items())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=RECORD_LISTS, spec=FILTERS)
def test_compiled_filters_agree_with_the_reference_evaluator(records, spec):
    records, (spec,) = _case(records, [spec])
    cols = MetadataColumns(records)
    for clause in _clauses(spec):
        mask = compile_filter(clause).mask(cols)
        assert mask.tolist() == [reference_matches(record, clause) for record in records], clause


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=RECORD_LISTS, specs=st.lists(FILTERS, min_size=4, max_size=4))
def test_cached_columns_serve_many_filters(records, specs):
    records, specs = _case(records, specs)
    cols = MetadataColumns(records)  # columns built by one filter are reused by the next
    for spec in specs:
        assert compile_filter(spec).mask(cols).tolist() == [reference_matches(r, spec) for r in records], spec


@pytest.mark.parametrize("bad, says", [({"n": {"$gtx": 1}}, r"unknown operator '\$gtx' at path 'n'"),
                                       ({"$and": 3}, r"\$and at the top level needs a non-empty list")])
def test_a_malformed_filter_given_to_search_is_a_filter_error_and_a_parameter_error(bad, says):
    """search(filter=...) and Recipe.run refuse a malformed filter as a FilterError (its operator and path), which is
    also the ParameterError of the argument; another bad argument stays a plain ParameterError."""
    import irflow
    from irflow.errors import FilterParameterError, ParameterError
    from irflow.store.records import Record

    corpus = irflow.build([Record("x", "name", "hello world", {"n": 1}), Record("y", "name", "hello there", {"n": 2})])
    with pytest.raises(FilterError, match=says) as caught:
        irflow.search(corpus, "hello", filter=bad)
    assert isinstance(caught.value, ParameterError) and caught.value.arguments[0][0] == "filter"
    with pytest.raises(FilterParameterError, match=says):
        irflow.load_recipe("search").run(corpus, ["hello"], filter=bad)
    with pytest.raises(ParameterError) as other:
        irflow.search(corpus, "hello", k="ten")
    assert not isinstance(other.value, FilterError)
