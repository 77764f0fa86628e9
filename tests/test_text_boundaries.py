"""Text that UTF-8 cannot encode (a lone surrogate) is refused where it enters irflow, naming the field; never a traceback.

A Python ``str`` can hold a lone surrogate: a JSON ``"\\ud800"`` escape, or
bytes that were not UTF-8 (``-q $'zip \\xff'`` reaches Python as
``"zip \\udcff"``).  irflow stores and writes UTF-8 and model tokenizers
take valid Unicode only, so each boundary refuses such text with one error
of the irflow hierarchy: a record's fields and metadata (``build``, ``irflow
index`` per line, ``--skip-bad`` skipping it), queries (``search``,
``Recipe.run``, a formulator's output, ``-q``, BEIR ``queries.jsonl``), run
arguments and filters, recipes (names, parameters), test collections
(``corpus.jsonl``, a Collection made in Python, system labels), embedders;
command-line arguments that are not UTF-8 are usage errors naming the
option.  The in-memory and the stored corpus refuse the same records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import irflow.cli.quickstart
from irflow import Recipe, load_recipe, search
from irflow.cli import main
from irflow.errors import (CorpusError, DatasetError, EmbedderError, EvaluationError, FilterError, FormulateError,
                           InputError, ParameterError, RecipeError, RecordError, RerankError)
from irflow.evaluation.datasets import Collection, Document, load_beir
from irflow.evaluation.evaluate import evaluate
from irflow.kernels.embedders import resolve_embedder
from irflow.kernels.filters import compile_filter
from irflow.kernels.onnx_embedder import pinned_model_available
from irflow.store.corpus import build, open_corpus
from irflow.store.records import Record

HIGH = "zip \ud800"  # a JSON "\ud800" escape without its pair
ESCAPE = "zip \udcff"  # what Python makes of the argv bytes b"zip \xff"
SURROGATE = r"holds a lone surrogate \(U\+D[89A-F][0-9A-F]{2} at character \d+"
GOOD = [{"artifact_id": "a", "surface_kind": "name", "text": "zip tool", "metadata": {"owner": "me"}},
        {"artifact_id": "b", "surface_kind": "name", "text": "tar archive", "metadata": {"owner": "you"}}]

HAVE_MODEL = pinned_model_available()
needs_model = pytest.mark.skipif(not HAVE_MODEL, reason="the models extra (the pinned ONNX model) is not installed")


@pytest.fixture(scope="module")
def corpus() -> Any:
    return build(GOOD, embedder="hash:64")


def _plain(text: str) -> None:
    for internal in ("Traceback", "UnicodeEncodeError", "TypeError", "TextEncodeInput"):
        assert internal not in text, text


# -- records: build() -----------------------------------------------------------------------------------


@pytest.mark.parametrize("change, field", [
    ({"text": HIGH}, "text"),
    ({"text": ESCAPE}, "text"),
    ({"artifact_id": HIGH}, "artifact_id"),
    ({"surface_kind": HIGH}, "surface_kind"),
    ({"id": HIGH}, "id"),
    ({"metadata": {"owner": HIGH}}, r"metadata\['owner'\]"),
    ({"metadata": {HIGH: "x"}}, r"metadata has a key that is not UTF-8 text"),
    ({"metadata": {"tags": ["ok", {"deep": ESCAPE}]}}, r"metadata\['tags'\]\[1\]\['deep'\]"),
])
def test_build_refuses_a_lone_surrogate_in_any_field_in_memory_and_on_disk(change: dict, field: str,
                                                                          tmp_path: Path) -> None:
    records = [GOOD[0], {**GOOD[1], **change}]
    messages = []
    for path in (None, tmp_path / "c"):
        with pytest.raises(RecordError) as caught:
            build(records, embedder="hash:64", path=path)
        assert isinstance(caught.value, CorpusError) and isinstance(caught.value, ValueError)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert messages[0].startswith("record #1 (artifact "), messages[0]
    assert __import__("re").search(f"{field}.*{SURROGATE}", messages[0]), messages[0]
    assert not (tmp_path / "c").exists()


def test_a_record_with_an_explicit_index_is_refused_by_the_check_not_by_its_id() -> None:
    # the record id is a digest of the artifact, kind and index: computed for any str, never a UnicodeEncodeError
    record = Record(HIGH, "name", "zip", surface_index=0)
    assert record.id == Record.make_id(HIGH, "name", 0) and len(record.id) == 20
    with pytest.raises(RecordError, match=f"record #0 .*: artifact_id: .*{SURROGATE}"):
        build([record], embedder=None)
    docs = {"d1": Document("d1", "t", "zip"), ESCAPE: Document(ESCAPE, "t", "tar")}
    with pytest.raises(RecordError, match=f"artifact_id: .*{SURROGATE}"):
        evaluate("lexical", Collection("toy", None, docs, {"q1": "zip"}, {"q1": {"d1": 1}}), embedder=None,
                 use_cache=False, metrics="p@1")


def test_ids_of_valid_text_are_unchanged() -> None:
    # ids are stored in corpora: the digest of text UTF-8 encodes is the one earlier versions computed
    import hashlib

    for artifact in ("unbox", "caf\u00e9", "\U0001f600"):
        payload = json.dumps([artifact, "name", 3], ensure_ascii=False).encode("utf-8")
        assert Record.make_id(artifact, "name", 3) == hashlib.blake2b(payload, digest_size=10).hexdigest()


def test_a_run_file_refuses_an_id_with_a_lone_surrogate(tmp_path: Path) -> None:
    from irflow.evaluation.trec import write_trec_run

    for run, what in (({"q\udcff": {"d1": 1.0}}, "query id"), ({"q1": {"d\ud800": 1.0}}, "document id")):
        with pytest.raises(DatasetError, match=f"{what}: .*{SURROGATE}"):
            write_trec_run(tmp_path / "r.run", run)
        assert not (tmp_path / "r.run").exists()


def test_corpus_files_hold_a_paths_undecodable_bytes_as_json_escapes() -> None:
    from irflow.store.persist import _json_bytes

    spec = {"spec": "onnx:/models/caf\udce9"}  # an embedder named by a folder whose name is not UTF-8
    raw = _json_bytes(spec, "the embedder")
    assert json.loads(raw.decode("utf-8")) == spec and b"\\udce9" in raw


def test_build_refuses_a_corpus_name_with_a_lone_surrogate() -> None:
    with pytest.raises(InputError, match=f"build\\(\\): name: .*{SURROGATE}"):
        build(GOOD, embedder=None, name=ESCAPE)


def test_text_that_is_valid_unicode_round_trips_exactly(tmp_path: Path) -> None:
    text = "zip \U0001f600 caf\u00e9 \u65e5\u672c \x00 \ufffd"  # astral, accented, CJK, NUL, the replacement char
    records = [{**GOOD[0], "text": text, "metadata": {"k\u00e9": [text]}}, GOOD[1]]
    stored = open_corpus(build(records, embedder="hash:64", path=tmp_path / "c").path)
    memory = build(records, embedder="hash:64")
    for corpus in (memory, stored):
        assert corpus.record(0).text == text and corpus.record(0).metadata == {"k\u00e9": [text]}


# -- irflow index -----------------------------------------------------------------------------------------


def _lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


BAD_LINES = [
    '{"artifact_id": "a", "surface_kind": "name", "text": "zip \\ud800"}',
    '{"artifact_id": "b", "surface_kind": "name", "text": "zip tool"}',
    '{"artifact_id": "c", "surface_kind": "name", "text": "x", "metadata": {"\\udcff": 1}}',
    '{"artifact_id": "d\\udc80", "surface_kind": "name", "text": "x"}',
    '{"artifact_id": "e", "surface_kind": "name", "text": "x", "metadata": {"v": [NaN]}}',
    '{"artifact_id": "f", "surface_kind": "name", "text": "tar"}',
]


@pytest.mark.parametrize("embedder", ["hash", "none"])
def test_index_reports_each_line_with_text_utf8_cannot_hold(tmp_path: Path, embedder: str) -> None:
    path = _lines(tmp_path / "r.jsonl", BAD_LINES)
    result = CliRunner().invoke(main, ["index", str(path), "--out", str(tmp_path / "c"), "--embedder", embedder])
    _plain(result.output)
    assert result.exit_code == 1 and result.exception is None or isinstance(result.exception, SystemExit)
    assert "4 bad lines of 6" in result.stderr and "nothing was indexed" in result.stderr, result.stderr
    assert "line 1: text: 'zip \\ud800' holds a lone surrogate" in result.stderr
    assert "line 3: metadata has a key that is not UTF-8 text" in result.stderr
    assert "line 4: artifact_id: 'd\\udc80' holds a lone surrogate" in result.stderr
    assert "line 5: metadata['v'][0] is nan" in result.stderr
    assert not (tmp_path / "c").exists()
    skipped = CliRunner().invoke(main, ["index", str(path), "--out", str(tmp_path / "c"), "--embedder", embedder,
                                        "--skip-bad", "--json"])
    assert skipped.exit_code == 0, skipped.output
    assert "skipped 4 bad lines of 6" in skipped.stderr and "lines 1, 3-5" in skipped.stderr
    summary = json.loads(skipped.stdout)
    assert summary["records"] == 2 and summary["skipped_lines"] == [1, 3, 4, 5]
    assert sorted(open_corpus(tmp_path / "c").artifact_ids.tolist()) == ["b", "f"]


def test_index_reports_a_beir_document_with_a_lone_surrogate(tmp_path: Path) -> None:
    path = _lines(tmp_path / "corpus.jsonl", ['{"_id": "d1", "title": "t\\ud800", "text": "zip"}',
                                              '{"_id": "d2", "title": "t", "text": "tar"}',
                                              '{"_id": "d3", "title": "t", "text": "x", "metadata": {"a": "\\udcff"}}'])
    result = CliRunner().invoke(main, ["index", str(path), "--out", str(tmp_path / "c"), "--embedder", "hash",
                                       "--skip-bad"])
    _plain(result.output)
    assert result.exit_code == 0, result.output
    assert "skipped 2 bad lines of 3" in result.stderr
    assert "line 1: 'title': 't\\ud800' holds a lone surrogate" in result.stderr
    assert open_corpus(tmp_path / "c").artifact_ids.tolist() == ["d2"]


# -- queries, run arguments, filters, formulators -----------------------------------------------------------


@pytest.mark.parametrize("query", [HIGH, ESCAPE])
def test_search_refuses_a_query_with_a_lone_surrogate(corpus: Any, query: str) -> None:
    for mode in ("dense", "lexical", "hybrid"):
        with pytest.raises(InputError, match=f"the query: .*{SURROGATE}"):
            search(corpus, query, mode=mode)


def test_recipe_run_refuses_a_query_of_a_batch_naming_it(corpus: Any) -> None:
    for name in ("hybrid", "lexical", "dense"):
        with pytest.raises(InputError, match=f"query 1: 'zip \\\\udcff' {SURROGATE}"):
            load_recipe(name).run(corpus, ["zip", ESCAPE], trace=True)


@pytest.mark.parametrize("argument, where", [
    ({"filter": {"owner": HIGH}}, r"filter\['owner'\]"),
    ({"filter": {HIGH: "me"}}, "a key of filter"),
    ({"filter": {"$or": [{"owner": "me"}, {"owner": {"$in": ["x", ESCAPE]}}]}}, r"filter\['\$or'\]\[1\]"),
    ({"surfaces": [HIGH]}, r"surfaces\[0\]"),
    ({"surfaces": HIGH}, "surfaces"),
    ({"surface_weights": {HIGH: 1.0}}, "a key of surface_weights"),
    ({"rerank_text": ESCAPE}, "rerank_text"),
])
def test_run_arguments_with_a_lone_surrogate_are_refused_naming_the_argument(corpus: Any, argument: dict,
                                                                             where: str) -> None:
    name = next(iter(argument))
    with pytest.raises(ParameterError, match=f"{name}=.*: (?:{where}: )?.*{SURROGATE}") as caught:
        search(corpus, "zip", mode="hybrid", **argument)
    assert caught.value.arguments[0][0] == name
    with pytest.raises(ParameterError):
        load_recipe("search").run(corpus, ["zip"], **argument)


def test_a_filter_with_a_lone_surrogate_is_refused_by_the_filter_language(corpus: Any) -> None:
    for spec in ({"owner": HIGH}, {ESCAPE: 1}, {"n": {"$in": [1, HIGH]}}):
        with pytest.raises(FilterError, match=SURROGATE):
            compile_filter(spec)
        with pytest.raises(FilterError, match=SURROGATE):
            corpus.candidate_mask(spec)


def test_a_formulator_returning_a_lone_surrogate_is_refused(corpus: Any) -> None:
    with pytest.raises(FormulateError, match=f"returned unusable text for 'zip': .*{SURROGATE}"):
        search(corpus, "zip", mode="lexical", formulate=lambda q: [q, q + "\udc80"])


def test_a_rerank_text_callable_returning_a_lone_surrogate_is_refused(corpus: Any) -> None:
    def scores(query: str, segments: list) -> list[float]:
        return [1.0] * len(segments)

    with pytest.raises(RerankError, match=f"rerank text callable .* returned unusable text for record .*{SURROGATE}"):
        search(corpus, "zip", mode="lexical", rerank=scores, rerank_text=lambda corpus, meta: "x\udc80")
    assert search(corpus, "zip", mode="lexical", rerank=scores, rerank_text=lambda corpus, meta: "ok")  # control


# -- recipes ----------------------------------------------------------------------------------------------


def test_a_recipe_with_a_lone_surrogate_is_refused_naming_where(tmp_path: Path) -> None:
    text = load_recipe("lexical").to_yaml().replace("name: lexical", 'name: "lex\\ud800"', 1)
    assert "\\ud800" in text
    (tmp_path / "r.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(RecipeError, match=rf"recipe\['name'\]: 'lex\\ud800' {SURROGATE}"):
        load_recipe(tmp_path / "r.yaml")
    built = load_recipe("lexical").with_params(k=3).to_dict()
    built["params"]["surfaces"] = ["name", HIGH]
    with pytest.raises(RecipeError, match=rf"params\['surfaces'\]\[1\]: .*{SURROGATE}"):
        Recipe.from_dict(built)


# -- evaluation ---------------------------------------------------------------------------------------------


def _beir(root: Path, corpus: list[str], queries: list[str]) -> Path:
    (root / "qrels").mkdir(parents=True)
    _lines(root / "corpus.jsonl", corpus)
    _lines(root / "queries.jsonl", queries)
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", encoding="utf-8")
    return root


DOCS = ['{"_id": "d1", "title": "t", "text": "zip tool"}', '{"_id": "d2", "title": "t", "text": "tar"}']
QUERIES = ['{"_id": "q1", "text": "zip"}']


@pytest.mark.parametrize("corpus_lines, query_lines, where", [
    (['{"_id": "d1", "title": "t", "text": "zip \\ud800"}', DOCS[1]], QUERIES, "corpus.jsonl line 1: 'text'"),
    (['{"_id": "d1\\udcff", "title": "t", "text": "zip"}', DOCS[1]], QUERIES, "corpus.jsonl line 1: '_id'"),
    ([DOCS[0], '{"_id": "d2", "title": "\\ud800", "text": "tar"}'], QUERIES, "corpus.jsonl line 2: 'title'"),
    ([DOCS[0], '{"_id": "d2", "text": "tar", "metadata": {"k": ["\\ud800"]}}'], QUERIES,
     r"corpus.jsonl line 2: metadata\['k'\]\[0\]"),
    (DOCS, ['{"_id": "q1", "text": "zip \\udcff"}'], "queries.jsonl line 1: 'text'"),
    (DOCS, ['{"_id": "q1", "text": "zip"}', '{"_id": "q\\ud800", "text": "x"}'], "queries.jsonl line 2: '_id'"),
])
def test_a_test_collection_with_a_lone_surrogate_is_refused_naming_file_line_and_field(
        tmp_path: Path, corpus_lines: list[str], query_lines: list[str], where: str) -> None:
    root = _beir(tmp_path / "beir", corpus_lines, query_lines)
    with pytest.raises(DatasetError, match=f"{where}: .*{SURROGATE}"):
        load_beir(root)
    for extra in ([], ["--no-cache"]):
        result = CliRunner().invoke(main, ["eval", "lexical", "--dataset", str(root), "--embedder", "hash", *extra],
                                    env={"IRFLOW_HOME": str(tmp_path / "home")})
        _plain(result.output)
        assert result.exit_code == 1 and result.stderr.startswith("Error: "), result.output
        assert __import__("re").search(f"{where}: .*{SURROGATE}", result.stderr), result.stderr


def test_evaluate_refuses_a_collection_made_in_python_with_a_lone_surrogate(tmp_path: Path) -> None:
    docs = {"d1": Document("d1", "t", "zip tool"), "d2": Document("d2", "t", "tar")}
    bad_text = Collection("toy", None, docs, {"q1": ESCAPE}, {"q1": {"d1": 1}})
    with pytest.raises(DatasetError, match=f"toy: the text of query 'q1': .*{SURROGATE}"):
        evaluate("lexical", bad_text, embedder=None, use_cache=False, metrics="p@1")
    bad_id = Collection("toy", None, docs, {HIGH: "zip"}, {HIGH: {"d1": 1}})
    with pytest.raises(DatasetError, match=f"toy: a query id: .*{SURROGATE}"):
        evaluate("lexical", bad_id, embedder=None, use_cache=False, metrics="p@1")
    bad_doc = Collection("toy", None, {**docs, "d3": Document("d3", HIGH, "x")}, {"q1": "zip"}, {"q1": {"d1": 1}})
    with pytest.raises(RecordError, match=f"artifact 'd3'.*text: .*{SURROGATE}"):
        evaluate("lexical", bad_doc, embedder=None, use_cache=True, cache_dir=tmp_path, metrics="p@1")
    good = Collection("toy", None, docs, {"q1": "zip"}, {"q1": {"d1": 1}})
    with pytest.raises(EvaluationError, match=f"a system label: .*{SURROGATE}"):
        evaluate({ESCAPE: "lexical"}, good, embedder=None, use_cache=False, metrics="p@1")


# -- embedders ----------------------------------------------------------------------------------------------


def test_an_embedder_refuses_a_text_with_a_lone_surrogate_naming_the_item() -> None:
    embedder = resolve_embedder("hash:64")
    with pytest.raises(EmbedderError, match=f"item 1: .*{SURROGATE}"):
        embedder.embed_queries(["zip", HIGH])
    with pytest.raises(EmbedderError, match=f"item 0: .*{SURROGATE}"):
        embedder.embed_documents([ESCAPE])


@needs_model
def test_the_onnx_embedder_path_refuses_a_lone_surrogate_without_a_tokenizer_error(tmp_path: Path) -> None:
    embedder = resolve_embedder("onnx:all-MiniLM-L6-v2")
    with pytest.raises(EmbedderError, match=f"item 0: .*{SURROGATE}"):
        embedder.embed_queries([ESCAPE])
    with pytest.raises(EmbedderError, match=f"the ONNX embedder: item 1: .*{SURROGATE}"):
        embedder.embed_fn(["zip", HIGH], "query")  # the model's own callable, called directly
    assert embedder.embed_queries(["zip \U0001f600 caf\u00e9"]).shape == (1, 384)  # valid Unicode still embeds
    root = tmp_path / "onnx"
    build(GOOD, embedder="onnx:all-MiniLM-L6-v2", path=root)
    corpus = open_corpus(root)
    for mode in ("dense", "hybrid"):
        with pytest.raises(InputError, match=SURROGATE):
            search(corpus, ESCAPE, mode=mode)
    result = CliRunner().invoke(main, ["run", "hybrid", "--corpus", str(root), "-q", ESCAPE])
    _plain(result.output)
    assert result.exit_code == 2 and "'--query' / '-q'" in result.stderr and "byte 0xff" in result.stderr
    with pytest.raises(RecordError, match=SURROGATE):
        build([{**GOOD[0], "text": HIGH}], embedder="onnx:all-MiniLM-L6-v2")


@needs_model
def test_the_demo_with_the_onnx_model_refuses_a_query_that_is_not_utf8(monkeypatch: pytest.MonkeyPatch) -> None:
    # the demo's corpus of installed packages takes long to embed; a tiny one with the real model behaves the same
    tiny = build(GOOD, embedder="onnx:all-MiniLM-L6-v2", name="installed")
    monkeypatch.setattr(irflow.cli.quickstart, "installed_corpus", lambda **_: tiny)
    result = CliRunner().invoke(main, ["demo", ESCAPE, "--embedder", "onnx:all-MiniLM-L6-v2"])
    _plain(result.output)
    assert result.exit_code == 2 and "byte 0xff" in result.stderr, result.output
    with pytest.raises(InputError, match=f"query 0: .*{SURROGATE}"):
        irflow.cli.quickstart.run_demo([HIGH], embedder="onnx:all-MiniLM-L6-v2", trace_path=None)


# -- the command line ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli") / "c"
    build(GOOD, embedder="hash:64", path=root)
    return root


@pytest.mark.parametrize("args, option", [
    (["run", "hybrid", "--corpus", "{c}", "-q", ESCAPE], "'--query' / '-q'"),
    (["run", "hybrid", "--corpus", "{c}", "-q", "zip", "--set", "mode=l\udce9xical"], "'--set'"),
    (["run", "hybrid", "--corpus", "{c}", "-q", "zip", "--set", "surfaces=[\"n\udce9\"]"], "'--set'"),
    (["eval", "lexical", "--dataset", "{d}", "--metrics", "p@1\udcff"], "'--metrics'"),
    (["eval", "lexical", "--dataset", "{d}", "--sweep", "k=1,\udcff"], "'--sweep'"),
    (["demo", ESCAPE], "'\\[QUERIES\\]...'"),
    (["demo", "zip", "--filter", '{"owner": "m\udce9"}'], "'--filter'"),
    (["index", "{r}", "--out", "{o}", "--name", "c\udce9"], "'--name'"),
    (["trace", "show", "{t}", "--stage", "fuse\udcff"], "'--stage'"),
])
def test_an_argument_that_is_not_utf8_is_a_usage_error_naming_the_option(stored: Path, tmp_path: Path,
                                                                       args: list[str], option: str) -> None:
    records = _lines(tmp_path / "r.jsonl", [json.dumps(g) for g in GOOD])
    trace = tmp_path / "t.jsonl"
    load_recipe("hybrid").run(open_corpus(stored), ["zip"], trace=True).trace.dump(trace)
    dataset = _beir(tmp_path / "beir", DOCS, QUERIES)
    places = {"{c}": stored, "{d}": dataset, "{r}": records, "{o}": tmp_path / "o", "{t}": trace}
    filled = [str(places.get(a, a)) for a in args]
    result = CliRunner().invoke(main, filled)
    _plain(result.output)
    assert result.exit_code == 2, result.output
    message = result.stderr.strip().rpartition("\n\n")[2]
    assert __import__("re").match(rf"Error: Invalid value for {option}: b'.*' is not UTF-8 \(byte 0x[0-9a-f]{{2}} at "
                                  r"offset \d+\); irflow reads command-line text as UTF-8", message), message
    assert not (tmp_path / "o").exists()


def test_a_json_escape_in_a_set_value_is_refused_naming_the_set(stored: Path) -> None:
    result = CliRunner().invoke(main, ["run", "search", "--corpus", str(stored), "-q", "zip",
                                       "--set", 'filter={"owner": "\\udcff"}'])
    _plain(result.output)
    assert result.exit_code == 1 and "\n\n" not in result.stderr.strip()
    assert result.stderr.startswith("Error: bad run argument for recipe 'search': --set filter=")
    assert "filter['owner']: '\\udcff' holds a lone surrogate" in result.stderr


def test_every_text_parameter_of_the_cli_is_checked_and_paths_keep_their_bytes() -> None:
    import click

    from irflow.cli.text import PathText, Utf8Text

    def commands(group: click.Group) -> Any:
        for command in group.commands.values():
            yield from commands(command) if isinstance(command, click.Group) else [command]

    paths = set()
    for command in commands(main):
        for param in command.params:
            assert type(param.type) is not click.types.StringParamType, (command.name, param.name)
            if isinstance(param.type, PathText):
                paths.add(param.name)
            elif param.name in ("queries", "settings", "sweeps", "analyzer", "filter_json", "stage", "record"):
                assert isinstance(param.type, Utf8Text), (command.name, param.name)
    # a recipe file, a corpus, a collection, a plugin file, an embedder spec (onnx:<path>): paths keep their bytes
    assert paths == {"recipe", "recipes", "corpus_path", "dataset", "baseline", "plugins", "embedder"}


@pytest.mark.skipif(os.name != "posix", reason="file names that are not UTF-8 are a POSIX thing")
def test_a_path_that_is_not_utf8_still_names_its_file(tmp_path: Path) -> None:
    root = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"caf\xe9")))  # the name Python gives those bytes
    build(GOOD, embedder="hash:64", path=root)
    result = CliRunner().invoke(main, ["run", "lexical", "--corpus", str(root), "-q", "zip", "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)  # valid UTF-8 JSON: the name's byte is written as its \\udce9 escape
    assert printed["corpus"] == root.name == "caf\udce9" and printed["queries"][0]["hits"][0]["artifact_id"] == "a"
    table = CliRunner().invoke(main, ["run", "lexical", "--corpus", str(root), "-q", "zip"])
    assert table.exit_code == 0 and b"corpus caf\xe9;" in table.stdout_bytes, table.output  # the bytes as given


def test_standard_output_prints_a_paths_bytes_as_given_for_one_command_only(stored: Path) -> None:
    from irflow.cli.text import AS_GIVEN

    assert "caf\udce9 \ud800 \u00e9".encode("utf-8", AS_GIVEN) == b"caf\xe9 \\ud800 \xc3\xa9"
    runner = CliRunner()
    with runner.isolation():
        assert sys.stdout.errors == "strict"
        with pytest.raises(SystemExit) as done:
            main(["run", "lexical", "--corpus", str(stored), "-q", "zip"], prog_name="irflow")
        assert done.value.code == 0 and sys.stdout.errors == "strict"  # restored after the command


@pytest.mark.skipif(os.name != "posix", reason="argv bytes that are not UTF-8 are a POSIX thing")
def test_the_real_entry_point_refuses_argv_bytes_that_are_not_utf8(stored: Path, tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "irflow"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "irflow"]
    for args in (["run", "hybrid", "--corpus", str(stored), "-q", b"zip \xff"], ["demo", b"caf\xe9"]):
        done = subprocess.run(command + args, capture_output=True, timeout=120, cwd=tmp_path,
                              env={**os.environ, "IRFLOW_HOME": str(tmp_path / "home")})
        err = done.stderr.decode("utf-8")
        assert done.returncode == 2 and b"Traceback" not in done.stderr + done.stdout, err
        assert "is not UTF-8 (byte 0x" in err and "Invalid value for" in err, err
