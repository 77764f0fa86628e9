"""expand: each hit's sibling surfaces through the ledger, in plan order — context expansion.

The stage behind retrieve -> expand -> rerank: every candidate (a hit) brings
in the other surfaces of its artifact — all of them, or the neighbours within
``window`` plan positions — optionally only surfaces of ``surface_kind``, so
that a reranker downstream judges the chunks around each hit, not only the
hit.  The rules are those of :mod:`irflow.store.expansion` (ledger-backed, overlapping
windows merged, artifacts in the order of their best hit, each artifact's
surfaces in plan order; tombstoned siblings skipped; a stale ledger entry
skipped with one :class:`~irflow.errors.LedgerWarning` naming the record,
because one torn artifact must not fail a search).

Scores: a sibling carries the score of the hit that brought it (the
best-ranked hit whose window covers it); a surface that is itself a hit keeps
its own.  Nothing is re-scored, so the output keeps the input's scale; the
order is the expansion order, not sorted by score (a later rerank or collapse
sorts).  Provenance:

- ``<stage>.from_row`` — the corpus row of the hit that brought the surface
  (its own row for a hit: a row survives every later reordering, a position
  would not);
- ``<stage>.from_rank`` — that hit's rank in the input;
- ``<stage>.offset`` — the surface's ``surface_index`` minus that hit's
  (0: the hit itself; -1: the surface just before it);
- the input's columns are kept for hits and left empty (NaN / 0 / False) for
  siblings, which no earlier stage scored.

>>> # [stages.expand] kind = "expand"  inputs = ["cut"]  window = 1  surface_kind = ["readme_chunk"]
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from irflow.engine import CANDIDATES, Candidates, Port, Scale, Stage, StageContext, Upstream, fill_value, \
    non_negative_int, optional_str_list, param, register_stage
from irflow.store.expansion import expand_rows, kinds_tuple

__all__ = ["Expand"]


@register_stage
@attrs.frozen
class Expand(Stage):
    """Each candidate with its sibling surfaces (ledger-backed), in plan order per artifact."""

    kind = "expand"
    inputs = (Port("candidates", CANDIDATES, "ranked hits to expand"),)
    output = CANDIDATES

    window: int | None = param(
        None, validator=attrs.validators.optional(non_negative_int),
        doc="siblings within this many plan positions of the hit (0: the hit alone); none: every sibling")
    surface_kind: tuple[str, ...] | None = param(
        None, converter=kinds_tuple, validator=optional_str_list,
        doc="keep only surfaces of this kind or these kinds (the hit included); none: every kind")

    def output_scales(self, inputs: Mapping[str, tuple[Upstream, ...]]) -> frozenset[Scale] | None:
        ups = inputs.get("candidates", ())
        return ups[0].scales if ups else None  # siblings inherit their hit's score: same scale

    def run(self, ctx: StageContext, candidates: Candidates) -> Candidates:
        e = expand_rows(ctx.corpus, candidates.query_index, candidates.row, window=self.window,
                        surface_kind=self.surface_kind)
        is_hit = e.offset == 0
        columns = {}
        for name, column in candidates.provenance.items():
            gathered = column[e.source]
            if not is_hit.all():
                gathered = gathered.copy()
                gathered[~is_hit] = fill_value(column.dtype)
            columns[name] = gathered
        columns[f"{ctx.name}.from_row"] = candidates.row[e.source]
        columns[f"{ctx.name}.from_rank"] = candidates.rank[e.source]
        columns[f"{ctx.name}.offset"] = e.offset
        return Candidates(candidates.queries, e.query_index, e.row, candidates.score[e.source], candidates.scale,
                          columns)
