"""Bad arguments to the Python API get one clear IrflowError, never an AttributeError or a silent answer.

Issue 10, item 7: ``search(corpus=None)``, a dict (or set, or bytes) passed as a
query batch, a boost returning a string, integers beyond what a float holds
(``rrf_k=10**30`` must run, ``10**400`` must be refused by name), a NaN query
vector.
"""

from __future__ import annotations

import numpy as np
import pytest

from irflow import fuse_hits, search
from irflow.store.corpus import build
from irflow.errors import ArgumentError, EmbedderError, IrflowError
from irflow.store.records import SearchHit
from irflow.engine.recipe import load_recipe

RECORDS = [{"artifact_id": f"a{i}", "surface_kind": kind, "text": f"{kind} sql parser {w}"}
           for i, w in enumerate(["http", "graph", "json", "tool"]) for kind in ("name", "readme")]


@pytest.fixture(scope="module")
def corpus():
    return build(RECORDS, embedder="hash")


@pytest.mark.parametrize("bad", [None, 5, {}, ["a"], b"corpus"])
def test_search_needs_a_corpus(bad):
    with pytest.raises(ArgumentError, match=r"search\(\) needs a corpus, got") as caught:
        search(bad, "sql")
    assert isinstance(caught.value, TypeError)  # what a Python caller checks for a wrong type


def test_a_recipe_run_needs_a_corpus():
    with pytest.raises(ArgumentError, match=r"recipe 'lexical' needs a corpus, got NoneType; build one"):
        load_recipe("lexical").run(None, "sql")
    with pytest.raises(ArgumentError, match=r"got str; open it first: irflow.open_corpus\(path\)"):
        load_recipe("lexical").run("some/folder", "sql")


@pytest.mark.parametrize("batch, message", [
    ({"sql": 1, "graph": 2}, "got a dict; pass list\\(d\\) to run its keys"),
    ({"sql", "graph"}, "got a set, which has no order"),
    (b"sql", "got bytes; decode it first"),
    (5, "got int"),
    (["sql", 5], "every query must be a string, got int"),
])
def test_query_batches_must_be_lists_of_strings(corpus, batch, message):
    with pytest.raises(ArgumentError, match=message):
        load_recipe("lexical").run(corpus, batch)


def test_a_list_or_a_generator_still_runs(corpus):
    recipe = load_recipe("lexical")
    expected = recipe.run(corpus, ["sql", "graph"]).hits
    assert recipe.run(corpus, ("sql", "graph")).hits == expected
    assert recipe.run(corpus, (q for q in ["sql", "graph"])).hits == expected


@pytest.mark.parametrize("query", [None, b"sql", ["sql"]])
def test_search_takes_one_query_string(corpus, query):
    with pytest.raises(ArgumentError, match="search\\(\\) takes one query string"):
        search(corpus, query)


@pytest.mark.parametrize("surfaces", [{"name": 1}, 5])
def test_surfaces_must_be_kinds(corpus, surfaces):
    with pytest.raises(ArgumentError, match="surfaces must be a surface kind or a list of kinds"):
        search(corpus, "sql", surfaces=surfaces)


@pytest.mark.parametrize("returned, shown", [("0.5", "'0.5' (str)"), (None, "None (NoneType)"),
                                             ([1.0], "[1.0] (list)"), (np.ones(2), "(ndarray)"),
                                             (10 ** 400, "a huge integer (int)"), (True, "True (bool)"),
                                             (float("nan"), "nan (float)")])
def test_a_boost_must_return_a_finite_number(corpus, returned, shown):
    def boost(hit):
        return returned

    with pytest.raises(IrflowError, match=f"score boost .*boost.* returned .*{shown.split()[-1][1:-1]}") as caught:
        search(corpus, "sql", dep_boost=boost)
    assert shown in str(caught.value) and "a boost returns a finite number" in str(caught.value)


def test_a_numeric_boost_still_adds(corpus):
    plain = search(corpus, "sql parser", per_artifact=False, k=8)
    boosted = search(corpus, "sql parser", per_artifact=False, k=8, dep_boost=lambda hit: np.float32(1.0))
    assert sorted(h.score for h in boosted) == pytest.approx(sorted(h.score + 1.0 for h in plain))


def test_rrf_k_beyond_int64_runs_and_beyond_float_is_refused(corpus):
    hits = search(corpus, "sql parser", mode="hybrid", rrf_k=10 ** 30, per_artifact=False, k=3)
    # every candidate seen by both channels scores 1/(1e30 + r1) + 1/(1e30 + r2), all equal in float64
    assert hits and all(h.score == pytest.approx(2e-30, rel=1e-12) for h in hits)
    with pytest.raises(ValueError, match="rrf_k") as caught:
        search(corpus, "sql", mode="hybrid", rrf_k=10 ** 400)
    assert isinstance(caught.value, IrflowError)
    with pytest.raises(ValueError, match="rrf_k must be a finite number"):
        fuse_hits({"a": [SearchHit("x", "name", 1.0)]}, rrf_k=10 ** 400)


@pytest.mark.parametrize("arguments, name", [
    ({"mode": "hybrid", "fusion": "blend", "alpha": 10 ** 400}, "alpha"),
    ({"mode": "hybrid", "fusion": "blend", "bm25_sat_k": 10 ** 400}, "bm25_sat_k"),
    ({"mode": "lexical", "bm25": {"k1": 10 ** 400}}, "k1"),
    ({"mode": "lexical", "bm25": {"b": 10 ** 400}}, "b"),
    ({"surface_weights": {"name": 10 ** 400}}, "surface_weights"),
])
def test_numbers_no_float_holds_are_refused_by_name(corpus, arguments, name):
    with pytest.raises(IrflowError, match=name) as caught:
        search(corpus, "sql", **arguments)
    assert isinstance(caught.value, ValueError)


def test_a_nan_query_vector_is_refused(corpus):
    vectors = np.zeros((2, corpus.dim), dtype=np.float32)
    vectors[1, 3] = np.nan
    with pytest.raises(EmbedderError, match="query vector 1 holds NaN or infinite values"):
        corpus.dense_topk(vectors, None, 3)
    vectors[1, 3] = np.inf
    with pytest.raises(EmbedderError, match="query vector 1"):
        corpus.dense_topk(vectors, None, 3)
