"""The fuse stage against the seed's semantics, computed by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_fakes import cands
from irflow.engine.batches import Candidates, QueryBatch, Scale
from irflow.errors import StageError
from irflow.engine import StageContext
from irflow.stages.fuse import Fuse

QUERIES = QueryBatch.of(["q0", "q1", "q2"])


def run(fuse: Fuse, **inputs: Candidates) -> Candidates:
    return fuse.run(StageContext(None, "fuse", next(iter(inputs.values())).queries), inputs)


def reference(dense, lexical, method="rrf", rrf_k=60, alpha=0.5, sat_k=8.0):
    """The seed's hybrid fusion for one query, written the obvious way: [(row, score)] best first."""
    if not lexical:
        return list(dense)
    if method == "blend" and not dense:
        return list(lexical)
    order, score = [], {}
    if method == "rrf":
        for channel in (dense, lexical):
            for rank, (row, _) in enumerate(channel, start=1):
                if row not in score:
                    order.append(row)
                    score[row] = 0.0
                score[row] += 1 / (rrf_k + rank)
    else:
        cos, bm = dict(dense), dict(lexical)
        for row, _ in list(dense) + list(lexical):
            if row in score:
                continue
            order.append(row)
            lex = bm.get(row)
            lex_term = (1 - alpha) * lex / (lex + sat_k) if lex is not None and lex > 0 else 0.0
            score[row] = (alpha * cos[row] if row in cos else 0.0) + lex_term
    return sorted(((row, score[row]) for row in order), key=lambda item: -item[1])  # stable: first-seen order


def as_lists(c: Candidates) -> list[list[tuple[int, float]]]:
    return [list(zip(*(a.tolist() for a in c.per_query(i)))) for i in range(c.n_queries)]


def assert_matches(got: Candidates, expected: list[list[tuple[int, float]]]):
    lists = as_lists(got)
    assert [[r for r, _ in q] for q in lists] == [[r for r, _ in q] for q in expected]
    for q_got, q_want in zip(lists, expected):
        assert [s for _, s in q_got] == pytest.approx([s for _, s in q_want], rel=1e-12, abs=1e-15)


DENSE = [[(3, 0.9), (1, 0.8), (7, 0.5)], [(2, 0.7), (4, 0.6)], [(5, 0.4)]]
LEXICAL = [[(1, 5.0), (9, 3.0)], [], [(6, 2.0), (5, 1.0)]]


def test_rrf_by_hand():
    got = run(Fuse(), dense=cands(QUERIES, DENSE, "cosine", "dense"), lexical=cands(QUERIES, LEXICAL, "bm25", "lexical"))
    # query 0: 1 -> 1/62 + 1/61, 3 -> 1/61, 9 -> 1/62, 7 -> 1/63
    assert got.per_query(0)[0].tolist() == [1, 3, 9, 7]
    assert got.per_query(0)[1].tolist() == pytest.approx([1 / 62 + 1 / 61, 1 / 61, 1 / 62, 1 / 63])
    # query 1: the lexical channel is empty -> the dense ranking passes through with its cosine scores
    assert got.per_query(1)[1].tolist() == [0.7, 0.6]
    assert_matches(got, [reference(d, lex) for d, lex in zip(DENSE, LEXICAL)])
    assert got.scale is Scale.MIXED  # query 1 is on the cosine scale, the others rrf
    assert got.provenance["fuse.passthrough"].tolist() == [False] * 4 + [True] * 2 + [False] * 2


def test_blend_by_hand():
    lexical = [[(1, 5.0), (9, 3.0), (3, 0.0)], [(4, 2.0)], [(6, 2.0)]]
    dense = [[(3, 0.9), (1, 0.8), (7, 0.5)], [], [(5, 0.4)]]
    got = run(Fuse(method="blend", alpha=0.7, bm25_sat_k=4.0), dense=cands(QUERIES, dense, "cosine"),
              lexical=cands(QUERIES, lexical, "bm25"))
    s = {1: 0.7 * 0.8 + 0.3 * 5 / 9, 3: 0.7 * 0.9, 9: 0.3 * 3 / 7, 7: 0.7 * 0.5}  # bm25 0 contributes nothing
    assert got.per_query(0)[0].tolist() == sorted(s, key=lambda r: -s[r])
    assert got.per_query(0)[1].tolist() == pytest.approx(sorted(s.values(), reverse=True))
    # query 1: the dense channel is empty -> lexical passes through with its raw BM25 score
    assert got.per_query(1)[1].tolist() == [2.0]
    assert_matches(got, [reference(d, lex, "blend", alpha=0.7, sat_k=4.0) for d, lex in zip(dense, lexical)])


def test_rrf_with_an_empty_dense_channel_fuses_the_lexical_ranking():
    got = run(Fuse(), dense=cands(["q"], [[]], "cosine"), lexical=cands(["q"], [[(4, 3.0), (2, 1.0)]], "bm25"))
    assert got.per_query(0)[1].tolist() == [1 / 61, 1 / 62] and got.scale is Scale.RRF


def test_equal_fused_scores_keep_first_seen_order():
    # rows 1 and 2 tie (1/61 + 1/62 each); 2 is seen first (dense rank 1), so 2 ranks first, not the lower row
    dense, lexical = cands(["q"], [[(2, 0.9), (1, 0.8)]], "cosine"), cands(["q"], [[(1, 9.0), (2, 8.0)]], "bm25")
    got = run(Fuse(), dense=dense, lexical=lexical)
    assert got.row.tolist() == [2, 1] and got.score[0] == got.score[1]
    assert run(Fuse(), lexical=lexical, dense=dense).row.tolist() == [1, 2]  # the declared order is first-seen
    # the commonest exact tie: the first of each channel, both 1/61 — the first input's comes first
    top = run(Fuse(), dense=cands(["q"], [[(5, 0.9), (4, 0.1)]], "cosine"),
              lexical=cands(["q"], [[(3, 2.0), (4, 1.0)]], "bm25"))
    assert top.row.tolist() == [4, 5, 3] and top.score[1] == top.score[2] == 1 / 61
    # blend: equal fused scores (here: the same cosine, no lexical score) keep first-seen order too
    blend = run(Fuse(method="blend"), dense=cands(["q"], [[(8, 0.5), (6, 0.5)]], "cosine"),
                lexical=cands(["q"], [[(9, 3.0)]], "bm25"))
    assert blend.row.tolist() == [8, 6, 9]  # 0.25, 0.25, then 0.5 * 3 / 11


def test_rrf_k_and_weights_keyed_by_input_name():
    a = cands(["q"], [[(1, 0.9), (2, 0.8)]], "cosine")
    b = cands(["q"], [[(2, 5.0), (3, 1.0)]], "bm25")
    got = run(Fuse(rrf_k=10, weights={"b": 2.0}), a=a, b=b)
    expected = {1: 1 / 11, 2: 1 / 12 + 2 / 11, 3: 2 / 12}
    assert dict(zip(got.row.tolist(), got.score.tolist())) == pytest.approx(expected)
    # keyed by name, not position: the same weights follow "b" when it is listed first
    swapped = run(Fuse(rrf_k=10, weights={"b": 2.0}), b=b, a=a)
    assert dict(zip(swapped.row.tolist(), swapped.score.tolist())) == pytest.approx(expected)


def test_any_number_of_inputs():
    inputs = {f"c{i}": cands(["q"], [[(i, 1.0), (9, 0.5)]], "cosine") for i in range(4)}
    got = run(Fuse(), **inputs)
    assert got.row.tolist() == [9, 0, 1, 2, 3]
    assert got.score[0] == pytest.approx(4 / 62)
    for i in range(4):
        assert got.provenance[f"fuse.c{i}.rank"].tolist()[0] == 2


def test_rrf_passthrough_needs_every_later_input_empty():
    first = cands(["q"], [[(1, 0.9)]], "cosine")
    empty = cands(["q"], [[]], "bm25")
    other = cands(["q"], [[(2, 3.0)]], "bm25")
    assert run(Fuse(), a=first, b=empty, c=empty).score.tolist() == [0.9]
    assert run(Fuse(), a=first, b=empty, c=other).scale is Scale.RRF


def test_a_single_input_passes_through_unchanged():
    c = cands(["q"], [[(1, 0.9)]], "cosine", "dense")
    assert run(Fuse(method="blend"), dense=c) is c


def test_duplicate_rows_within_one_input_count_once():
    a = Candidates(QueryBatch.of(["q"]), [0, 0, 0], [1, 2, 1], [0.9, 0.8, 0.7], "cosine")
    b = cands(["q"], [[(1, 1.0)]], "bm25")
    got = run(Fuse(), a=a, b=b)
    assert got.row.tolist() == [1, 2]
    assert got.score.tolist() == pytest.approx([1 / 61 + 1 / 61, 1 / 62])


def test_provenance_columns():
    dense = cands(QUERIES, DENSE, "cosine", "dense")
    lexical = cands(QUERIES, LEXICAL, "bm25", "lexical")
    got = run(Fuse(), dense=dense, lexical=lexical)
    rows, _ = got.per_query(0)  # [1, 3, 9, 7]
    s = got.query_slice(0)
    assert got.provenance["dense.rank"][s].tolist() == [2, 1, 0, 3]  # 0 where absent
    assert np.isnan(got.provenance["dense.score"][s][2])
    assert got.provenance["lexical.score"][s].tolist()[:1] == [5.0]
    assert np.isnan(got.provenance["lexical.score"][s][1])
    assert got.provenance["fuse.dense.contribution"][s].tolist() == pytest.approx([1 / 62, 1 / 61, 0, 1 / 63])
    assert got.provenance["fuse.lexical.contribution"][s].tolist() == pytest.approx([1 / 61, 0, 1 / 62, 0])
    assert got.provenance["fuse.score"].tolist() == got.score.tolist()
    assert got.provenance["fuse.rank"].tolist() == got.rank.tolist()
    passed = got.query_slice(1)
    assert np.isnan(got.provenance["fuse.dense.contribution"][passed]).all()
    assert got.provenance["fuse.dense.score"][passed].tolist() == [0.7, 0.6]
    # a column both inputs carry: the first input holding the row wins
    a = cands(["q"], [[(1, 0.9)]], "cosine").with_provenance({"shared": [1.0]})
    b = cands(["q"], [[(1, 3.0), (2, 1.0)]], "bm25").with_provenance({"shared": [2.0, 3.0]})
    assert run(Fuse(), a=a, b=b).provenance["shared"].tolist() == [1.0, 3.0]


def test_all_queries_passing_through_keep_the_input_scale():
    got = run(Fuse(), dense=cands(["q"], [[(1, 0.5)]], "cosine"), lexical=cands(["q"], [[]], "bm25"))
    assert got.scale is Scale.COSINE


def test_empty_inputs_give_an_empty_result():
    got = run(Fuse(), dense=cands(["a", "b"], [[], []], "cosine", "dense"), lexical=cands(["a", "b"], [[], []], "bm25"))
    assert len(got) == 0 and got.scale is Scale.RRF and "dense.score" in got.provenance


def test_inputs_must_share_the_query_batch():
    with pytest.raises(StageError, match="computed for different query batches"):
        run(Fuse(), a=cands(["x"], [[(1, 1.0)]]), b=cands(["y"], [[(1, 1.0)]], "bm25"))


def test_blend_checks_scales_at_run_time_too():
    with pytest.raises(StageError, match='method "blend" needs exactly one cosine and one bm25 input'):
        run(Fuse(method="blend"), a=cands(["x"], [[(1, 1.0)]]), b=cands(["x"], [[(2, 1.0)]]))


@pytest.mark.parametrize("kwargs, message", [
    ({"method": "sum"}, "must be one of 'rrf', 'blend'"),
    ({"alpha": 1.5}, "in \\[0, 1\\]"),
    ({"bm25_sat_k": 0}, "> 0"),
    ({"rrf_k": -1}, ">= 0"),
    ({"weights": {"a": float("inf")}}, "finite numbers >= 0"),
])
def test_parameters_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Fuse(**kwargs)


@st.composite
def channel_pairs(draw):
    n_queries = draw(st.integers(1, 3))
    dense, lexical = [], []
    for _ in range(n_queries):
        rows = draw(st.lists(st.integers(0, 12), unique=True, max_size=6))
        scores = sorted(draw(st.lists(st.sampled_from([-0.5, 0.0, 0.25, 0.5, 0.75, 1.0]),
                                      min_size=len(rows), max_size=len(rows))), reverse=True)
        dense.append(list(zip(rows, scores)))
        rows = draw(st.lists(st.integers(0, 12), unique=True, max_size=6))
        scores = sorted(draw(st.lists(st.sampled_from([-1.0, 0.0, 0.5, 2.0, 7.5]), min_size=len(rows),
                                      max_size=len(rows))), reverse=True)
        lexical.append(list(zip(rows, scores)))
    return dense, lexical


@settings(max_examples=150, deadline=None)
@given(channel_pairs(), st.sampled_from(["rrf", "blend"]), st.sampled_from([0, 1, 60]),
       st.sampled_from([0.0, 0.3, 1.0]))
def test_fuse_equals_the_seed_semantics(pair, method, rrf_k, alpha):
    dense, lexical = pair
    batch = QueryBatch.of([f"q{i}" for i in range(len(dense))])
    got = run(Fuse(method=method, rrf_k=rrf_k, alpha=alpha), dense=cands(batch, dense, "cosine", "dense"),
              lexical=cands(batch, lexical, "bm25", "lexical"))
    assert_matches(got, [reference(d, lex, method, rrf_k, alpha) for d, lex in zip(dense, lexical)])
