"""weight: multiply each candidate's score by a weight per surface kind, re-sort, cut.

The seed's ``surface_weights`` (``{"deps": 2.0}`` lets a high-precision
``deps`` surface outrank prose chunks): each candidate's first-stage score —
the fused score in hybrid mode — is multiplied by its kind's weight (1.0 for
kinds not listed; kinds the corpus lacks are ignored).  The whole input (in
hybrid, the fused union) is re-sorted by score, *stably* (equal scores keep
their input order, README "Ties"), and then cut to ``fetch_k`` per query, before
the reranker and the collapse.  Without weights the stage only makes that
cut, in the input's order.  With ``deepen_to`` (one channel that fetches
each text as deep as it must to hold that many artifacts) there is no cut:
the channel chose each text's depth, and only a fused union can exceed it.

Weights must be finite and non-negative.  Output scale ``weighted`` when
weights apply; provenance ``<stage>.factor`` and ``<stage>.input_score``.

>>> Weight(weights={"deps": 2.0}, fetch_k=50).weights
{'deps': 2.0}
>>> Weight(weights={"deps": -1})
Traceback (most recent call last):
...
irflow.errors.WeightError: surface_weights['deps'] is -1; weights must be finite numbers >= 0
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from irflow.engine import CANDIDATES, Candidates, Port, Scale, Stage, StageContext, Upstream, param, \
    positive_int, register_stage
from irflow.engine.validators import check_surface_weights
from irflow.errors import WeightError

from ._util import cut_per_text

__all__ = ["Weight", "WeightError", "check_surface_weights"]

# scores a weight must not multiply: they are no longer first-stage scores
_LATE_SCALES = frozenset({Scale.RERANK, Scale.BOOSTED})


def _weights(instance: Any, attribute: Any, value: Any) -> None:
    check_surface_weights(value)


@register_stage
@attrs.frozen
class Weight(Stage):
    """Multiply scores by a weight per surface kind, re-sort stably, keep the first ``fetch_k``."""

    kind = "weight"
    inputs = (Port("candidates", CANDIDATES, "ranked candidates with first-stage (or fused) scores"),)
    output = CANDIDATES

    weights: Mapping[str, float] | None = param(
        None, validator=_weights, doc="weight per surface kind (default 1.0), finite and >= 0; none: no weighting")
    fetch_k: int | None = param(None, validator=attrs.validators.optional(positive_int),
                                doc="candidates kept per query after the re-sort; none: all")
    subquery_fetch_k: int | None = param(
        None, validator=attrs.validators.optional(positive_int),
        doc="kept per text of a query formulated into several (a sub-search); none: fetch_k")
    deepen_to: int | None = param(
        None, validator=attrs.validators.optional(positive_int),
        doc="set when its one channel fetches deeper to hold this many artifacts (deepen_to): no cut, the "
            "channel chose each text's depth")

    def output_scales(self, inputs: Mapping[str, tuple[Upstream, ...]]) -> frozenset[Scale] | None:
        if self.weights:
            return frozenset({Scale.WEIGHTED})
        ups = inputs.get("candidates", ())
        return ups[0].scales if ups else None

    def check(self, inputs: Mapping[str, tuple[Upstream, ...]]) -> list[str]:
        ups = inputs.get("candidates", ())
        if self.weights and ups and ups[0].scales and ups[0].scales & _LATE_SCALES:
            return [f"weights multiply first-stage scores, but input {ups[0].name!r} may output "
                    f"{'/'.join(sorted(s.value for s in ups[0].scales & _LATE_SCALES))} scores; place the "
                    "weight stage before rerank and boost"]
        return []

    def passes_through(self, live: Mapping[str, int]) -> str | None:
        return "candidates" if not self.weights and not self._cuts else None

    @property
    def _cuts(self) -> bool:
        return self.fetch_k is not None and self.deepen_to is None

    def run(self, ctx: StageContext, candidates: Candidates) -> Candidates:
        if self.weights:
            corpus = ctx.corpus
            # one factor per kind the corpus has; kinds it lacks are simply never looked up
            by_code = np.array([float(self.weights.get(kind, 1.0)) for kind in corpus.kinds], dtype=np.float64)
            factor = by_code[corpus.kind_codes_of(candidates.row)] if len(candidates) else np.empty(0)
            candidates = candidates.with_scores(
                candidates.score * factor, Scale.WEIGHTED,
                {f"{ctx.name}.factor": factor, f"{ctx.name}.input_score": candidates.score},
            ).sorted_by_score()
        if not self._cuts or self.fetch_k is None:
            return candidates
        return cut_per_text(candidates, self.fetch_k, self.subquery_fetch_k)
