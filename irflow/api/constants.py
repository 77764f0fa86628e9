"""Module constants and type aliases of the seed retrieval API.

These are the names ``ir.retrieve`` exposes besides its functions: the valid
ranking modes and fusion methods, the fusion defaults, and the three callable
shapes callers plug in (a score boost, a cross-source identity, a retriever).
They live in one dependency-free module so the engine, the stages and the
public API all read the same values.

>>> "hybrid" in MODES and DFLT_RRF_K == 60
True
"""

from __future__ import annotations

from typing import Any, Callable, Union

from irflow.store.records import SearchHit

__all__ = [
    "MODES",
    "FUSIONS",
    "DFLT_RRF_K",
    "DFLT_BLEND_ALPHA",
    "DFLT_BM25_SAT_K",
    "ScoreBoost",
    "Identity",
    "Retriever",
]

#: Ranking modes accepted by ``search()``: exact cosine, Okapi BM25, or both fused.
MODES: tuple[str, ...] = ("dense", "lexical", "hybrid")

#: Hybrid fusion methods accepted by ``search()`` (``mode="hybrid"``): the
#: rank-based Reciprocal Rank Fusion default, or the magnitude-preserving blend.
FUSIONS: tuple[str, ...] = ("rrf", "blend")

#: RRF rank constant — the ``k`` of ``1 / (k + rank)`` (standard default 60).
DFLT_RRF_K: int = 60

#: Dense weight in the ``"blend"`` convex combination (``1 - alpha`` on the
#: bounded lexical term); ``0.5`` weighs the two equally.
DFLT_BLEND_ALPHA: float = 0.5

#: BM25 saturation constant for ``"blend"``: ``bm25 -> bm25 / (bm25 + k)``, a
#: bounded squash to ``[0, 1)`` that needs no per-query normalization (which
#: would erase the absolute magnitude abstention calibration depends on).
DFLT_BM25_SAT_K: float = 8.0

#: A ranking-time score boost: ``hit -> float``, added to each candidate's
#: score after fusion and the reranker, before the per-artifact collapse.
ScoreBoost = Callable[[SearchHit], float]

#: How ``fuse_hits()`` detects cross-source duplicates: ``None`` (never merge;
#: same id in another corpus is another artifact), ``"pointer"`` (merge hits
#: whose ``pointer`` match) or a ``hit -> hashable`` callable (a falsy key
#: falls back to per-source identity).
Identity = Union[Callable[[SearchHit], Any], str, None]

#: A retriever: ``(query, **overrides) -> list[SearchHit]`` — one query, one
#: corpus, as a swappable callable (what ``as_retriever()`` returns).
Retriever = Callable[..., list[SearchHit]]
