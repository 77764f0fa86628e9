"""Evaluation: metrics on a hand-checked collection, the corpus cache, sweep reuse, comparisons, the CLI."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

import irflow.evaluation.cache
from irflow.cli import main
from irflow.evaluation.datasets import load_beir
from irflow.evaluation.trec import read_trec_run
from irflow.evaluation.evaluate import Evaluation, evaluate, evaluate_runs, holdout_split, ranking_depth
from irflow.evaluation.metrics import EvaluationError, parse_metrics
from irflow.evaluation.significance import compare_many
from irflow.evaluation.sweep import expand_sweep, setting_label

# Six documents, three judged queries.  With the plain analyzer the lexical recipe's
# rankings follow from BM25 by inspection (only documents holding a query word are retrieved):
#   q1 "apple"         -> d1 (tf 3 in 4 words) before d2 (tf 1 in 7 words)
#   q2 "banana cherry" -> d3 (both words), then d4 (cherry, 2 words) before d1 (banana, 4 words)
#   q3 "zebra"         -> nothing
DOCS = [
    ("d1", "", "apple apple apple banana"),
    ("d2", "", "apple kiwi kiwi kiwi kiwi kiwi kiwi"),
    ("d3", "", "banana cherry"),
    ("d4", "", "cherry date"),
    ("d5", "", "grape melon"),
    ("d6", "", "lemon lime"),
]
QUERIES = [("q1", "apple"), ("q2", "banana cherry"), ("q3", "zebra"), ("q4", "not judged")]
QRELS = [("q1", "d2", 2), ("q1", "d5", 1), ("q2", "d3", 1), ("q2", "d1", 1), ("q3", "d6", 1)]


def write_collection(root: Path, docs=DOCS, queries=QUERIES, qrels=QRELS) -> Path:
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    with open(root / "corpus.jsonl", "w", encoding="utf-8") as out:
        for doc_id, title, text in docs:
            out.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with open(root / "queries.jsonl", "w", encoding="utf-8") as out:
        for qid, text in queries:
            out.write(json.dumps({"_id": qid, "text": text}) + "\n")
    with open(root / "qrels" / "test.tsv", "w", encoding="utf-8") as out:
        out.write("query-id\tcorpus-id\tscore\n")
        for qid, doc_id, grade in qrels:
            out.write(f"{qid}\t{doc_id}\t{grade}\n")
    return root


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private $IRFLOW_HOME, so the corpus cache of one test never serves another."""
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture()
def tiny(tmp_path: Path, home: Path) -> Path:
    return write_collection(tmp_path / "tiny")


def data_dir() -> Path:
    """../shared/data beside the repository, or $IRFLOW_DATA."""
    return Path(os.environ.get("IRFLOW_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")


# ------------------------------------------------------------------- metrics


def test_metric_values_match_hand_computation(tiny: Path) -> None:
    ev = evaluate("lexical", tiny, embedder=None, analyzer="plain")
    system = ev["lexical"]
    assert list(system.run["q1"]) == ["d1", "d2"]
    assert list(system.run["q2"]) == ["d3", "d4", "d1"]
    assert system.run["q3"] == {}
    assert "q4" not in system.run  # not judged: not run
    ln3 = math.log2(3)
    ndcg = [(2 / ln3) / (2 + 1 / ln3), 1.5 / (1 + 1 / ln3), 0.0]
    expected = {
        "ndcg@10": sum(ndcg) / 3,
        "recall@100": (0.5 + 1 + 0) / 3,
        "mrr@10": (0.5 + 1 + 0) / 3,
        "map": (0.25 + (1 + 2 / 3) / 2 + 0) / 3,
        "p@10": (0.1 + 0.2 + 0) / 3,
    }
    assert ev.metrics == tuple(expected)
    for metric, value in expected.items():
        assert system.means[metric] == pytest.approx(value, abs=1e-12), metric
    assert system.per_query["ndcg@10"] == pytest.approx(dict(zip(["q1", "q2", "q3"], ndcg)))
    # exactly: the gains over log2 discounts of these short rankings sum without rounding error
    assert system.per_query["ndcg@10"] == dict(zip(["q1", "q2", "q3"], ndcg))
    assert ev.to_dict() == evaluate("lexical", tiny, embedder=None, analyzer="plain", keep_runs=False).to_dict()
    assert ev.to_dict() == {"lexical": system.means}
    # every ranking is 1000 deep by default, whatever the metrics
    assert ev.depth == 1000 and system.params["k"] == 1000


def test_depth_and_query_subset(tiny: Path) -> None:
    # fixed, never derived from the metrics (a deeper cutoff is refused)
    assert ranking_depth(parse_metrics("ndcg@10,recall@100")) == 1000
    assert ranking_depth(parse_metrics("map"), 50) == 50
    with pytest.raises(EvaluationError, match="recall@100 need a ranking deeper than the depth 50"):
        ranking_depth(parse_metrics("ndcg@10,recall@100"), 50)
    ev = evaluate("lexical", tiny, embedder=None, analyzer="plain", metrics="ndcg@3,p@1", queries=["q2"])
    assert ev.depth == 1000 and ev["lexical"].params == {"k": 1000, "fetch_k": 1000}
    ev = evaluate("lexical", tiny, embedder=None, analyzer="plain", metrics="ndcg@3,p@1", queries=["q2"], depth=3)
    assert ev.depth == 3 and ev["lexical"].params == {"k": 3, "fetch_k": 3}
    assert ev.n_queries == 1 and ev["lexical"].means == {"ndcg@3": pytest.approx(1.5 / (1 + 1 / math.log2(3))),
                                                         "p@1": 1.0}
    with pytest.raises(EvaluationError, match="not judged"):
        evaluate("lexical", tiny, embedder=None, queries=["q4"])


def test_holdout_split_is_fixed_and_disjoint() -> None:
    ids = [f"q{i}" for i in range(11)]
    tune, test = holdout_split(ids, seed=3)
    assert len(tune) == 6 and sorted(tune + test, key=ids.index) == ids and not set(tune) & set(test)
    assert holdout_split(list(reversed(ids)), seed=3)[0] == list(reversed(tune))  # file order does not matter
    assert holdout_split(ids, seed=4) != (tune, test)
    with pytest.raises(EvaluationError, match="fraction"):
        holdout_split(ids, fraction=1.0)
    for seed in (-1, True, 1.5):  # numpy refuses -1 with a bare ValueError, and reads True as 1
        with pytest.raises(EvaluationError, match="seed must be a non-negative integer"):
            holdout_split(ids, seed=seed)  # type: ignore[arg-type]


def test_runs_agree_with_pytrec_eval(tiny: Path) -> None:
    pytrec_eval = pytest.importorskip("pytrec_eval", reason="pytrec-eval-terrier (dev extra) is needed")
    ev = evaluate("hybrid", tiny, embedder="hash", metrics="ndcg@10,map,recall@100")
    system = ev["hybrid"]
    reference = pytrec_eval.RelevanceEvaluator(ev.qrels, {"ndcg_cut.10", "map", "recall.100"}).evaluate(dict(system.run))
    for qid, values in reference.items():
        assert system.per_query["ndcg@10"][qid] == pytest.approx(values["ndcg_cut_10"], abs=1e-6)
        assert system.per_query["map"][qid] == pytest.approx(values["map"], abs=1e-6)
        assert system.per_query["recall@100"][qid] == pytest.approx(values["recall_100"], abs=1e-6)


def test_separate_titles_collapse_to_documents(tmp_path: Path, home: Path) -> None:
    docs = [("d1", "apple pie", "apple apple"), ("d2", "", "apple kiwi"), ("d3", "pear", "kiwi")]
    root = write_collection(tmp_path / "titled", docs, [("q1", "apple")], [("q1", "d1", 1)])
    ev = evaluate("lexical", root, embedder=None, title_mode="separate", metrics="ndcg@10")
    assert sorted(ev["lexical"].run["q1"]) == ["d1", "d2"]  # one entry per document, not per surface
    assert ev["lexical"].means["ndcg@10"] == 1.0


# --------------------------------------------------------------------- cache


def test_corpus_cache_reused_and_rebuilt_when_the_corpus_changes(tiny: Path, home: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    builds = []
    real_build = irflow.evaluation.cache.build

    def counting_build(*args, **kwargs):
        builds.append(kwargs.get("path"))
        return real_build(*args, **kwargs)

    monkeypatch.setattr(irflow.evaluation.cache, "build", counting_build)
    first = evaluate("lexical", tiny, embedder="hash", metrics="ndcg@10")
    assert first.corpus.status == "built" and len(builds) == 1
    assert first.corpus.path.parent == home / "cache" / "eval"
    second = evaluate(["lexical", "dense"], tiny, embedder="hash:256", metrics="ndcg@10")  # "hash" is "hash:256"
    assert second.corpus.status == "cached" and len(builds) == 1
    assert second.corpus.path == first.corpus.path
    assert second["lexical"].run == first["lexical"].run

    # the queries and qrels are not part of the key; the analyzer and the corpus file are
    with open(tiny / "queries.jsonl", "a", encoding="utf-8") as out:
        out.write(json.dumps({"_id": "q9", "text": "lemon"}) + "\n")
    assert evaluate("lexical", tiny, embedder="hash", metrics="ndcg@10").corpus.status == "cached"
    assert evaluate("lexical", tiny, embedder="hash", analyzer="plain", metrics="ndcg@10").corpus.status == "built"
    with open(tiny / "corpus.jsonl", "a", encoding="utf-8") as out:
        out.write(json.dumps({"_id": "d7", "title": "", "text": "apple"}) + "\n")
    changed = evaluate("lexical", tiny, embedder="hash", metrics="ndcg@10")
    assert changed.corpus.status == "built" and changed.corpus.path != first.corpus.path
    assert "d7" in changed["lexical"].run["q1"]
    assert len(builds) == 3


def test_callable_embedder_is_not_cached(tiny: Path) -> None:
    import numpy as np

    def embed(texts):
        return np.ones((len(texts), 4), dtype=np.float32)

    with pytest.warns(UserWarning, match="not cached"):
        ev = evaluate("dense", tiny, embedder=embed, metrics="ndcg@10")
    assert ev.corpus.status == "memory"
    assert evaluate("dense", tiny, embedder="hash", use_cache=False, metrics="ndcg@10").corpus.status == "memory"


def test_broken_cache_entry_is_rebuilt(tiny: Path) -> None:
    first = evaluate("lexical", tiny, metrics="ndcg@10")
    for path in first.corpus.path.rglob("manifest.json"):
        path.write_text("{broken", encoding="utf-8")
    again = evaluate("lexical", tiny, metrics="ndcg@10")
    assert again.corpus.status == "built" and again.to_dict() == first.to_dict()


# --------------------------------------------------------------------- sweeps


def test_sweep_settings_and_labels() -> None:
    settings = expand_sweep({"rrf_k": [10, 30], "fusion": ["rrf", "blend"]})
    assert settings == [{"rrf_k": 10, "fusion": "rrf"}, {"rrf_k": 10, "fusion": "blend"},
                        {"rrf_k": 30, "fusion": "rrf"}, {"rrf_k": 30, "fusion": "blend"}]
    assert setting_label("hybrid", settings[1]) == "hybrid[rrf_k=10,fusion=blend]"
    with pytest.raises(EvaluationError, match="list of values"):
        expand_sweep({"fusion": "rrf"})


def test_sweep_runs_first_stages_once_per_batch(tiny: Path) -> None:
    # a blend sweep: both parameters change the fusion (rrf_k with alpha would be merged, see test_eval_output)
    sweep = {"bm25_sat_k": [4, 8, 16], "alpha": [0.3, 0.5, 0.7]}
    # 3 judged queries in batches of 2: two batches
    ev = evaluate("hybrid", tiny, embedder="hash", sweep=sweep, batch_size=2, metrics="ndcg@10,recall@100",
                  params={"fusion": "blend"})
    assert len(ev) == 9 and ev.labels[0] == "hybrid[bm25_sat_k=4,alpha=0.3]" and ev.merged == ()
    executions = ev.stage_cache.executions
    assert executions["dense"] == 2 and executions["lexical"] == 2  # once per batch, for all 9 settings
    assert executions["fuse"] == 18 and executions["collapse"] == 18  # once per setting and batch
    # reuse changes nothing: one setting evaluated alone gives the same run
    alone = evaluate("hybrid", tiny, embedder="hash", params={"fusion": "blend", "bm25_sat_k": 8, "alpha": 0.7},
                     metrics="ndcg@10,recall@100")
    assert alone["hybrid"].run == ev["hybrid[bm25_sat_k=8,alpha=0.7]"].run
    assert alone["hybrid"].means == ev["hybrid[bm25_sat_k=8,alpha=0.7]"].means


def test_sweep_applies_to_the_recipes_that_have_the_parameter(tiny: Path) -> None:
    ev = evaluate(["lexical", "hybrid"], tiny, embedder="hash", sweep={"fusion": ["rrf", "blend"]}, metrics="ndcg@10")
    assert ev.labels == ["lexical", "hybrid[fusion=rrf]", "hybrid[fusion=blend]"]
    assert ev.stage_cache.executions["lexical"] == 1  # shared by the lexical recipe and both hybrid settings
    with pytest.raises(EvaluationError, match="rrf_kk"):
        evaluate("lexical", tiny, params={"rrf_kk": 3})
    with pytest.raises(EvaluationError, match="not a parameter of any recipe"):
        evaluate("lexical", tiny, sweep={"alpha": [0.5]})


# ----------------------------------------------------------------- comparing

RUN_QRELS = {f"q{i}": {"good": 1} for i in range(8)}


def _run(hits: list[bool]) -> dict[str, dict[str, float]]:
    # "good" first where hits[i], else second: reciprocal rank 1 or 1/2
    return {f"q{i}": ({"good": 2.0, "bad": 1.0} if hit else {"bad": 2.0, "good": 1.0}) for i, hit in enumerate(hits)}


def test_table_marks_the_best_and_compare_runs_paired_tests() -> None:
    runs = {
        "base": _run([True, False, False, False, True, False, False, False]),
        "better": _run([True] * 8),
        "same": _run([True, False, False, False, True, False, False, False]),
    }
    ev = evaluate_runs(runs, RUN_QRELS, metrics="mrr@10,p@1,recall@2", baseline="base")
    assert isinstance(ev, Evaluation) and ev.best("mrr@10") == ["better"]
    assert ev.best("recall@2") == ["base", "better", "same"]  # a tie marks every system
    lines = ev.table().splitlines()
    assert lines[0].split() == ["system", "mrr@10", "p@1", "recall@2", "notes"]  # "same" is base's run again
    assert lines[3].split() == ["better", "1.0000*", "1.0000*", "1.0000*"]
    assert lines[2].split()[:3] == ["base", "0.6250", "0.2500"]
    assert lines[4].split()[-2:] == ["=", "base"] and ev.identical() == {"same": "base"}

    report = ev.compare()
    assert report.baseline == "base" and list(report.results) == ["better", "same"]
    better = report.results["better"]["mrr@10"]
    assert (better.wins, better.losses, better.ties) == (6, 0, 2)
    assert better.mean_diff == pytest.approx(0.375)
    same = report.results["same"]["mrr@10"]
    assert (same.wins, same.losses, same.ties, same.t_p) == (0, 0, 8, 1.0)
    # exactly what irflow.evaluation.significance computes, Holm across the two systems
    reference = compare_many(ev["base"].per_query["mrr@10"],
                             {"better": ev["better"].per_query["mrr@10"], "same": ev["same"].per_query["mrr@10"]})
    assert better == reference["better"] and better.correction == "holm"
    assert better.t_p_adjusted >= better.t_p
    table = report.table()
    assert "holm" in table and "6/0/2" in table and "better" in table
    assert report.to_dict()["better"]["mrr@10"]["wins"] == 6
    with pytest.raises(KeyError, match="labels"):
        ev.compare("nobody")


def test_compare_with_a_baseline_recipe_added(tiny: Path) -> None:
    ev = evaluate("hybrid", tiny, embedder="hash", baseline="lexical", metrics="ndcg@10,map")
    assert ev.labels == ["lexical", "hybrid"] and ev.baseline == "lexical"
    report = ev.compare()
    c = report.results["hybrid"]["ndcg@10"]
    assert c.n == 3 and c.wins + c.losses + c.ties == 3
    # a swept recipe as its own baseline: its defaults, evaluated once more
    swept = evaluate("hybrid", tiny, embedder="hash", sweep={"alpha": [0.3, 0.5]}, baseline="hybrid", metrics="ndcg@10")
    assert swept.labels == ["hybrid", "hybrid[alpha=0.3]", "hybrid[alpha=0.5]"]
    assert swept["hybrid"].run == swept["hybrid[alpha=0.5]"].run  # 0.5 is the recipe's default


def test_trec_run_export_round_trip(tiny: Path, tmp_path: Path) -> None:
    ev = evaluate(["lexical", "hybrid"], tiny, embedder="hash", sweep={"rrf_k": [10]}, metrics="ndcg@10,map,recall@100")
    written = ev.write_runs(tmp_path / "runs")
    assert sorted(p.name for p in written.values()) == ["hybrid_rrf_k=10_.run", "lexical.run"]
    read = {label: read_trec_run(path) for label, path in written.items()}
    for label, run in read.items():
        # empty rankings leave no line in a run file
        assert run == {q: docs for q, docs in ev[label].run.items() if docs}
    again = evaluate_runs(read, ev.qrels, metrics=ev.metrics)
    assert again.to_dict() == ev.to_dict()
    first_line = written["hybrid[rrf_k=10]"].read_text().splitlines()[0].split()
    assert first_line[1] == "Q0" and first_line[3] == "1" and first_line[5] == "hybrid_rrf_k=10_"


# ------------------------------------------------------------------------ CLI


def invoke(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_cli_eval_json_shape(tiny: Path, tmp_path: Path) -> None:
    result = invoke("eval", "lexical", "hybrid", "--dataset", tiny, "--metrics", "ndcg@10,recall@100",
                    "--sweep", "rrf_k=10,60", "--set", "fusion=rrf", "--json", "--runs", tmp_path / "runs",
                    "--embedder", "hash")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # exactly one JSON object on stdout
    assert data["depth"] == 1000 and data["dataset"] == "tiny" and data["queries"] == 3
    systems = data["systems"]
    assert list(systems) == ["lexical", "hybrid[rrf_k=10]", "hybrid[rrf_k=60]"]
    assert all(list(v) == ["ndcg@10", "recall@100"] and all(isinstance(x, float) for x in v.values())
               for v in systems.values())
    assert data["params"]["hybrid[rrf_k=10]"]["rrf_k"] == 10 and data["params"]["lexical"]["k"] == 1000
    assert len(list((tmp_path / "runs").glob("*.run"))) == 3
    manifest = json.loads((tmp_path / "runs" / "runs.json").read_text())
    assert manifest["depth"] == 1000 and manifest["systems"] == systems
    assert manifest["files"]["hybrid[rrf_k=10]"] == "hybrid_rrf_k=10_.run"


def test_cli_eval_table_with_baseline(tiny: Path) -> None:
    result = invoke("eval", "hybrid", "--dataset", tiny, "--baseline", "lexical", "--set", "fusion=blend",
                    "--metrics", "ndcg@10,map", "--analyzer", "plain", "--no-progress", "--embedder", "hash")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "tiny (test split, 3 queries" in out and "*" in out
    assert "vs baseline lexical" in out and "W/L/T" in out


def test_cli_eval_holdout_halves(tmp_path: Path, home: Path) -> None:
    queries = [(f"q{i}", "apple banana") for i in range(6)]
    root = write_collection(tmp_path / "halves", queries=queries, qrels=[(q, "d1", 1) for q, _ in queries])
    for half in ("tune", "test"):
        result = invoke("eval", "lexical", "--dataset", root, "--holdout", half, "--metrics", "p@1")
        assert result.exit_code == 0, result.output
        assert f"{half} half (seed 0), 3 queries" in result.stdout


@pytest.mark.parametrize("args, code, message", [
    (["--dataset", "NOWHERE"], 1, "is not a directory"),
    (["--metrics", "bleu@3"], 1, "unknown metric"),
    (["--set", "rrf_kk=3"], 1, "not a parameter of any recipe"),
    (["--sweep", "rrf_k"], 2, "NAME=V1,V2"),
    (["--split", "train"], 1, "splits available"),
])
def test_cli_eval_errors(tiny: Path, args: list[str], code: int, message: str) -> None:
    full = ["eval", "lexical"] + (["--dataset", tiny] if "--dataset" not in args else []) + args
    result = invoke(*full)
    assert result.exit_code == code, result.output
    assert message in result.output and "Traceback" not in result.output


# ---------------------------------------------------------------- real data


@pytest.mark.data
def test_cranfield_lexical_in_a_sane_range(home: Path) -> None:
    root = data_dir() / "cranfield"
    if not (root / "qrels" / "test.tsv").is_file():
        pytest.skip(f"{root} is absent (set IRFLOW_DATA to the shared data folder)")
    collection = load_beir(root)
    ev = evaluate("lexical", collection, embedder=None, metrics="ndcg@10,recall@100", use_cache=False)
    assert ev.n_queries == 225
    # published BM25 figures on Cranfield lie around 0.3-0.45 nDCG@10 depending on stemming
    assert 0.25 < ev["lexical"].means["ndcg@10"] < 0.5
    assert 0.5 < ev["lexical"].means["recall@100"] <= 1.0
