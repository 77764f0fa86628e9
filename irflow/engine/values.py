"""How a run's values are shown outside it: as JSON-safe data, and as summaries of non-candidate outputs.

Traces dump stage parameters and provenance with :func:`jsonable`; a loaded
trace keeps masks and hit lists as :class:`Summary` objects (their counts,
not their content); explanations read both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import Enum
from typing import Any

import attrs
import numpy as np

__all__ = ["jsonable", "json_float", "Summary"]


def json_float(value: float) -> Any:
    """A float as JSON can hold it: NaN as None, infinities as ``"inf"`` / ``"-inf"``."""
    if math.isnan(value):
        return None
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: numpy to Python, NaN to None, callables to ``"<module.name>"``.

    Used for stage parameters, which may hold numpy arrays or the Python
    callables a rerank / formulate / boost stage received from the API.

    >>> jsonable({"w": np.float32(0.5), "f": len, "t": (1, np.nan)})
    {'w': 0.5, 'f': '<builtins.len>', 't': [1, None]}
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, Enum):
        return jsonable(value.value)
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return json_float(value)
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if callable(value) and hasattr(value, "__qualname__"):
        return f"<{getattr(value, '__module__', None) or '?'}.{value.__qualname__}>"
    return repr(value)


@attrs.frozen
class Summary:
    """What a loaded trace knows of a value that is not Candidates (a mask, hits): its rendered summary.

    ``fields`` is the dumped dict of the first query, e.g. ``{"count": 40, "size": 40}`` for a mask;
    ``by_query`` holds each query's when they differ (a hit list), and is empty when every query's
    is ``fields`` (a mask is the same for the whole batch).
    """

    type: str
    fields: Mapping[str, Any] = attrs.field(factory=dict)
    by_query: tuple[Mapping[str, Any], ...] = ()

    def of_query(self, query: int) -> Mapping[str, Any]:
        """The dumped dict of original query ``query``."""
        return self.by_query[query] if self.by_query else self.fields

    @property
    def count(self) -> int | None:
        return self.fields.get("count")
