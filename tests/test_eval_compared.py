"""An evaluation says what it compared: identical runs, what each system ranks by, how deep it really ranked.

``search`` in its default mode is ``dense``, and ``hybrid-rerank`` without a
reranker is ``hybrid``: two labels, one run.  The table marks them ("= dense")
instead of presenting a tie; it names each system's score scale (a hybrid's
fusion) when that tells systems apart; and a system that ranked fewer
documents than the depth for some queries (BM25 ranks only the documents
sharing a term with the query) is reported with its real depth.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from irflow.cli import main
from irflow.evaluation.evaluate import evaluate, evaluate_runs
from test_evaluate import write_collection

# with the plain analyzer, the documents sharing a term with each query (test_evaluate's collection):
#   q1 "apple" -> d1, d2;  q2 "banana cherry" -> d1, d3, d4;  q3 "zebra" -> none
LEXICAL_MATCHES = {"q1": 2, "q2": 3, "q3": 0}


@pytest.fixture()
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    return write_collection(tmp_path / "tiny")


def test_systems_with_the_same_run_are_marked_not_presented_as_a_tie(tiny):
    ev = evaluate(["dense", "search", "lexical", "hybrid", "hybrid-rerank"], tiny, embedder="hash", analyzer="plain",
                  metrics="ndcg@10", keep_runs=True)
    assert ev.identical() == {"search": "dense", "hybrid-rerank": "hybrid"}
    # the digests agree with the runs themselves, compared document by document
    assert ev["search"].run == ev["dense"].run and ev["hybrid-rerank"].run == ev["hybrid"].run
    assert ev["lexical"].run != ev["hybrid"].run
    rows = {line.split()[0]: line for line in ev.table().splitlines()[2:7]}
    assert rows["search"].rstrip().endswith("= dense") and rows["hybrid-rerank"].rstrip().endswith("= hybrid")
    assert "=" not in rows["dense"] and "=" not in rows["hybrid"]
    assert "= X: the same run as system X" in ev.table()
    assert ev.summary()["identical"] == {"search": "dense", "hybrid-rerank": "hybrid"}


def test_the_marks_need_no_kept_runs_and_a_changed_setting_is_not_identical(tiny):
    ev = evaluate(["hybrid", "hybrid-rerank"], tiny, embedder="hash", metrics="ndcg@10", keep_runs=False,
                  sweep={"alpha": [0.3, 0.5]})
    assert ev["hybrid[alpha=0.3]"].run is None  # only a digest per batch was kept
    assert ev.identical() == {"hybrid-rerank[alpha=0.3]": "hybrid[alpha=0.3]",
                              "hybrid-rerank[alpha=0.5]": "hybrid[alpha=0.5]"}


def test_a_system_that_ranks_fewer_documents_than_the_depth_is_reported_with_its_real_depth(tiny):
    ev = evaluate(["lexical", "dense"], tiny, embedder="hash", analyzer="plain", metrics="p@1", depth=5)
    lengths = ev["lexical"].profile.lengths.tolist()
    assert lengths == [LEXICAL_MATCHES[q] for q in ev.qrels]  # documents sharing a query term, per query
    assert ev.real_depth() == {"lexical": {"min": 0, "max": 3, "below_depth": 3, "most_below_depth": 3},
                               "dense": {"min": 5, "max": 5, "below_depth": 0, "most_below_depth": None}}
    notes = {line.split()[0]: line for line in ev.table().splitlines()[2:4]}
    assert notes["lexical"].rstrip().endswith("depth 5 (≤ 3 for all 3 queries)")
    assert "depth" not in notes["dense"]
    shallower = evaluate("lexical", tiny, embedder=None, analyzer="plain", metrics="p@1", depth=2)
    assert shallower.real_depth()["lexical"]["below_depth"] == 1  # only q3, which matches nothing
    assert shallower.table().splitlines()[2].rstrip().endswith("depth 2 (≤ 0 for 1 query)")
    assert ev.summary()["real_depth"]["lexical"]["below_depth"] == 3


def test_the_table_names_what_each_system_ranks_by(tiny):
    ev = evaluate(["dense", "lexical", "hybrid", "search"], tiny, embedder="hash", metrics="ndcg@10",
                  sweep={"fusion": ["rrf", "blend"], "mode": ["hybrid"]})
    assert ev.scales() == {"dense": "cosine", "lexical": "bm25", "hybrid[fusion=rrf]": "rrf",
                           "hybrid[fusion=blend]": "blend", "search[fusion=rrf,mode=hybrid]": "rrf",
                           "search[fusion=blend,mode=hybrid]": "blend"}
    lines = ev.table().splitlines()
    assert lines[0].split()[-2:] == ["scores", "notes"]
    at = lines[0].index("scores")
    rows = {line.split()[0]: line[at:].split("  ")[0] for line in lines[2:8]}
    assert rows == {"dense": "cosine", "lexical": "bm25", "hybrid[fusion=rrf]": "RRF fusion",
                    "hybrid[fusion=blend]": "blend fusion", "search[fusion=rrf,mode=hybrid]": "RRF fusion",
                    "search[fusion=blend,mode=hybrid]": "blend fusion"}
    # RRF has no constant beyond rrf_k (60 in both): search's hybrid mode is the hybrid recipe's RRF run
    assert ev.identical() == {"search[fusion=rrf,mode=hybrid]": "hybrid[fusion=rrf]"}
    # one unfused scale for every system says nothing: no column
    assert "scores" not in evaluate(["lexical"], tiny, metrics="ndcg@10").table()


def test_the_json_output_says_it_all(tiny):
    done = CliRunner().invoke(main, ["eval", "dense", "search", "lexical", "--dataset", str(tiny), "--embedder",
                                     "hash", "--metrics", "p@1", "--depth", "5", "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["identical"] == {"search": "dense"}
    assert data["scores"] == {"dense": "cosine", "search": "cosine", "lexical": "bm25"}
    assert data["real_depth"]["lexical"]["below_depth"] == 3 and data["real_depth"]["dense"]["below_depth"] == 0


def test_runs_read_from_files_are_compared_too():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    one = {"q1": {"a": 2.0, "b": 1.0}, "q2": {"b": 1.0}}
    ev = evaluate_runs({"one": one, "copy": {q: dict(reversed(list(d.items()))) for q, d in one.items()},
                        "other": {"q1": {"a": 2.0}}}, qrels, metrics="p@1")
    assert ev.identical() == {"copy": "one"}
    assert ev.real_depth()["other"] == {"min": 0, "max": 1, "below_depth": 2, "most_below_depth": 1}
