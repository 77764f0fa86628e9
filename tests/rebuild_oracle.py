"""The rebuild oracle: a corpus updated in place answers exactly as a fresh build of its live records.

``rebuild(corpus)`` builds a new corpus from ``list(corpus)`` (the live
records in row order, ids and surface indices as stored) with the same
embedder, analyzer and name — a precomputed-vector corpus is given its
records' raw vectors (the test keeps them: normalizing stored unit vectors
again need not give the same bits).  ``assert_same_answers(corpus, fresh)``
then compares, on a fixed set of queries, filters and surfaces, every
built-in recipe's hits (artifact, kind, score bits, record id, order) and
every stage's output (rows named by record id: the two corpora number
their rows differently once a row was deleted), ``search()`` in every mode
with filters, surfaces, formulate fan-out, blending, weights and collapse
off, BM25 in every variant and statistics mode, dense top-k, and the
records, kinds and ledger.  ``assert_sampled_answers(corpus, fresh, pick)``
compares a sample of the same drawn by *pick* (a ``random.Random``): the
records and ledger always, one built-in recipe run, one ``search()`` with
every option drawn (mode, filter, surfaces, BM25 variant and statistics,
formulate fan-out, rerank, weights, a boost, collapse or not) and the
BM25 and dense kernels in every variant and statistics mode — quick enough
to run after every step of a state machine.
"""

from __future__ import annotations

import random
from typing import Any, Mapping

import attrs
import numpy as np

import engine_fakes  # noqa: F401  (maps irflow.stages / irflow.recipes in a bare checkout)
import irflow
import irflow.engine.registry as registry
from irflow.engine.batches import Candidates
from irflow.engine.recipe import builtin_recipes, load_recipe
from irflow.kernels.bm25 import STATS, VARIANTS, BM25Params
from surface_corpus import FakeReranker

QUERIES = ["fast python parser", "graph network tool", "sql schema query", "http client json cache", "archive",
           "python data"]
FILTERS: list[Any] = [None, {"owner": "ann"}, {"stars": {"$gte": 30}, "lang": "py"},
                      {"$or": [{"license": "mit"}, {"tags": "db"}]}, {"owner": "nobody"}]
SURFACES: list[Any] = [None, ["name"], "readme_chunk", ["deps", "description"]]
RUNS = [(name, rerank) for name in builtin_recipes() for rerank in (False, True)
        if not rerank or "rerank" in load_recipe(name).params]


def rebuild(corpus: Any, vectors: Mapping[str, np.ndarray] | None = None) -> Any:
    """A fresh build of the corpus's live records (with their raw vectors, for a precomputed corpus)."""
    records = list(corpus)
    info = corpus.embedder_info
    if info is not None and info.source == "precomputed":
        assert vectors is not None, "a precomputed corpus is rebuilt from its records' raw vectors"
        records = [attrs.evolve(r, vector=vectors[r.id]) for r in records]
        embedder = corpus.embedder_spec
    else:
        embedder = None if info is None else corpus.embedder
    return irflow.build(records, embedder=embedder, analyzer=corpus.analyzer.to_dict(), name=corpus.name)


def _hits(hits: Any) -> Any:
    if hits and isinstance(hits[0], list):
        return [_hits(h) for h in hits]
    return [(h.artifact_id, h.surface_kind, h.score.hex(), h.record_id, h.surface_index, h.text, h.metadata,
             h.source) for h in hits]


def _candidates(corpus: Any, value: Candidates) -> Any:
    ids = corpus.record_ids_of(value.row).tolist()
    columns = {}
    for name, column in value.provenance.items():
        column = np.asarray(column)
        if name.endswith("row"):  # a row column: named by record id
            rows = column.astype(np.int64)
            column = np.where(rows >= 0, corpus.record_ids_of(np.maximum(rows, 0)), None)
        columns[name] = [x.hex() if isinstance(x, float) else x for x in column.tolist()]
    return (value.query_index.tolist(), ids, [s.hex() for s in value.score.tolist()], value.scale, columns,
            value.active)


def _outputs(result: Any) -> dict[str, Any]:
    out = {}
    for name, value in result.outputs.items():
        if isinstance(value, Candidates):
            out[name] = _candidates(result.corpus, value)
        elif isinstance(value, np.ndarray) and value.dtype == bool:
            out[name] = sorted(result.corpus.record_ids_of(np.flatnonzero(value)).tolist())
        elif isinstance(value, list):
            out[name] = _hits(value)
    return out


def _same_run(recipe: Any, corpus: Any, fresh: Any, queries: Any, **params: Any) -> None:
    a, b = recipe.run(corpus, queries, **params), recipe.run(fresh, queries, **params)
    assert _hits(a.hits) == _hits(b.hits), f"recipe {recipe.name!r} {params}: hits differ"
    assert _outputs(a) == _outputs(b), f"recipe {recipe.name!r} {params}: stage outputs differ"


def _topk(corpus: Any, top: Any) -> Any:
    return [(q, rid, s.hex()) for q, rid, s in zip(top.query_index.tolist(), corpus.record_ids_of(top.row).tolist(),
                                                   top.score.tolist())]


def assert_same_records(corpus: Any, fresh: Any, *, artifacts: int | None = 10) -> None:
    """The live records, kinds and ledger: what a fresh build of ``list(corpus)`` holds.

    ``records_for_artifact`` is compared for the first *artifacts* artifacts of the ledger (None: all).
    """
    assert len(corpus) == len(fresh)
    assert [r.to_dict() for r in corpus] == [r.to_dict() for r in fresh]
    assert corpus.kinds == fresh.kinds
    if hasattr(corpus, "store"):  # a sharded corpus has no one ledger: records_for_artifact below
        assert dict(corpus.store.ledger) == dict(fresh.store.ledger)
        assert list(corpus.store.ledger) == list(fresh.store.ledger)
    for artifact in list(fresh.store.ledger)[:artifacts]:
        assert _sibling_records(corpus, artifact) == _sibling_records(fresh, artifact)


def _sibling_records(corpus: Any, artifact: str) -> Any:
    """records_for_artifact's answer: the records, or the stale-ledger KeyError it raises."""
    try:
        return irflow.records_for_artifact(corpus, artifact)
    except KeyError as error:
        return ("stale", str(error))


def assert_same_answers(corpus: Any, fresh: Any | None = None, *, vectors: Mapping[str, np.ndarray] | None = None,
                        quick: bool = False) -> Any:
    """Every answer of *corpus* equals the fresh build's (made here unless given); returns the fresh build."""
    fresh = rebuild(corpus, vectors) if fresh is None else fresh
    assert_same_records(corpus, fresh)
    dense = corpus.dim is not None and corpus.embedder is not None
    queries = QUERIES[:3] if quick else QUERIES
    with registry.registered("fake_rerank", FakeReranker()):
        for name, rerank in RUNS:
            recipe = load_recipe(name)
            if not dense and ("dense" in recipe.stages or "hybrid" in name or name == "search"):
                continue
            params: dict[str, Any] = {"k": 4}
            if rerank:
                params["rerank"] = "fake_rerank"
            _same_run(recipe, corpus, fresh, queries, **params)
    _search(corpus, fresh, dense, quick)
    _kernels(corpus, fresh, dense, quick)
    return fresh


def _fan_out(query: str) -> list[str]:
    return [query, f"{query} python", "graph data"]


def _same_search(corpus: Any, fresh: Any, query: str, params: Mapping[str, Any]) -> None:
    """``search()`` answers alike, or refuses alike (a filter on a kind no live record has)."""
    try:
        expected = _hits(irflow.search(fresh, query, **params))
    except irflow.FilterError as error:
        with np.testing.assert_raises(irflow.FilterError) as caught:
            irflow.search(corpus, query, **params)
        assert str(caught.exception) == str(error)
        return
    assert _hits(irflow.search(corpus, query, **params)) == expected, params


def _search(corpus: Any, fresh: Any, dense: bool, quick: bool) -> None:
    modes = ("dense", "lexical", "hybrid") if dense else ("lexical",)
    for filter in FILTERS[:3] if quick else FILTERS:
        for surfaces in SURFACES[:2] if quick else SURFACES:
            for mode in modes:
                _same_search(corpus, fresh, "sql parser",
                             dict(mode=mode, filter=filter, surfaces=surfaces, k=25, formulate=_fan_out))
    if dense:
        search = load_recipe("search")
        params = dict(mode="hybrid", fusion="blend", k=40, per_artifact=False, formulate=_fan_out,
                      surface_weights={"name": 2.0, "deps": 0.5}, filter={"lang": "py"})
        _same_run(search, corpus, fresh, QUERIES, trace=True, **params)


def _kernels(corpus: Any, fresh: Any, dense: bool, quick: bool) -> None:
    for filter in FILTERS[:2] if quick else FILTERS:
        _same_kernels(corpus, fresh, dense, filter, (3, 1000), (1, 5, 500))


def _same_kernels(corpus: Any, fresh: Any, dense: bool, filter: Any, bm25_depths: Any, dense_depths: Any) -> None:
    """BM25 top-k in every variant and statistics mode, and dense top-k (ties everywhere too), over one filter."""
    tokens = corpus.tokenize_queries(QUERIES + ["the"])
    a, b = corpus.candidate_mask(filter), fresh.candidate_mask(filter)
    assert sorted(corpus.record_ids_of(np.flatnonzero(a))) == sorted(fresh.record_ids_of(np.flatnonzero(b)))
    for variant in VARIANTS:
        for stats in STATS:
            params = BM25Params(variant=variant, stats=stats)
            for fetch_k in bm25_depths:
                assert _topk(corpus, corpus.bm25_topk(tokens, a, fetch_k, params)) == \
                    _topk(fresh, fresh.bm25_topk(tokens, b, fetch_k, params)), (filter, variant, stats)
    if dense:
        vectors = corpus.embed_queries(QUERIES)
        vectors = np.vstack([vectors, np.zeros((1, vectors.shape[1]), np.float32)])  # ties everywhere
        for fetch_k in dense_depths:
            assert _topk(corpus, corpus.dense_topk(vectors, a, fetch_k)) == \
                _topk(fresh, fresh.dense_topk(vectors, b, fetch_k)), (filter, fetch_k)


def _stars_boost(hit: Any) -> float:
    """A boost read from the metadata (ties broken alike or not at all: row order decides)."""
    return 0.001 * (int(hit.metadata.get("stars", 0)) % 7)


def assert_sampled_answers(corpus: Any, fresh: Any, pick: random.Random) -> None:
    """A sample, drawn by *pick*, of what :func:`assert_same_answers` compares: quick enough for every step."""
    assert_same_records(corpus, fresh, artifacts=None)
    dense = corpus.dim is not None and corpus.embedder is not None
    runs = [(name, rerank) for name, rerank in RUNS if dense or not
            ("dense" in load_recipe(name).stages or "hybrid" in name or name == "search")]
    name, rerank = pick.choice(runs)
    params: dict[str, Any] = {"k": pick.choice([2, 4, 9])}
    if rerank:
        params["rerank"] = "fake_rerank"
    with registry.registered("fake_rerank", FakeReranker()):
        _same_run(load_recipe(name), corpus, fresh, pick.sample(QUERIES, 2), **params)
    search: dict[str, Any] = dict(
        mode=pick.choice(("dense", "lexical", "hybrid") if dense else ("lexical",)),
        filter=pick.choice(FILTERS), surfaces=pick.choice(SURFACES), k=pick.choice([1, 3, 10, 25]),
        per_artifact=pick.random() < 0.7,  # collapse to the best surface per artifact, or not
        bm25={"variant": pick.choice(VARIANTS), "stats": pick.choice(STATS)})
    if pick.random() < 0.5:
        search["formulate"] = _fan_out
    if pick.random() < 0.3:
        search["rerank"] = FakeReranker()
    if pick.random() < 0.3:
        search["surface_weights"] = {"name": 2.0, "deps": 0.5}
    if pick.random() < 0.3:
        search["dep_boost"] = _stars_boost
    if search["mode"] == "hybrid" and pick.random() < 0.5:
        search["fusion"] = "blend"
    _same_search(corpus, fresh, pick.choice(QUERIES), search)
    _same_kernels(corpus, fresh, dense, pick.choice(FILTERS), (pick.choice([1, 3, 1000]),), (pick.choice([1, 5, 500]),))
