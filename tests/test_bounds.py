"""Files irflow reads are bounded, files it writes are atomic (issue 10, items 4 and 6).

- a query that is not UTF-8 text is refused, any other round-trips through a trace
  (whose writer still takes any ``str``), and a failed dump leaves the previous
  file whole, with no temporary file behind;
- YAML anchors/aliases (the "billion laughs" bomb) are refused, nesting is
  limited in TOML / YAML / JSON / filters / parameters, trace dtypes come from
  an allow-list and are sized before allocating, whole-file reads have a size
  limit, and a FIFO or ``/dev/zero`` is refused before a byte is read.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import irflow.engine.trace
from irflow.store.corpus import build
from irflow.evaluation.datasets import DatasetError, load_beir
from irflow.evaluation.trec import write_trec_run
from irflow.errors import FilterError, InputError, OutputError, RecipeError
from irflow.kernels.filters import compile_filter
from irflow.util.fileio import (MAX_NESTING, atomic_writer, check_nesting, loads_json, open_regular, read_lines, read_text,
                           write_atomic)
from irflow.engine.recipe import Recipe, load_recipe
from irflow.engine.trace import Trace, TraceError

RECORDS = [{"artifact_id": f"a{i}", "surface_kind": "name", "text": f"sql parser {w}"}
           for i, w in enumerate(["http", "graph", "json", "tool", "async", "fast"])]


@pytest.fixture(scope="module")
def corpus():
    return build(RECORDS, embedder=None)


@pytest.fixture(scope="module")
def lexical():
    return load_recipe("lexical")


def _nested(depth: int, leaf: object = 1) -> object:
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def _depth(value: object) -> int:
    """Nesting depth of parsed JSON, computed the plain recursive way (the independent expectation)."""
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


# -- item 4: atomic dumps, any str ---------------------------------------------------------------------


def test_a_lone_surrogate_query_is_refused_and_a_trace_line_still_writes_any_str(corpus, lexical):
    query = "caf\udce9 parser"  # what Python makes of the argv bytes b"caf\xe9 parser"
    # irflow takes UTF-8 text only: the query is refused before any stage runs, naming it
    with pytest.raises(InputError, match=r"query 0: 'caf\\udce9 parser' holds a lone surrogate \(U\+DCE9"):
        lexical.run(corpus, [query, "sql"], trace=True)
    # the trace writer still writes any str (a trace made by hand, an older run): valid UTF-8, the same string back
    line = irflow.engine.trace.json_line({"query": query})
    assert json.loads(line.decode("utf-8")) == {"query": query}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(st.characters(exclude_categories=()), max_size=12))
def test_any_str_is_refused_or_round_trips_through_a_trace(tmp_path, corpus, lexical, text):
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):  # a surrogate: text UTF-8 cannot encode
        with pytest.raises(InputError, match="query 0: .* lone surrogate"):
            lexical.run(corpus, [text], trace=True)
        return
    path = lexical.run(corpus, [text], trace=True).trace.dump(tmp_path / "t.jsonl")
    assert Trace.load(path).queries.originals == (text,)


def test_a_failed_dump_keeps_the_previous_trace(tmp_path, corpus, lexical, monkeypatch):
    path = lexical.run(corpus, "sql", trace=True).trace.dump(tmp_path / "t.jsonl")
    before = path.read_bytes()
    real = irflow.engine.trace.json_line
    calls = []

    def fail_on_third_line(record):
        calls.append(record)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(record)

    monkeypatch.setattr(irflow.engine.trace, "json_line", fail_on_third_line)
    with pytest.raises(OutputError, match="no space left") as caught:
        lexical.run(corpus, "parser", trace=True).trace.dump(path)
    assert isinstance(caught.value, OSError) and str(path) in str(caught.value)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["t.jsonl"]


def test_a_dump_that_raises_anything_leaves_no_trace_of_itself(tmp_path, corpus, lexical, monkeypatch):
    path = tmp_path / "t.jsonl"
    monkeypatch.setattr(irflow.engine.trace, "json_line", lambda record: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        lexical.run(corpus, "sql", trace=True).trace.dump(path)
    assert os.listdir(tmp_path) == []


def test_atomic_writes_refuse_clearly_and_keep_modes(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OutputError, match="is a file, not a directory"):
        write_atomic(tmp_path / "afile" / "out.txt", "data", "trace")
    (tmp_path / "adir").mkdir()
    with pytest.raises(OutputError, match="is a directory"):
        write_atomic(tmp_path / "adir", "data", "trace")
    with pytest.raises(OutputError, match="does not exist"):
        write_atomic(tmp_path / "nowhere" / "out.txt", "data")
    kept = tmp_path / "kept.txt"
    kept.write_text("old")
    kept.chmod(0o640)
    write_atomic(kept, "new")
    assert kept.read_text() == "new" and stat.S_IMODE(kept.stat().st_mode) == 0o640
    with pytest.raises(ZeroDivisionError):
        with atomic_writer(kept) as out:
            out.write(b"half")
            raise ZeroDivisionError("a crash mid-write")
    assert kept.read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["adir", "afile", "kept.txt"]


def test_run_files_and_recipes_are_written_atomically(tmp_path, monkeypatch):
    run = tmp_path / "x.run"
    write_trec_run(run, {"q1": {"d1": 1.0}})
    recipe_file = load_recipe("lexical").save(tmp_path / "r.toml")
    before = (run.read_bytes(), recipe_file.read_bytes())

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full_disk)  # the last step of an atomic write fails
    with pytest.raises(OutputError, match="no space left"):
        write_trec_run(run, {"q1": {"d2": 2.0}})
    with pytest.raises(OutputError, match="no space left"):
        load_recipe("hybrid").save(recipe_file)
    assert (run.read_bytes(), recipe_file.read_bytes()) == before
    assert sorted(os.listdir(tmp_path)) == ["r.toml", "x.run"]


# -- item 6: bounded reads -------------------------------------------------------------------------------


def test_yaml_alias_bomb_is_refused_before_expanding(tmp_path):
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    lines += ["recipe: {name: bomb, output: c}", "stages: {c: {kind: collapse, params: {k: *a8}}}"]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecipeError, match=r"bomb\.yaml line 1: YAML anchors and aliases \(&a0\) are not allowed"):
        load_recipe(path, validate=False)
    # an anchor used once is refused too: a recipe has no use for them, and the message says what to do
    with pytest.raises(RecipeError, match=r"line 3: YAML anchors and aliases \(&v\).*write the value out"):
        Recipe.from_yaml("recipe: {name: x, output: c}\nparams:\n  k: &v 3\n  j: *v\n", validate=False)


@pytest.mark.parametrize("suffix, text, message", [
    (".toml", "x = " + "[" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
    (".toml", "[params]\nfilter = " + "{a = " * 100 + "1" + "}" * 100 + "\n", f"more than {MAX_NESTING} levels"),
    (".yaml", "x: " + "[" * 3000 + "]" * 3000 + "\n", f"more than {MAX_NESTING} levels"),
    (".yaml", "".join(f"{' ' * i}k{i}:\n" for i in range(200)) + " " * 200 + "v: 1\n", f"more than {MAX_NESTING}"),
    (".toml", "[params]\nk = " + "9" * 5000 + "\n", "more than 4300 digits"),
    (".yaml", "params:\n  k: " + "9" * 5000 + "\n", "more than 4300 digits"),
    (".toml", "[recipe]\nname = \"caf\xe9\"\n", "not valid UTF-8"),
])
def test_recipe_files_are_bounded(tmp_path, suffix, text, message):
    path = tmp_path / f"r{suffix}"
    path.write_bytes(text.encode("latin-1") if "caf" in text else text.encode())
    with pytest.raises(RecipeError, match=message) as caught:
        load_recipe(path)
    assert str(path) in str(caught.value)


def test_recipe_file_size_limit(tmp_path):
    path = tmp_path / "big.toml"
    path.write_text("# padding\n" * 500_000)  # 5 MB of comments
    with pytest.raises(RecipeError, match=r"larger than the limit of 4194304 bytes"):
        load_recipe(path)


def test_python_data_nested_1000_deep_is_refused_without_recursion():
    with pytest.raises(RecipeError, match=f"more than {MAX_NESTING} levels"):
        Recipe.from_dict({"recipe": {"name": "x"}, "params": {"filter": _nested(1000)}})
    with pytest.raises(FilterError, match=f"more than {MAX_NESTING} levels"):
        compile_filter(_nested(1000))
    ouroboros: dict = {}
    ouroboros["self"] = ouroboros  # a filter holding itself nests without end
    with pytest.raises(FilterError, match="levels deep"):
        compile_filter(ouroboros)
    assert compile_filter(_nested(MAX_NESTING - 1)).spec == _nested(MAX_NESTING - 1)


def test_search_parameters_nested_1000_deep(corpus):
    from irflow import search

    with pytest.raises(InputError, match=f"parameter 'filter': nested more than {MAX_NESTING} levels"):
        search(corpus, "sql", mode="lexical", filter=_nested(1000))
    with pytest.raises(InputError, match="parameter 'surface_weights'"):
        load_recipe("search").run(corpus, "sql", surface_weights=_nested(1000))


@settings(max_examples=150, deadline=None)
@given(value=st.recursive(st.none() | st.integers() | st.text(alphabet="[]{}\"\\ab,:"),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet="[]{a\""),
                                                                                     inner, max_size=3),
                          max_leaves=40),
       limit=st.integers(0, 8))
def test_loads_json_refuses_exactly_what_nests_deeper_than_the_limit(value, limit):
    text = json.dumps(value)
    if _depth(value) > limit:
        with pytest.raises(InputError, match=f"the limit is {limit}"):
            loads_json(text, "x", max_depth=limit)
        with pytest.raises(InputError):
            check_nesting(value, "x", limit=limit)
    else:
        assert loads_json(text, "x", max_depth=limit) == value
        check_nesting(value, "x", limit=limit)


def test_json_numbers_beyond_pythons_digit_limit():
    with pytest.raises(InputError, match="more than 4300 digits"):
        loads_json('{"k": ' + "9" * 5000 + "}", "--set k")
    assert loads_json('"' + "9" * 5000 + '"', "x") == "9" * 5000  # a long digit string is only a string


@pytest.fixture(scope="module")
def good_trace_lines(tmp_path_factory) -> list[dict]:
    path = tmp_path_factory.mktemp("trace") / "good.jsonl"
    load_recipe("hybrid").run(build(RECORDS, embedder="hash"), ["sql parser", "graph"], trace=True).trace.dump(path)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _edited(lines: list[dict]) -> list[dict]:
    return json.loads(json.dumps(lines))


@pytest.mark.parametrize("dtype, message", [
    ("<U5000000", "strings of 5000000 characters, over the limit of 1024"),
    ("S20000000", "strings of 20000000 characters, over the limit of 1024"),
    ("|V8", "not one a trace holds"),
    ("<M8[ns]", "not one a trace holds"),
    ("[('a', '<i4')]", "not one a trace holds"),
    ("object", "not one a trace holds"),
    (5, "not one a trace holds"),
])
def test_trace_dtypes_come_from_an_allow_list_and_nothing_big_is_allocated(tmp_path, good_trace_lines, dtype,
                                                                           message):
    lines = _edited(good_trace_lines)
    stage = next(line for line in lines[1:] if line.get("columns"))
    stage["columns"][next(iter(stage["columns"]))] = dtype
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    tracemalloc.start()
    try:
        with pytest.raises(TraceError, match=message) as caught:
            Trace.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20, f"loading the trace allocated {peak} bytes"
    assert f"{path}:" in str(caught.value)


@pytest.mark.parametrize("where", ["params", "output", "header"])
def test_trace_free_form_fields_nested_deep_are_refused(tmp_path, good_trace_lines, where):
    lines = _edited(good_trace_lines)
    deep = _nested(300)
    if where == "header":
        lines[0]["params"]["filter"] = deep
    else:
        lines[1][where] = {"x": deep}
    path = tmp_path / "deep.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    with pytest.raises(TraceError, match=f"nested more than {MAX_NESTING} levels"):
        Trace.load(path)
    path.write_text(json.dumps(lines[0]) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(TraceError, match=r"deep\.jsonl:2: nested too deeply to read"):
        Trace.load(path)


def test_trace_string_columns_within_the_limit_load_exactly(tmp_path, good_trace_lines):
    lines = _edited(good_trace_lines)
    name = next(line["stage"] for line in lines[1:] if line.get("candidates"))
    for line in lines[1:]:
        if line["stage"] == name:  # the stage's line of every query
            line["columns"]["x.note"] = "<U12"
            for candidate in line["candidates"]:
                candidate["provenance"]["x.note"] = "ok"
    path = tmp_path / "ok.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    column = Trace.load(path).event(name).output.provenance["x.note"]
    assert column.dtype == np.dtype("<U12") and set(column.tolist()) == {"ok"}


def test_trace_file_and_line_size_limits(tmp_path, corpus, lexical):
    path = lexical.run(corpus, "sql", trace=True).trace.dump(tmp_path / "t.jsonl")
    size = path.stat().st_size
    with pytest.raises(TraceError, match=f"{size} bytes, over the limit of 100"):
        Trace.load(path, max_bytes=100)
    assert Trace.load(path, max_bytes=size).n_queries == 1
    with open_regular(path, "trace file") as handle, pytest.raises(InputError, match="line 1: longer than"):
        list(read_lines(handle, str(path), "trace file", max_line_bytes=50))


@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    with pytest.raises(RecipeError, match="must be a regular file, but this is a FIFO"):
        load_recipe(fifo)
    with pytest.raises(TraceError, match="FIFO"):
        Trace.load(fifo)
    with pytest.raises(InputError, match="FIFO"):
        read_text(fifo, "file")


@pytest.mark.timeout(60)
@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_dev_zero_is_refused_not_read_forever(tmp_path):
    link = tmp_path / "zero.toml"
    link.symlink_to("/dev/zero")
    with pytest.raises(RecipeError, match="this is a device"):
        load_recipe(link)
    with pytest.raises(TraceError, match="this is a device"):
        Trace.load(link)


def test_beir_files_are_bounded(tmp_path):
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    (root / "queries.jsonl").write_text('{"_id": "q1", "text": "x"}\n')
    (root / "qrels" / "test.tsv").write_text("q1\td1\t1\n")
    (root / "corpus.jsonl").mkdir()
    with pytest.raises(DatasetError, match=r"corpus\.jsonl: the collection file must be a regular file, but this is "
                                           r"a directory"):
        load_beir(root)
    (root / "corpus.jsonl").rmdir()
    (root / "corpus.jsonl").write_text('{"_id": "d1", "text": "x", "metadata": ' + "[" * 500 + "]" * 500 + "}\n")
    with pytest.raises(DatasetError, match=r"corpus\.jsonl line 1: nested 501 levels deep; the limit is 64"):
        load_beir(root)
    (root / "corpus.jsonl").write_text('{"_id": ' + "9" * 5000 + ', "text": "x"}\n')
    with pytest.raises(DatasetError, match="more than 4300 digits"):
        load_beir(root)
    (root / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n')
    (root / "qrels" / "test.tsv").unlink()
    (root / "qrels" / "test.tsv").mkdir()
    with pytest.raises(DatasetError, match=r"test\.tsv: the collection file must be a regular file"):
        load_beir(root)
