"""The pieces of corpora updated in place, each against an independent expectation.

Postings merged without re-tokenizing equal the postings of the kept token
lists built anew; digests do not depend on the batch or the path that
computed them; the ledger of several parts reads as one; the merge policy
plans what its docstring says; surface indices continue an artifact's own;
the writer lock waits, then says so.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from irflow.errors import CorpusError
from irflow.kernels.digests import KeyIndex, digests_of, encode, string_digests
from irflow.kernels.postings import Postings
from irflow.kernels.postings_merge import merge_postings
from irflow.kernels.rowmap import RowMap
from irflow.store import generations as gens
from irflow.store.columnar import LedgerTable
from irflow.store.ledger_view import LedgerPart, LedgerView
from irflow.store.mergepolicy import MergePolicy, SegmentInfo
from irflow.store.prepare import prepare_records
from irflow.store.records import Record

tokens = st.lists(st.lists(st.sampled_from(["a", "b", "c", "d", "e", "ff", "g"]), max_size=6), min_size=1,
                  max_size=12)


def _as_terms(postings: Postings) -> dict[str, list[tuple[int, int]]]:
    """term -> [(row, tf)], independent of term ids."""
    out = {}
    for term, term_id in postings.vocab.items():
        rows, tfs = postings.postings(term_id)
        if rows.size:
            out[term] = list(zip(rows.tolist(), tfs.tolist()))
    return out


@settings(max_examples=80, deadline=None)
@given(st.lists(tokens, min_size=1, max_size=4), st.data())
def test_merged_postings_are_the_postings_of_the_kept_rows(parts, data):
    kept = [np.array(data.draw(st.lists(st.booleans(), min_size=len(p), max_size=len(p))), dtype=bool)
            for p in parts]
    vocab, arrays = merge_postings([Postings.build(p) for p in parts], kept)
    merged = Postings(vocab=vocab, **arrays)
    expected = Postings.build([row for part, keep in zip(parts, kept) for row, k in zip(part, keep) if k])
    assert _as_terms(merged) == _as_terms(expected)
    assert merged.doc_lengths.tolist() == expected.doc_lengths.tolist()
    for row in range(merged.n_rows):  # the row-major lists: the same terms per row
        assert sorted(merged.vocab_terms[t] for t in merged.row_term_ids(row)) == \
            sorted(expected.vocab_terms[t] for t in expected.row_term_ids(row))
    Postings.from_arrays(merged.vocab_terms, merged.arrays(), n_rows=merged.n_rows)  # passes the loader's checks


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=12), min_size=1, max_size=30))
def test_digests_do_not_depend_on_the_batch_or_the_path(keys):
    together = digests_of(keys)
    assert [int(digests_of([k])[0]) for k in keys] == together.tolist()  # alone or in a batch
    same = {}
    for key, digest in zip(keys, together.tolist()):
        assert same.setdefault(key, digest) == digest
    index = KeyIndex(*encode(keys))
    assert index.find(keys).tolist() == [keys.index(k) for k in keys]  # the first position holding each
    index.SCANS_BEFORE_SORTING = 0  # the sorted way gives the same
    assert index.find(keys + ["\x00absent"]).tolist() == [keys.index(k) for k in keys] + [-1]


def test_fixed_width_ids_digest_as_any_string():
    ids = [f"{i:020x}" for i in range(50)]
    blob, offsets = encode(ids)
    assert string_digests(blob, offsets).tolist() == [int(digests_of([i])[0]) for i in ids]
    mixed = ids[:3] + ["short"]
    assert digests_of(mixed)[:3].tolist() == string_digests(blob, offsets)[:3].tolist()


def test_a_key_held_twice_is_reported():
    index = KeyIndex(*encode(["x", "y", "x"]))
    twice: list[str] = []
    assert index.find(["x", "y"], twice=twice).tolist() == [0, 1] and twice == ["x"]
    assert index.duplicate() == "x"


def test_ledger_over_parts_reads_as_one():
    ids = np.array(["a0", "b0", "a1", "a2", "c0"], dtype=object)
    surface = np.array([0, 0, 1, 2, 0])
    first = LedgerTable(["a", "b"], np.array([0, 2, 3]), np.array([0, 2, 1]), [], lambda r: ids[r])
    second = LedgerTable(["c", "a"], np.array([0, 1, 2]), np.array([1, 0]), [], lambda r: ids[np.asarray(r) + 3])
    view = LedgerView([LedgerPart(first, 0, np.array([True, False, False])), LedgerPart(second, 3, None)],
                      lambda rows: ids[rows], lambda rows: surface[rows])
    assert dict(view) == {"b": ("b0",), "a": ("a1", "a2"), "c": ("c0",)}
    assert list(view) == ["b", "a", "c"]  # by first listed row: a0 is unlisted, so b0 (row 1) comes first
    assert view.entry("a")[0].tolist() == [2, 3] and view.entry("nope") is None
    rows, _ = LedgerView([LedgerPart(second, 3, None), LedgerPart(first, 0, None)],
                         lambda r: ids[r], lambda r: surface[r]).entry("a")
    assert rows.tolist() == [0, 2, 3]  # several parts: by surface_index


def test_row_maps_of_sizes_skip_empty_parts():
    rows = RowMap.of_sizes([2, 0, 3])
    part, local = rows.to_local(np.array([0, 1, 2, 4]))
    assert part.tolist() == [0, 0, 2, 2] and local.tolist() == [0, 1, 0, 2]
    assert [r.tolist() for r in rows.rows] == [[0, 1], [], [2, 3, 4]]
    with pytest.raises(IndexError):
        rows.to_local(np.array([5]))


@pytest.mark.parametrize("segments, runs", [
    ([SegmentInfo(100, 100)], []),
    ([SegmentInfo(100, 0)], []),  # the last segment stays, if empty
    ([SegmentInfo(100, 100), SegmentInfo(10, 0)], [(1, 2)]),  # dropped
    ([SegmentInfo(100, 100), SegmentInfo(10, 0, stale=1)], []),  # its stale row stays listed
    ([SegmentInfo(100, 69)], [(0, 1)]),
    ([SegmentInfo(100, 71)], []),
    ([SegmentInfo(100, 60, stale=20)], []),  # 20 removable: under 30 %
    ([SegmentInfo(5000, 5000)] + [SegmentInfo(50, 50)] * 9, []),
    ([SegmentInfo(5000, 5000)] + [SegmentInfo(50, 50)] * 10, [(1, 11)]),
    ([SegmentInfo(50, 50)] * 3 + [SegmentInfo(5000, 5000)] + [SegmentInfo(50, 50)] * 7, []),
])
def test_the_merge_policy_plans_as_documented(segments, runs):
    assert MergePolicy().plan(segments) == runs


def test_the_segment_cap_merges_the_smallest_adjacent_pair():
    policy = MergePolicy(merge_factor=100, max_segments=3)
    sizes = [1000, 10, 900, 20, 30]
    assert policy.plan([SegmentInfo(n, n) for n in sizes]) == [(3, 5), (1, 3)] or \
        policy.plan([SegmentInfo(n, n) for n in sizes]) == [(1, 3), (3, 5)]
    assert MergePolicy.never().plan([SegmentInfo(1, 0)] * 20) == []
    with pytest.raises(ValueError, match="max_deleted must be a fraction"):
        MergePolicy(max_deleted=0)
    with pytest.raises(ValueError, match="merge_factor must be an integer >= 2"):
        MergePolicy(merge_factor=1)


def test_omitted_surface_indices_start_after_the_given_one():
    records = [Record("a", "name", "x"), Record("b", "name", "y"), Record("a", "readme", "z", surface_index=9)]
    prepared = prepare_records(records, first_index={"a": 4}.get)
    assert [r.surface_index for r in prepared] == [4, 0, 9]


def test_the_writer_lock_waits_then_says_so(tmp_path):
    root = tmp_path / "c"
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with gens.locked(root):
            holding.set()
            release.wait(10)
    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(10)
        started = time.monotonic()
        with pytest.raises(CorpusError, match=r"another process is writing to the corpus at .* waited 0.2 s"):
            with gens.locked(root, timeout=0.2):
                pass
        assert time.monotonic() - started >= 0.2
    finally:
        release.set()
        thread.join()
    with gens.locked(root, timeout=0.2):  # free again
        pass


@settings(max_examples=60, deadline=None)
@given(tokens, st.lists(st.sampled_from(["a", "b", "c", "ff"]), min_size=1, max_size=4),
       st.integers(1, 6), st.floats(-1, 3), st.sampled_from(["okapi", "bm25l", "bm25plus"]))
def test_a_floor_leaves_out_exactly_the_rows_at_or_below_it(docs, query, k, floor, variant):
    from irflow.kernels.bm25 import BM25Params, bm25_topk, use_kernel
    postings = Postings.build(docs)
    params = BM25Params(variant=variant)
    for name in ("numpy", "numba"):
        with use_kernel(name):
            every = bm25_topk(postings, [query], None, 10_000, params)
            rows, scores = every.per_query(0)
            above = scores > floor
            expected = (rows[above][:k].tolist(), scores[above][:k].tolist())
            top = bm25_topk(postings, [query], None, k, params, floor=np.array([floor]))
            assert (top.row.tolist(), top.score.tolist()) == expected, name


def test_sibling_lookups_over_stored_segments_digest_the_names_once(tmp_path, monkeypatch):
    """A stored segment finds an artifact by the digest of its name: several segments share one digest per name
    (each segment digesting the names again cost most of a lookup), and the siblings are a rebuild's."""
    import irflow
    import irflow.kernels.digests as digests
    import irflow.store.ledger_view as ledger_view
    from irflow.store.corpus import open_corpus

    def records(artifacts, start=0):
        return [{"id": f"{a}-{s}", "artifact_id": a, "surface_kind": kind, "text": f"{a} text {s}",
                 "surface_index": start + s} for a in artifacts for s, kind in enumerate(["name", "readme"])]

    path = tmp_path / "c"
    irflow.build(records(["a", "b", "c"]), embedder="hash:16", path=path)
    corpus = open_corpus(path)
    corpus.merge_policy = MergePolicy.never()
    corpus.add(records(["d"]))
    corpus.add([{"id": "a-9", "artifact_id": "a", "surface_kind": "deps", "text": "a deps", "surface_index": 9}])
    corpus.delete(["b-0"])
    corpus = open_corpus(path)  # stored tables: names found by digest
    view = corpus.snapshot()
    assert len(view.parts) == 3
    calls = []
    real = digests.digests_of

    def counting(keys):
        calls.append(list(keys))
        return real(keys)

    monkeypatch.setattr(digests, "digests_of", counting)
    monkeypatch.setattr(ledger_view, "digests_of", counting, raising=False)
    wanted = ["a", "b", "d", "zz"]
    siblings = view.sibling_rows(wanted)
    assert calls == [wanted]
    fresh = irflow.build([r.to_dict() for r in corpus], embedder="hash:16")
    expected = fresh.snapshot().sibling_rows(wanted)
    assert list(siblings.listed) == list(expected.listed) == [True, True, True, False]
    for i in range(len(wanted)):
        got = view.record_ids_of(siblings.rows[siblings.offsets[i]:siblings.offsets[i + 1]]).tolist()
        want = fresh.record_ids_of(expected.rows[expected.offsets[i]:expected.offsets[i + 1]]).tolist()
        assert got == want
    assert view.record_ids_of(siblings.rows[siblings.offsets[0]:siblings.offsets[1]]).tolist() == ["a-0", "a-1", "a-9"]


def _stored(part):
    """An in-memory store's records as a stored corpus holds them: string and JSON columns, decoded on demand."""
    from irflow.store.columnar import JsonColumn, StringColumn
    from irflow.store.record_store import CorpusStore

    return CorpusStore.from_columns(
        record_ids=StringColumn.of(part.record_ids.tolist()), artifact_ids=StringColumn.of(part.artifact_ids.tolist()),
        kinds=part.kinds, kind_codes=part.kind_codes, surface_indices=part.surface_indices,
        texts=StringColumn.of(list(part.texts)), metadata=JsonColumn.of(list(part.metadata)),
        ledger=lambda record_ids_of: part.ledger_table, deleted_rows=np.empty(0, np.int64))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=2, max_size=5), st.booleans(), st.data())
def test_hits_across_segments_are_each_rows_own(sizes, stored, data):
    """The columns a search's hits read, over segments (empty ones too; in memory or stored columns), are each
    row's own, in the rows' order, for a few rows (read row by row, or one segment's at once) and for many (split
    by one sort); a row outside the corpus is refused."""
    from irflow.store.chained_store import _FEW_ROWS, SegmentedStore
    from irflow.store.record_store import CorpusStore

    parts, n = [], 0
    for size in sizes:
        records = [Record(f"art{n + i}", "name", f"text {n + i}", {"n": n + i}, id=f"r{n + i}") for i in range(size)]
        part = CorpusStore.from_records(prepare_records(records)) if size else CorpusStore.from_records([])
        parts.append(_stored(part) if stored else part)
        n += size
    if n == 0:
        return
    store = SegmentedStore(parts)
    many = data.draw(st.booleans())
    count = data.draw(st.integers(_FEW_ROWS + 1, _FEW_ROWS + 20) if many else st.integers(1, 12))
    rows = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=count, max_size=count)), dtype=np.int64)
    artifacts, ids, _codes, _surfaces, texts, metadata = store.hit_columns(rows)
    assert ids == [f"r{r}" for r in rows.tolist()]
    assert artifacts == [f"art{r}" for r in rows.tolist()]
    assert texts == [f"text {r}" for r in rows.tolist()]
    assert [m["n"] for m in metadata] == rows.tolist()
    with pytest.raises(IndexError, match=f"row {n} is outside"):
        store.hit_columns(np.append(rows, n))
