"""irflow.evaluation.metrics agrees with trec_eval (through pytrec_eval) and keeps its conventions."""

from __future__ import annotations

import math
import os
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from irflow.evaluation.metrics import EvaluationError, Metric, evaluate_run, parse_metric, parse_metrics, per_query, ranked_doc_ids

pytrec_eval = pytest.importorskip("pytrec_eval", reason="pytrec-eval-terrier (dev extra) is needed for the agreement tests")

CUTOFFS = (1, 3, 5, 10)


def data_dir() -> Path:
    """../shared/data beside the repository, or $IRFLOW_DATA."""
    return Path(os.environ.get("IRFLOW_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")


# --------------------------------------------------------------- reference

def trec_eval_table(run: dict, qrels: dict) -> dict[str, dict[str, float]]:
    """Our metric names -> per-query values, as pytrec_eval computes them."""
    names = {"map", "recip_rank", "ndcg", "num_rel", "num_rel_ret"}
    for k in CUTOFFS:
        names |= {f"ndcg_cut.{k}", f"recall.{k}", f"P.{k}", f"map_cut.{k}"}
    result = pytrec_eval.RelevanceEvaluator(qrels, names).evaluate(run)
    table: dict[str, dict[str, float]] = {"map": {}, "mrr": {}, "ndcg": {}, "recall": {}}
    for qid, values in result.items():
        table["map"][qid] = values["map"]
        table["mrr"][qid] = values["recip_rank"]
        table["ndcg"][qid] = values["ndcg"]
        table["recall"][qid] = values["num_rel_ret"] / values["num_rel"] if values["num_rel"] else 0.0
        for k in CUTOFFS:
            table.setdefault(f"ndcg@{k}", {})[qid] = values[f"ndcg_cut_{k}"]
            table.setdefault(f"recall@{k}", {})[qid] = values[f"recall_{k}"]
            table.setdefault(f"p@{k}", {})[qid] = values[f"P_{k}"]
            table.setdefault(f"map@{k}", {})[qid] = values[f"map_cut_{k}"]
    # trec_eval has no cut recip_rank: MRR@k is recip_rank of the run cut to its top k
    # (cut in trec_eval's own order, ties included)
    for k in CUTOFFS:
        cut = {q: {d: docs[d] for d in ranked_doc_ids(docs)[:k]} for q, docs in run.items()}
        cut_result = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut)
        table[f"mrr@{k}"] = {q: v["recip_rank"] for q, v in cut_result.items()}
    return table


def assert_agrees(run: dict, qrels: dict) -> None:
    expected = trec_eval_table(run, qrels)
    ours = per_query(run, qrels, list(expected))
    for metric, values in expected.items():
        assert set(ours[metric]) == set(values), metric
        for qid, value in values.items():
            assert ours[metric][qid] == pytest.approx(value, abs=1e-6), (metric, qid)


# --------------------------------------------------------------- strategies

# numeric ids make string order differ from numeric order ("9" > "10"), as in trec_eval
DOC_IDS = ["1", "9", "10", "100", "2", "a", "B", "b", "doc-7", "é", "z9", "Z10", "30", "3", "x"]
QUERY_IDS = ["q1", "q2", "q3", "q4"]
scores = st.one_of(
    st.sampled_from([0.0, 0.5, 1.0, 2.0, -1.0]),  # few distinct values: many ties
    # equal only at float32 precision, as trec_eval compares them
    st.sampled_from([1.0 + 1e-9, 1.0 + 2e-7, 2e-58, 1e39, 1e300]),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
)
rankings = st.dictionaries(st.sampled_from(DOC_IDS), scores, max_size=len(DOC_IDS))
# grades 0-4 only: pytrec_eval 0.5.11 sometimes hangs on negative grades (undefined
# behaviour in its C code); negative grades are checked by hand below instead
judgements = st.dictionaries(st.sampled_from(DOC_IDS), st.integers(min_value=0, max_value=4), min_size=1, max_size=10)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=st.dictionaries(st.sampled_from(QUERY_IDS), rankings), qrels=st.dictionaries(st.sampled_from(QUERY_IDS), judgements, min_size=1))
def test_agrees_with_pytrec_eval_on_random_runs(run: dict, qrels: dict) -> None:
    assert_agrees(run, qrels)


@settings(max_examples=60, deadline=None)
@given(qrels=judgements, value=st.sampled_from([0.0, 1.0, 3.5]))
def test_all_scores_tied_rank_by_doc_id_descending(qrels: dict, value: float) -> None:
    run = {"q": dict.fromkeys(DOC_IDS, value)}
    assert_agrees(run, {"q": qrels})


def test_real_collection_agrees(tmp_path: Path) -> None:
    """Cranfield's graded qrels (1-4) with a noisy run: every metric agrees with pytrec_eval."""
    root = data_dir() / "cranfield"
    if not (root / "qrels" / "test.tsv").is_file():
        pytest.skip(f"{root} is absent (set IRFLOW_DATA to the shared data folder)")
    from irflow.evaluation.datasets import load_beir

    collection = load_beir(root)
    rng = random.Random(7)
    doc_ids = list(collection.documents)
    run: dict[str, dict[str, float]] = {}
    for qid, judged in collection.qrels.items():
        # the judged documents with noisy scores among random ones; one decimal makes ties
        docs = set(rng.sample(doc_ids, 60)) | set(judged)
        run[qid] = {d: round(judged.get(d, 0) + rng.uniform(0, 3), 1) for d in docs}
    assert_agrees(run, collection.qrels)
    perfect = {q: {d: float(g) for d, g in judged.items()} for q, judged in collection.qrels.items()}
    assert evaluate_run(perfect, collection.qrels, "ndcg@10")["ndcg@10"] == pytest.approx(1.0)


# --------------------------------------------------------------- conventions

def test_hand_computed_values() -> None:
    run = {"q": {"a": 3.0, "b": 2.0, "c": 1.0}}
    qrels = {"q": {"b": 2, "c": 1, "d": 1, "e": 0}}
    values = evaluate_run(run, qrels, "ndcg@3,recall@2,p@5,mrr@1,mrr@2,map")
    ideal = 2 + 1 / math.log2(3) + 1 / math.log2(4)
    assert values["ndcg@3"] == pytest.approx((2 / math.log2(3) + 1 / math.log2(4)) / ideal)
    assert values["recall@2"] == pytest.approx(1 / 3)
    assert values["p@5"] == pytest.approx(2 / 5)  # divided by k though only 3 were retrieved
    assert values["mrr@1"] == 0.0 and values["mrr@2"] == 0.5
    assert values["map"] == pytest.approx((1 / 2 + 2 / 3) / 3)  # d never retrieved: still in the denominator


def test_ties_break_by_doc_id_descending_as_strings() -> None:
    assert ranked_doc_ids({"10": 1.0, "9": 1.0, "100": 1.0, "z": 0.5, "A": 2.0}) == ["A", "9", "100", "10", "z"]
    # the given order of equal scores does not matter
    assert ranked_doc_ids({"a": 1.0, "b": 1.0}) == ranked_doc_ids({"b": 1.0, "a": 1.0}) == ["b", "a"]


def test_scores_compare_at_float32_precision() -> None:
    # trec_eval keeps scores in a C float: these pairs are ties, broken by doc id
    assert ranked_doc_ids({"a": 1.0 + 1e-9, "b": 1.0}) == ["b", "a"]
    assert ranked_doc_ids({"a": 2e-58, "b": 0.0}) == ["b", "a"]
    assert ranked_doc_ids({"a": 1e300, "b": 1e200}) == ["b", "a"]
    assert ranked_doc_ids({"a": 1.0 + 2e-7, "b": 1.0}) == ["a", "b"]  # distinct in float32


def test_negative_grades_gain_nothing_and_are_not_relevant() -> None:
    qrels = {"q": {"bad": -1, "good": 1}}
    values = evaluate_run({"q": {"bad": 2.0, "good": 1.0}}, qrels, "ndcg@2,mrr@10,p@1")
    assert values == {"ndcg@2": pytest.approx(1 / math.log2(3)), "mrr@10": 0.5, "p@1": 0.0}


def test_missing_queries_skip_or_zero() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    run = {"q1": {"a": 1.0}, "q3": {"a": 1.0}}  # q2 not run; q3 not judged
    assert per_query(run, qrels, "p@1") == {"p@1": {"q1": 1.0}}
    assert per_query(run, qrels, "p@1", missing="zero") == {"p@1": {"q1": 1.0, "q2": 0.0}}
    assert evaluate_run(run, qrels, "p@1", missing="zero") == {"p@1": 0.5}
    # an empty ranking is a query the run has: it scores 0 under both conventions
    assert per_query({"q1": {}, "q2": {"b": 1.0}}, qrels, "p@1")["p@1"] == {"q1": 0.0, "q2": 1.0}
    with pytest.raises(EvaluationError, match="missing must be"):
        per_query(run, qrels, "p@1", missing="drop")  # type: ignore[arg-type]


def test_no_overlap_is_an_error() -> None:
    with pytest.raises(EvaluationError, match="same query ids"):
        evaluate_run({"1": {"a": 1.0}}, {"q1": {"a": 1}}, "ndcg@10")


def test_nan_score_is_an_error() -> None:
    with pytest.raises(EvaluationError, match="NaN"):
        evaluate_run({"q": {"a": math.nan}}, {"q": {"a": 1}}, "p@1")


@pytest.mark.parametrize("grade", [10**30, 2**63, True, 1.5, math.nan, math.inf, "1", None, np.float64(0.5)])
def test_qrels_grades_given_in_python_are_checked(grade: object) -> None:
    # numpy would read True and 1.5 as 1, and end 10**30 in an OverflowError
    with pytest.raises(EvaluationError, match=r"query 'q' give document 'b' the grade .*a grade is an integer"):
        per_query({"q": {"a": 1.0}}, {"q": {"a": 1, "b": grade}}, "ndcg@10")


def test_integral_grades_of_any_integer_type_count_as_they_are() -> None:
    run = {"q": {"a": 2.0, "b": 1.0}}
    plain = per_query(run, {"q": {"a": 1, "b": 2}}, "ndcg@2,map")
    for grades in ({"a": 1.0, "b": 2.0}, {"a": np.int64(1), "b": np.uint8(2)}, {"a": np.float32(1), "b": 2}):
        assert per_query(run, {"q": grades}, "ndcg@2,map") == plain
    big = per_query(run, {"q": {"a": 2**63 - 1, "b": -(2**63)}}, "ndcg@2")  # the extremes of the range
    assert big == {"ndcg@2": {"q": 1.0}}


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("ndcg@10", Metric("ndcg", 10)),
        ("nDCG@10", Metric("ndcg", 10)),
        (" Recall@100 ", Metric("recall", 100)),
        ("P@5", Metric("p", 5)),
        ("MRR@10", Metric("mrr", 10)),
        ("map", Metric("map")),
        ("MAP@1000", Metric("map", 1000)),
        ("ndcg", Metric("ndcg")),
    ],
)
def test_parse_metric(spec: str, expected: Metric) -> None:
    assert parse_metric(spec) == expected
    assert str(parse_metric(str(expected))) == str(expected)


@pytest.mark.parametrize("spec", ["ndcg@0", "ndcg@", "bleu@10", "p", "p@-1", "", "ndcg@ten"])
def test_bad_metric_names_list_valid_forms(spec: str) -> None:
    with pytest.raises(EvaluationError, match="valid forms"):
        parse_metrics(spec)


def test_parse_metrics_splits_and_dedups() -> None:
    assert [str(m) for m in parse_metrics("ndcg@10, RECALL@100,ndcg@10")] == ["ndcg@10", "recall@100"]
    assert [str(m) for m in parse_metrics(["map", Metric("p", 10)])] == ["map", "p@10"]


def test_metric_objects_validate() -> None:
    with pytest.raises(EvaluationError, match="unknown metric"):
        Metric("bleu", 10)
    with pytest.raises(EvaluationError, match="positive integer"):
        Metric("ndcg", 0)
    with pytest.raises(EvaluationError, match="needs a cutoff"):
        Metric("p")
