"""The notebook view of a candidate batch (``Candidates._repr_html_``): its scale, counts, and top rows.

Kept apart from the other views because :mod:`irflow.engine.batches`, at the
bottom of the engine, imports it: it needs nothing of a corpus or a trace.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from irflow.engine.report.render import QUERIES, ROWS, table, view
from irflow.engine.values import jsonable
from irflow.util.html import el
from irflow.util.table import format_value
from irflow.util.unicode import visible

if TYPE_CHECKING:  # batches.py imports this module
    from irflow.engine.batches import Candidates

__all__ = ["candidates_view"]


def _cell(value: Any) -> str:
    plain = jsonable(value)
    text = json.dumps(plain, ensure_ascii=False) if isinstance(plain, (list, dict)) else format_value(plain)
    text = visible(text)
    return text if len(text) <= 120 else text[:119] + "…"


def candidates_view(candidates: Candidates) -> str:
    """A candidate batch: its scale and counts, the top rows of its first queries with their provenance."""
    head = el("p", {}, el("strong", {}, "Candidates"), f" · scale {candidates.scale.value} · {len(candidates)} "
                                                      f"candidates · {candidates.n_queries} query texts"
              + ("" if candidates.active else " · switched off"))
    columns = list(candidates.provenance)[:12]
    parts: list[Any] = [head]
    for q in range(min(candidates.n_queries, QUERIES)):
        s = candidates.query_slice(q)
        positions = np.arange(s.start, min(s.stop, s.start + ROWS))
        rows = [[int(candidates.rank[p]), format_value(float(candidates.score[p])), int(candidates.row[p])]
                + [_cell(candidates.provenance[c][p]) for c in columns] for p in positions.tolist()]
        parts.append(el("p", {}, f"query text {q}: {_cell(candidates.queries.texts[q])} — {s.stop - s.start} candidates"))
        parts.append(table(["rank", "score", "row", *columns], rows, numeric=[True, True, True]))
    return view(*parts)
