"""An empty or whitespace-only query returns no hits in every mode (README, search() docstring)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import irflow
from irflow.cli import main

RECORDS = [irflow.Record("unbox", "name", "unbox"), irflow.Record("unbox", "description", "Unpack zip archives."),
           irflow.Record("tqdm", "description", "A progress bar for loops."),
           irflow.Record("bm", "description", "Okapi BM25 ranking.")]


@pytest.fixture(scope="module")
def corpus() -> irflow.Corpus:
    return irflow.build(RECORDS, embedder="hash", name="tools")


@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
@pytest.mark.parametrize("query", ["", " ", "\t\n  "])
def test_an_empty_query_finds_nothing(corpus, mode, query):
    # was: every record, tied at score 0, in dense and hybrid mode
    assert irflow.search(corpus, query, mode=mode) == []
    assert irflow.search(corpus, query, mode=mode, fusion="blend", per_artifact=False) == []


def test_an_empty_query_in_a_batch_leaves_the_others_untouched(corpus):
    result = irflow.load_recipe("search").run(corpus, ["zip archive", "", "progress"], mode="hybrid", trace=True)
    assert result.hits[1] == [] and result.hits[0] and result.hits[2]
    assert result.hits[0] == irflow.search(corpus, "zip archive", mode="hybrid")
    assert result.hits[2] == irflow.search(corpus, "progress", mode="hybrid")
    assert result.trace.stage("dense").ranking(1) == []


def test_a_stopword_query_is_not_empty(corpus):
    # "the" is a query: BM25 (english analyzer drops it) finds nothing, dense still ranks by its embedding
    assert irflow.search(corpus, "the", mode="lexical") == []
    assert irflow.search(corpus, "the", mode="dense") != []


def test_a_formulated_query_may_fill_an_empty_one(corpus):
    hits = irflow.search(corpus, "", mode="dense", formulate=lambda q: q or "progress bar")
    assert hits and hits[0].artifact_id == "tqdm"


def test_cli_run_with_an_empty_query(tmp_path):
    irflow.build(RECORDS, embedder="hash", path=tmp_path / "c")
    result = CliRunner().invoke(main, ["run", "search", "--corpus", str(tmp_path / "c"), "-q", "", "--set",
                                       "mode=hybrid"])
    assert result.exit_code == 0 and "query 0: '' — 0 hits" in result.output
