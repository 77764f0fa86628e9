"""filter: a hard metadata filter and a surface restriction -> the candidate mask.

One mask for the whole batch (every query shares the candidate set, as in
the seed's ``search()``), computed by ``corpus.candidate_mask`` — which also
drops deleted rows and caches masks per (filter, surfaces).

    [stages.candidates]
    kind = "filter"
    filter = { owner = "me", stars = { "$gte" = 10 } }
    surfaces = ["name", "description"]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from irflow.engine import MASK, Stage, StageContext, optional_mapping, optional_str_list, param, register_stage
from irflow.kernels.filters import normalize_filter

__all__ = ["Filter"]


def _surfaces(value: Any) -> Any:
    if isinstance(value, str):  # one kind, not its characters (as corpus.candidate_mask reads it)
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return value


def _filter_spec(instance: Any, attribute: Any, value: Any) -> None:
    optional_mapping(instance, attribute, value)
    if value is None:
        return
    normalize_filter(value)  # FilterError (a ValueError) names the operator, its path and the valid ones


@register_stage
@attrs.frozen
class Filter(Stage):
    """Rows that pass ``filter`` and whose surface kind is in ``surfaces`` (live rows only)."""

    kind = "filter"
    inputs = ()
    output = MASK

    filter: Mapping[str, Any] | None = param(
        None, validator=_filter_spec, doc="metadata filter (Mongo-style: $eq $in $gte $exists ...); none: every row")
    surfaces: tuple[str, ...] | None = param(
        None, converter=_surfaces, validator=optional_str_list, doc="surface kinds to keep; none: every kind")

    def run(self, ctx: StageContext, **inputs: Any) -> Any:
        return ctx.corpus.candidate_mask(filter=self.filter, surfaces=self.surfaces)
