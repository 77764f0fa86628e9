"""The diff of two traces as one self-contained HTML page: per query, what entered, left, moved and was rescored.

One stage is compared across the two traces (default: the result's stage),
query by query (the same index; a query whose text differs is said, not
compared): the records that entered, left or moved, and those rescored at
the same rank, with their ranks, scores, the score change when both sides
are on one scale (else the page says the scores are different quantities)
and the start of each record's text.  The numbers are those of
``irflow trace diff`` (:func:`~irflow.engine.diff.diff_rankings`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from irflow.engine.batches import Candidates
from irflow.engine.diff import Change, Diff, diff_rankings
from irflow.engine.report.assets import SCRIPT, STYLE
from irflow.engine.report.extract import Caps, cut, output_stage
from irflow.engine.report.render import diff_nodes, fmt, shown
from irflow.engine.report.tracepage import page_of
from irflow.errors import NotInTrace
from irflow.util.html import el, join, page, script_json
from irflow.util.table import format_value

if TYPE_CHECKING:  # trace.py imports this module
    from irflow.engine.trace import Trace

__all__ = ["diff_page", "diff_stage", "diff_part"]

_COLUMNS = ("old rank", "new rank", "moved", "old score", "new score", "score change", "artifact", "surface", "record",
            "text")


def diff_stage(before: "Trace", after: "Trace", stage: str | None) -> str:
    """The stage to compare: ``stage`` (in both traces), else ``before``'s result stage when ``after`` has it."""
    if stage is not None:
        before.event(stage)
        after.event(stage)  # NotInTrace names the stages that file has
        return stage
    wanted = output_stage(before)
    common = [e.name for e in before if isinstance(e.output, Candidates) and e.name in after.stages]
    if wanted is not None and wanted in after.stages:
        return wanted
    if common:
        return common[-1]
    raise NotInTrace(f"the two traces have no stage with candidates in common (stages: {', '.join(before.stages)} "
                     f"and {', '.join(after.stages)}); name one with stage=NAME (--stage NAME)")


def _texts(trace: "Trace", stage: str, query: int) -> dict[Any, str | None]:
    """Record id -> text excerpt, for the records of ``stage``'s candidates for ``query``."""
    ranking = trace.stage(stage).ranking(query)
    rows = np.array([c["row"] for c in ranking], dtype=np.int64)
    return dict(zip((c["record_id"] for c in ranking), trace.excerpts(rows)))


def _section(title: str, changes: Sequence[Change], same_scale: bool, texts: dict[Any, str | None],
             caps: Caps) -> dict[str, Any]:
    rows = []
    for c in changes[: caps.top]:
        change = None
        if same_scale and c.old_score is not None and c.new_score is not None:
            change = format_value(float(c.new_score) - float(c.old_score))
        moved = c.moved_by if title == "moved" else None
        rows.append([c.old_rank, c.new_rank, moved, format_value(c.old_score), format_value(c.new_score), change,
                     cut(shown(c.artifact_id), 200), cut(shown(c.surface_kind), 80), cut(shown(c.record_id), 200),
                     cut(shown(texts.get(c.record_id)), 200)])
    more = f"showing {len(rows)} of {fmt(len(changes))}" if len(changes) > len(rows) else ""
    return {"title": title, "cols": list(_COLUMNS), "num": [True] * 6 + [False] * 4,
            "cls": [None] * 8 + ["rid", "text"], "rows": rows, "more": more}


def diff_part(diff: Diff, texts: dict[Any, str | None], caps: Caps) -> dict[str, Any]:
    """One query's diff as page data: the counts and scale line, then a section per non-empty kind of change."""
    scales = (f"scale {shown(diff.before_scale)} on both sides" if diff.same_scale else
              f"scale {shown(diff.before_scale)} \u2192 {shown(diff.after_scale)} (different scales: the scores are "
              "different quantities; compare ranks, not score values)")
    summary = (f"{len(diff.entered)} entered, {len(diff.left)} left, {len(diff.moved)} moved, {len(diff.rescored)} "
               f"rescored (same rank, new score), {len(diff.unchanged)} unchanged · {scales}")
    sections = [_section(title, changes, diff.same_scale, texts, caps)
                for title, changes in (("entered", diff.entered), ("left", diff.left), ("moved", diff.moved),
                                       ("rescored", diff.rescored)) if changes]
    return {"summary": summary, "sections": sections}


def _query(before: "Trace", after: "Trace", stage: str, query: int, caps: Caps) -> dict[str, Any]:
    text = before.queries.originals[query] if before.queries is not None else ""
    other = after.queries.originals[query] if after.queries is not None and query < after.n_queries else None
    head = {"q": query, "text": cut(text)}
    if other != text:
        reason = "the second trace has no such query" if other is None else f"the second trace's query {query} is " \
                                                                            f"{cut(other)!r}"
        return {**head, "summary": f"not compared: {reason}", "sections": []}
    diff = diff_rankings(before.stage(stage), after.stage(stage), query)
    texts = {**_texts(before, stage, query), **_texts(after, stage, query)}
    return {**head, **diff_part(diff, texts, caps)}


def diff_page(before: "Trace", after: "Trace", *, stage: str | None = None,
              queries: Sequence[int] | range | None = None, caps: Caps = Caps()) -> str:
    """The whole HTML page comparing ``stage`` of ``before`` and ``after``, query by query."""
    name = diff_stage(before, after, stage)
    chosen = page_of(before.n_queries, queries, caps)
    parts = [_query(before, after, name, q, caps) for q in chosen]
    data = {"page": "diff", "stage": cut(name, 80), "queries": parts}
    heading = f"irflow diff: stage {cut(name, 80)} of {cut(before.label, 120)} \u2192 {cut(after.label, 120)}"
    meta = (f"{cut(before.label, 120)}: recipe {cut(shown(before.recipe_name), 80)}, {fmt(before.n_queries)} queries · "
            f"{cut(after.label, 120)}: recipe {cut(shown(after.recipe_name), 80)}, {fmt(after.n_queries)} queries · "
            f"records matched by record id; each section shows at most {caps.top} records")
    options = [el("option", {"value": str(n)}, f"{part['q']}: {part['text']}") for n, part in enumerate(parts)]
    held = f"queries {chosen[0]}\u2013{chosen[-1]} of {fmt(before.n_queries)}" if chosen else "no queries"
    more = "" if len(chosen) >= before.n_queries else f" (at most {caps.queries} a page: irflow report --diff A B --queries START:STOP)"
    first = parts[0] if parts else None
    main = el("main", {"class": "irflow"},
              el("header", {}, el("h1", {}, heading), el("p", {"class": "meta"}, meta)),
              el("nav", {"class": "picker"}, el("label", {}, "Query ", el("select", {"id": "query-picker"}, options)),
                 el("span", {"class": "meta"}, f" {held}{more}"),
                 el("p", {"class": "nojs-only note"}, "JavaScript is off: this page shows the first query.")),
              el("section", {"id": "diff"}, el("h2", {}, f"What changed at stage {cut(name, 80)}"),
                 el("div", {"id": "diff-body"}, diff_nodes(first) if first else "")))
    return page(heading, join(main, script_json(data, "irflow-data")), style=STYLE, script=SCRIPT)
