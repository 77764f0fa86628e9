"""The two ways irflow fuses rankings, and their defaults: shared by the fuse stage and the seed API.

- ``"rrf"`` — Reciprocal Rank Fusion: ``sum of weight / (rrf_k + rank)``, ordinal;
- ``"blend"`` — the magnitude-preserving convex blend of a cosine and a BM25
  score: ``alpha * cosine + (1 - alpha) * bm25 / (bm25 + bm25_sat_k)``.

The fuse stage (``stages/fuse.py``) implements them over Candidates and
:func:`irflow.fuse_hits` over hit lists; ``irflow.api.constants`` re-exports
these values as the seed's module constants.

>>> FUSIONS, DFLT_RRF_K
(('rrf', 'blend'), 60)
"""

from __future__ import annotations

__all__ = ["FUSIONS", "DFLT_RRF_K", "DFLT_BLEND_ALPHA", "DFLT_BM25_SAT_K"]

#: Fusion methods: the rank-based Reciprocal Rank Fusion default, or the magnitude-preserving blend.
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
