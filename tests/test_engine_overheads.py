"""Per-run work the engine does once per recipe and arguments, not once per query (issue 11, item 8).

A run's recipe parameters are resolved (checked, derived) once per recipe and
arguments and kept under a type-exact key; the stage objects are built once
for them; the lexical stage turns its ``bm25`` mapping into BM25Params once
per stage object; a selection or re-sort of Candidates gathers columns it
already checked without checking them again.  Every shortcut must give what
the long way gives: the expectations here are the uncached computations.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import irflow.engine.params as params_module
from irflow.engine.batches import Candidates, QueryBatch
from irflow.engine.recipe import load_recipe
from irflow.errors import ParameterError
from irflow.kernels.bm25 import BM25Params


@pytest.fixture()
def fresh():
    """A recipe object of its own (its kept resolutions and stage objects start empty)."""
    return load_recipe("hybrid").with_params(fusion="rrf")


def _count_calls(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[int]:
    calls: list[int] = []
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_parameters_are_resolved_once_per_recipe_and_arguments(fresh, corpus, monkeypatch):
    calls = _count_calls(monkeypatch, params_module, "_resolve_params")
    first = fresh.run(corpus, "http client", k=3)
    for _ in range(4):
        again = fresh.run(corpus, "http client", k=3)
        assert again.hits == first.hits and again.params == first.params
    assert len(calls) == 1
    other = fresh.run(corpus, "http client", k=4)
    assert len(calls) == 2 and len(other.hits) == 4 and other.params["k"] == 4
    # what is kept is what a fresh resolution gives
    assert fresh.resolve_params({"k": 3}) == params_module._resolve_params(fresh, {"k": 3}) == first.params


def test_the_key_is_type_exact_and_bad_arguments_are_refused_every_time(fresh, corpus):
    fresh.run(corpus, "http client", rrf_k=1)
    for _ in range(2):  # an equality key would hand rrf_k=True what rrf_k=1 resolved
        with pytest.raises(ParameterError, match="rrf_k"):
            fresh.run(corpus, "http client", rrf_k=True)
    with pytest.raises(ParameterError, match="no parameter 'kk'"):
        fresh.run(corpus, "http client", kk=3)
    with pytest.raises(ParameterError, match="no parameter 'kk'"):
        fresh.run(corpus, "http client", kk=3)


def test_an_argument_changed_in_place_between_runs_is_read_again(fresh, corpus):
    wanted = {"owner": "alice"}
    alice = fresh.run(corpus, "parser", filter=wanted).hits
    wanted["owner"] = "bob"
    bob = fresh.run(corpus, "parser", filter=wanted).hits
    assert bob == load_recipe("hybrid").with_params(fusion="rrf").run(corpus, "parser", filter={"owner": "bob"}).hits
    assert alice and bob and all(h.metadata["owner"] == "alice" for h in alice)
    assert all(h.metadata["owner"] == "bob" for h in bob)
    # and the stage objects built for the first argument kept their own copy of it
    assert fresh.run(corpus, "parser", filter={"owner": "alice"}).hits == alice


def test_the_stage_objects_are_built_once_for_the_same_arguments(fresh, corpus):
    pipeline = fresh.pipeline()
    fresh.run(corpus, "http client", k=3)
    built = dict(pipeline._instances)
    fresh.run(corpus, "http client", k=3)
    assert dict(pipeline._instances) == built and len(built) == 1
    fresh.run(corpus, "http client", k=5)
    assert len(pipeline._instances) == 2


def test_the_lexical_stage_resolves_its_bm25_settings_once(corpus, monkeypatch):
    recipe = load_recipe("search")
    calls: list[object] = []
    original = BM25Params.from_mapping.__func__

    def counted(cls, mapping):
        calls.append(mapping)
        return original(cls, mapping)

    monkeypatch.setattr(BM25Params, "from_mapping", classmethod(counted))
    bm25 = {"k1": 0.5, "b": 0.2}
    queries = ("http client", "json parser", "zip archive", "sql", "yaml", "graph")
    tuned = [recipe.run(corpus, queries[0], bm25=bm25, mode="lexical").hits]
    at_build = len(calls)  # the argument's check, the stage object's validators, its one conversion
    tuned += [recipe.run(corpus, q, bm25=bm25, mode="lexical").hits for q in queries[1:]]
    assert 1 <= at_build <= 4 and len(calls) == at_build  # none per query
    monkeypatch.undo()
    default = [load_recipe("search").run(corpus, q, mode="lexical").hits for q in queries]
    assert [[h.score for h in hits] for hits in tuned] != [[h.score for h in hits] for hits in default]


# -- Candidates: a selection or a re-sort is the batch the checked constructor builds --------------------

@st.composite
def _batches(draw) -> Candidates:
    n_queries = draw(st.integers(1, 4))
    counts = draw(st.lists(st.integers(0, 6), min_size=n_queries, max_size=n_queries))
    m = sum(counts)
    query_index = np.repeat(np.arange(n_queries), counts)
    row = np.asarray(draw(st.lists(st.integers(0, 20), min_size=m, max_size=m)), dtype=np.int64)
    score = np.asarray(draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, -1.0]), min_size=m, max_size=m)))
    provenance = {"x.score": score * 2, "x.rank": np.arange(m, dtype=np.int32),
                  "x.label": np.array([f"r{r}" for r in row.tolist()], dtype=object)}
    return Candidates(QueryBatch.of([f"q{i}" for i in range(n_queries)]), query_index, row, score, "cosine",
                      provenance)


def _same(a: Candidates, b: Candidates) -> None:
    for name in ("query_index", "row", "score", "rank", "offsets"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.tolist() == y.tolist() and not x.flags.writeable, name
    assert a.queries is b.queries and a.scale is b.scale and a.active == b.active
    assert list(a.provenance) == list(b.provenance)
    for name, column in a.provenance.items():
        other = b.provenance[name]
        assert column.dtype == other.dtype and column.tolist() == other.tolist() and not column.flags.writeable


@settings(max_examples=150, deadline=None)
@given(batch=_batches(), data=st.data())
def test_select_sort_and_cut_equal_the_checked_construction(batch, data):
    keep = np.asarray(data.draw(st.lists(st.booleans(), min_size=len(batch), max_size=len(batch))), dtype=bool)
    _same(batch.select(keep), batch.take(np.flatnonzero(keep)))
    order = np.lexsort((-batch.score, batch.query_index))  # stable: equal scores keep their order
    _same(batch.sorted_by_score(), batch.take(order))
    k = data.draw(st.integers(0, 7))
    cut = batch.cut(k)
    assert cut is batch or _same(cut, batch.take(np.flatnonzero(batch.rank <= k))) is None
    # the source batch is untouched and still read-only
    assert not batch.score.flags.writeable and all(not c.flags.writeable for c in batch.provenance.values())
