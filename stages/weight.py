"""weight: multiply each candidate's score by a weight per surface kind, re-sort, cut.

The seed's ``surface_weights`` (``{"deps": 2.0}`` lets a high-precision
``deps`` surface outrank prose chunks): each candidate's first-stage score —
the fused score in hybrid mode — is multiplied by its kind's weight (1.0 for
kinds not listed; kinds the corpus lacks are ignored).  The whole input (in
hybrid, the fused union) is re-sorted by score, equal scores by corpus row
(lowest first, README "Ties"), and then cut to ``fetch_k`` per query, before
the reranker and the collapse.  Without weights the stage only makes that
cut, in the input's order.

Weights must be finite and non-negative.  Output scale ``weighted`` when
weights apply; provenance ``<stage>.factor`` and ``<stage>.input_score``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from irflow.batches import Candidates, Scale
from irflow.errors import IrflowError
from irflow.ports import CANDIDATES, Port
from irflow.stage import Stage, StageContext, Upstream, is_finite, param, positive_int, register_stage

from ._util import cut_per_text

__all__ = ["Weight", "WeightError", "check_surface_weights"]

# scores a weight must not multiply: they are no longer first-stage scores
_LATE_SCALES = frozenset({Scale.RERANK, Scale.BOOSTED})


class WeightError(IrflowError, ValueError):
    """Surface weights that are not a mapping of kind -> finite non-negative number."""


def check_surface_weights(weights: Any) -> None:
    """Raise :class:`WeightError` unless ``weights`` is None or ``{kind: finite number >= 0}``.

    >>> check_surface_weights({"deps": 2.0, "name": 0})
    """
    if weights is None:
        return
    if not isinstance(weights, Mapping):
        raise WeightError(f"surface_weights must be a mapping of surface kind -> weight (e.g. {{'deps': 2.0}}), "
                          f"got {type(weights).__name__}")
    for kind, weight in weights.items():
        if not isinstance(kind, str):
            raise WeightError(f"surface_weights keys are surface kinds (strings), got {kind!r}")
        number = isinstance(weight, (int, float, np.integer, np.floating)) and not isinstance(weight, (bool, np.bool_))
        if not number or not is_finite(weight) or weight < 0:
            raise WeightError(f"surface_weights[{kind!r}] is {weight!r}; weights must be finite numbers >= 0")


def _weights(instance: Any, attribute: Any, value: Any) -> None:
    check_surface_weights(value)


@register_stage
@attrs.frozen
class Weight(Stage):
    """Multiply scores by a weight per surface kind, re-sort (ties by row), keep the first ``fetch_k``."""

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

    def run(self, ctx: StageContext, candidates: Candidates) -> Candidates:
        if self.weights:
            corpus = ctx.corpus
            # one factor per kind the corpus has; kinds it lacks are simply never looked up
            by_code = np.array([float(self.weights.get(kind, 1.0)) for kind in corpus.kinds], dtype=np.float64)
            factor = by_code[np.asarray(corpus.kind_codes)[candidates.row]] if len(candidates) else np.empty(0)
            candidates = candidates.with_scores(
                candidates.score * factor, Scale.WEIGHTED,
                {f"{ctx.name}.factor": factor, f"{ctx.name}.input_score": candidates.score},
            ).sorted_by_score()
        if self.fetch_k is None:
            return candidates
        return cut_per_text(candidates, self.fetch_k, self.subquery_fetch_k)
