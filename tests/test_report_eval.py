"""An evaluation's page (Evaluation.to_html, irflow eval --report) and the notebook views, in plain Python.

The page's metric and significance tables are the terminal's (``irflow eval``
prints ``Evaluation.table`` and ``Comparisons.table``) cell for cell; its
per-query chart has a bar per query, sorted; the worst and best queries come
with their hits (document, score, grade, title) and texts; the settings name
the embedder, analyzer and depth.  Every object a notebook shows has an HTML
view without a script: tables and SVG.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

import irflow
from irflow.cli.app import main
from irflow.evaluation.datasets import load_beir
from irflow.evaluation.evaluate import evaluate, evaluate_runs
from irflow.util.table import format_value
from report_pages import Page, table_rows, terminal_rows
from test_evaluate import write_collection

WORDS = ["apple", "banana", "cherry", "date", "grape", "kiwi", "lemon", "melon"]
DOCS = [(f"d{i}", f"title {i}", " ".join(WORDS[(i * k) % 8] for k in range(1, 5))) for i in range(24)]
QUERIES = [(f"q{i}", f"{WORDS[i % 8]} {WORDS[(i * 3) % 8]}") for i in range(10)]
QRELS = [(f"q{i}", f"d{(i * 5) % 24}", 1 + i % 2) for i in range(10)] + [(f"q{i}", f"d{(i * 7 + 1) % 24}", 1)
                                                                          for i in range(0, 10, 2)]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return write_collection(tmp_path_factory.mktemp("beir"), DOCS, QUERIES, QRELS)


@pytest.fixture(scope="module")
def evaluation(dataset, tmp_path_factory):
    return evaluate(["lexical", "hybrid"], dataset, metrics="ndcg@10,p@1", baseline="lexical", depth=20,
                    embedder="hash", cache_dir=tmp_path_factory.mktemp("cache"))


def test_the_tables_are_the_terminals(evaluation, dataset):
    page = Page(evaluation.to_html(collection=load_beir(dataset)))
    headers, rows = terminal_rows(evaluation.table())
    html = table_rows(page.find("table", class_="metrics"))
    assert html == [[cell.rstrip() for cell in row] for row in rows[: len(evaluation.systems)]]  # then the legend
    assert [th.text() for th in page.find("table", class_="metrics").find("thead").find_all("th")] == headers
    title, table = evaluation.compare().table().split("\n", 1)
    _, rows = terminal_rows(table)
    assert table_rows(page.find("table", class_="significance")) == rows
    assert page.find("section", id="significance").find("p").text() == title


def test_the_charts_extremes_and_settings(evaluation, dataset):
    collection = load_beir(dataset)
    page = Page(evaluation.to_html(collection=collection))
    charts = page.find("section", id="per-query").find_all("svg", class_="bars")
    assert len(charts) == len(evaluation.metrics)  # hybrid against lexical, one per metric
    base, other = evaluation["lexical"], evaluation["hybrid"]
    for metric, chart in zip(evaluation.metrics, charts):
        bars = chart.find_all("rect")
        diffs = sorted(other.per_query[metric][q] - base.per_query[metric][q] for q in evaluation.qrels)
        assert len(bars) == len(diffs) == evaluation.n_queries
        shown = [float(b.find("title").text().rsplit(": ", 1)[1]) for b in bars]
        assert shown == pytest.approx(diffs, abs=5e-5)
    extremes = page.find("section", id="extremes")
    worst = extremes.find_all("details")[0]
    summary = worst.find("summary").text()
    qid = summary.split(":")[0].removeprefix("query ")
    assert collection.queries[qid] in summary
    hits = table_rows(worst.find_all("table")[0])
    ranked = sorted(other.run[qid].items(), key=lambda item: (-item[1], item[0]))[:10]
    assert [row[2] for row in hits] == [doc for doc, _ in ranked]
    assert [row[3] for row in hits] == [str(collection.qrels[qid].get(doc, "-")) for doc, _ in ranked]
    assert all(row[4].startswith("title") for row in hits)
    settings = dict(table_rows(page.find("section", id="settings").find("table")))
    assert settings["embedder"] == "hash:256" and settings["analyzer"] == "english" and settings["depth"] == "20"
    assert settings["queries"] == str(evaluation.n_queries)


def test_without_a_baseline_or_runs_the_page_says_so():
    ev = evaluate_runs({"a": {"q1": {"d1": 1.0}}, "b": {"q1": {"d2": 1.0}}}, {"q1": {"d1": 1}}, metrics="p@1")
    page = Page(ev.to_html())
    assert "No baseline" in page.find("section", id="significance").text()
    assert len(page.find("section", id="per-query").find_all("svg")) == 2  # each system's values, sorted
    object.__setattr__(ev.systems[0], "run", None)  # an evaluation that did not keep its runs
    assert "the runs of this evaluation were not kept" in Page(ev.to_html()).find("section", id="extremes").text()


def test_irflow_eval_writes_the_report(dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    out = tmp_path / "eval.html"
    done = CliRunner().invoke(main, ["eval", "lexical", "--dataset", str(dataset), "--metrics", "ndcg@10",
                                     "--depth", "20", "--report", str(out)])
    assert done.exit_code == 0, done.output
    assert "report written to" in done.stderr
    page = Page(out.read_text(encoding="utf-8"))
    assert table_rows(page.find("table", class_="metrics"))[0][0] == "lexical"
    settings = dict(table_rows(page.find("section", id="settings").find("table")))
    assert settings["embedder"] == "none" and settings["depth"] == "20"  # lexical only: no vectors
    irflow.build([irflow.Record("a", "name", "a", {})], path=tmp_path / "corpus")
    bad = CliRunner().invoke(main, ["eval", "lexical", "--dataset", str(dataset), "--report",
                                    str(tmp_path / "corpus" / "eval.html")])
    assert bad.exit_code == 1 and "inside" in bad.stderr  # refused before the evaluation runs


# -- notebook views ----------------------------------------------------------------------------------------------


def _view(obj) -> Page:
    html = obj._repr_html_()
    assert isinstance(html, str) and "<script" not in html and html.startswith("<style>")
    return Page(html)


def test_every_object_a_notebook_shows_has_a_view(corpus, hybrid, evaluation):
    recipe = _view(hybrid)
    assert [t.text() for t in recipe.find("svg", class_="dag").find_all("text", class_="name")] == \
        ["query", *hybrid.stages]
    assert [row[0] for row in table_rows(recipe.find("table"))] == list(hybrid.stages)
    result = hybrid.run(corpus, ["python parser", "http client"], k=3, trace=True)
    view = _view(result)
    tables = view.find_all("table")
    assert [[row[2] for row in table_rows(t)] for t in tables] == [[h.artifact_id for h in hits] for hits in result.hits]
    trace = _view(result.trace)
    _, summary = terminal_rows(result.trace.summary_table(0))
    assert table_rows(trace.find_all("table")[0]) == summary
    assert trace.find("svg", class_="dag") and trace.find("svg", class_="bump")
    final = table_rows(trace.find_all("table")[1])
    assert [row[5] for row in final] == [h.record_id for h in result.hits[0]]
    candidates = _view(result.output("fuse"))
    header = [th.text() for th in candidates.find("table").find("thead").find_all("th")]
    assert header[:3] == ["rank", "score", "row"] and "fuse.dense.rank" in header
    first = table_rows(candidates.find("table"))[0]
    fuse = result.output("fuse")
    assert first[:3] == ["1", format_value(float(fuse.score[0])), str(int(fuse.row[0]))]
    diff = _view(result.trace.diff("dense", "fuse"))
    assert "entered" in diff.html or "moved" in diff.html or "rescored" in diff.html
    ev = _view(evaluation)
    assert table_rows(ev.find("table", class_="metrics"))[0][0] == "lexical"
    assert ev.find("table", class_="significance")
    assert not math.isnan(evaluation["hybrid"].means["ndcg@10"])
