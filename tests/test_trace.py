"""Traces: Result.trace, the JSON Lines dump and load, tables and diffs, on a real corpus."""

from __future__ import annotations

import json

import numpy as np
import pytest

import irflow.engine.trace
from irflow.engine.batches import Candidates, QueryBatch
from irflow.store.corpus import build
from irflow.engine.executor import StageEvent, TraceRecorder
from irflow.engine.recipe import load_recipe
from irflow.engine.trace import NotInTrace, Summary, Trace, TraceError, diff, jsonable

WORDS = ["parser", "http", "client", "graph", "sql", "async", "python", "fast", "json", "tool"]


def _records() -> list[dict]:
    rng = np.random.default_rng(3)
    records = []
    for i in range(15):
        words = rng.choice(WORDS, size=5)
        owner = "team" if i % 3 == 0 else f"user{i}"
        records.append({"artifact_id": f"pkg{i}", "surface_kind": "name", "text": f"pkg{i} {words[0]}",
                        "metadata": {"owner": owner}})
        records.append({"artifact_id": f"pkg{i}", "surface_kind": "description", "text": " ".join(words),
                        "metadata": {"owner": owner}})
    return records


@pytest.fixture(scope="module")
def corpus():
    return build(_records(), embedder="hash", name="tracetest")


@pytest.fixture(scope="module")
def result(corpus, hybrid):
    return hybrid.run(corpus, ["python parser", "http client"], k=3, trace=True)


def _ids(corpus, candidates: Candidates, query: int) -> list[str]:
    rows = candidates.row[candidates.origin_index == query]
    return [corpus.record_ids[r] for r in rows.tolist()]


# -- Result.trace ------------------------------------------------------------------------------


def test_a_traced_run_has_a_trace_of_every_stage(result, corpus):
    trace = result.trace
    assert isinstance(trace, Trace) and isinstance(trace, TraceRecorder)
    assert trace.stages == ("candidates", "dense", "lexical", "fuse", "collapse")
    assert all(isinstance(e, StageEvent) for e in trace)
    assert trace.event("fuse").output is result.output("fuse")
    assert trace.corpus_name == "tracetest" and trace.recipe_name == "hybrid" and trace.n_queries == 2
    assert "Trace(recipe='hybrid'" in repr(trace)


def test_an_untraced_run_creates_no_trace(corpus, hybrid, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("a Trace was created with trace=False")

    monkeypatch.setattr(Trace, "from_recorder", forbidden)
    monkeypatch.setattr(irflow.engine.trace, "Trace", None)  # even the class is never looked up
    result = hybrid.run(corpus, "python parser", k=2)
    assert result.trace is None and len(result.hits) == 2


# -- records and dump ---------------------------------------------------------------------------


def test_records_follow_the_schema(result, corpus):
    records = result.trace.records()
    header, lines = records[0], records[1:]
    assert header["type"] == "header" and header["format"] == "irflow-trace" and header["format_version"] == 1
    assert header["recipe"] == "hybrid" and header["corpus"] == "tracetest" and header["n_rows"] == corpus.n_rows
    assert header["queries"] == ["python parser", "http client"] and header["params"]["k"] == 3
    assert header["stages"] == list(result.trace.stages) and header["irflow_version"]
    assert [(line["stage"], line["query_index"]) for line in lines] == [
        (s, q) for s in result.trace.stages for q in (0, 1)]
    for line in lines:
        for key in ("stage", "kind", "query", "query_index", "elapsed_ms", "status", "params", "scale",
                    "candidates", "inputs", "output_type"):
            assert key in line
    fuse = next(line for line in lines if line["stage"] == "fuse" and line["query_index"] == 1)
    assert fuse["query"] == "http client" and fuse["scale"] == "rrf" and fuse["params"]["rrf_k"] == 60
    assert fuse["ports"] == {"inputs": ["dense", "lexical"]}
    output = result.output("fuse")
    assert [c["record_id"] for c in fuse["candidates"]] == _ids(corpus, output, 1)
    first = fuse["candidates"][0]
    row = first["row"]
    assert first["artifact_id"] == corpus.artifact_ids[row] and first["rank"] == 1
    assert first["surface_kind"] == corpus.kinds[corpus.kind_codes[row]]
    assert set(first["provenance"]) == set(output.provenance)
    assert first["score"] == output.score[output.origin_index == 1][0]
    assert set(fuse["inputs"]) == {"dense", "lexical"}
    assert [c["record_id"] for c in fuse["inputs"]["dense"]["candidates"]] == _ids(corpus, result.output("dense"), 1)
    mask = next(line for line in lines if line["stage"] == "candidates")
    assert mask["output_type"] == "mask" and mask["candidates"] == [] and mask["count"] == corpus.n_rows
    dense = next(line for line in lines if line["stage"] == "dense")
    assert dense["inputs"]["query"] == {"type": "queries", "count": 1, "texts": ["python parser"]}
    # strict JSON: an absent channel's NaN provenance is written as null
    json.dumps(records, allow_nan=False)
    assert any(c["provenance"]["fuse.lexical.score"] is None for line in lines if line["stage"] == "fuse"
               for c in line["candidates"])


def test_dump_then_load_gives_the_same_trace(result, tmp_path):
    path = result.trace.dump(tmp_path / "run.jsonl")
    loaded = Trace.load(path)
    assert loaded.records() == result.trace.records()
    assert loaded.stages == result.trace.stages and loaded.corpus is None and loaded.recipe is None
    assert loaded.queries == QueryBatch.of(["python parser", "http client"])
    for event in result.trace:
        again = loaded.event(event.name)
        assert (again.kind, again.status, again.elapsed_ms, again.ports) == (
            event.kind, event.status, event.elapsed_ms, event.ports)
        assert again.params == jsonable(event.params)
        if isinstance(event.output, Candidates):
            assert again.output == event.output  # columns, scores, scale and provenance, dtypes restored
            assert all(again.output.provenance[n].dtype == c.dtype for n, c in event.output.provenance.items())
            for name, value in event.inputs.items():
                if isinstance(value, Candidates):
                    assert again.inputs[name] == value
                elif isinstance(value, QueryBatch):
                    assert again.inputs[name] == value
                else:  # a mask comes back as its counts
                    assert again.inputs[name].count == int(value.sum())
        else:
            assert again.output == Summary("mask", {"count": int(event.output.sum()), "size": event.output.size})
    (tmp_path / "again.jsonl").write_text("")
    loaded.dump(tmp_path / "again.jsonl")
    assert (tmp_path / "again.jsonl").read_text() == path.read_text()  # a fixed point
    assert loaded.table() == result.trace.table()  # the file alone renders the same tables


def test_a_reformulated_batch_round_trips(corpus, tmp_path):
    recipe = load_recipe("search")

    def formulate(query: str) -> list[str]:
        return [query, f"{query} json"]

    result = recipe.run(corpus, ["python parser", "sql"], k=2, mode="hybrid", formulate=formulate, trace=True)
    trace = result.trace
    dense = trace.event("dense").output
    assert not dense.queries.is_root
    line = next(r for r in trace.records() if r.get("stage") == "dense" and r["query_index"] == 1)
    assert line["batch"] == {"texts": ["python parser", "python parser json", "sql", "sql json"],
                             "origin": [0, 0, 1, 1]}
    assert {c["subquery"] for c in line["candidates"]} == {2, 3}
    formulate_line = next(r for r in trace.records() if r.get("stage") == "formulate")
    assert formulate_line["params"]["formulator"].endswith("<locals>.formulate>")  # a callable, by name
    assert formulate_line["output"]["texts"] == ["python parser", "python parser json"]
    loaded = Trace.load(trace.dump(tmp_path / "search.jsonl"))
    assert loaded.records() == trace.records()
    assert loaded.event("dense").output == dense
    assert loaded.event("formulate").output == trace.event("formulate").output


def test_jsonable_renders_callables_and_numpy():
    def scorer(hit):
        return 0.0

    rendered = jsonable({"f": scorer, "a": np.arange(2), "x": np.float32(0.5), "n": np.nan, "i": float("inf"),
                         "t": ("a", np.int64(3))})
    assert rendered.pop("f").endswith("<locals>.scorer>")
    assert rendered == {"a": [0, 1], "x": 0.5, "n": None, "i": "inf", "t": ["a", 3]}


def test_load_refuses_what_is_not_a_trace(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such trace file"):
        Trace.load(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "header", "format": "irflow-trace", "format_version": 1}\n{oops\n')
    with pytest.raises(TraceError, match=r"bad.jsonl:2: not JSON"):
        Trace.load(bad)
    bad.write_text('{"hello": 1}\n')
    with pytest.raises(TraceError, match="not an irflow trace"):
        Trace.load(bad)
    bad.write_text('{"type": "header", "format": "irflow-trace", "format_version": 99}\n')
    with pytest.raises(TraceError, match="version 99"):
        Trace.load(bad)
    bad.write_text('{"type": "header", "format": "irflow-trace", "format_version": 1, "queries": ["q"]}\n'
                   '{"type": "stage", "stage": "x", "query_index": 0}\n')
    with pytest.raises(TraceError, match="malformed"):
        Trace.load(bad)


# -- tables ---------------------------------------------------------------------------------------


def test_table_renders_every_stage(result, corpus):
    text = result.trace.table(query=1, limit=2)
    assert "query 1: 'http client'" in text
    summary = text.split("\n\n")[1]
    for event in result.trace:
        assert event.name in summary and event.kind in summary
    assert "collapse" in summary and "rrf" in summary and "rows" in summary  # the mask counts rows
    for name in ("dense", "lexical", "fuse", "collapse"):
        assert f"== {name} ({name})" in text
    top = _ids(corpus, result.output("fuse"), 1)[0]
    assert top in text and "more" in text


def test_table_of_one_stage_shows_its_params_and_candidates(result, corpus):
    text = result.trace.table(stage="fuse", query=0, limit=3)
    assert 'method="rrf"' in text and "rrf_k=60" in text
    assert "dense.contribution" in text and "lexical.rank" in text
    for record_id in _ids(corpus, result.output("fuse"), 0)[:3]:
        assert record_id in text
    assert _ids(corpus, result.output("fuse"), 0)[3] not in text


def test_table_names_what_is_missing(result):
    with pytest.raises(NotInTrace, match="no stage 'nope' in this trace; stages: candidates, dense"):
        result.trace.table(stage="nope")
    with pytest.raises(KeyError):  # NotInTrace is a KeyError too
        result.trace.event("nope")
    with pytest.raises(NotInTrace, match="query 5 is not in this trace: it holds 2 queries"):
        result.trace.table(query=5)
    with pytest.raises(TraceError, match="outputs mask, not candidates"):
        result.trace.stage("candidates").ranking(0)


# -- diff -------------------------------------------------------------------------------------------


def _channel(query: QueryBatch, rows: list[int], scale: str) -> Candidates:
    return Candidates(query, [0] * len(rows), rows, np.linspace(0.9, 0.5, len(rows)), scale)


def test_diff_of_two_stages_by_hand(corpus, hybrid):
    # dense ranks rows 0, 2, 4; lexical ranks 4, 6, 0.  RRF (rrf_k 60), ties in first-seen order:
    # row 0: 1/61 + 1/63, row 4: 1/63 + 1/61, row 2: 1/62, row 6: 1/62  ->  fuse order 0, 4, 2, 6
    batch = QueryBatch.of(["anything"])
    result = hybrid.run(corpus, "anything", trace=True, per_artifact=False,
                        overrides={"dense": _channel(batch, [0, 2, 4], "cosine"),
                                   "lexical": _channel(batch, [4, 6, 0], "bm25")})
    ids = corpus.record_ids
    trace = result.trace
    assert trace.event("dense").status == "override"
    d = diff(trace.stage("dense"), trace.stage("fuse"))
    assert [(c.record_id, c.old_rank, c.new_rank) for c in d.entered] == [(ids[6], None, 4)]
    assert d.left == ()
    assert [(c.record_id, c.old_rank, c.new_rank, c.moved_by) for c in d.moved] == [
        (ids[4], 3, 2, 1), (ids[2], 2, 3, -1)]
    # row 0 keeps rank 1 but its score changed (0.9 cosine -> rrf): rescored, not unchanged
    assert [(c.record_id, c.old_rank, c.new_rank) for c in d.rescored] == [(ids[0], 1, 1)] and d.unchanged == ()
    assert (d.before_scale, d.after_scale, d.same_scale) == ("cosine", "rrf", False)
    assert d.moved[0].new_score == pytest.approx(1 / 61 + 1 / 63) and d.moved[0].old_score == pytest.approx(0.5)
    d = trace.diff("lexical", "fuse")
    assert [(c.record_id, c.new_rank) for c in d.entered] == [(ids[2], 3)]
    assert [(c.record_id, c.old_rank, c.new_rank) for c in d.moved] == [
        (ids[0], 3, 1), (ids[4], 1, 2), (ids[6], 2, 4)]
    d = trace.diff("fuse", "dense")  # the other way round: what fuse had and dense did not
    assert [(c.record_id, c.old_rank) for c in d.left] == [(ids[6], 4)]
    text = d.table()
    assert "0 entered, 1 left, 2 moved, 1 rescored (same rank, new score), 0 unchanged" in text and ids[6] in text
    assert "scale: rrf -> cosine (different scales" in text
    assert d.to_dict()["left"][0]["record_id"] == ids[6]
    json.dumps(d.to_dict(), allow_nan=False)


def test_diff_shows_score_and_scale_changes_when_no_rank_moves(corpus, hybrid):
    # the same two channels fused by RRF and by blend (issue 10: "0 moved, 8 unchanged" hid every change)
    batch = QueryBatch.of(["anything"])
    channels = {"dense": _channel(batch, [0, 2, 4], "cosine"), "lexical": _channel(batch, [0, 2, 4], "bm25")}
    rrf = hybrid.run(corpus, "anything", trace=True, per_artifact=False, overrides=channels).trace
    blend = hybrid.run(corpus, "anything", trace=True, per_artifact=False, overrides=channels, fusion="blend").trace
    d = diff(rrf, blend, stage="fuse")
    assert d.moved == () and d.unchanged == () and len(d.rescored) == 3
    ids = corpus.record_ids
    expected_rrf = [2 / 61, 2 / 62, 2 / 63]
    expected_blend = [0.5 * s + 0.5 * s / (s + 8.0) for s in np.linspace(0.9, 0.5, 3)]
    assert [c.record_id for c in d.rescored] == [ids[0], ids[2], ids[4]]
    assert [c.old_score for c in d.rescored] == pytest.approx(expected_rrf)
    assert [c.new_score for c in d.rescored] == pytest.approx(expected_blend)
    text = d.table()
    assert "0 entered, 0 left, 0 moved, 3 rescored (same rank, new score), 0 unchanged" in text
    assert "scale: rrf -> blend (different scales" in text and "score change" not in text
    assert d.to_dict()["rescored"][0]["new_score"] == pytest.approx(expected_blend[0])
    assert (d.to_dict()["before_scale"], d.to_dict()["after_scale"]) == ("rrf", "blend")
    # same scale, other setting: the score change is shown
    other = hybrid.run(corpus, "anything", trace=True, per_artifact=False, overrides=channels, rrf_k=10).trace
    d = diff(rrf, other, stage="fuse")
    assert [c.new_score - c.old_score for c in d.rescored] == pytest.approx([2 / 11 - 2 / 61, 2 / 12 - 2 / 62,
                                                                           2 / 13 - 2 / 63])
    assert "scale: rrf on both sides" in d.table() and "score change" in d.table()


def test_diff_of_one_stage_across_two_traces(corpus, hybrid, tmp_path):
    small = hybrid.run(corpus, "python parser", k=3, trace=True).trace
    large = Trace.load(hybrid.run(corpus, "python parser", k=5, trace=True).trace.dump(tmp_path / "k5.jsonl"))
    d = diff(small, large, stage="collapse")
    ranking = large.stage("collapse").ranking(0)
    assert [c.record_id for c in d.entered] == [c["record_id"] for c in ranking[3:]]
    assert d.left == () and d.moved == () and d.rescored == () and len(d.unchanged) == 3
    assert "scale: rrf on both sides" in d.table()
    assert d.before == "hybrid:collapse" and d.after == "k5.jsonl:collapse"
    with pytest.raises(TraceError, match="needs stage=NAME"):
        diff(small, large)
    other = hybrid.run(corpus, "http", trace=True).trace
    with pytest.raises(TraceError, match="differs between the two traces"):
        diff(small, other, stage="collapse")
