"""expand: sibling surfaces through the ledger — windows, overlap, plan order, kinds, tombstones, stale ledgers.

Expected expansions come from the records as given (``surface_corpus.records``
grouped and sorted by hand, ``surface_corpus.reference_expansion``), never
from the stage or the ledger code under test.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import irflow.engine.registry as registry
from irflow.engine.batches import Candidates, QueryBatch, Scale
from irflow.errors import RecipeError
from irflow.api.expand import EXPAND_FROM, EXPAND_OFFSET, LedgerWarning, expand, expand_rows
from irflow.store.ledger import records_for_artifact
from irflow.engine.recipe import load_recipe
from irflow.engine import get_stage_class, StageContext
from irflow.stages.expand import Expand
from surface_corpus import FakeReranker, build_corpus, plan, records, reference_expansion, with_ledger

RECORDS = records()
BY_ARTIFACT = plan(RECORDS)
BY_ID = {r.id: r for r in RECORDS}


@pytest.fixture(scope="module")
def corpus():
    return build_corpus()


def row(corpus, artifact: str, surface_index: int) -> int:
    record = next(r for r in BY_ARTIFACT[artifact] if r.surface_index == surface_index)
    return corpus.row_of(record.id)


def batch(corpus, per_query: list[list[tuple[str, int, float]]]) -> Candidates:
    """Candidates of several queries from (artifact, surface_index, score) hits, in rank order."""
    qi, rows, scores = [], [], []
    for i, hits in enumerate(per_query):
        for artifact, index, score in hits:
            qi.append(i)
            rows.append(row(corpus, artifact, index))
            scores.append(score)
    c = Candidates(QueryBatch.of([f"q{i}" for i in range(len(per_query))]), qi, rows, scores, Scale.COSINE)
    return c.with_provenance({"dense.score": c.score, "dense.rank": c.rank})


def run_stage(corpus, candidates: Candidates, **params) -> Candidates:
    return Expand(**params).run(StageContext(corpus, "expand", candidates.queries), candidates=candidates)


def triples(corpus, out: Candidates, query: int = 0) -> list[tuple[str, str, int]]:
    """(record id, id of the hit it came from, offset) of one query of a stage output."""
    s = out.query_slice(query)
    ids = corpus.record_ids
    return [(ids[r], ids[f], int(o)) for r, f, o in zip(out.row[s], out.column("expand.from_row")[s],
                                                        out.column("expand.offset")[s])]


def hit_records(corpus, candidates: Candidates, query: int = 0) -> list:
    rows, _ = candidates.per_query(query)
    return [BY_ID[corpus.record_ids[r]] for r in rows]


# -- sibling sets, windows, order ----------------------------------------------------------------


def test_registered_with_its_parameters():
    assert get_stage_class("expand") is Expand
    with pytest.raises(ValueError, match="integer >= 0"):
        Expand(window=-1)
    with pytest.raises(ValueError, match="list of strings"):
        Expand(surface_kind=[3])
    assert Expand(surface_kind="deps").surface_kind == ("deps",)


@pytest.mark.parametrize("artifact", sorted(BY_ARTIFACT))
def test_window_none_gives_every_sibling_in_plan_order(corpus, artifact):
    hit = BY_ARTIFACT[artifact][-1]  # the last surface: every sibling comes before it
    out = run_stage(corpus, batch(corpus, [[(artifact, hit.surface_index, 0.7)]]))
    assert [corpus.record_ids[r] for r in out.row] == [r.id for r in BY_ARTIFACT[artifact]]
    assert out.score.tolist() == [0.7] * len(BY_ARTIFACT[artifact])
    # the same set as the ledger primitive, which the stage must agree with
    assert [corpus.record_ids[r] for r in out.row] == [r.id for r in records_for_artifact(corpus, artifact)]


def test_windows_count_plan_positions(corpus):
    # pkg4's plan is 0, 1, 2, 5, 6: surface 5 has no neighbour at distance 1 below it
    assert [r.surface_index for r in BY_ARTIFACT["pkg4"]] == [0, 1, 2, 5, 6]
    c = batch(corpus, [[("pkg4", 5, 0.5)]])
    index_of = {corpus.row_of(r.id): r.surface_index for r in BY_ARTIFACT["pkg4"]}
    assert [index_of[r] for r in run_stage(corpus, c, window=0).row] == [5]
    assert [index_of[r] for r in run_stage(corpus, c, window=1).row] == [5, 6]
    assert [index_of[r] for r in run_stage(corpus, c, window=3).row] == [2, 5, 6]
    assert run_stage(corpus, c, window=3).column("expand.offset").tolist() == [-3, 0, 1]


def test_overlapping_windows_merge_and_each_surface_is_attributed_once(corpus):
    # pkg2 has surfaces 0..5; hits at 3 (rank 1) and 1 (rank 2) with window 1 overlap at 2
    c = batch(corpus, [[("pkg2", 3, 0.9), ("pkg2", 1, 0.4)]])
    out = run_stage(corpus, c, window=1)
    first, second = hit_records(corpus, c)
    assert triples(corpus, out) == reference_expansion(BY_ARTIFACT, [first, second], 1)
    by_index = {BY_ID[corpus.record_ids[r]].surface_index: (s, o) for r, s, o in
                zip(out.row, out.score, out.column("expand.offset"))}
    assert sorted(by_index) == [0, 1, 2, 3, 4]                    # each surface once, in plan order
    assert by_index[2] == (0.9, -1)                               # covered by both: the better-ranked hit wins
    assert by_index[1] == (0.4, 0) and by_index[0] == (0.4, -1)   # a hit keeps its own score
    assert by_index[4] == (0.9, 1)


def test_a_hit_inside_a_better_hits_window_stays_itself(corpus):
    c = batch(corpus, [[("pkg2", 2, 0.9), ("pkg2", 3, 0.3)]])
    out = run_stage(corpus, c, window=2)
    is_hit3 = out.row == row(corpus, "pkg2", 3)
    assert out.score[is_hit3].tolist() == [0.3]
    assert out.column("expand.from_rank")[is_hit3].tolist() == [2]


def test_artifacts_keep_the_order_of_their_best_hit(corpus):
    c = batch(corpus, [[("pkg5", 2, 0.9), ("pkg1", 0, 0.8), ("pkg5", 0, 0.7), ("pkg6", 3, 0.6)]])
    out = run_stage(corpus, c, window=1)
    artifacts = [corpus.artifact_ids[r] for r in out.row]
    assert list(dict.fromkeys(artifacts)) == ["pkg5", "pkg1", "pkg6"]
    assert artifacts == sorted(artifacts, key=["pkg5", "pkg1", "pkg6"].index)  # grouped, not interleaved
    assert triples(corpus, out) == reference_expansion(BY_ARTIFACT, hit_records(corpus, c), 1)


def test_queries_expand_independently(corpus):
    c = batch(corpus, [[("pkg0", 1, 0.5)], [], [("pkg0", 1, 0.2), ("pkg4", 0, 0.1)]])
    out = run_stage(corpus, c, window=1)
    assert out.counts().tolist() == [3, 0, 5]
    assert triples(corpus, out, 2) == reference_expansion(BY_ARTIFACT, hit_records(corpus, c, 2), 1)


@pytest.mark.parametrize("kinds", ["readme_chunk", ["name", "deps"], ["nope"]])
def test_surface_kind_restricts_every_surface_the_hit_included(corpus, kinds):
    c = batch(corpus, [[("pkg2", 1, 0.9), ("pkg7", 3, 0.5)]])  # a description hit and a readme hit
    out = run_stage(corpus, c, surface_kind=kinds)
    wanted = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    assert triples(corpus, out) == reference_expansion(BY_ARTIFACT, hit_records(corpus, c), None, wanted)
    assert {corpus.record(r).surface_kind for r in out.row} <= set(wanted)


def test_empty_input_gives_an_empty_batch_with_the_columns(corpus):
    c = batch(corpus, [[], []])
    out = run_stage(corpus, c, window=1)
    assert len(out) == 0 and out.n_queries == 2
    assert {"expand.from_row", "expand.offset", "expand.from_rank", "dense.score"} <= set(out.provenance)


@pytest.mark.parametrize("seed", range(12))
def test_random_hit_sets_match_the_reference(corpus, seed):
    rng = np.random.default_rng(seed)
    window = [None, 0, 1, 2][seed % 4]
    kinds = [None, ("readme_chunk",), ("description", "readme_chunk", "deps")][seed % 3]
    per_query = []
    for _ in range(3):
        chosen = rng.choice(len(RECORDS), size=int(rng.integers(0, 9)), replace=False)
        hits = [RECORDS[i] for i in chosen]
        per_query.append([(h.artifact_id, h.surface_index, float(s))
                          for h, s in zip(hits, np.sort(rng.random(len(hits)))[::-1])])
    c = batch(corpus, per_query)
    out = run_stage(corpus, c, window=window, surface_kind=kinds)
    for q in range(3):
        assert triples(corpus, out, q) == reference_expansion(BY_ARTIFACT, hit_records(corpus, c, q), window, kinds)


# -- provenance and scores -----------------------------------------------------------------------


def test_provenance_scores_and_scale(corpus):
    c = batch(corpus, [[("pkg5", 2, 0.8), ("pkg0", 0, 0.6)]])
    out = run_stage(corpus, c, window=1)
    assert out.scale is Scale.COSINE  # siblings are not re-scored: the scale is the input's
    from_row = out.column("expand.from_row")
    offset = out.column("expand.offset")
    hit_rows = dict(zip(c.row.tolist(), c.score.tolist()))
    assert out.score.tolist() == [hit_rows[f] for f in from_row.tolist()]  # the score of the hit that brought it
    assert ((offset == 0) == np.isin(out.row, c.row)).all() and (from_row[offset == 0] == out.row[offset == 0]).all()
    expected_offsets = [corpus.surface_indices[r] - corpus.surface_indices[f] for r, f in zip(out.row, from_row)]
    assert offset.tolist() == expected_offsets
    assert out.column("expand.from_rank").tolist() == [1, 1, 1, 2, 2]
    # the input's columns describe hits only: siblings were never scored by the dense channel
    dense = out.column("dense.score")
    assert dense[offset == 0].tolist() == [0.8, 0.6]
    assert np.isnan(dense[offset != 0]).all()
    assert (out.column("dense.rank")[offset != 0] == 0).all()


# -- tombstones and stale ledgers ----------------------------------------------------------------


def test_a_tombstoned_sibling_is_skipped_without_a_warning():
    corpus = build_corpus("tombstones")
    gone = BY_ARTIFACT["pkg2"][2]
    corpus.store.delete_record(gone.id)
    c = batch(corpus, [[("pkg2", 1, 0.9)]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = run_stage(corpus, c, window=None)
    assert triples(corpus, out) == reference_expansion(BY_ARTIFACT, hit_records(corpus, c), None,
                                                       skip=frozenset({gone.id}))
    assert len(out) == len(BY_ARTIFACT["pkg2"]) - 1


def test_a_stale_ledger_entry_is_skipped_with_one_warning_naming_it(corpus):
    ledger = {a: list(ids) for a, ids in corpus.store.ledger.items()}
    ledger["pkg2"].insert(2, "torn-record-1")
    ledger["pkg5"].append("torn-record-2")
    stale = with_ledger(corpus, ledger)
    with pytest.raises(KeyError, match="torn-record-1"):  # the seed's primitive treats it as corruption
        records_for_artifact(stale, "pkg2")
    c = batch(stale, [[("pkg2", 1, 0.9), ("pkg5", 0, 0.5)]])
    with pytest.warns(LedgerWarning) as caught:
        out = run_stage(stale, c)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "'torn-record-1' (artifact 'pkg2')" in message and "'torn-record-2' (artifact 'pkg5')" in message
    assert "rebuild the corpus" in message
    assert triples(stale, out) == reference_expansion(BY_ARTIFACT, hit_records(stale, c), None)


def test_an_artifact_without_a_ledger_entry_keeps_its_hits_alone(corpus):
    ledger = {a: ids for a, ids in corpus.store.ledger.items() if a != "pkg6"}
    partial = with_ledger(corpus, ledger)
    c = batch(partial, [[("pkg6", 2, 0.9), ("pkg1", 0, 0.5), ("pkg6", 0, 0.4)]])
    with pytest.warns(LedgerWarning, match="no entry for artifact\\(s\\) 'pkg6'"):
        out = run_stage(partial, c)
    ids = [partial.record_ids[r] for r in out.row]
    pkg6 = [r.id for r in BY_ARTIFACT["pkg6"] if r.surface_index in (0, 2)]
    assert ids == pkg6 + [r.id for r in BY_ARTIFACT["pkg1"]]  # pkg6's two hits, in plan order, then pkg1


# -- the function API -------------------------------------------------------------------------


def test_expand_function_on_search_hits(corpus):
    hits = load_recipe("hybrid").run(corpus, "sql parser", k=3).hits
    expanded = expand(corpus, hits, window=1)
    by_record = {h.record_id: h for h in hits}
    expected = reference_expansion(BY_ARTIFACT, [BY_ID[h.record_id] for h in hits], 1)
    assert [(h.record_id, h.metadata.get(EXPAND_FROM, h.record_id), h.metadata.get(EXPAND_OFFSET, 0))
            for h in expanded] == expected
    for h in expanded:
        if h.record_id in by_record:
            assert h is by_record[h.record_id]  # hits come back unchanged
        else:
            source = by_record[h.metadata[EXPAND_FROM]]
            record = BY_ID[h.record_id]
            assert (h.score, h.source, h.text, h.surface_kind, h.surface_index) == (
                source.score, "surfaces", record.text, record.surface_kind, record.surface_index)
    # a list of lists (Result.hits of a batch) gives a list of lists
    both = load_recipe("hybrid").run(corpus, ["sql parser", "http client"], k=2).hits
    assert expand(corpus, both, window=0) == both
    assert expand(corpus, [], window=1) == []


def test_expand_function_reads_only_the_store(corpus):
    hits = load_recipe("lexical").run(corpus, "graph", k=2).hits
    assert expand(corpus.store, hits, surface_kind="deps") == expand(corpus, hits, surface_kind=["deps"])


def test_expand_function_refuses_what_it_cannot_resolve(corpus):
    hit = load_recipe("dense").run(corpus, "json", k=1).hits[0]
    with pytest.raises(ValueError, match="window must be an integer >= 0"):
        expand(corpus, [hit], window=-1)
    with pytest.raises(ValueError, match="surface_kind must be"):
        expand(corpus, [hit], surface_kind=3)
    from attrs import evolve

    with pytest.raises(ValueError, match="has no record_id"):
        expand(corpus, [evolve(hit, record_id=None)])
    with pytest.raises(ValueError, match="comes from corpus 'elsewhere'"):
        expand(corpus, [evolve(hit, source="elsewhere")])
    with pytest.raises(TypeError, match="SearchHit"):
        expand(corpus, ["not a hit"])


def test_expand_rows_checks_its_columns(corpus):
    with pytest.raises(ValueError, match="one query index per row"):
        expand_rows(corpus, [0, 0], [1])
    assert len(expand_rows(corpus, [], [])) == 0


# -- retrieve -> expand -> rerank ----------------------------------------------------------------


def test_retrieve_expand_rerank_reranks_the_expanded_segments(corpus):
    reranker = FakeReranker()
    queries = ["sql parser", "async http client"]
    with registry.registered("fake_ce", reranker):
        result = load_recipe("expand-rerank").run(corpus, queries, k=3, fetch_k=6, window=1,
                                                      rerank="fake_ce")
    assert [q for q, _ in reranker.calls] == queries  # once per query, the whole expanded list
    hits_in = result.output("cut")
    for i, (_, seen) in enumerate(reranker.calls):
        expected = reference_expansion(BY_ARTIFACT, hit_records(corpus, hits_in, i), 1)
        assert seen == [rid for rid, _, _ in expected]
        assert len(seen) > len(hits_in.per_query(i)[0])  # the reranker saw more than the hits
    for query, hits in zip(queries, result.hits):
        assert len(hits) == 3 and len({h.artifact_id for h in hits}) == 3
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        for h in hits:  # the reranker's score replaced the first-stage one
            assert math.isclose(h.score, reranker_score(query, h))


def reranker_score(query, hit):
    from surface_corpus import fake_score

    return fake_score(query, {"text": hit.text, "id": hit.record_id})


def test_a_recipe_refuses_a_bad_window(corpus):
    with pytest.raises((RecipeError, ValueError), match="window"):
        load_recipe("expand-rerank").with_params(window=-2).validate()
