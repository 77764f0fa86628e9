"""Retrieval metrics with trec_eval's semantics: nDCG@k, recall@k, P@k, MRR@k, MAP.

Every published IR figure is a trec_eval (or pytrec_eval) figure, so the
numbers here follow trec_eval exactly rather than a textbook variant; the
tests check agreement with pytrec_eval to 1e-6 on random runs, graded
relevance and tied scores included.  The conventions that matter:

- **Ranking.** The run's scores decide the order, never the given order: by
  score descending, ties by document id descending as a byte string
  (trec_eval's ``strcmp``; so ``"9"`` ranks before ``"10"`` on a tie).
  Scores are compared as float32, because trec_eval stores them so: scores
  closer than float32 resolution (about 6e-8 relative) are ties, and
  anything beyond 3.4e38 is infinite.  Checked against pytrec_eval.
- **Relevance.** A document is relevant for the binary measures (recall, P,
  MRR, MAP) when its grade is >= 1; unjudged documents are grade 0.  nDCG's
  gain is the grade itself (negative grades gain 0), the discount is
  ``log2(rank + 1)``, and the ideal ranking is built from the qrels' grades,
  cut at the same k (trec_eval ``ndcg_cut``).
- **P@k** divides by k even when fewer than k documents were retrieved.
- **Queries.** A query is evaluated only when the qrels judge it.  With
  ``missing="skip"`` (the default, pytrec_eval's and BEIR's convention) a
  judged query must also be a key of the run (an empty ranking counts, and
  scores 0); with ``missing="zero"`` every judged query is evaluated and one
  the run lacks scores 0 on every measure.  Queries only in the run are
  ignored either way: without judgements there is nothing to measure.

Example::

    >>> run = {"q1": {"d1": 2.0, "d2": 1.0}}
    >>> qrels = {"q1": {"d2": 1}}
    >>> evaluate_run(run, qrels, ["mrr@10", "p@1"])
    {'mrr@10': 0.5, 'p@1': 0.0}
"""

from __future__ import annotations

import math
import re
from itertools import repeat
from typing import Any, Callable, Iterable, Literal, Mapping, cast

import attrs
import numpy as np

from irflow.errors import EvaluationError
from irflow.util.fileio import shown

__all__ = [
    "EvaluationError",
    "Metric",
    "METRIC_NAMES",
    "Run",
    "Qrels",
    "parse_metric",
    "parse_metrics",
    "ranked_doc_ids",
    "judged_grades",
    "measure_ranking",
    "per_query",
    "evaluate_run",
]

#: A run: query id -> document id -> score (higher is better).
Run = Mapping[str, Mapping[str, float]]
#: Relevance judgements: query id -> document id -> integer grade.
Qrels = Mapping[str, Mapping[str, int]]

#: Canonical metric names; aliases are accepted by :func:`parse_metric`.
METRIC_NAMES: tuple[str, ...] = ("ndcg", "recall", "p", "mrr", "map")

_ALIASES: dict[str, str] = {
    "ndcg": "ndcg",
    "ndcg_cut": "ndcg",
    "recall": "recall",
    "r": "recall",
    "p": "p",
    "precision": "p",
    "mrr": "mrr",
    "rr": "mrr",
    "recip_rank": "mrr",
    "map": "map",
    "ap": "map",
}
# P@k means nothing without k; the others have a trec_eval meaning uncut
# (over the whole ranking): ndcg, recall (num_rel_ret / num_rel), recip_rank, map.
_NEEDS_K = frozenset({"p"})
_VALID_FORMS = "ndcg@K, recall@K, p@K, mrr@K, map@K, and ndcg, recall, mrr, map without a cutoff (K a positive integer, case-insensitive)"
_SPEC = re.compile(r"^\s*([a-z_]+)\s*(?:@\s*(\d+))?\s*$")


def _known_name(instance: object, attribute: attrs.Attribute, value: str) -> None:
    if value not in METRIC_NAMES:
        raise EvaluationError(f"unknown metric {value!r}; names are {list(METRIC_NAMES)}; valid forms: {_VALID_FORMS}")


def _positive_k(instance: object, attribute: attrs.Attribute, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise EvaluationError(f"metric cutoff k must be a positive integer, got {value!r}")


@attrs.frozen
class Metric:
    """One measure and its cutoff; ``str(metric)`` is the canonical name used as a result key.

    >>> str(Metric("ndcg", 10)), str(Metric("map"))
    ('ndcg@10', 'map')
    """

    name: str = attrs.field(validator=_known_name)
    k: int | None = attrs.field(default=None, validator=_positive_k)

    def __attrs_post_init__(self) -> None:
        if self.k is None and self.name in _NEEDS_K:
            raise EvaluationError(f"metric {self.name!r} needs a cutoff, e.g. '{self.name}@10'; valid forms: {_VALID_FORMS}")

    def __str__(self) -> str:
        return self.name if self.k is None else f"{self.name}@{self.k}"


def parse_metric(spec: str | Metric) -> Metric:
    """A :class:`Metric` from a name such as ``"nDCG@10"``, ``"P@5"``, ``"map"``.

    >>> parse_metric("Recall@100")
    Metric(name='recall', k=100)
    """
    if isinstance(spec, Metric):
        return spec
    if not isinstance(spec, str):
        raise EvaluationError(f"a metric is a name such as 'ndcg@10', got {type(spec).__name__}; valid forms: {_VALID_FORMS}")
    match = _SPEC.match(spec.lower())
    name = _ALIASES.get(match.group(1)) if match else None
    if match is None or name is None:
        raise EvaluationError(f"unknown metric {spec!r}; valid forms: {_VALID_FORMS}")
    k = match.group(2)
    if k is not None and len(k) > 18:  # int() refuses 4300+ digits; no ranking is deeper than 10**18
        raise EvaluationError(f"metric {spec[:40]!r}...: the cutoff has {len(k)} digits; a cutoff is a positive "
                              f"integer such as 10 or 1000; valid forms: {_VALID_FORMS}")
    if k is not None and int(k) < 1:
        raise EvaluationError(f"metric {spec!r}: the cutoff must be a positive integer; valid forms: {_VALID_FORMS}")
    return Metric(name, None if k is None else int(k))


def parse_metrics(specs: str | Metric | Iterable[str | Metric]) -> tuple[Metric, ...]:
    """Metrics from a comma-separated string or a sequence, duplicates dropped, order kept.

    >>> [str(m) for m in parse_metrics("ndcg@10, recall@100,NDCG@10")]
    ['ndcg@10', 'recall@100']
    """
    if isinstance(specs, (str, Metric)):
        specs = [specs] if isinstance(specs, Metric) else [s for s in specs.split(",") if s.strip()]
    metrics = tuple(dict.fromkeys(parse_metric(s) for s in specs))
    if not metrics:
        raise EvaluationError(f"no metric given; valid forms: {_VALID_FORMS}")
    return metrics


def ranked_doc_ids(scores: Mapping[str, float]) -> list[str]:
    """Document ids in trec_eval's order: score descending, ties by id descending.

    Scores are compared as float32 (trec_eval's ``float sim``).  numpy
    compares unicode strings by code point, which is the byte order of their
    UTF-8 encoding, i.e. what trec_eval's ``strcmp`` sees.

    >>> ranked_doc_ids({"10": 1.0, "9": 1.0, "a": 0.5})
    ['9', '10', 'a']
    """
    if not scores:
        return []
    ids = np.array(list(scores.keys()), dtype=str)
    values = np.fromiter(scores.values(), dtype=np.float64, count=len(ids))
    if np.isnan(values).any():
        bad = ids[np.isnan(values)][0]
        raise EvaluationError(f"document {bad!r} has a NaN score; a run's scores must be numbers")
    with np.errstate(over="ignore"):  # beyond float32's range is +-inf, as in trec_eval
        values = values.astype(np.float32)
    order = np.argsort(ids)[::-1]  # ids are unique (dict keys): no tie to break here
    order = order[np.argsort(-values[order], kind="stable")]
    return ids[order].tolist()


# --- one query: grades of the ranking (best first) and of the judged documents ---

def _relevant(grades: np.ndarray) -> np.ndarray:
    return grades >= 1


def _dcg(gains: np.ndarray) -> float:
    # rank r (1-based) is discounted by log2(r + 1)
    return float(np.sum(gains / np.log2(np.arange(2, gains.size + 2))))


def _ndcg(ranked: np.ndarray, judged: np.ndarray, k: int | None) -> float:
    ideal = np.sort(judged[judged > 0])[::-1]
    ideal_dcg = _dcg(ideal[:k].astype(np.float64))
    if ideal_dcg <= 0.0:
        return 0.0
    return _dcg(np.maximum(ranked[:k], 0).astype(np.float64)) / ideal_dcg


def _recall(ranked: np.ndarray, judged: np.ndarray, k: int | None) -> float:
    n_relevant = int(_relevant(judged).sum())
    return float(_relevant(ranked[:k]).sum()) / n_relevant if n_relevant else 0.0


def _precision(ranked: np.ndarray, judged: np.ndarray, k: int | None) -> float:
    # Metric refuses p without a cutoff, so k is an int here
    return float(_relevant(ranked[:k]).sum()) / cast(int, k)


def _mrr(ranked: np.ndarray, judged: np.ndarray, k: int | None) -> float:
    hits = np.flatnonzero(_relevant(ranked[:k]))
    return 1.0 / (int(hits[0]) + 1) if hits.size else 0.0  # a Python float (the same bits as numpy's)


def _average_precision(ranked: np.ndarray, judged: np.ndarray, k: int | None) -> float:
    n_relevant = int(_relevant(judged).sum())
    if not n_relevant:
        return 0.0
    relevant = _relevant(ranked[:k])
    precision_at = np.cumsum(relevant) / np.arange(1, relevant.size + 1)
    return float(precision_at[relevant].sum()) / n_relevant


_MEASURES: dict[str, Callable[[np.ndarray, np.ndarray, int | None], float]] = {
    "ndcg": _ndcg,
    "recall": _recall,
    "p": _precision,
    "mrr": _mrr,
    "map": _average_precision,
}


#: The grades a judgement may have: a C ``long``, as trec_eval and pytrec_eval read them.
_GRADE_RANGE = (-(2**63), 2**63 - 1)


def judged_grades(qid: str, judgements: Mapping[str, int]) -> np.ndarray:
    """The grades of one query's judgements (int64), each checked: an integer in trec_eval's range.

    A bool, a fraction, NaN or a grade beyond int64 is an EvaluationError
    naming the query and the document (numpy would silently turn ``True`` and
    ``1.5`` into 1, and end ``10**30`` in an OverflowError).

    >>> judged_grades("q1", {"d1": 2, "d2": 0}).tolist()
    [2, 0]
    """
    grades = np.fromiter(map(_grade, repeat(qid), judgements.items()), dtype=np.int64, count=len(judgements))
    return grades


def _grade(qid: str, item: tuple[str, Any]) -> int:
    doc_id, grade = item
    if isinstance(grade, (float, np.floating)) and math.isfinite(grade) and float(grade).is_integer():
        grade = int(grade)  # 1.0 is the integer 1 (files may write grades as floats), 1.5 is not
    if isinstance(grade, (bool, np.bool_)) or not isinstance(grade, (int, np.integer)) \
            or not _GRADE_RANGE[0] <= grade <= _GRADE_RANGE[1]:
        raise EvaluationError(f"the qrels of query {qid!r} give document {doc_id!r} the grade {shown(grade)}; a grade "
                              f"is an integer from {_GRADE_RANGE[0]} to {_GRADE_RANGE[1]} (usually 0, 1, 2 or 3)")
    return int(grade)


def _grades(ranking: list[str], judgements: Mapping[str, int]) -> np.ndarray:
    # map over dict.get runs the lookups in C; unjudged documents are grade 0
    return np.fromiter(map(judgements.get, ranking, repeat(0, len(ranking))), dtype=np.int64, count=len(ranking))


def _query_ids(run: Run, qrels: Qrels, missing: str) -> list[str]:
    if missing not in ("skip", "zero"):
        raise EvaluationError(f"missing must be 'skip' (evaluate judged queries the run has) or 'zero' (every judged query), got {missing!r}")
    if missing == "zero":
        return list(qrels)
    return [q for q in qrels if q in run]


def per_query(
    run: Run,
    qrels: Qrels,
    metrics: str | Metric | Iterable[str | Metric],
    *,
    missing: Literal["skip", "zero"] = "skip",
) -> dict[str, dict[str, float]]:
    """Each metric's value per query: ``{metric: {query_id: value}}``, queries in qrels order.

    Which queries appear is set by ``missing`` (see the module docstring);
    this per-query table is what the significance tests pair up.

    >>> per_query({"q1": {"d1": 1.0}}, {"q1": {"d1": 1}, "q2": {"d9": 1}}, "p@1", missing="zero")
    {'p@1': {'q1': 1.0, 'q2': 0.0}}
    """
    parsed = parse_metrics(metrics)
    table: dict[str, dict[str, float]] = {str(m): {} for m in parsed}
    for qid in _query_ids(run, qrels, missing):
        judgements = qrels[qid]
        judged = judged_grades(qid, judgements)
        ranked = _grades(ranked_doc_ids(run.get(qid, {})), judgements)
        for metric, value in zip(parsed, measure_ranking(ranked, judged, parsed)):
            table[str(metric)][qid] = value
    return table


def measure_ranking(ranked: np.ndarray, judged: np.ndarray, metrics: Iterable[Metric]) -> list[float]:
    """Each metric of one query: ``ranked`` the grades of its ranking in trec_eval's order, ``judged`` its qrels' grades.

    The one computation behind :func:`per_query` and the columnar runs of
    :mod:`irflow.evaluation.runs`, so both give the same bits.

    >>> measure_ranking(np.array([0, 2]), np.array([2, 1]), parse_metrics("p@1,mrr@10"))
    [0.0, 0.5]
    """
    return [_MEASURES[metric.name](ranked, judged, metric.k) for metric in metrics]


def evaluate_run(
    run: Run,
    qrels: Qrels,
    metrics: str | Metric | Iterable[str | Metric],
    *,
    missing: Literal["skip", "zero"] = "skip",
) -> dict[str, float]:
    """The mean of each metric over the evaluated queries: ``{metric: mean}``.

    Raises :class:`EvaluationError` when no judged query is evaluated, which
    almost always means the run and the qrels use different query ids.

    >>> evaluate_run({"q1": {"d1": 1.0, "d2": 0.5}}, {"q1": {"d2": 2}}, "ndcg@2")
    {'ndcg@2': 0.6309297535714575}
    """
    table = per_query(run, qrels, metrics, missing=missing)
    first = next(iter(table.values()))
    if not first:
        sample_run, sample_qrels = list(run)[:3], list(qrels)[:3]
        raise EvaluationError(
            f"no query of the qrels ({len(qrels)} queries, e.g. {sample_qrels}) is in the run "
            f"({len(run)} queries, e.g. {sample_run}); check that both use the same query ids"
        )
    # math.fsum: the mean must not depend on the order queries were summed in
    return {name: math.fsum(values.values()) / len(values) for name, values in table.items()}
