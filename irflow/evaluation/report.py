"""An evaluation as one self-contained HTML page, and as a notebook view.

The page holds what ``irflow eval`` prints — the metric table with each
column's best marked, and against a baseline the paired tests with their
corrected p-values, wins, losses and ties, the same text cell for cell — and
what a terminal cannot show: the per-query differences between each system
and the baseline as sorted bar charts (one per metric), the queries each
system did worst and best on with their hits (the document ids, scores and
relevance grades, and the query texts and titles when the collection is
given), and the settings the figures were made with (dataset, split,
depth, metrics, embedder, analyzer, title mode, each system's parameters).

The runs are read through the :class:`~irflow.evaluation.results.Evaluation`
object (``system.run``: query id -> document id -> score); an evaluation that
did not keep its runs shows its figures without hits.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from irflow.engine.report.assets import SCRIPT, STYLE
from irflow.engine.report.charts import sorted_bars, to_markup
from irflow.engine.report.render import shown, table, view
from irflow.util.html import Markup, el, join, page
from irflow.util.unicode import visible

if TYPE_CHECKING:  # results.py imports this module
    from irflow.evaluation.results import Evaluation, SystemResult

__all__ = ["evaluation_page", "evaluation_view", "HITS", "EXTREMES"]

#: Hits shown per listed query, and queries listed at each end (worst, best) per system.
HITS, EXTREMES = 10, 5


def _cut(text: Any, width: int = 200) -> str:
    shown_text = visible(str(text))
    return shown_text if len(shown_text) <= width else shown_text[: width - 1] + "…"


def _metric_table(ev: "Evaluation") -> Markup:
    """The systems side by side, the best mean of each column marked ``*``: the rows ``Evaluation.table`` prints."""
    headers, rows, notes = ev.rows()
    metrics = set(ev.metrics)
    head = el("thead", {}, el("tr", {}, [el("th", {"class": "num"} if h in metrics else {}, h) for h in headers]))
    body = []
    for row in rows:
        cells = []
        for header, text in zip(headers, row):
            if header in metrics:
                cells.append(el("td", {"class": "num best" if text.endswith("*") else "num"}, text.rstrip()))
            else:
                cells.append(el("td", {}, _cut(text)))
        body.append(el("tr", {}, cells))
    return join(el("div", {"class": "scroll"}, el("table", {"class": "metrics"}, head, el("tbody", {}, body))),
                [el("p", {"class": "note"}, _cut(line, 400)) for line in notes])


def _significance(ev: "Evaluation") -> Markup | str:
    if ev.baseline is None or len(ev.systems) < 2:
        return el("p", {"class": "note"}, "No baseline: evaluate with a baseline (irflow eval --baseline RECIPE) "
                                          "for paired significance tests.")
    comparisons = ev.compare()
    headers, rows = comparisons.rows()
    body = [el("tr", {}, [el("td", {"class": ("num" if 2 <= i < 8 else f"sig-{cell}" if i == 8 and cell else None)},
                             _cut(cell)) for i, cell in enumerate(row)]) for row in rows]
    head = el("thead", {}, el("tr", {}, [el("th", {"class": "num" if 2 <= i < 8 else None}, h)
                                         for i, h in enumerate(headers)]))
    return join(el("p", {}, _cut(comparisons.title, 400)),
                el("div", {"class": "scroll"}, el("table", {"class": "significance"}, head, el("tbody", {}, body))))


def _pairs(ev: "Evaluation") -> list[tuple["SystemResult", "SystemResult | None"]]:
    """(system, what it is compared with): each other system against the baseline, else each against nothing."""
    if ev.baseline is not None and len(ev.systems) > 1:
        base = ev[ev.baseline]
        return [(s, base) for s in ev.systems if s.label != ev.baseline]
    return [(s, None) for s in ev.systems]


def _differences(system: "SystemResult", base: "SystemResult | None", metric: str) -> list[tuple[str, float]]:
    mine = system.per_query[metric]
    if base is None:
        return [(qid, float(v)) for qid, v in mine.items()]
    theirs = base.per_query[metric]
    return [(qid, float(v) - float(theirs.get(qid, 0.0))) for qid, v in mine.items()]


def _charts(ev: "Evaluation") -> Markup:
    out: list[Any] = []
    for system, base in _pairs(ev):
        for metric in ev.metrics:
            values = [(qid, v) for qid, v in _differences(system, base, metric) if math.isfinite(v)]
            what = (f"{_cut(system.label)} − {_cut(base.label)}, {metric} per query" if base is not None
                    else f"{_cut(system.label)}, {metric} per query")
            gains = sum(v > 0 for _, v in values)
            losses = sum(v < 0 for _, v in values)
            counts = f" ({gains} better, {losses} worse, {len(values) - gains - losses} tied)" if base else ""
            spec = sorted_bars(values, caption=what)
            out += [el("h3", {}, what + counts), el("div", {"class": "scroll"}, to_markup(spec) if spec else "")]
    return join(out)


def _hits(run: Any, qid: str, qrels: Mapping[str, Mapping[str, int]], titles: Mapping[str, str]) -> Markup:
    if run is None:
        return el("p", {"class": "note"}, "the runs of this evaluation were not kept: no hits to show")
    scores = run.get(qid) or {}
    ranked = sorted(scores.items(), key=lambda item: (-float(item[1]), str(item[0])))[:HITS]
    judged = qrels.get(qid, {})
    rows = [[i + 1, f"{float(score):.4f}", _cut(doc), shown(judged.get(doc)), _cut(titles.get(doc, ""), 160) or "-"]
            for i, (doc, score) in enumerate(ranked)]
    return table(["rank", "score", "document", "grade", "title"], rows, numeric=[True, True, False, True])


def _extremes(ev: "Evaluation", texts: Mapping[str, str], titles: Mapping[str, str]) -> Markup:
    metric = ev.metrics[0]
    out: list[Any] = []
    for system, base in _pairs(ev):
        ordered = sorted(_differences(system, base, metric), key=lambda item: (item[1], item[0]))
        what = f"the change in {metric} against {_cut(base.label)}" if base is not None else metric
        for title, picked in (("worst", ordered[:EXTREMES]), ("best", ordered[::-1][:EXTREMES])):
            out.append(el("h3", {}, f"{_cut(system.label)}: the {len(picked)} {title} queries by {what}"))
            for qid, value in picked:
                values = ", ".join(f"{m} {system.per_query[m].get(qid, 0.0):.4f}" for m in ev.metrics)
                summary = f"query {_cut(qid, 80)}: {value:+.4f} · {values}"
                if qid in texts:
                    summary += f" — {_cut(texts[qid])}"
                hits = [el("p", {}, el("strong", {}, _cut(system.label))),
                        _hits(system.run, qid, ev.qrels, titles)]
                if base is not None:
                    hits += [el("p", {}, el("strong", {}, _cut(base.label))), _hits(base.run, qid, ev.qrels, titles)]
                judged = sum(1 for g in ev.qrels.get(qid, {}).values() if g > 0)
                out.append(el("details", {}, el("summary", {}, summary),
                              el("p", {"class": "note"}, f"{judged} relevant documents judged"), hits))
    return join(out)


def _settings(ev: "Evaluation") -> Markup:
    rows: list[Sequence[Any]] = [["dataset", _cut(ev.dataset)], ["split", _cut(ev.split)],
                                 ["queries", str(ev.n_queries)], ["depth", str(ev.depth)],
                                 ["metrics", ", ".join(ev.metrics)]]
    rows += [[_cut(k, 80), _cut(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=repr), 300)]
             for k, v in (ev.settings.to_dict() if ev.settings is not None else {}).items()]
    source = ev.corpus
    if source is not None:
        rows.append(["corpus", f"{source.status}" + (f": {_cut(source.path, 300)}" if source.path else "")])
    rows += [[f"parameters of {_cut(s.label, 80)}", _cut(json.dumps(s.params, ensure_ascii=False, default=repr), 400)]
             for s in ev.systems]
    rows += [[f"time of {_cut(s.label, 80)}", f"{s.seconds:.2f} s"] for s in ev.systems if s.seconds]
    return table(["setting", "value"], rows)


def _collection_texts(collection: Any) -> tuple[Mapping[str, str], Mapping[str, str]]:
    """Query id -> text and document id -> title (or the start of its text) of a collection, if given."""
    if collection is None:
        return {}, {}
    documents = getattr(collection, "documents", {}) or {}
    titles = {doc_id: (doc.title or doc.text or "")[:200] for doc_id, doc in documents.items()}
    return dict(getattr(collection, "queries", {}) or {}), titles


def evaluation_page(ev: "Evaluation", *, collection: Any = None) -> str:
    """The whole HTML page of an evaluation (``collection`` adds query texts and document titles)."""
    texts, titles = _collection_texts(collection)
    heading = f"irflow evaluation: {_cut(ev.dataset, 80)} ({_cut(ev.split, 40)} split)"
    meta = (f"{ev.n_queries} queries · depth {ev.depth} · {len(ev.systems)} system{'' if len(ev) == 1 else 's'}"
            f" · metrics {', '.join(ev.metrics)}" + (f" · baseline {_cut(ev.baseline, 80)}" if ev.baseline else ""))
    main = el("main", {"class": "irflow"},
              el("header", {}, el("h1", {}, heading), el("p", {"class": "meta"}, meta)),
              el("section", {"id": "metrics"}, el("h2", {}, "Metrics"), _metric_table(ev)),
              el("section", {"id": "significance"}, el("h2", {}, "Significance"), _significance(ev)),
              el("section", {"id": "per-query"}, el("h2", {}, "Per-query differences, sorted"), _charts(ev)),
              el("section", {"id": "extremes"}, el("h2", {}, "Worst and best queries"), _extremes(ev, texts, titles)),
              el("section", {"id": "settings"}, el("h2", {}, "Settings"), _settings(ev)))
    return page(heading, main, style=STYLE, script=SCRIPT)


def evaluation_view(ev: "Evaluation") -> str:
    """A notebook's view: the setting line, the metric table and the significance table."""
    meta = f"{_cut(ev.dataset, 80)} ({_cut(ev.split, 40)} split): {ev.n_queries} queries, depth {ev.depth}"
    return view(el("p", {}, el("strong", {}, "evaluation"), f" · {meta}"), _metric_table(ev), _significance(ev),
                el("p", {"class": "note"}, "evaluation.to_html(\"eval.html\") adds the per-query charts, the worst "
                                           "and best queries with their hits, and the settings"))
