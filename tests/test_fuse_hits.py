"""fuse_hits (issue 4 §2, seed ir.retrieve.fuse_hits): weighted cross-source RRF, by rank only."""

from __future__ import annotations

import copy
import doctest
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import irflow.api.federate as federate_module
from irflow.errors import IrflowError
from irflow.api.federate import FusionError, fuse_hits
from irflow.store.records import SearchHit


def hit(artifact, score, *, source=None, pointer=None, text="", **meta):
    metadata = dict(meta)
    if pointer is not None:
        metadata["pointer"] = pointer
    return SearchHit(artifact, "description", score, text, metadata, source=source)


def summary(hits):
    return [(h.source, h.artifact_id, h.score) for h in hits]


def test_module_docstrings_are_valid_doctests():
    result = doctest.testmod(federate_module)
    assert result.attempted > 0 and result.failed == 0


# --- hand-computed RRF ---------------------------------------------------------------------


def test_two_sources_rrf_by_rank_and_never_by_raw_score():
    # B's raw scores are 10x A's: they must not matter, only ranks do.
    fused = fuse_hits({"A": [hit("x", 0.9), hit("y", 0.5)], "B": [hit("y", 12.0), hit("z", 3.0)]})
    # identity None: A:y and B:y are different results.  1/61 > 1/62; ties first-seen.
    assert summary(fused) == [("A", "x", 1 / 61), ("B", "y", 1 / 61), ("A", "y", 1 / 62), ("B", "z", 1 / 62)]
    meta = {(h.source, h.artifact_id): (h.metadata["source_score"], h.metadata["source_rank"]) for h in fused}
    assert meta == {("A", "x"): (0.9, 1), ("A", "y"): (0.5, 2), ("B", "y"): (12.0, 1), ("B", "z"): (3.0, 2)}
    assert all("fused_sources" not in h.metadata for h in fused)


def test_rrf_k_changes_the_constant():
    fused = fuse_hits({"A": [hit("x", 0.9), hit("y", 0.5)], "B": [hit("y", 1.0)]}, rrf_k=0, identity=lambda h: h.artifact_id)
    assert summary(fused) == [("B", "y", 1 / 2 + 1 / 1), ("A", "x", 1.0)]
    fused = fuse_hits({"A": [hit("x", 0.9), hit("y", 0.5)], "B": [hit("y", 1.0)]}, rrf_k=10, identity=lambda h: h.artifact_id)
    assert summary(fused) == [("B", "y", 1 / 12 + 1 / 11), ("A", "x", 1 / 11)]


def test_weights_scale_each_sources_contribution_and_ignore_absent_keys():
    fused = fuse_hits(
        {"A": [hit("x", 0.9), hit("y", 0.5)], "B": [hit("y", 12.0), hit("z", 3.0)]},
        weights={"A": 2.0, "B": 0.5, "ghost": 7.0},
    )
    assert summary(fused) == [("A", "x", 2 / 61), ("A", "y", 2 / 62), ("B", "y", 0.5 / 61), ("B", "z", 0.5 / 62)]


def test_unlisted_sources_weigh_one_and_zero_weight_is_allowed():
    fused = fuse_hits({"A": [hit("x", 1.0)], "B": [hit("y", 1.0)], "C": [hit("z", 1.0)]}, weights={"B": 0.0, "C": 3})
    assert summary(fused) == [("C", "z", 3 / 61), ("A", "x", 1 / 61), ("B", "y", 0.0)]


@pytest.mark.parametrize("bad", [-0.5, math.nan, math.inf, -math.inf, "1", True, None])
def test_negative_or_non_finite_weights_are_rejected(bad):
    with pytest.raises(ValueError) as info:
        fuse_hits({"A": [hit("x", 1.0)], "B": [hit("y", 1.0)]}, weights={"A": bad})
    assert isinstance(info.value, IrflowError) and "weights['A']" in str(info.value)


def test_a_bad_weight_for_an_absent_source_is_still_rejected():
    with pytest.raises(FusionError):
        fuse_hits({"A": [hit("x", 1.0)]}, weights={"ghost": -1})


# --- stamping and the None pseudo-source ---------------------------------------------------


def test_untagged_hits_are_stamped_with_their_key_and_existing_tags_win():
    fused = fuse_hits({"k1": [hit("x", 1.0), hit("y", 0.5, source="corpus")], "k2": [hit("z", 2.0)]})
    assert {(h.artifact_id, h.source) for h in fused} == {("x", "k1"), ("y", "corpus"), ("z", "k2")}


def test_one_corpus_under_two_keys_counts_as_one_source():
    # Both lists hold corpus A's hits: (A, x) is one result whose RRF mass adds up.
    fused = fuse_hits({"q1": [hit("x", 0.9, source="A"), hit("y", 0.8, source="A")], "q2": [hit("x", 0.4, source="A")]})
    assert summary(fused) == [("A", "x", 2 / 61), ("A", "y", 1 / 62)]
    assert "fused_sources" not in fused[0].metadata  # one source, however many keys


def test_none_key_is_the_untagged_pseudo_source():
    fused = fuse_hits({None: [hit("x", 0.3), hit("y", 0.9)], "B": [hit("x", 5.0)]})
    # the None list is one rank group (ordered by its raw scores); its hits stay unattributed
    assert summary(fused) == [(None, "y", 1 / 61), ("B", "x", 1 / 61), (None, "x", 1 / 62)]
    fused = fuse_hits({None: [hit("x", 0.3, source="C")], "B": [hit("y", 5.0)]})
    assert {h.source for h in fused} == {"C", "B"}  # existing tags win under None too


def test_none_key_weight_can_be_given():
    fused = fuse_hits({None: [hit("x", 0.3)], "B": [hit("y", 5.0)]}, weights={None: 2.0})
    assert summary(fused) == [(None, "x", 2 / 61), ("B", "y", 1 / 61)]


# --- within-list dedup ---------------------------------------------------------------------


def test_duplicates_within_a_list_collapse_to_their_best_raw_score_before_ranking():
    pool = [hit("x", 0.2, text="x-low"), hit("y", 0.9), hit("x", 0.7, text="x-best"), hit("z", 0.1)]
    fused = fuse_hits({"A": pool, "B": [hit("w", 1.0)]})
    # A ranks y(0.9)=1, x(0.7)=2, z(0.1)=3 after collapsing x: x is counted once.
    assert summary(fused) == [("A", "y", 1 / 61), ("B", "w", 1 / 61), ("A", "x", 1 / 62), ("A", "z", 1 / 63)]
    x = next(h for h in fused if h.artifact_id == "x")
    assert x.text == "x-best" and x.metadata["source_score"] == 0.7 and x.metadata["source_rank"] == 2


def test_lists_are_ordered_by_raw_score_with_ties_in_list_order():
    fused = fuse_hits({"A": [hit("x", 0.5), hit("y", 0.9), hit("z", 0.5)], "B": [hit("w", 1.0)]})
    ranks = {h.artifact_id: h.metadata["source_rank"] for h in fused if h.source == "A"}
    assert ranks == {"y": 1, "x": 2, "z": 3}


def test_identity_duplicates_within_a_list_collapse_too():
    pool = [hit("x", 0.9, pointer="p"), hit("x2", 0.95, pointer="p"), hit("y", 0.5)]
    fused = fuse_hits({"A": pool, "B": [hit("z", 1.0)]}, identity="pointer")
    a = [(h.artifact_id, h.metadata["source_rank"]) for h in fused if h.source == "A"]
    assert a == [("x2", 1), ("y", 2)]


def test_equal_best_scores_within_a_list_keep_the_earlier_hit():
    fused = fuse_hits({"A": [hit("x", 0.5, text="first"), hit("x", 0.5, text="second")]})
    assert [h.text for h in fused] == ["first"]


# --- identity --------------------------------------------------------------------------------


def test_identity_none_never_merges_across_sources():
    fused = fuse_hits({"A": [hit("x", 1.0, pointer="p")], "B": [hit("x", 1.0, pointer="p")]})
    assert len(fused) == 2


def test_pointer_identity_merges_sources_and_the_best_rank_represents():
    fused = fuse_hits(
        {
            "A": [hit("a-x", 0.9, pointer="p1"), hit("a-y", 0.5, pointer="p2")],
            "B": [hit("b-y", 12.0, pointer="p2", text="from B"), hit("b-z", 3.0, pointer="p3")],
        },
        identity="pointer",
    )
    assert summary(fused) == [("B", "b-y", 1 / 62 + 1 / 61), ("A", "a-x", 1 / 61), ("B", "b-z", 1 / 62)]
    merged = fused[0]
    assert merged.text == "from B"
    assert merged.metadata["fused_sources"] == ["A", "B"]  # mapping order of first appearance
    assert merged.metadata["source_score"] == 12.0 and merged.metadata["source_rank"] == 1
    assert "fused_sources" not in fused[1].metadata


def test_representative_tie_on_rank_goes_to_the_earlier_source_in_mapping_order():
    fused = fuse_hits({"B": [hit("b", 1.0, pointer="p")], "A": [hit("a", 9.0, pointer="p")]}, identity="pointer")
    assert len(fused) == 1
    assert (fused[0].source, fused[0].artifact_id, fused[0].metadata["source_score"]) == ("B", "b", 1.0)
    assert fused[0].metadata["fused_sources"] == ["B", "A"]


def test_pointer_identity_reads_the_hit_pointer_keys():
    fused = fuse_hits({"A": [hit("x", 1.0, path="/a.py")], "B": [hit("y", 1.0, url="/a.py")]}, identity="pointer")
    assert len(fused) == 1


def test_a_hit_without_a_pointer_keeps_per_source_identity():
    fused = fuse_hits({"A": [hit("x", 1.0)], "B": [hit("x", 1.0)]}, identity="pointer")
    assert summary(fused) == [("A", "x", 1 / 61), ("B", "x", 1 / 61)]


def test_callable_identity_and_falsy_keys_fall_back():
    doi = lambda h: h.metadata.get("doi")  # noqa: E731
    fused = fuse_hits(
        {
            "A": [hit("a1", 1.0, doi="10.1/x"), hit("a2", 0.5, doi="")],
            "B": [hit("b1", 1.0, doi="10.1/x"), hit("a2", 0.5)],
        },
        identity=doi,
    )
    # 10.1/x merges; ("A","a2") and ("B","a2") have falsy keys -> per-source, distinct.
    assert summary(fused) == [("A", "a1", 2 / 61), ("A", "a2", 1 / 62), ("B", "a2", 1 / 62)]
    assert fused[0].metadata["fused_sources"] == ["A", "B"]


def test_callable_identity_zero_is_falsy_and_tuples_work():
    fused = fuse_hits({"A": [hit("x", 1.0)], "B": [hit("y", 1.0)]}, identity=lambda h: 0)
    assert len(fused) == 2
    fused = fuse_hits({"A": [hit("x", 1.0)], "B": [hit("y", 1.0)]}, identity=lambda h: ("same", 1))
    assert len(fused) == 1


def test_fused_sources_lists_the_none_pseudo_source_too():
    fused = fuse_hits({None: [hit("x", 1.0, pointer="p")], "B": [hit("y", 1.0, pointer="p")]}, identity="pointer")
    assert fused[0].source is None and fused[0].metadata["fused_sources"] == [None, "B"]


def test_invalid_identity_is_rejected():
    with pytest.raises(FusionError, match="identity"):
        fuse_hits({"A": []}, identity="path")
    with pytest.raises(FusionError, match="identity"):
        fuse_hits({"A": []}, identity=42)
    with pytest.raises(FusionError, match="unhashable"):
        fuse_hits({"A": [hit("x", 1.0)], "B": [hit("x", 1.0)]}, identity=lambda h: ["list"])


# --- single source -------------------------------------------------------------------------


def test_single_source_passes_through_with_raw_scores_deduped_and_stamped():
    fused = fuse_hits({"A": [hit("x", 0.3), hit("y", 0.9), hit("x", 0.5), hit("z", -2.0)]}, weights={"A": 5.0})
    assert summary(fused) == [("A", "y", 0.9), ("A", "x", 0.5), ("A", "z", -2.0)]
    assert [(h.metadata["source_score"], h.metadata["source_rank"]) for h in fused] == [(0.9, 1), (0.5, 2), (-2.0, 3)]


def test_empty_lists_do_not_count_as_sources():
    fused = fuse_hits({"A": [hit("x", 0.3), hit("y", 0.9)], "B": [], None: []})
    assert summary(fused) == [("A", "y", 0.9), ("A", "x", 0.3)]


def test_single_source_is_cut_to_k():
    assert summary(fuse_hits({"A": [hit("x", 0.3), hit("y", 0.9)]}, k=1)) == [("A", "y", 0.9)]


def test_nothing_to_fuse_gives_an_empty_list():
    assert fuse_hits({}) == []
    assert fuse_hits({"A": [], "B": []}) == []


# --- ordering, k, validation ---------------------------------------------------------------


def test_equal_fused_scores_keep_first_seen_order():
    fused = fuse_hits({"A": [hit("x", 1.0), hit("y", 0.5)], "B": [hit("y", 1.0), hit("x", 0.5)]}, identity=lambda h: h.artifact_id)
    # x and y both score 1/61 + 1/62; x is seen first (A, rank 1)
    assert [h.artifact_id for h in fused] == ["x", "y"]
    assert fused[0].score == fused[1].score


def test_k_truncates_the_fused_ranking():
    lists = {"A": [hit(c, 1.0 - i / 10) for i, c in enumerate("abcde")], "B": [hit(c, 1.0) for c in "fg"]}
    full = fuse_hits(lists)
    assert fuse_hits(lists, k=3) == full[:3]
    assert fuse_hits(lists, k=0) == []
    assert fuse_hits(lists, k=100) == full


@pytest.mark.parametrize("kwargs", [{"k": -1}, {"k": 1.5}, {"k": True}, {"rrf_k": -1}, {"rrf_k": math.nan}, {"rrf_k": "60"}])
def test_invalid_k_and_rrf_k_are_rejected(kwargs):
    with pytest.raises(FusionError):
        fuse_hits({"A": [hit("x", 1.0)]}, **kwargs)


def test_malformed_inputs_are_rejected_clearly():
    with pytest.raises(FusionError, match="mapping"):
        fuse_hits([hit("x", 1.0)])
    with pytest.raises(FusionError, match="str or None"):
        fuse_hits({1: [hit("x", 1.0)]})
    with pytest.raises(FusionError, match="sequence of SearchHit"):
        fuse_hits({"A": hit("x", 1.0)})
    with pytest.raises(FusionError, match=r"hits_by_source\['A'\]\[1\]"):
        fuse_hits({"A": [hit("x", 1.0), {"artifact_id": "y"}]})


def test_inputs_are_never_mutated_and_outputs_are_copies():
    a = [hit("x", 0.9, pointer="p", tags=["t"]), hit("y", 0.5)]
    b = [hit("z", 2.0, pointer="p")]
    snapshot = copy.deepcopy([h.to_dict() for h in a + b])
    fused = fuse_hits({"A": a, "B": b}, identity="pointer")
    assert [h.to_dict() for h in a + b] == snapshot
    assert all(f.metadata is not h.metadata for f in fused for h in a + b)


# --- properties over random inputs ---------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "c", None])
HITS = st.builds(
    lambda artifact, score, tag, pointer: hit(artifact, score, source=tag, pointer=pointer, extra=[artifact]),
    st.sampled_from("pqrstu"),
    st.floats(-5, 5, allow_nan=False),
    st.one_of(st.none(), st.none(), st.sampled_from(["a", "z"])),
    st.one_of(st.none(), st.sampled_from(["p1", "p2", "p3"])),
)
POOLS = st.dictionaries(KEYS, st.lists(HITS, max_size=7), max_size=4)
WEIGHTS = st.one_of(st.none(), st.dictionaries(st.sampled_from(["a", "b", "c", "ghost"]), st.floats(0, 4)))


def reference(pool, *, identity, weights, rrf_k):
    """An independent, straight-line restatement of the seed's rules."""

    def key_of(source, h):
        if identity == "pointer" and h.pointer:
            return ("shared", h.pointer)
        return ("local", source, h.artifact_id)

    lists = []
    for key, hits in pool.items():
        positions = sorted(range(len(hits)), key=lambda i: (-hits[i].score, i))
        ranked, seen = [], set()
        for i in positions:
            source = hits[i].source if hits[i].source is not None else key
            ident = key_of(source, hits[i])
            if ident not in seen:
                seen.add(ident)
                ranked.append((ident, source, hits[i]))
        if ranked:
            lists.append((key, ranked))
    return lists, key_of


def expected_scores(lists, weights, rrf_k):
    total, best_rank, order = {}, {}, []
    for key, ranked in lists:
        w = (weights or {}).get(key, 1.0)
        for rank, (ident, _, _) in enumerate(ranked, start=1):
            if ident not in total:
                total[ident] = 0.0
                order.append(ident)
            total[ident] += w / (rrf_k + rank)
            best_rank[ident] = min(best_rank.get(ident, rank), rank)
    return total, best_rank, order


@settings(max_examples=300, deadline=None)
@given(POOLS, WEIGHTS, st.sampled_from([None, "pointer"]), st.sampled_from([0, 1, 60]))
def test_property_fused_scores_are_the_hand_sum_of_weighted_reciprocal_ranks(pool, weights, identity, rrf_k):
    snapshot = {k: [h.to_dict() for h in v] for k, v in pool.items()}
    fused = fuse_hits(pool, rrf_k=rrf_k, weights=weights, identity=identity)
    assert {k: [h.to_dict() for h in v] for k, v in pool.items()} == snapshot  # never mutated
    lists, key_of = reference(pool, identity=identity, weights=weights, rrf_k=rrf_k)
    scores = [h.score for h in fused]
    assert scores == sorted(scores, reverse=True)
    assert all("source_score" in h.metadata and "source_rank" in h.metadata for h in fused)
    idents = [key_of(h.source, h) for h in fused]
    assert len(set(idents)) == len(idents)
    if len(lists) == 1:
        (_, ranked), = lists
        assert [(i, h.score, h.metadata["source_rank"]) for i, h in zip(idents, fused)] == [
            (ident, raw.score, rank) for rank, (ident, _, raw) in enumerate(ranked, start=1)
        ]
        return
    total, best_rank, order = expected_scores(lists, weights, rrf_k)
    # same summation order as the rules state, so equal to the last bit; order: score, then first seen
    assert idents == sorted(order, key=lambda ident: (-total[ident], order.index(ident)))
    for ident, h in zip(idents, fused):
        assert h.score == total[ident]
        assert h.metadata["source_rank"] == best_rank[ident]


@settings(max_examples=200, deadline=None)
@given(st.lists(HITS, max_size=10), st.sampled_from(["a", None]))
def test_property_single_source_preserves_order_and_raw_scores(hits, key):
    ranked = sorted(hits, key=lambda h: -h.score)  # a ranked list, as a retriever returns it
    fused = fuse_hits({key: ranked})
    seen, expected = set(), []
    for h in ranked:
        source = h.source if h.source is not None else key
        if (source, h.artifact_id) not in seen:
            seen.add((source, h.artifact_id))
            expected.append((source, h.artifact_id, h.score))
    assert summary(fused) == expected
    assert [h.metadata["source_rank"] for h in fused] == list(range(1, len(expected) + 1))
    assert [h.metadata["source_score"] for h in fused] == [s for _, _, s in expected]


@settings(max_examples=200, deadline=None)
@given(POOLS, st.integers(0, 12), st.sampled_from([None, "pointer"]))
def test_property_k_is_a_prefix_of_the_full_ranking(pool, k, identity):
    assert fuse_hits(pool, k=k, identity=identity) == fuse_hits(pool, identity=identity)[:k]


@settings(max_examples=150, deadline=None)
@given(POOLS, st.floats(0.25, 8))
def test_property_scaling_every_weight_scales_every_fused_score(pool, factor):
    keys = list(pool)
    base = fuse_hits(pool, weights={k: 1.0 for k in keys if k is not None})
    scaled = fuse_hits(pool, weights=dict.fromkeys(keys, factor) | {None: factor})
    if sum(1 for v in pool.values() if v) < 2:
        assert scaled == base  # pass-through ignores weights
        return
    assert [h.score for h in scaled] == pytest.approx([h.score * factor for h in base])
    assert {(h.source, h.artifact_id) for h in scaled} == {(h.source, h.artifact_id) for h in base}
