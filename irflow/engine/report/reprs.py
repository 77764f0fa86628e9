"""Notebook views (``_repr_html_``): results, traces, candidate batches, recipes and diffs as tables and pictures.

Compact versions of the report pages, without a script (a notebook may not
run one): a recipe shows its DAG and stages; a trace its DAG, stage summary,
how the final hits moved and the final candidates of its first query; a
result its hits; a candidate batch its top rows per query with their
provenance; a diff its sections.  Each says how to get the whole page
(``to_html``).  Every value is escaped (:mod:`irflow.util.html`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from irflow.engine.model import RecipeSpec
from irflow.engine.report.charts import bump
from irflow.engine.report.dag import Box, dag_svg, recipe_graph, trace_graph
from irflow.engine.report.extract import Caps, cut, extract
from irflow.engine.report.render import QUERIES, ROWS, candidate_rows, chart, count_note, shown, table, view
from irflow.engine.report.tracepage import stage_boxes
from irflow.engine.values import jsonable
from irflow.util.html import el
from irflow.util.table import format_value

if TYPE_CHECKING:  # the classes whose views these are import this module
    from irflow.engine.diff import Diff
    from irflow.engine.result import Result
    from irflow.engine.trace import Trace

__all__ = ["trace_view", "result_view", "recipe_view", "diff_view"]


def _json(value: Any) -> str:
    return cut(format_value(value) if not isinstance(value, (list, dict, tuple)) else json.dumps(jsonable(value)), 120)


def recipe_view(recipe: RecipeSpec) -> str:
    """A recipe: its name and description, its DAG, one row per stage (kind, inputs, when, parameters)."""
    graph = recipe_graph(recipe)
    boxes = {"query": Box(("query",), "query", "the query batch")}
    rows = []
    for name, spec in recipe.stages.items():
        params = ", ".join(f"{k}={_json(v)}" for k, v in spec.params.items())
        boxes[name] = Box((name, spec.kind, cut(params, 60)), "ran", f"{name} ({spec.kind})\n{params}", None)
        inputs = spec.inputs if isinstance(spec.inputs, Mapping) else list(spec.inputs)
        rows.append([name, spec.kind, _json(jsonable(inputs)) if spec.inputs else "-",
                     _json(jsonable(dict(spec.when))) if spec.when else "-", cut(params, 300) or "-"])
    head = el("p", {}, el("strong", {}, f"recipe {cut(recipe.name, 80)}"),
              f" — {cut(recipe.description, 300)}" if recipe.description else "", f" · output {cut(recipe.output, 80)}")
    return view(head, el("div", {"class": "scroll"}, dag_svg(graph, boxes, label=f"recipe {cut(recipe.name, 80)}")),
                table(["stage", "kind", "inputs", "when", "parameters"], rows))


def trace_view(trace: "Trace") -> str:
    """A trace: its DAG and stage summary for the first query, how the final hits moved, the final candidates."""
    if not trace.n_queries:
        return view(el("p", {}, repr(trace)))
    caps = Caps(top=ROWS, queries=1, paths=1)
    data = extract(trace, [0], caps)
    part = data["queries"][0]
    names = [s["name"] for s in data["stages"]]
    labels = [cut(f"{shown(data['records'][r][1])} [{shown(data['records'][r][2])}]", 26) for r in part["bump"]["hits"]]
    graph = trace_graph([e.name for e in trace], [e.ports for e in trace])
    summary = table(["stage", "kind", "status", "in", "out", "scale", "ms"],
                    [[s["name"], s["kind"], s["state"], part["io"][i][0], part["io"][i][1], s["scale"], s["ms"]]
                     for i, s in enumerate(data["stages"])], numeric=[False, False, False, True, True, False, True])
    parts: list[Any] = [el("p", {}, el("strong", {}, f"trace of recipe {cut(shown(trace.recipe_name), 80)}"),
                           f" on corpus {cut(shown(trace.corpus_name), 80)} · {trace.n_queries} queries · "
                           f"query 0: {part['text']}"),
                        el("div", {"class": "scroll"}, dag_svg(graph, stage_boxes(data, part))), summary,
                        el("div", {"class": "scroll"}, chart(bump(names, labels, part["bump"]["ranks"], deepest=ROWS)))]
    final = data["final"]
    if final is not None and part["tables"][final] is not None:
        cols = ["rank", "score", "scale", "artifact", "surface", "record", "text"]
        parts += [el("p", {}, f"{names[final]}: {count_note(final, part)}"),
                  el("div", {"class": "scroll"}, el("table", {}, el("thead", {}, el("tr", {}, [
                      el("th", {}, c) for c in cols])), el("tbody", {}, candidate_rows(data, final, part))))]
    parts.append(el("p", {"class": "note"}, "trace.to_html(\"trace.html\") writes every query, stage and hit path"))
    return view(*parts)


def result_view(result: "Result") -> str:
    """A result: the hits of its first queries (rank, score, artifact, surface, text)."""
    hits = [result.hits] if result.single else result.hits
    parts: list[Any] = [el("p", {}, el("strong", {}, f"result of recipe {cut(result.recipe.name, 80)}"),
                           f" · {len(result.queries.originals)} quer{'y' if result.single else 'ies'}"
                           f" · traced: {'yes' if result.trace is not None else 'no'}")]
    for q, found in enumerate(hits[:QUERIES]):
        parts.append(el("p", {}, f"query {q}: {cut(result.queries.originals[q])} — {len(found)} hits"))
        parts.append(table(["rank", "score", "artifact", "surface", "text"],
                           [[i + 1, format_value(h.score), cut(h.artifact_id, 80), cut(h.surface_kind, 40),
                             cut(h.text, 160)] for i, h in enumerate(found[:ROWS])], numeric=[True, True]))
    if len(hits) > QUERIES:
        parts.append(el("p", {"class": "note"}, f"… and {len(hits) - QUERIES} more queries"))
    parts.append(el("p", {"class": "note"}, "result.to_html(\"result.html\") writes every query and hit path"))
    return view(*parts)


def _changes(changes: Sequence[Any], delta: bool) -> list[list[Any]]:
    rows = []
    for c in changes[:ROWS * 2]:
        change = None if c.old_score is None or c.new_score is None or not delta else \
            format_value(float(c.new_score) - float(c.old_score))
        rows.append([c.old_rank, c.new_rank, c.moved_by, format_value(c.old_score), format_value(c.new_score), change,
                     cut(shown(c.artifact_id), 80), cut(shown(c.surface_kind), 40), cut(shown(c.record_id), 80)])
    return rows


def diff_view(diff: "Diff") -> str:
    """A diff: its counts and scales, then what entered, left, moved and was rescored."""
    parts: list[Any] = [el("p", {}, el("strong", {}, f"diff {cut(diff.before, 80)} → {cut(diff.after, 80)}"),
                           f" · query {diff.query_index}: {cut(shown(diff.query))}"),
                        el("p", {}, f"{len(diff.entered)} entered, {len(diff.left)} left, {len(diff.moved)} moved, "
                                    f"{len(diff.rescored)} rescored, {len(diff.unchanged)} unchanged · scale "
                                    f"{shown(diff.before_scale)} → {shown(diff.after_scale)}")]
    cols = ["old rank", "new rank", "moved", "old score", "new score", "score change", "artifact", "surface", "record"]
    for title, changes in (("entered", diff.entered), ("left", diff.left), ("moved", diff.moved),
                           ("rescored", diff.rescored)):
        if changes:
            parts += [el("p", {}, el("strong", {}, title)),
                      table(cols, _changes(changes, diff.same_scale), numeric=[True] * 6)]
    return view(*parts)

