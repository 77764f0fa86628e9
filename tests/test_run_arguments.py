"""Run-argument mistakes name the caller's argument, its valid values (each once), the closest and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import irflow
from irflow.cli import main
from irflow.errors import ParameterError, RecipeError


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("args")
    irflow.build([irflow.Record("unbox", "name", "unbox", {"license": "MIT"}),
                  irflow.Record("unbox", "description", "Unpack any archive: zip, tar.", {"license": "MIT"}),
                  irflow.Record("bm", "description", "Okapi BM25 ranking.", {"license": "Apache-2.0"})],
                 embedder="hash", path=root / "corpus")
    return root / "corpus"


def _fails(*args: object) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert not isinstance(result.exception, (KeyError, ValueError, TypeError))
    return result.output


def test_unknown_set_names_the_argument_each_parameter_once_and_the_closest(corpus_dir):
    out = _fails("run", "hybrid", "--corpus", corpus_dir, "-q", "zip", "--set", "kk=1")
    assert "--set kk=1: recipe 'hybrid' has no parameter 'kk'" in out
    assert "did you mean --set k=1?" in out
    assert "invalid recipe" not in out and "hybrid.toml" not in out  # the recipe is not to blame
    listed = out.split("its parameters are ")[1].split(";")[0].split(", ")
    assert listed == ["k", "fusion", "rrf_k", "alpha", "bm25_sat_k", "per_artifact", "filter", "surfaces",
                      "bm25", "fetch_k"]  # fetch_k once, though it is a parameter and a derived one


def test_k_zero_names_k_not_the_derived_parameter(corpus_dir):
    out = _fails("run", "hybrid", "--corpus", corpus_dir, "-q", "zip", "--set", "k=0")
    assert "--set k=0: must be a positive integer" in out and "e.g. --set k=10" in out
    assert "argument k = 0" not in out and "invalid recipe" not in out


def test_set_with_broken_json_says_the_json_did_not_parse(corpus_dir):
    out = _fails("run", "hybrid", "--corpus", corpus_dir, "-q", "zip", "--set", "filter={bad json")
    assert "looks like JSON but does not parse" in out and "must be a table" not in out
    assert "--set 'filter={\"field\": \"value\"}'" in out
    # a plain string that only looks like JSON is still possible, as a JSON string
    out = _fails("run", "hybrid", "--corpus", corpus_dir, "-q", "zip", "--set", 'fusion="{x"')
    assert "--set fusion={x: must be one of 'rrf', 'blend'" in out


def test_python_api_names_the_keyword(corpus_dir):
    corpus = irflow.open_corpus(corpus_dir)
    with pytest.raises(ParameterError) as info:
        irflow.load_recipe("hybrid").run(corpus, "zip", kk=1)
    assert str(info.value).startswith("bad run argument for recipe 'hybrid': kk=1: recipe 'hybrid' has no "
                                      "parameter 'kk'") and str(info.value).endswith("did you mean k=1?")
    with pytest.raises(ParameterError, match=r"^bad run argument for recipe 'search': k=0: must be a positive "
                                             r"integer, got 0 \(int\) \(read by stage collapse, derived fetch_k, "
                                             r"derived subquery_fetch_k, derived deepen_to\); valid: int — .*; "
                                             r"e\.g\. k=10$"):
        irflow.search(corpus, "zip", k=0)
    # still a RecipeError and a ValueError for callers that catch those
    with pytest.raises(RecipeError):
        irflow.search(corpus, "zip", rrf_k=-1, mode="hybrid")
    with pytest.raises(ValueError):
        irflow.search(corpus, "zip", per_artifact="yes")


def test_eval_set_values_are_written_as_given(tmp_path):
    data = tmp_path / "tiny"
    (data / "qrels").mkdir(parents=True)
    (data / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"word{i} zip"}) + "\n"
                                               for i in range(3)), encoding="utf-8")
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "zip"}) + "\n", encoding="utf-8")
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", encoding="utf-8")
    out = _fails("eval", "hybrid", "--dataset", data, "--no-cache", "--set", "rrf_k=-1")
    assert "bad run argument for recipe 'hybrid': rrf_k=-1: must be a finite number >= 0" in out
