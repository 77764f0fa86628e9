"""TREC and ir_datasets: topics and qrels files, a whole query file run into a run file, irds:NAME collections.

- the readers: TREC topics (``<top>``), ``qid<TAB>text`` and ``queries.jsonl``
  told apart, 4-column TREC qrels and BEIR tsv; every mistake names the file
  and the line; topics checked against ir_datasets' own parser;
- ``irflow eval --corpus C --queries FILE --qrels FILE`` gives the figures
  ``--dataset`` gives for the same documents, queries and judgements;
- ``irflow run --queries FILE -o OUT`` writes the recipe's hits as a TREC run
  (or JSON Lines), atomically, never inside a corpus;
- ``--dataset irds:NAME`` reads a dataset registered with ir_datasets from
  local files (no network: ``IR_DATASETS_HOME`` is a temporary folder and
  every socket connection fails the test), and refuses to download one whose
  files are missing.
"""

from __future__ import annotations

import json
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import irflow
from irflow.cli import main
from irflow.errors import DatasetError, OutputError
from irflow.evaluation.topics import collection_from_files, read_queries
from irflow.evaluation.trec import read_qrels_file, read_trec_run

DOCS = [
    ("d1", "Zip archives", "Unpack zip and tar archives from the command line."),
    ("d2", "Ranking", "Okapi BM25 ranking functions for search."),
    ("d3", "Progress", "A progress bar for loops."),
    ("d4", "Graphs", "Graph algorithms and networks."),
    ("d5", "Archives again", "Create tar archives and zip files."),
    ("d6", "Search", "Ranking documents for a query with BM25 and embeddings."),
]
TOPICS = """<top>
<num> Number: 401
<title> zip archives

<desc> Description:
How do I unpack an archive
of zip files?

<narr> Narrative:
A relevant document unpacks zip or tar archives.
</top>

<top>
<num> Number: 402
<title> BM25 ranking
<desc> Description:
Ranking functions for search engines.
<narr> Narrative:
Documents about BM25.
</top>

<top>
<num> Number: 403
<title> graph networks
<desc> Description:
Graph algorithms.
<narr> Narrative:
Anything on graphs.
</top>
"""
QRELS = [("401", "d1", 1), ("401", "d5", 2), ("402", "d2", 1), ("402", "d6", 1), ("403", "d4", 1), ("403", "d3", 0)]


def _files(root: Path) -> Path:
    """The same collection as a BEIR folder and as TREC files (topics.txt, qrels.txt) beside it."""
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n"
                                               for i, t, x in DOCS), encoding="utf-8")
    titles = {"401": "zip archives", "402": "BM25 ranking", "403": "graph networks"}
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in titles.items()),
                                        encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{g}\n" for q, d, g in QRELS), encoding="utf-8")
    (root / "topics.txt").write_text(TOPICS, encoding="utf-8")
    (root / "qrels.txt").write_text("".join(f"{q} 0 {d} {g}\n" for q, d, g in QRELS), encoding="utf-8")
    return root


@pytest.fixture()
def collection(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    return _files(tmp_path / "c")


def _cli(*args: object) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args])


# -- readers --------------------------------------------------------------------------------------------------


def test_topics_fields_and_the_three_query_forms(collection):
    topics = collection / "topics.txt"
    assert read_queries(topics) == {"401": "zip archives", "402": "BM25 ranking", "403": "graph networks"}
    assert read_queries(topics, "desc")["401"] == "How do I unpack an archive of zip files?"
    assert read_queries(topics, "title+desc")["403"] == "graph networks Graph algorithms."
    assert read_queries(topics, "narr")["402"] == "Documents about BM25."
    tsv = collection / "q.tsv"
    tsv.write_text("401\tzip archives\n\n402\tBM25   ranking\n", encoding="utf-8")
    assert read_queries(tsv) == {"401": "zip archives", "402": "BM25 ranking"}
    assert read_queries(collection / "queries.jsonl")["403"] == "graph networks"
    closing = collection / "closing.txt"  # closing field tags, several fields on one line
    closing.write_text("<top> <num> Number: 7 </num> <title> Topic: Polio </title>\n</top>\n", encoding="utf-8")
    assert read_queries(closing) == {"7": "Polio"}


def test_topics_read_as_ir_datasets_reads_them(collection, irds):
    from ir_datasets.formats import TrecQueries
    from ir_datasets.util import LocalDownload

    theirs = list(TrecQueries(LocalDownload(collection / "topics.txt")).queries_iter())
    assert irds and [q.query_id for q in theirs] == list(read_queries(collection / "topics.txt"))
    for field, name in (("title", "title"), ("desc", "description"), ("narr", "narrative")):
        ours = read_queries(collection / "topics.txt", field)
        assert ours == {q.query_id: " ".join(getattr(q, name).split()) for q in theirs}


@pytest.mark.parametrize("text, line, message", [
    ("<top>\n<num> 1\n<title> a\n<top>\n", 4, "<top> inside the topic opened on line 1"),
    ("<top>\n<num> 1\n<title> a\n", 1, "has no </top>"),
    ("<top>\n<title> a\n</top>\n", 1, "has no <num>"),
    ("<top>\n<num> 1\n<title> a\n</top>\n<top>\n<num> 1\n<title> b\n</top>\n", 5, "duplicate topic '1' (first on line 1)"),
    ("<top>\n<num> 1\n<title> a\n</top>\nstray words\n", 5, "text outside a topic"),
    ("<top>\n<num> 1\n<desc> only a description\n</top>\n", 1, "has no <title> text; it has <desc>"),
    ("</top>\n", 1, "</top> without a <top>"),
    ("<top>\n<num> 1 2\n<title> a\n</top>\n", 1, "is not one word"),
])
def test_a_bad_topics_file_names_the_file_and_the_line(tmp_path, text, line, message):
    path = tmp_path / "topics.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DatasetError, match="topics.txt") as error:
        read_queries(path)
    assert f"{path} line {line}" in str(error.value) and message in str(error.value)


@pytest.mark.parametrize("text, line, message", [
    ("1\tfine\n2 no tab\n", 2, "expected 'qid<TAB>text'"),
    ("1\tfine\n1\tagain\n", 2, "duplicate query id '1' (first on line 1)"),
    ("1\t \n", 1, "expected 'qid<TAB>text'"),
    ("a b\tspaces\n", 1, "has spaces"),
])
def test_a_bad_tsv_query_file_names_the_line(tmp_path, text, line, message):
    path = tmp_path / "q.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DatasetError) as error:
        read_queries(path)
    assert f"{path} line {line}" in str(error.value) and message in str(error.value)


def test_qrels_trec_and_beir_and_their_mistakes(collection, tmp_path):
    trec, _, _ = read_qrels_file(collection / "qrels.txt")
    beir, _, _ = read_qrels_file(collection / "qrels" / "test.tsv")
    assert trec == beir == {"401": {"d1": 1, "d5": 2}, "402": {"d2": 1, "d6": 1}, "403": {"d4": 1, "d3": 0}}
    bad = tmp_path / "bad.txt"
    bad.write_text("1 0 d1 1\n1 0 d2\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=rf"{bad} line 2: expected 4 whitespace-separated fields"):
        read_qrels_file(bad)
    bad.write_text("1 0 d1 1\n1 0 d1 2\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"line 2: duplicate judgement .* \(first on line 1\)"):
        read_qrels_file(bad)
    bad.write_text("1 0 d1 0.5\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"line 1: relevance grade '0.5' is not an integer"):
        read_qrels_file(bad)
    unjudged = tmp_path / "other.txt"
    unjudged.write_text("999 0 d1 1\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"line 1: query '999' is judged but not in"):
        collection_from_files(collection / "topics.txt", unjudged)


# -- irflow eval --corpus ---------------------------------------------------------------------------------------


@pytest.fixture()
def built(collection) -> Path:
    done = _cli("index", collection / "corpus.jsonl", "--out", collection.parent / "corpus", "--embedder", "hash")
    assert done.exit_code == 0, done.output
    return collection.parent / "corpus"


def test_eval_of_a_built_corpus_with_trec_files_equals_the_dataset(collection, built):
    by_files = _cli("eval", "lexical", "hybrid", "--corpus", built, "--queries", collection / "topics.txt",
                    "--qrels", collection / "qrels.txt", "--json")
    assert by_files.exit_code == 0, by_files.output
    by_dataset = _cli("eval", "lexical", "hybrid", "--dataset", collection, "--embedder", "hash", "--json")
    files, dataset = json.loads(by_files.stdout), json.loads(by_dataset.stdout)
    assert files["systems"] == dataset["systems"]  # the same documents, queries and judgements: the same figures
    assert files["queries"] == 3 and files["embedder"] == "hash:256" and files["dataset"] == "corpus"
    readable = _cli("eval", "lexical", "--corpus", built, "--queries", collection / "topics.txt", "--qrels",
                    collection / "qrels.txt")
    assert readable.exit_code == 0 and readable.stdout.startswith(f"corpus (qrels qrels.txt, 3 queries, depth 1000; "
                                                                  f"corpus opened: {built})")
    python = irflow.evaluate(["lexical", "hybrid"], collection_from_files(collection / "topics.txt",
                                                                          collection / "qrels.txt"), corpus=built)
    assert python.to_dict() == files["systems"]


@pytest.mark.parametrize("extra, message", [
    ([], "--corpus needs the queries and judgements"),
    (["--queries", "topics.txt", "--qrels", "qrels.txt", "--embedder", "hash"], "--embedder: the --corpus was built"),
    (["--queries", "topics.txt", "--qrels", "qrels.txt", "--split", "train"], "--split: the --corpus was built"),
    (["--queries", "topics.txt", "--qrels", "qrels.txt", "--dataset", "c"], "one of the two"),
])
def test_eval_corpus_options_that_do_not_go_together(collection, built, monkeypatch, extra, message):
    monkeypatch.chdir(collection)
    done = _cli("eval", "lexical", "--corpus", built, *extra)
    assert done.exit_code == 2 and message in done.stderr and "Traceback" not in done.output


def test_eval_dataset_options_that_do_not_go_together(collection):
    done = _cli("eval", "lexical", "--dataset", collection, "--qrels", collection / "qrels.txt")
    assert done.exit_code == 2 and "--queries and --qrels go with --corpus" in done.stderr
    done = _cli("eval", "lexical")
    assert done.exit_code == 2 and "one of the two" in done.stderr


# -- irflow run --queries ---------------------------------------------------------------------------------------


def test_run_a_query_file_into_a_trec_run(collection, built):
    out = collection.parent / "lexical.run"
    done = _cli("run", "hybrid", "--corpus", built, "--queries", collection / "topics.txt", "-o", out,
                "--set", "k=4", "--batch-size", "2")
    assert done.exit_code == 0, done.output
    assert "3 queries of" in done.stdout and f"written to {out}" in done.stdout
    lines = out.read_text(encoding="utf-8").splitlines()
    corpus = irflow.open_corpus(built)
    expected = irflow.load_recipe("hybrid").run(corpus, ["zip archives", "BM25 ranking", "graph networks"], k=4).hits
    assert lines == [f"{qid} Q0 {hit.artifact_id} {rank} {hit.score!r} hybrid"
                     for qid, hits in zip(["401", "402", "403"], expected) for rank, hit in enumerate(hits, start=1)]
    # a run file that trec_eval and evaluate_runs read, with the figures irflow eval gives at that depth
    run = read_trec_run(out)
    judged = read_qrels_file(collection / "qrels.txt")[0]
    ev = _cli("eval", "hybrid", "--corpus", built, "--queries", collection / "topics.txt", "--qrels",
              collection / "qrels.txt", "--depth", "4", "--metrics", "ndcg@3,map", "--json")
    assert irflow.evaluate_runs({"hybrid": run}, judged, metrics="ndcg@3,map").to_dict() == \
        json.loads(ev.stdout)["systems"]


def test_run_a_query_file_into_json_lines(collection, built):
    out = collection.parent / "run.jsonl"
    done = _cli("run", "lexical", "--corpus", built, "--queries", collection / "queries.jsonl", "-o", out,
                "--format", "jsonl", "--json")
    assert done.exit_code == 0, done.output
    summary = json.loads(done.stdout)
    assert summary["queries"] == 3 and summary["format"] == "jsonl" and summary["embedder"] == "hash:256"
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["qid"] for r in records] == ["401", "402", "403"] and records[0]["query"] == "zip archives"
    assert records[0]["hits"][0]["rank"] == 1 and records[0]["hits"][0]["artifact_id"] in ("d1", "d5")
    assert summary["hits"] == sum(len(r["hits"]) for r in records)


def test_a_run_file_is_replaced_whole_or_not_at_all_and_never_inside_a_corpus(collection, built):
    out = collection.parent / "kept.run"
    out.write_text("the previous run\n", encoding="utf-8")
    bad = collection / "bad.tsv"
    bad.write_text("q1\tzip\n", encoding="utf-8")
    failing = _cli("run", "lexical", "--corpus", built, "--queries", bad, "-o", out, "--set", "k=0")
    assert failing.exit_code == 1 and "--set k=0" in failing.stderr
    assert out.read_text(encoding="utf-8") == "the previous run\n"
    inside = _cli("run", "lexical", "--corpus", built, "--queries", bad, "-o", built / "run.trec")
    assert inside.exit_code == 1 and "inside" in inside.stderr and not (built / "run.trec").exists()
    with pytest.raises(OutputError):
        from irflow.evaluation.runfiles import write_run

        write_run("lexical", irflow.open_corpus(built), {"q": "zip"}, built / "x.run")


@pytest.mark.parametrize("args, message", [
    (["-q", "zip", "--queries", "topics.txt", "-o", "r"], "not both"),
    (["--queries", "topics.txt"], "name it with -o OUT"),
    (["-q", "zip", "-o", "r"], "-o/--out writes the run of a query file"),
    (["--queries", "topics.txt", "-o", "r", "--trace", "t.jsonl"], "--trace and --explain are for -q queries"),
])
def test_run_options_that_do_not_go_together(collection, built, monkeypatch, args, message):
    monkeypatch.chdir(collection)
    done = _cli("run", "lexical", "--corpus", built, *args)
    assert done.exit_code == 2 and message in done.stderr


# -- irds:NAME ------------------------------------------------------------------------------------------------------


@pytest.fixture()
def irds(tmp_path, monkeypatch):
    """ir_datasets with its home in a temporary folder, and any network connection failing the test."""
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "irds-home"))
    monkeypatch.setenv("IR_DATASETS_TMP", str(tmp_path / "irds-tmp"))
    module = pytest.importorskip("ir_datasets", reason="the irds extra is not installed (pip install -e '.[irds]')")
    dialled: list[object] = []

    def refuse(self, address, *args, **kwargs):
        dialled.append(address)
        raise AssertionError(f"a network connection to {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    yield module
    assert dialled == []


def _register(irds, collection: Path, docs_source) -> str:
    from typing import NamedTuple

    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import TrecQrels, TrecQueries, TsvDocs
    from ir_datasets.util import LocalDownload

    class TitledDoc(NamedTuple):
        doc_id: str
        title: str
        text: str

        def default_text(self):
            return f"{self.title} {self.text}"

    name = f"irflow-test/{uuid.uuid4().hex[:8]}"
    docs = TsvDocs(docs_source, doc_cls=TitledDoc)
    queries = TrecQueries(LocalDownload(collection / "topics.txt"))
    qrels = TrecQrels(LocalDownload(collection / "qrels.txt"), {0: "not", 1: "relevant", 2: "very"})
    irds.registry.register(name, Dataset(docs, queries, qrels))
    return name


def test_an_ir_datasets_collection_evaluates_as_its_beir_twin(collection, irds):
    from ir_datasets.util import LocalDownload

    (collection / "docs.tsv").write_text("".join(f"{i}\t{t}\t{x}\n" for i, t, x in DOCS), encoding="utf-8")
    name = _register(irds, collection, LocalDownload(collection / "docs.tsv"))
    loaded = irflow.evaluation.irds.load_irds(f"irds:{name}")
    assert loaded.documents["d1"] == irflow.evaluation.datasets.Document("d1", "Zip archives", DOCS[0][2])
    assert loaded.queries == {"401": "zip archives", "402": "BM25 ranking", "403": "graph networks"}
    by_irds = _cli("eval", "lexical", "hybrid", "--dataset", f"irds:{name}", "--embedder", "hash", "--json")
    assert by_irds.exit_code == 0, by_irds.output
    by_beir = _cli("eval", "lexical", "hybrid", "--dataset", collection, "--embedder", "hash", "--json")
    assert json.loads(by_irds.stdout)["systems"] == json.loads(by_beir.stdout)["systems"]
    assert json.loads(by_irds.stdout)["dataset"] == f"irds:{name}"
    split = _cli("eval", "lexical", "--dataset", f"irds:{name}", "--split", "train")
    assert split.exit_code == 1 and "includes its split" in split.stderr


def test_an_ir_datasets_collection_whose_files_are_missing_is_not_downloaded(collection, irds):
    from ir_datasets.util import Download, RequestsDownload

    missing = Download([RequestsDownload("http://127.0.0.1:9/docs.tsv")])  # would be fetched on first use
    name = _register(irds, collection, missing)
    done = _cli("eval", "lexical", "--dataset", f"irds:{name}")
    assert done.exit_code == 1 and "not on this machine, and irflow never downloads" in done.stderr
    assert "http://127.0.0.1:9/docs.tsv" in done.stderr and "Traceback" not in done.output
    unknown = _cli("eval", "lexical", "--dataset", "irds:no/such/dataset")
    assert unknown.exit_code == 1 and "ir_datasets has no dataset 'no/such/dataset'" in unknown.stderr


def test_without_ir_datasets_the_extra_is_named(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ir_datasets", None)  # what an absent package looks like to an import
    with pytest.raises(DatasetError, match=r"need ir_datasets, which is not installed: .*\[irds\]"):
        irflow.evaluation.irds.load_irds("irds:anything")


def test_a_run_file_holds_one_line_per_artifact_and_refuses_ids_a_trec_line_cannot_hold(tmp_path):
    from irflow.evaluation.runfiles import write_run

    corpus = irflow.build([irflow.Record("a", "name", "zip zip"), irflow.Record("a", "readme", "zip tools"),
                           irflow.Record("b", "name", "zip")], embedder=None)
    done = write_run("lexical", corpus, {"q1": "zip"}, tmp_path / "r.run", params={"per_artifact": False})
    surfaces = irflow.load_recipe("lexical").run(corpus, "zip", per_artifact=False).hits
    assert [h.artifact_id for h in surfaces] == ["a", "b", "a"]  # three surfaces, two artifacts
    lines = (tmp_path / "r.run").read_text(encoding="utf-8").splitlines()
    assert [line.split()[2:4] for line in lines] == [["a", "1"], ["b", "2"]] and done.hits == 2
    assert float(lines[0].split()[4]) == surfaces[0].score  # an artifact's best-ranked surface
    spaced = irflow.build([irflow.Record("has space", "name", "zip")], embedder=None)
    with pytest.raises(DatasetError, match="document id 'has space' cannot be written to a TREC run"):
        write_run("lexical", spaced, {"q1": "zip"}, tmp_path / "s.run")
    with pytest.raises(DatasetError, match="tag 'my tag'"):
        write_run("lexical", corpus, {"q1": "zip"}, tmp_path / "s.run", tag="my tag")
    assert not (tmp_path / "s.run").exists()
