"""Collection statistics BM25 scores against: of the candidates, of the corpus, or supplied from outside.

BM25 scores a row against collection statistics: how many rows (N), their
total length (for the average), each query token's document frequency, and
for Okapi's negative-idf floor the mean idf over the statistics rows' whole
vocabulary.  By default the kernel computes them from the rows it holds
(the candidates, or the corpus).  A corpus split into shards cannot: each
shard holds a part of the rows, so a driver gathers every shard's
``partial_stats`` (phase one), adds them up with ``combine_stats`` and
sends the result back to every shard's ``bm25_topk(..., stats=...)``
(phase two), as Elasticsearch's dfs_query_then_fetch does.  The vocabulary
(every term's df) is exchanged only when a query has a negative Okapi idf
(``BM25Stats.needs_vocabulary``), which common words in small candidate
sets do.  With the same statistics a row gets the same score to the bit on
any shard (see ``irflow.kernels.bm25.scorer``, "Canonical order").
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

import attrs
import numpy as np

from irflow.errors import IrflowError
from irflow.kernels.bm25.params import BM25Params
from irflow.kernels.postings import Postings

__all__ = ["BM25Stats", "PartialStats", "partial_stats", "combine_stats", "mean_okapi_idf"]


def _frozen_counts(value: Mapping[str, int] | None) -> Mapping[str, int] | None:
    if value is None or isinstance(value, MappingProxyType):  # read-only already (a caller's live view: kept)
        return value
    return MappingProxyType({str(t): int(c) for t, c in dict(value).items()})


def _non_negative(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
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

    def __init__(self, key: tuple[Any, ...], n_docs: int, total_length: int,
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
        key: tuple[Any, ...] = ("all",)
        every: _Stats = postings.stats_cache.get_or_make(
            key, lambda: _Stats(key, postings.n_rows, int(postings.doc_lengths.sum(dtype=np.int64))))
        return every
    key = ("mask", postings.mask_digest(rows_mask))
    within: _Stats = postings.stats_cache.get_or_make(
        key, lambda: _Stats(key, int(np.count_nonzero(rows_mask)),
                            int(postings.doc_lengths[rows_mask].sum(dtype=np.int64))))
    return within


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
    postings.check_pending()  # an index read from files: its exact cross-checks, on its first use
    rows = _check_mask(rows, postings.n_rows, "rows")
    stats = _stats(postings, rows)
    offsets, post_rows = postings.term_offsets, postings.post_rows
    cache = stats.df_cache  # the set's df of a term, kept with its cached statistics (as the scorer keeps them)
    df = {}
    for token in dict.fromkeys(tokens):
        term = postings.vocab.get(token)
        if term is None:
            df[token] = 0
            continue
        lo, hi = int(offsets[term]), int(offsets[term + 1])
        if rows is None or lo == hi:  # (a merge's term whose rows all went: no postings, and its lo is another's)
            df[token] = hi - lo
            continue
        found = cache.get(lo)  # a non-empty term is identified by where its postings start
        if found is None:
            found = int(np.count_nonzero(rows[post_rows[lo:hi].astype(np.intp)]))
            if len(cache) >= 1 << 16:
                cache.clear()
            cache[lo] = found
        df[token] = found
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

    norms: tuple[np.ndarray, bool] = postings.norm_cache.get_or_make(key, make)
    return norms


def _idf(params: BM25Params, n_docs: int, df: int, mean_idf: "Any") -> float:
    """Idf of a term in ``df`` of ``n_docs`` documents, as rank_bm25 computes it."""
    if params.variant == "okapi":
        idf = math.log(n_docs - df + 0.5) - math.log(df + 0.5)
        return params.epsilon * mean_idf() if idf < 0 else idf
    if params.variant == "bm25l":
        return math.log(n_docs + 1) - math.log(df + 0.5)
    return math.log((n_docs + 1) / df)


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
