"""A batch's collapse: the same answers as each query alone, with each distinct row's artifact id read once.

A batch of 1,000 queries holds ~50,000 candidates that share rows; grouping
them per artifact must not hash or compare an artifact id per candidate
(``stages/_util.row_artifact_codes``), and the result must be what the
collapse of each query alone gives.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from irflow.engine import StageContext
from irflow.engine.batches import Candidates, QueryBatch
from irflow.stages._util import row_artifact_codes
from irflow.stages.collapse import Collapse


def corpus_of(artifacts: np.ndarray, asked: list[int] | None = None) -> SimpleNamespace:
    """The one corpus-protocol member the collapse reads, recording how many rows each call asks for."""
    def artifact_ids_of(rows: np.ndarray) -> np.ndarray:
        if asked is not None:
            asked.append(int(np.asarray(rows).size))
        return artifacts[np.asarray(rows, dtype=np.int64)]
    return SimpleNamespace(artifact_ids_of=artifact_ids_of)


def batch_of(per_query: list[list[tuple[int, float]]]) -> Candidates:
    """Candidates of a batch, each query's entries ranked by score (ties by row, as a kernel gives them)."""
    qi, rows, scores = [], [], []
    for q, entries in enumerate(per_query):
        for row, score in sorted(dict(entries).items(), key=lambda e: (-e[1], e[0])):
            qi.append(q)
            rows.append(row)
            scores.append(score)
    return Candidates(QueryBatch.of([f"q{i}" for i in range(len(per_query))]), qi, rows, scores, "bm25")


entries = st.lists(st.tuples(st.integers(0, 29), st.sampled_from([0.5, 1.0, 1.5, 2.0, 2.5])), max_size=12)


@settings(max_examples=60, deadline=None)
@given(per_query=st.lists(entries, min_size=2, max_size=6), groups=st.integers(1, 30), k=st.integers(1, 6),
       per_artifact=st.booleans())
def test_a_batch_collapses_as_each_query_alone(per_query: list[list[tuple[int, float]]], groups: int, k: int,
                                               per_artifact: bool) -> None:
    artifacts = np.array([f"a{row % groups}" for row in range(30)], dtype=object)
    corpus = corpus_of(artifacts)
    stage = Collapse(k=k, per_artifact=per_artifact)
    batch = batch_of(per_query)
    got = stage.run(StageContext(corpus, "collapse", batch.queries), batch)
    for q, query_entries in enumerate(per_query):
        alone = batch_of([query_entries])
        want = stage.run(StageContext(corpus, "collapse", alone.queries), alone)
        rows, scores = got.per_query(q)
        assert rows.tolist() == want.row.tolist() and scores.tolist() == want.score.tolist()
        picked = got.query_index == q
        for column in ("collapse.merged", "collapse.input_rank"):
            assert got.provenance[column][picked].tolist() == want.provenance[column].tolist()


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.integers(0, 200), max_size=80), groups=st.integers(1, 250))
def test_row_codes_group_exactly_the_rows_of_one_artifact(rows: list[int], groups: int) -> None:
    artifacts = np.array([f"a{row % groups}" for row in range(201)], dtype=object)
    codes = row_artifact_codes(corpus_of(artifacts), np.array(rows, dtype=np.int64))
    ids = artifacts[rows]
    for i in range(len(rows)):
        for j in range(len(rows)):
            assert (codes[i] == codes[j]) == (ids[i] == ids[j])


def test_a_batch_reads_each_distinct_rows_artifact_once() -> None:
    # 40 queries sharing 10 rows (one artifact each): 400 candidates, 10 ids to read
    per_query = [[(row, float(10 - row + q % 3)) for row in range(10)] for q in range(40)]
    asked: list[int] = []
    artifacts = np.array([f"a{row}" for row in range(10)], dtype=object)
    batch = batch_of(per_query)
    got = Collapse(k=3).run(StageContext(corpus_of(artifacts, asked), "collapse", batch.queries), batch)
    assert got.counts().tolist() == [3] * 40
    assert sum(asked) == 10  # not one id per candidate (400)
