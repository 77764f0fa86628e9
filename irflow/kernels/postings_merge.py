"""Merging postings: the index of several indexes' kept rows, one after the other, without re-tokenizing.

A corpus merges adjacent segments into one (see :mod:`irflow.store.merging`):
the merged segment's rows are the parts' kept (live) rows in order, and its
postings must be what indexing those rows' token lists would give — the
same postings per term (rows ascending, term frequencies), the same row
lengths and document frequencies.  Term *ids* may differ (they are local
to an index: BM25 orders a row's terms by document frequency and token,
never by id), so the vocabulary is the parts' vocabularies in order of
first appearance, each part's term ids mapped onto it.

The term-major arrays are placed by a counting sort, as the builder places
them (:mod:`irflow.kernels.postings_build`): each merged term's postings
start at the sum of the document frequencies of the terms before it, and
the parts are placed one after the other, so a term's rows stay ascending.
Each part is placed in chunks of whole terms, so no temporary spans all the
postings.  The row-major arrays are the kept rows' term lists mapped, each
row's terms sorted by their merged ids (as the builder writes them).

>>> from irflow.kernels.postings import Postings
>>> a = Postings.build([["x", "y"], ["y"]])
>>> b = Postings.build([["z", "y", "y"]])
>>> vocab, arrays = merge_postings([a, b], [np.array([False, True]), None])
>>> merged = Postings(vocab=vocab, **arrays)
>>> sorted(vocab), merged.postings(vocab["y"])[0].tolist(), merged.postings(vocab["y"])[1].tolist()
(['x', 'y', 'z'], [0, 1], [1, 2])
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from irflow.kernels.postings import Postings

__all__ = ["merge_postings", "CHUNK_POSTINGS"]

#: Postings of one part placed at a time (whole terms; a longer term is placed alone).
CHUNK_POSTINGS = 1 << 23


def _smallest_unsigned(largest: int) -> type:
    return np.uint8 if largest <= 0xFF else np.uint16 if largest <= 0xFFFF else np.int32


def _term_maps(parts: Sequence[Postings]) -> tuple[dict[str, int], list[np.ndarray]]:
    """The merged vocabulary (first appearance over the parts) and each part's term id -> merged id."""
    vocab: dict[str, int] = {}
    maps = []
    for part in parts:
        terms = part.vocab_terms
        maps.append(np.fromiter((vocab.setdefault(t, len(vocab)) for t in terms), dtype=np.int64, count=len(terms)))
    return vocab, maps


def _kept_df(part: Postings, kept: np.ndarray | None) -> np.ndarray:
    """Each term's document frequency among the kept rows."""
    if kept is None:
        return part.document_frequencies()
    rows = np.flatnonzero(kept)
    return np.bincount(part.gather_row_terms(rows), minlength=part.vocab_size).astype(np.int64)


def _chunks(term_offsets: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """Ranges of whole terms holding about *limit* postings each."""
    bounds = [0]
    n_terms = term_offsets.size - 1
    while bounds[-1] < n_terms:
        start = bounds[-1]
        end = int(np.searchsorted(term_offsets, term_offsets[start] + limit, side="right")) - 1
        bounds.append(min(max(end, start + 1), n_terms))
    return list(zip(bounds[:-1], bounds[1:]))


def merge_postings(parts: Sequence[Postings], kept: Sequence[np.ndarray | None]) -> tuple[dict[str, int],
                                                                                         dict[str, np.ndarray]]:
    """``(vocabulary, arrays)`` of the parts' kept rows (a bool mask per part; None: every row), in order."""
    vocab, maps = _term_maps(parts)
    n_terms = len(vocab)
    remaps: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    df = np.zeros(n_terms, dtype=np.int64)
    largest_tf = 0
    for part, keep, term_map in zip(parts, kept, maps):
        rows = np.arange(part.n_rows) if keep is None else np.flatnonzero(keep)
        remap = np.full(part.n_rows, -1, dtype=np.int64)
        remap[rows] = np.arange(rows.size) + sum(r.size for r in lengths)
        remaps.append(remap)
        lengths.append(np.asarray(part.doc_lengths)[rows])
        counts.append(np.diff(part.row_offsets)[rows])
        df[term_map] += _kept_df(part, keep)  # a part's terms map to distinct merged terms
        if part.post_tfs.size:
            largest_tf = max(largest_tf, int(part.post_tfs.max()))
    doc_lengths = np.concatenate(lengths).astype(np.int32) if lengths else np.empty(0, np.int32)
    row_offsets = np.zeros(doc_lengths.size + 1, dtype=np.int64)
    np.cumsum(np.concatenate(counts) if counts else np.empty(0, np.int64), out=row_offsets[1:])
    term_offsets = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(df, out=term_offsets[1:])
    n_postings = int(term_offsets[-1])
    post_rows = np.empty(n_postings, dtype=np.int32)
    post_tfs: np.ndarray = np.empty(n_postings, dtype=_smallest_unsigned(largest_tf))
    row_terms = np.empty(n_postings, dtype=np.int32)
    cursor = term_offsets[:-1].copy()
    at = 0
    for part, keep, term_map, remap in zip(parts, kept, maps, remaps):
        _place(part, term_map, remap, cursor, post_rows, post_tfs)
        rows = np.arange(part.n_rows) if keep is None else np.flatnonzero(keep)
        row_counts = np.diff(part.row_offsets)
        for lo in range(0, rows.size, 1 << 16):  # row-major: the kept rows' term lists, mapped
            chunk = rows[lo:lo + (1 << 16)]
            terms = term_map[part.gather_row_terms(chunk)]
            # each row's terms ascending by merged id, as the builder writes them (readers check it)
            owner = np.repeat(np.arange(chunk.size), row_counts[chunk])
            row_terms[at:at + terms.size] = terms[np.lexsort((terms, owner))]
            at += terms.size
    arrays: dict[str, np.ndarray] = {"term_offsets": term_offsets, "post_rows": post_rows, "post_tfs": post_tfs,
              "doc_lengths": doc_lengths, "row_offsets": row_offsets, "row_terms": row_terms}
    return vocab, arrays


def _place(part: Postings, term_map: np.ndarray, remap: np.ndarray, cursor: np.ndarray, post_rows: np.ndarray,
           post_tfs: np.ndarray) -> None:
    """Scatter one part's kept postings to their merged term-major places, a chunk of whole terms at a time."""
    offsets = np.asarray(part.term_offsets, dtype=np.int64)
    for first, last in _chunks(offsets, CHUNK_POSTINGS):
        lo, hi = int(offsets[first]), int(offsets[last])
        rows = remap[np.asarray(part.post_rows[lo:hi], dtype=np.int64)]
        keep = rows >= 0
        terms = np.repeat(np.arange(first, last, dtype=np.int64), np.diff(offsets[first:last + 1]))[keep]
        merged = term_map[terms]
        # within the chunk a term's kept postings are consecutive, rows ascending: rank = position - its first
        rank = np.arange(terms.size, dtype=np.int64) - np.searchsorted(terms, terms)
        destination = cursor[merged] + rank
        post_rows[destination] = rows[keep]
        post_tfs[destination] = np.asarray(part.post_tfs[lo:hi])[keep]
        cursor += np.bincount(merged, minlength=cursor.size)
