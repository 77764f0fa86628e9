"""The seed retrieval API: ``search()`` and its companions.

``search()`` is not special code: it runs the built-in recipe
``recipes/search`` (``irflow.load_recipe("search")``) and nothing else, each
argument becoming a recipe parameter — so
``load_recipe("search").run(corpus, q, **params).hits == search(corpus, q, **params)``
and a trace of that recipe explains any search.  The path: formulate ->
filter -> dense / lexical / hybrid (RRF or blend) -> surface weights and the
cut to the fetch depth -> rerank -> dependency boost -> best surface per
artifact, top ``k``.

Besides it, this module gathers the rest of the seed's ``ir.retrieve``:
:func:`as_retriever`, :func:`fuse_hits`, :func:`dependency_evidence_boost`,
:func:`records_for_artifact`, :class:`NoLedgerEntry` and the constants.

>>> from irflow.store.corpus import build
>>> corpus = build([{"artifact_id": "unbox", "surface_kind": "name", "text": "unbox archives"}])
>>> [hit.artifact_id for hit in search(corpus, "unbox", mode="hybrid")]
['unbox']
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from irflow.api.boosts import dependency_evidence_boost
from irflow.api.constants import (
    DFLT_BLEND_ALPHA,
    DFLT_BM25_SAT_K,
    DFLT_RRF_K,
    FUSIONS,
    MODES,
    Identity,
    Retriever,
    ScoreBoost,
)
from irflow.api.federate import fuse_hits
from irflow.engine.executor import check_corpus
from irflow.engine.recipe import Recipe, load_recipe
from irflow.engine.validators import check_surface_weights
from irflow.errors import ArgumentError, NoLedgerEntry, SearchError
from irflow.store.corpus import open_corpus
from irflow.store.ledger import records_for_artifact
from irflow.store.records import SearchHit

__all__ = [
    "search",
    "as_retriever",
    "BoundRetriever",
    "SearchError",
    "search_recipe",
    "MODES",
    "FUSIONS",
    "DFLT_RRF_K",
    "DFLT_BLEND_ALPHA",
    "DFLT_BM25_SAT_K",
    "ScoreBoost",
    "Identity",
    "Retriever",
    "dependency_evidence_boost",
    "fuse_hits",
    "records_for_artifact",
    "NoLedgerEntry",
]


@functools.lru_cache(maxsize=1)
def search_recipe() -> Recipe:
    """The built-in recipe ``search()`` runs, loaded and validated once."""
    return load_recipe("search")


def _check_choice(name: str, value: Any, valid: Sequence[str]) -> None:
    if not isinstance(value, str) or value not in valid:
        raise SearchError(f"unknown {name} {value!r}; valid {name}s: {', '.join(valid)}")


def _open(corpus: Any) -> Any:
    """A corpus as given, or the one a path or a name opens."""
    if isinstance(corpus, (str, os.PathLike)):
        return open_corpus(corpus)
    check_corpus(corpus, "search()")
    return corpus


def _surfaces(surfaces: Iterable[str] | str | None) -> tuple[str, ...] | str | None:
    # the seed takes any iterable of kinds; a recipe parameter must be a list (or one kind)
    if surfaces is None or isinstance(surfaces, str):
        return surfaces
    if isinstance(surfaces, (Mapping, bytes)) or not isinstance(surfaces, Iterable):
        # iterating a dict would pass its keys, silently; a number is no list of kinds
        raise ArgumentError(f"surfaces must be a surface kind or a list of kinds (e.g. ['name', 'readme']), "
                            f"got {type(surfaces).__name__}")
    return tuple(surfaces)


def search(
    corpus: Any,
    query: str,
    *,
    k: int = 10,
    filter: Mapping[str, Any] | None = None,
    surfaces: Iterable[str] | None = None,
    per_artifact: bool = True,
    mode: str = "dense",
    fusion: str = "rrf",
    rrf_k: int = DFLT_RRF_K,
    alpha: float = DFLT_BLEND_ALPHA,
    bm25_sat_k: float = DFLT_BM25_SAT_K,
    fetch_k: int | None = None,
    rerank: Callable[..., Any] | str | None = None,
    rerank_text: str | Callable[[Any, Mapping[str, Any]], str] = "surface",
    rerank_max_chars: int = 2000,
    bm25: Mapping[str, Any] | None = None,
    formulate: Callable[[str], str | Sequence[str]] | None = None,
    surface_weights: Mapping[str, float] | None = None,
    dep_boost: ScoreBoost | None = None,
) -> list[SearchHit]:
    """Return the top-``k`` :class:`~irflow.store.records.SearchHit` for ``query``.

    ``corpus`` is a Corpus, a corpus path or a corpus name.  ``filter`` and
    ``surfaces`` make one candidate set shared by both channels; ``mode``
    is ``"dense"`` (exact cosine), ``"lexical"`` (BM25 over the candidates,
    ``bm25`` passing k1 / b / epsilon) or ``"hybrid"`` (both, fused by
    ``fusion``: ``"rrf"`` with ``rrf_k``, or ``"blend"`` with ``alpha`` and
    ``bm25_sat_k``).  Each channel fetches ``fetch_k`` (default
    ``max(k * 5, 50)`` when collapsing per artifact, reranking, weighing or
    boosting, else ``k``).  ``surface_weights`` multiply the first-stage
    score per surface kind before the cut to ``fetch_k``; ``rerank`` (a
    Reranker, a registry name, ``"cross-encoder[:<model>]"``) re-scores
    what is left, with segment texts per ``rerank_text`` cut to
    ``rerank_max_chars``; ``dep_boost`` adds ``hit -> float``; then the best
    surface per artifact (``per_artifact``), top ``k``.  ``formulate``
    rewrites the query first: several texts run one sub-search each
    (``per_artifact=False``) and their union collapses.

    An empty or whitespace-only ``query`` returns ``[]`` in every mode: it
    has no terms for BM25 and no direction for dense search (otherwise every
    record would tie at one arbitrary score).  A query whose words are all
    stopwords finds nothing lexically; dense search still ranks by its
    embedding.

    Raises :class:`SearchError` (a ValueError) for an unknown ``mode`` or
    ``fusion`` — ``fusion`` is checked in every mode —, ``WeightError`` (a
    ValueError) for weights that are not finite and non-negative, and a
    ValueError (RecipeError) naming the stage for other invalid values.

    >>> from irflow.store.corpus import build
    >>> corpus = build([{"artifact_id": "a", "surface_kind": "name", "text": "sql parser"}])
    >>> search(corpus, "parser", mode="lexical")[0].artifact_id
    'a'
    """
    _check_choice("mode", mode, MODES)
    _check_choice("fusion", fusion, FUSIONS)
    recipe = search_recipe()  # loads the stage kinds too
    check_surface_weights(surface_weights)  # the argument's own message, not the recipe stage's
    if not isinstance(query, str):
        raise ArgumentError(f"search() takes one query string, got {type(query).__name__}; for a batch of "
                        "queries run irflow.load_recipe(\"search\").run(corpus, [q1, q2, ...])")
    result = recipe.run(
        _open(corpus), query, k=k, filter=filter, surfaces=_surfaces(surfaces), per_artifact=per_artifact,
        mode=mode, fusion=fusion, rrf_k=rrf_k, alpha=alpha, bm25_sat_k=bm25_sat_k, fetch_k=fetch_k,
        rerank=rerank, rerank_text=rerank_text, rerank_max_chars=rerank_max_chars, bm25=bm25,
        formulate=formulate, surface_weights=surface_weights, dep_boost=dep_boost,
    )
    return result.hits


#: The keyword arguments of :func:`search` (what ``as_retriever`` may bind).
SEARCH_ARGUMENTS: tuple[str, ...] = tuple(
    name for name, p in inspect.signature(search).parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY)


def _check_arguments(arguments: Mapping[str, Any], where: str) -> None:
    unknown = sorted(set(arguments) - set(SEARCH_ARGUMENTS))
    if unknown:
        raise TypeError(f"{where} got unknown search() argument(s) {', '.join(unknown)}; valid: "
                        f"{', '.join(SEARCH_ARGUMENTS)}")
    if "mode" in arguments:
        _check_choice("mode", arguments["mode"], MODES)
    if "fusion" in arguments:
        _check_choice("fusion", arguments["fusion"], FUSIONS)


class BoundRetriever:
    """A :data:`~irflow.api.constants.Retriever` bound to one corpus: ``(query, **overrides) -> hits``.

    Calls :func:`search` with the bound defaults; a per-call keyword
    overrides a bound default.  ``.corpus`` is the bound (opened) corpus,
    ``.defaults`` the bound arguments (read-only).
    """

    def __init__(self, corpus: Any, defaults: Mapping[str, Any]) -> None:
        self.corpus = corpus
        self.defaults: Mapping[str, Any] = MappingProxyType(dict(defaults))

    def __call__(self, query: str, **overrides: Any) -> list[SearchHit]:
        _check_arguments(overrides, "a retriever call")
        return search(self.corpus, query, **{**self.defaults, **overrides})

    def __repr__(self) -> str:
        name = getattr(self.corpus, "name", None)
        bound = ", ".join(f"{key}={value!r}" for key, value in self.defaults.items())
        return f"BoundRetriever(corpus={name!r}{', ' if bound else ''}{bound})"


def as_retriever(corpus_or_name: Any, **search_defaults: Any) -> BoundRetriever:
    """Bind ONE corpus to the uniform :data:`~irflow.api.constants.Retriever` contract.

    Returns ``retrieve(query, **overrides) -> list[SearchHit]`` calling
    :func:`search` with ``search_defaults`` (a per-call keyword overrides a
    bound default).  A corpus name or path is opened once, here; pass an open
    corpus to skip that.  The bound corpus is ``retrieve.corpus``.  Unknown
    argument names (TypeError) and an unknown mode or fusion (SearchError)
    are refused when binding.

    >>> from irflow.store.corpus import build
    >>> corpus = build([{"artifact_id": "a", "surface_kind": "name", "text": "sql parser"}])
    >>> retrieve = as_retriever(corpus, mode="hybrid", k=20)
    >>> [h.artifact_id for h in retrieve("parser", k=1)], retrieve.corpus is corpus
    (['a'], True)
    """
    _check_arguments(search_defaults, "as_retriever()")
    return BoundRetriever(_open(corpus_or_name), search_defaults)
