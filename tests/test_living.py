"""Corpora updated in place: add, upsert, delete, put_artifact, delete_artifact, batches, merges, compaction.

After any sequence of operations a corpus answers every query exactly as a
fresh ``irflow.build`` of its live records (``list(corpus)``) does — the
rebuild oracle (``tests/rebuild_oracle.py``) is the expectation, computed
independently by building from scratch.  Every refusal names the records
at fault and leaves the corpus as it was.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import irflow
from irflow.errors import CorpusError, MissingRecordWarning
from irflow.store.mergepolicy import MergePolicy
from irflow.store.updates import UpdateReport
from rebuild_oracle import assert_same_answers, assert_same_records, rebuild
from shard_corpus import records


def _corpus(n: int = 50, embedder: object = "hash", **kwargs: object) -> irflow.Corpus:
    recs = records()
    corpus = irflow.build(recs[:n], embedder=embedder, name="toys", **kwargs)
    corpus.merge_policy = MergePolicy.never()
    return corpus


def _state(corpus: irflow.Corpus) -> tuple:
    """Everything an update could change, to check a refused one changed nothing."""
    return (corpus.version, corpus.n_rows, [r.to_dict() for r in corpus], dict(corpus.store.ledger),
            corpus.segments, corpus.kinds)


@pytest.fixture(scope="module")
def recs() -> list[dict]:
    return records()


# -- the operations, checked against fresh builds ---------------------------------------------------


def test_adds_upserts_deletes_and_artifacts_answer_as_a_fresh_build(recs):
    corpus = _corpus(50)
    report = corpus.add(recs[50:80])
    assert report == UpdateReport(added=30, embedded=30, segments=2)
    corpus.add(recs[80:])
    assert [s.rows for s in corpus.segments] == [50, 30, len(recs) - 80]
    assert_same_answers(corpus)  # the full oracle once: every recipe, mode, filter, variant
    ids = corpus.record_ids.tolist()
    assert corpus.delete(ids[3:9] + ids[60:62]).deleted == 8
    replaced = dict(recs[10], text="replaced: a sql parser")  # explicit surface_index: the same id
    report = corpus.upsert([replaced, dict(artifact_id="pkg99", surface_kind="name", text="pkg99 new")])
    assert (report.added, report.replaced, report.deleted) == (1, 1, 0)
    corpus.put_artifact("pkg03", [dict(artifact_id="pkg03", surface_kind="name", text="pkg03 graph"),
                                  dict(artifact_id="pkg03", surface_kind="deps", text="networkx")])
    corpus.delete_artifact("pkg07")
    fresh = assert_same_answers(corpus, quick=True)
    assert [r.surface_index for r in irflow.records_for_artifact(fresh, "pkg03")] == [0, 1]
    assert "pkg07" not in corpus.store.ledger and "pkg07" not in corpus.artifact_ids_of(np.flatnonzero(corpus.live))
    # the new version of an upserted record comes last, the other rows keep their order
    assert list(corpus)[-4].text == "replaced: a sql parser"


def test_omitted_surface_indices_follow_the_artifacts_own(recs):
    corpus = _corpus(12)
    held = [r.surface_index for r in irflow.records_for_artifact(corpus, "pkg02")]
    corpus.add([dict(artifact_id="pkg02", surface_kind="readme_chunk", text="more about pkg02"),
                dict(artifact_id="pkg02", surface_kind="readme_chunk", text="and more"),
                dict(artifact_id="fresh", surface_kind="name", text="fresh")])
    assert [r.surface_index for r in irflow.records_for_artifact(corpus, "pkg02")] == held + [len(held),
                                                                                              len(held) + 1]
    assert [r.surface_index for r in irflow.records_for_artifact(corpus, "fresh")] == [0]
    corpus.put_artifact("pkg02", [dict(artifact_id="pkg02", surface_kind="name", text="pkg02")])  # from 0
    assert [r.surface_index for r in irflow.records_for_artifact(corpus, "pkg02")] == [0]
    assert_same_records(corpus, rebuild(corpus))


def test_a_batch_is_one_commit_in_call_order(recs):
    corpus = _corpus(30)
    version = corpus.version
    new = dict(artifact_id="tmp", surface_kind="name", text="temporary", surface_index=0)
    victim = corpus.record_ids[4]
    with corpus.batch() as batch:
        batch.add([new])
        batch.delete([irflow.Record(**new).id])  # added then deleted in the batch: simply absent
        batch.delete([victim])
        batch.add([dict(corpus.record(4).to_dict(), text="back again")])  # deleted earlier, added again
        batch.add(recs[30:40])
    report = batch.report
    assert (report.added, report.replaced, report.deleted, report.segments) == (10, 1, 0, 2)
    assert corpus.version == version + 1 and len(corpus.segments) == 2
    assert irflow.Record(**new).id not in corpus.store and corpus.store.get(victim).text == "back again"
    assert_same_answers(corpus, quick=True)


def test_a_failed_batch_commits_nothing(recs):
    corpus = _corpus(20)
    before = _state(corpus)
    with pytest.raises(RuntimeError):
        with corpus.batch() as batch:
            batch.add(recs[20:25])
            raise RuntimeError("the caller changed its mind")
    with pytest.raises(CorpusError, match="already in corpus 'toys'"):
        with corpus.batch() as batch:
            batch.add(recs[20:25])
            batch.add(recs[24:26])
    assert _state(corpus) == before


def test_a_record_added_and_deleted_everywhere_leaves_an_empty_corpus_that_answers(recs):
    corpus = _corpus(6)
    corpus.delete(corpus.record_ids.tolist())
    assert len(corpus) == 0 and corpus.kinds == ()
    assert irflow.search(corpus, "python", mode="lexical") == []
    corpus.compact()
    assert corpus.n_rows == 0 and len(corpus.segments) == 1
    corpus.add(recs[6:10])
    assert_same_records(corpus, rebuild(corpus))
    assert irflow.search(corpus, "pkg03", mode="lexical")


# -- vectors: embedded once, reused, precomputed, none ------------------------------------------------


class CountingEmbedder:
    """The hash embedder, counting the texts it embeds (a callable texts -> (n, d))."""

    def __init__(self) -> None:
        from irflow.kernels.embedders import resolve_embedder
        self.inner = resolve_embedder("hash:64")
        self.texts: list[str] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return self.inner.embed_documents(list(texts))


def test_only_new_texts_are_embedded(recs):
    counting = CountingEmbedder()
    corpus = irflow.build(recs[:30], embedder=counting, name="toys")
    counting.texts.clear()
    old = recs[3]["text"]
    report = corpus.add([dict(artifact_id="n1", surface_kind="name", text=old),        # in the corpus
                         dict(artifact_id="n2", surface_kind="name", text="brand new"),
                         dict(artifact_id="n3", surface_kind="name", text="brand new")])  # twice here
    assert counting.texts == ["brand new"] and (report.embedded, report.reused) == (1, 1)
    fresh = rebuild(corpus)
    row = corpus.row_of(corpus.store.ledger["n1"][0])
    assert np.array_equal(corpus.vectors[row], fresh.vectors[fresh.row_of(corpus.store.ledger["n1"][0])])
    assert_same_answers(corpus, fresh, quick=True)


def test_precomputed_vectors_are_required_checked_and_normalized(recs):
    rng = np.random.default_rng(3)
    raw = {}

    def with_vector(record: dict) -> dict:
        record = dict(record)
        record["vector"] = rng.normal(size=5)
        raw[irflow.Record(**{k: v for k, v in record.items() if k != "vector"}).id] = record["vector"]
        return record
    corpus = irflow.build([with_vector(r) for r in recs[:40]], embedder=None, name="toys")
    corpus.merge_policy = MergePolicy.never()
    before = _state(corpus)
    with pytest.raises(CorpusError, match="carry none"):
        corpus.add([recs[40]])
    bad = with_vector(recs[41])
    bad["vector"] = np.ones(4)
    with pytest.raises(CorpusError, match="vectors of 5 dimensions.*other dimensions"):
        corpus.add([bad])
    nan = with_vector(recs[42])
    nan["vector"] = np.array([1, np.nan, 0, 0, 0])
    with pytest.raises(CorpusError, match="NaN or inf"):
        corpus.add([nan])
    assert _state(corpus) == before
    corpus.add([with_vector(r) for r in recs[40:]])
    corpus.delete(corpus.record_ids[:5].tolist())
    fresh = rebuild(corpus, raw)
    assert corpus.embedder is None
    corpus, fresh = corpus.with_embedder("hash:5"), fresh.with_embedder("hash:5")  # dense queries need one
    assert_same_answers(corpus, fresh, vectors=raw, quick=True)


def test_vector_sources_never_mix(recs):
    embedded = _corpus(10)
    with pytest.raises(CorpusError, match="never mixes vectors of two sources"):
        embedded.add([dict(recs[10], vector=[1.0] * 256)])
    lexical = _corpus(10, embedder=None)
    with pytest.raises(CorpusError, match="lexical-only.*carry vectors"):
        lexical.add([dict(recs[10], vector=[1.0, 0.0])])
    lexical.add(recs[10:40])
    lexical.delete(lexical.record_ids[:3].tolist())
    assert_same_answers(lexical, quick=True)


# -- refusals: one clear error, nothing changed -----------------------------------------------------------


def test_refusals_name_the_records_and_change_nothing(recs):
    corpus = _corpus(30)
    before = _state(corpus)
    taken = [irflow.Record(**r).id for r in recs[:7]]
    with pytest.raises(CorpusError, match=r"7 record\(s\) already in corpus 'toys'.*and 2 more \(7 in all\).*upsert") \
            as caught:
        corpus.add(recs[:7])
    assert all(t in str(caught.value) for t in taken[:5]) and taken[5] not in str(caught.value)
    with pytest.raises(CorpusError, match="records #0 and #1 are both surface_index"):  # as build() says it
        corpus.add([recs[40], recs[40]])
    clash = dict(recs[0], surface_kind="deps", id="other-id")  # the surface of pkg00 #0 again
    with pytest.raises(CorpusError, match="surface_index 0 of artifact 'pkg00', held by"):
        corpus.add([clash])
    with pytest.raises(CorpusError, match=r"1 record id\(s\) not in corpus 'toys'.*'nope'.*missing='ok'"):
        corpus.delete(["nope", corpus.record_ids[0]])
    with pytest.raises(CorpusError, match="artifact not in corpus 'toys'.*'ghost'"):
        corpus.delete_artifact("ghost")
    with pytest.raises(CorpusError, match=r"put_artifact\('pkg01'\) got 1 record\(s\) of other artifacts.*pkg02"):
        corpus.put_artifact("pkg01", [dict(recs[1], artifact_id="pkg01"), dict(recs[3], artifact_id="pkg02")])
    with pytest.raises(CorpusError, match="single dict"):
        corpus.add(recs[40])  # type: ignore[arg-type]
    with pytest.raises(CorpusError, match="record #1 is invalid"):
        corpus.add([recs[40], {"artifact_id": "x", "txt": "typo"}])
    with pytest.raises(ValueError, match="missing must be one of"):
        corpus.delete(["x"], missing="ignore")
    assert _state(corpus) == before


def test_missing_ok_warns_and_deletes_the_others(recs):
    corpus = _corpus(10)
    first = corpus.record_ids[0]
    with pytest.warns(MissingRecordWarning, match="'nope'.*the others were deleted"):
        report = corpus.delete(["nope", first], missing="ok")
    assert report.deleted == 1 and first not in corpus.store
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert corpus.delete_artifact("ghost", missing="ok").deleted == 0
    assert [type(w.message) for w in caught] == [MissingRecordWarning]


# -- merges -----------------------------------------------------------------------------------------------


def test_merges_by_policy_and_compact_never_change_an_answer(recs):
    corpus = _corpus(20)
    corpus.merge_policy = MergePolicy(merge_factor=3, max_deleted=0.25, max_segments=4)
    for lo in range(20, 60, 5):
        corpus.add(recs[lo:lo + 5])
    corpus.delete(corpus.record_ids[[1, 2, 3, 4, 5, 6]].tolist())
    assert len(corpus.segments) <= 4
    assert all(s.live == s.rows or (s.rows - s.live) < 0.25 * s.rows for s in corpus.segments)
    fresh = assert_same_answers(corpus, quick=True)
    report = corpus.compact()
    assert report.segments == 1 and [s.rows for s in corpus.segments] == [len(fresh)]
    assert_same_answers(corpus, fresh, quick=True)
    assert corpus.compact().merged == 0  # nothing left to merge


def test_stale_ledger_entries_survive_merges(recs):
    corpus = _corpus(20)
    corpus.add(recs[20:30])
    victim = corpus.store.ledger["pkg01"][0]
    corpus.store.delete_record(victim)  # out of band: the ledger still lists it
    assert victim in corpus.store.ledger["pkg01"]
    with pytest.raises(KeyError, match="stale"):
        irflow.records_for_artifact(corpus, "pkg01")
    corpus.compact()
    assert victim in corpus.store.ledger["pkg01"] and victim not in corpus.store
    with pytest.raises(KeyError, match="stale"):
        irflow.records_for_artifact(corpus, "pkg01")
    corpus.delete(list(corpus.store.ledger["pkg01"])[1:])  # the update operations unlist what they remove
    corpus.upsert([dict(recs[1], text="pkg01 again")])
    assert irflow.records_for_artifact(corpus, "pkg01")


# -- readers see one state ----------------------------------------------------------------------------


def test_a_snapshot_never_changes_and_a_result_keeps_its_rows(recs):
    corpus = _corpus(20)
    snapshot = corpus.snapshot()
    result = irflow.load_recipe("lexical").run(corpus, "pkg03 python", k=3)
    corpus.delete(corpus.record_ids[:15].tolist())
    corpus.add(recs[20:30])
    assert snapshot.n_rows == 20 and len(snapshot) == 20 and corpus.snapshot() is not snapshot
    assert [h.record_id for h in result.hits] and all(h.artifact_id for h in result.hits)
    assert result.corpus is snapshot  # the rows of its output name the records they named


def test_threads_read_one_state_each_while_writers_commit(recs):
    import threading

    corpus = _corpus(30)
    corpus.merge_policy = MergePolicy(merge_factor=4)
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        try:
            while not stop.is_set():
                snapshot = corpus.snapshot()
                live = {r.id for r in snapshot.store}
                hits = irflow.search(snapshot, "python parser", mode="hybrid", k=5)
                assert len(hits) == 5 and all(h.record_id in live for h in hits)
                result = irflow.load_recipe("lexical").run(corpus, "sql schema", k=3)  # pins a state
                assert all(h.record_id in {r.id for r in result.corpus.store} for h in result.hits)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    def write(lo: int, hi: int) -> None:
        try:
            for at in range(lo, hi):
                corpus.add(recs[at:at + 1])
                if at % 4 == 0:
                    corpus.delete([recs_id(recs[at - 30])], missing="ok")
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    readers = [threading.Thread(target=read) for _ in range(2)]
    writers = [threading.Thread(target=write, args=(lo, lo + 15)) for lo in (30, 45)]
    for thread in readers + writers:
        thread.start()
    for thread in writers:
        thread.join(120)
    stop.set()
    for thread in readers:
        thread.join(60)
    assert not errors, errors
    assert {irflow.Record(**r).id for r in recs[30:60]} <= {r.id for r in corpus}  # no add was lost
    assert_same_answers(corpus, quick=True)


def recs_id(record: dict) -> str:
    return str(irflow.Record(**record).id)


@pytest.mark.parametrize("name", ["numpy", "numba"])
def test_segments_rank_as_one_index_with_either_kernel(recs, name, monkeypatch):
    from irflow.kernels.bm25 import kernel, use_kernel

    if name == "numba":
        pytest.importorskip("numba")
        monkeypatch.setattr(kernel, "COMPILED_BLOCK", 8)  # many blocks per segment: pruning across them too
    corpus = _corpus(25)
    for lo in range(25, len(recs), 20):
        corpus.add(recs[lo:lo + 20])
    corpus.delete(corpus.record_ids[[1, 4, 30, 31, 60]].tolist())
    corpus.upsert([dict(recs[7], text="pkg02 python parser fast fast json")])
    assert len(corpus.segments) >= 5
    with use_kernel(name):
        assert_same_answers(corpus, quick=True)


def test_a_term_a_merge_left_without_postings_counts_in_no_document(recs):
    # a merge keeps a deleted record's terms in its vocabulary with no postings: such a term's postings start
    # where the next term's do, and the document frequencies over a candidate set, cached by that start, were
    # mixed up between the two (the next term then scored with the empty one's df, or the other way round)
    from irflow.kernels.bm25 import STATS, VARIANTS, BM25Params

    corpus = _corpus(30)
    meta = {"owner": "ann", "lang": "py"}
    corpus.add([dict(artifact_id="solo", surface_kind="name", text="zyzzyva", metadata=meta),  # new terms, in
                dict(artifact_id="duo", surface_kind="name", text="quokka python", metadata=meta)])  # this order
    corpus.delete(list(corpus.store.ledger["solo"]))
    corpus.compact()  # "zyzzyva" stays in the vocabulary, no postings, just before "quokka"
    corpus.add([dict(artifact_id="tri", surface_kind="name", text="python sql", metadata=meta)])  # two segments
    fresh = rebuild(corpus)
    words = sorted({w for r in recs[:30] for w in r["text"].split()})
    queries = ["zyzzyva quokka", "quokka zyzzyva"] + [f"zyzzyva {w}" for w in words] + [f"{w} quokka" for w in words]
    a, b = corpus.tokenize_queries(queries), fresh.tokenize_queries(queries)
    for filter in ({"owner": "ann"}, {"lang": "py"}):
        masks = corpus.candidate_mask(filter), fresh.candidate_mask(filter)
        for variant in VARIANTS:
            for stats in STATS:
                params = BM25Params(variant=variant, stats=stats)
                got, want = corpus.bm25_topk(a, masks[0], 5, params), fresh.bm25_topk(b, masks[1], 5, params)
                assert [(q, r, s.hex()) for q, r, s in zip(got.query_index.tolist(),
                                                          corpus.record_ids_of(got.row).tolist(), got.score.tolist())] \
                    == [(q, r, s.hex()) for q, r, s in zip(want.query_index.tolist(),
                                                           fresh.record_ids_of(want.row).tolist(),
                                                           want.score.tolist())], (filter, variant, stats)
