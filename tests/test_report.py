"""Report pages of traces, results and diffs: what they show, and that it is what the terminal says.

A page is read back with Python's HTML parser (tests/report_pages.py): its
summary and candidate tables are compared cell by cell with ``irflow trace
show`` (the terminal's table of the same query), its hit paths with
``Trace.explain``, its diff sections with ``irflow trace diff``; every
query of the page is in its data block, with the same numbers.  The pages
are self-contained (nothing they could fetch), say their caps, and are
written atomically like every other irflow file.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from irflow.cli.app import main
from irflow.engine.recipe import load_recipe
from irflow.engine.report.extract import Caps, extract
from irflow.engine.report.extract import cut as ecut
from irflow.engine.report.tracepage import page_of
from irflow.engine.trace import Trace
from irflow.engine.trace import diff as diff_traces
from irflow.errors import OutputError, TraceError
from irflow.store.corpus import build
from irflow.util.table import format_value
from report_pages import Page, cut, table_rows, terminal_rows
from search_reference import records

QUERIES = ["python parser", "http client async", "graph database", "sql schema tool"]


@pytest.fixture(scope="module")
def traced(corpus):
    # the search recipe in hybrid mode: formulate, weight, rerank and boost pass through; k=4 of 45 records
    return load_recipe("search").run(corpus, QUERIES, mode="hybrid", k=4, trace=True)


@pytest.fixture(scope="module")
def page(traced):
    return Page(traced.trace.to_html(top=6))


def _stage_index(page, name):
    return next(i for i, s in enumerate(page.data["stages"]) if s["name"] == name)


def test_the_page_is_self_contained(page):
    assert page.html.startswith("<!DOCTYPE html>")
    assert [s.attrs.get("type") for s in page.scripts] == ["application/json", None]  # data, then the script
    for node in page.elements():
        for name, value in node.attrs.items():
            assert not name.startswith("on"), (node.tag, name)
            if name in ("href", "src", "xlink:href", "action", "srcset", "poster"):
                raise AssertionError(f"<{node.tag} {name}={value!r}>: a report links to nothing")
    assert not page.find_all("link") and not page.find_all("img") and not page.find_all("iframe")
    style = page.find("style").text()
    assert "url(" not in style and "@import" not in style
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", page.html)  # the SVG namespace names, never loads


def test_the_page_reads_without_javascript(page, traced):
    main = page.find("main")
    for section in ("dag", "summary", "bump", "stages", "paths"):
        assert main.find(id=section)
    assert page.find("svg", class_="dag") and page.find("svg", class_="bump")
    # every stage of the first query, each candidate table as HTML rows
    assert len(page.find_all("div", class_="stage")) == len(traced.trace)
    assert page.find("p", class_="nojs-only").text().startswith("JavaScript is off")


def test_summary_equals_the_terminal(page, traced):
    headers, terminal = terminal_rows(traced.trace.summary_table(0))
    assert headers == ["stage", "kind", "status", "in", "out", "scale", "ms"]
    assert table_rows(page.find("table", class_="summary")) == terminal


def test_candidate_tables_equal_the_terminal(page, traced):
    trace = traced.trace
    shown = 0
    for i, event in enumerate(trace):
        view = trace.stage(event.name)
        box = page.find("div", id=f"stage-{i}")
        if not view.has_candidates or view.state in ("inactive", "passed"):
            assert not box.find_all("table"), event.name  # one line: no table repeated
            continue
        headers, terminal = terminal_rows(view.table(0, limit=6))
        html = table_rows(box.find("table"))
        assert len(html) == len(terminal) == min(6, len(view.ranking(0)))
        for mine, theirs in zip(html, terminal):
            rank, score, scale, artifact, surface, record, text = mine
            assert [rank, score, artifact, surface, record] == theirs[:5]
            assert cut(text, 40) == theirs[5] and scale == view.scale
        note = box.find("p", class_="count").text()
        n = len(view.ranking(0))
        assert note == (f"showing the top 6 of {n} candidates" if n > 6 else f"{n} candidate{'s' * (n != 1)}")
        shown += 1
    assert shown >= 4  # candidates, dense, lexical, fuse... had tables


def test_every_query_of_the_page_holds_the_terminals_numbers(page, traced):
    trace = traced.trace
    data = page.data
    records = data["records"]
    assert [part["q"] for part in data["queries"]] == list(range(len(QUERIES)))
    for part in data["queries"]:
        q = part["q"]
        assert part["text"] == QUERIES[q]
        _, summary = terminal_rows(trace.summary_table(q))
        assert [list(io) for io in part["io"]] == [row[3:5] for row in summary]
        for i, table in enumerate(part["tables"]):
            if table is None:
                continue
            ranking = trace.stage(data["stages"][i]["name"]).ranking(q)
            assert table["n"] == len(ranking)
            assert [[records[r][0], rank, score] for r, rank, score in table["rows"]] == [
                [c["record_id"], c["rank"], format_value(c["score"])] for c in ranking[:6]]


def test_paths_are_the_explanations(page, traced):
    trace = traced.trace
    data = page.data
    for part in data["queries"]:
        final = data["stages"][data["final"]]["name"]
        assert final == "collapse"
        hits = [h.record_id for h in traced.hits[part["q"]]]
        assert [data["records"][p[0]][0] for p in part["paths"]] == hits  # every hit of the output, in order
        for path in part["paths"]:
            why = trace.explain(data["records"][path[0]][0], query=part["q"]).to_dict()
            assert path[1:4] == [why["rank"], format_value(why["score"]), why["scale"]]
            steps = [[s["stage"], s["present"], s["rank"], format_value(s["score"]), s["scale"], s["note"]]
                     for s in why["steps"]]
            mine = [[s[0], None if s[2] is None else bool(s[2]), s[3], s[4], s[5], s[7]] for s in path[5]]
            assert mine == steps
            details = [[d["label"], format_value(d["value"]), d["column"]] for s in why["steps"] for d in s["details"]]
            assert [d for s in path[5] for d in s[8]] == details
    first = page.find("div", id="path-list").find_all("details")
    assert len(first) == len(traced.hits[0]) and "open" in first[0].attrs


def test_the_dag_draws_what_each_stage_did(page, traced):
    boxes = {node.find("text").text(): node for node in page.find("svg", class_="dag").find_all("g", class_="node")}
    assert set(boxes) == {"query", *traced.trace.stages}
    assert "passed" in boxes["weight"].attrs["class"] and "passed" in boxes["rerank"].attrs["class"]
    assert "ran" in boxes["fuse"].attrs["class"]
    assert "k = 4" in boxes["collapse"].find("title").text()  # parameters in the tooltip
    fuse = boxes["fuse"]
    lines = [t.text() for t in fuse.find_all("text")]
    _, summary = terminal_rows(traced.trace.summary_table(0))
    row = next(r for r in summary if r[0] == "fuse")
    assert lines[:3] == ["fuse", "fuse", f"{row[3]} \u2192 {row[4]}"] and lines[3].startswith(f"{row[5]} · {row[6]} ms")


def test_a_switched_off_stage_is_drawn_as_such(corpus):
    trace = load_recipe("search").run(corpus, "python parser", mode="lexical", k=3, trace=True).trace
    page = Page(trace.to_html())
    dense = next(g for g in page.find("svg", class_="dag").find_all("g", class_="node") if g.find("text").text() == "dense")
    assert "off" in dense.attrs["class"].split()
    i = _stage_index(page, "dense")
    assert "switched off" in page.find("div", id=f"stage-{i}").find("h3").text()


def test_caps_are_said_and_bounded(traced):
    html = traced.trace.to_html(queries=[1, 2], top=2, paths=1)
    page = Page(html)
    assert [p["q"] for p in page.data["queries"]] == [1, 2]
    assert "top 2 candidates per query" in page.find("p", class_="caps").text()
    assert all(len(t["rows"]) <= 2 for part in page.data["queries"] for t in part["tables"] if t)
    assert all(len(part["paths"]) == 1 for part in page.data["queries"])
    assert "queries 1\u20132 of 4" in page.find("nav").text() and "at most 100" in page.find("nav").text()
    with pytest.raises(TraceError, match=r"queries \[7\] are not in this trace"):
        traced.trace.to_html(queries=[7])
    with pytest.raises(TraceError, match="over its limit of 100"):  # one page holds at most Caps.queries
        page_of(500, range(500), Caps())
    with pytest.raises(ValueError, match="top must be a positive integer"):
        traced.trace.to_html(top=0)


def test_a_loaded_trace_and_an_old_file_render(traced, tmp_path):
    path = traced.trace.dump(tmp_path / "run.jsonl")
    loaded = Trace.load(path)
    live, again = Page(traced.trace.to_html()), Page(loaded.to_html())
    assert again.data["queries"] == live.data["queries"] and again.data["records"] == live.data["records"]
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    del header["excerpts"]
    old = tmp_path / "old.jsonl"
    old.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    page = Page(Trace.load(old).to_html())
    assert all(r[3] is None for r in page.data["records"])  # no excerpt: the id alone
    assert table_rows(page.find("div", id=f"stage-{_stage_index(page, 'collapse')}").find("table"))[0][6] == "-"


def test_to_html_writes_atomically_and_never_into_a_corpus(traced, tmp_path):
    target = tmp_path / "report.html"
    target.write_text("old", encoding="utf-8")
    html = traced.to_html(target)
    assert target.read_text(encoding="utf-8") == html
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    build(records()[:5], embedder="hash", path=tmp_path / "corpus")
    with pytest.raises(OutputError, match="inside"):
        traced.trace.to_html(tmp_path / "corpus" / "report.html")
    assert not (tmp_path / "corpus" / "report.html").exists()


def test_an_untraced_result_shows_its_output_and_paths_from_provenance(corpus, hybrid):
    result = hybrid.run(corpus, QUERIES[:2], k=3)
    page = Page(result.to_html())
    data = page.data
    assert [s["name"] for s in data["stages"]] == ["collapse"]
    assert "Not traced" in page.find("header").text()
    for part in data["queries"]:
        hits = result.hits[part["q"]]
        assert [data["records"][r][0] for r, _, _ in part["tables"][0]["rows"]] == [h.record_id for h in hits]
        for path, hit in zip(part["paths"], hits):
            why = result.explain(hit, query=part["q"]).to_dict()
            assert [s[0] for s in path[5]] == [s["stage"] for s in why["steps"]]
            assert [s[3] for s in path[5]] == [s["rank"] for s in why["steps"]]
    traced = hybrid.run(corpus, QUERIES[:2], k=3, trace=True)
    assert Page(traced.to_html()).data["queries"] == Page(traced.trace.to_html()).data["queries"]


def test_the_diff_page_says_what_trace_diff_says(corpus, hybrid, tmp_path):
    before = hybrid.run(corpus, QUERIES, k=4, trace=True).trace
    after = hybrid.run(corpus, QUERIES, k=4, fusion="blend", trace=True).trace
    page = Page(before.diff_html(after, top=3))
    data = page.data
    assert data["stage"] == "collapse" and len(data["queries"]) == len(QUERIES)
    for part in data["queries"]:
        diff = diff_traces(before, after, stage="collapse", query=part["q"])
        sections = {s["title"]: s for s in part["sections"]}
        for title in ("entered", "left", "moved", "rescored"):
            changes = getattr(diff, title)
            if not changes:
                assert title not in sections
                continue
            rows = sections[title]["rows"]
            assert [[r[0], r[1], r[3], r[4], r[8]] for r in rows] == [
                [c.old_rank, c.new_rank, format_value(c.old_score), format_value(c.new_score), c.record_id]
                for c in changes[:3]]
        assert part["summary"].startswith(f"{len(diff.entered)} entered, {len(diff.left)} left")
        assert ("different scales" in part["summary"]) == (not diff.same_scale)
    first = page.find("div", id="diff-body")
    assert first.find("p", class_="meta").text() == data["queries"][0]["summary"]


def test_the_diff_page_says_when_queries_differ(corpus, hybrid):
    before = hybrid.run(corpus, QUERIES[:2], k=2, trace=True).trace
    after = hybrid.run(corpus, [QUERIES[0], "something else"], k=2, trace=True).trace
    parts = Page(before.diff_html(after)).data["queries"]
    assert parts[0]["sections"] is not None and parts[1]["summary"].startswith("not compared: the second trace's query 1")


def test_extract_costs_one_index_per_batch(traced, monkeypatch):
    # the per-query work reads slices of each batch's index: origin_index is computed once per batch
    calls = []
    original = type(traced.trace.event("fuse").output).origin_index

    def counted(self):
        calls.append(id(self))
        return original.fget(self)

    monkeypatch.setattr(type(traced.trace.event("fuse").output), "origin_index", property(counted))
    extract(traced.trace, range(len(QUERIES)), Caps())
    assert max(calls.count(c) for c in set(calls)) == 1


def test_cli_report_and_diff(traced, corpus, hybrid, tmp_path):
    run = traced.trace.dump(tmp_path / "run.jsonl")
    other = hybrid.run(corpus, QUERIES, k=4, trace=True).trace.dump(tmp_path / "other.jsonl")
    runner = CliRunner()
    done = runner.invoke(main, ["report", str(run), "-o", str(tmp_path / "r.html"), "--queries", "1:3", "--top", "5"])
    assert done.exit_code == 0, done.output
    assert "report written to" in done.stderr
    assert [p["q"] for p in Page((tmp_path / "r.html").read_text(encoding="utf-8")).data["queries"]] == [1, 2]
    done = runner.invoke(main, ["report", "--diff", str(run), str(other), "-o", str(tmp_path / "d.html"),
                                "--stage", "collapse"])
    assert done.exit_code == 0, done.output
    assert Page((tmp_path / "d.html").read_text(encoding="utf-8")).data["page"] == "diff"
    for args, message in ((["--diff", str(run)], "--diff compares two trace files"),
                          ([str(run), str(other)], "give one trace file"),
                          ([str(run), "--stage", "x"], "--stage names the stage a --diff compares"),
                          ([str(run), "--queries", "9:"], "holds no query of this trace"),
                          ([str(run), "--queries", "a-b"], "is not START:STOP")):
        bad = runner.invoke(main, ["report", *args, "-o", str(tmp_path / "x.html")])
        assert bad.exit_code == 2 and message in bad.output and "Traceback" not in bad.output
    missing = runner.invoke(main, ["report", "--diff", str(run), str(other), "-o", str(tmp_path / "x.html"),
                                   "--stage", "nope"])
    assert missing.exit_code == 1 and "no stage 'nope'" in missing.stderr
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("hello\n", encoding="utf-8")
    bad = runner.invoke(main, ["report", str(garbage), "-o", str(tmp_path / "x.html")])
    assert bad.exit_code == 1 and "not JSON" in bad.stderr and not (tmp_path / "x.html").exists()


def test_bump_chart_ranks_are_each_stages(page, traced):
    data = page.data
    trace = traced.trace
    for part in data["queries"]:
        q = part["q"]
        spec = part["bump"]
        lines = [child for child in spec[2:] if isinstance(child, list) and child[0] == "g"]
        assert len(lines) == len(traced.hits[q])
        candidate_stages = [e.name for e in trace if e.output.__class__.__name__ == "Candidates" and e.output.active]
        for hit, line in zip(traced.hits[q], lines):
            assert line[2] == ["title", {}, ecut(f"{hit.artifact_id} [{hit.surface_kind}]", 26)]
            held = []
            for name in candidate_stages:
                ranking = trace.stage(name).ranking(q)
                ranks = [c["rank"] for c in ranking if c["record_id"] == hit.record_id]
                held.append(min(ranks) if ranks else None)
            circles = [c for c in line[3:] if c[0] == "circle"]
            assert len(circles) == sum(r is not None for r in held)
            # rank 1 highest: a smaller rank is drawn higher (a smaller y)
            ys = [float(c[1]["cy"]) for c in circles]
            ranks = [r for r in held if r is not None]
            for (r1, y1), (r2, y2) in zip(zip(ranks, ys), zip(ranks[1:], ys[1:])):
                assert (r1 < r2) == (y1 < y2) or r1 == r2
    svg = page.find("svg", class_="bump")
    assert len(svg.find_all("g", class_="hit")) == len(traced.hits[0])
