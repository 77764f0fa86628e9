"""The terminal view of a trace: stages that did nothing in one line, text excerpts beside record ids, every query.

``irflow trace show`` (and ``Trace.table``) says what a stage did: a stage
switched off by its ``when`` and one that passed its input through unchanged
(no reranker, no boost, one channel to fuse) are one line each, marked as
such, without repeating their input's table; rows show the start of the
record's text beside its id (kept once per record in the trace file); ``--query
all`` shows every query.  Text is shown, never acted on: a terminal escape
in a record is printed as its escape.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import irflow
from irflow.cli.app import main
from irflow.engine.trace import Trace, TraceError
from irflow.engine.tracecheck import EXCERPT_CHARS, excerpt

RECORDS = [
    irflow.Record("unbox", "name", "unbox", {}),
    irflow.Record("unbox", "description", "Unpack any archive:\n zip, tar, 7z.", {}),
    irflow.Record("rank-bm25", "description", "Okapi BM25 ranking functions for zip files.", {}),
    irflow.Record("tqdm", "description", "A fast progress bar \x1b[2J for loops \u202eexe.txt.", {}),
]


@pytest.fixture(scope="module")
def corpus():
    return irflow.build(RECORDS, name="tools")


@pytest.fixture(scope="module")
def lexical(corpus):
    # search() in lexical mode: dense is switched off; formulate, fuse, weight, rerank and boost have nothing to do
    return irflow.load_recipe("search").run(corpus, ["zip archive", "progress bar"], mode="lexical", k=2, trace=True)


def _headings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("== ")]


def test_a_stage_that_returns_its_input_is_recorded_as_passed(lexical):
    status = {event.name: event.status for event in lexical.trace}
    assert status == {"formulate": "passed", "candidates": "ran", "dense": "inactive", "lexical": "ran",
                      "fuse": "passed", "weight": "passed", "rerank": "passed", "boost": "passed",
                      "collapse": "ran"}
    assert lexical.trace.event("fuse").output is lexical.trace.event("lexical").output
    assert lexical.trace.event("boost").output is lexical.trace.event("weight").output
    # weight has no weights and no cut (a channel that fetched deeper keeps what it fetched): passed through
    assert lexical.trace.stage("weight").passed_from == "fuse" and lexical.trace.stage("weight").state == "passed"
    assert lexical.trace.stage("collapse").passed_from is None and lexical.trace.stage("dense").passed_from is None


def test_stages_that_did_nothing_are_one_line_each(lexical):
    text = lexical.trace.table(query=0)
    headings = _headings(text)
    assert "== dense (dense) · switched off · " in headings[0]
    for name, source in (("fuse", "lexical"), ("weight", "fuse"), ("rerank", "weight"), ("boost", "rerank")):
        line = next(h for h in headings if h.startswith(f"== {name} "))
        assert f"passed through: output = input {source!r}" in line
    # a table for the two stages that changed something, none repeated for the others
    assert text.count("rank   score") == 2 and len(re.findall(r"^rank ", text, flags=re.M)) == 2
    blocks = text.split("\n\n")
    for block in blocks:
        if block.startswith(("== dense", "== fuse", "== weight", "== rerank", "== boost")):
            assert "\n" not in block  # the heading alone
    summary = lexical.trace.summary_table(0)
    assert re.search(r"^weight +weight +passed ", summary, flags=re.M)
    assert re.search(r"^dense +dense +inactive ", summary, flags=re.M)


def test_an_older_file_that_says_ran_is_read_the_same(lexical, tmp_path):
    # a trace written before "passed" existed: the executor recorded "ran" for a stage returning its input
    path = lexical.trace.dump(tmp_path / "new.jsonl")
    old = tmp_path / "old.jsonl"
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for line in lines[1:]:
        line["status"] = line["status"].replace("passed", "ran")
    del lines[0]["excerpts"]
    old.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    loaded = Trace.load(old)
    assert loaded.event("weight").status == "ran" and loaded.stage("weight").passed_from == "fuse"
    assert _headings(loaded.table()) == _headings(lexical.trace.table())


def test_rows_show_a_text_excerpt_beside_the_record_id(lexical, corpus, tmp_path):
    text = lexical.trace.table(query=0)
    header = next(line for line in text.splitlines() if line.startswith("rank "))
    assert header.split()[:6] == ["rank", "score", "artifact", "surface", "record_id", "text"]
    assert "Unpack any archive: zip, tar, 7z." in text  # white space runs as one space
    loaded = Trace.load(lexical.trace.dump(tmp_path / "run.jsonl"))
    assert loaded.table(query=0) == text and loaded.table(query=1) == lexical.trace.table(query=1)


def test_excerpts_are_kept_once_per_record(lexical, corpus, tmp_path):
    path = lexical.trace.dump(tmp_path / "run.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    rows = {c["row"] for line in map(json.loads, lines[1:]) for c in line["candidates"]}
    assert set(header["excerpts"]) == {str(r) for r in rows}
    row = next(i for i, r in enumerate(corpus.records(range(corpus.n_rows))) if r.text.startswith("Unpack"))
    assert header["excerpts"][str(row)] == "Unpack any archive: zip, tar, 7z."
    for line in lines[1:]:  # nowhere else: each candidate names its row
        assert "Unpack any" not in line


def test_excerpt_is_bounded():
    assert excerpt("a  b\n\tc") == "a b c" and excerpt(None) is None and excerpt("") == ""
    long = excerpt("word " * 10_000)
    assert len(long) == EXCERPT_CHARS and long.endswith("…")
    assert len(excerpt(" " * 100_000 + "x")) <= EXCERPT_CHARS


def test_a_file_without_excerpts_shows_the_ids(lexical, tmp_path):
    path = lexical.trace.dump(tmp_path / "run.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    del header["excerpts"]
    old = tmp_path / "old.jsonl"
    old.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    text = Trace.load(old).table(query=0)
    row = next(line for line in text.splitlines() if line.startswith("   1 "))
    record_id = lexical.trace.stage("collapse").ranking(0)[0]["record_id"]
    assert record_id in row and row.rstrip().endswith(" -") or " - " in row


@pytest.mark.parametrize("excerpts, message", [
    ({"1": "x" * (EXCERPT_CHARS + 1)}, "excerpts\\[1\\]' is .*, expected a text of at most 160 characters"),
    ({"999": "text"}, "excerpts\\['999'\\]\" is '999', expected the row of a candidate"),
    ({"-1": "text"}, "the row of a candidate"),
    ({"1": 5}, "a text of at most"),
    (["a"], "field 'excerpts' is .*expected an object"),
])
def test_a_file_with_bad_excerpts_is_refused(lexical, tmp_path, excerpts, message):
    path = lexical.trace.dump(tmp_path / "run.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    header["excerpts"] = excerpts
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    with pytest.raises(TraceError, match=f"bad.jsonl:1: the header is malformed: .*{message}"):
        Trace.load(bad)


def test_terminal_escapes_in_a_record_are_shown_not_acted_on(lexical):
    text = lexical.trace.table(query=1)
    assert "\x1b" not in text and "\u202e" not in text
    assert "A fast progress bar \\x1b[2J for" in text


def test_show_all_queries(lexical, tmp_path):
    path = lexical.trace.dump(tmp_path / "run.jsonl")
    result = CliRunner().invoke(main, ["trace", "show", str(path), "--query", "all"])
    assert result.exit_code == 0, result.output
    assert "query 0: 'zip archive'" in result.stdout and "query 1: 'progress bar'" in result.stdout
    assert result.stdout == lexical.trace.table(query=0) + "\n\n" + lexical.trace.table(query=1) + "\n"
    data = json.loads(CliRunner().invoke(main, ["trace", "show", str(path), "--query", "all", "--json"]).stdout)
    assert {line["query_index"] for line in data["stages"]} == {0, 1}
    bad = CliRunner().invoke(main, ["trace", "show", str(path), "--query", "some"])
    assert bad.exit_code == 2 and "neither a query index" in bad.output


def test_show_in_the_cli_uses_the_same_view(lexical, tmp_path: Path):
    path = lexical.trace.dump(tmp_path / "run.jsonl")
    out = CliRunner().invoke(main, ["trace", "show", str(path)]).stdout
    assert out == lexical.trace.table(query=0) + "\n"


def test_a_hostile_trace_file_acts_on_no_terminal(lexical, tmp_path):
    # names, ids and texts of a trace file reach the terminal as text: its escapes are shown, never obeyed
    path = lexical.trace.dump(tmp_path / "run.jsonl")
    text = path.read_text(encoding="utf-8")
    evil = "fuse\x1b]0;owned\x07\u202e"
    text = text.replace('"fuse"', json.dumps(evil)).replace('"fuse.', json.dumps(evil + ".")[:-1])
    text = text.replace('"unbox"', json.dumps("unbox\x1b[2J\u2066"))
    edited = tmp_path / "edited.jsonl"
    edited.write_text(text, encoding="utf-8")
    runner = CliRunner()
    outputs = [runner.invoke(main, ["trace", "show", str(edited), "--query", "all"]),
               runner.invoke(main, ["trace", "show", str(edited), "--stage", evil]),
               runner.invoke(main, ["trace", "explain", str(edited), "unbox\x1b[2J\u2066"]),
               runner.invoke(main, ["trace", "diff", str(edited), "--stages", "lexical", evil])]
    for done in outputs:
        assert done.exit_code == 0, done.output
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]", done.stdout), done.stdout
    assert "fuse\\x1b]0;owned\\x07\\u202e" in outputs[1].stdout
    assert "unbox\\x1b[2J\\u2066" in outputs[2].stdout


def test_irflow_run_shows_a_hostile_corpus_as_text(tmp_path):
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps({"artifact_id": "a\x1b[2Jb", "surface_kind": "name",
                                   "text": "zip \x1b]0;owned\x07 \u202eexe"}) + "\n", encoding="utf-8")
    runner = CliRunner()
    assert runner.invoke(main, ["index", str(records), "--out", str(tmp_path / "c\x1b[1m"), "--embedder",
                                "hash"]).exit_code == 0
    done = runner.invoke(main, ["run", "lexical", "--corpus", str(tmp_path / "c\x1b[1m"), "-q", "zip"])
    assert done.exit_code == 0, done.output
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e]", done.stdout), done.stdout
    assert "a\\x1b[2Jb" in done.stdout and "zip \\x1b]0;owned\\x07 \\u202eexe" in done.stdout
