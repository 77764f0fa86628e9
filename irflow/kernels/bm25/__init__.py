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

    >>> from irflow.kernels.postings import Postings
    >>> p = Postings.build([["red", "fox"], ["lazy", "dog"], ["red", "dog", "dog"],
    ...                     ["quick", "brown"], ["the", "end"]])
    >>> rows, scores = bm25_topk(p, [["red", "dog"]], None, 10).per_query(0)
    >>> rows.tolist(), scores.round(4).tolist()
    ([2, 0, 1], [0.7195, 0.3508, 0.3508])
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from irflow.errors import BM25ParamError, IrflowError
from irflow.kernels.bm25 import kernel
from irflow.kernels.bm25.batch import top_many
from irflow.kernels.bm25.kernel import KERNEL_ENV, kernel_name, use_kernel
from irflow.kernels.bm25.params import DEFAULT_DELTA, STATS, VARIANTS, BM25Params
from irflow.kernels.bm25.scorer import _Scorer
from irflow.kernels.bm25.scratch import _Scratch
from irflow.kernels.bm25.statistics import (BM25Stats, PartialStats, _check_mask, combine_stats, mean_okapi_idf,
                                            partial_stats)
from irflow.kernels.postings import Postings
from irflow.kernels.topk import TopK

__all__ = [
    "BM25Params", "BM25ParamError", "BM25Stats", "PartialStats", "bm25_topk", "bm25_scores", "bm25_scorer",
    "partial_stats", "combine_stats", "mean_okapi_idf", "VARIANTS", "STATS", "DEFAULT_DELTA",
    "kernel_name", "use_kernel", "KERNEL_ENV",
]


def _prepare(postings: Postings, mask: np.ndarray | None, params: BM25Params,
             corpus_mask: np.ndarray | None, stats: BM25Stats | None = None, stats_key: Any = None,
             lasting: bool = False) -> _Scorer:
    postings.check_pending()  # an index read from files: its exact cross-checks, on its first scoring
    if not isinstance(params, BM25Params):
        params = BM25Params.from_mapping(params)
    if stats is not None:
        if not isinstance(stats, BM25Stats):
            raise IrflowError(f"stats must be a BM25Stats (see combine_stats), got {type(stats).__name__}")
        mask = _check_mask(mask, postings.n_rows, "mask")
        mask_key = None if mask is None else postings.known_digest(mask)
        if stats_key is not None and (mask is None or mask_key is not None):
            # fixed statistics (the caller's key promises it): the scorer and the tokens it looked up serve
            # every call with this key and candidate set
            fixed: _Scorer = postings.stats_cache.get_or_make(
                ("supplied", params, mask_key, stats_key),
                lambda: _Scorer(postings, params, mask, None, stats, True, lasting=lasting))
            return fixed
        return _Scorer(postings, params, mask, None, stats)
    # No caller arrays, or masks that never change (a corpus's, see Postings.remember_mask): the
    # scorer, with its statistics, candidate rows and the tokens it has looked up, serves every call
    mask_key = None if mask is None else postings.known_digest(mask)
    corpus_key = None if corpus_mask is None else postings.known_digest(corpus_mask)
    if (mask is None or mask_key is not None) and (corpus_mask is None or corpus_key is not None):
        stats_mask = mask if params.stats == "candidates" else corpus_mask
        scorer: _Scorer = postings.stats_cache.get_or_make(
            ("scorer", params, mask_key, corpus_key),
            lambda: _Scorer(postings, params, mask, stats_mask, lasting=lasting))
        return scorer
    mask = _check_mask(mask, postings.n_rows, "mask")
    corpus_mask = _check_mask(corpus_mask, postings.n_rows, "corpus_mask")
    stats_mask = mask if params.stats == "candidates" else corpus_mask
    return _Scorer(postings, params, mask, stats_mask)


def bm25_topk(postings: Postings, query_tokens: Sequence[Sequence[str]], mask: np.ndarray | None,
              fetch_k: int, params: BM25Params = BM25Params(), *,
              corpus_mask: np.ndarray | None = None, stats: BM25Stats | None = None, stats_key: Any = None,
              corpus_rows: int | None = None, floor: np.ndarray | None = None, lasting: bool = False) -> TopK:
    """Top ``fetch_k`` BM25 candidates of each tokenized query, as one ``TopK``.

    ``mask`` (bool, one entry per row; None = every row) selects the
    candidates.  With ``params.stats == "candidates"`` the statistics are
    those of the candidates, so scores equal rank_bm25 built over the
    candidates' token lists in row order; with ``"corpus"`` they are those of
    the rows in ``corpus_mask`` (None = every row, e.g. pass the live rows to
    leave deleted records out of the statistics).  ``stats`` supplies them
    from outside instead (a shard scoring with global statistics, see
    ``combine_stats``); ``params.stats`` and ``corpus_mask`` then play no
    part.  ``stats_key`` (with ``stats``): a key under which these statistics
    never change — the caller's promise (a corpus state's, for its segments)
    — so the scorer is kept for the key and candidate set, and each token is
    looked up once; ``stats.df`` may then be a read-only view of a mapping
    the caller fills, before each call, for the call's tokens.
    ``corpus_rows``: the rows of the whole corpus this index is a part of,
    which picks the kernel (see :mod:`irflow.kernels.bm25.kernel`) as for a
    corpus of that size.  ``floor`` (one per query): rows scoring at or
    below it are left out, and pruning starts from it — a part of a corpus
    whose earlier parts (lower rows, winning ties) found ``fetch_k`` rows
    scoring at least that (see :mod:`irflow.store.segments`).  Only
    candidates containing at least one query token are returned; ties break
    by row order.  ``lasting``: ``mask`` is one many queries share (a
    corpus's live rows, no filter): the compiled kernel is then handed NaN
    norms at the rows it leaves out, made once, instead of reading the mask
    per posting (a hint: the answer is the same either way).

    >>> p = Postings.build([["a", "b"], ["b"], ["c"]])
    >>> bm25_topk(p, [["b"], ["zz"]], np.array([True, True, False]), 5).counts().tolist()
    [2, 0]
    """
    n_queries = len(query_tokens)
    scorer = _prepare(postings, mask, params, corpus_mask, stats, stats_key, lasting)
    if fetch_k <= 0 or not scorer.usable or n_queries == 0:
        return TopK.empty(n_queries)
    floors = [-np.inf] * n_queries if floor is None else np.asarray(floor, dtype=np.float64).reshape(-1).tolist()
    if n_queries == 1:  # the common case, without the batch bookkeeping
        rows, scores = scorer.top(query_tokens[0], fetch_k, corpus_rows, floors[0])
        return TopK._trusted(np.zeros(rows.size, np.int32), rows, scores, 1,
                             np.array([0, rows.size], dtype=np.int64))
    compiled = kernel.compiled_module(postings.n_rows if corpus_rows is None else corpus_rows)
    if compiled is not None:  # one compiled call per chunk of queries, chunks on --threads threads
        rows, scores, counts = top_many(compiled, scorer, query_tokens, fetch_k, floors)
        offsets = np.zeros(n_queries + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return TopK._trusted(np.repeat(np.arange(n_queries, dtype=np.int32), counts), rows, scores, n_queries,
                             offsets)
    rows, scores = zip(*(scorer.top(tokens, fetch_k, corpus_rows, low) for tokens, low in zip(query_tokens, floors)))
    return TopK.from_parts(list(rows), list(scores))


def bm25_scorer(postings: Postings, mask: np.ndarray | None, params: BM25Params, stats: BM25Stats,
                stats_key: Any = None, lasting: bool = False) -> Any:
    """The scorer ``bm25_topk(postings, ..., mask, params=params, stats=stats, stats_key=stats_key)`` uses.

    For a caller that scores many parts of one corpus query by query (the
    segments of a corpus, :mod:`irflow.store.segments`): ``scorer.usable``
    (False: no statistics rows, nothing scores), and
    ``scorer.top(tokens, k, corpus_rows, floor)`` -> (rows, scores) of one
    query, best first, as ``bm25_topk`` returns them — without the batch's
    bookkeeping around each call.
    """
    return _prepare(postings, mask, params, None, stats, stats_key, lasting)


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
