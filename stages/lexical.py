"""lexical: BM25 over the candidates, top ``fetch_k`` per query.

Query texts are cut by the corpus analyzer (``corpus.tokenize_queries``,
the one the postings were built with), each distinct text once, and scored
by ``corpus.bm25_topk``: statistics over the candidate rows by default (the
seed's semantics; ``bm25 = { stats = "corpus" }`` for corpus statistics),
only rows containing a query token, scores equal to rank_bm25's.  Output
scale: bm25; provenance ``<stage>.score`` and ``<stage>.rank``.

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

import functools
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from irflow.engine import CANDIDATES, MASK, QUERIES, Candidates, Port, QueryBatch, Scale, Stage, StageContext, \
    Upstream, boolean, optional_mapping, param, positive_int, register_stage
from irflow.kernels.bm25 import BM25Params

from ._util import channel, cut_per_text, deepen, empty_channel, fetch_depth, fetch_depths, first_depths, \
    unique_texts

__all__ = ["Lexical"]


def _bm25_spec(instance: Any, attribute: Any, value: Any) -> None:
    optional_mapping(instance, attribute, value)
    if value is None:
        return
    BM25Params.from_mapping(value)  # BM25ParamError (a ValueError) names the valid keys and ranges


@register_stage
@attrs.frozen
class Lexical(Stage):
    """Top ``fetch_k`` candidates per query by BM25 (only candidates containing a query token)."""

    kind = "lexical"
    inputs = (
        Port("mask", MASK, "the candidate rows (a filter stage's output)"),
        Port("query", QUERIES, "the query batch (the raw queries unless wired to a formulate stage)"),
    )
    output = CANDIDATES

    fetch_k: int = param(50, validator=positive_int, doc="candidates kept per query")
    subquery_fetch_k: int | None = param(
        None, validator=attrs.validators.optional(positive_int),
        doc="depth for each text of a query formulated into several (a sub-search); none: fetch_k")
    bm25: Mapping[str, Any] | None = param(
        None, validator=_bm25_spec,
        doc="BM25 settings: variant (okapi|bm25l|bm25plus), k1, b, epsilon, delta, stats (candidates|corpus)")
    deepen_to: int | None = param(
        None, validator=attrs.validators.optional(positive_int),
        doc="fetch a text deeper (fetch_k doubled) until its candidates hold this many artifacts or no more "
            "match; none: fetch exactly fetch_k")
    lean: bool = param(
        False, validator=boolean,
        doc="with deepen_to, on a corpus of one record per artifact: fetch deepen_to rows, not fetch_k (set "
            "when no later stage reads the depth: no rerank, weights or boost)")

    @functools.cached_property
    def bm25_params(self) -> BM25Params:
        """``bm25`` as :class:`~irflow.kernels.bm25.BM25Params`, resolved once per stage object.

        The engine builds a recipe's stage objects once per recipe and
        arguments (cached under a type-exact key), so a run no longer turns
        the mapping into parameters on every query.
        """
        return BM25Params.from_mapping(self.bm25)

    def output_scales(self, inputs: Mapping[str, tuple[Upstream, ...]]) -> frozenset[Scale]:
        return frozenset({Scale.BM25})

    def unused_params(self, inputs: Mapping[str, tuple[str, ...]]) -> frozenset[str]:
        return frozenset() if self.deepen_to is not None else frozenset({"lean"})  # lean acts with deepen_to only

    def fetch_depths(self, queries: QueryBatch) -> np.ndarray:
        return fetch_depths(queries, self.fetch_k, self.subquery_fetch_k)

    def deeper(self, depth: int) -> "Lexical":
        return attrs.evolve(self, fetch_k=depth, subquery_fetch_k=None, deepen_to=None)

    def run(self, ctx: StageContext, mask: np.ndarray, query: QueryBatch) -> Candidates:
        if len(query) == 0 or not mask.any():
            return empty_channel(query, Scale.BM25, ctx.name)
        texts, inverse = unique_texts(query.texts)
        tokens = ctx.corpus.tokenize_queries(texts)
        fetch_k, subquery_fetch_k = first_depths(ctx.corpus, self.fetch_k, self.subquery_fetch_k, self.deepen_to,
                                                 self.lean)
        topk = ctx.corpus.bm25_topk(tokens, mask, fetch_depth(query, fetch_k, subquery_fetch_k), self.bm25_params)
        found = cut_per_text(channel(query, topk, inverse, Scale.BM25, ctx.name), fetch_k, subquery_fetch_k)
        if self.deepen_to is None:
            return found
        return deepen(ctx.corpus, found, inverse, lambda texts, d: ctx.corpus.bm25_topk(
            [tokens[t] for t in texts.tolist()], mask, d, self.bm25_params), fetch_k, self.deepen_to, ctx.name)
