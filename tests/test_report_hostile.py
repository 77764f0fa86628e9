"""Report pages and notebook views with hostile data: every value is shown as text, nothing it holds runs or loads.

Record texts, artifact ids, surface kinds, metadata, queries, the recipe's
name and its stage parameters, and a trace file edited by hand (stage names,
statuses, corpus name, text excerpts, lone surrogates) carry ``<script>``,
``</script>``, ``"><img src=x onerror=...>``, ``javascript:`` URLs,
``</textarea>``, HTML comments, bidirectional controls and lone surrogates.
Each page is parsed back: only the elements a report writes, no event
handler, no URL, exactly the page's two scripts (its data and its own code),
no comment opened, valid UTF-8 — and each hostile value is on the page as
text (made visible: U+FFFD for a lone surrogate, ``\\u202e`` for an override).
The browser test (test_report_browser.py) then proves no injected script ran
and no request left the page.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import irflow
from irflow.engine.batches import Candidates, QueryBatch
from irflow.engine.events import StageEvent
from irflow.engine.report.assets import SCRIPT
from irflow.engine.trace import Trace
from irflow.engine.tracecheck import excerpt
from irflow.evaluation.datasets import Collection, Document
from irflow.evaluation.evaluate import evaluate_runs
from irflow.util.unicode import visible
from report_pages import Page

PAYLOADS = ["<script>window.__pwned=1</script>", "</script><script>window.__pwned=2</script>",
            '"><img src=x onerror="window.__pwned=3">', "javascript:window.__pwned=4", "</textarea><b>bold</b>",
            "<!-- open comment", "x\u202eexe.txt", "caf\udce9", "\u2028line\u2029", "</style><style>*{}</style>",
            "${x}`y`", "&lt;b&gt;"]
#: the same payloads where a corpus needs them to be stored (UTF-8 text: a record refuses a lone surrogate)
STORABLE = [p for p in PAYLOADS if "\udce9" not in p]

#: Every element a page, its charts and its notebook views write.
ELEMENTS = {"html", "head", "meta", "title", "style", "script", "body", "main", "header", "nav", "section", "h1", "h2",
            "h3", "p", "span", "div", "label", "select", "option", "table", "thead", "tbody", "tr", "th", "td",
            "details", "summary", "svg", "g", "rect", "path", "text", "line", "polyline", "circle", "dl", "dt", "dd",
            "strong"}


def assert_inert(html: str, shown: list[str], *, fragment: bool = False) -> Page:
    """``html`` holds only what a report writes, and every value of ``shown`` as text."""
    html.encode("utf-8")  # no lone surrogate reaches a page
    page = Page(html)
    assert not page.comments, page.comments
    for node in page.elements():
        assert node.tag in ELEMENTS, node.tag
        for name, value in node.attrs.items():
            assert not name.lower().startswith("on"), (node.tag, name, value)
            assert name.lower() not in ("href", "src", "srcdoc", "action", "formaction", "xlink:href", "style"), name
    scripts = page.scripts
    if fragment:
        assert not scripts
    else:
        assert len(scripts) in (1, 2) and scripts[-1].text() == SCRIPT and "nonce" in scripts[-1].attrs
        if len(scripts) == 2:
            assert scripts[0].attrs == {"type": "application/json", "id": "irflow-data"}
    text = "".join(n.text() if n.tag != "script" else "" for n in page.root.children if not isinstance(n, str))
    data = json.dumps(page.data, ensure_ascii=False) if not fragment and len(scripts) == 2 else ""
    for value in shown:
        seen = visible(value)
        assert seen in text or json.dumps(seen, ensure_ascii=False)[1:-1] in data, value
    return page


@pytest.fixture(scope="module")
def corpus():
    records = []
    for i, payload in enumerate(STORABLE):
        records.append(irflow.Record(f"pkg{i}{payload}", f"kind{payload}"[:40], f"archive tool {payload} zip",
                                     {"owner": payload, "tags": [payload]}))
        records.append(irflow.Record(f"pkg{i}{payload}", "name", f"zip {i}", {"owner": "x"}))
    return irflow.build(records, name="hostile <script>corpus</script>")


@pytest.fixture(scope="module")
def recipe():
    return irflow.load_recipe("search").with_params(filter={"owner": {"$ne": PAYLOADS[2]}}).with_stage(
        "candidates", "filter", filter="$filter", surfaces=None)


@pytest.fixture(scope="module")
def result(corpus, recipe):
    return recipe.run(corpus, ["zip " + PAYLOADS[0], "archive " + PAYLOADS[6]], mode="hybrid", k=4, trace=True)


def _hostile_file(result, tmp_path):
    """The trace dumped, then edited as an attacker would: names, statuses, texts, lone surrogates (consistently)."""
    path = result.trace.dump(tmp_path / "run.jsonl")
    text = path.read_text(encoding="utf-8")
    evil = "fuse<script>window.__pwned=5</script>"
    text = text.replace('"fuse"', json.dumps(evil)).replace('"fuse.', json.dumps(evil + ".")[:-1])
    lines = [json.loads(line) for line in text.split("\n") if line]  # not splitlines(): a text holds U+2028
    header = lines[0]
    header["corpus"] = "corpus \ud800 <img src=x onerror=alert(6)>"
    header["recipe"] = "</title><script>alert(7)</script>"
    header["irflow_version"] = "<!--"
    header["excerpts"] = dict.fromkeys(header["excerpts"], "excerpt \udce9 </script><script>window.__pwned=8</script>")
    for line in lines[1:]:
        if line["stage"] == "collapse":
            line["params"]["key"] = '"><svg onload=alert(9)>'
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return Trace.load(edited), evil


def test_a_hostile_corpus_and_query_render_as_text(result, corpus):
    trace = result.trace
    page = assert_inert(trace.to_html(), ["zip " + PAYLOADS[0], "archive " + PAYLOADS[6]]
                        + [excerpt(f"archive tool {p} zip") for p in STORABLE if p != PAYLOADS[2]])  # one filtered
    records = page.data["records"]
    assert {r[1] for r in records} <= {visible(f"pkg{i}{p}") for i, p in enumerate(STORABLE)}
    assert page.find("title").text() == "irflow trace: recipe search on corpus hostile <script>corpus</script>"


def test_a_hostile_trace_file_renders_as_text(result, tmp_path):
    loaded, evil = _hostile_file(result, tmp_path)
    page = assert_inert(loaded.to_html(), [evil, "corpus \ud800 <img src=x onerror=alert(6)>",
                                           "</title><script>alert(7)</script>", '"><svg onload=alert(9)>',
                                           "excerpt \udce9 </script><script>window.__pwned=8</script>"])
    assert "corpus \ufffd <img" in page.find("h1").text()
    assert any(s["name"] == visible(evil) for s in page.data["stages"])


def test_the_other_pages_and_views_render_as_text(result, corpus, recipe, tmp_path):
    loaded, evil = _hostile_file(result, tmp_path)
    assert_inert(result.trace.diff_html(result.trace), ["zip " + PAYLOADS[0]])
    assert_inert(recipe.run(corpus, ["zip " + PAYLOADS[1]], mode="hybrid", k=3).to_html(), ["zip " + PAYLOADS[1]])
    assert_inert(result.trace._repr_html_(), ["zip " + PAYLOADS[0]], fragment=True)
    assert_inert(loaded._repr_html_(), [evil], fragment=True)
    assert_inert(result._repr_html_(), ["zip " + PAYLOADS[0]], fragment=True)
    assert_inert(recipe._repr_html_(), [], fragment=True)
    assert_inert(result.output("fuse")._repr_html_(), ["zip " + PAYLOADS[0]], fragment=True)
    assert_inert(result.trace.diff("dense", "fuse")._repr_html_(), ["zip " + PAYLOADS[0]], fragment=True)
    named = recipe.with_params()  # a recipe whose own name is hostile (names are free text)
    object.__setattr__(named, "name", PAYLOADS[2])
    assert_inert(named._repr_html_(), [PAYLOADS[2]], fragment=True)


def test_a_hostile_evaluation_renders_as_text(tmp_path):
    qrels = {q: {f"d{i}{p}": 1} for i, (q, p) in enumerate(zip(["q<1>", "q\u202e2", "q\"3"], STORABLE))}
    runs = {label: {q: {f"d{i}{p}": 1.0, f"other{p}": 0.5} for i, (q, p) in enumerate(zip(qrels, STORABLE))}
            for label in (PAYLOADS[0], PAYLOADS[2])}
    ev = evaluate_runs(runs, qrels, metrics="ndcg@10,p@1", baseline=PAYLOADS[0], dataset=PAYLOADS[4])
    collection = Collection(PAYLOADS[4], None, {d: Document(d, PAYLOADS[1], "text") for q in qrels for d in qrels[q]},
                            dict.fromkeys(qrels, f"query {PAYLOADS[3]}"), qrels)
    assert_inert(ev.to_html(collection=collection), [PAYLOADS[0], PAYLOADS[2], PAYLOADS[4], f"query {PAYLOADS[3]}",
                                                     "q<1>", "q\u202e2"])
    assert_inert(ev._repr_html_(), [PAYLOADS[0], PAYLOADS[2]], fragment=True)


_text = st.one_of(st.sampled_from(PAYLOADS), st.text(alphabet="<>&\"'/=!-`\\ \u202e\u2066\ud800\x00\x1babcé",
                                                     min_size=1, max_size=12))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_text, min_size=3, max_size=3), st.lists(_text, min_size=2, max_size=2), _text, _text)
def test_any_text_anywhere_in_a_trace_is_shown_as_text(texts, names, query, param):
    """A trace made of any strings (as a file may hold them) renders inert, each string shown as text."""
    batch = QueryBatch.of([query, "second"])
    rows = np.array([0, 1, 2, 2, 1], dtype=np.int64)
    first = Candidates(batch, [0, 0, 0, 1, 1], rows, [3.0, 2.0, 1.0, 2.5, 0.5], "bm25")
    second = Candidates(batch, [0, 0, 1], [2, 0, 1], [0.9, 0.8, 0.7], "custom", {f"{names[1]}.x": [1.0, 2.0, 3.0]})
    events = [StageEvent(names[0], "lexical", {"k": param}, {"query": batch}, {"query": ("query",)}, first, 1.0),
              StageEvent(names[1], "rerank", {param: [param]}, {names[0]: first}, {"candidates": (names[0],)},
                         second, 2.0, param)]
    trace = Trace(None, batch, {}, None, rows={r: (texts[r], texts[(r + 1) % 3], texts[(r + 2) % 3]) for r in range(3)},
                  excerpts={r: texts[r] for r in range(3)}, header={"recipe": param, "corpus": query})
    trace.extend(events)
    assert_inert(trace.to_html(), [*texts, query])
    assert_inert(trace.diff_html(trace, stage=names[1]), [query])
    assert_inert(trace._repr_html_(), [texts[0]], fragment=True)
