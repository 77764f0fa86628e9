"""The built-in recipes as Python builders (the third equal form of each recipe).

``builders.hybrid() == irflow.load_recipe("hybrid")``: the tests keep the
Python, TOML and YAML forms equal.  Start from these to build variants::

    from irflow.recipes.builders import hybrid
    recipe = hybrid().with_stage("dense", "lexical", bm25={"k1": 1.2})
"""

from __future__ import annotations

from typing import Any, Callable

from irflow.engine.recipe import Recipe, RecipeBuilder, ref

__all__ = ["hybrid", "dense", "lexical", "search", "hybrid_rerank", "expand_rerank", "BUILDERS"]


def _first_stage(builder: RecipeBuilder, *, lexical_params: bool) -> RecipeBuilder:
    """The parameters and the filter stage every built-in recipe starts with."""
    builder.param("k", 10).param("per_artifact", True)
    builder.param("filter", None).param("surfaces", None).param("fetch_k", None)
    if lexical_params:
        builder.param("bm25", None)
    builder.derive("fetch_k", "over_fetch", k=ref("k"), if_any=[ref("per_artifact")])
    builder.stage("candidates", "filter", filter=ref("filter"), surfaces=ref("surfaces"))
    return builder


def hybrid() -> Recipe:
    """Dense and BM25 over the filtered candidates, fused by the blend (or RRF), best surface per artifact."""
    builder = RecipeBuilder(
        "hybrid", output="collapse",
        description="dense and BM25 over the filtered candidates, fused by the blend (or RRF: fusion=rrf), "
                    "best surface per artifact")
    _first_stage(builder, lexical_params=True)
    builder.param("fusion", "blend", choices=["rrf", "blend"])
    builder.params(rrf_k=60, alpha=0.5, bm25_sat_k=16.0)
    builder.stage("dense", "dense", inputs=["candidates"], fetch_k=ref("fetch_k"))
    builder.stage("lexical", "lexical", inputs=["candidates"], fetch_k=ref("fetch_k"), bm25=ref("bm25"))
    builder.stage("fuse", "fuse", inputs=["dense", "lexical"], method=ref("fusion"), rrf_k=ref("rrf_k"),
                  alpha=ref("alpha"), bm25_sat_k=ref("bm25_sat_k"))
    builder.stage("collapse", "collapse", inputs=["fuse"], k=ref("k"), per_artifact=ref("per_artifact"))
    return builder.build()


def _deepen(builder: RecipeBuilder, **when: Any) -> RecipeBuilder:
    """``deepen_to``: ``k`` for a per-artifact search over one channel whose ``fetch_k`` the caller did not set.

    Such a channel fetches each query text deeper until its candidates hold
    ``k`` artifacts or no more match: the exact per-artifact top ``k``,
    never fewer hits while more artifacts match.
    """
    args: dict[str, Any] = {"k": ref("k"), "given": ref("fetch_k"), "if_all": [ref("per_artifact")]}
    if when:
        args["when"] = when
    return builder.derive("deepen_to", "deepen", **args)


def dense() -> Recipe:
    """Exact cosine over the filtered candidates, best surface per artifact."""
    builder = RecipeBuilder("dense", output="collapse",
                            description="exact cosine over the filtered candidates, best surface per artifact")
    _first_stage(builder, lexical_params=False)
    _deepen(builder)
    builder.derive("lean", "none_set")  # nothing after the channel reads its depth (first_depths)
    builder.stage("dense", "dense", inputs=["candidates"], fetch_k=ref("fetch_k"), deepen_to=ref("deepen_to"),
                  lean=ref("lean"))
    builder.stage("collapse", "collapse", inputs=["dense"], k=ref("k"), per_artifact=ref("per_artifact"))
    return builder.build()


def lexical() -> Recipe:
    """BM25 over the filtered candidates, best surface per artifact."""
    builder = RecipeBuilder("lexical", output="collapse",
                            description="BM25 over the filtered candidates, best surface per artifact")
    _first_stage(builder, lexical_params=True)
    _deepen(builder)
    builder.derive("lean", "none_set")  # nothing after the channel reads its depth (first_depths)
    builder.stage("lexical", "lexical", inputs=["candidates"], fetch_k=ref("fetch_k"), bm25=ref("bm25"),
                  deepen_to=ref("deepen_to"), lean=ref("lean"))
    builder.stage("collapse", "collapse", inputs=["lexical"], k=ref("k"), per_artifact=ref("per_artifact"))
    return builder.build()


def search() -> Recipe:
    """The seed's ``search()`` as a recipe: what :func:`irflow.api.retrieve.search` runs.

    formulate -> filter -> dense and/or lexical (by ``mode``) -> fuse ->
    weight (surface weights, cut to the fetch depth) -> rerank -> boost ->
    collapse.  Its parameters are exactly the arguments of ``search()``.
    """
    builder = RecipeBuilder(
        "search", output="collapse",
        description="the seed's search(): filter, dense (mode=dense, the default), lexical or hybrid (fused by "
                    "RRF, or the blend: fusion=blend), surface weights, rerank (none by default), boost, "
                    "best surface per artifact")
    builder.params(k=10, per_artifact=True)
    builder.param("mode", "dense", choices=["dense", "lexical", "hybrid"])
    builder.param("fusion", "rrf", choices=["rrf", "blend"])
    builder.params(rrf_k=60, alpha=0.5, bm25_sat_k=8.0, rerank_text="surface", rerank_max_chars=2000)
    for name in ("filter", "surfaces", "fetch_k", "rerank", "bm25", "formulate", "surface_weights", "dep_boost"):
        builder.param(name, None)
    later = [ref("rerank"), ref("surface_weights"), ref("dep_boost")]
    builder.derive("fetch_k", "over_fetch", k=ref("k"), if_any=[ref("per_artifact"), *later])
    # a query formulated into several texts runs one sub-search per text with per_artifact = false
    builder.derive("subquery_fetch_k", "over_fetch", given=ref("fetch_k"), k=ref("k"), if_any=later)
    _deepen(builder, mode=["dense", "lexical"])  # one channel: a fused ranking's scores depend on fetch_k
    builder.derive("lean", "none_set", of=later)  # no later stage reads the depth: k rows may do (first_depths)
    depth: dict[str, Any] = {"fetch_k": ref("fetch_k"), "subquery_fetch_k": ref("subquery_fetch_k"),
                             "deepen_to": ref("deepen_to")}
    builder.stage("formulate", "formulate", formulator=ref("formulate"))
    builder.stage("candidates", "filter", filter=ref("filter"), surfaces=ref("surfaces"))
    channel_inputs = {"mask": "candidates", "query": "formulate"}
    builder.stage("dense", "dense", inputs=channel_inputs, when={"mode": ["dense", "hybrid"]}, **depth,
                  lean=ref("lean"))
    builder.stage("lexical", "lexical", inputs=channel_inputs, when={"mode": ["lexical", "hybrid"]}, **depth,
                  bm25=ref("bm25"), lean=ref("lean"))
    builder.stage("fuse", "fuse", inputs=["dense", "lexical"], method=ref("fusion"), rrf_k=ref("rrf_k"),
                  alpha=ref("alpha"), bm25_sat_k=ref("bm25_sat_k"))
    builder.stage("weight", "weight", inputs=["fuse"], weights=ref("surface_weights"), **depth)
    builder.stage("rerank", "rerank", inputs=["weight"], reranker=ref("rerank"), text=ref("rerank_text"),
                  max_chars=ref("rerank_max_chars"))
    builder.stage("boost", "boost", inputs=["rerank"], boost=ref("dep_boost"))
    builder.stage("collapse", "collapse", inputs=["boost"], k=ref("k"), per_artifact=ref("per_artifact"),
                  subquery_k=ref("k"))
    return builder.build()


def _reranked_hybrid(builder: RecipeBuilder) -> RecipeBuilder:
    """Parameters and stages shared by the reranking recipes, up to the cut to the fetch depth.

    filter -> dense + lexical -> fuse -> cut: the reranker must see at most
    ``fetch_k`` candidates per query (the seed's rule), and a fused union
    holds up to two channels' worth.  The fetch depth over-fetches
    (``max(k * 5, 50)``) when collapsing per artifact or reranking.
    """
    builder.params(k=10, per_artifact=True)
    for name in ("filter", "surfaces", "fetch_k", "bm25", "rerank"):
        builder.param(name, None)
    builder.param("fusion", "blend", choices=["rrf", "blend"])
    builder.params(rrf_k=60, alpha=0.5, bm25_sat_k=16.0, rerank_text="surface", rerank_max_chars=2000)
    builder.derive("fetch_k", "over_fetch", k=ref("k"), if_any=[ref("per_artifact"), ref("rerank")])
    builder.stage("candidates", "filter", filter=ref("filter"), surfaces=ref("surfaces"))
    builder.stage("dense", "dense", inputs=["candidates"], fetch_k=ref("fetch_k"))
    builder.stage("lexical", "lexical", inputs=["candidates"], fetch_k=ref("fetch_k"), bm25=ref("bm25"))
    builder.stage("fuse", "fuse", inputs=["dense", "lexical"], method=ref("fusion"), rrf_k=ref("rrf_k"),
                  alpha=ref("alpha"), bm25_sat_k=ref("bm25_sat_k"))
    builder.stage("cut", "weight", inputs=["fuse"], fetch_k=ref("fetch_k"))  # no weights: only the cut
    return builder


def _rerank_and_collapse(builder: RecipeBuilder, upstream: str) -> RecipeBuilder:
    """The reranker (``$rerank``; none passes through) and the per-artifact collapse to ``k``."""
    builder.stage("rerank", "rerank", inputs=[upstream], reranker=ref("rerank"), text=ref("rerank_text"),
                  max_chars=ref("rerank_max_chars"))
    builder.stage("collapse", "collapse", inputs=["rerank"], k=ref("k"), per_artifact=ref("per_artifact"))
    return builder


def hybrid_rerank() -> Recipe:
    """Hybrid retrieval, then a reranker over the fused candidates, best surface per artifact.

    filter -> dense + lexical -> fuse (rrf) -> cut to fetch_k -> rerank ->
    collapse.  ``rerank`` defaults to none (pass-through, offline); pass a
    Reranker at run time, a registry name, or ``"cross-encoder"``
    (``--set rerank=cross-encoder`` on the command line).
    """
    builder = RecipeBuilder(
        "hybrid-rerank", output="collapse",
        description="dense and BM25 fused by the blend (or RRF: fusion=rrf), the top fetch_k reranked by the "
                    "reranker given (none by default: the fused order), best surface per artifact")
    _reranked_hybrid(builder)
    return _rerank_and_collapse(builder, "cut").build()


def expand_rerank() -> Recipe:
    """Retrieve, expand each hit to its neighbouring surfaces, rerank them all, best surface per artifact.

    filter -> dense + lexical -> fuse -> cut to fetch_k -> expand (``window``
    plan positions around each hit, optionally only ``expand_surfaces``
    kinds) -> rerank -> collapse.  The reranker judges every surface near a
    hit, so an artifact is represented by its best-judged surface.  Without a
    reranker, siblings tie with the hit that brought them and the collapse
    keeps the first of them in plan order.
    """
    builder = RecipeBuilder(
        "expand-rerank", output="collapse",
        description="dense and BM25 fused by the blend (or RRF: fusion=rrf), each hit expanded to its "
                    "neighbouring surfaces, all reranked by the reranker given (none by default), "
                    "best surface per artifact")
    _reranked_hybrid(builder)
    builder.param("window", 1).param("expand_surfaces", None)
    builder.stage("expand", "expand", inputs=["cut"], window=ref("window"), surface_kind=ref("expand_surfaces"))
    return _rerank_and_collapse(builder, "expand").build()


#: Built-in recipe name -> its Python builder.
BUILDERS: dict[str, Callable[[], Recipe]] = {"hybrid": hybrid, "dense": dense, "lexical": lexical,
                                             "search": search, "hybrid-rerank": hybrid_rerank,
                                             "expand-rerank": expand_rerank}
