"""Metadata is JSON: build() refuses what a stored corpus could not hold as given, in memory as on disk.

A corpus on disk keeps each record's metadata as JSON text; one in memory
must answer exactly as the same corpus saved and reopened.  So a metadata
key that is not a string (``{1: "x"}``: JSON writes ``"1"``, so a filter on
``"1"`` found the record on disk only, and ``{1: "x", "1": "y"}`` reopened
as ``{"1": "y"}``), at any depth, and a value JSON cannot hold (a set, bytes,
NaN, an infinity, an integer Python cannot write, any object) are refused
with a RecordError naming the record and the key path; a value JSON holds
as another type of the same value (a tuple, a numpy number or array) is
stored as reopening gives it back.  The property: for any metadata build()
accepts, the corpus in memory and the same corpus saved and reopened give
the same hits (metadata type-exact) and the same filter results.
"""

from __future__ import annotations

import enum
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from irflow.api.retrieve import search
from irflow.errors import CorpusError, InputError, RecordError
from irflow.store.corpus import build, open_corpus
from irflow.store.records import Record
from irflow.util.cachekey import cache_key

WORDS = ["zip", "tar", "graph", "bm25", "sql", "json"]


def _records(metadata: list[Any]) -> list[Record]:
    return [Record(f"a{i}", "name", f"{WORDS[i % len(WORDS)]} tool {i}", meta) for i, meta in enumerate(metadata)]


def _refused(metadata: Any, tmp_path: Path, match: str) -> RecordError:
    """build() refuses ``metadata`` (on record #1) the same way in memory and on disk, writing nothing."""
    records = _records([{"ok": 1}, metadata])
    errors = []
    for path in (None, tmp_path / "c"):
        with pytest.raises(RecordError) as caught:
            build(records, embedder=None, path=path)
        errors.append(caught.value)
    assert str(errors[0]) == str(errors[1])
    assert str(errors[0]).startswith("record #1 (artifact 'a1', kind 'name'): "), errors[0]
    assert __import__("re").search(match, str(errors[0])), errors[0]
    assert isinstance(errors[0], CorpusError) and isinstance(errors[0], InputError)  # both families catch it
    assert not (tmp_path / "c").exists()
    return errors[0]


# -- keys -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("metadata, path", [
    ({1: "x"}, r"metadata has the key 1 \(an int\).*write '1'$"),
    ({1: "x", "1": "y"}, r"metadata has the key 1 \(an int\).*write '1' \(it also has the key '1': merge the two\)"),
    ({"a": {2: "x"}}, r"metadata\['a'\] has the key 2 \(an int\)"),
    ({"a": [{"b": 1}, {"c": {(1, 2): 3}}]}, r"metadata\['a'\]\[1\]\['c'\] has the key \(1, 2\) \(a tuple\).*use strings"),
    ({None: 1}, r"metadata has the key None \(a NoneType\).*write 'null'"),
    ({True: 1}, r"metadata has the key True \(a bool\).*write 'true'"),
    ({1.5: 1}, r"metadata has the key 1.5 \(a float\).*write '1.5'"),
])
def test_a_key_that_is_not_a_string_is_refused_naming_its_path(metadata: Any, path: str, tmp_path: Path) -> None:
    _refused(metadata, tmp_path, path)


def test_an_int_key_no_longer_answers_differently_in_memory_and_on_disk(tmp_path: Path) -> None:
    # what the bug did: {"1": "x"} found nothing in memory but the record after a save; {1: .., "1": ..} lost a value
    for metadata in ({1: "x"}, {1: "x", "1": "y"}):
        with pytest.raises(RecordError, match="whose keys are strings"):
            build(_records([metadata]), embedder=None)
    ok = {"1": "x"}
    memory = build(_records([ok]), embedder=None, name="c")
    disk = open_corpus(build(_records([ok]), embedder=None, path=tmp_path / "c").path)
    for corpus in (memory, disk):
        assert corpus.candidate_mask({"1": "x"}).tolist() == [True]


# -- values -----------------------------------------------------------------------------------------


class Colour(enum.Enum):
    RED = "red"


@pytest.mark.parametrize("value, says", [
    ({"a", "b"}, r"metadata\['v'\] is a set; .* use a list"),
    (frozenset({1}), r"metadata\['v'\] is a frozenset;"),
    (b"bytes", r"metadata\['v'\] is bytes; .* decode them"),
    (bytearray(b"x"), r"metadata\['v'\] is bytes;"),
    (math.nan, r"metadata\['v'\] is nan; .* no NaN or infinity"),
    (math.inf, r"metadata\['v'\] is inf;"),
    (-math.inf, r"metadata\['v'\] is -inf;"),
    (np.float32("nan"), r"metadata\['v'\] is nan;"),
    (object(), r"metadata\['v'\] is an object; .* JSON cannot hold it"),
    (Decimal("1.5"), r"metadata\['v'\] is a Decimal;"),
    (1 + 2j, r"metadata\['v'\] is a complex;"),
    (Colour.RED, r"metadata\['v'\] is a Colour;"),
    (10 ** 5000, r"metadata\['v'\]: a number has more than \d+ digits"),
    ([1, [2, {"deep": {3}}]], r"metadata\['v'\]\[1\]\[1\]\['deep'\] is a set;"),
    (((({"x": math.nan},),),), r"metadata\['v'\]\[0\]\[0\]\[0\]\['x'\] is nan;"),
], ids=lambda v: type(v).__name__ if not isinstance(v, str) else None)
def test_a_value_json_cannot_hold_is_refused_naming_its_path(value: Any, says: str, tmp_path: Path) -> None:
    _refused({"v": value}, tmp_path, says)


def test_metadata_nested_beyond_the_limit_is_refused(tmp_path: Path) -> None:
    value: Any = "leaf"
    for _ in range(100):
        value = {"a": value}
    _refused(value, tmp_path, r"nested more than 64 levels deep")
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic  # a dict holding itself: refused, not a RecursionError
    _refused(cyclic, tmp_path, r"nested more than 64 levels deep")


class Stars(enum.IntEnum):
    MANY = 40


class Name(str):
    def __str__(self) -> str:
        return "not the characters"


def test_values_json_holds_as_another_type_are_stored_as_reopening_gives_them(tmp_path: Path) -> None:
    given = {"tags": ("zip", "tar"), "vec": np.array([1, 2]), "i": np.int64(7), "f": np.float32(0.5),
             "f16": np.float16(0.1), "b": np.bool_(True), "stars": Stars.MANY, "name": Name("unbox"),
             "nested": [("a", {"t": (1.5, None)})], "big": 2 ** 80, "neg0": -0.0}
    expected = {"tags": ["zip", "tar"], "vec": [1, 2], "i": 7, "f": 0.5, "f16": float(np.float16(0.1)), "b": True,
                "stars": 40, "name": "unbox", "nested": [["a", {"t": [1.5, None]}]], "big": 2 ** 80, "neg0": -0.0}
    memory = build(_records([given]), embedder=None)
    disk = open_corpus(build(_records([given]), embedder=None, path=tmp_path / "c").path)
    for corpus in (memory, disk):
        stored = corpus.record(0).metadata
        assert cache_key(stored) == cache_key(expected), stored  # type-exact: tuples are lists, numpy is Python
        assert cache_key(search(corpus, "zip", mode="lexical")[0].metadata) == cache_key(expected)


def test_changing_the_callers_metadata_after_build_changes_nothing(tmp_path: Path) -> None:
    tags = ["zip"]
    nested = {"owner": "ann"}
    metadata = {"tags": tags, "who": nested}
    corpus = build(_records([metadata]), embedder=None)
    tags.append("tar")
    nested["owner"] = "bob"
    metadata["extra"] = 1
    assert corpus.record(0).metadata == {"tags": ["zip"], "who": {"owner": "ann"}}
    assert corpus.candidate_mask({"tags": "tar"}).tolist() == [False]
    assert corpus.candidate_mask({"who.owner": "ann"}).tolist() == [True]


# -- the property: in memory and on disk answer the same ------------------------------------------------

_KEYS = st.sampled_from(["a", "b", "tags", "n", "1", "é"])
_PLAIN = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.integers(-(2 ** 70), 2 ** 70),
    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(["zip", "tar", "", "é", "1"]),
    st.builds(np.int64, st.integers(-5, 5)), st.builds(np.float32, st.floats(-4, 4, width=32)),
)
# what build() must refuse, drawn for about one leaf and one key in twelve: about half the examples are accepted
_ODD = st.sampled_from([math.nan, math.inf, b"x", frozenset({1}), "caf\udce9", object()])
_LEAF = st.integers(0, 11).flatmap(lambda i: _ODD if i == 11 else _PLAIN)
_KEY = st.integers(0, 11).flatmap(lambda i: st.integers(0, 2) if i == 11 else _KEYS)
_VALUES = st.recursive(
    _LEAF,
    lambda children: st.one_of(st.lists(children, max_size=3), st.tuples(children, children),
                               st.dictionaries(_KEY, children, max_size=3)),
    max_leaves=5,
)
_METADATA = st.dictionaries(_KEY, _VALUES, max_size=3)


def _filters(metadata: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Filters on the fields and values the records hold (equality, $in, $exists, ranges), plus a missing field."""
    found: list[dict[str, Any]] = [{"zzz": 1}, {"1": {"$exists": True}}]
    for meta in metadata:
        for key, value in meta.items():
            if not isinstance(key, str):
                continue
            found.append({key: {"$exists": True}})
            if value is None or isinstance(value, (str, bool, int, float)):
                if not (isinstance(value, float) and math.isnan(value)):
                    found += [{key: value}, {key: {"$in": [value, "zip"]}}, {key: {"$ne": value}}]
                if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value):
                    found += [{key: {"$gte": value}}, {key: {"$lt": value}}]
    return found


def _hits(corpus: Any, query: str, filter: dict[str, Any] | None) -> list[Any]:
    return [cache_key(hit.to_dict()) for hit in search(corpus, query, mode="lexical", k=10, filter=filter)]


@pytest.mark.filterwarnings("ignore::irflow.errors.UnknownFieldWarning")
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(metadata=st.lists(_METADATA, min_size=1, max_size=4))
def test_accepted_metadata_answers_the_same_in_memory_and_reopened(tmp_path_factory: pytest.TempPathFactory,
                                                                   metadata: list[dict[Any, Any]]) -> None:
    records = _records(metadata)
    root = tmp_path_factory.mktemp("c") / "c"
    try:
        memory = build(records, embedder=None, name="c")
    except RecordError as refused:
        with pytest.raises(RecordError) as again:  # refused on disk too, with the same words, nothing written
            build(records, embedder=None, path=root)
        assert str(again.value) == str(refused) and not root.exists()
        return
    disk = open_corpus(build(records, embedder=None, path=root).path)
    assert disk.name == memory.name == "c"
    for row in range(len(records)):
        assert cache_key(memory.record(row).to_dict()) == cache_key(disk.record(row).to_dict())
    for query in ("tool", "zip tool"):
        assert _hits(memory, query, None) == _hits(disk, query, None)
    for spec in _filters(metadata):
        try:
            expected = memory.candidate_mask(spec).tolist()
        except ValueError as error:  # a filter the filter language refuses (FilterError) is refused on both
            with pytest.raises(type(error)):
                disk.candidate_mask(spec)
            continue
        assert disk.candidate_mask(spec).tolist() == expected, spec
        assert _hits(memory, "tool", spec) == _hits(disk, "tool", spec), spec
