"""What a score means: the scale that travels with every batch of candidates.

A stage reads it to refuse an input it cannot interpret, validation to check
a recipe before it runs, traces and explanations to say what a number is.

>>> Scale("rrf").ordinal, str(Scale.COSINE)
(True, 'cosine')
"""

from __future__ import annotations

import enum

__all__ = ["Scale"]


class Scale(str, enum.Enum):
    """What the score of a :class:`Candidates` batch means.

    The scale travels with the scores so that a stage can refuse an input it
    cannot interpret (``blend`` needs a cosine and a bm25 input; an absolute
    floor makes no sense on an ordinal ``rrf`` score) and so that traces and
    explanations can say what a number is.
    """

    COSINE = "cosine"
    BM25 = "bm25"
    RRF = "rrf"
    BLEND = "blend"
    WEIGHTED = "weighted"
    RERANK = "rerank"
    BOOSTED = "boosted"
    CUSTOM = "custom"
    MIXED = "mixed"
    NONE = "none"

    @property
    def doc(self) -> str:
        """One line saying what a score on this scale means."""
        return _SCALE_DOCS[self]

    @property
    def ordinal(self) -> bool:
        """True when only the order of scores means something (no absolute floors)."""
        return self in (Scale.RRF, Scale.MIXED, Scale.NONE)

    def __str__(self) -> str:
        return self.value


_SCALE_DOCS: dict[Scale, str] = {
    Scale.COSINE: "cosine similarity of query and record embeddings, in [-1, 1]",
    Scale.BM25: "Okapi BM25 (or a variant) over the candidates, >= 0, unbounded",
    Scale.RRF: "reciprocal rank fusion, sum of weight/(rrf_k + rank); ordinal",
    Scale.BLEND: "alpha*cosine + (1-alpha)*bm25/(bm25+bm25_sat_k); keeps cosine's magnitude",
    Scale.WEIGHTED: "a first-stage score multiplied by a per-surface-kind weight",
    Scale.RERANK: "a reranker's own score (its scale is the reranker's)",
    Scale.BOOSTED: "a score plus a structural boost",
    Scale.CUSTOM: "a score from a third-party stage",
    Scale.MIXED: "queries of the batch are on different scales (a fusion passed some through)",
    Scale.NONE: "no score (an empty or switched-off batch)",
}
