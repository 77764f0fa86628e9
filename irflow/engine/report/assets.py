"""The report pages' style sheet and script: constants, never built from data.

The script (ES2017, no library) reads the page's data block
(``<script type="application/json" id="irflow-data">``) and adds
interaction: a query picker that redraws the per-query parts, clickable
stages (a DAG box or a summary row shows that stage's candidates), and
choosing a hit (a table row) shows its path.  It makes elements only with
``createElement`` / ``createElementNS``, ``setAttribute`` (attribute names on
an allow-list, none an event handler or a URL) and text nodes — never
``innerHTML`` — so a value from the data is always text.  Without JavaScript
the page is whole: the first query's tables, charts and paths are HTML.
"""

from __future__ import annotations

from irflow.engine.report.charts import SVG_ATTRIBUTES, SVG_TAGS

__all__ = ["STYLE", "SCRIPT", "NOTEBOOK_STYLE"]

_BASE_STYLE = """
.irflow{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330}
.irflow h1{font-size:20px;margin:0 0 4px}.irflow h2{font-size:16px;margin:22px 0 8px}
.irflow h3{font-size:14px;margin:14px 0 6px}
.irflow table{border-collapse:collapse;margin:4px 0 8px}
.irflow th,.irflow td{border-bottom:1px solid #e3e6ec;padding:3px 8px;text-align:left;vertical-align:top}
.irflow th{background:#f4f6f9;font-weight:600}
.irflow td.num,.irflow th.num{text-align:right;font-variant-numeric:tabular-nums}
.irflow td.text{max-width:44em;color:#39404f}.irflow td.rid{font-family:ui-monospace,monospace;font-size:12px}
.irflow .meta,.irflow .note,.irflow .caps{color:#5b6475}
.irflow .state-inactive,.irflow .state-passed{color:#7b8394;font-style:italic}
.irflow svg text{font:11px system-ui,sans-serif;fill:#1d2330}
.irflow svg.dag .node rect{fill:#eef3fb;stroke:#4a72b8;stroke-width:1.2}
.irflow svg.dag .node text.name{font-weight:600}
.irflow svg.dag .node.off rect{fill:#f5f5f5;stroke:#a0a6b2;stroke-dasharray:5 3}
.irflow svg.dag .node.passed rect{fill:#fafbfd;stroke:#8aa0c8;stroke-dasharray:1.5 2.5}
.irflow svg.dag .node.off text,.irflow svg.dag .node.passed text{fill:#6b7382}
.irflow svg.dag .edge{fill:none;stroke:#8b93a3;stroke-width:1.2}.irflow svg.dag .arrow{fill:#8b93a3}
.irflow svg .bar{fill:#5b84c4}.irflow svg .axis,.irflow svg .grid{stroke:#c9ced8}
.irflow svg .tick{fill:#5b6475;font-size:10px}
.irflow svg .gain{fill:#3f9b5d}.irflow svg .loss{fill:#c4513f}.irflow svg .tie{fill:#a0a6b2}
.irflow svg.bump polyline{fill:none;stroke-width:2}.irflow svg.bump .label{font-size:10px}
.irflow svg.bump .h0{stroke:#4a72b8;fill:#4a72b8}.irflow svg.bump .h1{stroke:#d9822b;fill:#d9822b}
.irflow svg.bump .h2{stroke:#3f9b5d;fill:#3f9b5d}.irflow svg.bump .h3{stroke:#c4513f;fill:#c4513f}
.irflow svg.bump .h4{stroke:#8a63b8;fill:#8a63b8}.irflow svg.bump .h5{stroke:#8c6d46;fill:#8c6d46}
.irflow svg.bump .h6{stroke:#d16ba5;fill:#d16ba5}.irflow svg.bump .h7{stroke:#6b7382;fill:#6b7382}
.irflow svg.bump .h8{stroke:#a3a83a;fill:#a3a83a}.irflow svg.bump .h9{stroke:#2aa1b3;fill:#2aa1b3}
.irflow svg.bump text.label{stroke:none}
.irflow dl.params{display:grid;grid-template-columns:max-content auto;gap:0 10px;margin:4px 0}
.irflow dl.params dt{color:#5b6475}.irflow dl.params dd{margin:0;font-family:ui-monospace,monospace;font-size:12px}
.irflow .sig-better{color:#2f7d47;font-weight:600}.irflow .sig-worse{color:#b3402f;font-weight:600}
.irflow .best{font-weight:700}
"""

#: The whole-page style sheet (the pages' elements sit in ``<main class="irflow">``).
STYLE = _BASE_STYLE + """
body{margin:0;background:#fff}main.irflow{max-width:1280px;margin:0 auto;padding:18px 24px 60px}
.irflow nav.picker{position:sticky;top:0;background:#fff;padding:6px 0;border-bottom:1px solid #e3e6ec;z-index:2}
.irflow select{max-width:60em;font:inherit}
.irflow .scroll{overflow-x:auto}
.irflow details{border:1px solid #e3e6ec;border-radius:6px;margin:6px 0;padding:4px 10px}
.irflow details[open]{background:#fbfcfe}.irflow summary{cursor:pointer}
.irflow tr.detail td{border-bottom:none;padding-top:0;color:#5b6475;font-size:12px}
.irflow tbody tr[data-rec]{cursor:pointer}.irflow tbody tr[data-rec]:hover{background:#f2f6fc}
.irflow tr.chosen{background:#fff4d6}
.js .irflow .nojs-only{display:none}.nojs .irflow .js-only{display:none}
.js .irflow .stage{display:none}.js .irflow .stage.shown{display:block}
.js .irflow svg.dag .node[data-i]{cursor:pointer}.js .irflow svg.dag .node.shown rect{stroke-width:2.6}
.js .irflow table.summary tbody tr[data-i]{cursor:pointer}.js .irflow table.summary tr.shown{background:#eef3fb}
"""

#: The notebook views' style (scoped to ``.irflow``: a notebook's own style is left alone).
NOTEBOOK_STYLE = _BASE_STYLE + """
.irflow .scroll{overflow-x:auto;max-width:100%}
"""

_HTML_TAGS = ("div", "span", "p", "table", "thead", "tbody", "tr", "th", "td", "details", "summary", "ul", "li",
              "strong", "em", "code", "dl", "dt", "dd", "h3", "option")
_ATTRIBUTES = tuple(sorted(set(SVG_ATTRIBUTES) | {"colspan", "open", "value", "tabindex", "title", "id"}))

_SCRIPT = r"""
(function () {
  "use strict";
  document.documentElement.className = "js";
  var holder = document.getElementById("irflow-data");
  if (!holder) { return; }
  var data = JSON.parse(holder.textContent);
  var SVG = "http://www.w3.org/2000/svg";
  var SVG_TAGS = __SVG_TAGS__;
  var HTML_TAGS = __HTML_TAGS__;
  var ATTRIBUTES = __ATTRIBUTES__;

  // the one way this script makes an element: allow-listed tags and attribute names, text as text
  function h(tag, attrs, kids) {
    var isSvg = SVG_TAGS.indexOf(tag) >= 0;
    if (!isSvg && HTML_TAGS.indexOf(tag) < 0) { throw new Error("tag not allowed: " + tag); }
    var node = isSvg ? document.createElementNS(SVG, tag) : document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (name) {
      var value = attrs[name];
      if (value === null || value === undefined || value === false) { return; }
      if (ATTRIBUTES.indexOf(name) < 0) { throw new Error("attribute not allowed: " + name); }
      node.setAttribute(name, value === true ? "" : String(value));
    });
    (kids || []).forEach(function (kid) {
      if (kid === null || kid === undefined) { return; }
      node.appendChild(typeof kid === "object" ? kid : document.createTextNode(String(kid)));
    });
    return node;
  }
  function spec(s) {  // a chart spec: [tag, attributes, ...children]
    if (typeof s === "string") { return s; }
    return h(s[0], s[1], s.slice(2).map(spec));
  }
  function replace(target, kids) {
    while (target.firstChild) { target.removeChild(target.firstChild); }
    kids.forEach(function (kid) { if (kid) { target.appendChild(typeof kid === "object" ? kid : document.createTextNode(kid)); } });
  }
  function shown(value) { return value === null || value === undefined ? "-" : String(value); }
  function all(selector) { return Array.prototype.slice.call(document.querySelectorAll(selector)); }
  function fmt(n) { return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ","); }

  var records = data.records || [];
  var current = 0;

  // ---- a trace page ---------------------------------------------------------------------------
  function record(i) { return records[i] || [null, null, null, null]; }
  function candidateRows(stage, part) {
    var table = part.tables[stage];
    var scale = data.stages[stage].scale;
    return table.rows.map(function (entry) {
      var r = record(entry[0]);
      return h("tr", {"data-rec": entry[0], tabindex: "0"}, [
        h("td", {"class": "num"}, [shown(entry[1])]), h("td", {"class": "num"}, [entry[2]]),
        h("td", {}, [shown(scale)]), h("td", {}, [shown(r[1])]), h("td", {}, [shown(r[2])]),
        h("td", {"class": "rid"}, [shown(r[0])]), h("td", {"class": "text"}, [shown(r[3])])]);
    });
  }
  function countNote(stage, part) {
    var table = part.tables[stage];
    if (!table) { return ""; }
    if (table.rows.length < table.n) { return "showing the top " + fmt(table.rows.length) + " of " + fmt(table.n) + " candidates"; }
    return fmt(table.n) + " candidate" + (table.n === 1 ? "" : "s");
  }
  function drawTrace(part) {
    all("[data-io]").forEach(function (node) {
      var io = part.io[Number(node.getAttribute("data-io"))];
      replace(node, [node.getAttribute("data-side") === "in" ? io[0] : node.getAttribute("data-side") === "out" ? io[1] : io[0] + " \u2192 " + io[1]]);
    });
    data.stages.forEach(function (stage, i) {
      var box = document.getElementById("stage-" + i);
      if (!box || !stage.cand) { return; }
      var body = box.querySelector("tbody");
      if (body) { replace(body, part.tables[i] ? candidateRows(i, part) : []); }
      var hist = box.querySelector(".hist");
      if (hist) { replace(hist, [part.hists[i] ? spec(part.hists[i]) : ""]); }
      var note = box.querySelector(".count");
      if (note) { replace(note, [countNote(i, part)]); }
    });
    var bump = document.getElementById("bump-chart");
    if (bump) { replace(bump, [part.bump ? spec(part.bump) : h("p", {"class": "note"}, ["no final hits for this query"])]); }
    var paths = document.getElementById("path-list");
    if (paths) { replace(paths, part.paths.map(pathNode)); }
  }
  function pathNode(path, n) {
    var r = record(path[0]);
    var kids = [h("summary", {}, [pathTitle(path, r)])];
    var rows = [];
    path[5].forEach(function (step) {
      rows.push(h("tr", {}, [h("td", {}, [step[0]]), h("td", {}, [shown(step[1])]), h("td", {}, [step[6]]),
        h("td", {}, [step[2] === null ? "-" : step[2] ? "yes" : "no"]), h("td", {"class": "num"}, [shown(step[3])]),
        h("td", {"class": "num"}, [step[4]]), h("td", {}, [shown(step[5])]), h("td", {}, [step[7]])]));
      if (step[8].length) {
        rows.push(h("tr", {"class": "detail"}, [h("td", {colspan: "8"}, [step[8].map(function (d) {
          return d[0] + " " + d[1] + " (" + d[2] + ")"; }).join(" \u00b7 ")])]));
      }
    });
    kids.push(h("div", {"class": "scroll"}, [h("table", {"class": "path"}, [pathHead(), h("tbody", {}, rows)])]));
    path[4].forEach(function (note) { kids.push(h("p", {"class": "note"}, [note])); });
    return h("details", {"data-rec": path[0], open: n === 0}, kids);
  }
  function pathHead() {
    return h("thead", {}, [h("tr", {}, ["stage", "kind", "status", "in output", "rank", "score", "scale", "note"].map(function (name) {
      return h("th", {}, [name]); }))]);
  }
  function pathTitle(path, r) {
    var place = path[1] === null ? "not in the output" : "rank " + path[1] + " (score " + path[2] + ", " + shown(path[3]) + ")";
    return shown(r[1]) + " [" + shown(r[2]) + "] " + shown(r[0]) + " \u2014 " + place + (r[3] ? " \u2014 " + r[3] : "");
  }
  function showStage(i) {
    all(".stage").forEach(function (node) { node.classList.toggle("shown", node.getAttribute("data-i") === String(i)); });
    all("svg.dag .node[data-i], table.summary tr[data-i]").forEach(function (node) {
      node.classList.toggle("shown", node.getAttribute("data-i") === String(i));
    });
  }
  function chooseHit(rec) {
    var found = null;
    all("#path-list details").forEach(function (node) {
      var mine = node.getAttribute("data-rec") === String(rec);
      node.open = mine;
      if (mine) { found = node; }
    });
    all("tr.chosen").forEach(function (node) { node.classList.remove("chosen"); });
    all("tbody tr[data-rec='" + Number(rec) + "']").forEach(function (node) { node.classList.add("chosen"); });
    var missing = document.getElementById("path-missing");
    if (missing) { missing.hidden = found !== null; }
    if (found) { found.scrollIntoView({block: "nearest"}); }
  }

  // ---- a diff page ------------------------------------------------------------------------------
  function drawDiff(part) {
    var target = document.getElementById("diff-body");
    if (target) { replace(target, diffNodes(part)); }
  }
  function diffNodes(part) {
    var out = [h("p", {"class": "meta"}, [part.summary])];
    part.sections.forEach(function (section) {
      out.push(h("h3", {}, [section.title]));
      var head = h("thead", {}, [h("tr", {}, section.cols.map(function (c, i) { return h("th", {"class": section.num[i] ? "num" : null}, [c]); }))]);
      var body = h("tbody", {}, section.rows.map(function (row) {
        return h("tr", {}, row.map(function (cell, i) { return h("td", {"class": section.num[i] ? "num" : section.cls[i]}, [shown(cell)]); }));
      }));
      out.push(h("div", {"class": "scroll"}, [h("table", {"class": "diff"}, [head, body])]));
      if (section.more) { out.push(h("p", {"class": "note"}, [section.more])); }
    });
    return out;
  }

  // ---- wiring ----------------------------------------------------------------------------------
  var picker = document.getElementById("query-picker");
  var draw = data.page === "diff" ? drawDiff : drawTrace;
  if (picker) {
    picker.addEventListener("change", function () {
      current = Number(picker.value);
      draw(data.queries[current]);
    });
  }
  if (data.page === "trace") {
    all("svg.dag .node[data-i], table.summary tr[data-i]").forEach(function (node) {
      var open = function () { if (data.stages[Number(node.getAttribute("data-i"))]) { showStage(node.getAttribute("data-i")); } };
      node.addEventListener("click", open);
      node.addEventListener("keydown", function (event) { if (event.key === "Enter" || event.key === " ") { open(); } });
    });
    document.addEventListener("click", function (event) {
      var row = event.target.closest ? event.target.closest("tbody tr[data-rec]") : null;
      if (row && !row.closest("#path-list")) { chooseHit(row.getAttribute("data-rec")); }
    });
    showStage(data.final === null || data.final === undefined ? 0 : data.final);
  }
})();
"""


def _js_list(items: tuple[str, ...]) -> str:
    return "[" + ",".join(f'"{item}"' for item in items) + "]"


#: The pages' script (the allow-lists filled in from this module's and :mod:`charts`' constants).
SCRIPT = (_SCRIPT.replace("__SVG_TAGS__", _js_list(SVG_TAGS)).replace("__HTML_TAGS__", _js_list(_HTML_TAGS))
          .replace("__ATTRIBUTES__", _js_list(_ATTRIBUTES)))
