"""Sharded corpora in-process: exactly the single-machine answer, the two-phase BM25, the merge, the faults.

Every comparison runs the same call on one corpus built from the records
and on the same records sharded 1, 2, 3 and 5 ways (artifacts kept
together in the row order, and interleaved), and asks for the same hits
in the same order with the same scores to the bit, the same stage outputs
(provenance columns included) and the same explanations.  The expectations
are the single machine's answers; the single machine's own correctness is
what the rest of the suite tests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine_fakes  # noqa: F401  (maps irflow.stages / irflow.recipes in a bare checkout)
import irflow
import irflow.engine.registry as registry
from irflow.api.expand import expand as expand_hits
from irflow.kernels.bm25 import BM25Params
from irflow.store.corpus import build
from irflow.errors import (CorpusError, FilterError, NoLedgerEntry, OutputError, UnknownFieldWarning,
                           UnknownSurfaceWarning)
from irflow.store.persist import save_corpus
from irflow.engine.recipe import builtin_recipes, load_recipe
from irflow.shard import ShardedCorpus, open_corpus, plan_shards, shard
from irflow.shard.manifest import MANIFEST_FILE
from irflow.shard.merge import RowMap, merge_topk
from irflow.kernels.topk import TopK
from shard_corpus import assert_same_result, records
from surface_corpus import FakeReranker

SHARDS = (1, 2, 3, 5)
LAYOUTS = ("grouped", "interleaved")
QUERIES = ["fast python parser", "graph network tool", "sql schema query", "http client json cache", "archive"]
FILTERS = [
    None,
    {"owner": "ann"},
    {"group": 0},                              # only the first artifacts: the later shards hold no candidate
    {"group": {"$in": [3]}},                    # only the last artifacts: the first shards hold none
    {"stars": {"$gte": 30}, "lang": "py"},
    {"$or": [{"license": "mit"}, {"tags": "db"}]},
    {"owner": "nobody"},                       # no candidate anywhere
]
SURFACES = [None, ["name"], "readme_chunk", ["deps", "description"]]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """(layout) -> the single-machine corpus, and (layout, n) -> the same records sharded n ways."""
    out = {}
    for layout in LAYOUTS:
        recs = records(interleave=layout == "interleaved")
        single = build(recs, embedder="hash", name="toys")
        out[layout] = single
        for n in SHARDS:
            out[layout, n] = shard(single, n, tmp_path_factory.mktemp(f"{layout}{n}") / "toys.sharded")
    yield out
    for value in out.values():
        if isinstance(value, ShardedCorpus):
            value.close()


def cases(layouts=LAYOUTS, shards=SHARDS):
    return [(layout, n) for layout in layouts for n in shards]


# -- the layout ---------------------------------------------------------------------------------------


def test_sharding_keeps_artifacts_whole_and_rows_global(corpora):
    for layout in LAYOUTS:
        single = corpora[layout]
        for n in SHARDS:
            sharded = corpora[layout, n]
            assert sharded.n_shards == n and sharded.n_rows == single.n_rows and len(sharded) == len(single)
            assert sharded.kinds == single.kinds and sharded.name == "toys"
            owner = {}
            for s, rows in enumerate(sharded.rows.rows):
                for artifact in single.artifact_ids[rows].tolist():
                    assert owner.setdefault(artifact, s) == s  # an artifact lives in one shard
            # global row = the single machine's row: the same record at every row
            every = np.arange(single.n_rows)
            assert sharded.record_ids_of(every).tolist() == single.record_ids.tolist()
            assert sharded.kind_codes_of(every).tolist() == single.kind_codes.tolist()
            assert sharded.surface_indices_of(every).tolist() == single.surface_indices.tolist()
            contiguous = all(e.rows_file is None for e in sharded.manifest.shards)
            assert contiguous == (layout == "grouped" or n == 1)


def test_shard_sizes_are_balanced():
    ids = [f"a{i // 3}" for i in range(300)]  # 100 artifacts of 3 records
    parts = plan_shards(ids, 4)
    assert [p.size for p in parts] == [75 + d for d in (0, 0, 0, 0)] or max(p.size for p in parts) - min(
        p.size for p in parts) <= 3
    with pytest.raises(CorpusError, match="cannot split 2 artifacts into 3 shards"):
        plan_shards(["a", "a", "b"], 3)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=80), st.integers(1, 6))
def test_plan_is_a_partition_of_whole_artifacts(artifacts, n):
    ids = [f"x{a}" for a in artifacts]
    if n > len(set(ids)):
        with pytest.raises(CorpusError):
            plan_shards(ids, n)
        return
    parts = plan_shards(ids, n)
    assert len(parts) == n and all(p.size for p in parts)
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(ids)))
    shard_of = {}
    for s, rows in enumerate(parts):
        assert np.all(np.diff(rows) > 0)
        for r in rows.tolist():
            assert shard_of.setdefault(ids[r], s) == s
    # consecutive runs of artifacts in order of first appearance
    firsts = list(dict.fromkeys(ids))
    assert [shard_of[a] for a in firsts] == sorted(shard_of[a] for a in firsts)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_merging_shard_tops_is_the_top_of_the_whole(data):
    n_rows = data.draw(st.integers(1, 40))
    n_queries = data.draw(st.integers(1, 4))
    k = data.draw(st.integers(1, 12))
    # few distinct scores: many exact ties, which must go by global row
    scores = np.array(data.draw(st.lists(st.lists(st.sampled_from([0.0, 0.5, 1.0, -2.0, 3.25]), min_size=n_rows,
                                                  max_size=n_rows), min_size=n_queries, max_size=n_queries)))
    owner = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n_rows, max_size=n_rows)))
    rows = [np.flatnonzero(owner == s) for s in range(4)]
    rows = [r for r in rows if r.size]

    def top(sub: np.ndarray, k: int) -> tuple:
        q, r, s = [], [], []
        for i in range(n_queries):
            order = np.lexsort((np.arange(sub.shape[1]), -sub[i]))[:k]
            q += [i] * order.size
            r += order.tolist()
            s += sub[i, order].tolist()
        return np.array(q, np.int64), np.array(r, np.int64), np.array(s)

    merged = merge_topk([top(scores[:, part], k) for part in rows], RowMap(rows), n_queries, k)
    whole = top(scores, k)
    assert merged == TopK(query_index=whole[0], row=whole[1], score=whole[2], n_queries=n_queries)


def test_row_map_round_trips():
    for rows in ([np.arange(0, 3), np.arange(3, 7)], [np.array([0, 2, 5]), np.array([1, 3, 4, 6])]):
        m = RowMap(rows)
        everything = np.arange(7)
        shard, local = m.to_local(everything)
        assert [int(m.to_global(s, [r])[0]) for s, r in zip(shard, local)] == everything.tolist()
        mask = np.array([True, False, True, True, False, False, True])
        assert m.join(m.split(mask)).tolist() == mask.tolist()
        with pytest.raises(IndexError, match="row 7 is outside"):
            m.to_local([7])


# -- exactly the single-machine answer -------------------------------------------------------------------

RUNS = [(name, rerank) for name in builtin_recipes() for rerank in (False, True)
        if not rerank or "rerank" in load_recipe(name).params]


@pytest.mark.parametrize("layout, n", cases())
@pytest.mark.parametrize("name, rerank", RUNS, ids=[f"{n}-{'fake' if r else 'none'}" for n, r in RUNS])
def test_every_builtin_recipe_gives_the_single_machine_answer(corpora, layout, n, name, rerank):
    recipe = load_recipe(name)
    params = {"k": 4}
    if rerank:
        params["rerank"] = "fake_rerank"
    with registry.registered("fake_rerank", FakeReranker()):
        single = recipe.run(corpora[layout], QUERIES, trace=True, **params)
        sharded = recipe.run(corpora[layout, n], QUERIES, trace=True, **params)
    assert_same_result(single, sharded)
    # the same answer untraced, one query at a time (explain from the provenance columns then)
    with registry.registered("fake_rerank", FakeReranker()):
        assert_same_result(recipe.run(corpora[layout], QUERIES[0], **params),
                           recipe.run(corpora[layout, n], QUERIES[0], **params))


@pytest.mark.parametrize("layout, n", cases(shards=(2, 5)))
@pytest.mark.parametrize("variant", ["okapi", "bm25l", "bm25plus"])
@pytest.mark.parametrize("stats", ["candidates", "corpus"])
def test_bm25_variants_and_statistics_over_filters(corpora, layout, n, variant, stats):
    single, sharded = corpora[layout], corpora[layout, n]
    tokens = single.tokenize_queries(QUERIES + ["python data", "the"])
    params = BM25Params(variant=variant, stats=stats)
    for filter in FILTERS:
        for surfaces in SURFACES:
            mask = single.candidate_mask(filter, surfaces)
            other = sharded.candidate_mask(filter, surfaces)
            assert np.array_equal(mask, other)
            for fetch_k in (3, 40, 1000):  # 1000: more than any shard (and the corpus) holds
                assert single.bm25_topk(tokens, mask, fetch_k, params) == \
                    sharded.bm25_topk(tokens, other, fetch_k, params)
            # a mask the driver did not make travels as rows, with the same answer
            assert single.bm25_topk(tokens, mask, 7, params) == sharded.bm25_topk(tokens, mask.copy(), 7, params)
        lexical = load_recipe("lexical")
        assert_same_result(lexical.run(single, QUERIES, filter=filter, bm25=params.to_dict(), k=30),
                           lexical.run(sharded, QUERIES, filter=filter, bm25=params.to_dict(), k=30), explain=False)


def test_the_okapi_floor_exchanges_the_vocabulary_only_when_needed(corpora):
    sharded = corpora["grouped", 3]
    calls = []
    real = sharded.backend.run

    def spy(method, shard_calls):
        calls.append((method, [args[-1] for _, args in shard_calls] if method == "partial_stats" else None))
        return real(method, shard_calls)

    sharded.backend.run = spy
    try:
        params = BM25Params(stats="corpus")
        rare = sharded.tokenize_queries(["archive"])  # a rare word: positive idf, no vocabulary
        sharded.bm25_topk(rare, None, 5, params)
        assert [c for c in calls if c[0] == "partial_stats"] == [("partial_stats", [False] * 3)]
        calls.clear()
        common = sharded.tokenize_queries(["python data"])  # in most records: negative idf, the floor
        mask = sharded.candidate_mask({"owner": "bob"})
        single = corpora["grouped"]
        assert sharded.bm25_topk(common, mask, 5, "okapi" and BM25Params()) == \
            single.bm25_topk(common, single.candidate_mask({"owner": "bob"}), 5, BM25Params())
        assert [c[1] for c in calls if c[0] == "partial_stats"] == [[False] * 3, [True] * 3]
        calls.clear()
        sharded.bm25_topk(common, mask, 5, BM25Params())  # the mean over those candidates is cached
        assert [c[1] for c in calls if c[0] == "partial_stats"] == [[False] * 3]
    finally:
        del sharded.backend.run


@pytest.mark.parametrize("layout, n", cases())
def test_dense_over_filters_and_k_larger_than_a_shard(corpora, layout, n):
    single, sharded = corpora[layout], corpora[layout, n]
    vectors = single.embed_queries(QUERIES)
    assert np.array_equal(vectors, sharded.embed_queries(QUERIES))
    vectors = np.vstack([vectors, np.zeros((1, vectors.shape[1]), np.float32)])  # a zero query: ties everywhere
    for filter in FILTERS:
        for surfaces in SURFACES:
            mask = single.candidate_mask(filter, surfaces)
            for fetch_k in (1, 4, 60, 500):
                assert single.dense_topk(vectors, mask, fetch_k) == \
                    sharded.dense_topk(vectors, sharded.candidate_mask(filter, surfaces), fetch_k)


@pytest.mark.parametrize("layout, n", cases(shards=(2, 3, 5)))
def test_search_with_filters_surfaces_and_formulate_fan_out(corpora, layout, n):
    single, sharded = corpora[layout], corpora[layout, n]

    def fan_out(query):
        return [query, f"{query} python", "graph data"]

    for filter in FILTERS[:5]:
        for surfaces in SURFACES:
            for mode in ("dense", "lexical", "hybrid"):
                params = dict(mode=mode, filter=filter, surfaces=surfaces, k=25, formulate=fan_out)
                a = irflow.search(single, "sql parser", **params)
                b = irflow.search(sharded, "sql parser", **params)
                assert [(h.record_id, h.score.hex()) for h in a] == [(h.record_id, h.score.hex()) for h in b]
                assert a == b
    search = load_recipe("search")
    params = dict(mode="hybrid", fusion="blend", k=40, per_artifact=False, formulate=fan_out,
                  surface_weights={"name": 2.0, "deps": 0.5}, filter={"lang": "py"})
    assert_same_result(search.run(single, QUERIES, trace=True, **params),
                       search.run(sharded, QUERIES, trace=True, **params))


def test_records_from_records_are_built_as_one_build_would(tmp_path):
    recs = records(interleave=True)
    single = build(recs, embedder="hash", name="direct")
    with shard(recs, 3, tmp_path / "direct", embedder="hash") as sharded:
        assert sharded.name == "direct"
        for name in ("hybrid", "search"):
            assert_same_result(load_recipe(name).run(single, QUERIES, trace=True),
                               load_recipe(name).run(sharded, QUERIES, trace=True))


# -- the rest of the corpus protocol ---------------------------------------------------------------


def test_records_hits_ledger_and_rows(corpora):
    single, sharded = corpora["interleaved"], corpora["interleaved", 3]
    rows = np.array([5, 0, 17, 5, single.n_rows - 1])
    assert sharded.records(rows) == [single.record(r) for r in rows.tolist()]
    assert sharded.hits(rows, [0.5] * 5) == [single.hit(r, 0.5) for r in rows.tolist()]
    assert sharded.artifact_ids_of(rows).tolist() == single.artifact_ids[rows].tolist()
    assert sharded.kind_codes_of(rows).tolist() == single.kind_codes[rows].tolist()
    for artifact in ("pkg00", "pkg05", "pkg29"):
        for kind in (None, "readme_chunk"):
            assert sharded.records_for_artifact(artifact, surface_kind=kind) == \
                irflow.records_for_artifact(single, artifact, surface_kind=kind)
    with pytest.raises(NoLedgerEntry, match="corpus 'toys' has no entry for artifact 'nope'"):
        sharded.records_for_artifact("nope")
    record_id = single.record_ids[17]
    assert sharded.row_of(record_id) == 17
    with pytest.raises(KeyError, match="not in corpus 'toys'"):
        sharded.row_of("no-such-record")


def test_filter_checks_warn_and_refuse_as_one_machine(corpora):
    single, sharded = corpora["grouped"], corpora["grouped", 5]
    single._masks.warned.clear()  # the warnings a corpus gave once: give them again
    sharded.warned.clear()
    for call in (lambda c: c.candidate_mask({"ownr": "ann"}),
                 lambda c: c.candidate_mask(None, ["name", "nmae"])):
        with warnings.catch_warnings(record=True) as a:
            warnings.simplefilter("always")
            call(single)
        with warnings.catch_warnings(record=True) as b:
            warnings.simplefilter("always")
            call(sharded)
        assert [(w.category, str(w.message)) for w in a] == [(w.category, str(w.message)) for w in b]
        assert a and a[0].category in (UnknownFieldWarning, UnknownSurfaceWarning)
    for bad in (lambda c: c.candidate_mask(None, ["nam"]), lambda c: c.candidate_mask({"stars": {"$gt": []}})):
        with pytest.raises(FilterError) as one:
            bad(single)
        with pytest.raises(FilterError) as many:
            bad(sharded)
        assert str(one.value) == str(many.value)


def test_a_kind_held_by_one_shard_only_is_no_mistake(tmp_path):
    recs = [{"artifact_id": f"a{i}", "surface_kind": "name", "text": f"alpha {i}"} for i in range(4)]
    recs.append({"artifact_id": "z", "surface_kind": "notes", "text": "alpha notes"})
    single = build(recs, embedder="hash", name="k")
    with shard(single, 2, tmp_path / "k") as sharded, warnings.catch_warnings():
        warnings.simplefilter("error")  # the first shard lacks "notes": no warning, no error
        assert np.array_equal(sharded.candidate_mask(None, ["notes"]), single.candidate_mask(None, ["notes"]))
        assert irflow.search(sharded, "alpha", mode="lexical", surfaces=["notes"]) == \
            irflow.search(single, "alpha", mode="lexical", surfaces=["notes"])


def test_deleted_records_stay_deleted(tmp_path):
    recs = records(12)
    single = build(recs, embedder="hash", name="del", path=tmp_path / "del")
    for record_id in single.record_ids[[2, 9, 10]].tolist():
        single.store.delete_record(record_id)
    with shard(single, 3, tmp_path / "del.sharded") as sharded:
        assert len(sharded) == len(single) and sharded.n_rows == single.n_rows
        for name in ("hybrid-rerank", "expand-rerank"):
            with registry.registered("fake_rerank", FakeReranker()):
                assert_same_result(load_recipe(name).run(single, QUERIES, rerank="fake_rerank", trace=True),
                                   load_recipe(name).run(sharded, QUERIES, rerank="fake_rerank", trace=True))
        for stats in ("candidates", "corpus"):
            assert irflow.search(single, "python data", mode="lexical", bm25={"stats": stats}, k=20) == \
                irflow.search(sharded, "python data", mode="lexical", bm25={"stats": stats}, k=20)


# -- opening, and what refuses to open ----------------------------------------------------------------


@pytest.fixture()
def sharded_dir(tmp_path):
    single = build(records(10), embedder="hash", name="f")
    shard(single, 3, tmp_path / "f.sharded").close()
    return tmp_path / "f.sharded"


def test_open_corpus_opens_both_kinds(sharded_dir, tmp_path):
    with open_corpus(sharded_dir) as sharded:
        assert isinstance(sharded, ShardedCorpus) and sharded.backend.description == "in-process"
        assert irflow.open_corpus is open_corpus
    plain = tmp_path / "plain"
    build(records(4), embedder=None, path=plain)
    assert isinstance(open_corpus(plain), irflow.Corpus)
    with pytest.raises(CorpusError, match="not a sharded corpus .* irflow shard"):
        open_corpus(plain, ray="auto")


def test_a_damaged_shard_file_names_the_shard_and_the_file(sharded_dir):
    (postings,) = sharded_dir.glob("shard-001/gen-*/postings.post_rows.npy")
    data = bytearray(postings.read_bytes())
    data[-1] ^= 0xFF
    postings.write_bytes(bytes(data))
    with pytest.raises(CorpusError, match=r"shard 1 \(.*shard-001\).*postings\.post_rows\.npy") as caught:
        ShardedCorpus.open(sharded_dir)
    # the fix of a sharded corpus, not a single one's (rebuilding the shard alone would not repair it)
    assert "shard the corpus again" in str(caught.value) and "irflow.build" not in str(caught.value)


def test_damaged_vectors_fail_their_first_dense_use_naming_the_shard(sharded_dir):
    (vectors,) = sharded_dir.glob("shard-002/gen-*/vectors.npy")
    data = bytearray(vectors.read_bytes())
    data[-3] ^= 0x55
    vectors.write_bytes(bytes(data))
    with ShardedCorpus.open(sharded_dir) as sharded:  # vectors are mapped at open, verified on first dense use
        assert irflow.search(sharded, "python", mode="lexical")
        with pytest.raises(CorpusError, match=r"shard 2 \(.*shard-002\).*vectors\.npy.*shard the corpus again"):
            irflow.search(sharded, "python", mode="dense")


def test_a_missing_shard_refuses_to_open_and_an_unlisted_one_is_left_alone(sharded_dir):
    single = build(records(10), embedder="hash", name="f")
    moved = sharded_dir.parent / "elsewhere"
    shutil.move(sharded_dir / "shard-002", moved)
    with pytest.raises(CorpusError, match="shard 2 is missing from disk"):
        ShardedCorpus.open(sharded_dir)
    shutil.move(moved, sharded_dir / "shard-002")
    ShardedCorpus.open(sharded_dir).close()
    # a shard directory shards.json does not list is what a reshard into fewer shards leaves while a reader
    # holds it: the manifest decides, and the next sharding removes it
    shutil.copytree(sharded_dir / "shard-002", sharded_dir / "shard-003")
    with ShardedCorpus.open(sharded_dir) as sharded:
        assert sharded.n_shards == 3
        assert irflow.search(sharded, "python", mode="hybrid") == irflow.search(single, "python", mode="hybrid")
    shard(single, 3, sharded_dir).close()
    assert sorted(p.name for p in sharded_dir.iterdir()) == [".lock", "shard-000", "shard-001", "shard-002",
                                                             MANIFEST_FILE]


def test_a_rebuilt_shard_or_no_manifest_refuses_to_open(sharded_dir):
    # replaced behind the manifest's back, through the store layer (build(path=...) refuses a path in a sharded corpus)
    part = build(records(3), embedder="hash")
    save_corpus(sharded_dir / "shard-001", store=part.store, postings=part.postings, vectors=part.vectors,
                analyzer=part.analyzer.to_dict(), embedder=part.embedder_info)
    with pytest.raises(CorpusError, match=r"shard 1 \(.*shard-001\).*gen-000001.* missing.*shard the corpus again"):
        ShardedCorpus.open(sharded_dir)
    (sharded_dir / MANIFEST_FILE).unlink()  # shard directories and no manifest: what a killed first sharding leaves
    with pytest.raises(CorpusError, match="holds an interrupted sharding.*run the irflow shard command again"):
        ShardedCorpus.open(sharded_dir)
    with pytest.raises(CorpusError, match="is not a sharded corpus: it has no shards.json"):
        ShardedCorpus.open(sharded_dir / "shard-001")


def test_resharding_replaces_the_shards(sharded_dir):
    single = build(records(10), embedder="hash", name="f")
    with shard(single, 2, sharded_dir) as fewer:
        assert fewer.n_shards == 2 and not (sharded_dir / "shard-002").exists()
        assert irflow.search(fewer, "python", mode="hybrid") == irflow.search(single, "python", mode="hybrid")
    with pytest.raises(OutputError, match="is inside the irflow sharded corpus"):
        shard(single, 2, sharded_dir / "shard-000")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 4), interleave=st.booleans(),
       variant=st.sampled_from(["okapi", "bm25l", "bm25plus"]), stats=st.sampled_from(["candidates", "corpus"]),
       owner=st.sampled_from([None, "ann", "cy"]), k=st.integers(1, 30))
def test_random_corpora_shard_to_the_same_scores(tmp_path_factory, seed, n, interleave, variant, stats, owner, k):
    recs = records(8 + seed % 9, seed=seed, interleave=interleave)
    single = build(recs, embedder="hash:32", name="r")
    with shard(single, n, tmp_path_factory.mktemp("r") / "r") as sharded:
        tokens = single.tokenize_queries(QUERIES)
        filter = None if owner is None else {"owner": owner}
        params = BM25Params(variant=variant, stats=stats)
        assert single.bm25_topk(tokens, single.candidate_mask(filter), k, params) == \
            sharded.bm25_topk(tokens, sharded.candidate_mask(filter), k, params)
        vectors = single.embed_queries(QUERIES)
        assert single.dense_topk(vectors, single.candidate_mask(filter), k) == \
            sharded.dense_topk(vectors, sharded.candidate_mask(filter), k)


def test_shards_whose_logarithms_differ_refuse_to_open(sharded_dir, monkeypatch):
    from irflow.shard import worker

    answers = iter(["a1b2", "a1b2", "ffff"])  # the third shard's C library computes log differently
    monkeypatch.setattr(worker, "math_fingerprint", lambda: next(answers))
    with pytest.raises(CorpusError, match="compute logarithms differently"):
        ShardedCorpus.open(sharded_dir)


def test_a_shard_whose_manifest_was_rewritten_refuses_to_open(sharded_dir):
    # a generation manifest edited in place (and CURRENT's digest with it): same build id, another checksum
    from irflow.store.generations import CURRENT_FILE, checksum

    (generation,) = (sharded_dir / "shard-000").glob("gen-*")
    manifest = json.loads((generation / "manifest.json").read_text())
    manifest["created"] = "1970-01-01T00:00:00+00:00"
    (generation / "manifest.json").write_text(json.dumps(manifest))
    (sharded_dir / "shard-000" / CURRENT_FILE).write_text(f"{generation.name} {checksum(generation / 'manifest.json')}")
    with pytest.raises(CorpusError, match=r"shard 0 .*gen-000001/manifest\.json does not match the checksum recorded "
                                          r"in .*shards\.json"):
        ShardedCorpus.open(sharded_dir)


def test_ray_is_imported_only_when_asked_for(sharded_dir):
    # a fresh interpreter: irflow, a sharded corpus served in-process, a search — and no ray module loaded
    code = ("import sys, irflow; c = irflow.open_corpus(sys.argv[1]); irflow.search(c, 'python', mode='hybrid'); "
            "import irflow.shard.driver, irflow.shard.worker, irflow.shard.split; "
            "assert 'ray' not in sys.modules, 'ray imported'; print('ok')")
    done = subprocess.run([sys.executable, "-c", code, str(sharded_dir)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_eval_on_ray_needs_the_corpus_on_disk(tmp_path):
    # refused before any cluster is started or ray imported
    from irflow.evaluation.metrics import EvaluationError

    data = tmp_path / "mini"
    (data / "qrels").mkdir(parents=True)
    (data / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "alpha beta"}\n')
    (data / "queries.jsonl").write_text('{"_id": "q1", "text": "alpha"}\n')
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    with pytest.raises(EvaluationError, match="needs the corpus on disk"):
        irflow.evaluate("lexical", data, embedder=None, use_cache=False, ray="auto")


def test_concurrent_searches_on_an_in_process_sharded_corpus(corpora):
    from concurrent.futures import ThreadPoolExecutor

    single, sharded = corpora["interleaved"], corpora["interleaved", 3]
    expected = [irflow.search(single, q, mode="hybrid", filter={"owner": o}) for q in QUERIES for o in ("ann", "cy")]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda a: irflow.search(sharded, a[0], mode="hybrid", filter={"owner": a[1]}),
                            [(q, o) for q in QUERIES for o in ("ann", "cy")]))
    assert got == expected


# -- the corpus protocol, and nothing else -------------------------------------------------------------

import test_corpus_protocol as protocol_tests  # noqa: E402  (its wrapper and its runs, not its tests)
from irflow.store.protocol import PROTOCOL_MEMBERS, CorpusProtocol  # noqa: E402
from surface_corpus import build_corpus  # noqa: E402


@pytest.fixture(scope="module")
def protocol_pair(tmp_path_factory):
    single = build_corpus("protocol")
    with shard(single, 3, tmp_path_factory.mktemp("protocol") / "sharded") as sharded:
        yield single, sharded


def test_a_sharded_corpus_implements_the_corpus_protocol(protocol_pair):
    _, sharded = protocol_pair
    assert isinstance(sharded, CorpusProtocol)
    assert [name for name in PROTOCOL_MEMBERS if not hasattr(sharded, name)] == []
    assert sharded.version == 0  # read-only: nothing it answered can go stale


@pytest.mark.parametrize("run", protocol_tests._runs(), ids=protocol_tests._label)
def test_every_run_of_the_protocol_test_gives_one_machines_answer_through_the_protocol_alone(protocol_pair, run):
    """tests/test_corpus_protocol.py's runs on the sharded corpus, seen through the protocol-only wrapper."""
    single, sharded = protocol_pair
    name, params = run
    recipe = load_recipe(name)
    with registry.registered("protocol_rerank", FakeReranker()):
        wrapped = protocol_tests.ProtocolOnly(sharded)
        seen = recipe.run(wrapped, protocol_tests.QUERIES, trace=True, **params)
        direct = recipe.run(single, protocol_tests.QUERIES, trace=True, **params)
    assert any(hits for hits in seen.hits)
    assert_same_result(direct, seen)
    assert protocol_tests._lines(seen.trace) == protocol_tests._lines(direct.trace)
    assert wrapped.used <= set(PROTOCOL_MEMBERS)


def test_sibling_rows_are_the_single_machines_in_global_rows(protocol_pair):
    single, sharded = protocol_pair
    artifacts = ["pkg4", "nope", "pkg0", "pkg7", "pkg4"]
    one, many = single.sibling_rows(artifacts), sharded.sibling_rows(artifacts)
    assert many.listed.tolist() == one.listed.tolist() == [True, False, True, True, True]
    assert many.offsets.tolist() == one.offsets.tolist() and many.rows.tolist() == one.rows.tolist()
    assert many.stale == one.stale == ()
    assert sharded.sibling_rows([]).rows.size == 0
    none = np.empty(0, dtype=np.int64)
    for lookup in ("record_ids_of", "artifact_ids_of", "kind_codes_of", "surface_indices_of"):
        assert getattr(sharded, lookup)(none).dtype == getattr(single, lookup)(none).dtype, lookup


def test_the_expand_api_on_a_sharded_corpus_is_one_machines(corpora):
    single, sharded = corpora["interleaved"], corpora["interleaved", 3]
    hits = [irflow.search(single, q, mode="hybrid", k=4) for q in ("graph network tool", "sql schema query")]
    assert [irflow.search(sharded, q, mode="hybrid", k=4) for q in ("graph network tool", "sql schema query")] == hits
    for window, kind in ((None, None), (1, None), (0, "readme_chunk"), (2, ["deps", "name"])):
        expanded = expand_hits(single, hits, window=window, surface_kind=kind)
        assert expand_hits(sharded, hits, window=window, surface_kind=kind) == expanded
    assert any(len(e) > len(h) for e, h in zip(expand_hits(single, hits), hits))
