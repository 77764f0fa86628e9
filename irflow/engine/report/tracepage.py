"""A trace (or a run's result) as one self-contained HTML page.

The page shows the DAG (every stage with its kind, parameters, in -> out
candidates, time and scale; stages switched off or passed through drawn as
such), a summary table, how the final hits moved across stages, each stage's
top candidates and score histogram, and each final hit's path through every
stage.  One page holds a page of queries (:class:`~irflow.engine.report.extract.Caps`:
100 by default; the picker lists them and the page says which and how to
get the others); their data is one compact JSON block the script redraws
from, and the first query is HTML, readable with JavaScript off.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from irflow.engine.batches import Candidates
from irflow.engine.events import StageEvent
from irflow.engine.explain import Explanation, explain_result
from irflow.engine.pipeline import Pipeline
from irflow.engine.report.assets import SCRIPT, STYLE
from irflow.engine.report.charts import bump, histogram
from irflow.engine.report.dag import Box, dag_svg, recipe_graph, trace_graph
from irflow.engine.report.extract import Caps, cut, extract
from irflow.engine.report.render import candidate_rows, chart, count_note, fmt, path_list, shown
from irflow.errors import IrflowError, TraceError
from irflow.util.html import Markup, el, join, page, script_json

if TYPE_CHECKING:  # trace.py and result.py import this module
    from irflow.engine.result import Result
    from irflow.engine.trace import Trace

__all__ = ["trace_page", "result_page", "output_event", "page_of", "trace_body", "stage_boxes"]


def page_of(n_queries: int, queries: Sequence[int] | range | None, caps: Caps) -> list[int]:
    """The queries a page holds: ``queries`` (checked), else the first ``caps.queries``; at most ``caps.queries``."""
    if queries is None:
        return list(range(min(n_queries, caps.queries)))
    chosen = list(queries)
    bad = [q for q in chosen if isinstance(q, bool) or not isinstance(q, int) or not 0 <= q < n_queries]
    if bad:
        raise TraceError(f"queries {bad[:5]} are not in this trace: it holds {n_queries} "
                         f"quer{'y' if n_queries == 1 else 'ies'} (0..{n_queries - 1})")
    if len(chosen) > caps.queries:
        raise TraceError(f"{len(chosen)} queries asked for one page, over its limit of {caps.queries}; write "
                         "several pages (irflow report --queries START:STOP), or raise the limit (Caps(queries=...))")
    return chosen


def _charts(data: dict[str, Any]) -> None:
    """Each query's histograms and bump chart as chart specs (what both Python and the script draw)."""
    names = [stage["name"] for stage in data["stages"]]
    for part in data["queries"]:
        part["hists"] = [histogram(h) for h in part.pop("hist")]
        labels = [cut(f"{shown(data['records'][r][1])} [{shown(data['records'][r][2])}]", 26)
                  for r in part["bump"]["hits"]]
        part["bump"] = bump(names, labels, part["bump"]["ranks"], deepest=data["caps"]["top"])


def stage_boxes(data: dict[str, Any], part: dict[str, Any] | None) -> dict[str, Box]:
    """What each stage's DAG box says (the first query's counts on the ``io`` line)."""
    boxes = {"query": Box(("query",), "query", "the query batch")}
    for i, stage in enumerate(data["stages"]):
        state = {"inactive": "off", "passed": "passed"}.get(stage["state"], "ran")
        io = "" if part is None else f"{part['io'][i][0]} \u2192 {part['io'][i][1]}"
        what = {"off": "switched off", "passed": f"passed through ({stage['from']})"}.get(state, stage["state"])
        lines = [stage["name"], stage["kind"], io, f"{shown(stage['scale'])} · {stage['ms']} ms · {what}"]
        tooltip = "\n".join([f"{stage['name']} ({stage['kind']}): {what}"] + [f"{k} = {v}" for k, v in stage["params"]])
        boxes[stage["name"]] = Box(tuple(lines), state, tooltip, i, io)
    return boxes


def _summary(data: dict[str, Any], part: dict[str, Any]) -> Markup:
    head = el("thead", {}, el("tr", {}, [el("th", {"class": "num" if c in ("in", "out", "ms") else None}, c)
                                         for c in ("stage", "kind", "status", "in", "out", "scale", "ms")]))
    rows = []
    for i, stage in enumerate(data["stages"]):
        rows.append(el("tr", {"data-i": str(i), "tabindex": "0", "class": f"state-{stage['state']}"},
                       el("td", {}, stage["name"]), el("td", {}, stage["kind"]), el("td", {}, stage["state"]),
                       el("td", {"class": "num", "data-io": str(i), "data-side": "in"}, part["io"][i][0]),
                       el("td", {"class": "num", "data-io": str(i), "data-side": "out"}, part["io"][i][1]),
                       el("td", {}, shown(stage["scale"])), el("td", {"class": "num"}, stage["ms"])))
    return el("div", {"class": "scroll"}, el("table", {"class": "summary"}, head, el("tbody", {}, rows)))


def _stage(data: dict[str, Any], part: dict[str, Any], i: int) -> Markup:
    stage = data["stages"][i]
    io = el("span", {"data-io": str(i)}, f"{part['io'][i][0]} \u2192 {part['io'][i][1]}")
    if stage["state"] == "inactive":
        what: Any = "switched off: its when did not hold, or an input it needs was off"
    elif stage["state"] == "passed":
        what = f"passed through: its output is its input {stage['from']!r}, unchanged"
    else:
        what = stage["state"]
    head = el("h3", {}, f"{stage['name']} ({stage['kind']}) · ", what, f" · scale {shown(stage['scale'])} · ", io,
              f" · {stage['ms']} ms")
    params = el("dl", {"class": "params"}, [join(el("dt", {}, k), el("dd", {}, v)) for k, v in stage["params"]]) \
        if stage["params"] else ""
    if not stage["cand"]:
        return el("div", {"class": "stage", "id": f"stage-{i}", "data-i": str(i)}, head, params)
    cols = ("rank", "score", "scale", "artifact", "surface", "record", "text")
    table = el("div", {"class": "scroll"}, el("table", {"class": "cands"}, el("thead", {}, el("tr", {}, [
        el("th", {"class": "num" if c in ("rank", "score") else None}, c) for c in cols])),
        el("tbody", {}, candidate_rows(data, i, part))))
    return el("div", {"class": "stage", "id": f"stage-{i}", "data-i": str(i)}, head, params,
              el("div", {"class": "hist"}, chart(part["hists"][i])), el("p", {"class": "count note"}, count_note(i, part)),
              table)


def _picker(data: dict[str, Any], n_queries: int) -> Markup:
    options = [el("option", {"value": str(n)}, f"{part['q']}: {part['text']}") for n, part in enumerate(data["queries"])]
    held = data["queries"]
    first, last = (held[0]["q"], held[-1]["q"]) if held else (0, -1)
    span = f"queries {first}\u2013{last} of {fmt(n_queries)}" if len(held) > 1 else f"query {first} of {fmt(n_queries)}"
    more = "" if len(held) >= n_queries else (f" (this page holds at most {data['caps']['queries']}; for others: "
                                              "irflow report FILE --queries START:STOP)")
    return el("nav", {"class": "picker"}, el("label", {}, "Query ", el("select", {"id": "query-picker"}, options)),
              el("span", {"class": "meta"}, f" {span}{more}"),
              el("p", {"class": "nojs-only note"}, "JavaScript is off: this page shows the first query; "
                                                    "the picker, stage tabs and hit paths need JavaScript."))


def trace_body(data: dict[str, Any], *, title: str, meta: str, n_queries: int, dag: Markup,
               extra: Markup | str = "") -> Markup:
    """The page's ``<main>``: heading, picker, DAG, summary, bump chart, stages, paths; then the data block."""
    part = data["queries"][0] if data["queries"] else None
    caps = data["caps"]
    note = (f"Each stage shows its top {caps['top']} candidates per query (and how many it had), a histogram of "
            f"all its scores; each query's top {caps['paths']} final hits have their path through every stage.")
    sections: list[Any] = [el("header", {}, el("h1", {}, title), el("p", {"class": "meta"}, meta),
                              el("p", {"class": "caps"}, note), extra),
                           _picker(data, n_queries),
                           el("section", {"id": "dag"}, el("h2", {}, "DAG"),
                              el("p", {"class": "note js-only"}, "Click a stage to see its candidates."),
                              el("div", {"class": "scroll"}, dag))]
    if part is not None:
        sections += [
            el("section", {"id": "summary"}, el("h2", {}, "Stages"), _summary(data, part)),
            el("section", {"id": "bump"}, el("h2", {}, "How the final hits moved across stages"),
               el("div", {"id": "bump-chart", "class": "scroll"}, chart(part["bump"]) or
                  el("p", {"class": "note"}, "no final hits for this query"))),
            el("section", {"id": "stages"}, el("h2", {}, "Candidates per stage"),
               el("p", {"class": "note js-only"}, "Choose a row to see that hit's path."),
               [_stage(data, part, i) for i in range(len(data["stages"]))]),
            el("section", {"id": "paths"}, el("h2", {}, "Paths of the final hits"),
               el("p", {"id": "path-missing", "class": "note", "hidden": True},
                  f"This page keeps the paths of each query's top {caps['paths']} final hits; for another record: "
                  "irflow trace explain FILE RECORD --query N"),
               el("div", {"id": "path-list"}, path_list(data["records"], part)))]
    return join(el("main", {"class": "irflow"}, sections), script_json(data, "irflow-data"))


def trace_page(trace: "Trace", *, queries: Sequence[int] | range | None = None, caps: Caps = Caps(),
               title: str | None = None) -> str:
    """The whole HTML page of ``trace`` (``queries``: original query indexes, default the first page)."""
    chosen = page_of(trace.n_queries, queries, caps)
    data = extract(trace, chosen, caps)
    data["page"] = "trace"
    _charts(data)
    part = data["queries"][0] if data["queries"] else None
    graph = trace_graph([e.name for e in trace], [e.ports for e in trace])
    dag = dag_svg(graph, stage_boxes(data, part), label="the trace's DAG")
    where = f"file {trace.source} · " if trace.source else ""
    version = trace.header.get("irflow_version") if trace.header else None
    meta = (f"{where}{fmt(trace.n_queries)} quer{'y' if trace.n_queries == 1 else 'ies'} · {len(trace)} stages"
            f"{' · corpus rows ' + fmt(trace.n_rows) if isinstance(trace.n_rows, int) else ''}"
            f"{' · written by irflow ' + cut(version, 40) if isinstance(version, str) else ''}")
    heading = title or f"irflow trace: recipe {cut(shown(trace.recipe_name), 80)} on corpus {cut(shown(trace.corpus_name), 80)}"
    body = trace_body(data, title=heading, meta=meta, n_queries=trace.n_queries, dag=dag)
    return page(heading, body, style=STYLE, script=SCRIPT)


def output_event(result: "Result") -> StageEvent:
    """An untraced result's output stage as the one event of a trace (its candidates, read through the
    result's corpus): what its page shows."""
    output = result.output()
    if not isinstance(output, Candidates):
        raise IrflowError(f"the output stage {result.output_name!r} produced {type(output).__name__}, not "
                          "candidates; run with trace=True for a page of every stage")
    name = result.output_name
    try:
        params = Pipeline.of(result.recipe).instances(result.params, [name])[name].params()
    except (IrflowError, KeyError):  # the page shows what it can: the parameters are optional
        params = {}
    kind = result.recipe.stages[name].kind if name in result.recipe.stages else "?"
    return StageEvent(name, kind, params, {}, {}, output, 0.0, "ran")


def result_page(result: "Result", trace: "Trace", *, queries: Sequence[int] | range | None = None,
                caps: Caps = Caps()) -> str:
    """The page of an untraced run's result: ``trace`` holds its :func:`output_event`; each hit's path comes from
    the provenance it carries (what ``result.explain`` knows without a trace)."""
    chosen = page_of(trace.n_queries, queries, caps)

    def path_of(query: int, row: int) -> Explanation | None:
        record = str(result.corpus.record_ids_of(np.array([row], dtype=np.int64))[0])
        try:
            return explain_result(result, record, query=query)
        except IrflowError:  # a record the provenance cannot place: its row stays, without a path
            return None

    data = extract(trace, chosen, caps, path_of=path_of)
    data["page"] = "trace"
    _charts(data)
    part = data["queries"][0] if data["queries"] else None
    boxes = stage_boxes(data, part)
    for name, spec in result.recipe.stages.items():
        if name != result.output_name:
            boxes[name] = Box((name, spec.kind, "", "not traced"), "passed", f"{name} ({spec.kind}): not traced")
    dag = dag_svg(recipe_graph(result.recipe), boxes, label=f"recipe {cut(result.recipe.name, 80)}")
    heading = (f"irflow result: recipe {cut(result.recipe.name, 80)} on corpus "
               f"{cut(shown(getattr(result.corpus, 'name', None)), 80)}")
    meta = f"{fmt(trace.n_queries)} quer{'y' if trace.n_queries == 1 else 'ies'} · output stage {cut(result.output_name, 80)}"
    note = el("p", {"class": "note"}, "Not traced: this page shows the output stage's candidates, and each hit's path "
                                      "from the provenance columns it carries. Run with trace=True to see every stage.")
    body = trace_body(data, title=heading, meta=meta, n_queries=trace.n_queries, dag=dag, extra=note)
    return page(heading, body, style=STYLE, script=SCRIPT)
