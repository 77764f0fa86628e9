"""Retrieval reaches a corpus only through the corpus protocol (irflow.store.protocol).

Every built-in recipe — search() in every mode and option, dense, lexical,
hybrid, hybrid-rerank, expand-rerank — runs against a wrapper that forwards
the protocol's members and nothing else (any other attribute raises), and
gives exactly what the real corpus gives: the hits, the traces (rendered
through the protocol) and the explanations.  This is the seam a sharded
corpus implements.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from surface_corpus import FakeReranker, build_corpus
from irflow.engine import registry
from irflow.engine.recipe import builtin_recipes, load_recipe
from irflow.store.corpus import Corpus
from irflow.store.protocol import PROTOCOL_MEMBERS, CorpusProtocol, Siblings

QUERIES = ["sql parser", "http client cache", "fast json tool"]


class ProtocolOnly:
    """A corpus seen through the protocol alone: every other attribute access is an error."""

    __slots__ = ("_corpus", "used")

    def __init__(self, corpus: Any) -> None:
        object.__setattr__(self, "_corpus", corpus)
        object.__setattr__(self, "used", set())

    def __getattr__(self, name: str) -> Any:
        if name not in PROTOCOL_MEMBERS:
            raise AttributeError(f"{name!r} is not a member of the corpus protocol")
        self.used.add(name)
        return getattr(self._corpus, name)


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return build_corpus("protocol")


@pytest.fixture()
def reranker():
    with registry.registered("protocol_rerank", FakeReranker()) as fake:
        yield fake


def _team_boost(hit: Any) -> float:
    """A score boost reading the hit the protocol made (its metadata)."""
    return 0.5 if hit.metadata.get("owner") == "team" else 0.0


def _runs() -> list[tuple[str, dict[str, Any]]]:
    search = [{"mode": mode} for mode in ("dense", "lexical", "hybrid")]
    search += [
        {"mode": "hybrid", "fusion": "blend"},
        {"mode": "hybrid", "per_artifact": False, "k": 7},
        {"mode": "hybrid", "filter": {"owner": "team"}, "surfaces": ["description", "readme_chunk"]},
        {"mode": "lexical", "bm25": {"k1": 1.2, "b": 0.5, "stats": "corpus"}},
        {"mode": "hybrid", "surface_weights": {"deps": 2.0, "name": 0.5}},
        {"mode": "hybrid", "rerank": "protocol_rerank", "rerank_text": "artifact"},
        {"mode": "dense", "rerank": "protocol_rerank", "dep_boost": _team_boost},
        {"mode": "hybrid", "formulate": lambda q: [q, q.split()[0]]},
    ]
    runs = [("search", params) for params in search]
    for name in builtin_recipes():
        if name == "search":
            continue
        params: dict[str, Any] = {"k": 5}
        if "rerank" in load_recipe(name).params:
            runs.append((name, {**params, "rerank": "protocol_rerank"}))
        runs.append((name, params))
    return runs


def _label(run: tuple[str, dict[str, Any]]) -> str:
    name, params = run
    return f"{name}:{','.join(sorted(params))}"


def _lines(trace: Any) -> list[dict[str, Any]]:
    """The trace's records without what differs between two runs of the same thing (the timings)."""
    return [{k: v for k, v in record.items() if k != "elapsed_ms"} for record in trace.records()]


def test_the_runs_cover_every_builtin_recipe() -> None:
    assert {name for name, _ in _runs()} == set(builtin_recipes())
    assert {"expand-rerank", "hybrid-rerank", "dense", "lexical", "hybrid", "search"} <= set(builtin_recipes())


@pytest.mark.parametrize("run", _runs(), ids=_label)
def test_every_builtin_recipe_runs_through_the_protocol_alone(corpus: Corpus, reranker: Any,
                                                              run: tuple[str, dict[str, Any]]) -> None:
    name, params = run
    recipe = load_recipe(name)
    wrapped = ProtocolOnly(corpus)
    direct = recipe.run(corpus, QUERIES, trace=True, **params)
    seen = recipe.run(wrapped, QUERIES, trace=True, **params)
    assert seen.hits == direct.hits
    assert any(hits for hits in seen.hits)
    assert _lines(seen.trace) == _lines(direct.trace)
    hit = next(hits[0] for hits in seen.hits if hits)
    assert seen.explain(hit).to_dict() == direct.explain(hit).to_dict()
    untraced = recipe.run(wrapped, QUERIES, **params)
    assert untraced.hits == direct.hits
    assert untraced.explain(hit).to_dict() == recipe.run(corpus, QUERIES, **params).explain(hit).to_dict()
    assert wrapped.used <= set(PROTOCOL_MEMBERS)


def test_the_wrapper_refuses_what_the_protocol_does_not_offer(corpus: Corpus) -> None:
    wrapped = ProtocolOnly(corpus)
    for name in ("store", "vectors", "record_ids", "artifact_ids", "hit", "record", "columns"):
        with pytest.raises(AttributeError, match="not a member of the corpus protocol"):
            getattr(wrapped, name)
    assert wrapped.n_rows == corpus.n_rows


def test_corpus_implements_the_protocol(corpus: Corpus) -> None:
    assert isinstance(corpus, CorpusProtocol)
    missing = [name for name in PROTOCOL_MEMBERS if not hasattr(corpus, name)]
    assert missing == []
    declared = {name for name in vars(CorpusProtocol) if not name.startswith("_")}
    assert declared == set(PROTOCOL_MEMBERS)


def test_row_lookups_agree_with_the_records(corpus: Corpus) -> None:
    rows = np.array([5, 0, 5, corpus.n_rows - 1])
    records = [corpus.record(int(r)) for r in rows]
    assert corpus.record_ids_of(rows).tolist() == [r.id for r in records]
    assert corpus.artifact_ids_of(rows).tolist() == [r.artifact_id for r in records]
    assert [corpus.kinds[c] for c in corpus.kind_codes_of(rows)] == [r.surface_kind for r in records]
    assert corpus.surface_indices_of(rows).tolist() == [r.surface_index for r in records]
    assert corpus.records(rows) == records
    hits = corpus.hits(rows, [0.5, 1.0, 1.5, 2.0])
    assert [h.record_id for h in hits] == [r.id for r in records]
    assert [h.score for h in hits] == [0.5, 1.0, 1.5, 2.0] and all(type(h.score) is float for h in hits)


def test_sibling_rows_follow_the_ledger_in_plan_order(corpus: Corpus) -> None:
    artifacts = ["pkg4", "nope", "pkg0"]
    siblings = corpus.sibling_rows(artifacts)
    assert isinstance(siblings, Siblings) and len(siblings) == 3
    assert siblings.listed.tolist() == [True, False, True] and siblings.stale == ()
    for i, artifact in enumerate(artifacts):
        expected = sorted((r for r in range(corpus.n_rows) if corpus.record(r).artifact_id == artifact),
                          key=lambda r: corpus.record(r).surface_index)
        assert siblings.rows_of(i).tolist() == expected
    assert siblings.rows_of(1).size == 0
