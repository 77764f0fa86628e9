"""Postings.build: the same arrays as a plain-Python reference, whatever the chunking, in bounded memory."""

from __future__ import annotations

import sys
import tracemalloc
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from irflow.kernels import postings_build
from irflow.kernels.postings import Postings

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent / "benchmarks"))
from zipf_corpus import zipf_docs  # noqa: E402


def reference(docs: list[list[str]]) -> dict:
    """The index by dicts and loops: ids in first-seen order, postings by term then row."""
    vocab: dict[str, int] = {}
    for doc in docs:
        for token in doc:
            vocab.setdefault(token, len(vocab))
    per_term: dict[int, list[tuple[int, int]]] = {t: [] for t in vocab.values()}
    row_terms: list[int] = []
    row_offsets = [0]
    for row, doc in enumerate(docs):
        counts = Counter(vocab[t] for t in doc)
        for term in sorted(counts):
            per_term[term].append((row, counts[term]))
        row_terms.extend(sorted(counts))
        row_offsets.append(len(row_terms))
    offsets = [0]
    rows, tfs = [], []
    for term in range(len(vocab)):
        rows += [r for r, _ in per_term[term]]
        tfs += [c for _, c in per_term[term]]
        offsets.append(len(rows))
    return {"vocab": vocab, "term_offsets": offsets, "post_rows": rows, "post_tfs": tfs,
            "doc_lengths": [len(d) for d in docs], "row_offsets": row_offsets, "row_terms": row_terms}


def assert_matches(postings: Postings, want: dict) -> None:
    assert postings.vocab == want["vocab"]
    for name in ("term_offsets", "post_rows", "post_tfs", "doc_lengths", "row_offsets", "row_terms"):
        assert getattr(postings, name).tolist() == want[name], name
    assert postings.post_rows.dtype == np.int32 and postings.row_terms.dtype == np.int32
    assert postings.post_tfs.dtype.kind in "ui" and postings.post_tfs.dtype.itemsize <= 4


documents = st.lists(st.lists(st.sampled_from(["a", "b", "c", "d", "e", "ä", ""]), max_size=9), max_size=30)


@settings(max_examples=200, deadline=None)
@given(documents, st.sampled_from([1, 2, 3, 7, 16384]), st.sampled_from([1, 2, 5, 2048]))
def test_build_matches_the_reference_whatever_the_chunks(docs: list[list[str]], chunk_rows: int,
                                                         read_rows: int) -> None:
    saved = postings_build.CHUNK_ROWS, postings_build.READ_ROWS
    postings_build.CHUNK_ROWS, postings_build.READ_ROWS = chunk_rows, read_rows
    try:
        built = Postings.build(iter(docs))  # any iterable: a generator is read once
    finally:
        postings_build.CHUNK_ROWS, postings_build.READ_ROWS = saved
    assert_matches(built, reference(docs))


def test_term_frequencies_take_the_smallest_type_that_holds_them() -> None:
    assert Postings.build([["a"] * 255, ["b"]]).post_tfs.dtype == np.uint8
    wide = Postings.build([["a"] * 256, ["b"]])
    assert wide.post_tfs.dtype == np.uint16 and wide.postings(0)[1].tolist() == [256]
    assert Postings.build([["a"] * 70_000]).post_tfs.dtype == np.int32


def test_second_phase_runs_after_the_tokens_are_read() -> None:
    events: list[str] = []

    def tokens():
        yield ["a", "b"]
        events.append("read")

    class Phase:
        def __enter__(self):
            events.append("enter")

        def __exit__(self, *exc):
            events.append("exit")

    Postings.build(tokens(), second_phase=Phase)
    assert events == ["read", "enter", "exit"]


def test_build_allocates_well_under_three_times_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """numpy's allocations during a build of 3M tokens stay under 2.5x the finished arrays.

    The first builder sorted int64 keys of every token with several int64
    temporaries of that size (7.4x here); the chunked one holds int32 terms
    and small frequencies between its phases: 1.9x as tracemalloc counts it,
    which counts the output arrays whole from the start (resident memory
    fills them as the parts are freed).
    """
    monkeypatch.setattr(postings_build, "CHUNK_ROWS", 2048)
    docs = zipf_docs(50_000, seed=5)
    tracemalloc.start()
    try:
        built = Postings.build(docs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = sum(array.nbytes for array in built.arrays().values())
    assert peak < 2.5 * size, (peak / size, size)
