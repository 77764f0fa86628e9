"""Trace files cannot make loading or showing them cost more than a small multiple of their size.

A trace file may come from anyone.  Every value a loaded trace renders back
(``records()``, ``irflow trace show --json``, the tables) must be present in
the line it renders to, so a small line cannot expand: declared columns
filled in for candidates that lack them, a big value on a stage's first line
rendered on each of its lines, a row given a long identity once and rendered
with every candidate of that row, a header query rendered on every stage
line.  Such files are refused with a TraceError naming the line and the
field; work is measured by allocation (tracemalloc), not by wall clock.
"""

from __future__ import annotations

import copy
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

import irflow.engine.positions
from irflow.cli.app import main
from irflow.engine.batches import QueryBatch
from irflow.engine.events import StageEvent
from irflow.engine.recipe import load_recipe
from irflow.engine.trace import Summary, Trace, TraceError
from irflow.store.corpus import build
from irflow.store.records import SearchHit
from irflow.util.jsontext import outline

QUERIES = ["python parser", "http client", "sql tool"]


@pytest.fixture(scope="module")
def corpus():
    words = ["python", "parser", "http", "client", "sql", "tool", "graph", "json"]
    records = [{"artifact_id": f"pkg{i}", "surface_kind": kind, "text": f"pkg{i} {words[i % 8]} {words[(i * 3) % 8]}",
                "metadata": {"owner": f"o{i % 3}"}} for i in range(40) for kind in ("name", "description")]
    return build(records, embedder="hash", name="bounds")


@pytest.fixture(scope="module")
def lines(corpus, tmp_path_factory) -> list[dict[str, Any]]:
    """The lines of a real trace file: recipe hybrid, three queries."""
    path = load_recipe("hybrid").run(corpus, QUERIES, k=3, trace=True).trace.dump(
        tmp_path_factory.mktemp("trace") / "run.jsonl")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _line_number(lines: list[dict[str, Any]], stage: str, query: int = 0) -> int:
    return next(n for n, line in enumerate(lines, 1) if line.get("stage") == stage and line["query_index"] == query)


def _stage_line(lines: list[dict[str, Any]], stage: str, query: int = 0) -> dict[str, Any]:
    return lines[_line_number(lines, stage, query) - 1]


def _column_bomb(lines: list[dict[str, Any]], n_columns: int, n_candidates: int) -> list[dict[str, Any]]:
    """The fuse line declares ``n_columns`` float columns over ``n_candidates`` candidates with empty provenance."""
    bomb = copy.deepcopy(lines)
    fuse = _stage_line(bomb, "fuse")
    fuse["columns"] = {f"c{i}": "<f8" for i in range(n_columns)}
    fuse["candidates"] = [{"record_id": "r", "artifact_id": "a", "surface_kind": "k", "row": 10_000 + i,
                           "score": 1.0, "rank": i, "provenance": {}} for i in range(n_candidates)]
    fuse["count"] = n_candidates
    return bomb


def test_declared_columns_over_empty_provenances_are_refused_with_bounded_work(lines, tmp_path):
    path = _write(tmp_path / "bomb.jsonl", _column_bomb(lines, 2000, 1000))  # 2M implicit cells in ~400 KB
    size = path.stat().st_size
    assert size < 600_000
    tracemalloc.start()
    try:
        with pytest.raises(TraceError) as caught:
            Trace.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(caught.value)
    assert f"bomb.jsonl:{_line_number(lines, 'fuse')}:" in message
    assert "'candidates[0].provenance' lacks 2000 of the 2000 columns declared in 'columns'" in message
    assert peak < 20 * size  # reading the file and checking it, nothing filled in per cell


def test_a_column_missing_from_one_input_candidate_is_named(lines, tmp_path):
    bad = copy.deepcopy(lines)
    fuse = _stage_line(bad, "fuse", 1)
    victim = fuse["inputs"]["dense"]["candidates"][2]["provenance"]
    victim.pop(next(iter(victim)))
    with pytest.raises(TraceError, match=rf"run.jsonl:{_line_number(lines, 'fuse', 1)}: .*field "
                                         r"'inputs.dense.candidates\[2\].provenance' lacks 1 of the"):
        Trace.load(_write(tmp_path / "run.jsonl", bad))


@pytest.mark.parametrize("field", ["params", "status", "kind", "columns", "batch", "ports", "scale"])
def test_a_stage_field_said_on_one_line_only_is_refused(lines, tmp_path, field):
    """A loaded trace renders its stage's first line's value on every line: the others must say the same."""
    bad = copy.deepcopy(lines)
    big = {"params": {"weights": list(range(20_000))}, "status": "x" * 100_000, "kind": "y" * 100_000,
           "columns": {**_stage_line(bad, "fuse")["columns"], "extra": "<f8"},
           "batch": {"texts": ["z" * 1000] * 3, "origin": [0, 1, 2]},
           "ports": {"inputs": ["dense", "lexical"] * 1000}, "scale": "rrf"}[field]
    first = _stage_line(bad, "fuse", 0)
    first[field] = big
    if field == "columns":  # a complete line: the other lines lack the column
        for candidate in first["candidates"]:
            candidate["provenance"]["extra"] = None
    with pytest.raises(TraceError, match=rf"run.jsonl:{_line_number(lines, 'fuse', 1)}: .*field '{field}' is "
                                         rf".*the stage's first line \(line {_line_number(lines, 'fuse', 0)}\)"):
        Trace.load(_write(tmp_path / "run.jsonl", bad))


def test_an_input_field_said_on_one_line_only_is_refused(lines, tmp_path):
    bad = copy.deepcopy(lines)
    _stage_line(bad, "fuse", 0)["inputs"]["dense"]["batch"] = {"texts": ["z" * 1000] * 3, "origin": [0, 1, 2]}
    with pytest.raises(TraceError, match=rf":{_line_number(lines, 'fuse', 1)}: .*field 'inputs.dense.batch'"):
        Trace.load(_write(tmp_path / "run.jsonl", bad))


def test_a_line_must_name_the_headers_query(lines, tmp_path):
    """The header's query is rendered on every stage line: a line that does not hold it is refused."""
    bad = copy.deepcopy(lines)
    bad[0]["queries"][1] = "q" * 200_000
    with pytest.raises(TraceError, match=r"run.jsonl:\d+: .*field 'query' is 'http client', expected the "
                                         r"header's query 1, 'qqq"):
        Trace.load(_write(tmp_path / "run.jsonl", bad))


def test_a_row_is_one_record(lines, tmp_path):
    """The identity of a row is rendered with every candidate of that row: one candidate cannot change it."""
    bad = copy.deepcopy(lines)
    line = _stage_line(bad, "collapse", 2)
    line["candidates"][0]["record_id"] = "r" * 100_000
    with pytest.raises(TraceError, match=rf"run.jsonl:{_line_number(lines, 'collapse', 2)}: .*field "
                                         r"'candidates\[0\]' gives row \d+ the record, artifact and surface .*"
                                         r"but an earlier candidate gave it"):
        Trace.load(_write(tmp_path / "run.jsonl", bad))


def test_a_checked_field_cannot_be_replaced_through_output(lines, tmp_path):
    """The free-form ``output`` object cannot smuggle unchecked candidates or columns past the checks."""
    bad = copy.deepcopy(lines)
    fuse = _stage_line(bad, "fuse", 0)
    fuse["output"] = {"columns": {f"c{i}": "<f8" for i in range(2000)},
                      "candidates": [{"record_id": "r", "row": 10_000 + i, "score": 1.0, "rank": i, "provenance": {}}
                                     for i in range(1000)]}
    loaded = Trace.load(_write(tmp_path / "run.jsonl", bad))
    assert loaded.records()[1:] == Trace.load(_write(tmp_path / "good.jsonl", lines)).records()[1:]


def test_hits_differ_per_query_and_load_back_as_written(corpus, tmp_path):
    """A stage whose output is one hit list per query: each query's line keeps its own list (a loaded
    trace used to render the first query's hits on every line)."""
    result = load_recipe("hybrid").run(corpus, QUERIES, k=3, trace=True)
    trace = result.trace
    hits = [[SearchHit(f"a{q}{i}", "name", 1.0 / (i + 1), "t" * (q + 1), {"q": q}) for i in range(q + 1)]
            for q in range(len(QUERIES))]
    trace.append(StageEvent("hits", "custom", {}, {"collapse": result.output("collapse")},
                            {"candidates": ("collapse",)}, hits, 0.5))
    path = trace.dump(tmp_path / "run.jsonl")
    loaded = Trace.load(path)
    assert loaded.records() == trace.records()
    output = loaded.event("hits").output
    assert isinstance(output, Summary) and output.type == "hits"
    assert [output.of_query(q)["count"] for q in range(3)] == [1, 2, 3]
    assert [loaded.stage("hits").out_count(q) for q in range(3)] == ["1", "2", "3"]
    mask = loaded.event("candidates").output
    assert mask == Summary("mask", {"count": corpus.n_rows, "size": corpus.n_rows})  # the same on every line


def test_the_cli_refuses_the_bomb_in_one_paragraph(lines, tmp_path):
    path = _write(tmp_path / "bomb.jsonl", _column_bomb(lines, 2000, 1000))
    result = CliRunner().invoke(main, ["trace", "show", str(path), "--stage", "fuse", "--json"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "bomb.jsonl:" in result.output and "lacks 2000 of the 2000 columns" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_show_json_stays_within_a_few_times_its_compact_json(lines, tmp_path):
    """Deep and long free-form values come back compact below the outer levels, not one item a line."""
    deep = copy.deepcopy(lines)
    nested: Any = 0
    for _ in range(60):
        nested = [nested, 0]
    for line in deep[1:]:
        if line["stage"] == "fuse":
            line["params"]["weights"] = {"deep": nested, "wide": [0] * 5000}
    path = _write(tmp_path / "deep.jsonl", deep)
    result = CliRunner().invoke(main, ["trace", "show", str(path), "--stage", "fuse", "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["stages"][0]["params"]["weights"]["deep"] == nested
    assert len(result.output) < 2 * len(json.dumps(shown, ensure_ascii=False))  # indent=2 printed 5 times more


# -- any hostile edit: refused, or rendered within a small multiple of the file ---------------------------------

_FIELDS = ["params", "status", "kind", "query", "batch", "record_id", "provenance", "output", "ports", "columns",
           "excerpts"]


def _inflate(lines: list[dict[str, Any]], line_index: int, field: str, size: int) -> None:
    line = lines[line_index]
    if field == "params":
        line["params"] = {"x": [0] * size}
    elif field in ("status", "kind", "query"):
        line[field] = "s" * size
    elif field == "batch":
        line["batch"] = {"texts": ["b" * size], "origin": [0]}
    elif field == "record_id" and line["candidates"]:
        line["candidates"][0]["record_id"] = "r" * size
    elif field == "provenance":
        for candidate in line["candidates"]:
            candidate["provenance"] = {}
        line["columns"] = {f"c{i}": "<f8" for i in range(size)} | dict(line.get("columns") or {})
    elif field == "output":
        line["output"] = {"hits": [{"text": "h" * size}]}
    elif field == "ports":
        line["ports"] = {"inputs": ["p" * size]}
    elif field == "columns":
        line["columns"] = {f"k{i}": "O" for i in range(size)}
        for candidate in line["candidates"]:
            candidate["provenance"].update({f"k{i}": None for i in range(size)})
    elif field == "excerpts":  # a row's text is shown beside each of its candidates: a long one would multiply
        rows = {str(c["row"]) for other in lines[1:] for c in other["candidates"]}
        lines[0]["excerpts"] = dict.fromkeys(rows, "e" * size)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(1, 1000), st.sampled_from(_FIELDS), st.sampled_from([10, 3000])),
                      min_size=1, max_size=3))
def test_any_edit_is_refused_or_renders_within_a_few_times_the_file(lines, tmp_path, edits):
    edited = copy.deepcopy(lines)
    for index, field, size in edits:
        _inflate(edited, 1 + index % (len(edited) - 1), field, size)
    path = _write(tmp_path / "edited.jsonl", edited)
    try:
        loaded = Trace.load(path)
    except TraceError as error:
        assert "edited.jsonl:" in str(error) and "field" in str(error)
        return
    rendered = outline(loaded.records(), levels=4)
    assert len(rendered) < 3 * path.stat().st_size
    for query in range(loaded.n_queries):
        assert len(loaded.table(query=query, limit=1000)) < 3 * path.stat().st_size
    # its report page: the file's content a few times at most, beside the page's own style, script and DAG
    assert len(loaded.to_html(top=1000)) < 3 * path.stat().st_size + 200_000


# -- the JSON outline the CLI prints ------------------------------------------------------------------------------

_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
                     max_leaves=30)


@given(value=_json, levels=st.integers(0, 6))
def test_outline_is_the_same_json(value, levels):
    text = outline(value, levels=levels)
    assert json.loads(text) == json.loads(json.dumps(value))
    assert outline(value, levels=100) == json.dumps(value, indent=2, ensure_ascii=False)
    # each item of the outer levels costs at most a newline and its indentation more than compact JSON
    assert len(text) <= (2 * levels + 2) * len(json.dumps(value, ensure_ascii=False))


def test_outline_bounds_deep_nesting():
    nested: Any = []
    for _ in range(60):
        nested = [nested]
    compact = json.dumps(nested)
    assert len(json.dumps(nested, indent=2)) > 25 * len(compact)  # what indenting every level costs
    assert len(outline(nested, levels=4)) < 2 * len(compact)


def test_a_dumped_trace_passes_every_check_and_is_a_fixed_point(lines, tmp_path):
    path = _write(tmp_path / "run.jsonl", lines)
    loaded = Trace.load(path)
    assert loaded.records() == lines
    assert loaded.queries == QueryBatch.of(QUERIES)


def test_explaining_a_trace_of_many_mask_stages_is_linear(lines, tmp_path, monkeypatch):
    """explain asks, for each mask stage, whether a stage it fed holds the record: once for all stages,
    not once per mask stage over every stage (a file of thousands of mask stages cost their square)."""
    many = copy.deepcopy(lines)
    masks = [line for line in many[1:] if line["stage"] == "candidates"]
    n_masks = 300
    for i in range(n_masks):
        many.extend(dict(line, stage=f"m{i}") for line in masks)
    for line in many[1:]:
        if line["stage"] == "dense":
            line["inputs"].update({f"m{i}": {"type": "mask", "count": 1, "size": 1} for i in range(n_masks)})
    loaded = Trace.load(_write(tmp_path / "masks.jsonl", many))
    calls = []
    original = irflow.engine.positions.position
    monkeypatch.setattr(irflow.engine.positions, "position", lambda *a: calls.append(a) or original(*a))
    record = _stage_line(lines, "collapse")["candidates"][0]["record_id"]
    explanation = loaded.explain(record)
    assert [s.note for s in explanation.steps if s.stage.startswith("m")] == ["in the candidate set"] * n_masks
    assert len(calls) < 5 * len(lines)  # not n_masks times the stages fed by them
