"""collapse: best surface per (source, artifact) per original query, cut to ``k``.

Merges formulated sub-queries back to their original query
(``QueryBatch.origin``) and collapses surface hits the way the seed does:

- ``per_artifact = true`` (default): for each original query, the best
  surface of each (source, artifact) — highest score, and on a tie the one
  that came first in the input (earlier sub-query, then better rank): the
  surface that ranked first, not the artifact's lowest row;
- ``per_artifact = false``: each record once, with its best score (a tie:
  its earlier entry).

The survivors are sorted by score, *stably* — equal scores keep the order in
which their artifact (or record) first appeared in the input, as the seed's
dict of best hits keeps it (README "Ties") — and cut to ``k``.

``subquery_k`` reproduces the seed's multi-query formulation: when an
original query was formulated into several texts, each text is a sub-search
that returns only its best ``subquery_k`` records (sorted by score, stably)
before the union merges; a query formulated into one text is untouched.
Vectorized with lexsort; no per-candidate Python loop.  The output's
queries are the original batch; provenance gains ``<stage>.merged`` (how
many entries collapsed into this one), ``<stage>.input_rank`` and
``<stage>.subquery`` (the winning entry's rank and query text index in the
input).  A corpus holds one source, so the source part of the key is
constant within a run.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import numpy as np

from irflow.engine import CANDIDATES, Candidates, Port, Promise, QueryBatch, Scale, Stage, StageContext, Upstream, \
    boolean, param, positive_int, register_stage

from ._util import artifact_codes, distinct_pairs, row_artifact_codes, several_texts

__all__ = ["Collapse", "KEYS", "artifact_codes"]

#: What identifies a result for the per-artifact collapse.
KEYS: tuple[str, ...] = ("source+artifact",)


@register_stage
@attrs.frozen
class Collapse(Stage):
    """Best surface per artifact (or each record once) per original query, top ``k``."""

    kind = "collapse"
    inputs = (Port("candidates", CANDIDATES, "ranked candidates (possibly of formulated sub-queries)"),)
    output = CANDIDATES

    k: int = param(10, validator=positive_int, doc="results kept per original query")
    per_artifact: bool = param(True, validator=boolean,
                               doc="true: best surface per artifact; false: each record once")
    key: str = param("source+artifact", choices=KEYS, doc="what identifies an artifact")
    subquery_k: int | None = param(
        None, validator=attrs.validators.optional(positive_int),
        doc="records kept per text of a query formulated into several, before they merge; none: all")

    def output_scales(self, inputs: Mapping[str, tuple[Upstream, ...]]) -> frozenset[Scale] | None:
        ups = inputs.get("candidates", ())
        return ups[0].scales if ups else None

    def promised(self) -> Promise:
        return Promise(self.k, self.per_artifact)

    def run(self, ctx: StageContext, candidates: Candidates) -> Candidates:
        if self.subquery_k is not None and len(candidates.queries) > 1:  # one text is no sub-query
            candidates = _cut_subqueries(candidates, self.subquery_k)
        root = candidates.queries.root()
        m = len(candidates)
        if m == 0:  # nothing found (an empty query, a filter that keeps nothing): nothing to merge
            return _chosen(ctx.name, candidates, root, np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32))
        if self.per_artifact and len(candidates.queries) == 1:  # one text (every search()): a set of its ids
            artifacts = ctx.corpus.artifact_ids_of(candidates.row)
            if len(set(artifacts.tolist())) == m:
                return self._distinct(ctx, candidates, root)
            return self._grouped(ctx, candidates, root, artifact_codes(artifacts))
        # a batch: each query's groups distinct (queries may share them) -> nothing to merge
        codes = row_artifact_codes(ctx.corpus, candidates.row) if self.per_artifact else candidates.row
        if distinct_pairs(candidates.origin_index, codes):
            return self._distinct(ctx, candidates, root)
        return self._grouped(ctx, candidates, root, codes)

    def _grouped(self, ctx: StageContext, candidates: Candidates, root: QueryBatch, codes: np.ndarray) -> Candidates:
        """The best entry of each (original query, ``codes``) group, ``merged`` counting the group, top ``k``."""
        m = len(candidates)
        score = candidates.score
        origin = candidates.origin_index.astype(np.int64)
        # best entry of each (query, key) group: highest score, then the earliest in the input (lexsort is
        # stable: equal keys keep their input order)
        order = np.lexsort((-score, codes, origin))
        g_origin, g_code = origin[order], codes[order]
        starts = np.ones(m, dtype=bool)
        starts[1:] = (g_origin[1:] != g_origin[:-1]) | (g_code[1:] != g_code[:-1])
        start_at = np.flatnonzero(starts)
        winners = order[starts]
        merged = np.diff(np.append(start_at, m))
        # the winners by score, stably: a tie goes to the group that appeared first in the input (the
        # seed's dict keeps a key where it was first inserted, whatever later entry wins its value)
        first_seen = np.minimum.reduceat(order, start_at)
        final = np.lexsort((first_seen, -score[winners], origin[winners]))
        # the cut to k: position within each original query's (sorted) run
        sorted_origin = origin[winners[final]]
        run_start = np.searchsorted(sorted_origin, sorted_origin, side="left")
        final = final[np.arange(final.size) - run_start < self.k]
        return _chosen(ctx.name, candidates, root, winners[final], merged[final].astype(np.int32))

    def _distinct(self, ctx: StageContext, candidates: Candidates, root: QueryBatch) -> Candidates:
        """:meth:`run` when every candidate is a group of its own (distinct artifacts, or distinct rows).

        Every group is one entry, its own winner (``merged`` = 1), first seen
        where it stands, so the general path reduces to one stable sort by
        query and score and the cut to ``k`` — the same entries, in the same
        order, without grouping (a fixed cost of every ``search()``).
        """
        score = candidates.score
        if len(candidates.queries) == 1:  # one query text (every search()): one ranking, cut to k
            chosen = np.argsort(-score, kind="stable")[:self.k]
            return _chosen(ctx.name, candidates, root, chosen, np.ones(chosen.size, dtype=np.int32))
        origin = candidates.origin_index.astype(np.int64)
        if _ranked_by_origin(origin, score):  # a channel's output as it comes: already in this order
            final = np.arange(origin.size)
        else:
            final = np.lexsort((-score, origin))  # stable: equal scores keep their input order
        sorted_origin = origin[final]
        run_start = np.searchsorted(sorted_origin, sorted_origin, side="left")
        chosen = final[np.arange(final.size) - run_start < self.k]
        return _chosen(ctx.name, candidates, root, chosen, np.ones(chosen.size, dtype=np.int32))


def _chosen(name: str, candidates: Candidates, root: QueryBatch, chosen: np.ndarray,
            merged: np.ndarray) -> Candidates:
    """The chosen entries (ordered by original query, then rank) as a batch of the original queries."""
    input_rank, subquery = candidates.rank[chosen], candidates.query_index[chosen]
    for column in (merged, input_rank, subquery):  # new arrays (fancy indexing copies): frozen in place,
        column.flags.writeable = False  # as a batch's columns are, so they are taken as they are
    columns = {f"{name}.merged": merged, f"{name}.input_rank": input_rank, f"{name}.subquery": subquery}
    if root is candidates.queries:  # no formulated texts: the query index is the origin, taken as it is
        return candidates.take(chosen, columns)  # chosen: ordered by query, then rank
    columns.update((n, column[chosen]) for n, column in candidates.provenance.items())
    return Candidates(root, candidates.origin_index[chosen], candidates.row[chosen], candidates.score[chosen],
                      candidates.scale, columns)


def _ranked_by_origin(origin: np.ndarray, score: np.ndarray) -> bool:
    """Whether entries are already by origin, then score descending (what a stable sort would leave as is)."""
    step = origin[1:] - origin[:-1]
    return bool((step >= 0).all() and ((step > 0) | (score[1:] <= score[:-1])).all())


def _cut_subqueries(candidates: Candidates, k: int) -> Candidates:
    """Each sub-query text's best ``k`` candidates, best first (stable); other texts untouched.

    A sub-search's own collapse (``per_artifact=false``) sorts its ranking by
    score, stably, and cuts it to ``k``; its rows are already distinct.
    """
    several = several_texts(candidates.queries)
    if not several.any() or len(candidates) == 0:
        return candidates
    sub = several[candidates.query_index]
    # sub-query entries by score, stably (lexsort keeps equal keys in place); the others keep their order
    order = np.lexsort((np.where(sub, -candidates.score, 0.0), candidates.query_index))
    ordered = candidates.take(order)
    keep = ~sub[order] | (ordered.rank <= k)
    return ordered if bool(keep.all()) else ordered.select(keep)
