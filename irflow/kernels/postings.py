"""The lexical index: a numpy postings layout over tokenized rows.

BM25 needs, for each query term, the rows that contain it and how often, plus
every row's length.  Keeping those as a few flat numpy arrays (CSR layout:
an offsets array and the concatenated lists) makes scoring a handful of
vectorized gathers per term, lets a corpus store them as ``.npy`` files that
open memory-mapped, and pickles nothing.

The same pairs are also kept row-major (row -> term ids): candidate
statistics need the document frequency of *every* term present in a set of
candidate rows (rank_bm25's Okapi idf floor averages over the candidates'
whole vocabulary), and gathering the candidates' rows is much cheaper than
scanning every postings list.

Derived on first need and cached on the object (never persisted): per-candidate
statistics, per-thread scratch buffers, and dense frequency columns of the few
most common terms (``head_columns``), which BM25's pruning reads instead of
their long postings lists.

Example::

    >>> p = Postings.build([["a", "b", "a"], ["b"], []])
    >>> p.n_rows, p.vocab_size, p.term_ids(["b", "zz"]).tolist()
    (3, 2, [1, -1])
    >>> p.postings(1)
    (array([0, 1], dtype=int32), array([1, 1], dtype=uint8))
"""

from __future__ import annotations

import collections
import hashlib
import threading
from typing import Any, Callable, Iterable, Mapping, Sequence

import attrs
import numpy as np

from irflow.errors import CorpusError
from irflow.kernels.postings_build import build_arrays
from irflow.kernels.postings_checks import cross_problems, length_problems, order_problems, value_problems

__all__ = ["Postings", "ARRAY_NAMES"]

#: The arrays ``Postings.arrays()`` returns and ``from_arrays`` reads.
ARRAY_NAMES: tuple[str, ...] = (
    "term_offsets", "post_rows", "post_tfs", "doc_lengths", "row_offsets", "row_terms",
)

# Row ids are int32 (up to 2**31 rows: half the bytes of int64 for every gather); term
# frequencies the smallest unsigned integer that holds them.  Integers, never float32: an
# integer array times a Python float is float64, while float32 would silently keep float32
# arithmetic (numpy 2 promotion) and lose the 1e-9.


#: Head-term columns (see ``Postings.head_columns``): at most this many terms,
HEAD_TERMS = 64
#: each in at least 1 / HEAD_MIN_SHARE of the rows.
HEAD_MIN_SHARE = 16


class _Cache:
    """A small thread-safe LRU map for per-candidate-set statistics."""

    def __init__(self, max_entries: int) -> None:
        self._data: collections.OrderedDict[Any, Any] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.max_entries = max_entries

    def get_or_make(self, key: Any, make: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        value = make()  # outside the lock: two threads may both compute, both correct
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)
        return value

    def get(self, key: Any) -> Any:
        """The value under ``key`` or None (no recency update: a lookup on the hot path)."""
        return self._data.get(key)

    def __len__(self) -> int:
        return len(self._data)


def _as_array(arrays: Mapping[str, np.ndarray], name: str, kinds: str,
              label: Callable[[str], str] = str) -> np.ndarray:
    if name not in arrays:
        raise CorpusError(f"postings array {label(name)!r} is missing; expected {', '.join(ARRAY_NAMES)}")
    array = arrays[name]
    if not isinstance(array, np.ndarray) or array.ndim != 1 or array.dtype.kind not in kinds:
        raise CorpusError(
            f"postings array {label(name)!r} must be a 1-d integer array, got "
            f"{type(array).__name__} {getattr(array, 'dtype', '')} {getattr(array, 'shape', '')}"
        )
    return array


@attrs.frozen(eq=False)
class Postings:
    """Term -> rows postings plus row lengths, as flat numpy arrays.

    ``vocab`` maps a term to its id; the postings of term ``t`` are
    ``post_rows[term_offsets[t]:term_offsets[t + 1]]`` (ascending rows) with
    their term frequencies in ``post_tfs``.  ``row_offsets`` / ``row_terms``
    are the same pairs row-major.  Build with ``Postings.build``; persist with
    ``arrays()`` and the vocabulary's terms, reopen with ``from_arrays``.
    """

    vocab: dict[str, int]
    term_offsets: np.ndarray
    post_rows: np.ndarray
    post_tfs: np.ndarray
    doc_lengths: np.ndarray
    row_offsets: np.ndarray
    row_terms: np.ndarray
    # Per-candidate-set statistics, keyed by a digest of the mask (see bm25.py).
    stats_cache: _Cache = attrs.field(init=False, factory=lambda: _Cache(64), repr=False)
    # Per-row float vectors derived from statistics (n floats each), and the
    # scorers holding them: fewer entries.
    norm_cache: _Cache = attrs.field(init=False, factory=lambda: _Cache(8), repr=False)
    # Per-thread scratch buffers, so concurrent searches never share one.
    scratch: threading.local = attrs.field(init=False, factory=threading.local, repr=False)
    # Derived, rebuildable structures (head-term columns), made on first need.
    derived: _Cache = attrs.field(init=False, factory=lambda: _Cache(4), repr=False)
    # Digests of masks that never change (see remember_mask), by identity.
    known_masks: _Cache = attrs.field(init=False, factory=lambda: _Cache(64), repr=False)
    # Read from files (from_arrays): how messages name the arrays, until the exact cross-checks have run
    # (check_pending, on first scoring); None for an index built here, which holds by construction.
    _pending: Callable[[str], str] | None = attrs.field(default=None, kw_only=True, alias="pending", repr=False)

    def check_pending(self) -> None:
        """Run the exact cross-checks of an index read from files, once (see :mod:`.postings_checks`).

        CorpusError, naming the arrays, on every call when they fail; called
        by BM25 before it scores or counts (a pass with random access over
        every posting, which opening a corpus does not pay).
        """
        label = self._pending
        if label is None:
            return
        problems: list[str] = self.derived.get_or_make("cross-checks", lambda: cross_problems(
            self.term_offsets, self.post_rows, self.post_tfs, self.doc_lengths, self.row_offsets, self.row_terms,
            label))
        if problems:
            raise CorpusError("inconsistent postings arrays: " + "; ".join(problems) + "; the corpus is damaged — "
                              "rebuild it")

    @property
    def n_rows(self) -> int:
        """Number of rows (records), empty ones included."""
        return int(self.doc_lengths.size)

    @property
    def vocab_size(self) -> int:
        """Number of distinct terms."""
        return int(self.term_offsets.size - 1)

    @property
    def n_postings(self) -> int:
        """Number of (term, row) pairs."""
        return int(self.post_rows.size)

    @property
    def vocab_terms(self) -> list[str]:
        """Terms in id order (what a corpus stores as its JSON vocabulary)."""
        terms = [""] * len(self.vocab)
        for term, term_id in self.vocab.items():
            terms[term_id] = term
        return terms

    def document_frequencies(self) -> np.ndarray:
        """Number of rows containing each term, ``(vocab_size,)`` int64."""
        return np.diff(self.term_offsets)

    def term_ids(self, tokens: Sequence[str]) -> np.ndarray:
        """Term ids of ``tokens`` (int64), -1 for a term not in the vocabulary."""
        get = self.vocab.get
        return np.fromiter((get(t, -1) for t in tokens), dtype=np.int64, count=len(tokens))

    def postings(self, term_id: int) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, tfs)`` of one term, as views."""
        lo, hi = self.term_offsets[term_id], self.term_offsets[term_id + 1]
        return self.post_rows[lo:hi], self.post_tfs[lo:hi]

    def row_term_ids(self, row: int) -> np.ndarray:
        """Distinct term ids of one row (a view)."""
        return self.row_terms[self.row_offsets[row]:self.row_offsets[row + 1]]

    def rows_postings_count(self, rows: np.ndarray) -> int:
        """Total number of (term, row) pairs in ``rows`` (cost of a row-major gather)."""
        return int((self.row_offsets[rows + 1] - self.row_offsets[rows]).sum())

    def gather_row_terms(self, rows: np.ndarray) -> np.ndarray:
        """Concatenated distinct term ids of ``rows`` (row-major CSR gather, no loop)."""
        starts = self.row_offsets[rows]
        lengths = self.row_offsets[rows + 1] - starts
        total = int(lengths.sum())
        if total == 0:
            return np.empty(0, dtype=self.row_terms.dtype)
        # position j of the output reads row_terms[start of its row + rank within its row]
        shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
        return self.row_terms[shift + np.arange(total)]

    def head_columns(self) -> tuple[np.ndarray, np.ndarray]:
        """Dense term-frequency columns of the most common terms, made once and cached.

        Returns ``(index, columns)``: ``index[t]`` is term ``t``'s column or -1,
        ``columns[h, row]`` its frequency in ``row`` (uint8 / uint16 / int32,
        the smallest that holds the largest one).  A term in at least 1/16 of
        the rows qualifies, the ``HEAD_TERMS`` most common at most, so the
        columns cost at most ``HEAD_TERMS`` bytes per row (uint8).

        Why: BM25 pruning looks up the frequencies of common terms in a few
        thousand candidate rows; a column gather does that in O(candidates),
        where a binary search in a postings list of most of the corpus costs a
        cache miss per step.  Scoring a common term over every row also reads
        its column contiguously instead of scattering its postings.
        """
        head: tuple[np.ndarray, np.ndarray] = self.derived.get_or_make("head", self._make_head_columns)
        return head

    def _make_head_columns(self) -> tuple[np.ndarray, np.ndarray]:
        df = self.document_frequencies()
        eligible = np.flatnonzero(df * HEAD_MIN_SHARE >= max(self.n_rows, 1))
        head = eligible[np.argsort(-df[eligible], kind="stable")[:HEAD_TERMS]]
        index = np.full(self.vocab_size, -1, dtype=np.int32)
        index[head] = np.arange(head.size, dtype=np.int32)
        spans = [(int(self.term_offsets[t]), int(self.term_offsets[t + 1])) for t in head.tolist()]
        top_tf = max((int(self.post_tfs[lo:hi].max()) for lo, hi in spans), default=0)
        dtype = np.uint8 if top_tf <= 0xFF else np.uint16 if top_tf <= 0xFFFF else np.int32
        columns = np.zeros((head.size, self.n_rows), dtype=dtype)
        for h, (lo, hi) in enumerate(spans):  # one vectorized scatter per head term
            columns[h, self.post_rows[lo:hi]] = self.post_tfs[lo:hi]
        return index, columns

    def mask_digest(self, mask: np.ndarray) -> bytes:
        """A short digest of a boolean row mask, the key of per-candidate-set caches.

        O(rows) — except for a mask passed to ``remember_mask`` before, found by identity.
        """
        known = self.known_digest(mask)
        if known is not None:
            return known
        return hashlib.blake2b(np.packbits(mask).tobytes(), digest_size=16).digest()

    def known_digest(self, mask: np.ndarray) -> bytes | None:
        """The digest of ``mask`` when it was passed to ``remember_mask`` (by identity), else None: O(1)."""
        known = self.known_masks.get(id(mask))
        return known[1] if known is not None and known[0] is mask else None

    def remember_mask(self, mask: np.ndarray) -> None:
        """Digest ``mask`` now and find it by identity from then on (the last 64 masks).

        Only for a mask nobody will write to (a corpus's read-only candidate
        masks): a mask changed in place after this would keep its old digest,
        and so its old candidate statistics.
        """
        self.known_masks.get_or_make(id(mask), lambda: (mask, hashlib.blake2b(
            np.packbits(mask).tobytes(), digest_size=16).digest()))

    # -- building and persistence -------------------------------------------------

    @classmethod
    def build(cls, token_lists: Iterable[Sequence[str]], *,
              second_phase: Callable[[], Any] | None = None) -> "Postings":
        """Index ``token_lists`` (one list of tokens per row, in row order; any iterable).

        In bounded memory, chunk by chunk (see :mod:`irflow.kernels.postings_build`):
        no Python code runs per posting and no temporary spans the whole
        collection's tokens.  ``second_phase``: a context manager factory
        entered once the token lists are read (a progress bar).

        >>> Postings.build([["x", "y"], ["y", "y"]]).postings(1)[1].tolist()
        [1, 2]
        """
        vocab, arrays = build_arrays(token_lists, second_phase=second_phase)
        return cls(vocab, *(arrays[name] for name in ARRAY_NAMES))

    def arrays(self) -> dict[str, np.ndarray]:
        """The index as plain numpy arrays (names in ``ARRAY_NAMES``), for ``np.save``."""
        return {name: getattr(self, name) for name in ARRAY_NAMES}

    @classmethod
    def from_arrays(cls, vocab_terms: Sequence[str], arrays: Mapping[str, np.ndarray], *,
                    n_rows: int | None = None, label: Callable[[str], str] = str) -> "Postings":
        """Rebuild from ``vocab_terms`` (terms in id order) and ``arrays()``'s output.

        Arrays are used as given (memory-mapped arrays stay memory-mapped).
        Shapes and offsets are checked in constant time per array, then the
        values scoring relies on and their consistency in one vectorized pass
        per array (:mod:`.postings_checks`): a file whose checksums were
        recomputed after tampering must fail here, not rank wrongly or raise
        IndexError later.  The exact row-by-row cross-checks run on first
        scoring (:meth:`check_pending`).
        ``n_rows`` (when known) is the number of rows ``doc_lengths`` must
        cover.  A problem raises ``CorpusError`` naming the array as
        ``label(name)`` (a corpus names its file).  The row-major arrays may
        be absent (older files): they are then rebuilt.
        """
        term_offsets = _as_array(arrays, "term_offsets", "iu", label)
        post_rows = _as_array(arrays, "post_rows", "iu", label)
        post_tfs = _as_array(arrays, "post_tfs", "iuf", label)
        doc_lengths = _as_array(arrays, "doc_lengths", "iu", label)
        terms = list(vocab_terms)
        vocab = {term: i for i, term in enumerate(terms)}
        if len(vocab) != len(terms):
            raise CorpusError("postings vocabulary lists a term twice; the vocabulary file is corrupt")
        problems = []
        if term_offsets.size != len(terms) + 1:
            problems.append(f"{label('term_offsets')} has {term_offsets.size} entries, expected vocabulary size + 1 = "
                            f"{len(terms) + 1}")
        elif term_offsets[0] != 0 or term_offsets[-1] != post_rows.size:
            problems.append(f"{label('term_offsets')} must run from 0 to the number of postings ({post_rows.size})")
        if post_tfs.size != post_rows.size:
            problems.append(f"{label('post_tfs')} has {post_tfs.size} entries but {label('post_rows')} has {post_rows.size}")
        if n_rows is not None and doc_lengths.size != n_rows:
            problems.append(f"{label('doc_lengths')} covers {doc_lengths.size} rows, the corpus has {n_rows}")
        has_row_major = "row_offsets" in arrays and "row_terms" in arrays
        if has_row_major:
            row_offsets = _as_array(arrays, "row_offsets", "iu", label)
            row_terms = _as_array(arrays, "row_terms", "iu", label)
            if row_offsets.size != doc_lengths.size + 1 or row_terms.size != post_rows.size:
                problems.append(f"{label('row_offsets')} / {label('row_terms')} do not match {label('doc_lengths')} / "
                                f"{label('post_rows')} in size")
            elif row_offsets[0] != 0 or row_offsets[-1] != row_terms.size:
                problems.append(f"{label('row_offsets')} must run from 0 to the number of postings ({row_terms.size})")
        if problems:
            raise CorpusError("inconsistent postings arrays: " + "; ".join(problems))
        problems = value_problems(term_offsets, post_rows, post_tfs, doc_lengths, row_offsets if has_row_major else None,
                                  row_terms if has_row_major else None, len(terms), label)
        if problems:
            raise CorpusError("invalid postings arrays: " + "; ".join(problems))
        if not has_row_major:
            post_terms = np.repeat(np.arange(len(terms), dtype=np.int64), np.diff(term_offsets))
            row_offsets, row_terms = _row_major(post_terms, post_rows, doc_lengths.size, len(terms))
        problems = (order_problems(term_offsets, post_rows, row_offsets, row_terms, terms, label)
                    + length_problems(doc_lengths, post_tfs, row_offsets, label))
        if problems:
            raise CorpusError("inconsistent postings arrays: " + "; ".join(problems))
        return cls(vocab=vocab, term_offsets=term_offsets, post_rows=post_rows, post_tfs=post_tfs,
                   doc_lengths=doc_lengths, row_offsets=row_offsets, row_terms=row_terms, pending=label)


def _row_major(post_terms: np.ndarray, post_rows: np.ndarray, n_rows: int,
               n_terms: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-major (row_offsets, row_terms) from the term-major pairs (terms ascend per row)."""
    keys = np.sort(post_rows.astype(np.int64) * max(n_terms, 1) + post_terms)
    row_offsets = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(post_rows, minlength=n_rows), out=row_offsets[1:])
    return row_offsets, (keys % max(n_terms, 1)).astype(np.int32)
