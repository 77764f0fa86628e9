"""boost: add a structural score to each candidate, after the reranker, before the collapse.

The seed's ``dep_boost``: a :data:`~irflow.api.constants.ScoreBoost` (``hit ->
float``; :func:`irflow.api.boosts.dependency_evidence_boost` builds one) is
called with each candidate as a :class:`~irflow.store.records.SearchHit` carrying
its current score; the value is added and the candidates are re-sorted
*stably* (equal scores keep their input order, README "Ties").  Scale
``boosted``; provenance ``<stage>.value`` and ``<stage>.input_score``.
Without a boost the stage passes through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from irflow.engine import CANDIDATES, Candidates, Port, Scale, Stage, StageContext, Upstream, is_finite, param, \
    register_stage, registry
from irflow.errors import BoostError

from ._util import callable_or_name

__all__ = ["Boost"]


@register_stage
@attrs.frozen
class Boost(Stage):
    """Add ``boost(hit)`` to each candidate's score and re-sort stably."""

    kind = "boost"
    inputs = (Port("candidates", CANDIDATES, "ranked candidates (reranked, when there is a reranker)"),)
    output = CANDIDATES

    boost: Any = param(None, validator=callable_or_name,
                       doc="hit -> float added to the score (a callable or an irflow.registry name); none: no boost")

    def output_scales(self, inputs: Mapping[str, tuple[Upstream, ...]]) -> frozenset[Scale] | None:
        if self.boost is not None:
            return frozenset({Scale.BOOSTED})
        ups = inputs.get("candidates", ())
        return ups[0].scales if ups else None

    def passes_through(self, live: Mapping[str, int]) -> str | None:
        return "candidates" if self.boost is None else None

    def run(self, ctx: StageContext, candidates: Candidates) -> Candidates:
        boost = registry.resolve(self.boost, what="score boost")
        if boost is None:
            return candidates
        # a ScoreBoost is a per-hit Python callable; the fetched list is small
        returned = [boost(hit) for hit in ctx.corpus.hits(candidates.row, candidates.score)]
        values = np.zeros(len(returned), dtype=np.float64)
        for i, value in enumerate(returned):
            # a number, and one a float holds: a string, None, a list or 10**400 is the boost's bug, named
            if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)) \
                    and is_finite(value):
                values[i] = float(value)
                continue
            shown = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a huge integer"
            raise BoostError(f"score boost {getattr(boost, '__qualname__', boost)!r} returned {shown[:80]} "
                             f"({type(value).__name__}) for row {int(candidates.row[i])}; a boost returns a finite "
                             "number (a float added to the score)")
        columns = {f"{ctx.name}.value": values, f"{ctx.name}.input_score": candidates.score}
        return candidates.with_scores(candidates.score + values, Scale.BOOSTED, columns).sorted_by_score()
