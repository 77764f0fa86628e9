"""rerank: re-score each query's candidates with a reranker — the precision stage.

The seed's ``rerank`` hook.  The reranker is any :class:`irflow.api.reranking.Reranker`
(``(query, segments) -> one score per segment``): a Python callable, the name
of an :mod:`irflow.registry` entry, or ``"cross-encoder"`` /
``"cross-encoder:<model>"`` for the sentence-transformers cross-encoder,
built lazily once per model.  When that optional extra is missing the stage
warns once (:class:`RerankerUnavailableWarning`) and keeps the first-stage
ranking.

It is called once per query text, with the query text (a formulated
sub-query when there are several) and that query's whole candidate list;
each segment is ``{"text": ..., "id": record id, "metadata": record
metadata}``, the text chosen by ``text``: ``"surface"`` (the matched
surface's text), ``"artifact"`` (the artifact's surfaces joined in plan
order, through the ledger) or a callable ``(corpus, metadata) -> str``;
cut to ``max_chars``.  The reranker's score replaces the candidate's score
(scale ``rerank``) and the candidates are re-sorted *stably*: equal scores
keep the first-stage order (the seed's ``rerank``: "ties keep their incoming
order", README "Ties") — so a coarse reranker, or ``text = "artifact"``
(every surface of an artifact judged on the same text, so scored the
same), leaves the surface that ranked first in front.  Provenance: ``<stage>.score``,
``<stage>.input_score`` and ``<stage>.input_rank`` (the first-stage score
and rank).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import numpy as np

from irflow.engine import CANDIDATES, Candidates, CorpusProtocol, Port, Scale, Stage, StageContext, Upstream, param, \
    positive_int, register_stage, registry
from irflow.errors import RerankError, RerankerUnavailableWarning
from irflow.kernels.rerankers import DEFAULT_CROSS_ENCODER, cross_encoder_reranker, score_segments
from irflow.util.extras import install_hint
from irflow.util.unicode import lone_surrogate, surrogate_reason

from ._util import callable_or_name

__all__ = ["Rerank", "RerankerUnavailableWarning", "resolve_reranker", "RERANK_TEXTS", "ARTIFACT_JOINER"]

#: The named choices of ``text`` (a callable ``(corpus, metadata) -> str`` is the third form).
RERANK_TEXTS: tuple[str, ...] = ("surface", "artifact")

#: What joins an artifact's surfaces for ``text = "artifact"``.
ARTIFACT_JOINER = "\n"

_CROSS_ENCODER = "cross-encoder"


# cross-encoders by spec: loading a model is slow, and a missing extra should warn only once
_BUILT: dict[str, Any] = {}
_BUILT_LOCK = threading.Lock()


def _is_cross_encoder(spec: str) -> bool:
    return spec == _CROSS_ENCODER or spec.startswith(_CROSS_ENCODER + ":")


def resolve_reranker(spec: Any) -> Any:
    """The reranker ``spec`` names: itself if callable, a cross-encoder, or a registry entry.

    ``"cross-encoder"`` / ``"cross-encoder:<model>"`` build
    :func:`irflow.api.reranking.cross_encoder_reranker` once per spec; when
    sentence-transformers is missing this warns once and returns None (keep
    the first-stage ranking).  Other strings are :mod:`irflow.registry` names.
    """
    if spec is None or callable(spec):
        return spec
    if not _is_cross_encoder(spec):
        return registry.lookup(spec, what="reranker")
    with _BUILT_LOCK:
        if spec in _BUILT:
            return _BUILT[spec]
        model = spec.partition(":")[2] or DEFAULT_CROSS_ENCODER
        try:
            built = cross_encoder_reranker(model)
        except ImportError as error:
            warnings.warn(RerankerUnavailableWarning(
                f"rerank={spec!r} needs the optional sentence-transformers extra ({error}); keeping the "
                f"first-stage ranking. Install it with: {install_hint('st')}"), stacklevel=2)
            built = None
        _BUILT[spec] = built
        return built


def _forget_cross_encoders() -> None:
    """Drop the built cross-encoders and the warned specs (tests; after installing the extra)."""
    with _BUILT_LOCK:
        _BUILT.clear()


def _text_spec(instance: Any, attribute: Any, value: Any) -> None:
    if callable(value) or value in RERANK_TEXTS:
        return
    raise ValueError(f"must be \"surface\", \"artifact\" or a callable (corpus, metadata) -> str, got {value!r}")


@register_stage
@attrs.frozen
class Rerank(Stage):
    """Re-score each query's candidates with a reranker; its score replaces theirs."""

    kind = "rerank"
    inputs = (Port("candidates", CANDIDATES, "the fetched candidates, ranked"),)
    output = CANDIDATES

    reranker: Any = param(
        None, validator=callable_or_name,
        doc="a Reranker callable, an irflow.registry name, or cross-encoder[:<model>]; none: pass through")
    text: str | Callable[[Any, Mapping[str, Any]], str] = param(
        "surface", validator=_text_spec,
        doc="segment text: surface (the matched surface), artifact (all its surfaces), or (corpus, metadata) -> str")
    max_chars: int = param(2000, validator=positive_int, doc="segment texts are cut to this many characters")

    def output_scales(self, inputs: Mapping[str, tuple[Upstream, ...]]) -> frozenset[Scale] | None:
        ups = inputs.get("candidates", ())
        before = ups[0].scales if ups else None
        if self.reranker is None:
            return before
        # a missing cross-encoder extra keeps the first-stage scores
        return None if before is None else before | {Scale.RERANK}

    def check(self, inputs: Mapping[str, tuple[Upstream, ...]]) -> list[str]:
        ups = inputs.get("candidates", ())
        if self.reranker is not None and ups and ups[0].scales and Scale.BOOSTED in ups[0].scales:
            return [f"the reranker's score replaces the candidate score, so the boost of input {ups[0].name!r} "
                    "would be lost; place the boost stage after rerank"]
        return []

    def passes_through(self, live: Mapping[str, int]) -> str | None:
        return "candidates" if self.reranker is None else None

    def run(self, ctx: StageContext, candidates: Candidates) -> Candidates:
        reranker = resolve_reranker(self.reranker)
        if reranker is None:
            return candidates
        corpus = ctx.corpus
        ids = corpus.record_ids_of(candidates.row).tolist()
        records = corpus.records(candidates.row)  # the reranker API is per segment: small (fetch_k)
        texts = self._texts(corpus, records)
        scores = np.empty(len(candidates), dtype=np.float64)
        for i, text in enumerate(candidates.queries.texts):
            span = candidates.query_slice(i)
            if span.start == span.stop:
                continue  # nothing to rank: spare the (possibly expensive) model call
            segments = [{"text": texts[j], "id": ids[j], "metadata": records[j].metadata}
                        for j in range(span.start, span.stop)]
            scores[span] = score_segments(reranker, text, segments)
        columns = {f"{ctx.name}.score": scores, f"{ctx.name}.input_score": candidates.score,
                   f"{ctx.name}.input_rank": candidates.rank}
        return candidates.with_scores(scores, Scale.RERANK, columns).sorted_by_score()

    def _texts(self, corpus: Any, records: list[Any]) -> list[str]:
        if self.text == "surface":
            texts = [r.text for r in records]
        elif self.text == "artifact":
            joined = _artifact_texts(corpus, records)  # once per artifact, however many of its surfaces matched
            texts = [joined.get(record.artifact_id, record.text) for record in records]
        else:
            texts = []
            for record in records:
                text = self.text(corpus, record.metadata)  # type: ignore[operator]  # not a name: the callable
                if not isinstance(text, str):
                    raise TypeError(f"rerank text callable {getattr(self.text, '__qualname__', self.text)!r} "
                                    f"returned {type(text).__name__}; it must return the segment text (a str)")
                at = lone_surrogate(text)  # a reranker's tokenizer takes valid Unicode only (irflow.util.unicode)
                if at >= 0:
                    raise RerankError(f"rerank text callable {getattr(self.text, '__qualname__', self.text)!r} "
                                      f"returned unusable text for record {record.id!r}: {surrogate_reason(text, at)}")
                texts.append(text)
        return [t[: self.max_chars] for t in texts]


def _artifact_texts(corpus: CorpusProtocol, records: list[Any]) -> dict[str, str]:
    """Each artifact's surfaces joined in plan order, through the ledger (one ``sibling_rows`` call).

    An artifact without a ledger entry is left out: its matched surface stands
    alone.  A stale ledger entry (a listed record the corpus does not hold) is
    a KeyError naming it, as :func:`irflow.records_for_artifact` raises.
    """
    artifacts = list(dict.fromkeys(record.artifact_id for record in records))
    siblings = corpus.sibling_rows(artifacts)
    if siblings.stale:
        artifact, record_id = siblings.stale[0]
        raise KeyError(
            f"record {record_id!r} listed by the ledger for artifact {artifact!r} is missing from the store: "
            "the ledger is stale (an interrupted build or an out-of-band delete_record); rebuild the corpus to "
            "repair it")
    return {artifact: ARTIFACT_JOINER.join(r.text for r in corpus.records(siblings.rows_of(i)))
            for i, artifact in enumerate(artifacts) if siblings.listed[i]}
