"""Exact BM25 (Okapi, BM25L, BM25Plus) over a candidate mask, for a batch of queries.

The seed scores lexical matches with rank_bm25 built over the *candidates'*
token lists, so a document's score depends on which other documents passed
the filter.  This kernel reproduces those scores to 1e-9 without building a
rank_bm25 object per query: statistics (number of documents, average length,
document frequencies) are computed over the candidate rows from the postings
layout and cached per candidate set (keyed by a digest of the mask, LRU-bounded),
and scoring is a few vectorized numpy operations over the query terms'
postings, with exact MaxScore pruning so that common terms are looked up in
the rare terms' rows instead of being scored over most of the corpus.

rank_bm25's arithmetic, matched on purpose:

- Okapi idf is ``log(N - df + 0.5) - log(df + 0.5)``; a *negative* idf is
  replaced by ``epsilon * average_idf``, where the average runs over every
  term of the (candidate) corpus, not just the query's.  An idf of exactly 0
  (a term in exactly half the documents) is not floored.
- BM25L idf is ``log(N + 1) - log(df + 0.5)``; BM25Plus idf is
  ``log((N + 1) / df)``.  BM25Plus gives every document ``idf * delta`` for
  each query term known to the corpus, present in it or not; BM25L's
  contribution vanishes when the document lacks the term.
- Each query token counts as many times as it occurs; a token absent from the
  (candidate) corpus contributes 0.

Where rank_bm25 divides 0 by 0 (a document lacking a term when ``k1 == 0``)
and returns NaN, this kernel lets the missing term contribute as a term
frequency of 0 does for ``k1 > 0``: nothing for Okapi and BM25L, ``idf *
delta`` for BM25Plus.

Only candidates containing at least one query token are returned, best
first, ties broken by row order.  Every scoring path adds a row's
contributions in one canonical order, by document frequency then token (a
global order, not a property of this index), so a row's score is the same
to the bit whichever path computed it, and whichever index holds it when the
statistics are supplied from outside (``stats=``, for a corpus split into
shards: see ``partial_stats`` and ``combine_stats``): the top ``j`` is
always the prefix of the top ``n`` (``j < n``), whatever ``fetch_k`` makes
the kernel prune, and shards' tops merge into the whole corpus's.

Example::

    >>> from irflow.postings import Postings
    >>> p = Postings.build([["red", "fox"], ["lazy", "dog"], ["red", "dog", "dog"],
    ...                     ["quick", "brown"], ["the", "end"]])
    >>> rows, scores = bm25_topk(p, [["red", "dog"]], None, 10).per_query(0)
    >>> rows.tolist(), scores.round(4).tolist()
    ([2, 0, 1], [0.7195, 0.3508, 0.3508])
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import warnings
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping, Sequence

import attrs
import numpy as np

from irflow.errors import IrflowError
from irflow.postings import Postings
from irflow.topk import TopK, topk_rows

__all__ = [
    "BM25Params", "BM25ParamError", "BM25Stats", "PartialStats", "bm25_topk", "bm25_scores",
    "partial_stats", "combine_stats", "mean_okapi_idf", "VARIANTS", "STATS", "DEFAULT_DELTA",
    "kernel_name", "use_kernel", "KERNEL_ENV",
]

VARIANTS: tuple[str, ...] = ("okapi", "bm25l", "bm25plus")
STATS: tuple[str, ...] = ("candidates", "corpus")
#: rank_bm25's default delta per variant (Okapi has none).
DEFAULT_DELTA: dict[str, float] = {"bm25l": 0.5, "bm25plus": 1.0}


class BM25ParamError(IrflowError, ValueError):
    """A BM25 parameter is unknown or out of range."""


def _choice(options: tuple[str, ...]) -> Any:
    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value not in options:
            raise BM25ParamError(f"bm25 {attribute.name} must be one of {', '.join(options)}; got {value!r}")
    return check


def _number(low: float | None = None, high: float | None = None, optional: bool = False) -> Any:
    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not _finite(value):
            raise BM25ParamError(f"bm25 {attribute.name} must be a finite number, got {value!r}")
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f">= {low}" if high is None else f"between {low} and {high}"
            raise BM25ParamError(f"bm25 {attribute.name} must be {bounds}, got {value!r}")
    return check


def _float_or_none(value: Any) -> Any:
    # keep non-numbers as they are so the validator can name them in its error
    # (and ints no float holds, 10**400: float() would overflow before the validator could speak)
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) and _finite(value):
        return float(value)
    return value


def _finite(value: Any) -> bool:
    # math.isfinite raises OverflowError on an int no float holds (10**400): that is not finite here
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


@attrs.frozen
class BM25Params:
    """BM25 variant, its parameters, and where its statistics come from.

    ``variant``: "okapi" (default, rank_bm25's BM25Okapi), "bm25l", "bm25plus".
    ``k1`` >= 0 and ``0 <= b <= 1`` as usual; ``epsilon`` scales Okapi's floor
    on negative idf; ``delta`` is BM25L / BM25Plus's lower bound (None: the
    variant's rank_bm25 default, 0.5 / 1.0).  Parameters a variant does not
    use are ignored.  ``stats="candidates"`` (default, the seed's semantics)
    computes N, average length and document frequencies over the candidate
    rows; ``"corpus"`` over the whole corpus.

    >>> BM25Params.from_mapping({"k1": 1.2, "b": 0.5}).k1
    1.2
    """

    variant: str = attrs.field(default="okapi", validator=_choice(VARIANTS))
    k1: float = attrs.field(default=1.5, converter=_float_or_none, validator=_number(low=0.0))
    b: float = attrs.field(default=0.75, converter=_float_or_none, validator=_number(0.0, 1.0))
    epsilon: float = attrs.field(default=0.25, converter=_float_or_none, validator=_number())
    delta: float | None = attrs.field(default=None, converter=_float_or_none,
                                      validator=_number(optional=True))
    stats: str = attrs.field(default="candidates", validator=_choice(STATS))

    @property
    def effective_delta(self) -> float:
        """``delta``, or the variant's default when unset (0.0 for Okapi, which has none)."""
        return self.delta if self.delta is not None else DEFAULT_DELTA.get(self.variant, 0.0)

    @classmethod
    def from_mapping(cls, mapping: "Mapping[str, Any] | BM25Params | None") -> "BM25Params":
        """Parameters from a mapping such as the seed's ``bm25={"k1": 1.5, "b": 0.75}``.

        ``None`` gives the defaults; a ``BM25Params`` is returned as is.  An
        unknown key raises ``BM25ParamError`` naming the valid keys.
        """
        if mapping is None:
            return cls()
        if isinstance(mapping, BM25Params):
            return mapping
        if not isinstance(mapping, Mapping):
            raise BM25ParamError(f"bm25 parameters must be a mapping, got {type(mapping).__name__}")
        valid = [a.name for a in attrs.fields(cls)]
        unknown = sorted(set(mapping) - set(valid), key=str)
        if unknown:
            raise BM25ParamError(
                f"unknown bm25 parameter(s) {', '.join(map(repr, unknown))}; valid keys are {', '.join(valid)}"
            )
        return cls(**mapping)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready parameters (for traces and recipe files)."""
        return attrs.asdict(self)


# -- statistics -----------------------------------------------------------------------
#
# BM25 scores a row against collection statistics: how many rows (N), their
# total length (for the average), each query token's document frequency, and
# for Okapi's negative-idf floor the mean idf over the statistics rows' whole
# vocabulary.  By default the kernel computes them from the rows it holds
# (the candidates, or the corpus).  A corpus split into shards cannot: each
# shard holds a part of the rows, so a driver gathers every shard's
# ``partial_stats`` (phase one), adds them up with ``combine_stats`` and
# sends the result back to every shard's ``bm25_topk(..., stats=...)``
# (phase two), as Elasticsearch's dfs_query_then_fetch does.  The vocabulary
# (every term's df) is exchanged only when a query has a negative Okapi idf
# (``BM25Stats.needs_vocabulary``), which common words in small candidate
# sets do.  With the same statistics a row gets the same score to the bit on
# any shard: see "Canonical order" below.


def _frozen_counts(value: Mapping[str, int] | None) -> Mapping[str, int] | None:
    return None if value is None else MappingProxyType({str(t): int(c) for t, c in dict(value).items()})


def _non_negative(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise IrflowError(f"bm25 statistics: {attribute.name} must be an integer >= 0, got {value!r}")


@attrs.frozen
class PartialStats:
    """One row set's share of the statistics (what a shard sends in phase one).

    ``n_docs`` rows of ``total_length`` tokens; ``df``: the document
    frequency among them of each requested token (0 for a token they lack);
    ``vocabulary``: every term present in them with its df, only when asked
    (``partial_stats(..., vocabulary=True)``).  Sums over row sets: see
    ``combine_stats``.
    """

    n_docs: int = attrs.field(validator=_non_negative)
    total_length: int = attrs.field(validator=_non_negative)
    df: Mapping[str, int] = attrs.field(converter=_frozen_counts)
    vocabulary: Mapping[str, int] | None = attrs.field(default=None, converter=_frozen_counts)


@attrs.frozen
class BM25Stats:
    """Collection statistics BM25 scores against: counts, not a row set.

    ``n_docs`` statistics rows of ``total_length`` tokens in all; ``df``:
    the document frequency of every query token the kernel will see (a
    token missing here is an error, a token with df 0 is unknown to the
    statistics rows and contributes nothing, as in rank_bm25);
    ``mean_okapi_idf``: rank_bm25's ``average_idf`` over the statistics
    rows' vocabulary, needed only by Okapi for a token with a negative idf
    (None: not computed; the kernel then refuses such a token).

    >>> BM25Stats(n_docs=3, total_length=7, df={"fox": 1}).avgdl
    2.3333333333333335
    """

    n_docs: int = attrs.field(validator=_non_negative)
    total_length: int = attrs.field(validator=_non_negative)
    df: Mapping[str, int] = attrs.field(converter=_frozen_counts)
    mean_okapi_idf: float | None = attrs.field(default=None)

    @property
    def avgdl(self) -> float:
        return self.total_length / self.n_docs

    def needs_vocabulary(self, params: "BM25Params", query_tokens: Iterable[str]) -> bool:
        """Whether scoring these tokens needs ``mean_okapi_idf`` (and it is missing).

        True for Okapi when a token's idf is negative (a token in more than
        about half the statistics rows): ask every shard for its vocabulary
        and combine again.
        """
        if params.variant != "okapi" or self.mean_okapi_idf is not None:
            return False
        n = self.n_docs
        return any(0 < self.df.get(t, 0) and math.log(n - self.df[t] + 0.5) - math.log(self.df[t] + 0.5) < 0
                   for t in set(query_tokens))


def mean_okapi_idf(n_docs: int, document_frequencies: Iterable[int] | np.ndarray) -> float:
    """rank_bm25's ``average_idf``: the mean Okapi idf over the terms with df > 0.

    Computed from the multiset of df values (their histogram, each distinct
    df's idf once, summed with ``math.fsum``), so the bits do not depend on
    the order of the terms: a driver combining shards' vocabularies gets the
    value a single machine gets.

    >>> round(mean_okapi_idf(4, [1, 1, 3]), 6)
    0.282433
    """
    df = np.asarray(list(document_frequencies) if not isinstance(document_frequencies, np.ndarray)
                    else document_frequencies, dtype=np.int64)
    df = df[df > 0]
    if df.size == 0:
        return 0.0
    counts = np.bincount(df)
    values = np.flatnonzero(counts)
    total = math.fsum(int(counts[v]) * (math.log(n_docs - v + 0.5) - math.log(v + 0.5))
                      for v in values.tolist())
    return total / int(df.size)


class _Stats:
    """Statistics of one set of rows (the candidates, the corpus, or supplied from outside).

    Holds numbers only, so a cached entry never keeps a caller's mask alive or
    goes stale when the caller mutates it: the cache key is the mask's digest.
    """

    __slots__ = ("key", "n_docs", "total_length", "mean_okapi_idf", "df_cache", "supplied")

    def __init__(self, key: tuple, n_docs: int, total_length: int,
                 supplied: BM25Stats | None = None) -> None:
        self.key = key
        self.n_docs = n_docs
        self.total_length = total_length
        self.mean_okapi_idf: float | None = None  # filled on first need (a negative idf)
        # term (by its postings' start offset) -> document frequency in this set:
        # common terms recur across queries and cost a pass over their postings
        self.df_cache: dict[int, int] = {}
        self.supplied = supplied

    @property
    def avgdl(self) -> float:
        return self.total_length / self.n_docs


def _stats(postings: Postings, rows_mask: np.ndarray | None) -> _Stats:
    """Cached statistics of the rows in ``rows_mask`` (None: every row)."""
    if rows_mask is None:
        key: tuple = ("all",)
        return postings.stats_cache.get_or_make(
            key, lambda: _Stats(key, postings.n_rows, int(postings.doc_lengths.sum(dtype=np.int64))))
    key = ("mask", postings.mask_digest(rows_mask))
    return postings.stats_cache.get_or_make(
        key, lambda: _Stats(key, int(np.count_nonzero(rows_mask)),
                            int(postings.doc_lengths[rows_mask].sum(dtype=np.int64))))


def _document_frequencies(postings: Postings, rows_mask: np.ndarray | None) -> np.ndarray:
    """Document frequency of every term within ``rows_mask`` (None: every row).

    Gathers the row-major term lists of the kept rows, or of the dropped rows
    when those are fewer (and subtracts from the corpus frequencies).
    """
    df_all = postings.document_frequencies()
    if rows_mask is None:
        return df_all
    kept = np.flatnonzero(rows_mask)
    dropped = np.flatnonzero(~rows_mask)
    if postings.rows_postings_count(kept) <= postings.rows_postings_count(dropped):
        return np.bincount(postings.gather_row_terms(kept), minlength=postings.vocab_size)
    return df_all - np.bincount(postings.gather_row_terms(dropped), minlength=postings.vocab_size)


def _mean_okapi_idf(postings: Postings, stats: _Stats, rows_mask: np.ndarray | None) -> float:
    """``mean_okapi_idf`` of the set's vocabulary, cached on the statistics."""
    if stats.mean_okapi_idf is None:
        stats.mean_okapi_idf = mean_okapi_idf(stats.n_docs, _document_frequencies(postings, rows_mask))
    return stats.mean_okapi_idf


def partial_stats(postings: Postings, rows: np.ndarray | None, tokens: Iterable[str], *,
                  vocabulary: bool = False) -> PartialStats:
    """The statistics of the rows in ``rows`` (bool mask; None: every row) for ``tokens``.

    What one shard contributes: its row count, total length and each
    distinct token's df among those rows; with ``vocabulary=True`` also every
    present term's df (for Okapi's floor; large, so only on demand).

    >>> p = Postings.build([["a", "b"], ["b"], ["c"]])
    >>> partial_stats(p, np.array([True, True, False]), ["b", "zz"]).df["b"]
    2
    """
    rows = _check_mask(rows, postings.n_rows, "rows")
    stats = _stats(postings, rows)
    offsets, post_rows = postings.term_offsets, postings.post_rows
    df = {}
    for token in dict.fromkeys(tokens):
        term = postings.vocab.get(token)
        if term is None:
            df[token] = 0
            continue
        lo, hi = int(offsets[term]), int(offsets[term + 1])
        df[token] = hi - lo if rows is None else int(np.count_nonzero(rows[post_rows[lo:hi].astype(np.intp)]))
    terms = None
    if vocabulary:
        counts = _document_frequencies(postings, rows)
        present = np.flatnonzero(counts).tolist()
        names = postings.vocab_terms
        terms = {names[t]: int(counts[t]) for t in present}
    return PartialStats(n_docs=stats.n_docs, total_length=stats.total_length, df=df, vocabulary=terms)


def combine_stats(parts: Sequence[PartialStats]) -> BM25Stats:
    """Global statistics from the row sets' shares (sums; the Okapi mean when every share sent its vocabulary).

    >>> a = PartialStats(n_docs=2, total_length=5, df={"x": 1})
    >>> b = PartialStats(n_docs=1, total_length=2, df={"x": 1, "y": 0})
    >>> combine_stats([a, b]).df["x"], combine_stats([a, b]).n_docs
    (2, 3)
    """
    df: dict[str, int] = {}
    for part in parts:
        for token, count in part.df.items():
            df[token] = df.get(token, 0) + count
    n_docs = sum(p.n_docs for p in parts)
    mean = None
    if parts and all(p.vocabulary is not None for p in parts):
        vocabulary: dict[str, int] = {}
        for part in parts:
            for term, count in part.vocabulary.items():  # type: ignore[union-attr]
                vocabulary[term] = vocabulary.get(term, 0) + count
        mean = mean_okapi_idf(n_docs, np.fromiter(vocabulary.values(), dtype=np.int64, count=len(vocabulary)))
    return BM25Stats(n_docs=n_docs, total_length=sum(p.total_length for p in parts), df=df, mean_okapi_idf=mean)


def _idf(params: BM25Params, n_docs: int, df: int, mean_idf: "Any") -> float:
    """Idf of a term in ``df`` of ``n_docs`` documents, as rank_bm25 computes it."""
    if params.variant == "okapi":
        idf = math.log(n_docs - df + 0.5) - math.log(df + 0.5)
        return params.epsilon * mean_idf() if idf < 0 else idf
    if params.variant == "bm25l":
        return math.log(n_docs + 1) - math.log(df + 0.5)
    return math.log((n_docs + 1) / df)


# -- scoring --------------------------------------------------------------------------
#
# Per query, each distinct known term contributes ``weight * saturation(tf, row)``
# to the rows that contain it; rows lacking it get 0 (BM25Plus: the constant
# ``weight * delta``, added to every returned row at the end).  The ways to add
# those up, all exact, chosen per query:
#
# * pruned (MaxScore): score only the rows of the rarer ("essential") terms and
#   look the common terms' frequencies up in those rows; a row holding common
#   terms only cannot reach the k-th score found when the common terms' upper
#   bounds sum to less.  Most multi-term queries end here, touching a few
#   thousand postings instead of most of the corpus.
# * sparse: the terms' postings concatenated, contributions computed in one
#   pass, summed per row by a stable sort (few postings) or a scatter-add into
#   a reusable dense buffer of which only the touched entries are reset;
# * dense: a term in a large share of the rows is added with contiguous passes
#   over its dense frequency column (``Postings.head_columns``) instead of
#   gathers and scatters over most of the corpus.
#
# Top-k selection then runs over the matched rows only: selecting among all n
# rows, mostly zeros, is what dominates at scale otherwise.
#
# Canonical order.  Float addition is not associative, so every path adds a
# row's contributions in one fixed order: the terms' order in ``terms()``,
# ascending by document frequency in the statistics rows, ties by the token
# itself (its string: term ids are local to one index, tokens are not),
# starting from 0 and skipping absent terms (adding an exact 0 changes
# nothing).  Both keys are global quantities: a shard scoring with the
# global statistics orders a row's terms exactly as one machine does, so
# the row gets the same bits wherever it lives.  Within one index a row's
# score is bit-identical whichever path computed it, so equal scores tie
# exactly, ties break by row order, and the top ``j`` is the prefix of the
# top ``n`` for any ``j < n``.  MaxScore's essential terms are a prefix of
# that order (the rarest by df; the scoring cost of a term, its local
# postings or the candidates, only decides how long the prefix is): a row's
# partial score is its canonical sum so far, and the common terms are added
# on top, in order, with no term scored twice.  BM25Plus's constant (its
# ``idf * delta`` per known token, present in the row or not) is summed in
# the same order over every token the statistics know, held locally or not.


def _check_mask(mask: np.ndarray | None, n_rows: int, name: str) -> np.ndarray | None:
    if mask is None:
        return None
    mask = np.asarray(mask)
    if mask.dtype != np.bool_ or mask.shape != (n_rows,):
        raise IrflowError(
            f"{name} must be a boolean array of shape ({n_rows},) (one entry per corpus row), "
            f"got {mask.dtype} {mask.shape}"
        )
    return mask


#: A term whose postings cover more than this fraction of the rows is scored
#: with dense passes over all rows; measured crossover on 100k rows: about 1/5.
DENSE_TERM_FRACTION = 0.2
#: Pruning starts with the essential terms whose postings fit in this fraction
#: of the rows (the rarest term always counts as essential)...
PRUNE_BUDGET_FRACTION = 1 / 16
#: ...and gives up for the exhaustive path once they exceed this fraction.
PRUNE_LIMIT_FRACTION = 1.0
#: Up to this many essential rows, the common terms are looked up in all of
#: them at once; beyond, only in the best few first (to set the threshold) and
#: then in the rows that can still reach it.  Fewer numpy calls win below it.
FULL_SCORE_ROWS = 8192


#: Relative margin under the k-th score below which pruning drops a row (far above rounding error).
_PRUNE_MARGIN = 1e-9
_NO_ROWS = np.empty(0, dtype=np.int64)
_NO_ROWS_MASK = np.empty(0, dtype=bool)
#: Which kernel scores: "auto" (compiled when numba is installed, else numpy), "numpy" or "numba".
KERNEL_ENV = "IRFLOW_BM25_KERNEL"
_COMPILED: list[Any] = []  # resolved once: [module or None]
#: Rows per block of the compiled kernel (None: its own ``BLOCK``); tests set tiny blocks.
COMPILED_BLOCK: int | None = None


def _compiled() -> Any:
    """The compiled kernel module, or None for the numpy paths (``IRFLOW_BM25_KERNEL``; numba installed)."""
    if _COMPILED:
        return _COMPILED[0]
    choice = os.environ.get(KERNEL_ENV, "auto").strip().lower() or "auto"
    module = None
    if choice not in ("auto", "numpy", "numba"):
        warnings.warn(f"{KERNEL_ENV}={choice!r} is not one of auto, numpy, numba; using auto", stacklevel=3)
        choice = "auto"
    if choice != "numpy":
        try:
            from irflow import bm25_numba as module
        except ImportError as error:
            if choice == "numba":
                raise IrflowError(f"{KERNEL_ENV}=numba but numba cannot be imported ({error}); "
                                  "pip install 'irflow[fast]'") from error
            module = None
        except Exception as error:  # a broken numba install (llvmlite mismatch, no cache dir): numpy still works
            if choice == "numba":
                raise IrflowError(f"{KERNEL_ENV}=numba but the compiled kernel failed to load: {error}") from error
            warnings.warn(f"irflow's compiled BM25 kernel failed to load ({error}); using the numpy kernel",
                          stacklevel=3)
            module = None
    _COMPILED.append(module)
    return module


def kernel_name() -> str:
    """The kernel that scores in this process: "numba" (compiled) or "numpy"."""
    return "numpy" if _compiled() is None else "numba"


@contextlib.contextmanager
def use_kernel(name: str) -> Iterator[None]:
    """Score with ``name`` ("numpy", "numba" or "auto") inside the block (benchmarks, tests; not thread-safe).

    >>> with use_kernel("numpy"):
    ...     kernel_name()
    'numpy'
    """
    if name not in ("auto", "numpy", "numba"):
        raise BM25ParamError(f"kernel must be one of auto, numpy, numba; got {name!r}")
    saved = list(_COMPILED)
    _COMPILED.clear()
    if name == "numpy":
        _COMPILED.append(None)
    elif name == "numba":
        from irflow import bm25_numba

        _COMPILED.append(bm25_numba)
    try:
        yield
    finally:
        _COMPILED[:] = saved


class _Scratch:
    """One thread's reusable buffers; ``scores``, ``seen``, ``pos`` are clean between queries."""

    def __init__(self, n_rows: int) -> None:
        self.scores = np.zeros(n_rows, dtype=np.float64)
        self.seen = np.zeros(n_rows, dtype=bool)
        self.pos = np.full(n_rows, -1, dtype=np.int32 if n_rows < 2**31 else np.int64)
        self.tf = np.zeros(n_rows, dtype=np.float64)
        self.hit = np.zeros(n_rows, dtype=bool)
        self.work = np.zeros(n_rows, dtype=np.float64)
        self.work2 = np.zeros(n_rows, dtype=np.float64)
        self.work3: np.ndarray | None = None  # BM25L's dense passes only: made on first need
        self.touched: list[np.ndarray] = []  # sparse rows written since the last reset
        self.wholesale = False  # a dense pass wrote everywhere: reset by memset

    def reset(self) -> None:
        """Clean for the next query: memset when much was touched, else scatter zeros."""
        if self.wholesale or sum(r.size for r in self.touched) * 8 >= self.scores.size:
            self.scores.fill(0.0)
            self.seen.fill(False)
        else:
            for rows in self.touched:
                self.scores[rows] = 0.0
                self.seen[rows] = False
        self.touched.clear()
        self.wholesale = False

    def matched(self) -> np.ndarray:
        """Ascending distinct rows marked in ``seen``."""
        touched = self.touched
        if self.wholesale or sum(r.size for r in touched) * 32 >= self.seen.size:
            return np.flatnonzero(self.seen)  # a linear scan beats sorting that many
        if not touched:
            return np.empty(0, dtype=np.intp)
        return _sorted_unique(np.concatenate(touched))  # few matches: sort them, skip the scan


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` for a small int array, without its hashing overhead."""
    values = np.sort(values)
    keep = np.empty(values.size, dtype=bool)
    keep[:1] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def _scratch(postings: Postings) -> _Scratch:
    """This thread's scratch buffers for ``postings`` (never shared between threads)."""
    local = postings.scratch
    scratch = getattr(local, "bm25", None)
    if scratch is None or scratch.scores.size != postings.n_rows:
        local.bm25 = scratch = _Scratch(postings.n_rows)
    return scratch


def _norms(postings: Postings, stats: _Stats, params: BM25Params) -> tuple[np.ndarray, bool]:
    """Per-row length normalisation for these statistics, and whether all are > 0; cached.

    ``(1 - b) + b * dl / avgdl`` for BM25L, times ``k1`` for Okapi and
    BM25Plus (they only use it that way), in rank_bm25's order of operations.
    One gather of this per term replaces a gather of lengths and three passes.
    """
    scaled = params.variant != "bm25l"
    # keyed by the numbers, not the row set: supplied statistics share the entry
    key = ("norms", stats.n_docs, stats.total_length, params.b, params.k1 if scaled else None)

    def make() -> tuple[np.ndarray, bool]:
        norms = (1 - params.b) + params.b * postings.doc_lengths / stats.avgdl
        if scaled:
            norms = params.k1 * norms
        return norms, bool(norms.min(initial=1.0) > 0)

    return postings.norm_cache.get_or_make(key, make)


class _Term:
    """One distinct known query term: postings slice, head column, weight, score bound."""

    __slots__ = ("lo", "hi", "column", "weight", "bound")

    def __init__(self, lo: int, hi: int, column: int, weight: float, bound: float) -> None:
        self.lo, self.hi, self.column, self.weight, self.bound = lo, hi, column, weight, bound

    @property
    def size(self) -> int:
        return self.hi - self.lo


class _Scorer:
    """Scores queries against one candidate set with fixed statistics."""

    def __init__(self, postings: Postings, params: BM25Params, mask: np.ndarray | None,
                 stats_mask: np.ndarray | None, supplied: BM25Stats | None = None) -> None:
        self.postings = postings
        self.params = params
        self.variant = params.variant
        self.mask = mask
        self.stats_mask = stats_mask
        if supplied is None:
            self.stats = _stats(postings, stats_mask)
        else:
            self.stats = _Stats(("supplied",), supplied.n_docs, supplied.total_length, supplied)
            self.stats.mean_okapi_idf = supplied.mean_okapi_idf
        self.k1 = params.k1
        self.delta = params.effective_delta
        self.usable = self.stats.n_docs > 0 and self.stats.total_length > 0
        self.norms = np.ones(0)
        self._kept: np.ndarray | None = None
        self._n_kept: int | None = None
        self.dense_ok = False
        self.head_index, self.head = postings.head_columns()
        self._tokens: dict[str, tuple[int, int, int, int, float, float]] = {}  # see terms()
        if self.usable:
            self.norms, positive = _norms(postings, self.stats, params)
            # The dense path also evaluates rows lacking the term (tf = 0): allowed
            # only when that gives an exact 0, not 0 / 0.
            self.dense_ok = positive and (self.variant != "bm25l" or self.k1 + self.delta != 0)
        # Upper bounds need a contribution that saturates (BM25L's grows with tf
        # but stays below weight * (k1 + 1) * tf when delta >= 0).
        self.prune_ok = self.variant != "bm25l" or self.delta >= 0

    # -- terms ------------------------------------------------------------------------

    def _df(self, lo: int, hi: int, column: int) -> int:
        """Document frequency of a term in the statistics set (cached per set)."""
        if self.stats_mask is None:
            return hi - lo
        cache = self.stats.df_cache
        df = cache.get(lo)  # a non-empty term is identified by where its postings start
        if df is None:
            if self.stats_mask is self.mask and column >= 0 and 4 * self.n_kept < hi - lo:
                df = int(np.count_nonzero(self.head[column][self.kept]))  # few candidates
            else:
                rows = self.postings.post_rows[lo:hi]
                df = int(np.count_nonzero(self.stats_mask[rows.astype(np.intp)]))
            if len(cache) >= 1 << 16:
                cache.clear()
            cache[lo] = df
        return df

    def terms(self, tokens: Sequence[str]) -> tuple[list[_Term], float]:
        """The query's distinct terms known to the statistics set, and BM25Plus's constant.

        Terms come in the canonical order every path sums them in: ascending by
        document frequency in the statistics rows, ties by token.  A repeated
        token is one term of weight ``count * idf``.  With supplied statistics a
        token they know but this index lacks still counts in BM25Plus's
        constant (every row gets it).
        """
        supplied = self.stats.supplied
        cache = self._tokens
        found = []
        # a query has a handful of tokens: plain Python beats numpy's call overhead here
        for token, count in collections.Counter(tokens).items():
            known = cache.get(token)
            if known is None:
                known = self._describe(token)
                if supplied is None:  # fixed statistics: a reused scorer looks a token up once
                    if len(cache) >= 1 << 16:
                        cache.clear()
                    cache[token] = known
            if known[0] == 0:
                continue  # unknown to the statistics corpus: rank_bm25's idf.get() -> 0
            found.append((known, token, count))
        found.sort(key=lambda f: (f[0][0], f[1]))
        terms, constant = [], 0.0
        for (df, lo, hi, column, idf, top_tf), token, count in found:
            weight = count * idf
            if self.variant == "bm25plus":
                constant += weight * self.delta
            if hi == lo:
                continue  # no posting in this index: contributes the constant only
            bound = weight * (self.k1 + 1.0)
            if self.variant == "bm25l":
                bound *= top_tf
            terms.append(_Term(lo, hi, column, weight, max(bound, 0.0)))
        return terms, constant

    def _describe(self, token: str) -> tuple[int, int, int, int, float, float]:
        """``(df, lo, hi, column, idf, largest tf)`` of a token in this index and these statistics."""
        p = self.postings
        term = p.vocab.get(token)
        lo = hi = 0
        column = -1
        if term is not None:
            lo, hi = int(p.term_offsets[term]), int(p.term_offsets[term + 1])
            column = int(self.head_index[term])
        supplied = self.stats.supplied
        if supplied is None:
            df = self._df(lo, hi, column) if hi > lo else 0
        else:
            df = supplied.df.get(token)
            if df is None:
                raise IrflowError(
                    f"the supplied bm25 statistics have no document frequency for query token {token!r}; "
                    "compute them for every distinct token of the batch (partial_stats / combine_stats)"
                )
        if df == 0:
            return 0, lo, hi, column, 0.0, 0.0
        idf = _idf(self.params, self.stats.n_docs, df, self._mean_idf_for(token))
        top_tf = float(p.post_tfs[lo:hi].max()) if self.variant == "bm25l" and hi > lo else 0.0
        return df, lo, hi, column, idf, top_tf

    def _mean_idf_for(self, token: str) -> Any:
        """The Okapi floor's mean idf, computed on first need (a token with a negative idf)."""
        def mean() -> float:
            if self.stats.supplied is not None:
                if self.stats.mean_okapi_idf is None:
                    raise IrflowError(
                        f"query token {token!r} has a negative Okapi idf, so the score needs the mean idf "
                        "over the statistics vocabulary, which the supplied statistics lack; combine "
                        "partial_stats(..., vocabulary=True) (BM25Stats.needs_vocabulary tells when)"
                    )
                return self.stats.mean_okapi_idf
            return self._mean_idf()
        return mean

    def _mean_idf(self) -> float:
        return _mean_okapi_idf(self.postings, self.stats, self.stats_mask)

    @property
    def kept(self) -> np.ndarray:
        """Ascending candidate rows (computed on first need)."""
        if self._kept is None:
            mask, p = self.mask, self.postings
            # cached per candidate set: a corpus's masks are digested once (Postings.remember_mask)
            self._kept = p.stats_cache.get_or_make(("kept", p.mask_digest(mask)), lambda: np.flatnonzero(mask))
        return self._kept

    @property
    def n_kept(self) -> int:
        """Number of candidate rows (from the cached statistics when they are the candidates')."""
        if self._n_kept is None:
            self._n_kept = self.stats.n_docs if self.stats_mask is self.mask \
                else int(np.count_nonzero(self.mask))
        return self._n_kept

    def _via_column(self, term: _Term) -> bool:
        """Read this term from its head column at the candidate rows, not from its postings.

        Under a selective filter a common term's postings are mostly rows the
        filter dropped: reading its column at the few candidates costs
        O(candidates) instead of O(postings).
        """
        return self.mask is not None and term.column >= 0 and 4 * self.n_kept < term.size

    def size(self, term: _Term) -> int:
        """Postings the term costs to score: its own, or the candidates when read from its column."""
        return self.n_kept if self._via_column(term) else term.size

    def _postings(self, terms: list[_Term]) -> tuple[np.ndarray, np.ndarray, Any]:
        """The terms' candidate postings, concatenated: rows (intp), tfs and weights.

        One concatenation and one set of vector operations for all the terms
        keeps the number of numpy calls (each a few microseconds) independent
        of the number of terms.  ``weights`` is a scalar for a single term.
        """
        p = self.postings
        rows_parts, tf_parts = [], []
        for term in terms:
            if self._via_column(term):
                tfs = self.head[term.column][self.kept]
                found = np.flatnonzero(tfs)
                rows_parts.append(self.kept[found])
                tf_parts.append(tfs[found])
                continue
            rows = p.post_rows[term.lo:term.hi].astype(np.intp)
            tfs = p.post_tfs[term.lo:term.hi]
            if self.mask is not None:
                keep = self.mask[rows]
                rows, tfs = np.compress(keep, rows), np.compress(keep, tfs)
            rows_parts.append(rows)
            tf_parts.append(tfs)
        if len(terms) == 1:
            return rows_parts[0], tf_parts[0], terms[0].weight
        weights = np.repeat([t.weight for t in terms], [r.size for r in rows_parts])
        return np.concatenate(rows_parts), np.concatenate(tf_parts), weights

    def _contribution(self, weight: Any, rows: np.ndarray, tfs: np.ndarray) -> np.ndarray:
        """``weight * saturation`` for the given postings (rows contain the term).

        ``weight`` is a scalar or one weight per posting; ``tfs`` may also be a
        (terms, rows) block with ``weight`` a (terms, 1) column.
        """
        norms = self.norms[rows]
        scale = weight * (self.k1 + 1.0)
        if self.variant == "bm25l":
            ctd = tfs / norms
            return scale * tfs * (ctd + self.delta) / (self.k1 + ctd + self.delta)
        out = tfs * scale
        out /= norms + tfs  # okapi and bm25plus share the saturation term
        return out

    # -- query ------------------------------------------------------------------------

    def top(self, tokens: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of the top ``k`` candidates containing a query token."""
        terms, constant = self.terms(tokens)
        if not terms:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        compiled = _compiled()
        if compiled is not None:
            return self._compiled_top(compiled, terms, k, constant)
        rows, scores = self._pruned(terms, k, constant) if self.prune_ok and len(terms) > 1 else (None, None)
        if rows is None:
            rows, scores = self._scores(terms)
        if constant:
            # before selecting: sums that differ can round to one score once it is
            # added, and those ties must go by row order too
            scores = scores + constant
        pick = topk_rows(scores, k)  # rows are ascending: index ties are row ties
        scores = scores[pick]
        scores += 0.0  # -0.0 (all of a row's weights -0.0) becomes 0.0 whichever path summed it
        return rows[pick].astype(np.int64), scores

    def _compiled_top(self, compiled: Any, terms: list[_Term], k: int,
                      constant: float) -> tuple[np.ndarray, np.ndarray]:
        """The same top ``k`` as the numpy paths, by the compiled kernel (``irflow.bm25_numba``).

        The terms go in two small tables (integers: postings span, column, how
        to add the term; floats: scale, bound), two array constructions
        rather than one per field: at 100k rows a query takes ~50 µs.
        """
        dense_limit = DENSE_TERM_FRACTION * self.postings.n_rows
        ints, floats, via = [], [], False
        for term in terms:
            how = 0
            if term.column >= 0:
                if self._via_column(term):
                    how, via = 2, True
                elif self.dense_ok and term.size > dense_limit:
                    how = 1
            ints.append((term.lo, term.hi, term.column, how))
            floats.append((term.weight * (self.k1 + 1.0), term.bound))
        p = self.postings
        return compiled.topk(
            np.array(ints, dtype=np.int64), np.array(floats, dtype=np.float64), p.post_rows, p.post_tfs,
            self.norms, self.head, _NO_ROWS_MASK if self.mask is None else self.mask,
            self.kept if via else _NO_ROWS, int(k), 1 if self.variant == "bm25l" else 0, float(self.k1),
            float(self.delta), float(constant), _PRUNE_MARGIN, bool(self.prune_ok),
            int(COMPILED_BLOCK or compiled.BLOCK))

    def _is_dense(self, term: _Term) -> bool:
        return self.dense_ok and self.size(term) > DENSE_TERM_FRACTION * self.postings.n_rows

    def _scores(self, terms: list[_Term]) -> tuple[np.ndarray, np.ndarray]:
        """Ascending candidate rows holding one of ``terms``, and those terms' scores."""
        if any(self._is_dense(t) for t in terms):
            s = _scratch(self.postings)
            try:
                self.accumulate(terms, s)
                rows = s.matched()
                return rows, s.scores[rows]
            finally:
                s.reset()
        rows, tfs, weights = self._postings(terms)
        scores = self._contribution(weights, rows, tfs)
        if len(terms) == 1:
            return rows, scores  # one term's postings are ascending and distinct
        s = _scratch(self.postings)
        if rows.size * 32 < self.postings.n_rows:
            # few postings: scatter-add, then read back the sorted distinct rows only
            matched = _sorted_unique(rows)
            try:
                np.add.at(s.scores, rows, scores)  # in the terms' order, like rank_bm25
                return matched, s.scores[matched]
            finally:
                s.scores[matched] = 0.0

        try:
            s.touched.append(rows)
            np.add.at(s.scores, rows, scores)
            s.seen[rows] = True
            matched = s.matched()
            return matched, s.scores[matched]
        finally:
            s.reset()

    def accumulate(self, terms: list[_Term], s: _Scratch) -> None:
        """Add every term's contributions into ``s.scores`` in ``terms``' order, marking rows in ``s.seen``.

        Consecutive sparse terms go in one scatter-add (``np.add.at`` applies
        them in order); each dense term in a pass of its own, in its turn.
        """
        run: list[_Term] = []
        for term in [*terms, None]:
            if term is not None and not self._is_dense(term):
                run.append(term)
                continue
            if run:
                rows, tfs, weights = self._postings(run)
                if rows.size:
                    s.touched.append(rows)
                    np.add.at(s.scores, rows, self._contribution(weights, rows, tfs))
                    s.seen[rows] = True
                run = []
            if term is not None:
                s.wholesale = True
                self._dense_term(s, term)

    def _dense_term(self, s: _Scratch, term: _Term) -> None:
        """Add one very common term with contiguous passes over all rows."""
        if term.column >= 0:
            tf = self.head[term.column]
        else:  # not among the head columns (a corpus with very many common terms)
            tf = s.tf
            tf.fill(0.0)
            tf[self.postings.post_rows[term.lo:term.hi].astype(np.intp)] = \
                self.postings.post_tfs[term.lo:term.hi]
        hit = np.greater(tf, 0, out=s.hit)
        if self.mask is not None:
            np.logical_and(hit, self.mask, out=hit)
        num = np.multiply(tf, term.weight * (self.k1 + 1.0), out=s.work)
        if self.variant == "bm25l":
            # _contribution's operations in its order, so both give the same bits
            if s.work3 is None:
                s.work3 = np.zeros_like(s.work)
            ctd = np.divide(tf, self.norms, out=s.work2)
            num *= np.add(ctd, self.delta, out=s.work3)
            ctd += self.k1
            ctd += self.delta
            num /= ctd
        else:
            num /= np.add(tf, self.norms, out=s.work2)
        s.scores += num  # rows without the term add an exact 0
        np.logical_or(s.seen, hit, out=s.seen)

    def _pruned(self, terms: list[_Term], k: int,
                constant: float = 0.0) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Exact top candidates found without scoring the common terms' rows, or (None, None).

        MaxScore, vectorized.  ``terms`` (canonical order, ascending size)
        split into essential terms, a prefix, and common ones, the rest; the
        candidate rows holding an essential term get their essential
        ("partial") scores, which are their canonical sums so far.  Full scores
        of the rows with the best partial scores give ``theta``, a lower bound
        of the k-th best score.  A row's full score is at most its partial
        score plus the common terms' bounds, so a row holding common terms only
        (partial 0) cannot reach the top k when the bounds sum to less than
        ``theta``, nor can a row whose partial score plus that sum falls short
        — strictly short, so not even by a tie.  Only the rows left get the
        common terms added, in order, so their scores are the canonical sums.
        If the check fails, ``theta`` decides which common terms must become
        essential (the largest ones stay common while their bounds fit under
        it) and the check runs again.  ``constant`` (BM25Plus's, added to every
        score later) widens the safety margin so that adding it cannot round a
        pruned row up to a tie.
        """
        n_rows = self.postings.n_rows
        budget = PRUNE_BUDGET_FRACTION * n_rows
        sizes = [self.size(t) for t in terms]
        if sum(sizes) <= budget:
            return None, None  # every term is rare: scoring them all is cheaper
        # essential: the rarest terms within budget, at least the rarest one (a
        # prefix of the canonical order, even when a floored Okapi idf makes a
        # commoner term the strongest)
        split, size = 1, sizes[0]
        while split < len(terms) and size + sizes[split] <= budget:
            size += sizes[split]
            split += 1
        seed = max(2 * k, 32)
        while split < len(terms) and size <= PRUNE_LIMIT_FRACTION * n_rows:
            common = terms[split:]
            rows, partial = self._scores(terms[:split])
            if rows.size >= k:
                if rows.size <= FULL_SCORE_ROWS:  # few rows: score them all at once
                    best, full = None, self._add_common(common, rows, partial)
                else:  # any rows' full scores bound the k-th score: no need for exact ranks
                    best = np.argpartition(partial, rows.size - seed)[rows.size - seed:] \
                        if seed < rows.size else np.arange(rows.size)
                    full = self._add_common(common, rows[best], partial[best])
                theta = np.partition(full, full.size - k)[full.size - k]
                # a margin far above rounding error keeps the shortcut exact
                limit = theta - 1e-9 * max(1.0, abs(theta), abs(constant))
                bound = sum(t.bound for t in common)
                if bound < limit:
                    if best is None:
                        return rows, full
                    alive = np.flatnonzero(partial >= limit - bound)
                    return rows[alive], self._add_common(common, rows[alive], partial[alive])
                # the largest terms (the order's end) stay common while their bounds fit
                keep, total = len(terms), 0.0
                while keep > split and total + terms[keep - 1].bound < limit:
                    keep -= 1
                    total += terms[keep].bound
                moved = max(keep, split + 1)  # the bounds of all common terms do not fit
            else:  # too few rows to set a threshold: widen with the next rarest term
                moved = split + 1
            size += sum(sizes[split:moved])
            split = moved
        return None, None  # everything became essential: the exhaustive path does it best

    def _add_common(self, common: list[_Term], rows: np.ndarray, partial: np.ndarray) -> np.ndarray:
        """``partial`` plus the common terms' contributions to ``rows``, added in ``common``'s order.

        ``rows`` are distinct (any order) and ``partial`` their scores so far;
        ``partial`` is left as it is.
        """
        out = partial.copy()
        block = None
        if self.dense_ok:
            # head terms all at once: a (terms, rows) block of frequencies from the
            # columns; tf = 0 contributes an exact 0 here, no need to find the holders
            heads = [t for t in common if t.column >= 0]
            if heads:
                columns = np.array([t.column for t in heads])
                tfs = self.head[columns[:, None], rows[None, :]]
                weights = np.array([t.weight for t in heads])[:, None]
                block = iter(self._contribution(weights, rows, tfs))
        s = _scratch(self.postings)
        mapped = False
        try:
            for term in common:
                if term.column >= 0:
                    if block is not None:
                        out += next(block)
                        continue
                    tfs = self.head[term.column][rows]
                    found = np.flatnonzero(tfs)
                    hits, tfs = rows[found], tfs[found]
                else:
                    # rare enough to walk its postings: map rows to positions once
                    if not mapped:
                        s.pos[rows] = np.arange(rows.size, dtype=s.pos.dtype)
                        mapped = True
                    term_rows = self.postings.post_rows[term.lo:term.hi].astype(np.intp)
                    at = s.pos[term_rows]
                    inside = np.flatnonzero(at >= 0)
                    found = at[inside]
                    hits, tfs = term_rows[inside], self.postings.post_tfs[term.lo:term.hi][inside]
                if found.size:
                    out[found] += self._contribution(term.weight, hits, tfs)  # distinct positions
        finally:
            if mapped:
                s.pos[rows] = -1
        return out


def _prepare(postings: Postings, mask: np.ndarray | None, params: BM25Params,
             corpus_mask: np.ndarray | None, stats: BM25Stats | None = None) -> _Scorer:
    if not isinstance(params, BM25Params):
        params = BM25Params.from_mapping(params)
    if stats is not None:
        if not isinstance(stats, BM25Stats):
            raise IrflowError(f"stats must be a BM25Stats (see combine_stats), got {type(stats).__name__}")
        return _Scorer(postings, params, _check_mask(mask, postings.n_rows, "mask"), None, stats)
    if mask is None and corpus_mask is None:
        # no caller arrays involved: the scorer itself can be reused across calls
        return postings.norm_cache.get_or_make(("scorer", params),
                                            lambda: _Scorer(postings, params, None, None))
    mask = _check_mask(mask, postings.n_rows, "mask")
    corpus_mask = _check_mask(corpus_mask, postings.n_rows, "corpus_mask")
    stats_mask = mask if params.stats == "candidates" else corpus_mask
    return _Scorer(postings, params, mask, stats_mask)


def bm25_topk(postings: Postings, query_tokens: Sequence[Sequence[str]], mask: np.ndarray | None,
              fetch_k: int, params: BM25Params = BM25Params(), *,
              corpus_mask: np.ndarray | None = None, stats: BM25Stats | None = None) -> TopK:
    """Top ``fetch_k`` BM25 candidates of each tokenized query, as one ``TopK``.

    ``mask`` (bool, one entry per row; None = every row) selects the
    candidates.  With ``params.stats == "candidates"`` the statistics are
    those of the candidates, so scores equal rank_bm25 built over the
    candidates' token lists in row order; with ``"corpus"`` they are those of
    the rows in ``corpus_mask`` (None = every row, e.g. pass the live rows to
    leave deleted records out of the statistics).  ``stats`` supplies them
    from outside instead (a shard scoring with global statistics, see
    ``combine_stats``); ``params.stats`` and ``corpus_mask`` then play no
    part.  Only candidates containing at least one query token are returned;
    ties break by row order.

    >>> p = Postings.build([["a", "b"], ["b"], ["c"]])
    >>> bm25_topk(p, [["b"], ["zz"]], np.array([True, True, False]), 5).counts().tolist()
    [2, 0]
    """
    n_queries = len(query_tokens)
    scorer = _prepare(postings, mask, params, corpus_mask, stats)
    if fetch_k <= 0 or not scorer.usable or n_queries == 0:
        return TopK.empty(n_queries)
    if n_queries == 1:  # the common case, without the batch bookkeeping
        rows, scores = scorer.top(query_tokens[0], fetch_k)
        return TopK._trusted(np.zeros(rows.size, np.int32), rows, scores, 1,
                             np.array([0, rows.size], dtype=np.int64))
    rows, scores = zip(*(scorer.top(tokens, fetch_k) for tokens in query_tokens))
    return TopK.from_parts(list(rows), list(scores))


def bm25_scores(postings: Postings, query_tokens: Sequence[str], mask: np.ndarray | None,
                params: BM25Params = BM25Params(), *,
                corpus_mask: np.ndarray | None = None, stats: BM25Stats | None = None) -> np.ndarray:
    """The full score vector of one query, ``(n_rows,)`` float64 (for tests and traces).

    Candidates get the score rank_bm25 would give them (including rows with
    no query token: 0, or BM25Plus's constant); other rows get -inf.

    >>> p = Postings.build([["a"], ["b"], ["c"]])
    >>> bm25_scores(p, ["a"], np.array([True, True, False])).round(4).tolist()
    [0.0, 0.0, -inf]
    """
    scorer = _prepare(postings, mask, params, corpus_mask, stats)
    scores = np.zeros(postings.n_rows, dtype=np.float64)
    if scorer.usable:
        terms, constant = scorer.terms(query_tokens)
        scratch = _Scratch(postings.n_rows)
        scorer.accumulate(terms, scratch)
        scores = scratch.scores + constant
    if mask is not None:
        scores[~mask] = -np.inf
    return scores
