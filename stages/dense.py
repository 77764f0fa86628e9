"""dense: exact cosine over the candidates, top ``fetch_k`` per query.

An empty or whitespace-only query text finds nothing (as in BM25, where it
has no terms).  Each distinct query text is embedded once (``corpus.embed_queries``) and the
whole batch is scored in one matrix product (``corpus.dense_topk``: it
gathers the candidate rows when the mask is selective, masks afterwards when
it is not).  Output scale: cosine; provenance ``<stage>.score`` and
``<stage>.rank``.

``subquery_fetch_k`` (optional) gives each text of a query that a formulate
stage turned into several texts its own depth: those texts are the seed's
sub-searches, which fetch by their own rule.

``deepen_to`` (optional; the built-in recipes set it to ``k`` for a
per-artifact search over one channel whose ``fetch_k`` the caller did not
set): a text whose ``fetch_k`` candidates hold fewer distinct artifacts asks
again at twice the depth until they hold that many or nothing more matches,
so the collapse keeps the exact per-artifact top ``k`` instead of fewer hits
(texts of a query formulated into several are sub-searches: not deepened).
``lean`` (the built-in recipes set it when no reranker, weights or boost
read the depth): with ``deepen_to``, on a corpus of one record per
artifact, a query's one text fetches ``deepen_to`` rows, not ``fetch_k``
(the same hits: see ``_util.first_depths``).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import numpy as np

from irflow.engine import CANDIDATES, MASK, QUERIES, Candidates, Port, QueryBatch, Scale, Stage, StageContext, \
    Upstream, boolean, param, positive_int, register_stage

from ._util import channel, cut_per_text, deepen, empty_channel, fetch_depth, fetch_depths, first_depths, \
    unique_texts

__all__ = ["Dense"]


@register_stage
@attrs.frozen
class Dense(Stage):
    """Top ``fetch_k`` candidates per query by exact cosine similarity."""

    kind = "dense"
    inputs = (
        Port("mask", MASK, "the candidate rows (a filter stage's output)"),
        Port("query", QUERIES, "the query batch (the raw queries unless wired to a formulate stage)"),
    )
    output = CANDIDATES

    fetch_k: int = param(50, validator=positive_int, doc="candidates kept per query")
    subquery_fetch_k: int | None = param(
        None, validator=attrs.validators.optional(positive_int),
        doc="depth for each text of a query formulated into several (a sub-search); none: fetch_k")
    deepen_to: int | None = param(
        None, validator=attrs.validators.optional(positive_int),
        doc="fetch a text deeper (fetch_k doubled) until its candidates hold this many artifacts or no more "
            "match; none: fetch exactly fetch_k")
    lean: bool = param(
        False, validator=boolean,
        doc="with deepen_to, on a corpus of one record per artifact: fetch deepen_to rows, not fetch_k (set "
            "when no later stage reads the depth: no rerank, weights or boost)")

    def output_scales(self, inputs: Mapping[str, tuple[Upstream, ...]]) -> frozenset[Scale]:
        return frozenset({Scale.COSINE})

    def unused_params(self, inputs: Mapping[str, tuple[str, ...]]) -> frozenset[str]:
        return frozenset() if self.deepen_to is not None else frozenset({"lean"})  # lean acts with deepen_to only

    def fetch_depths(self, queries: QueryBatch) -> np.ndarray:
        return fetch_depths(queries, self.fetch_k, self.subquery_fetch_k)

    def deeper(self, depth: int) -> "Dense":
        return attrs.evolve(self, fetch_k=depth, subquery_fetch_k=None, deepen_to=None)

    def run(self, ctx: StageContext, mask: np.ndarray, query: QueryBatch) -> Candidates:
        if len(query) == 0 or not mask.any():
            return empty_channel(query, Scale.COSINE, ctx.name)
        texts, inverse = unique_texts(query.texts)
        # an empty (whitespace-only) text has no direction: it finds nothing, as it does in BM25,
        # instead of every row tied at an arbitrary score (a loop over distinct texts, not candidates)
        blank = np.fromiter((not text.strip() for text in texts), dtype=bool, count=len(texts))
        if blank.all():
            return empty_channel(query, Scale.COSINE, ctx.name)
        vectors = ctx.corpus.embed_queries(texts)
        fetch_k, subquery_fetch_k = first_depths(ctx.corpus, self.fetch_k, self.subquery_fetch_k, self.deepen_to,
                                                 self.lean)
        topk = ctx.corpus.dense_topk(vectors, mask, fetch_depth(query, fetch_k, subquery_fetch_k))
        found = channel(query, topk, inverse, Scale.COSINE, ctx.name)
        if blank.any():
            found = found.select(~blank[inverse][found.query_index])
        found = cut_per_text(found, fetch_k, subquery_fetch_k)
        if self.deepen_to is None:
            return found  # (a blank text found nothing: it is never deepened)
        return deepen(ctx.corpus, found, inverse, lambda texts, d: ctx.corpus.dense_topk(vectors[texts], mask, d),
                      fetch_k, self.deepen_to, ctx.name)
