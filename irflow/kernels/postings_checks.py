"""What a postings index read from files must hold before it scores: each check one vectorized pass per array.

A corpus's files may have been edited with their checksums recomputed (a
document length set to 0, a row listed twice in a term).  Such an index
would not fail: it would rank differently, silently.  These checks find it.

- :func:`value_problems`: offsets ordered, rows and term ids in range,
  frequencies >= 1, lengths >= 0 (what indexing relies on);
- :func:`order_problems`: each term's rows strictly ascending, each row's
  terms strictly ascending (BM25 searches them, and counts each once);
- :func:`length_problems`: the lengths sum to the frequencies' total, and a
  row is at least as long as its distinct terms;
- :func:`cross_problems`: the exact row-by-row agreement of lengths and
  frequencies, and of the term-major and row-major halves; a few random
  access passes (bincount), so a corpus runs them on its first lexical use,
  not on open.

Every function returns the problems found (messages naming the array as
``label(name)``), empty when there are none; big arrays are read in chunks,
never copied whole.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

__all__ = ["value_problems", "order_problems", "length_problems", "cross_problems"]

Label = Callable[[str], str]

# elements per chunk of a pass over a big array: bounded temporaries (a few MB)
_CHUNK = 1 << 20
# an odd multiplier (the 64-bit golden ratio): row -> an odd 64-bit weight, see _row_weights
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _outside(values: np.ndarray, bound: int) -> bool:
    """True when some value is not in ``0 .. bound - 1``: one pass (a signed array is read as unsigned, so
    negatives become huge and one ``max`` checks both ends)."""
    if values.size == 0:
        return False
    if values.dtype.kind == "i":
        values = values.view(values.dtype.str.replace("i", "u"))
    return int(values.max()) >= bound


def _decreasing(offsets: np.ndarray) -> bool:
    return bool(offsets.size > 1 and (np.diff(offsets) < 0).any())


def value_problems(term_offsets: np.ndarray, post_rows: np.ndarray, post_tfs: np.ndarray, doc_lengths: np.ndarray,
                   row_offsets: np.ndarray | None, row_terms: np.ndarray | None, n_terms: int,
                   label: Label) -> list[str]:
    """Ordered offsets, rows and term ids in range, positive frequencies, lengths >= 0.

    One pass over each array (a max, a min, a diff of the offsets); the big
    ones (``post_rows``, ``post_tfs``, ``row_terms``) are read, never copied.
    """
    problems = []
    if _decreasing(term_offsets):
        problems.append(f"{label('term_offsets')} decrease somewhere (they must be ordered)")
    if _outside(post_rows, doc_lengths.size):
        problems.append(f"{label('post_rows')} holds rows outside 0..{doc_lengths.size - 1}")
    if post_tfs.size:
        if post_tfs.dtype.kind == "f":
            if not bool((post_tfs > 0).all()) or not np.isfinite(post_tfs.max()):
                problems.append(f"{label('post_tfs')} holds a term frequency that is not a positive finite number")
        elif post_tfs.min() < 1:
            problems.append(f"{label('post_tfs')} holds a term frequency below 1")
    if doc_lengths.size and doc_lengths.min() < 0:
        problems.append(f"{label('doc_lengths')} holds a negative length")
    if row_offsets is not None and row_terms is not None:
        if _decreasing(row_offsets):
            problems.append(f"{label('row_offsets')} decrease somewhere (they must be ordered)")
        if _outside(row_terms, n_terms):
            problems.append(f"{label('row_terms')} holds term ids outside the vocabulary (0..{n_terms - 1})")
    return problems


def _first_unordered(values: np.ndarray, offsets: np.ndarray) -> int | None:
    """The first position where ``values`` does not rise strictly within its list (``offsets``: CSR), or None.

    Chunked compares of each value with the next; a drop where a new list
    starts is allowed.  Offsets must be ordered (checked before).
    """
    starts = offsets[1:-1]  # positions where a list begins: the value there may be anything
    for begin in range(0, max(values.size - 1, 0), _CHUNK):
        chunk = values[begin:begin + _CHUNK + 1]
        later = chunk[1:] <= chunk[:-1]  # later[i]: position begin + i + 1 is not above the one before it
        if not later.any():
            continue
        lo, hi = np.searchsorted(starts, [begin + 1, begin + chunk.size], side="left")
        allowed = starts[lo:hi] - begin - 1
        later[allowed[(allowed >= 0) & (allowed < later.size)]] = False
        bad = np.flatnonzero(later)
        if bad.size:
            return begin + int(bad[0]) + 1
    return None


def order_problems(term_offsets: np.ndarray, post_rows: np.ndarray, row_offsets: np.ndarray,
                   row_terms: np.ndarray, terms: Sequence[str], label: Label) -> list[str]:
    """Each term's rows strictly ascending (no row twice) and each row's term ids strictly ascending."""
    problems = []
    at = _first_unordered(post_rows, term_offsets)
    if at is not None:
        term = int(np.searchsorted(term_offsets, at, side="right")) - 1
        problems.append(f"{label('post_rows')}: the rows of term {terms[term]!r} are not strictly ascending at "
                        f"posting {at} (a row listed twice, or out of order)")
    at = _first_unordered(row_terms, row_offsets)
    if at is not None:
        row = int(np.searchsorted(row_offsets, at, side="right")) - 1
        problems.append(f"{label('row_terms')}: the terms of row {row} are not strictly ascending at entry {at}")
    return problems


def length_problems(doc_lengths: np.ndarray, post_tfs: np.ndarray, row_offsets: np.ndarray,
                    label: Label) -> list[str]:
    """The lengths' total equals the frequencies' total, and no row is shorter than its distinct terms."""
    problems = []
    lengths = int(doc_lengths.sum(dtype=np.int64))
    tokens: float = float(post_tfs.sum(dtype=np.float64)) if post_tfs.dtype.kind == "f" else \
        int(post_tfs.sum(dtype=np.int64))
    if lengths != tokens:
        problems.append(f"{label('doc_lengths')} sums to {lengths} tokens but {label('post_tfs')} to {tokens}: a "
                        "document length differs from the sum of its term frequencies")
    short = np.flatnonzero(doc_lengths < np.diff(row_offsets))
    if short.size:
        row = int(short[0])
        problems.append(f"{label('doc_lengths')}: row {row} has length {int(doc_lengths[row])} but "
                        f"{int(row_offsets[row + 1] - row_offsets[row])} distinct terms")
    return problems


def _row_weights(rows: np.ndarray) -> np.ndarray:
    """An odd 64-bit weight per row (a multiplicative hash): a length that changes by d != 0 changes a
    weighted sum by d x an odd number, never 0 modulo 2**64."""
    weights = rows.astype(np.uint64) * _GOLDEN
    weights ^= weights >> np.uint64(29)
    weights |= np.uint64(1)
    return weights


def _weighted_lengths(doc_lengths: np.ndarray) -> int:
    total = 0
    for begin in range(0, doc_lengths.size, _CHUNK):
        rows = np.arange(begin, min(begin + _CHUNK, doc_lengths.size), dtype=np.uint64)
        part = doc_lengths[begin:begin + _CHUNK].astype(np.int64).astype(np.uint64)
        total += int((_row_weights(rows) * part).sum(dtype=np.uint64))
    return total % (1 << 64)


def _weighted_frequencies(post_rows: np.ndarray, post_tfs: np.ndarray) -> int:
    total = 0
    for begin in range(0, post_rows.size, _CHUNK):
        tfs = post_tfs[begin:begin + _CHUNK]
        part = (tfs if tfs.dtype.kind != "f" else tfs.astype(np.int64)).astype(np.uint64)
        total += int((_row_weights(post_rows[begin:begin + _CHUNK]) * part).sum(dtype=np.uint64))
    return total % (1 << 64)


def cross_problems(term_offsets: np.ndarray, post_rows: np.ndarray, post_tfs: np.ndarray, doc_lengths: np.ndarray,
                   row_offsets: np.ndarray, row_terms: np.ndarray, label: Label) -> list[str]:
    """Row by row: each length is the sum of its row's frequencies, each row holds as many terms in both
    halves, each term as many rows.  Exact for one changed row; a few passes with random access."""
    problems = []
    if post_tfs.dtype.kind != "f" and _weighted_lengths(doc_lengths) != _weighted_frequencies(post_rows, post_tfs):
        problems.append(f"{label('doc_lengths')} does not match {label('post_tfs')} row by row: a document length "
                        "differs from the sum of its term frequencies")
    per_row = np.bincount(post_rows, minlength=doc_lengths.size)
    if per_row.size != doc_lengths.size or not np.array_equal(per_row, np.diff(row_offsets)):
        problems.append(f"{label('row_offsets')} / {label('post_rows')}: a row holds other terms row-major than "
                        "term-major")
    per_term = np.bincount(row_terms, minlength=term_offsets.size - 1)
    if per_term.size != term_offsets.size - 1 or not np.array_equal(per_term, np.diff(term_offsets)):
        problems.append(f"{label('row_terms')} / {label('term_offsets')}: a term is in other rows row-major than "
                        "term-major")
    return problems
