"""No output of irflow lands inside a corpus: traces, run files, saved recipes, run folders, new corpora, shards.

A trace written over ``C/CURRENT`` used to succeed and leave a corpus that
never opened again.  Every writer of a user's file and every output folder is
refused with one ``OutputError`` naming the path, the corpus and the fix —
through the CLI and through the Python API, for a plain corpus and a sharded
one, at any depth, through symbolic links and ``..`` — and the corpus stays
byte for byte what it was, answering exactly as before.  The corpus's own
writers (a rebuild, a reshard, the shard manifest) still write, and folders
that are not irflow's (LevelDB also keeps a ``CURRENT``) are not mistaken for
corpora.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine_fakes  # noqa: F401  (maps irflow.stages / irflow.recipes in a bare checkout)
import irflow
from irflow.cli.app import main
from irflow.cli.quickstart import installed_corpus, run_demo
from irflow.engine.recipe import load_recipe
from irflow.errors import OutputError
from irflow.evaluation.datasets import load_beir
from irflow.evaluation.evaluate import evaluate_runs
from irflow.evaluation.trec import write_trec_run
from irflow.shard.manifest import shard_dir_name
from irflow.shard import ray_backend
from irflow.shard.ray_backend import ray_temp_dir
from irflow.store.corpus import build
from irflow.util.corpusmarks import CORPUS, FIRST_SHARD, SHARDED_CORPUS, corpus_kind, enclosing_corpus
from irflow.util.fileio import atomic_writer, write_atomic
from search_reference import records

QUERIES = ["fast json parser", "http client", "graph network tool"]
FIX = "choose a path outside the corpus"


# --------------------------------------------------------------------------
# the corpora, their bytes and their answers


def tree(root: Path) -> dict[str, Any]:
    """Every entry under ``root`` (hidden ones too): a file's digest, a link's target, or "dir"."""
    out: dict[str, Any] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                out[key] = ("link", os.readlink(path))
            elif path.is_dir():
                out[key] = "dir"
            else:
                out[key] = hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()
    return out


def answers(path: Path) -> list[list[tuple[Any, ...]]]:
    """What the corpus at ``path`` (plain or sharded) answers to QUERIES, hit by hit."""
    corpus = irflow.open_corpus(path)
    try:
        return [[(h.artifact_id, h.surface_kind, h.score, h.text, h.record_id)
                 for h in irflow.search(corpus, q, mode="hybrid", k=5)] for q in QUERIES]
    finally:
        getattr(corpus, "close", lambda: None)()


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, Any]:
    """A plain corpus C, a sharded corpus S, a link L to C, and their bytes and answers before any test."""
    base = tmp_path_factory.mktemp("guard")
    build(records(), embedder="hash", path=base / "C", name="toys")
    irflow.shard(irflow.open_corpus(base / "C"), 2, base / "S").close()
    (base / "L").symlink_to(base / "C", target_is_directory=True)
    (base / "out").mkdir()
    (base / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records()), encoding="utf-8")
    state = {"base": base, "C": base / "C", "S": base / "S"}
    for name in ("C", "S"):
        state[f"tree:{name}"] = tree(base / name)
        state[f"answers:{name}"] = answers(base / name)
    assert state["answers:C"] == state["answers:S"] and state["answers:C"][0]  # a real corpus, really answering
    return state


def assert_unchanged(corpora: dict[str, Any]) -> None:
    for name in ("C", "S"):
        assert tree(corpora[name]) == corpora[f"tree:{name}"], f"{name} changed on disk"
        assert answers(corpora[name]) == corpora[f"answers:{name}"], f"{name} answers differently"


# Files inside a corpus, as a user might name them: (relative path, the corpus root it is inside)
INSIDE = [
    ("C/CURRENT", "C"),
    ("C/gen-000001/manifest.json", "C"),
    ("C/gen-000001/vectors.npy", "C"),
    ("C/gen-000001/new-trace.jsonl", "C"),
    ("C/.lock", "C"),
    ("C/a/b/deep.jsonl", "C"),                     # at any depth, folders that do not exist yet
    ("out/../C/gen-000001/../CURRENT", "C"),       # through ..
    ("L/CURRENT", "C"),                            # through a link to the corpus
    ("L/gen-000001/manifest.json", "C"),
    ("S/shards.json", "S"),
    ("S/shard-000/CURRENT", "S"),
    ("S/shard-001/gen-000001/manifest.json", "S"),
    ("S/shard-001/gen-000001/vectors.npy", "S"),
    ("S/run.jsonl", "S"),
]


def _expect_refusal(message: str, corpora: dict[str, Any], root: str) -> None:
    assert "inside the irflow" in message and FIX in message
    assert os.path.realpath(corpora[root]) in message  # the corpus, where it really is


# --------------------------------------------------------------------------
# files, through the command line


@pytest.mark.parametrize("relative,root", INSIDE)
def test_cli_run_refuses_a_trace_inside_a_corpus(corpora, relative, root):
    target = corpora["base"] / relative
    result = CliRunner().invoke(main, ["run", "lexical", "--corpus", str(corpora["C"]), "-q", "json parser",
                                       "--trace", str(target)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    _expect_refusal(result.output, corpora, root)
    assert str(target) in result.output
    assert_unchanged(corpora)


def test_cli_run_on_a_sharded_corpus_refuses_its_own_files(corpora):
    for relative in ("S/shards.json", "S/shard-000/CURRENT"):
        result = CliRunner().invoke(main, ["run", "lexical", "--corpus", str(corpora["S"]), "-q", "json parser",
                                           "--trace", str(corpora["base"] / relative)])
        assert result.exit_code == 1, result.output
        _expect_refusal(result.output, corpora, "S")
    assert_unchanged(corpora)


def test_a_link_to_a_corpus_file_is_refused_naming_where_it_resolves(corpora, tmp_path):
    link = tmp_path / "trace.jsonl"
    link.symlink_to(corpora["C"] / "CURRENT")
    result = CliRunner().invoke(main, ["run", "lexical", "--corpus", str(corpora["C"]), "-q", "parser",
                                       "--trace", str(link)])
    assert result.exit_code == 1, result.output
    _expect_refusal(result.output, corpora, "C")
    assert f"resolves to {corpora['C'] / 'CURRENT'}" in result.output
    assert link.is_symlink()
    assert_unchanged(corpora)


def test_cli_demo_refuses_a_trace_inside_a_corpus_before_building(corpora, monkeypatch, tmp_path):
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(main, ["demo", "parser", "--embedder", "hash", "--trace",
                                       str(corpora["C"] / "CURRENT")])
    assert result.exit_code == 1, result.output
    _expect_refusal(result.output, corpora, "C")
    assert not (tmp_path / "home").exists()  # refused before the demo corpus was built
    assert_unchanged(corpora)


# --------------------------------------------------------------------------
# files, through the Python API


@pytest.fixture(scope="module")
def traced(corpora):
    corpus = irflow.open_corpus(corpora["C"])
    return load_recipe("hybrid").run(corpus, ["json parser", "http"], trace=True)


@pytest.mark.parametrize("relative,root", INSIDE)
def test_api_writers_refuse_a_path_inside_a_corpus(corpora, traced, relative, root):
    target = corpora["base"] / relative
    with pytest.raises(OutputError) as dumped:
        traced.trace.dump(target)
    _expect_refusal(str(dumped.value), corpora, root)
    with pytest.raises(OutputError) as written:
        write_trec_run(target, {"q1": {"d1": 1.0}}, tag="x")
    _expect_refusal(str(written.value), corpora, root)
    with pytest.raises(OutputError) as saved:
        load_recipe("hybrid").save(target.with_name(target.name + ".toml"))
    _expect_refusal(str(saved.value), corpora, root)
    with pytest.raises(OutputError), atomic_writer(target, "report") as out:  # any future report
        out.write(b"never")
    assert_unchanged(corpora)


def test_demo_api_refuses_a_trace_inside_a_corpus(corpora):
    with pytest.raises(OutputError) as caught:
        run_demo(["parser"], trace_path=corpora["S"] / "shard-000" / "CURRENT", embedder="hash",
                 echo=lambda line: None)
    _expect_refusal(str(caught.value), corpora, "S")
    assert_unchanged(corpora)


def test_the_same_writers_still_write_outside_corpora(corpora, traced, tmp_path):
    traced.trace.dump(tmp_path / "run.jsonl")
    assert len(irflow.Trace.load(tmp_path / "run.jsonl")) == len(traced.trace)
    write_trec_run(tmp_path / "run.txt", {"q1": {"d1": 1.0}}, tag="x")
    load_recipe("hybrid").save(tmp_path / "hybrid.yaml")
    # a folder beside the corpus whose name starts like it is not inside it
    (corpora["base"] / "C-traces").mkdir(exist_ok=True)
    write_atomic(corpora["base"] / "C-traces" / "t.jsonl", "{}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hybrid.yaml", "run.jsonl", "run.txt"]


# --------------------------------------------------------------------------
# output folders


@pytest.fixture(scope="module")
def evaluation():
    return evaluate_runs({"a": {"q1": {"d1": 2.0, "d2": 1.0}}, "b": {"q1": {"d2": 2.0}}}, {"q1": {"d1": 1}},
                         metrics="ndcg@10")


@pytest.mark.parametrize("relative,root", [("C", "C"), ("C/gen-000001", "C"), ("C/gen-000001/runs", "C"),
                                           ("L/runs", "C"), ("S", "S"), ("S/shard-000/runs", "S")])
def test_run_folders_inside_a_corpus_are_refused_before_they_are_made(corpora, evaluation, relative, root):
    target = corpora["base"] / relative
    with pytest.raises(OutputError) as caught:
        evaluation.write_runs(target)
    message = str(caught.value)
    assert FIX in message and os.path.realpath(corpora[root]) in message and "runs.json" not in message
    assert_unchanged(corpora)


def test_cli_eval_refuses_a_run_folder_inside_a_corpus_before_evaluating(corpora):
    # refused before the collection is read: no such collection exists, and that is not what is said
    result = CliRunner().invoke(main, ["eval", "lexical", "--dataset", str(corpora["base"] / "no-such-collection"),
                                       "--runs", str(corpora["C"] / "gen-000001" / "runs"), "--no-cache"])
    assert result.exit_code == 1, result.output
    _expect_refusal(result.output, corpora, "C")
    assert_unchanged(corpora)


def test_an_evaluation_cache_inside_a_corpus_is_refused_before_anything_is_made(corpora, tmp_path):
    collection = tmp_path / "tiny"
    (collection / "qrels").mkdir(parents=True)
    (collection / "corpus.jsonl").write_text('{"_id": "d1", "title": "zip", "text": "unpack zip archives"}\n')
    (collection / "queries.jsonl").write_text('{"_id": "q1", "text": "unpack zip"}\n')
    (collection / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    with pytest.raises(OutputError) as caught:
        irflow.evaluate(["lexical"], load_beir(collection), metrics="ndcg@10",
                        cache_dir=corpora["C"] / "gen-000001" / "cache")
    _expect_refusal(str(caught.value), corpora, "C")
    assert_unchanged(corpora)
    # outside a corpus: evaluated, runs written
    result = CliRunner().invoke(main, ["eval", "lexical", "--dataset", str(collection), "--metrics", "ndcg@10",
                                       "--no-cache", "--runs", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["lexical.run", "runs.json"]


def test_an_irflow_home_inside_a_corpus_gets_no_demo_cache_there(corpora, monkeypatch):
    monkeypatch.setenv("IRFLOW_HOME", str(corpora["C"] / "gen-000001" / "home"))
    with pytest.raises(OutputError) as caught:
        installed_corpus(embedder="hash", cache=True)
    _expect_refusal(str(caught.value), corpora, "C")
    assert_unchanged(corpora)


def test_an_irflow_home_inside_a_corpus_gets_no_ray_folder_there(corpora, monkeypatch):
    short = Path(tempfile.mkdtemp(prefix="g", dir="/tmp" if os.path.isdir("/tmp") else None))
    try:
        shutil.copytree(corpora["C"], short / "C")  # a short path: Ray's folder goes under $IRFLOW_HOME only then
        before = tree(short / "C")
        monkeypatch.setenv("IRFLOW_HOME", str(short / "C" / "h"))
        assert ray_temp_dir() == short / "C" / "h" / "ray"

        def never() -> None:
            raise AssertionError("Ray would be started")

        monkeypatch.setattr(ray_backend, "require_ray", never)
        with pytest.raises(OutputError, match="inside the irflow corpus") as caught:
            ray_backend.start_local_cluster(num_cpus=1)  # refused before Ray is imported or started
        assert os.path.realpath(short / "C") in str(caught.value)
        assert tree(short / "C") == before
    finally:
        shutil.rmtree(short)


def test_run_folders_outside_corpora_are_written(evaluation, tmp_path):
    written = evaluation.write_runs(tmp_path / "runs")
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["a.run", "b.run", "runs.json"]
    assert set(written) == {"a", "b"}


@pytest.mark.parametrize("relative,root", [("C/gen-000001/x", "C"), ("C/new", "C"), ("L/new", "C"),
                                           ("S/shard-000", "S"), ("S/new", "S"), ("S/shard-001/gen-000001/x", "S")])
def test_a_corpus_is_never_built_inside_another(corpora, relative, root):
    target = corpora["base"] / relative
    with pytest.raises(OutputError) as caught:
        build(records()[:4], embedder="hash", path=target)
    _expect_refusal(str(caught.value), corpora, root)
    result = CliRunner().invoke(main, ["index", str(corpora["base"] / "records.jsonl"), "--out", str(target),
                                       "--embedder", "hash"])
    assert result.exit_code == 1, result.output
    _expect_refusal(result.output, corpora, root)
    assert_unchanged(corpora)


@pytest.mark.parametrize("relative,root,where", [("C", "C", "is the irflow corpus"),
                                                 ("C/gen-000001/x", "C", "inside"), ("S/shard-000", "S", "inside"),
                                                 ("S/sub", "S", "inside"), ("L", "C", "is the irflow corpus")])
def test_shards_are_never_written_into_or_inside_a_corpus(corpora, relative, root, where):
    target = corpora["base"] / relative
    source = irflow.open_corpus(corpora["C"])
    with pytest.raises(OutputError) as caught:
        irflow.shard(source, 2, target)
    message = str(caught.value)
    assert where in message and FIX in message and os.path.realpath(corpora[root]) in message
    result = CliRunner().invoke(main, ["shard", str(corpora["C"]), "--shards", "2", "--out", str(target)])
    assert result.exit_code == 1, result.output
    assert where in result.output and FIX in result.output
    assert_unchanged(corpora)


def test_a_rebuild_and_a_reshard_still_write_their_own_corpus(corpora, tmp_path):
    plain, sharded = tmp_path / "C", tmp_path / "S"
    shutil.copytree(corpora["C"], plain)
    shutil.copytree(corpora["S"], sharded)
    build(records(), embedder="hash", path=plain, name="toys")  # a rebuild: a new generation
    assert sorted(p.name for p in plain.iterdir() if p.name.startswith("gen-")) == ["gen-000002"]
    result = CliRunner().invoke(main, ["shard", str(plain), "--shards", "3", "--out", str(sharded)])
    assert result.exit_code == 0, result.output  # a reshard, through the manifest's opt-out
    with irflow.open_corpus(sharded) as resharded:
        assert resharded.n_shards == 3
    assert answers(plain) == answers(sharded) == corpora["answers:C"]
    # sharding records (not a corpus) over a sharded corpus: its shards are written by the store, not build(path=)
    irflow.shard(records(), 2, sharded, embedder="hash").close()
    assert answers(sharded) == corpora["answers:C"]


def test_interleaved_shards_keep_their_rows_inside_their_generations(tmp_path):
    shuffled = records()
    shuffled = shuffled[::2] + shuffled[1::2]  # an artifact's records apart: shards are not contiguous
    with irflow.shard(shuffled, 2, tmp_path / "S", embedder="hash") as sharded:
        assert any(not entry.contiguous for entry in sharded.manifest.shards)
    with irflow.shard(shuffled, 2, tmp_path / "S", embedder="hash"):  # again, over itself
        pass
    names = sorted(p.name for p in (tmp_path / "S").iterdir())
    assert not [n for n in names if n.endswith(".tmp")]
    assert not any(n.endswith(".rows.npy") for n in names)  # no file of the sharded corpus's own beside the shards
    assert list((tmp_path / "S").glob("shard-*/gen-*/global_rows.npy"))  # listed and checksummed by its generation


# --------------------------------------------------------------------------
# what is a corpus: irflow's own markers, nothing else


def test_foreign_folders_are_not_corpora(tmp_path):
    leveldb = tmp_path / "leveldb"
    leveldb.mkdir()
    (leveldb / "CURRENT").write_text("MANIFEST-000004\n")
    (leveldb / "MANIFEST-000004").write_bytes(b"\0" * 64)
    other = tmp_path / "other"
    (other / "gen-000001").mkdir(parents=True)
    (other / "shards.json").write_text('{"shards": [1, 2]}')
    (other / "CURRENT").mkdir()                         # a folder named CURRENT
    (other / "gen-000001" / ".irflow-generation").write_text("not irflow's text")
    for folder in (leveldb, other, other / "gen-000001"):
        assert corpus_kind(folder) is None
        write_atomic(folder / "trace.jsonl", "{}\n")     # written, not refused
        assert enclosing_corpus(folder / "trace.jsonl") is None
    write_atomic(leveldb / "CURRENT", "MANIFEST-000005\n")  # even over its CURRENT: it is the user's file
    assert (leveldb / "CURRENT").read_text() == "MANIFEST-000005\n"


def test_a_corpus_with_a_damaged_current_is_still_known_by_its_generations(corpora, tmp_path):
    damaged = tmp_path / "D"
    shutil.copytree(corpora["C"], damaged)
    (damaged / "CURRENT").write_text("garbage\n")
    with pytest.raises(OutputError, match="inside the irflow corpus"):
        write_atomic(damaged / "gen-000001" / "manifest.json", "{}")
    assert corpus_kind(corpora["S"]) == SHARDED_CORPUS and corpus_kind(corpora["C"]) == CORPUS
    assert shard_dir_name(0) == FIRST_SHARD  # a sharded corpus is known by its first shard too


def test_a_sharded_corpus_is_known_by_its_first_shard_when_its_manifest_was_reformatted(corpora, tmp_path):
    copy = tmp_path / "S"
    shutil.copytree(corpora["S"], copy)
    text = (copy / "shards.json").read_text()
    (copy / "shards.json").write_text(" " * 5000 + text)  # the format no longer in the first bytes
    assert corpus_kind(copy) == SHARDED_CORPUS
    with pytest.raises(OutputError, match="inside the irflow sharded corpus"):
        write_atomic(copy / "shards.json", "{}")


# --------------------------------------------------------------------------
# the rule, for any path


SEGMENTS = ["C", "S", "L", "out", "gen-000001", "shard-000", "shard-001", "x", "..", "."]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(middle=st.lists(st.sampled_from(SEGMENTS), max_size=5).filter(lambda m: m.count("..") <= 2),
       last=st.sampled_from(["CURRENT", "shards.json", "manifest.json", "t.jsonl", "x"]))
def test_any_path_is_refused_exactly_when_it_resolves_inside_a_corpus(corpora, middle, last):
    base = corpora["base"]
    target = base.joinpath(*middle, last)
    # the independent expectation: where the OS would put the file, and whether a corpus root is above it
    where = Path(os.path.realpath(target))
    roots = [Path(os.path.realpath(corpora[name])) for name in ("C", "S")]
    inside = any(root in where.parents for root in roots)
    try:
        write_atomic(target, "x\n", "probe")
    except OutputError as error:  # inside a corpus, or another reason (a folder that does not exist)
        assert ("inside the irflow" in str(error)) == inside, str(error)
    else:
        assert not inside
        where.unlink()
    assert tree(corpora["C"]) == corpora["tree:C"] and tree(corpora["S"]) == corpora["tree:S"]
