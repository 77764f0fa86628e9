"""The numpy BM25 kernel: one query's terms, contributions and top k over a candidate set.

Per query, each distinct known term contributes ``weight * saturation(tf, row)``
to the rows that contain it; rows lacking it get 0 (BM25Plus: the constant
``weight * delta``, added to every returned row at the end).  The ways to add
those up, all exact, chosen per query:

* pruned (MaxScore): score only the rows of the rarer ("essential") terms and
  look the common terms' frequencies up in those rows; a row holding common
  terms only cannot reach the k-th score found when the common terms' upper
  bounds sum to less.  Most multi-term queries end here, touching a few
  thousand postings instead of most of the corpus.
* sparse: the terms' postings concatenated, contributions computed in one
  pass, summed per row by a stable sort (few postings) or a scatter-add into
  a reusable dense buffer of which only the touched entries are reset;
* dense: a term in a large share of the rows is added with contiguous passes
  over its dense frequency column (``Postings.head_columns``) instead of
  gathers and scatters over most of the corpus;
* compiled (numba installed): ``irflow.kernels.bm25.compiled`` does the same work
  in one compiled call per query, block of rows by block of rows, with the
  same terms, order and arithmetic, so the same bits.

Top-k selection then runs over the matched rows only: selecting among all n
rows, mostly zeros, is what dominates at scale otherwise.

Canonical order.  Float addition is not associative, so every path adds a
row's contributions in one fixed order: the terms' order in ``terms()``,
ascending by document frequency in the statistics rows, ties by the token
itself (its string: term ids are local to one index, tokens are not),
starting from 0 and skipping absent terms (adding an exact 0 changes
nothing).  Both keys are global quantities: a shard scoring with the
global statistics orders a row's terms exactly as one machine does, so
the row gets the same bits wherever it lives.  Within one index a row's
score is bit-identical whichever path computed it, so equal scores tie
exactly, ties break by row order, and the top ``j`` is the prefix of the
top ``n`` for any ``j < n``.  MaxScore's essential terms are a prefix of
that order (the rarest by df; the scoring cost of a term, its local
postings or the candidates, only decides how long the prefix is): a row's
partial score is its canonical sum so far, and the common terms are added
on top, in order, with no term scored twice.  BM25Plus's constant (its
``idf * delta`` per known token, present in the row or not) is summed in
the same order over every token the statistics know, held locally or not.
"""

from __future__ import annotations

import collections
from typing import Any, Sequence

import numpy as np

from irflow.errors import IrflowError
from irflow.kernels.bm25 import kernel
from irflow.kernels.bm25.params import BM25Params
from irflow.kernels.bm25.pruning import add_common, pruned
from irflow.kernels.bm25.scratch import _scratch, _Scratch, _sorted_unique, _Term
from irflow.kernels.bm25.statistics import BM25Stats, _idf, _mean_okapi_idf, _norms, _Stats, _stats
from irflow.kernels.postings import Postings
from irflow.kernels.topk import topk_rows

__all__ = ["DENSE_TERM_FRACTION"]

#: A term whose postings cover more than this fraction of the rows is scored
#: with dense passes over all rows; measured crossover on 100k rows: about 1/5.
DENSE_TERM_FRACTION = 0.2
#: Relative margin under the k-th score below which pruning drops a row (far above rounding error).
_PRUNE_MARGIN = 1e-9
_NO_ROWS = np.empty(0, dtype=np.int64)
_NO_ROWS_MASK = np.empty(0, dtype=bool)
_NO_NORMS = np.empty(0, dtype=np.float64)


def _ro(array: np.ndarray) -> np.ndarray:
    """A read-only view (O(1)): numba compiles writable and read-only arrays apart, so one type serves all."""
    if not array.flags.writeable:
        return array
    view = array.view()
    view.setflags(write=False)
    return view


def _empty_columns(head: np.ndarray) -> np.ndarray:
    """No columns, in the head columns' dtype and layout (one compiled signature with or without them)."""
    return np.empty((head.shape[0], 0), dtype=head.dtype)
#: Largest copy of the head columns at a filter's candidate rows a scorer keeps (see ``kept_head``).
KEPT_HEAD_BYTES = 8 << 20


class _Scorer:
    """Scores queries against one candidate set with fixed statistics."""

    def __init__(self, postings: Postings, params: BM25Params, mask: np.ndarray | None,
                 stats_mask: np.ndarray | None, supplied: BM25Stats | None = None, fixed: bool = False, *,
                 lasting: bool = False) -> None:
        self.postings = postings
        # the mask serves many queries (a corpus's live rows): the compiled kernel drops the rows it leaves
        # out by NaN norms (see _compiled_arrays)
        self.lasting = lasting
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
        self._kept_head: np.ndarray | None = None
        self._kept_norms: np.ndarray | None = None
        self._n_kept: int | None = None
        self.dense_ok = False
        self.head_index, self.head = postings.head_columns()
        self._tokens: dict[str, tuple[int, int, int, int, float, float]] = {}  # see terms()
        # supplied statistics that never change (bm25_topk's stats_key): tokens are looked up once, too
        self.fixed = fixed
        self._compiled_cache: dict[tuple[bool, bool], tuple[np.ndarray, ...]] = {}  # see _compiled_arrays()
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
        if self.stats_mask is None or lo == hi:  # an empty term (a merge's) shares its lo with the next term
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
                if supplied is None or self.fixed:  # fixed statistics: a reused scorer looks a token up once
                    if len(cache) >= 1 << 16:
                        cache.clear()
                    cache[token] = known
            if known[0] == 0:
                continue  # unknown to the statistics corpus: rank_bm25's idf.get() -> 0
            found.append((known, token, count))
        found.sort(key=lambda f: (f[0][0], f[1]))
        terms, constant = [], 0.0
        for (_df, lo, hi, column, idf, top_tf), _token, count in found:
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
            supplied_df = supplied.df.get(token)
            if supplied_df is None:
                raise IrflowError(
                    f"the supplied bm25 statistics have no document frequency for query token {token!r}; "
                    "compute them for every distinct token of the batch (partial_stats / combine_stats)"
                )
            df = supplied_df
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
            mask, p = self._candidate_mask(), self.postings
            # cached per candidate set: a corpus's masks are digested once (Postings.remember_mask)
            self._kept = p.stats_cache.get_or_make(("kept", p.mask_digest(mask)), lambda: np.flatnonzero(mask))
        return self._kept

    @property
    def kept_head(self) -> np.ndarray:
        """The head columns at the candidate rows, ``(heads, candidates)``, or an empty array when large.

        A selective filter reads common terms from their columns at the
        candidates; gathered from the full columns that is a cache miss per
        candidate and term (about 60 µs per term for 10k candidates of 1M
        rows), from this copy a sequential read.  Made once per candidate set
        (this scorer is cached with its mask), within ``KEPT_HEAD_BYTES``.
        """
        if self._kept_head is None:
            kept = self.kept
            size = self.head.shape[0] * kept.size * self.head.itemsize
            self._kept_head = np.ascontiguousarray(self.head[:, kept]) if 0 < size <= KEPT_HEAD_BYTES \
                else _empty_columns(self.head)
        return self._kept_head

    @property
    def kept_norms(self) -> np.ndarray:
        """The length norms at the candidate rows when ``kept_head`` holds their columns (else empty)."""
        if self._kept_norms is None:
            self._kept_norms = self.norms[self.kept] if self.kept_head.shape[1] else _NO_NORMS
        return self._kept_norms

    @property
    def n_kept(self) -> int:
        """Number of candidate rows (from the cached statistics when they are the candidates')."""
        if self._n_kept is None:
            self._n_kept = self.stats.n_docs if self.stats_mask is self.mask \
                else int(np.count_nonzero(self._candidate_mask()))
        return self._n_kept

    def _candidate_mask(self) -> np.ndarray:
        """The candidate mask, for what only a masked scorer asks (``kept``, ``n_kept``: see ``_via_column``)."""
        if self.mask is None:
            raise IrflowError("bm25 scorer: the candidate rows were asked of a scorer without a candidate mask")
        return self.mask

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
            saturated: np.ndarray = scale * tfs * (ctd + self.delta) / (self.k1 + ctd + self.delta)
            return saturated
        out: np.ndarray = tfs * scale
        out /= norms + tfs  # okapi and bm25plus share the saturation term
        return out

    # -- query ------------------------------------------------------------------------

    def top(self, tokens: Sequence[str], k: int, corpus_rows: int | None = None,
            floor: float = -np.inf) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of the top ``k`` candidates containing a query token, above ``floor`` (see bm25_topk)."""
        terms, constant = self.terms(tokens)
        if not terms or (floor > -np.inf and self.prune_ok and sum(t.bound for t in terms) + constant
                         < floor - _PRUNE_MARGIN * max(1.0, abs(floor), abs(constant))):
            # no row here can score above the floor (the bounds with a margin far above rounding error)
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        compiled = kernel.compiled_module(self.postings.n_rows if corpus_rows is None else corpus_rows)
        if compiled is not None:
            return self._compiled_top(compiled, terms, k, constant, floor)
        rows, scores = self._pruned(terms, k, constant) if self.prune_ok and len(terms) > 1 else (None, None)
        if rows is None or scores is None:  # both or neither
            rows, scores = self._scores(terms)
        if constant:
            # before selecting: sums that differ can round to one score once it is
            # added, and those ties must go by row order too
            scores = scores + constant
        if floor > -np.inf:  # what an earlier part of the corpus beats already (see bm25_topk)
            above = np.flatnonzero(scores > floor)
            rows, scores = rows[above], scores[above]
        pick = topk_rows(scores, k)  # rows are ascending: index ties are row ties
        scores = scores[pick]
        scores += 0.0  # -0.0 (all of a row's weights -0.0) becomes 0.0 whichever path summed it
        return rows[pick].astype(np.int64), scores

    def _compiled_top(self, compiled: Any, terms: list[_Term], k: int,
                      constant: float, floor: float = -np.inf) -> tuple[np.ndarray, np.ndarray]:
        """The same top ``k`` as the numpy paths, by the compiled kernel (``irflow.kernels.bm25.compiled``).

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
        term_ints, term_floats = np.array(ints, dtype=np.int64), np.array(floats, dtype=np.float64)
        term_ints.flags.writeable = False  # new arrays: frozen in place (numba's read-only signature)
        term_floats.flags.writeable = False
        top: tuple[np.ndarray, np.ndarray] = compiled.topk(
            term_ints, term_floats, *self._compiled_arrays(via), int(k), 1 if self.variant == "bm25l" else 0,
            float(self.k1), float(self.delta), float(constant), _PRUNE_MARGIN, bool(self.prune_ok),
            int(kernel.COMPILED_BLOCK or compiled.BLOCK), float(floor))
        return top

    def _compiled_arrays(self, via: bool) -> tuple[np.ndarray, ...]:
        """The scorer's fixed arrays as the compiled kernel takes them (read-only), made once per scorer.

        Postings, norms, head columns, mask and — when a term is read from
        the candidates' columns (``via``) — the candidates' rows, columns and
        norms; a reused scorer hands the same views to every query.
        A ``lasting`` scorer's mask serves many queries (a segment's live
        rows): its rows left out are given a NaN norm instead, in a copy of
        the norms made once, and no mask is passed (the kernel then drops
        them without reading a mask per posting; ``compiled._scan``).
        """
        drop = self.lasting and self.mask is not None and not via
        arrays = self._compiled_cache.get((via, drop))
        if arrays is None:
            p = self.postings
            norms, mask = self.norms, _NO_ROWS_MASK if self.mask is None else self.mask
            if drop:
                norms, mask = np.where(mask, norms, np.nan), _NO_ROWS_MASK
            kept, kept_head, kept_norms = (self.kept, self.kept_head, self.kept_norms) if via else \
                (_NO_ROWS, _empty_columns(self.head), _NO_NORMS)
            arrays = tuple(_ro(a) for a in (p.post_rows, p.post_tfs, norms, self.head, mask, kept, kept_head,
                                            kept_norms))
            self._compiled_cache[(via, drop)] = arrays
        return arrays

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
        """MaxScore's exact top candidates, or (None, None): see ``irflow.kernels.bm25.pruning.pruned``."""
        return pruned(self, terms, k, constant)

    def _add_common(self, common: list[_Term], rows: np.ndarray, partial: np.ndarray) -> np.ndarray:
        return add_common(self, common, rows, partial)
