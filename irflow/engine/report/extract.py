"""What a trace page shows, as compact data: one dict a page embeds and renders (in Python and in its script).

The data holds, for a page of queries (``Caps.queries`` at most, said on the
page), per stage: its in and out counts, its top ``Caps.top`` candidates
(record, rank, score as the terminal prints it) with the total count, and a
histogram of all its scores; the final hits' ranks at every stage (the bump
chart) and their paths (:func:`~irflow.engine.explain.explain_row`: each
channel's score and rank, the fusion's arithmetic, weights, rerank, boost,
collapse).  Records are named once (``records``: id, artifact, surface, text
excerpt) and referred to by index, so a record met at every stage of every
query costs its text once.  Every number is the string the terminal prints
(:func:`~irflow.util.table.format_value`), so page and terminal agree.

Cost: each batch is indexed by query once (:class:`BatchIndex`); what is
read per query is a slice of it, so a trace of 1,000 queries of 10 stages of
1,000 candidates makes a page in well under a second.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from irflow.engine.batches import Candidates, QueryBatch
from irflow.engine.events import StageEvent
from irflow.engine.explain import Explanation, explain_row
from irflow.engine.report.locate import BatchIndex
from irflow.engine.stageview import render_count
from irflow.engine.values import Summary, jsonable
from irflow.util.table import format_value
from irflow.util.unicode import visible

if TYPE_CHECKING:  # trace.py imports the pages that import this module
    from irflow.engine.trace import Trace

__all__ = ["Caps", "extract", "output_stage", "PathOf", "path_data", "cut"]

#: The longest query text or parameter value a page shows (the rest is cut with an ellipsis).
MAX_SHOWN = 300

#: Explains one (query, row) of a trace; the default reads the trace (:func:`explain_row`).
PathOf = Callable[[int, int], Explanation | None]


def _positive(_: Any, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


@attrs.frozen
class Caps:
    """How much a page holds: candidates per stage and query, queries per page, hits with a path, ..."""

    top: int = attrs.field(default=50, validator=_positive)       # candidates shown per stage and query
    queries: int = attrs.field(default=100, validator=_positive)  # queries per page
    paths: int = attrs.field(default=20, validator=_positive)     # final hits per query with their path
    bump: int = attrs.field(default=10, validator=_positive)      # final hits per query in the bump chart
    bins: int = attrs.field(default=20, validator=_positive)      # histogram bins


def cut(text: Any, width: int = MAX_SHOWN) -> str:
    """``text`` made visible and cut to ``width`` characters (an ellipsis says so)."""
    shown = visible(text if isinstance(text, str) else str(text))
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def output_stage(trace: "Trace") -> str | None:
    """The stage whose candidates are the run's result: the recipe's output, else the last stage with candidates."""
    names = [e.name for e in trace if isinstance(e.output, Candidates)]
    recipe = trace.recipe
    wanted = getattr(recipe, "output", None)
    if wanted is None:
        recipe_dict = trace.header.get("recipe_dict")
        head = recipe_dict.get("recipe") if isinstance(recipe_dict, dict) else None
        wanted = head.get("output") if isinstance(head, dict) else None
    if isinstance(wanted, str) and wanted in names:
        return wanted
    return names[-1] if names else None


def _params(event: StageEvent) -> list[list[str]]:
    # as the terminal's "params:" line writes each value, cut for a page
    return [[cut(name, 80), cut(json.dumps(jsonable(value), ensure_ascii=False))]
            for name, value in event.params.items()]


def _stages(trace: "Trace") -> list[dict[str, Any]]:
    out = []
    for event in trace:
        view = trace.view(event)
        out.append({"name": cut(event.name, 80), "kind": cut(event.kind, 80), "state": cut(view.state, 40),
                    "from": None if view.passed_from is None else cut(view.passed_from, 80),
                    "scale": view.scale, "ms": f"{float(event.elapsed_ms):.2f}", "params": _params(event),
                    "cand": view.has_candidates and not view.switched_off and view.passed_from is None})
    return out


def _count(value: Any, query: int, index: BatchIndex) -> str:
    """:func:`render_count`, with a batch's count read from its index."""
    if isinstance(value, Candidates):
        return "off" if not value.active else str(index.count(value, query))
    return render_count(value, query)


def _io(trace: "Trace", query: int, index: BatchIndex) -> list[list[str]]:
    """Each stage's in and out counts for ``query``, as ``StageView.in_counts`` / ``out_count`` say them."""
    out = []
    for event in trace:
        counts = [_count(v, query, index) for v in event.inputs.values()
                  if not isinstance(v, QueryBatch) and not (isinstance(v, Summary) and v.type == "queries")]
        produced = "off" if event.status == "inactive" else _count(event.output, query, index)
        out.append([" + ".join(counts) if counts else "-", produced])
    return out


def _histogram(scores: np.ndarray, bins: int) -> list[Any] | None:
    """``[low, high, count per bin...]`` of the finite scores (None when there are none)."""
    finite = scores[np.isfinite(scores)]
    if not finite.size:
        return None
    low, high = float(finite.min()), float(finite.max())
    half = high / 2 - low / 2  # halves: the width of [-1e308, 1e308] is finite
    if half > 0:
        where = np.minimum(((finite / 2 - low / 2) / half * bins).astype(np.int64), bins - 1)
    else:
        where = np.zeros(finite.size, dtype=np.int64)
    return [format_value(low), format_value(high), *np.bincount(where, minlength=bins).tolist()]


class _Records:
    """Rows met on a page, each given one index into ``records`` (identified and excerpted once, together)."""

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []

    def add(self, rows: np.ndarray) -> None:
        self.parts.append(np.asarray(rows, dtype=np.int64))

    def finish(self, trace: "Trace") -> tuple[dict[int, int], list[list[Any]]]:
        rows = np.unique(np.concatenate(self.parts)) if self.parts else np.empty(0, np.int64)
        record_ids, artifacts, kinds = trace.identify(rows)
        texts = trace.excerpts(rows)
        records = [[None if v is None else cut(v, 200) for v in fields]
                   for fields in zip(record_ids, artifacts, kinds, texts)]
        return {row: i for i, row in enumerate(rows.tolist())}, records


@functools.lru_cache(maxsize=4096)
def _name(text: str) -> str:
    """A column name or label, cut (the same few names recur on every step of every path)."""
    return cut(text, 120)


def _step(step: Any) -> list[Any]:
    """``[stage, kind, in output (1/0/None), rank, score, scale, status, note, [[label, value, column]...]]``."""
    details = [[_name(d.label), format_value(d.value) if not isinstance(d.value, (list, dict)) else
                cut(json.dumps(d.value, ensure_ascii=False), 120), _name(d.column)] for d in step.details]
    present = None if step.present is None else int(bool(step.present))
    return [_name(step.stage), None if step.kind is None else _name(step.kind), present, step.rank,
            format_value(step.score), step.scale, _name(step.status or "-"), cut(step.note), details]


def path_data(explanation: Explanation) -> list[Any]:
    """An explanation as a page holds it: ``[rank, score, scale, notes, steps]`` (see :func:`_step`)."""
    return [explanation.rank, format_value(explanation.score), explanation.scale,
            [cut(n) for n in explanation.notes], [_step(s) for s in explanation.steps]]


def _first_distinct(rows: np.ndarray, n: int) -> list[int]:
    """The first ``n`` distinct rows, in order (a reformulated query lists a row once per sub-query)."""
    _, first = np.unique(rows, return_index=True)
    found: list[int] = rows[np.sort(first)][:n].tolist()
    return found


def _query(trace: "Trace", query: int, caps: Caps, index: BatchIndex, final: str | None,
           path_of: PathOf, records: _Records) -> dict[str, Any]:
    """One query's part of the page data (rows as corpus rows: turned into record indexes at the end)."""
    tables: list[Any] = []
    hist: list[Any] = []
    final_rows = np.empty(0, np.int64)
    for event in trace:
        output = event.output
        view = trace.view(event)
        if not view.has_candidates or view.switched_off:
            tables.append(None)
            hist.append(None)
            continue
        positions = index.query_positions(output, query)
        shown = positions[: caps.top]
        rows = output.row[shown]
        if event.name == final:
            final_rows = output.row[positions]
        if view.passed_from is not None:  # said in one line: its table is its input's
            tables.append(None)
            hist.append(None)
            continue
        records.add(rows)
        scores = [format_value(s) for s in output.score[shown].tolist()]
        tables.append({"n": int(positions.size),
                       "rows": [[r, k, s] for r, k, s in zip(rows.tolist(), output.rank[shown].tolist(), scores)]})
        hist.append(_histogram(output.score[positions], caps.bins))
    bump_rows = _first_distinct(final_rows, caps.bump) if final_rows.size else []
    path_rows = _first_distinct(final_rows, caps.paths) if final_rows.size else []
    wanted = np.array(sorted(set(bump_rows) | set(path_rows)), dtype=np.int64)
    if wanted.size:  # each batch these hits are looked up in, searched once for all of them
        for event in trace:
            for value in (event.output, *event.inputs.values()):
                if isinstance(value, Candidates) and value.active:
                    index.prefetch(value, query, wanted)
    ranks = []
    for row in bump_rows:
        line: list[int | None] = []
        for event in trace:
            output = event.output
            if not isinstance(output, Candidates) or not output.active:
                line.append(None)
                continue
            at = index.position(output, query, row)
            line.append(0 if at is None else int(output.rank[at]))
        ranks.append(line)
    paths = []
    for row in path_rows:
        explanation = path_of(query, row)
        if explanation is not None:
            paths.append([row, *path_data(explanation)])
    records.add(np.array(bump_rows + [p[0] for p in paths], dtype=np.int64))
    originals = trace.queries.originals if trace.queries is not None else ()
    return {"q": query, "text": cut(originals[query] if query < len(originals) else ""),
            "io": _io(trace, query, index), "tables": tables, "hist": hist,
            "bump": {"hits": bump_rows, "ranks": ranks}, "paths": paths}


def _renumber(part: dict[str, Any], number: dict[int, int]) -> None:
    """Corpus rows -> record indexes, in place."""
    for table in part["tables"]:
        if table is not None:
            for entry in table["rows"]:
                entry[0] = number[entry[0]]
    part["bump"]["hits"] = [number[r] for r in part["bump"]["hits"]]
    for path in part["paths"]:
        path[0] = number[path[0]]


def extract(trace: "Trace", queries: Sequence[int], caps: Caps = Caps(), *, path_of: PathOf | None = None,
            final: str | None = None) -> dict[str, Any]:
    """The page data of ``queries`` (original query indexes) of ``trace``.

    ``path_of(query, row)`` explains a final hit (default: from the trace,
    every stage); ``final`` names the result's stage (default: :func:`output_stage`).
    """
    index = BatchIndex(trace.n_queries)
    final = final if final is not None else output_stage(trace)
    stages = _stages(trace)
    stage_of = {event.name: i for i, event in enumerate(trace)}

    def from_trace(query: int, row: int) -> Explanation:
        return explain_row(trace, row, query=query, output_stage=final, locate=index)

    records = _Records()
    parts = [_query(trace, q, caps, index, final, path_of or from_trace, records) for q in queries]
    number, named = records.finish(trace)
    for part in parts:
        _renumber(part, number)
    return {"stages": stages, "final": stage_of.get(final) if final is not None else None, "queries": parts,
            "records": named, "caps": attrs.asdict(caps), "n_queries": trace.n_queries}
