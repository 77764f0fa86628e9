"""irflow index: the record format documented, BEIR corpora accepted, every bad line reported, --skip-bad, progress."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import irflow
from irflow.cli import main
from irflow.evaluation.datasets import load_beir
from irflow.store.records import Record
from irflow.util import progress


def invoke(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


def _plain(output: str) -> None:
    # user-facing words only: no Python or attrs internals
    for internal in ("Traceback", "__init__", "positional argument", "attrs", "Attribute(", "TypeError", "KeyError"):
        assert internal not in output, (internal, output)


GOOD = [{"artifact_id": "unbox", "surface_kind": "name", "text": "unbox", "metadata": {"license": "MIT"}},
        {"artifact_id": "unbox", "surface_kind": "description", "text": "Unpack any archive."},
        {"artifact_id": "tqdm", "surface_kind": "description", "text": "A progress bar."}]


def _write(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def test_help_shows_what_a_record_looks_like():
    out = invoke("index", "--help").output
    flat = " ".join(out.split())
    assert '{"artifact_id": "unbox", "surface_kind": "description", "text": "Unpack any archive.", ' in flat
    assert '{"_id": "d1", "title": "A title", "text": "The body."}' in flat
    assert "--skip-bad" in out and "--title-mode" in out


def test_id_and_text_gets_a_plain_reason(tmp_path):
    result = invoke("index", _write(tmp_path / "r.jsonl", [{"id": "x", "text": "y"}]), "--out", tmp_path / "c")
    assert result.exit_code == 1
    _plain(result.output)
    assert "line 1: missing 'artifact_id' and 'surface_kind'; a record needs artifact_id, surface_kind and text" \
           in result.output
    assert "a BEIR document uses '_id'" in result.output
    assert not (tmp_path / "c").exists()  # nothing written


BAD = [
    {"id": "x", "text": "y"},                                                         # 1 missing keys
    GOOD[0],                                                                          # 2 good
    "not json",                                                                       # 3
    "[1, 2]",                                                                         # 4 not an object
    {**GOOD[0], "surface_index": 0},                                                  # 5 duplicate of line 2
    {"artifact_id": 5, "surface_kind": "", "txt": "z", "metadata": [1]},              # 6 several problems
    {"_id": "d1", "text": "a BEIR line"},                                             # 7 other format
    "",                                                                               # 8 blank: ignored
    {"artifact_id": "b", "surface_kind": "name", "text": "t", "vector": ["a"]},       # 9 bad vector
    {"artifact_id": "c", "surface_kind": "name", "text": "t", "surface_index": -1},   # 10
    GOOD[2],                                                                          # 11 good
]


def test_every_bad_line_is_reported_with_its_number_and_reason(tmp_path):
    path = _write(tmp_path / "bad.jsonl", BAD)
    result = invoke("index", path, "--out", tmp_path / "c")
    assert result.exit_code == 1
    _plain(result.output)
    out = result.output
    assert "8 bad lines of 10" in out and "nothing was indexed" in out and "--skip-bad" in out
    reported = [int(n) for n in re.findall(r"^  line (\d+):", out, flags=re.M)]
    assert reported == [1, 3, 4, 5, 6, 7, 9, 10]
    assert "line 3: not JSON (Expecting value at column 1)" in out
    assert "line 4: a list, not an object" in out
    assert "line 5: surface_index 0 of artifact 'unbox' again (first on line 2)" in out
    assert "line 6: unknown key 'txt' (did you mean 'text'?); missing 'text'; 'artifact_id' must be a non-empty " \
           "string, got 5; 'surface_kind' must be a non-empty string, got ''; 'metadata' must be an object" in out
    assert "line 7: a BEIR document (it has '_id') in a file of irflow records (line 1 decided)" in out
    assert "line 9: 'vector' must be a non-empty list of finite numbers" in out
    assert "line 10: 'surface_index' must be an integer from 0 to 2**63 - 1, got -1" in out
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("index", [10**30, 2**63])
def test_a_surface_index_beyond_int64_is_a_bad_line(tmp_path, index):
    # it was accepted, then ended the build in an OverflowError traceback
    path = _write(tmp_path / "big.jsonl", [GOOD[0], {**GOOD[2], "surface_index": index}])
    result = invoke("index", path, "--out", tmp_path / "c")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"line 2: 'surface_index' must be an integer from 0 to 2**63 - 1, got {index}" in result.output
    with pytest.raises(ValueError, match=r"surface_index must be an integer from 0 to 2\*\*63 - 1, got 1000"):
        Record("a", "k", "t", surface_index=10**30)  # the Python API too: it would not fit the int64 column


def test_skip_bad_indexes_the_rest_and_says_what_it_skipped(tmp_path):
    path = _write(tmp_path / "bad.jsonl", BAD)
    result = invoke("index", path, "--out", tmp_path / "c", "--skip-bad", "--json")
    assert result.exit_code == 0, result.output
    assert "skipped 8 bad lines of 10" in result.stderr and "lines 1, 3-7, 9-10" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["records"] == 2 and summary["skipped_lines"] == [1, 3, 4, 5, 6, 7, 9, 10]
    corpus = irflow.open_corpus(tmp_path / "c")
    assert sorted(corpus.store.texts) == ["A progress bar.", "unbox"]


def test_a_large_file_lists_every_bad_line_number(tmp_path):
    lines = [GOOD[2] if i % 7 == 0 else "{broken" for i in range(1, 301)]
    result = invoke("index", _write(tmp_path / "many.jsonl", lines), "--out", tmp_path / "c")
    assert result.exit_code == 1
    bad = [i for i in range(1, 301) if i % 7]
    detailed = [int(n) for n in re.findall(r"^  line (\d+):", result.output, flags=re.M)]
    assert detailed == bad[:50]
    rest = re.search(r"and 208 more: lines (.*)$", result.output, flags=re.M).group(1)
    listed = []
    for part in rest.split(", "):
        a, _, b = part.partition("-")
        listed.extend(range(int(a), int(b or a) + 1))
    assert listed == bad[50:]  # every bad line, by number


def _beir(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    docs = [{"_id": "d1", "title": "Zip", "text": "Unpack zip archives.", "metadata": {"year": 2020}},
            {"_id": 7, "title": "", "text": "No title here."},
            {"_id": "d3", "title": "BM25", "text": "Okapi ranking."}]
    _write(root / "corpus.jsonl", docs)
    _write(root / "queries.jsonl", [{"_id": "q1", "text": "zip"}])
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", encoding="utf-8")
    return root


@pytest.mark.parametrize("mode", ["prepend", "separate"])
def test_a_beir_corpus_indexes_as_irflow_eval_builds_it(tmp_path, mode):
    root = _beir(tmp_path / "beir")
    result = invoke("index", root / "corpus.jsonl", "--out", tmp_path / "c", "--title-mode", mode)
    assert result.exit_code == 0, result.output
    assert "from BEIR documents" in result.output
    corpus = irflow.open_corpus(tmp_path / "c")
    expected = load_beir(root).records(mode)
    got = [corpus.record(row) for row in range(corpus.n_rows)]
    assert [(r.id, r.artifact_id, r.surface_kind, r.text, r.metadata) for r in got] == \
           [(r.id, r.artifact_id, r.surface_kind, r.text, r.metadata) for r in expected]
    assert corpus.record(0).text == ("Zip\nUnpack zip archives." if mode == "prepend" else "Zip")
    assert irflow.search(corpus, "unpack zip", mode="lexical")[0].artifact_id == "d1"


def test_beir_lines_get_plain_reasons_too(tmp_path):
    path = _write(tmp_path / "c.jsonl", [{"_id": "d1", "text": "ok"}, {"_id": "d1", "text": "again"},
                                         {"_id": "d2", "titel": "x", "text": "y"}, {"_id": "", "text": "z"},
                                         {"_id": "d4"}, GOOD[0]])
    result = invoke("index", path, "--out", tmp_path / "c")
    assert result.exit_code == 1
    _plain(result.output)
    out = result.output
    assert "line 2: duplicate document id 'd1' (first on line 1)" in out
    assert "line 3: unknown key 'titel' (did you mean 'title'?)" in out
    assert "line 4: '_id' must be a non-empty string" in out
    assert "line 5: 'text' must be a string" in out
    assert "line 6: an irflow record (it has no '_id') in a file of BEIR documents (line 1 decided)" in out


def test_blank_lines_and_a_byte_order_mark_are_fine_and_bad_bytes_are_a_bad_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD[0]).encode() + b"\n\n   \n" + b"\xff\xfe{}\n"
                     + json.dumps(GOOD[2]).encode() + b"\n")
    result = invoke("index", path, "--out", tmp_path / "c")
    assert result.exit_code == 1 and "line 4: not UTF-8 text" in result.output
    assert invoke("index", path, "--out", tmp_path / "c", "--skip-bad").exit_code == 0
    assert len(irflow.open_corpus(tmp_path / "c")) == 2


def test_a_file_without_records_says_what_to_write(tmp_path):
    result = invoke("index", _write(tmp_path / "e.jsonl", ["", "  "]), "--out", tmp_path / "c")
    assert result.exit_code == 1 and "no records to index" in result.output and '"artifact_id"' in result.output


def test_progress_covers_every_phase(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "_is_terminal", lambda stream: True)  # bars: stderr is a terminal
    path = _write(tmp_path / "r.jsonl", GOOD)
    result = invoke("index", path, "--out", tmp_path / "c")
    assert result.exit_code == 0, result.output
    # the bars' own labels (a "no embedding model" notice may come first when the models extra is absent)
    phases = ("reading r.jsonl", "checking records", "tokenizing", "postings", "embedding", "writing")
    for phase in phases:
        assert f"{phase}: 100%" in result.stderr, phase
    order = [result.stderr.index(f"{p}: ") for p in phases]
    assert order == sorted(order)
    quiet = invoke("index", path, "--out", tmp_path / "d", "--no-progress", "--embedder", "none")
    assert quiet.exit_code == 0 and quiet.stderr == ""
    quiet = invoke("-q", "index", path, "--out", tmp_path / "e")  # errors only: no bar, no embedder notice
    assert quiet.exit_code == 0 and quiet.stderr == ""
