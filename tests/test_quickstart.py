"""The quickstart (README's first command) runs offline and shows real hits."""

from __future__ import annotations

import json

from click.testing import CliRunner

from irflow.cli import main
from irflow.cli.installed import distribution_records, split_chunks
from irflow.cli.quickstart import installed_corpus, run_demo


def test_installed_distributions_make_a_multi_surface_corpus():
    records = distribution_records()
    kinds = {r.surface_kind for r in records}
    assert {"name", "summary", "deps"} <= kinds
    by_artifact = {r.artifact_id for r in records}
    assert {"numpy", "attrs", "networkx"} <= by_artifact  # irflow's own dependencies are installed
    numpy_deps = [r for r in records if r.artifact_id == "rank-bm25" and r.surface_kind == "deps"]
    assert numpy_deps and "numpy" in numpy_deps[0].text.split()
    for record in records:
        assert set(record.metadata) >= {"name", "version", "author", "license", "deps", "url"}


def test_split_chunks_bounds_every_chunk_and_keeps_the_words():
    text = "para one\n\n" + ("word " * 400) + "\n\nlast para"
    chunks = split_chunks(text, 100)
    assert all(len(c) <= 100 for c in chunks)
    assert " ".join(" ".join(chunks).split()) == " ".join(text.split())


def test_demo_finds_the_package_a_query_names(tmp_path):
    lines: list[str] = []
    trace = tmp_path / "trace.jsonl"
    hits = run_demo(["networkx graph"], k=3, trace_path=trace, echo=lines.append, embedder="hash")
    assert hits[0][0].artifact_id == "networkx"
    assert any("networkx" in line for line in lines)
    header = json.loads(trace.read_text(encoding="utf-8").splitlines()[0])
    assert header["recipe"] == "search" and header["params"]["mode"] == "hybrid"


def test_demo_command_with_filter_and_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))  # the demo caches its corpus there
    trace = tmp_path / "t.jsonl"
    result = CliRunner().invoke(main, ["demo", "graph", "--filter", '{"name": "networkx"}', "--mode", "lexical",
                                       "--trace", str(trace), "--embedder", "hash"])
    assert result.exit_code == 0, result.output
    assert "networkx" in result.output and trace.exists()
    rows = [line for line in result.output.splitlines() if line.strip().startswith("1 ")]
    assert rows and all("networkx" in row for row in rows)


def test_the_corpus_is_named_so_hits_carry_a_source():
    corpus = installed_corpus(embedder="hash")
    assert corpus.name == "installed"


def test_the_demo_suggests_a_stage_that_made_the_scores(tmp_path):
    # issue 10: it said `--stage fuse` even in lexical mode, where fuse only passes BM25 through
    for mode, stage in (("lexical", "lexical"), ("dense", "dense"), ("hybrid", "fuse")):
        lines: list[str] = []
        trace = tmp_path / f"{mode}.jsonl"
        run_demo(["graph"], mode=mode, k=2, trace_path=trace, echo=lines.append, embedder="hash")
        assert lines[-1].endswith(f"or where the scores come from with `--stage {stage}`"), lines[-1]
        shown = CliRunner().invoke(main, ["trace", "show", str(trace), "--stage", stage])
        assert shown.exit_code == 0 and f"== {stage} ({stage})" in shown.output and "· ran ·" in shown.output


def test_the_demo_corpus_is_cached_by_content_and_model(tmp_path, monkeypatch):
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path))
    first = installed_corpus(embedder="hash:64", cache=True)
    assert first.path is not None and first.path.name == "installed" and first.name == "installed"
    again = installed_corpus(embedder="hash:64", cache=True)
    assert again.path == first.path  # reopened, not rebuilt elsewhere
    assert (again.vectors == first.vectors).all()
    other = installed_corpus(embedder="hash:32", cache=True)  # another embedder: another entry
    assert other.path != first.path and other.dim == 32
