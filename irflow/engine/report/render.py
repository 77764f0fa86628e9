"""The per-query parts of a page as HTML: what the page's script draws again when another query is picked.

Each function here has its twin in :data:`~irflow.engine.report.assets.SCRIPT`
(same elements, same text, same order): the page opens with the first
query drawn here, readable without JavaScript, and the script redraws from
the same data (the browser tests check that both draw the same).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from irflow.engine.report.assets import NOTEBOOK_STYLE
from irflow.engine.report.charts import to_markup
from irflow.util.html import Markup, el, fragment, join

__all__ = ["shown", "fmt", "candidate_rows", "count_note", "path_node", "path_list", "diff_nodes", "table", "view",
           "QUERIES", "ROWS"]

#: Queries and rows a notebook view shows at most.
QUERIES, ROWS = 5, 10


def shown(value: Any) -> str:
    """A cell's text: ``-`` for nothing."""
    return "-" if value is None else str(value)


def fmt(n: int) -> str:
    """``1,000``."""
    return f"{n:,}"


def _record(records: Sequence[Any], index: int) -> Sequence[Any]:
    return records[index] if 0 <= index < len(records) else (None, None, None, None)


def candidate_rows(data: dict[str, Any], stage: int, part: dict[str, Any]) -> list[Markup]:
    """The rows of a stage's candidate table for one query: rank, score, scale, artifact, surface, record, text."""
    table = part["tables"][stage]
    scale = data["stages"][stage]["scale"]
    rows = []
    for rec, rank, score in table["rows"] if table else []:
        r = _record(data["records"], rec)
        rows.append(el("tr", {"data-rec": str(rec), "tabindex": "0"},
                       el("td", {"class": "num"}, shown(rank)), el("td", {"class": "num"}, score),
                       el("td", {}, shown(scale)), el("td", {}, shown(r[1])), el("td", {}, shown(r[2])),
                       el("td", {"class": "rid"}, shown(r[0])), el("td", {"class": "text"}, shown(r[3]))))
    return rows


def count_note(stage: int, part: dict[str, Any]) -> str:
    """``showing the top 50 of 1,000 candidates`` (or how many there are)."""
    table = part["tables"][stage]
    if not table:
        return ""
    if len(table["rows"]) < table["n"]:
        return f"showing the top {fmt(len(table['rows']))} of {fmt(table['n'])} candidates"
    return f"{fmt(table['n'])} candidate{'' if table['n'] == 1 else 's'}"


def _path_title(path: Sequence[Any], r: Sequence[Any]) -> str:
    place = "not in the output" if path[1] is None else f"rank {path[1]} (score {path[2]}, {shown(path[3])})"
    return f"{shown(r[1])} [{shown(r[2])}] {shown(r[0])} \u2014 {place}" + (f" \u2014 {r[3]}" if r[3] else "")


_PATH_HEAD = ("stage", "kind", "status", "in output", "rank", "score", "scale", "note")


def path_node(records: Sequence[Any], path: Sequence[Any], n: int) -> Markup:
    """One hit's path: a ``details`` whose summary names it, with one row per stage and its provenance."""
    r = _record(records, path[0])
    rows = []
    for step in path[5]:
        present = "-" if step[2] is None else "yes" if step[2] else "no"
        rows.append(el("tr", {}, el("td", {}, step[0]), el("td", {}, shown(step[1])), el("td", {}, step[6]),
                       el("td", {}, present), el("td", {"class": "num"}, shown(step[3])),
                       el("td", {"class": "num"}, step[4]), el("td", {}, shown(step[5])), el("td", {}, step[7])))
        if step[8]:
            rows.append(el("tr", {"class": "detail"}, el("td", {"colspan": "8"}, " \u00b7 ".join(
                f"{label} {value} ({column})" for label, value, column in step[8]))))
    head = el("thead", {}, el("tr", {}, [el("th", {}, name) for name in _PATH_HEAD]))
    notes = [el("p", {"class": "note"}, note) for note in path[4]]
    return el("details", {"data-rec": str(path[0]), "open": n == 0}, el("summary", {}, _path_title(path, r)),
              el("div", {"class": "scroll"}, el("table", {"class": "path"}, head, el("tbody", {}, rows))), notes)


def path_list(records: Sequence[Any], part: dict[str, Any]) -> Markup:
    """Every path of one query."""
    return join([path_node(records, path, n) for n, path in enumerate(part["paths"])])


def table(cols: Sequence[str], rows: Sequence[Sequence[Any]], *, numeric: Sequence[bool] = (),
          classes: Sequence[str | None] = (), kind: str = "") -> Markup:
    """A plain table of text cells (``numeric`` columns right-aligned)."""
    num = list(numeric) + [False] * (len(cols) - len(numeric))
    cls = list(classes) + [None] * (len(cols) - len(classes))
    head = el("thead", {}, el("tr", {}, [el("th", {"class": "num" if num[i] else None}, c) for i, c in enumerate(cols)]))
    body = el("tbody", {}, [el("tr", {}, [el("td", {"class": "num" if num[i] else cls[i]}, shown(cell))
                                          for i, cell in enumerate(row)]) for row in rows])
    return el("div", {"class": "scroll"}, el("table", {"class": kind or None}, head, body))


def diff_nodes(part: dict[str, Any]) -> Markup:
    """One query's diff: the counts line, then a table per non-empty section (entered, left, moved, rescored)."""
    out: list[Any] = [el("p", {"class": "meta"}, part["summary"])]
    for section in part["sections"]:
        out.append(el("h3", {}, section["title"]))
        out.append(table(section["cols"], section["rows"], numeric=section["num"], classes=section["cls"], kind="diff"))
        if section["more"]:
            out.append(el("p", {"class": "note"}, section["more"]))
    return join(out)


def chart(spec: Any) -> Markup | str:
    """A chart spec (or nothing) as markup."""
    return "" if spec is None else to_markup(spec)


def view(*parts: Any) -> str:
    """A notebook cell's HTML: the scoped style and ``<div class="irflow">`` holding ``parts``."""
    return fragment(el("div", {"class": "irflow"}, *parts), style=NOTEBOOK_STYLE)
