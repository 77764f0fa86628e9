"""irflow.evaluation.datasets: BEIR collections, TREC qrels and runs, fingerprints and error messages."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from irflow.evaluation.datasets import (
    Collection,
    DatasetError,
    Document,
    file_digest,
    load_beir,
    read_beir_qrels,
)
from irflow.evaluation.trec import read_trec_qrels, read_trec_run, write_trec_run
from irflow.store.records import Record


def data_dir() -> Path:
    """../shared/data beside the repository, or $IRFLOW_DATA."""
    return Path(os.environ.get("IRFLOW_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")


def shared_collection(name: str) -> Path:
    root = data_dir() / name
    if not (root / "corpus.jsonl").is_file():
        pytest.skip(f"{root} is absent (set IRFLOW_DATA to the shared data folder)")
    return root


def write_jsonl(path: Path, rows: list) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    root = tmp_path / "toy"
    (root / "qrels").mkdir(parents=True)
    write_jsonl(
        root / "corpus.jsonl",
        [
            {"_id": "d1", "title": "Heat flow", "text": "Heat flow in slabs.", "metadata": {"url": "http://x/1"}},
            {"_id": "d2", "title": "", "text": "No title here."},
            {"_id": "d3", "text": "Title key absent."},
        ],
    )
    write_jsonl(root / "queries.jsonl", [{"_id": "q1", "text": "heat"}, {"_id": "q2", "text": "unjudged"}, {"_id": "q3", "text": "title"}])
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq3\td3\t1\nq1\td1\t2\nq1\td2\t0\n")
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq2\td2\t1\n")
    return root


# --------------------------------------------------------------- BEIR loading

def test_load_beir(toy: Path) -> None:
    c = load_beir(toy)
    assert c.name == "toy" and c.split == "test"
    assert list(c.documents) == ["d1", "d2", "d3"]
    assert c.documents["d1"] == Document("d1", "Heat flow", "Heat flow in slabs.", {"url": "http://x/1"})
    assert c.documents["d3"].title == ""
    assert c.queries == {"q1": "heat", "q2": "unjudged", "q3": "title"}  # every query stays accessible
    assert c.qrels == {"q3": {"d3": 1}, "q1": {"d1": 2, "d2": 0}}
    assert list(c.eval_queries) == ["q1", "q3"]  # judged in the split, queries-file order
    assert list(load_beir(toy, "train").eval_queries) == ["q2"]


def test_records_title_modes(toy: Path) -> None:
    c = load_beir(toy)
    prepend = c.records()
    assert [(r.artifact_id, r.surface_kind, r.text) for r in prepend] == [
        ("d1", "document", "Heat flow\nHeat flow in slabs."),
        ("d2", "document", "No title here."),
        ("d3", "document", "Title key absent."),
    ]
    assert prepend[0].metadata == {"url": "http://x/1", "title": "Heat flow"}
    assert all(isinstance(r, Record) and r.id for r in prepend)
    separate = c.records("separate")
    assert [(r.artifact_id, r.surface_kind, r.surface_index) for r in separate] == [
        ("d1", "title", 0),
        ("d1", "text", 1),
        ("d2", "text", 0),
        ("d3", "text", 0),
    ]
    assert [r.text for r in c.records("ignore")] == ["Heat flow in slabs.", "No title here.", "Title key absent."]
    with pytest.raises(DatasetError, match="valid modes"):
        c.records("append")  # type: ignore[arg-type]


def test_fingerprint_follows_content(toy: Path, tmp_path: Path) -> None:
    c = load_beir(toy)
    assert c.fingerprint() == load_beir(toy).fingerprint()
    copy = tmp_path / "copy"
    shutil.copytree(toy, copy)  # a copy (new mtimes, new path) has the same content
    assert load_beir(copy).fingerprint() == c.fingerprint()
    assert load_beir(toy, "train").fingerprint() != c.fingerprint()
    assert not c.is_stale()

    # editing the qrels changes the collection's fingerprint, not the corpus's
    (toy / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    edited = load_beir(toy)
    assert edited.fingerprint() != c.fingerprint()
    assert edited.corpus_fingerprint() == c.corpus_fingerprint()
    assert c.is_stale()

    with open(toy / "corpus.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"_id": "d4", "text": "new"}) + "\n")
    assert load_beir(toy).corpus_fingerprint() != c.corpus_fingerprint()
    assert file_digest(toy / "corpus.jsonl") != file_digest(copy / "corpus.jsonl")
    assert file_digest(toy / "queries.jsonl") == file_digest(copy / "queries.jsonl")


def test_qrels_without_header_and_with_float_grades(tmp_path: Path) -> None:
    path = tmp_path / "q.tsv"
    path.write_text("1\t5\t2\n1\t6\t1.0\n")
    assert read_beir_qrels(path) == {"1": {"5": 2, "6": 1}}


# --------------------------------------------------------------- malformed input

@pytest.mark.parametrize(
    "file, content, message",
    [
        ("corpus.jsonl", '{"_id": "d1", "text": "ok"}\n{"_id": "d2", "text": \n', r"corpus\.jsonl line 2: not valid JSON"),
        ("corpus.jsonl", '{"_id": "d1", "text": "ok"}\n\n{"title": "no id", "text": "x"}\n', r"corpus\.jsonl line 3: '_id' must be"),
        ("corpus.jsonl", '{"_id": "d1", "text": "a"}\n{"_id": "d1", "text": "b"}\n', r"corpus\.jsonl line 2: duplicate document id 'd1' \(first on line 1\)"),
        ("corpus.jsonl", '{"_id": "d1", "title": "no text"}\n', r"corpus\.jsonl line 1: 'text' must be a string"),
        ("corpus.jsonl", '["d1", "text"]\n', r"corpus\.jsonl line 1: expected a JSON object"),
        ("corpus.jsonl", '{"_id": "d1", "text": "a", "metadata": [1]}\n', r"corpus\.jsonl line 1: 'metadata' must be a JSON object"),
        ("queries.jsonl", '{"_id": "q1", "text": "a"}\n{"_id": "q2"}\n', r"queries\.jsonl line 2: 'text' must be a string"),
        ("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\n", r"test\.tsv line 2: expected 3 tab-separated fields"),
        ("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t0.5\n", r"test\.tsv line 2: relevance grade '0\.5' is not an integer"),
        ("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t2\n", r"test\.tsv line 3: duplicate judgement .* \(first on line 2\)"),
        ("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq9\td1\t1\n", r"test\.tsv line 3: query 'q9' is judged but not in"),
    ],
)
def test_malformed_files_name_file_and_line(tmp_path: Path, file: str, content: str, message: str) -> None:
    root = tmp_path / "bad"
    (root / "qrels").mkdir(parents=True)
    write_jsonl(root / "corpus.jsonl", [{"_id": "d1", "text": "x"}])
    write_jsonl(root / "queries.jsonl", [{"_id": "q1", "text": "x"}])
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (root / file).write_text(content, encoding="utf-8")
    with pytest.raises(DatasetError, match=message):
        load_beir(root)


def test_invalid_utf8_names_line(tmp_path: Path, toy: Path) -> None:
    (toy / "queries.jsonl").write_bytes(b'{"_id": "q1", "text": "a"}\n{"_id": "q2", "text": "\xff"}\n')
    with pytest.raises(DatasetError, match=r"queries\.jsonl line 2: not valid UTF-8"):
        load_beir(toy)


def test_missing_pieces(tmp_path: Path, toy: Path) -> None:
    with pytest.raises(DatasetError, match="not a directory"):
        load_beir(tmp_path / "nowhere")
    with pytest.raises(DatasetError, match=r"dev\.tsv does not exist; splits available .*\['test', 'train'\]"):
        load_beir(toy, "dev")
    (toy / "queries.jsonl").unlink()
    with pytest.raises(DatasetError, match=r"queries\.jsonl does not exist"):
        load_beir(toy)


# --------------------------------------------------------------- TREC formats

def test_write_trec_run_orders_by_score_stable_on_ties(tmp_path: Path) -> None:
    path = tmp_path / "run.txt"
    write_trec_run(path, {"q1": {"c": 1.0, "a": 2.0, "z": 1.0, "b": 1.0}, "q2": {"x": 0.1}}, tag="bm25")
    assert path.read_text().splitlines() == [
        "q1 Q0 a 1 2.0 bm25",
        "q1 Q0 c 2 1.0 bm25",  # ties keep the given order: c, z, b
        "q1 Q0 z 3 1.0 bm25",
        "q1 Q0 b 4 1.0 bm25",
        "q2 Q0 x 1 0.1 bm25",
    ]
    with pytest.raises(DatasetError, match="without whitespace"):
        write_trec_run(path, {"q 1": {"a": 1.0}})
    with pytest.raises(DatasetError, match="without whitespace"):
        write_trec_run(path, {"q1": {"a": 1.0}}, tag="my run")


ids = st.text(alphabet=st.characters(categories=["L", "N"]) | st.sampled_from("-_.:/"), min_size=1, max_size=8)


@settings(max_examples=50, deadline=None)
@given(run=st.dictionaries(ids, st.dictionaries(ids, st.floats(allow_nan=False, width=64), max_size=12), max_size=5))
def test_trec_run_round_trip(tmp_path_factory: pytest.TempPathFactory, run: dict) -> None:
    path = tmp_path_factory.mktemp("runs") / "run.txt"
    write_trec_run(path, run, tag="t")
    back = read_trec_run(path)
    assert back == {q: docs for q, docs in run.items() if docs}  # a query with no document writes no line
    for qid, docs in back.items():
        # read back in the written order, which is the ranking the scores imply
        assert list(docs) == [d for d, _ in sorted(run[qid].items(), key=lambda item: -item[1])]
        assert [type(v) for v in docs.values()] == [float] * len(docs)


def test_trec_qrels_round_trip_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "qrels.txt"
    path.write_text("301 0 FBIS3-10082 1\n301 0 FBIS3-10169 0\n\n302 0 LA010189-0001 2\n")
    assert read_trec_qrels(path) == {"301": {"FBIS3-10082": 1, "FBIS3-10169": 0}, "302": {"LA010189-0001": 2}}
    path.write_text("301 0 FBIS3-10082 1\n301 FBIS3-10169 0\n")
    with pytest.raises(DatasetError, match=r"qrels\.txt line 2: expected 4 whitespace-separated fields"):
        read_trec_qrels(path)
    path.write_text("301 0 A 1\n301 0 A x\n")
    with pytest.raises(DatasetError, match=r"qrels\.txt line 2: relevance grade 'x'"):
        read_trec_qrels(path)


@pytest.mark.parametrize(
    "content, message",
    [
        ("q1 Q0 a 1 2.0 t\nq1 Q0 b 2 1.0\n", r"run\.txt line 2: expected 6 whitespace-separated fields"),
        ("q1 Q0 a 1 high t\n", r"run\.txt line 1: score 'high' is not a number"),
        ("q1 Q0 a 1 nan t\n", r"run\.txt line 1: score 'nan' is not a number"),
        ("q1 Q0 a 1 2.0 t\nq1 Q0 a 2 1.0 t\n", r"run\.txt line 2: document 'a' appears twice for query 'q1' \(first on line 1\)"),
    ],
)
def test_malformed_trec_run(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "run.txt"
    path.write_text(content)
    with pytest.raises(DatasetError, match=message):
        read_trec_run(path)


def test_collection_can_be_built_in_memory() -> None:
    c = Collection("mem", None, {"d": Document("d", "", "text")}, {"q": "text"}, {"q": {"d": 1}})
    assert c.records()[0].text == "text" and c.eval_queries == {"q": "text"}


# --------------------------------------------------------------- shared collections

@pytest.mark.data
@pytest.mark.parametrize(
    "name, split, n_docs, n_queries, n_eval, n_judgements",
    [
        ("cranfield", "test", 1400, 225, 225, 1612),
        ("cisi", "test", 1460, 112, 76, 3114),
        ("scifact", "test", 5183, 1109, 300, 339),
        ("scifact", "train", 5183, 1109, 809, 919),
    ],
)
def test_shared_collections_match_their_source_notes(name: str, split: str, n_docs: int, n_queries: int, n_eval: int, n_judgements: int) -> None:
    c = load_beir(shared_collection(name), split)
    assert (len(c.documents), len(c.queries), len(c.eval_queries)) == (n_docs, n_queries, n_eval)
    assert sum(len(j) for j in c.qrels.values()) == n_judgements
    assert len(c.records()) == n_docs
    assert len(c.fingerprint()) == 32 and not c.is_stale()


def test_byte_order_mark_is_not_data(toy: Path) -> None:
    raw = (toy / "queries.jsonl").read_bytes()
    (toy / "queries.jsonl").write_bytes(b"\xef\xbb\xbf" + raw)
    assert list(load_beir(toy).queries)[0] == "q1"


def test_write_trec_run_refuses_nan(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="NaN"):
        write_trec_run(tmp_path / "run.txt", {"q1": {"a": float("nan")}})
    assert not (tmp_path / "run.txt").exists()


# --------------------------------------------------------------- numbers read from files

@pytest.mark.parametrize(
    "grade, message",
    [
        ("1" + "0" * 30, "out of range"),  # 10**30: was an OverflowError deep in the metrics
        ("1e30", "out of range"),
        ("9223372036854775808", "out of range"),  # one past int64
        ("-9223372036854775809", "out of range"),
        ("1e999999999", "out of range"),  # refused without building a billion-digit integer
        ("nan", "not an integer"),
        ("inf", "not an integer"),
        ("-Infinity", "not an integer"),
        ("true", "not an integer"),
        ("2.5", "not an integer"),
        ("1_0", "not an integer"),  # float() reads 10; trec_eval's atol reads 1
        ("\u0661", "not an integer"),  # an Arabic-Indic one: float() reads it, trec_eval does not
        ("0x1", "not an integer"),
    ],
)
def test_bad_grades_name_the_file_and_line(tmp_path: Path, toy: Path, grade: str, message: str) -> None:
    (toy / "qrels" / "test.tsv").write_text(f"query-id\tcorpus-id\tscore\nq1\td1\t1\nq3\td3\t{grade}\n",
                                            encoding="utf-8")
    with pytest.raises(DatasetError, match=rf"test\.tsv line 3: relevance grade .* {message}"):
        load_beir(toy)
    (tmp_path / "qrels.txt").write_text(f"q1 0 d1 {grade}\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=rf"qrels\.txt line 1: relevance grade .* {message}"):
        read_trec_qrels(tmp_path / "qrels.txt")


@settings(max_examples=200, deadline=None)
@given(grade=st.integers(), form=st.sampled_from(["{}", "{}.0", "{}e0", "+{}"]))
def test_integer_grades_read_exactly_or_are_refused(tmp_path_factory: pytest.TempPathFactory, grade: int,
                                                    form: str) -> None:
    path = tmp_path_factory.mktemp("grades") / "q.tsv"
    text = form.format(grade) if grade >= 0 or not form.startswith("+") else str(grade)
    path.write_text(f"q1\td1\t{text}\n")
    if -(2**63) <= grade < 2**63:
        assert read_beir_qrels(path) == {"q1": {"d1": grade}}  # every digit kept (2**53 + 1 is not a float)
    else:
        with pytest.raises(DatasetError, match="line 1: relevance grade .* out of range"):
            read_beir_qrels(path)


@pytest.mark.parametrize(
    "line, message",
    [
        ("q1 Q0 a 12.5 1 t", r"rank '12\.5' is not a whole number.*swapped"),
        ("q1 Q0 a -1 1.0 t", r"rank '-1' is not a whole number"),
        ("q1 Q0 a " + "9" * 19 + " 1.0 t", r"rank '9{19}' is not a whole number"),
        ("q1 Q0 a true 1.0 t", r"rank 'true' is not a whole number"),
        ("q1 Q0 a 1 1_0 t", r"score '1_0' is not a number"),
        ("q1 Q0 a 1 NaN t", r"score 'NaN' is not a number"),
        ("q1 Q0 a 1 0x10 t", r"score '0x10' is not a number"),
    ],
)
def test_bad_run_numbers_name_the_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "run.txt"
    path.write_text(f"q1 Q0 b 1 2.0 t\n{line}\n")
    with pytest.raises(DatasetError, match=rf"run\.txt line 2: {message}"):
        read_trec_run(path)


def test_run_scores_beyond_float_range_are_infinite_as_in_trec_eval(tmp_path: Path) -> None:
    path = tmp_path / "run.txt"
    path.write_text(f"q1 Q0 a 0 1e400 t\nq1 Q0 b 1 -inf t\nq1 Q0 c 2 {'9' * 400} t\nq1 Q0 d 3 -0.5 t\n")
    assert read_trec_run(path) == {"q1": {"a": math.inf, "b": -math.inf, "c": math.inf, "d": -0.5}}


@pytest.mark.parametrize("raw, message", [("1.5", "got 1.5"), ("true", "got True"), ("NaN", "got nan"),
                                          ("1e400", "got inf"), ("-0.0", "got -0.0")])
def test_query_ids_that_are_not_whole_numbers_are_refused(toy: Path, raw: str, message: str) -> None:
    (toy / "queries.jsonl").write_text('{"_id": "q1", "text": "heat"}\n{"_id": ' + raw + ', "text": "x"}\n')
    with pytest.raises(DatasetError, match=rf"queries\.jsonl line 2: '_id' must be a non-empty string, {message}"):
        load_beir(toy)


def test_query_ids_written_as_integers_keep_every_digit(toy: Path) -> None:
    big = 10**30 + 1  # beyond float and int64: read as the text of the integer, exactly
    (toy / "queries.jsonl").write_text(f'{{"_id": "q1", "text": "heat"}}\n{{"_id": {big}, "text": "x"}}\n'
                                       f'{{"_id": "q3", "text": "title"}}\n')
    (toy / "qrels" / "test.tsv").write_text(f"query-id\tcorpus-id\tscore\nq1\td1\t2\n{big}\td2\t1\n")
    collection = load_beir(toy)
    assert list(collection.eval_queries) == ["q1", str(big)] and collection.qrels[str(big)] == {"d2": 1}
