"""Runs as columns (irflow.evaluation.runs): the same per-query bits as the dict runs, 12 bytes an entry, kept on demand."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import irflow.evaluation.evaluate
from irflow.cli import main
from irflow.evaluation.evaluate import evaluate
from irflow.evaluation.metrics import EvaluationError, parse_metrics, per_query
from irflow.evaluation.runs import ENTRY_BYTES, BatchScorer, ColumnarRun, DocIds, RankedBatch, _trec_order
from irflow.evaluation.trec import read_trec_run, write_trec_run

METRICS = parse_metrics("ndcg@1,ndcg@3,ndcg@10,ndcg,recall@2,recall,p@1,p@5,mrr@1,mrr@10,mrr,map@3,map")
# numeric ids make string order differ from numeric order ("9" > "10"); non-ASCII ids sort by their UTF-8 bytes
CORPUS_IDS = ["1", "9", "10", "100", "2", "a", "B", "b", "doc-7", "é", "z9", "Z10", "30", "3", "x", "\U0001f600"]
ABSENT_IDS = ["gone", "0"]  # judged, never retrievable
scores = st.one_of(
    st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.0, -1.0]),  # few values: many ties (and -0.0 == 0.0)
    st.sampled_from([1.0 + 1e-9, 1.0 + 2e-7, 2e-58, 1e39, -1e39, 1e300, math.inf, -math.inf]),  # float32 ties
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
)
# a ranking as a recipe returns it: documents may come back more than once (surfaces), the first counts
rankings = st.lists(st.tuples(st.sampled_from(CORPUS_IDS), scores), max_size=24)
judgements = st.dictionaries(st.sampled_from(CORPUS_IDS + ABSENT_IDS), st.integers(min_value=-2, max_value=4),
                             min_size=1, max_size=10)


def _batch(ids: DocIds, rankings: list[list[tuple[str, float]]]) -> RankedBatch:
    """The batch a recipe's output becomes: the first occurrence of each document per query, in order."""
    offsets, docs, values = [0], [], []
    for ranking in rankings:
        firsts = dict(reversed(ranking))  # the first occurrence wins
        seen = list(dict.fromkeys(d for d, _ in ranking))
        docs += ids.codes_of(seen).tolist()
        values += [firsts[d] for d in seen]
        offsets.append(len(docs))
    return RankedBatch(np.array(offsets, np.int64), np.array(docs, np.int32), np.array(values, np.float64))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(st.tuples(rankings, judgements), min_size=1, max_size=6), by_score=st.booleans())
def test_columnar_values_are_the_dict_runs_values_bit_for_bit(batch: list, by_score: bool) -> None:
    if by_score:  # as recipes return them (ranked by score, ties in any order): the fast path of the ordering
        batch = [(sorted(ranking, key=lambda entry: -entry[1]), judged) for ranking, judged in batch]
    ids = DocIds(np.array(CORPUS_IDS * 2, dtype=object))  # every id twice: two surfaces per document
    qids = [f"q{i}" for i in range(len(batch))]
    run = {q: dict(reversed(ranking)) for q, (ranking, _) in zip(qids, batch)}  # the dict run: first occurrence
    qrels = {q: judged for q, (_, judged) in zip(qids, batch)}
    values = BatchScorer(ids, METRICS).measure(_batch(ids, [r for r, _ in batch]), qids, [j for _, j in batch])
    expected = per_query(run, qrels, METRICS, missing="zero")
    for j, metric in enumerate(METRICS):
        got = dict(zip(qids, values[:, j].tolist()))
        assert [v.hex() for v in got.values()] == [float(expected[str(metric)][q]).hex() for q in qids], metric


@settings(max_examples=200, deadline=None)
@given(entries=st.lists(st.tuples(st.integers(0, 3), scores, st.integers(0, 40)), max_size=60),
       by_score=st.booleans())
def test_trec_order_is_the_three_key_sort(entries: list, by_score: bool) -> None:
    kept = list({(q, d): (q, v, d) for q, v, d in entries}.values())  # one entry per (query, document)
    with np.errstate(over="ignore"):  # beyond float32: +-inf
        kept.sort(key=lambda e: (e[0], -np.float32(e[1]) if by_score else 0))  # by query, maybe by score
        query, score, docs = (np.array(column) for column in zip(*kept)) if kept else (np.zeros(0),) * 3
        score32 = score.astype(np.float32)
    expected = np.lexsort((-docs.astype(np.int64), -score32, query.astype(np.int64)))
    got = _trec_order(query.astype(np.int64), score32, docs.astype(np.int32), 41)
    assert got.tolist() == expected.tolist()


def test_nan_scores_and_bad_grades_are_refused_as_with_dict_runs() -> None:
    ids = DocIds(np.array(["a", "b"], dtype=object))
    scorer = BatchScorer(ids, METRICS)
    with pytest.raises(EvaluationError, match="document 'b' of query 'q' has a NaN score"):
        scorer.measure(_batch(ids, [[("a", 1.0), ("b", math.nan)]]), ["q"], [{"a": 1}])
    with pytest.raises(EvaluationError, match="query 'q' give document 'a' the grade 1.5"):
        scorer.measure(_batch(ids, [[("a", 1.0)]]), ["q"], [{"a": 1.5}])  # type: ignore[dict-item]


def test_a_columnar_run_reads_like_the_dict_it_replaces(tmp_path: Path) -> None:
    ids = DocIds(np.array(["d2", "d10", "d1", "d3"], dtype=object))
    rankings = [[("d10", 2.0), ("d1", 2.0), ("d2", 3.0)], [], [("d3", -0.0), ("d1", 0.0)]]
    run = ColumnarRun(["q1", "q2", "q3"], [_batch(ids, rankings[:2]), _batch(ids, rankings[2:])], ids.names)
    plain = {"q1": {"d10": 2.0, "d1": 2.0, "d2": 3.0}, "q2": {}, "q3": {"d3": -0.0, "d1": 0.0}}
    assert run == plain and dict(run) == plain and len(run) == 3 and list(run) == ["q1", "q2", "q3"]
    assert [list(run[q]) for q in run] == [list(plain[q]) for q in plain]  # the recipe's order kept
    assert run.entries == 5 and "q4" not in run
    # the same run file, byte for byte, as from the dict (equal scores in the given order)
    write_trec_run(tmp_path / "columns.run", run, tag="t")
    write_trec_run(tmp_path / "dict.run", plain, tag="t")
    assert (tmp_path / "columns.run").read_bytes() == (tmp_path / "dict.run").read_bytes()
    assert read_trec_run(tmp_path / "columns.run") == {q: d for q, d in plain.items() if d}


# -- evaluate(): what is held ------------------------------------------------------------------------


def _collection(root: Path, n_docs: int = 60, n_queries: int = 40) -> Path:
    """Documents of a few common words, so every query ranks most of them."""
    rng = np.random.default_rng(5)
    words = [f"w{i}" for i in range(12)]
    (root / "qrels").mkdir(parents=True)
    with open(root / "corpus.jsonl", "w") as out:
        for d in range(n_docs):
            out.write(json.dumps({"_id": f"d{d}", "text": " ".join(rng.choice(words, size=8))}) + "\n")
    with open(root / "queries.jsonl", "w") as out:
        for q in range(n_queries):
            out.write(json.dumps({"_id": f"q{q}", "text": " ".join(rng.choice(words, size=3))}) + "\n")
    with open(root / "qrels" / "test.tsv", "w") as out:
        for q in range(n_queries):
            for d in rng.choice(n_docs, size=3, replace=False).tolist():
                out.write(f"q{q}\td{d}\t{int(rng.integers(0, 3))}\n")
    return root


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _collection(tmp_path_factory.mktemp("evalruns") / "c")


def test_kept_runs_hold_twelve_bytes_per_entry(collection: Path) -> None:
    ev = evaluate(["lexical", "dense"], collection, embedder="hash", use_cache=False, batch_size=7)
    for system in ev:
        run = system.run
        assert isinstance(run, ColumnarRun)
        entries = sum(len(run[q]) for q in run)
        assert entries == run.entries > 40 * 30  # most documents ranked for every query
        # the columns and nothing else: 12 bytes per (query, document), 8 per query (and batch)
        assert run.nbytes == ENTRY_BYTES * entries + 8 * (len(run) + len(run.batches))
        assert run.names is ev["lexical"].run.names  # the ids interned once per evaluation


def test_without_kept_runs_only_the_figures_are_held(collection: Path, tmp_path: Path) -> None:
    kept = evaluate(["lexical", "dense"], collection, embedder="hash", use_cache=False, batch_size=7)
    figures = evaluate(["lexical", "dense"], collection, embedder="hash", use_cache=False, batch_size=7,
                       keep_runs=False)
    assert [s.run for s in figures] == [None, None]
    for a, b in zip(kept, figures):
        assert a.per_query == b.per_query and a.means == b.means  # the same bits
        assert {m: list(v) for m, v in a.per_query.items()} == {m: list(v) for m, v in b.per_query.items()}
    assert figures.compare("lexical").to_dict() == kept.compare("lexical").to_dict()
    with pytest.raises(EvaluationError, match="runs of this evaluation were not kept"):
        figures.write_runs(tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_the_size_of_large_kept_runs_is_said_first(collection: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(irflow.evaluation.evaluate, "LARGE_RUNS_BYTES", 10_000)
    with pytest.warns(UserWarning, match=r"runs of 2 systems over 40 queries, up to 60 documents each, takes up "
                                         r"to 58\.3 KB of memory \(.* as TREC run files\)"):
        evaluate(["lexical", "dense"], collection, embedder="hash", use_cache=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to say when the runs are not kept
        evaluate(["lexical", "dense"], collection, embedder="hash", use_cache=False, keep_runs=False)


def test_cli_keeps_runs_only_for_run_files(collection: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    kept: list[bool] = []
    real = irflow.evaluation.evaluate.evaluate

    def spy(*args, **kwargs):
        kept.append(kwargs["keep_runs"])
        return real(*args, **kwargs)

    monkeypatch.setattr("irflow.cli.app.evaluate", spy)
    args = ["eval", "lexical", "--dataset", str(collection), "--embedder", "none", "--json"]
    plain = CliRunner().invoke(main, args)
    written = CliRunner().invoke(main, [*args, "--runs", str(tmp_path / "runs")])
    assert plain.exit_code == 0 and written.exit_code == 0, written.output
    assert kept == [False, True]
    assert json.loads(plain.stdout) == json.loads(written.stdout)
    assert len(read_trec_run(tmp_path / "runs" / "lexical.run")) == 40
