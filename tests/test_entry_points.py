"""One default embedder for every entry point, and every output naming the embedder and analyzer it used.

``irflow.evaluate(["hybrid"], collection)`` and ``irflow eval hybrid --dataset
collection`` once gave different figures: the Python API built its corpus
with the "hash" stand-in, the command line with the model.  Now one function
decides (:func:`irflow.kernels.embedders.default_embedder`) and the figures
agree to the bit; results, evaluations (table, ``--json``, ``runs.json``) and
traces say which embedder and analyzer they used.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

import irflow
from irflow.cli import main
from irflow.engine.trace import Trace
from irflow.kernels import embedders, onnx_embedder
from irflow.kernels.embedders import default_embedder

DOCS = [
    ("d1", "Zip archives", "Unpack zip, tar and 7z archives from the command line."),
    ("d2", "Ranking", "Okapi BM25 ranking functions for search engines."),
    ("d3", "Progress", "A fast progress bar for loops and iterators."),
    ("d4", "Graphs", "Graph algorithms and complex networks in pure Python."),
    ("d5", "YAML", "Parse and emit YAML configuration files."),
    ("d6", "HTTP", "An asynchronous HTTP client with connection pooling."),
    ("d7", "Dates", "Parse, format and shift dates and time zones."),
    ("d8", "Images", "Open, resize and convert images in many formats."),
]
QUERIES = [("q1", "decompress a tarball"), ("q2", "rank documents for a query"), ("q3", "network analysis"),
           ("q4", "config file parser"), ("q5", "web requests")]
QRELS = [("q1", "d1", 1), ("q2", "d2", 2), ("q3", "d4", 1), ("q4", "d5", 1), ("q5", "d6", 1), ("q5", "d2", 0)]


def _collection(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n"
                                               for i, t, x in DOCS), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES),
                                        encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{g}\n" for q, d, g in QRELS), encoding="utf-8")
    return root


@pytest.fixture()
def tiny(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("IRFLOW_EMBEDDER", raising=False)
    return _collection(tmp_path / "tiny")


def _cli_and_python(tiny: Path, recipes: list[str]) -> tuple[dict, irflow.Evaluation]:
    # no cache on either side: each builds its own corpus, as the other would not share it
    done = CliRunner().invoke(main, ["eval", *recipes, "--dataset", str(tiny), "--no-cache", "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout), irflow.evaluate(recipes, tiny, use_cache=False)


def test_python_and_the_command_line_give_the_same_figures_to_the_bit(tiny):
    recipes = ["dense", "lexical", "hybrid"]
    cli, python = _cli_and_python(tiny, recipes)
    assert cli["systems"] == python.to_dict()  # floats through JSON's repr: equal means equal to the bit
    chosen = default_embedder()  # the model where the models extra is installed (CI), else "hash"
    expected = "hash:256" if chosen == "hash" else chosen
    assert cli["embedder"] == python.settings.embedder == expected
    assert cli["analyzer"] == python.settings.analyzer == "english"


def test_without_the_model_both_fall_back_to_hash_and_agree(tiny, monkeypatch):
    monkeypatch.setattr(onnx_embedder, "pinned_model_available", lambda: False)
    monkeypatch.setattr(embedders, "_STAND_IN_SAID", embedders.threading.Event())
    done = CliRunner().invoke(main, ["eval", "hybrid", "--dataset", str(tiny), "--no-cache", "--json"])
    assert done.exit_code == 0, done.output
    assert done.stderr.count("no embedding model is installed") == 1  # said once, as one line
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same process: not said again
        python = irflow.evaluate(["hybrid"], tiny, use_cache=False)
    cli = json.loads(done.stdout)
    assert cli["systems"] == python.to_dict() and cli["embedder"] == python.settings.embedder == "hash:256"


def test_a_lexical_evaluation_embeds_nothing_on_either_side(tiny):
    cli, python = _cli_and_python(tiny, ["lexical"])
    assert cli["systems"] == python.to_dict() and cli["embedder"] == python.settings.embedder == "none"


def test_the_table_the_json_and_runs_json_name_the_embedder_and_analyzer(tiny, tmp_path):
    ev = irflow.evaluate(["lexical", "dense"], tiny, embedder="hash:64", analyzer="plain", use_cache=False)
    assert ev.table().splitlines()[-1] == "corpus: embedder hash:64, analyzer plain"
    assert (ev.summary()["embedder"], ev.summary()["analyzer"]) == ("hash:64", "plain")
    ev.write_runs(tmp_path / "runs")
    manifest = json.loads((tmp_path / "runs" / "runs.json").read_text(encoding="utf-8"))
    assert (manifest["embedder"], manifest["analyzer"]) == ("hash:64", "plain")
    done = CliRunner().invoke(main, ["eval", "lexical", "--dataset", str(tiny)])
    assert done.exit_code == 0 and "corpus: embedder none, analyzer english" in done.stdout  # lexical: no vectors


def test_a_result_and_its_trace_name_the_embedder_and_analyzer(tmp_path):
    corpus = irflow.build([irflow.Record("unbox", "name", "unbox archives")], embedder="hash:32", analyzer="plain")
    result = irflow.load_recipe("hybrid").run(corpus, "archives", trace=True)
    assert result.settings == irflow.store.protocol.CorpusSettings("hash:32", "plain")
    assert "embedder='hash:32', analyzer='plain'" in repr(result)
    path = result.trace.dump(tmp_path / "t.jsonl")
    header = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert (header["embedder"], header["analyzer"]) == ("hash:32", "plain")
    loaded = Trace.load(path)
    assert (loaded.embedder, loaded.analyzer) == ("hash:32", "plain")
    assert "(embedder hash:32, analyzer plain)" in loaded.table().splitlines()[0]
    lexical_only = irflow.build([irflow.Record("unbox", "name", "unbox archives")], embedder=None)
    assert str(irflow.load_recipe("lexical").run(lexical_only, "archives").settings) == "embedder none, analyzer english"


def test_a_trace_written_before_these_fields_still_loads(tmp_path):
    corpus = irflow.build([irflow.Record("unbox", "name", "unbox archives")], embedder="hash:32")
    path = irflow.load_recipe("lexical").run(corpus, "archives", trace=True).trace.dump(tmp_path / "t.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    del header["embedder"], header["analyzer"]
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    old = Trace.load(path)
    assert (old.embedder, old.analyzer) == (None, None) and "embedder" not in old.table().splitlines()[0]
    header["embedder"] = ["not", "text"]
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    with pytest.raises(irflow.errors.TraceError, match="embedder"):
        Trace.load(path)


def test_the_command_line_run_names_them(tmp_path):
    irflow.build([irflow.Record("unbox", "name", "unbox archives")], embedder="hash:32", path=tmp_path / "c")
    done = CliRunner().invoke(main, ["run", "lexical", "--corpus", str(tmp_path / "c"), "-q", "archives", "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert (data["embedder"], data["analyzer"]) == ("hash:32", "english")
