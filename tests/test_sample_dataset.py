"""The sample collection shipped inside irflow: ``--dataset sample`` anywhere, generated reproducibly.

It is package data (``irflow/evaluation/sample/``), made by
``tools/make_sample.py`` from a fixed seed; these tests check that the
shipped bytes are the generator's, that the collection is what its README
says, and that an evaluation of it needs nothing but irflow: a fresh
folder, a fresh ``$IRFLOW_HOME``, no network, no ``../shared/data``.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import logging
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

import irflow
from irflow.cli import main
from irflow.evaluation.source import SAMPLE, load_dataset, sample_path

ROOT = Path(__file__).resolve().parents[1]
FILES = ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")
METRICS = "ndcg@10,recall@100,map"
# The lexical recipe's figures on the sample (the english analyzer): fixed data, fixed figures.
LEXICAL = {"ndcg@10": 0.6454, "recall@100": 0.5875, "map": 0.5371}


def _generator():
    spec = importlib.util.spec_from_file_location("make_sample", ROOT / "tools" / "make_sample.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def anywhere(tmp_path, monkeypatch):
    """An empty current folder and $IRFLOW_HOME, the default embedder the quick stand-in, and no network."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("IRFLOW_EMBEDDER", "hash")

    def refuse(*args, **kwargs):
        raise AssertionError(f"the sample evaluation opened a connection: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    return tmp_path


def _eval(*args: str) -> dict:
    result = CliRunner().invoke(main, ["eval", *args, "--metrics", METRICS, "--no-progress", "--json"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return json.loads(result.stdout)


# -- the data -------------------------------------------------------------------------------------------------------

def test_the_shipped_files_are_the_generators_bytes():
    generator = _generator()
    fresh = generator.generate()
    assert fresh == generator.generate()  # one seed, one collection
    assert sorted(fresh) == sorted(FILES)
    for name in FILES:
        assert (sample_path() / name).read_bytes() == fresh[name], f"{name}: run python tools/make_sample.py"
    assert generator.generate(seed=1)["corpus.jsonl"] != fresh["corpus.jsonl"]  # the seed decides it
    assert generator.main(["--check"]) == 0


def test_the_collection_is_what_its_readme_says():
    collection = load_dataset(SAMPLE)
    assert collection.name == "sample" and collection.split == "test"
    assert len(collection.documents) == 300 and len(collection.queries) == len(collection.eval_queries) == 40
    grades = [g for judged in collection.qrels.values() for g in judged.values()]
    assert set(grades) == {1, 2}
    assert all(doc in collection.documents for judged in collection.qrels.values() for doc in judged)
    assert all(sum(g == 2 for g in judged.values()) >= 4 for judged in collection.qrels.values())
    assert all(set(doc.metadata) == {"language", "kind"} for doc in collection.documents.values())
    size = sum((sample_path() / name).stat().st_size for name in FILES)
    assert size < 200_000  # small enough to ship in every install
    readme = (sample_path() / "README.md").read_text(encoding="utf-8")
    assert "MIT" in readme and "tools/make_sample.py" in readme


def test_importlib_resources_finds_the_sample_folder():
    folder = importlib.resources.files("irflow.evaluation") / "sample"
    assert isinstance(folder, Path) and folder == sample_path()
    assert all((folder / name).is_file() for name in (*FILES, "README.md"))


# -- evaluating it anywhere -----------------------------------------------------------------------------------------

def test_cli_eval_lexical_on_the_sample_from_an_empty_folder(anywhere):
    first = _eval("lexical", "--dataset", "sample")
    assert first["dataset"] == "sample" and first["queries"] == 40 and first["split"] == "test"
    figures = first["systems"]["lexical"]
    assert figures == pytest.approx(LEXICAL, abs=5e-5)
    assert list((anywhere / "home" / "cache" / "eval").glob("sample-*"))  # built under $IRFLOW_HOME
    again = _eval("lexical", "--dataset", "sample")  # now from the cache: the same figures exactly
    assert again["systems"] == first["systems"]
    assert sorted(p.name for p in anywhere.iterdir()) == ["home"]  # nothing written into the current folder


def test_python_evaluate_takes_the_name_too(anywhere):
    result = irflow.evaluate(["lexical"], "sample", metrics=METRICS)
    assert result.dataset == "sample" and result.n_queries == 40
    assert result.summary()["systems"]["lexical"] == _eval("lexical", "--dataset", "sample")["systems"]["lexical"]


def test_dense_and_hybrid_with_the_hash_embedder_differ_from_lexical(anywhere):
    data = _eval("lexical", "dense", "hybrid", "--dataset", "sample", "--embedder", "hash", "--no-cache")
    systems = data["systems"]
    assert systems["lexical"] == pytest.approx(LEXICAL, abs=5e-5)
    assert len({json.dumps(figures, sort_keys=True) for figures in systems.values()}) == 3
    # lexical misses the packages described in synonyms only; dense and hybrid rank every document
    assert systems["hybrid"]["recall@100"] > systems["lexical"]["recall@100"]
    assert _eval("dense", "hybrid", "--dataset", "sample", "--embedder", "hash", "--no-cache")["systems"] == {
        name: systems[name] for name in ("dense", "hybrid")}  # deterministic


def _folder_named_sample(root: Path) -> Path:
    folder = root / "sample"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text('{"_id": "x1", "title": "", "text": "my own document"}\n', encoding="utf-8")
    (folder / "queries.jsonl").write_text('{"_id": "m1", "text": "own document"}\n', encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nm1\tx1\t1\n", encoding="utf-8")
    return folder


def test_the_bare_name_is_the_builtin_and_a_path_is_the_folder(anywhere, caplog):
    _folder_named_sample(anywhere)
    with caplog.at_level(logging.WARNING, logger="irflow"):
        builtin = load_dataset("sample")
    assert len(builtin.documents) == 300
    assert any("./sample" in record.getMessage() for record in caplog.records)  # said, not silent
    for spec in ("./sample", anywhere / "sample", str(anywhere / "sample"), Path("sample")):
        mine = load_dataset(spec)
        assert list(mine.documents) == ["x1"] and list(mine.eval_queries) == ["m1"], spec
    result = CliRunner().invoke(main, ["eval", "lexical", "--dataset", "sample", "--no-progress"])
    assert result.exit_code == 0 and "40 queries" in result.stdout
    assert "write it as a path: ./sample" in result.stderr
    assert _eval("lexical", "--dataset", "./sample")["queries"] == 1


def test_without_a_folder_named_sample_nothing_is_said(anywhere, caplog):
    with caplog.at_level(logging.WARNING, logger="irflow"):
        load_dataset("sample")
    assert not caplog.records


def test_eval_help_names_the_sample():
    result = CliRunner().invoke(main, ["eval", "--help"])
    assert "DIR|sample|irds:NAME" in result.output and "./sample" in result.output


def test_a_sample_not_on_disk_is_one_clear_error(anywhere, monkeypatch):
    import zipfile

    from irflow.errors import DatasetError

    archive = anywhere / "irflow.zip"  # irflow imported from a zip file: the sample is no folder on disk
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("irflow/evaluation/sample/corpus.jsonl", "")
    monkeypatch.setattr(importlib.resources, "files", lambda package: zipfile.Path(archive, "irflow/evaluation/"))
    with pytest.raises(DatasetError, match="not a folder on disk .*pass a BEIR folder to --dataset"):
        sample_path()
    result = CliRunner().invoke(main, ["eval", "lexical", "--dataset", "sample"])
    assert result.exit_code != 0 and "Traceback" not in result.output and "not a folder on disk" in result.output
