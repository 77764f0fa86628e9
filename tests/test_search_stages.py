"""The stage kinds issue 4 adds — formulate, weight, rerank, boost — and the engine hooks search() needs."""

from __future__ import annotations

import pytest

import irflow.engine.registry as registry
from engine_fakes import cands
from irflow.engine.batches import Candidates, QueryBatch, Scale
from irflow.errors import RecipeError
from irflow.engine.ports import CANDIDATES, QUERIES, QUERY
from irflow.engine.recipe import OverFetch, RecipeBuilder, ref
from irflow.engine import get_stage_class, StageContext
from irflow.engine.stage import stage_params
from irflow.stages.boost import Boost
from irflow.stages.collapse import Collapse
from irflow.stages.dense import Dense
from irflow.stages.formulate import Formulate, FormulateError
from irflow.stages.rerank import Rerank
from irflow.stages.weight import Weight, WeightError


def ctx(corpus, name, queries):
    return StageContext(corpus, name, queries if isinstance(queries, QueryBatch) else QueryBatch.of(queries))


def kind_of(corpus, row):
    return corpus.record(row).surface_kind


def test_the_kinds_are_registered_with_typed_ports_and_parameters():
    assert [get_stage_class(k) for k in ("formulate", "weight", "rerank", "boost")] == [Formulate, Weight, Rerank,
                                                                                        Boost]
    assert (Formulate.inputs[0].type, Formulate.output) == (QUERY, QUERIES)
    assert all(cls.inputs[0].type is CANDIDATES and cls.output is CANDIDATES for cls in (Weight, Rerank, Boost))
    assert list(stage_params(Formulate)) == ["formulator"]
    assert list(stage_params(Weight)) == ["weights", "fetch_k", "subquery_fetch_k", "deepen_to"]
    assert list(stage_params(Rerank)) == ["reranker", "text", "max_chars"]
    assert list(stage_params(Boost)) == ["boost"]
    assert all(info.doc for cls in (Formulate, Weight, Rerank, Boost) for info in stage_params(cls).values())


@pytest.mark.parametrize("cls, kwargs, message", [
    (Formulate, {"formulator": 3}, "callable or the name of an irflow.registry entry"),
    (Weight, {"weights": {"deps": -2}}, r"surface_weights\['deps'\] is -2; weights must be finite numbers >= 0"),
    (Weight, {"fetch_k": 0}, "positive integer"),
    (Rerank, {"reranker": 1.5}, "callable or the name"),
    (Rerank, {"text": "readme"}, 'must be "surface", "artifact" or a callable'),
    (Rerank, {"max_chars": 0}, "positive integer"),
    (Boost, {"boost": ["x"]}, "callable or the name"),
])
def test_parameters_are_validated(cls, kwargs, message):
    with pytest.raises(ValueError, match=message):
        cls(**kwargs)
    assert issubclass(WeightError, ValueError)


# -- formulate ---------------------------------------------------------------------------------


def test_formulate_expands_the_batch_with_origins(corpus):
    batch = QueryBatch.of(["a b", "c"])
    out = Formulate(lambda q: [q, " ", f"{q} x"] if q == "a b" else "").run(ctx(corpus, "f", batch), batch)
    assert out.texts == ("a b", "a b x", "c") and out.origin.tolist() == [0, 0, 1] and out.originals == batch.texts
    assert Formulate().run(ctx(corpus, "f", batch), batch) is batch  # identity without a formulator


def test_formulate_refuses_other_return_types_and_resolves_registry_names(corpus):
    batch = QueryBatch.of(["q"])
    with pytest.raises(FormulateError, match="returns a string or a list of strings"):
        Formulate(lambda q: 7).run(ctx(corpus, "f", batch), batch)
    with pytest.raises(FormulateError):
        Formulate(lambda q: [q, None]).run(ctx(corpus, "f", batch), batch)
    with registry.registered("dup", lambda q: (q, q + "!")):
        assert Formulate("dup").run(ctx(corpus, "f", batch), batch).texts == ("q", "q!")
    with pytest.raises(KeyError, match="no formulator named 'nope' in irflow.registry"):
        Formulate("nope").run(ctx(corpus, "f", batch), batch)


# -- weight --------------------------------------------------------------------------------------


def test_weight_multiplies_by_kind_resorts_stably_and_cuts(corpus):
    rows = list(range(8))
    c = cands(["q"], [[(r, 1.0 - r * 0.1) for r in rows]], "rrf", "fuse")
    weights = {"deps": 10.0, "description": 0.0}
    out = Weight(weights=weights, fetch_k=5).run(ctx(corpus, "weight", c.queries), c)
    expected = sorted(((r, (1.0 - r * 0.1) * weights.get(kind_of(corpus, r), 1.0)) for r in rows),
                      key=lambda pair: -pair[1])[:5]
    assert out.row.tolist() == [r for r, _ in expected]
    assert out.score.tolist() == pytest.approx([s for _, s in expected])
    assert out.scale is Scale.WEIGHTED
    assert out.provenance["weight.factor"].tolist() == [weights.get(kind_of(corpus, r), 1.0) for r, _ in expected]
    assert out.provenance["weight.input_score"].tolist() == pytest.approx([1.0 - r * 0.1 for r, _ in expected])
    assert out.provenance["fuse.rank"].tolist() == [r + 1 for r, _ in expected]  # carried through


def test_without_weights_the_stage_only_cuts(corpus):
    c = cands(["q", "p"], [[(1, 0.9), (2, 0.8), (3, 0.7)], [(4, 0.5)]], "cosine", "dense")
    out = Weight(fetch_k=2).run(ctx(corpus, "weight", c.queries), c)
    assert out.row.tolist() == [1, 2, 4] and out.scale is Scale.COSINE
    assert Weight().run(ctx(corpus, "weight", c.queries), c) is c
    assert Weight(weights={}).run(ctx(corpus, "weight", c.queries), c) is c


def test_sub_query_texts_get_their_own_depth(corpus):
    batch = QueryBatch.of(["a", "b"]).expand([["a1", "a2"], ["b"]])
    c = Candidates(batch, [0, 0, 0, 1, 1, 1, 2, 2, 2], [0, 1, 2, 3, 4, 5, 6, 7, 8], [.9, .8, .7] * 3, "cosine")
    out = Weight(fetch_k=3, subquery_fetch_k=1).run(ctx(corpus, "weight", batch), c)
    assert out.row.tolist() == [0, 3, 6, 7, 8]


# -- rerank --------------------------------------------------------------------------------------


def test_rerank_replaces_scores_sorts_stably_and_keeps_the_first_stage_in_provenance(corpus):
    c = cands(["q1", "q2"], [[(0, 0.9), (1, 0.8), (2, 0.7)], [(3, 0.6), (4, 0.5)]], "rrf", "fuse")
    calls = []

    def reranker(query, segments):
        calls.append((query, [s["id"] for s in segments]))
        return [1.0 if s["id"] == corpus.record(2).id else 0.0 for s in segments]

    out = Rerank(reranker).run(ctx(corpus, "rr", c.queries), c)
    assert calls == [("q1", [corpus.record(r).id for r in (0, 1, 2)]), ("q2", [corpus.record(r).id for r in (3, 4)])]
    assert out.row.tolist() == [2, 0, 1, 3, 4] and out.score.tolist() == [1, 0, 0, 0, 0]
    assert out.scale is Scale.RERANK
    assert out.provenance["rr.input_score"].tolist() == [0.7, 0.9, 0.8, 0.6, 0.5]
    assert out.provenance["rr.input_rank"].tolist() == [3, 1, 2, 1, 2]
    assert out.provenance["rr.score"].tolist() == [1, 0, 0, 0, 0]


def test_rerank_is_not_called_for_a_query_without_candidates(corpus):
    c = cands(["q1", "q2"], [[], [(3, 0.6)]], "cosine")
    seen = []
    Rerank(lambda q, s: seen.append(q) or [1.0] * len(s)).run(ctx(corpus, "rr", c.queries), c)
    assert seen == ["q2"]


def test_rerank_refuses_bad_scores(corpus):
    c = cands(["q"], [[(0, 0.9), (1, 0.8)]], "cosine")
    with pytest.raises(ValueError, match="returned 1 scores for 2 segments"):
        Rerank(lambda q, s: [1.0]).run(ctx(corpus, "rr", c.queries), c)
    with pytest.raises(ValueError, match="non-finite"):
        Rerank(lambda q, s: [1.0, float("nan")]).run(ctx(corpus, "rr", c.queries), c)
    with pytest.raises(TypeError, match="must return the segment text"):
        Rerank(lambda q, s: [1.0, 1.0], text=lambda corpus, meta: 3).run(ctx(corpus, "rr", c.queries), c)


def test_a_registered_reranker_by_name(corpus):
    c = cands(["q"], [[(0, 0.9), (1, 0.8)]], "cosine")
    with registry.registered("flip", lambda q, s: [0.0, 1.0]):
        assert Rerank("flip").run(ctx(corpus, "rr", c.queries), c).row.tolist() == [1, 0]
    assert Rerank().run(ctx(corpus, "rr", c.queries), c) is c


# -- boost ---------------------------------------------------------------------------------------


def test_boost_adds_a_value_per_hit_and_resorts(corpus):
    c = cands(["q"], [[(0, 0.9), (1, 0.8), (2, 0.7)]], "rerank")
    hits = []

    def boost(hit):
        hits.append(hit)
        return 0.5 if hit.record_id == corpus.record(2).id else 0.0

    out = Boost(boost).run(ctx(corpus, "boost", c.queries), c)
    assert out.row.tolist() == [2, 0, 1] and out.score.tolist() == pytest.approx([1.2, 0.9, 0.8])
    assert out.scale is Scale.BOOSTED
    assert out.provenance["boost.value"].tolist() == [0.5, 0.0, 0.0]
    assert out.provenance["boost.input_score"].tolist() == [0.7, 0.9, 0.8]
    assert [(h.record_id, h.score, h.source) for h in hits] == [
        (corpus.record(r).id, s, "toys") for r, s in ((0, 0.9), (1, 0.8), (2, 0.7))]
    with pytest.raises(ValueError, match="a boost returns a finite number"):
        Boost(lambda hit: float("inf")).run(ctx(corpus, "boost", c.queries), c)
    assert Boost().run(ctx(corpus, "boost", c.queries), c) is c


# -- build-time scale checks -----------------------------------------------------------------------


def _chain(*stages):
    builder = RecipeBuilder("chain", output=stages[-1][0])
    builder.param("reranker", None).param("boost", None).param("weights", None)
    builder.stage("candidates", "filter").stage("dense", "dense", inputs=["candidates"])
    previous = "dense"
    for name, kind, params in stages:
        builder.stage(name, kind, inputs=[previous], **params)
        previous = name
    return builder.build()


def test_weights_after_rerank_and_rerank_after_boost_are_refused_before_running(corpus):
    late = _chain(("rerank", "rerank", {"reranker": ref("reranker")}), ("weight", "weight", {"weights": ref("weights")}))
    with pytest.raises(RecipeError, match="place the weight stage before rerank and boost"):
        late.run(corpus, "q", reranker=lambda q, s: [0.0] * len(s), weights={"deps": 2.0})
    late.run(corpus, "q", weights={"deps": 2.0})  # no reranker: nothing to refuse
    boosted = _chain(("boost", "boost", {"boost": ref("boost")}), ("rerank", "rerank", {"reranker": ref("reranker")}))
    with pytest.raises(RecipeError, match="place the boost stage after rerank"):
        boosted.run(corpus, "q", boost=lambda hit: 1.0, reranker=lambda q, s: [0.0] * len(s))


# -- engine hooks: sub-query depth, per-sub-query cut, over_fetch given -----------------------------


def test_dense_gives_sub_query_texts_their_own_depth(corpus):
    batch = QueryBatch.of(["graph", "sql"]).expand([["graph", "graph network"], ["sql"]])
    mask = corpus.candidate_mask()
    out = Dense(fetch_k=6, subquery_fetch_k=2).run(ctx(corpus, "dense", batch), mask, batch)
    assert out.counts().tolist() == [2, 2, 6]
    full = Dense(fetch_k=6).run(ctx(corpus, "dense", batch), mask, batch)
    assert out.row.tolist() == full.cut(2).row.tolist()[:4] + full.per_query(2)[0].tolist()


def test_collapse_cuts_each_sub_query_to_k_before_merging(corpus):
    # rows 0-2: sqlparse; 3-6: httpx.  sub-query a1 ranks httpx's row 3 third
    batch = QueryBatch.of(["a", "b"]).expand([["a1", "a2"], ["b"]])
    c = Candidates(batch, [0, 0, 0, 1, 2, 2, 2], [0, 1, 3, 4, 3, 0, 5], [.9, .8, .7, .1, .9, .8, .7], "cosine")
    ctx_ = ctx(corpus, "collapse", batch)
    cut = Collapse(k=2, per_artifact=False, subquery_k=2).run(ctx_, c)
    assert cut.per_query(0)[0].tolist() == [0, 1]  # row 3 was a1's third: not in a1's top 2
    assert cut.per_query(1)[0].tolist() == [3, 0]  # a single text is not cut before collapsing
    assert Collapse(k=2, per_artifact=False).run(ctx_, c).per_query(0)[0].tolist() == [0, 1]
    assert Collapse(k=3, per_artifact=False).run(ctx_, c).per_query(0)[0].tolist() == [0, 1, 3]
    assert Collapse(k=3, per_artifact=False, subquery_k=2).run(ctx_, c).per_query(0)[0].tolist() == [0, 1, 4]


def test_over_fetch_takes_a_given_value_from_another_parameter():
    assert OverFetch(k=3, given=7)(None) == 7 and OverFetch(k=3, given=7)(9) == 9
    assert OverFetch(k=3, given=None, if_any=(True,))(None) == 50
    builder = RecipeBuilder("r", output="collapse").params(k=3, fetch_k=None, per_artifact=True, deep=None)
    builder.derive("fetch_k", "over_fetch", k=ref("k"), if_any=[ref("per_artifact")])
    builder.derive("sub", "over_fetch", given=ref("fetch_k"), k=ref("k"), if_any=[ref("deep")])
    builder.stage("candidates", "filter").stage("dense", "dense", inputs=["candidates"], fetch_k=ref("sub"))
    recipe = builder.stage("collapse", "collapse", inputs=["dense"], k=ref("k")).build()
    # derived values read the parameters as given: sub sees fetch_k = None, not the derived 50
    assert (recipe.resolve_params()["fetch_k"], recipe.resolve_params()["sub"]) == (50, 3)
    assert recipe.resolve_params({"fetch_k": 8})["sub"] == 8
    assert recipe.resolve_params({"deep": True})["sub"] == 50
