"""The irflow command line, every command through click's CliRunner, on a real corpus."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import irflow
import irflow.cli.app
from irflow.cli.app import main, parse_sets
from irflow.store.corpus import open_corpus
from irflow.engine.recipe import load_recipe
from irflow.engine.trace import Trace

WORDS = ["parser", "http", "client", "graph", "sql", "async", "python", "fast", "json", "tool"]


def _write_records(path: Path) -> None:
    rng = np.random.default_rng(5)
    with path.open("w", encoding="utf-8") as out:
        for i in range(12):
            words = rng.choice(WORDS, size=5)
            owner = "team" if i % 2 else "solo"
            for kind, text in (("name", f"pkg{i} {words[0]}"), ("description", " ".join(words))):
                out.write(json.dumps({"artifact_id": f"pkg{i}", "surface_kind": kind, "text": text,
                                      "metadata": {"owner": owner}}) + "\n")


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def ok(*args: str):
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result


def fails(code: int, *args: str):
    result = invoke(*args)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, (KeyError, ValueError, TypeError))
    return result


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    _write_records(root / "records.jsonl")
    ok("index", root / "records.jsonl", "--out", root / "corpus", "--embedder", "hash")  # not the model: fast
    return root


@pytest.fixture(scope="module")
def trace_file(workdir) -> Path:
    path = workdir / "run.jsonl"
    ok("run", "hybrid", "--corpus", workdir / "corpus", "-q", "python parser", "-q", "http client",
       "--set", "k=3", "--trace", path)
    return path


# -- index ---------------------------------------------------------------------------------------


def test_index_builds_a_corpus(workdir):
    corpus = open_corpus(workdir / "corpus")
    assert corpus.n_rows == 24 and corpus.kinds == ("name", "description") and corpus.embedder_spec == "hash:256"
    result = ok("index", workdir / "records.jsonl", "--out", workdir / "lexical", "--embedder", "none",
                "--analyzer", "plain", "--json")
    summary = json.loads(result.stdout)
    assert summary["records"] == 24 and summary["artifacts"] == 12 and summary["embedder"] is None
    assert summary["analyzer"] == "plain" and open_corpus(workdir / "lexical").vectors is None


def test_index_reports_bad_input_by_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"artifact_id": "a", "surface_kind": "name", "text": "a"}\n{nope\n')
    result = fails(1, "index", bad, "--out", tmp_path / "c")
    assert "bad.jsonl: 1 bad line of 2" in result.stderr and "line 2: not JSON" in result.stderr
    bad.write_text('{"artifact_id": "a", "surface_kind": "name", "text": "a", "colour": 1}\n')
    assert "line 1: unknown key 'colour'" in fails(1, "index", bad, "--out", tmp_path / "c").stderr
    assert "does not exist" in fails(2, "index", tmp_path / "missing.jsonl", "--out", tmp_path / "c").stderr
    assert "Missing option '--out'" in fails(2, "index", bad).stderr


# -- run ------------------------------------------------------------------------------------------


def test_run_prints_hits_readably(workdir):
    result = ok("run", "hybrid", "--corpus", workdir / "corpus", "-q", "python parser", "--set", "k=2")
    corpus = open_corpus(workdir / "corpus")
    hits = load_recipe("hybrid").run(corpus, "python parser", k=2).hits
    assert "query 0: 'python parser' — 2 hits (recipe hybrid, corpus corpus; embedder hash:256, analyzer english)" \
        in result.stdout
    assert "rank" in result.stdout and "artifact" in result.stdout
    for hit in hits:
        assert hit.artifact_id in result.stdout


def test_run_json_with_trace_and_explain(workdir, tmp_path):
    path = tmp_path / "t.jsonl"
    result = ok("run", "hybrid", "--corpus", workdir / "corpus", "--query", "python parser", "--query", "sql",
                "--set", "k=2", "--set", 'filter={"owner": "team"}', "--set", "fusion=blend", "--json",
                "--trace", path, "--explain", "1")
    data = json.loads(result.stdout)
    assert data["recipe"] == "hybrid" and data["params"]["k"] == 2 and data["params"]["fusion"] == "blend"
    assert data["params"]["filter"] == {"owner": "team"} and data["trace"] == str(path)
    assert [q["query"] for q in data["queries"]] == ["python parser", "sql"]
    for query in data["queries"]:
        assert [h["rank"] for h in query["hits"]] == [1, 2]
        assert all(h["metadata"]["owner"] == "team" for h in query["hits"])
        (explanation,) = query["explanations"]
        assert explanation["record_id"] == query["hits"][0]["record_id"] and explanation["rank"] == 1
        assert [s["stage"] for s in explanation["steps"]] == ["candidates", "dense", "lexical", "fuse", "collapse"]
    assert "trace written to" in result.stderr
    trace = Trace.load(path)
    assert trace.stages[-1] == "collapse" and trace.n_queries == 2 and trace.params["fusion"] == "blend"


def test_run_explain_readable(workdir):
    result = ok("run", "hybrid", "--corpus", workdir / "corpus", "-q", "python parser", "--explain", "2",
                "--set", "fusion=rrf")
    assert result.stdout.count("rrf = dense") == 2 and "kept: it represents artifact" in result.stdout


def test_parse_sets_reads_json_then_strings():
    assert parse_sets(None, None, ["k=5", "mode=hybrid", 'filter={"owner": "x"}', "flag=true", "x=null",
                                   "text=a=b"]) == {
        "k": 5, "mode": "hybrid", "filter": {"owner": "x"}, "flag": True, "x": None, "text": "a=b"}


def test_run_errors_are_short_and_without_traceback(workdir, tmp_path):
    corpus = workdir / "corpus"
    result = fails(1, "run", "hybrid", "--corpus", tmp_path / "nowhere", "-q", "x")
    assert result.stderr.startswith("Error: no corpus at") and result.stdout == ""
    assert "--set kk=3: recipe 'hybrid' has no parameter 'kk'" in fails(
        1, "run", "hybrid", "--corpus", corpus, "-q", "x", "--set", "kk=3").stderr
    assert "'k' is not NAME=VALUE" in fails(2, "run", "hybrid", "--corpus", corpus, "-q", "x", "--set", "k").stderr
    assert "is neither a recipe file nor a built-in recipe (did you mean 'hybrid'?)" in fails(
        1, "run", "hybrd", "--corpus", corpus, "-q", "x").stderr
    assert "--set fusion=magic: must be one of 'rrf', 'blend'" in fails(
        1, "run", "hybrid", "--corpus", corpus, "-q", "x", "--set", "fusion=magic").stderr
    assert "give a query with -q QUERY (repeatable), or a query file with --queries FILE -o OUT" in fails(
        2, "run", "hybrid", "--corpus", corpus).stderr
    lexical_only = workdir / "lexical-only"
    ok("index", workdir / "records.jsonl", "--out", lexical_only, "--embedder", "none")
    result = fails(1, "run", "dense", "--corpus", lexical_only, "-q", "x")
    assert "lexical-only" in result.stderr and "while running stage 'dense'" in result.stderr


def test_an_unexpected_exception_is_not_swallowed(workdir, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr("irflow.cli.app.load_recipe", broken)
    result = invoke("run", "hybrid", "--corpus", workdir / "corpus", "-q", "x")
    assert result.exit_code == 1 and isinstance(result.exception, RuntimeError)


# -- validate, graph, recipes -------------------------------------------------------------------------


def test_validate_a_good_recipe_file_and_a_built_in(tmp_path):
    path = tmp_path / "mine.toml"
    load_recipe("hybrid").save(path)
    assert ok("validate", path).stdout.startswith(f"OK: {path}: recipe 'hybrid', 5 stages, output 'collapse'")
    assert ok("validate", "lexical").stdout.startswith("OK: recipes/lexical.toml")
    assert json.loads(ok("validate", path, "--json").stdout)["ok"] is True


def test_validate_a_bad_recipe_lists_every_problem(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[recipe]\nname = "bad"\noutput = "collapse"\n\n'
                    '[stages.dense]\nkind = "dnse"\n\n'
                    '[stages.collapse]\nkind = "collapse"\ninputs = ["dense"]\nkk = 3\n')
    result = fails(1, "validate", path)
    assert f"{path}: 2 problems" in result.stdout
    assert "unknown kind 'dnse'" in result.stdout and "did you mean 'dense'" in result.stdout
    assert "unknown parameter 'kk'" in result.stdout
    data = json.loads(fails(1, "validate", path, "--json").stdout)
    assert data["ok"] is False and len(data["problems"]) == 2
    broken = tmp_path / "broken.toml"
    broken.write_text("[recipe\n")
    assert "not valid TOML" in fails(1, "validate", broken).stdout
    assert "no such recipe file" in fails(1, "validate", tmp_path / "missing.toml").stdout


def test_graph_mermaid_and_dot():
    mermaid = ok("graph", "hybrid").stdout
    assert mermaid.startswith("flowchart LR") and "dense -->|inputs| fuse" in mermaid
    dot = ok("graph", "hybrid", "--format", "dot").stdout
    assert dot.startswith("digraph recipe {") and '"fuse" -> "collapse"' in dot
    assert "Invalid value for '--format'" in fails(2, "graph", "hybrid", "--format", "png").stderr
    assert "Error:" in fails(1, "graph", "nope").stderr


def test_recipes_lists_the_built_ins():
    out = ok("recipes").stdout
    assert "hybrid: dense and BM25" in out and "lexical:" in out


def test_recipes_shows_how_each_hybrid_fuses():
    lines = ok("recipes").stdout.splitlines()
    fusion_of = {line.partition(":")[0]: lines[i + 1].strip() for i, line in enumerate(lines[:-1])
                 if not line.startswith(" ") and lines[i + 1].startswith("    fusion")}
    blend = "fusion: blend (alpha=0.5, bm25_sat_k=16.0: cosine plus saturated BM25); --set fusion=rrf for RRF"
    assert fusion_of == {"hybrid": blend, "hybrid-rerank": blend, "expand-rerank": blend,
                         "search": "fusion when mode=hybrid: RRF (rrf_k=60: reciprocal ranks); --set fusion=blend "
                                   "for blend"}
    data = {r["name"]: r["fusion"] for r in json.loads(ok("recipes", "--json").stdout)}
    assert data["hybrid"]["method"] == "blend" and data["search"]["method"] == "rrf" and data["lexical"] is None
    assert data["search"]["when"] == {"mode": ["hybrid"]} and data["hybrid-rerank"]["choices"] == ["rrf", "blend"]


NOISY = """import irflow

print("noisy: imported")  # a library that talks on stdout


def noisy_formulate(query):
    print(f"noisy: formulating {query!r}")
    return [query]


irflow.registry.register("noisy_formulate", noisy_formulate, replace=True)
"""


def _json_commands(group=main, prefix=()):
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            yield from _json_commands(command, (*prefix, name))
        elif any(p.name == "as_json" for p in command.params):
            yield (*prefix, name), command


def test_every_json_command_keeps_stdout_for_its_json():
    found = dict(_json_commands())
    assert {("eval",), ("run",), ("index",), ("validate",), ("recipes",), ("shard",), ("trace", "show"),
            ("trace", "diff"), ("trace", "explain")} <= set(found)
    unguarded = [" ".join(words) for words, command in found.items()
                 if not getattr(command.callback, "machine_readable", False)]
    assert not unguarded, f"--json commands whose stdout anything may write to: {unguarded}"


def test_json_output_is_alone_on_stdout_whatever_libraries_print(workdir, tmp_path):
    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    (data / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": f"{w} parser tool"}) + "\n"
                                               for i, w in enumerate(WORDS)))
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "sql parser"}) + "\n")
    (data / "qrels" / "test.tsv").write_text("q1\td4\t1\n")
    noisy = ["--set", "mode=lexical", "--set", "formulate=noisy_formulate"]
    try:
        for args in (["eval", "search", "--dataset", data, "--embedder", "none", "--no-cache", *noisy],
                     ["run", "search", "--corpus", workdir / "corpus", "-q", "sql parser", *noisy],
                     ["validate", "lexical"]):
            plugin = tmp_path / f"noisy_{args[0]}.py"  # a module of its own per command: its import prints again
            plugin.write_text(NOISY)
            result = ok(*args, "--plugin", plugin, "--json")
            assert isinstance(json.loads(result.stdout), dict), result.stdout  # the JSON alone
            assert "noisy: imported" in result.stderr  # what the plugin printed went to stderr
            if args[0] != "validate":
                assert "noisy: formulating 'sql parser'" in result.stderr
                # without --json nothing moves: the readable output and the library's lines share stdout
                assert "noisy: formulating 'sql parser'" in ok(*args, "--plugin", plugin).stdout
    finally:  # the plugins registered an entry in this process: later tests (Ray actors get the registry) must not see it
        irflow.registry.unregister("noisy_formulate")
    assert json.loads(ok("recipes", "--json").stdout)[0] == {"name": "dense", "description": ok(
        "recipes").stdout.splitlines()[0].partition(": ")[2], "fusion": None}


def test_version():
    assert ok("--version").stdout == f"irflow {irflow.__version__}\n" == ok("-V").stdout


# -- trace ---------------------------------------------------------------------------------------------


def test_trace_show(trace_file):
    out = ok("trace", "show", trace_file).stdout
    assert "query 0: 'python parser'" in out
    for stage in ("candidates", "dense", "lexical", "fuse", "collapse"):
        assert stage in out
    one = ok("trace", "show", trace_file, "--stage", "fuse", "--query", "1", "--limit", "2").stdout
    assert "query 1: 'http client'" in one and "== fuse (fuse)" in one and "== dense" not in one
    assert one == Trace.load(trace_file).table(stage="fuse", query=1, limit=2) + "\n"
    data = json.loads(ok("trace", "show", trace_file, "--stage", "dense", "--json").stdout)
    assert data["header"]["recipe"] == "hybrid" and [s["stage"] for s in data["stages"]] == ["dense"]
    assert "no stage 'nope' in this trace" in fails(1, "trace", "show", trace_file, "--stage", "nope").stderr
    assert "query 4 is not in this trace" in fails(1, "trace", "show", trace_file, "--query", "4").stderr
    assert "does not exist" in fails(2, "trace", "show", trace_file.parent / "missing.jsonl").stderr
    garbage = trace_file.parent / "garbage.jsonl"
    garbage.write_text("hello\n")
    assert "not JSON" in fails(1, "trace", "show", garbage).stderr


def test_trace_diff_two_stages_and_two_files(workdir, trace_file):
    trace = Trace.load(trace_file)
    out = ok("trace", "diff", trace_file, "--stages", "dense", "fuse").stdout
    expected = trace.diff("dense", "fuse")
    assert out == expected.table() + "\n"
    data = json.loads(ok("trace", "diff", trace_file, "--stages", "lexical", "fuse", "--query", "1", "--json").stdout)
    assert data == json.loads(json.dumps(trace.diff("lexical", "fuse", query=1).to_dict()))
    other = workdir / "k5.jsonl"
    ok("run", "hybrid", "--corpus", workdir / "corpus", "-q", "python parser", "-q", "http client",
       "--set", "k=5", "--trace", other)
    out = ok("trace", "diff", trace_file, other, "--stage", "collapse").stdout
    assert "2 entered, 0 left, 0 moved, 0 rescored (same rank, new score), 3 unchanged" in out
    assert "--stages A B" in fails(2, "trace", "diff", trace_file).stderr
    assert "two trace files" in fails(2, "trace", "diff", trace_file, "--stage", "fuse").stderr
    assert "not both" in fails(2, "trace", "diff", trace_file, "--stage", "a", "--stages", "b", "c").stderr
    assert "no stage 'x'" in fails(1, "trace", "diff", trace_file, "--stages", "x", "fuse").stderr


def test_trace_explain(trace_file):
    trace = Trace.load(trace_file)
    record = trace.stage("collapse").ranking(0)[0]["record_id"]
    out = ok("trace", "explain", trace_file, record).stdout
    assert out == trace.explain(record).table() + "\n" and "rank 1" in out
    data = json.loads(ok("trace", "explain", trace_file, record, "--json").stdout)
    assert data["record_id"] == record and data["traced"] is True
    assert "neither a record id nor an artifact id" in fails(1, "trace", "explain", trace_file, "zzz").stderr


# -- demo -------------------------------------------------------------------------------------------------


def test_demo(monkeypatch):
    if importlib.util.find_spec("irflow.cli.quickstart") is None:
        assert "the demo is not available" in fails(1, "demo", "http client").stderr
        return
    calls = []
    import irflow.cli.quickstart

    def fake_run_demo(queries, **kwargs):
        calls.append((queries, kwargs))
        kwargs["echo"]("demo ran")

    monkeypatch.setattr(irflow.cli.quickstart, "run_demo", fake_run_demo)
    out = ok("demo", "http client", "--filter", '{"owner": "x"}', "--mode", "lexical", "--k", "3").stdout
    assert out == "demo ran\n"
    queries, kwargs = calls[0]
    assert queries == ["http client"] and kwargs["filter"] == {"owner": "x"} and kwargs["mode"] == "lexical"
    assert kwargs["k"] == 3
    assert "must be JSON" in fails(2, "demo", "--filter", "{oops").stderr
