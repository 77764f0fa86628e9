"""The collapse stage: best surface per artifact (or each record once), merged per original query."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_fakes import cands
from irflow.engine.batches import Candidates, QueryBatch, Scale
from irflow.engine import StageContext
from irflow.stages.collapse import Collapse, artifact_codes

# rows 0..7 -> artifacts
ARTIFACTS = np.array(["a", "a", "b", "b", "c", "c", "d", "d"], dtype=object)
# the one corpus-protocol member the collapse reads
CORPUS = SimpleNamespace(artifact_ids_of=lambda rows: ARTIFACTS[np.asarray(rows, dtype=np.int64)])


def run(stage: Collapse, c: Candidates) -> Candidates:
    return stage.run(StageContext(CORPUS, "collapse", c.queries), c)


def reference(entries, per_artifact, k):
    """The seed's collapse over one original query's entries [(row, score)] in order.

    A dict of best entries: a tie keeps the earlier entry, and the dict keeps each key where it was
    first inserted, so the stable sort orders equal scores by the key's first appearance.
    """
    best = {}
    for row, score in entries:
        key = ARTIFACTS[row] if per_artifact else row
        if key not in best or score > best[key][1]:
            best[key] = (row, score)
    return sorted(best.values(), key=lambda item: -item[1])[:k]


def test_best_surface_per_artifact_sorted_and_cut():
    c = cands(["q"], [[(0, 0.9), (2, 0.8), (1, 0.7), (4, 0.6), (3, 0.5), (6, 0.4)]], "rrf", "fuse")
    got = run(Collapse(k=3), c)
    assert got.row.tolist() == [0, 2, 4] and got.score.tolist() == [0.9, 0.8, 0.6]
    assert got.scale is Scale.RRF and got.queries == c.queries
    assert got.provenance["collapse.merged"].tolist() == [2, 2, 1]
    assert got.provenance["collapse.input_rank"].tolist() == [1, 2, 4]
    assert got.provenance["fuse.rank"].tolist() == [1, 2, 4]  # upstream provenance follows the winner


def test_a_tie_between_surfaces_goes_to_the_one_ranked_first():
    # the stage's input order breaks the tie (the seed's rule), not the corpus row
    c = cands(["q"], [[(1, 0.5), (0, 0.5), (2, 0.4)]], "cosine")
    got = run(Collapse(), c)
    assert got.row.tolist() == [1, 2]  # row 1 (ranked first) over row 0 (the lower row)
    assert got.provenance["collapse.input_rank"].tolist() == [1, 3]
    assert got.provenance["collapse.merged"].tolist() == [2, 1]


def test_per_artifact_false_keeps_each_record_once_with_its_best_score():
    batch = QueryBatch.of(["q"]).expand([["q1", "q2"]])
    c = Candidates(batch, [0, 0, 1, 1], [0, 1, 1, 2], [0.9, 0.3, 0.8, 0.2], "cosine")
    got = run(Collapse(per_artifact=False), c)
    assert got.row.tolist() == [0, 1, 2] and got.score.tolist() == [0.9, 0.8, 0.2]
    assert got.queries == QueryBatch.of(["q"])
    assert got.provenance["collapse.subquery"].tolist() == [0, 1, 1]
    assert got.provenance["collapse.merged"].tolist() == [1, 2, 1]


def test_formulated_sub_queries_merge_back_to_their_original_query():
    batch = QueryBatch.of(["x", "y"]).expand([["x1", "x2"], ["y1"]])
    c = Candidates(batch, [0, 0, 1, 1, 2], [0, 2, 3, 1, 6], [0.5, 0.4, 0.9, 0.45, 0.7], "cosine")
    got = run(Collapse(), c)
    assert got.queries == QueryBatch.of(["x", "y"])
    assert got.per_query(0)[0].tolist() == [3, 0]  # b at 0.9 (via x2), then a's best surface: row 0 at 0.5
    assert got.per_query(0)[1].tolist() == [0.9, 0.5]
    assert got.per_query(1)[0].tolist() == [6]


def test_ties_between_artifacts_keep_the_order_in_which_the_artifact_first_appeared():
    # artifact a first appears at 0.2 (sub-query 1, row 0) and reaches 0.9 later (sub-query 2, row 1);
    # b appears with 0.9 in between (row 2): a was seen first, so a ranks first, as the seed's dict
    # (insertion order kept when a later entry replaces the value) and stable sort have it
    batch = QueryBatch.of(["x"]).expand([["x1", "x2"]])
    c = Candidates(batch, [0, 0, 1, 1], [0, 2, 1, 0], [0.2, 0.9, 0.9, 0.1], "cosine")
    got = run(Collapse(), c)
    assert got.row.tolist() == [1, 2] and got.score.tolist() == [0.9, 0.9]
    assert got.provenance["collapse.subquery"].tolist() == [1, 0]
    # each record once: row 2 (0.9, first) ties row 1 (0.9, sub-query 2); row 0 keeps its 0.2 (seen first)
    records = run(Collapse(per_artifact=False), c)
    assert records.row.tolist() == [2, 1, 0] and records.score.tolist() == [0.9, 0.9, 0.2]
    assert records.provenance["collapse.subquery"].tolist() == [0, 1, 0]


def test_empty_input():
    got = run(Collapse(), cands(["a", "b"], [[], []], "cosine", "dense"))
    assert len(got) == 0 and got.n_queries == 2 and "dense.score" in got.provenance


@pytest.mark.parametrize("kwargs, message", [
    ({"k": 0}, "positive integer"),
    ({"per_artifact": 1}, "true or false"),
    ({"key": "artifact"}, "must be one of 'source\\+artifact'"),
])
def test_parameters_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Collapse(**kwargs)


@st.composite
def formulated(draw):
    n_original = draw(st.integers(1, 3))
    per_original = [draw(st.integers(1, 3)) for _ in range(n_original)]
    batch = QueryBatch.of([f"q{i}" for i in range(n_original)]).expand(
        [[f"q{i}.{j}" for j in range(n)] for i, n in enumerate(per_original)])
    lists = []
    for _ in range(len(batch)):
        rows = draw(st.lists(st.integers(0, 7), unique=True, max_size=6))
        scores = sorted(draw(st.lists(st.sampled_from([0.1, 0.2, 0.5, 0.9]), min_size=len(rows),
                                      max_size=len(rows))), reverse=True)
        lists.append(list(zip(rows, scores)))
    return batch, lists


@settings(max_examples=100, deadline=None)
@given(formulated(), st.booleans(), st.integers(1, 5))
def test_collapse_equals_the_seed_semantics(case, per_artifact, k):
    batch, lists = case
    got = run(Collapse(k=k, per_artifact=per_artifact), cands(batch, lists))
    for original in range(batch.n_original):
        entries = [e for i, ranked in enumerate(lists) if batch.origin[i] == original for e in ranked]
        rows, scores = got.per_query(original)
        assert list(zip(rows.tolist(), scores.tolist())) == reference(entries, per_artifact, k)


# one artifact per row: collapsing per artifact must equal collapsing per record, column for column
DISTINCT = SimpleNamespace(artifact_ids_of=lambda rows: np.array([f"r{r}" for r in np.asarray(rows).tolist()],
                                                                 dtype=object))


@settings(max_examples=100, deadline=None)
@given(formulated(), st.integers(1, 5))
def test_distinct_artifacts_shortcut_equals_the_grouping_path(case, k):
    # every candidate its own artifact takes collapse's shortcut (no grouping); the general path
    # grouping by row (what per_artifact=false does when a row repeats): the outputs, provenance
    # included, must be the same
    batch, lists = case
    c = cands(batch, lists).with_provenance({"x.tag": np.arange(sum(map(len, lists)), dtype=np.int64)})
    ctx = StageContext(DISTINCT, "collapse", c.queries)
    shortcut = Collapse(k=k, per_artifact=True).run(ctx, c)
    grouped = Collapse(k=k, per_artifact=False)._grouped(ctx, c, c.queries.root(), c.row)
    assert shortcut == grouped
    assert Collapse(k=k, per_artifact=False).run(ctx, c) == grouped  # distinct rows or not
    assert set(shortcut.provenance) == {"x.tag", "collapse.merged", "collapse.input_rank", "collapse.subquery"}


def _partition(codes):
    groups = {}
    for position, code in enumerate(codes.tolist()):
        groups.setdefault(code, []).append(position)
    return sorted(groups.values())


@settings(max_examples=80, deadline=None)
@given(ids=st.lists(st.sampled_from(["a", "b", "ab", "ba", "c", "é", "a" * 40]), max_size=40),
       hash_of=st.sampled_from([hash, len, lambda s: 0]))
def test_artifact_codes_group_exactly_the_equal_ids(ids, hash_of):
    artifacts = np.array(ids, dtype=object)
    codes = artifact_codes(artifacts, hash_of=hash_of)  # len and 0 make different ids share a hash
    _, reference = np.unique(artifacts, return_inverse=True) if ids else (None, np.empty(0, np.int64))
    assert _partition(codes) == _partition(reference.reshape(-1))
