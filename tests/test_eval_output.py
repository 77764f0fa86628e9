"""What `irflow eval` prints must not mislead: the best-per-column legend, and sweep settings that cannot differ."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import irflow
from irflow.cli import main
from irflow.evaluation.evaluate import evaluate, evaluate_runs
from irflow.evaluation.sweep import run_signature

QRELS = {f"q{i}": {"good": 1} for i in range(4)}


def _run(hits: list[bool]) -> dict[str, dict[str, float]]:
    return {f"q{i}": ({"good": 2.0, "bad": 1.0} if hit else {"bad": 2.0, "good": 1.0}) for i, hit in enumerate(hits)}


def test_a_lone_system_is_not_marked_and_has_no_legend():
    table = evaluate_runs({"only": _run([True, False, True, True])}, QRELS, metrics="mrr@10,p@1").table()
    assert "*" not in table and "highest mean" not in table


def test_the_best_mark_has_a_legend_saying_it_is_not_significance():
    table = evaluate_runs({"a": _run([True, False, True, True]), "b": _run([True] * 4)}, QRELS,
                          metrics="mrr@10").table()
    rows = table.splitlines()
    assert rows[3].split() == ["b", "1.0000*"] and rows[2].split() == ["a", "0.8750"]
    assert rows[4].startswith("* the highest mean in its column") and "not a significance test" in rows[4]


def _collection(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    docs = [("d1", "zip archives", "unpack zip and tar archives"), ("d2", "ranking", "okapi bm25 ranking"),
            ("d3", "progress", "a progress bar for loops"), ("d4", "graphs", "graph algorithms and networks")]
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n"
                                               for i, t, x in docs), encoding="utf-8")
    queries = [("q1", "unpack zip"), ("q2", "bm25 ranking"), ("q3", "graph networks")]
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries),
                                        encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td4\t1\n",
                                             encoding="utf-8")
    return root


@pytest.fixture()
def tiny(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    return _collection(tmp_path / "tiny")


def test_sweep_settings_that_cannot_differ_are_evaluated_once_and_said(tiny):
    ev = evaluate("hybrid", tiny, sweep={"fusion": ["rrf", "blend"], "rrf_k": [10, 60]}, metrics="ndcg@10,mrr@10",
                  embedder="hash", use_cache=False)
    assert ev.labels == ["hybrid[fusion=rrf,rrf_k=10]", "hybrid[fusion=rrf,rrf_k=60]", "hybrid[fusion=blend]"]
    assert ev.merged == (("hybrid[fusion=blend]", ("hybrid[fusion=blend,rrf_k=10]", "hybrid[fusion=blend,rrf_k=60]"),
                          ("rrf_k",)),)
    # the merged system is exactly a blend run (rrf_k has no part in it)
    alone = evaluate("hybrid", tiny, params={"fusion": "blend", "rrf_k": 60}, metrics="ndcg@10,mrr@10", embedder="hash",
                     use_cache=False)
    assert ev["hybrid[fusion=blend]"].run == alone["hybrid"].run
    assert "hybrid[fusion=blend] stands for hybrid[fusion=blend,rrf_k=10], hybrid[fusion=blend,rrf_k=60]: rrf_k " \
           "cannot change the result there" in ev.table()


def test_a_mode_with_one_channel_merges_every_fusion_setting(tiny):
    ev = evaluate("search", tiny, sweep={"mode": ["dense", "hybrid"], "fusion": ["rrf", "blend"]}, metrics="ndcg@10",
                  embedder="hash", use_cache=False)
    assert ev.labels == ["search[mode=dense]", "search[mode=hybrid,fusion=rrf]", "search[mode=hybrid,fusion=blend]"]
    assert ev.merged[0][2] == ("fusion",)


def test_run_signature_tells_apart_only_what_can_differ():
    hybrid = irflow.load_recipe("hybrid")
    assert run_signature(hybrid, {"fusion": "blend", "rrf_k": 10}) == run_signature(hybrid, {"fusion": "blend",
                                                                                            "rrf_k": 60})
    assert run_signature(hybrid, {"fusion": "rrf", "rrf_k": 10}) != run_signature(hybrid, {"fusion": "rrf", "rrf_k": 60})
    assert run_signature(hybrid, {"fusion": "rrf", "alpha": 0.1}) == run_signature(hybrid, {"fusion": "rrf", "alpha": 0.9})
    assert run_signature(hybrid, {"k": 5}) != run_signature(hybrid, {"k": 6})
    assert run_signature(hybrid, {"per_artifact": True}) != run_signature(hybrid, {"per_artifact": False})
    assert run_signature(hybrid, {"rrf_k": -1}) is None  # invalid: the run says why, nothing is merged


def test_cli_eval_prints_the_legend_and_the_merge(tiny):
    result = CliRunner().invoke(main, ["eval", "hybrid", "--dataset", str(tiny), "--metrics", "ndcg@10", "--no-cache",
                                       "--sweep", "fusion=rrf,blend", "--sweep", "rrf_k=10,60", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "* the highest mean in its column" in result.stdout
    assert "hybrid[fusion=blend] stands for" in result.stdout
    assert result.stdout.count("hybrid[fusion=blend,rrf_k=") == 2  # only in the note, not as table rows
