"""Building the postings arrays in bounded memory: chunks of rows, int32 ids, one pass each way.

The first builder sorted one int64 key per token of the whole collection,
with several more int64 temporaries of that size: about six times the final
index at its peak (4.3 GB over 60M tokens for a 0.6 GB index).  This one
reads the token lists once, a chunk of ``CHUNK_ROWS`` rows at a time (an
iterable is enough: a corpus streams them from its analyzer; a chunk's token
lists are read ``READ_ROWS`` at a time and turned into term ids, so the
Python strings of only that many rows are alive at once), and keeps only
int32 term ids and small term frequencies between the two phases:

1. per chunk: tokens -> term ids (a dict, grown on first sight, in one
   C-level pass), one int64 key per token of the *chunk* (row * vocabulary
   + term), sorted: the chunk's distinct (row, term) pairs in row-major
   order, and their repeat counts, the term frequencies;
2. the row-major pairs, chunk after chunk in row order, are scattered to
   their term-major positions (a counting sort: each term's postings start
   at the cumulative document frequency of the terms before it, and a
   stable sort within the chunk keeps its rows ascending).

Resident memory peaks at about the final arrays plus the chunks' terms and
frequencies not yet placed (about 10 bytes per posting for a 9-byte index),
never a temporary of the whole collection's tokens.  The result is the same arrays
the first builder made (``tests/test_postings_build.py`` compares them),
except that term frequencies take the smallest unsigned type that holds
the largest (uint8 in practice), which scoring converts to float64 exactly.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any, Callable, ContextManager, Iterable, Iterator, Sequence

import numpy as np

from irflow.errors import IrflowError

__all__ = ["build_arrays", "CHUNK_ROWS"]

#: Rows per chunk: at 60 tokens a row, 8k rows are ~0.5M tokens, a 4 MB key array (16k rows peaked
#: ~20 MB higher at 100k records for the chunk's int64 temporaries, and were no faster).
CHUNK_ROWS = 8192
#: Rows whose token lists are held at once: a token is a Python string (~60 bytes with its pointer),
#: so 16k rows of them were ~60 MB of small objects at 60 tokens a row (the peak of a 100k-record
#: build), and their freed arenas stayed resident; 2k rows hold ~7 MB, then become int64 term ids.
READ_ROWS = 2048


class _Vocab(dict[str, int]):
    """term -> id, assigning the next id to an unseen term on lookup."""

    def __missing__(self, term: str) -> int:
        self[term] = term_id = len(self)
        return term_id


def _smallest_unsigned(largest: int) -> type:
    return np.uint8 if largest <= 0xFF else np.uint16 if largest <= 0xFFFF else np.int32


def _read_chunk(rows_in: Iterator[Sequence[str]], lookup: Callable[[str], int],
                ) -> tuple[np.ndarray, np.ndarray] | None:
    """The next ``CHUNK_ROWS`` rows as (tokens per row, term ids), read ``READ_ROWS`` token lists at a time."""
    lengths_parts, ids_parts, taken = [], [], 0
    while taken < CHUNK_ROWS:
        rows = list(itertools.islice(rows_in, min(READ_ROWS, CHUNK_ROWS - taken)))
        if not rows:
            break
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        ids_parts.append(np.fromiter(map(lookup, itertools.chain.from_iterable(rows)), dtype=np.int64,
                                     count=int(lengths.sum())))
        lengths_parts.append(lengths)
        taken += len(rows)
        del rows
    if not taken:
        return None
    return np.concatenate(lengths_parts), np.concatenate(ids_parts)


def build_arrays(token_lists: Iterable[Sequence[str]], *,
                 second_phase: Callable[[], ContextManager[Any]] | None = None,
                 ) -> tuple[dict[str, int], dict[str, np.ndarray]]:
    """``(vocabulary, arrays)`` of ``token_lists`` (one token list per row, in row order), as ``Postings`` holds them.

    ``second_phase`` (optional) makes a context manager entered around phase 2
    (a progress bar: phase 1 is as long as reading the token lists).

    >>> vocab, arrays = build_arrays([["x", "y", "x"], ["y"]])
    >>> vocab, arrays["post_rows"].tolist(), arrays["post_tfs"].tolist()
    ({'x': 0, 'y': 1}, [0, 0, 1], [2, 1, 1])
    """
    vocab = _Vocab()
    lookup = vocab.__getitem__
    lengths_parts: list[np.ndarray] = []  # per chunk: tokens per row
    counts_parts: list[np.ndarray] = []  # distinct terms per row
    terms_parts: list[np.ndarray | None] = []  # the distinct terms of each row, rows in order (int32)
    tfs_parts: list[np.ndarray | None] = []  # their frequencies
    largest_tf = 0
    rows_in = iter(token_lists)
    while True:
        read = _read_chunk(rows_in, lookup)
        if read is None:
            break
        lengths, ids = read
        width = max(len(vocab), 1)
        # one key per token of this chunk, row-major: sorting groups a row's terms (ascending),
        # and a run of equal keys is one term repeated in one row, its length the tf
        keys = np.repeat(np.arange(lengths.size, dtype=np.int64) * width, lengths)
        keys += ids
        del ids
        keys.sort()
        first = np.ones(keys.size, dtype=bool)
        np.not_equal(keys[1:], keys[:-1], out=first[1:])
        starts = np.flatnonzero(first)
        del first
        tfs = np.diff(starts, append=keys.size)
        pairs = keys[starts]
        del keys, starts
        rows = pairs // width
        largest_tf = max(largest_tf, int(tfs.max(initial=0)))
        counts_parts.append(np.bincount(rows, minlength=lengths.size).astype(np.int32))
        terms_parts.append((pairs - rows * width).astype(np.int32))
        tfs_parts.append(tfs.astype(_smallest_unsigned(int(tfs.max(initial=0)))))
        lengths_parts.append(lengths.astype(np.int32))
        del pairs, rows, tfs
    with second_phase() if second_phase is not None else contextlib.nullcontext():
        arrays = _term_major(len(vocab), lengths_parts, counts_parts, terms_parts, tfs_parts, largest_tf)
    return dict(vocab), arrays


def _term_major(n_terms: int, lengths_parts: list[np.ndarray], counts_parts: list[np.ndarray],
                terms_parts: list[np.ndarray | None], tfs_parts: list[np.ndarray | None],
                largest_tf: int) -> dict[str, np.ndarray]:
    """Phase 2: scatter the row-major chunks to term-major order, freeing each chunk once placed.

    The row-major terms are copied into the index's ``row_terms`` chunk by
    chunk as the parts are freed, so resident memory never holds both whole.
    """
    doc_lengths = np.concatenate(lengths_parts) if lengths_parts else np.empty(0, np.int32)
    n_rows = doc_lengths.size
    counts = np.concatenate(counts_parts) if counts_parts else np.empty(0, np.int32)
    row_offsets = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(counts, out=row_offsets[1:])
    n_postings = int(row_offsets[-1])
    df = np.zeros(n_terms, dtype=np.int64)
    for terms in terms_parts:
        df += np.bincount(terms, minlength=n_terms)  # type: ignore[arg-type]
    term_offsets = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(df, out=term_offsets[1:])
    cursor = term_offsets[:-1].copy()  # next free position of each term's postings
    post_rows = np.empty(n_postings, dtype=np.int32)
    post_tfs: np.ndarray = np.empty(n_postings, dtype=_smallest_unsigned(largest_tf))
    row_terms = np.empty(n_postings, dtype=np.int32)
    first_row, at = 0, 0
    for i, part_counts in enumerate(counts_parts):
        terms, tfs = terms_parts[i], tfs_parts[i]
        if terms is None or tfs is None:
            raise IrflowError(f"postings build: chunk {i} was already placed and freed")
        terms_parts[i] = tfs_parts[i] = None  # freed as soon as placed
        size = terms.size
        rows = np.repeat(np.arange(first_row, first_row + part_counts.size, dtype=np.int32), part_counts)
        order = np.argsort(terms, kind="stable")  # a term's pairs stay in row order
        ordered = terms[order]
        # position = where the term's postings continue + rank among its pairs in this chunk
        rank = np.arange(size, dtype=np.int64) - np.searchsorted(ordered, ordered)
        destination = cursor[ordered] + rank
        post_rows[destination] = rows[order]
        post_tfs[destination] = tfs[order]
        cursor += np.bincount(ordered, minlength=n_terms)
        row_terms[at:at + size] = terms
        at += size
        first_row += part_counts.size
    return {"term_offsets": term_offsets, "post_rows": post_rows, "post_tfs": post_tfs,
            "doc_lengths": doc_lengths, "row_offsets": row_offsets, "row_terms": row_terms}
