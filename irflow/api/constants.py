"""Module constants and type aliases of the seed retrieval API.

These are the names ``ir.retrieve`` exposes besides its functions: the valid
ranking modes and fusion methods, the fusion defaults, and the three callable
shapes callers plug in (a score boost, a cross-source identity, a retriever).
The fusion methods and their defaults are defined in :mod:`irflow.kernels.fusion`
(the fuse stage reads them there) and re-exported here.

>>> "hybrid" in MODES and DFLT_RRF_K == 60
True
"""

from __future__ import annotations

from typing import Any, Callable, Union

from irflow.kernels.fusion import DFLT_BLEND_ALPHA, DFLT_BM25_SAT_K, DFLT_RRF_K, FUSIONS
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
