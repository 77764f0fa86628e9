"""Rerankers: the ``(query, segments) -> scores`` protocol, the one check of a reranker's output, the cross-encoder.

The mechanics both the seed API (:mod:`irflow.api.reranking`: ``rerank``,
``with_reranker``) and the engine's rerank stage use.  A segment is a
mapping with at least ``"text"`` (usually ``"id"`` and ``"metadata"`` too).
sentence-transformers is an optional heavy dependency, imported only when a
cross-encoder is built.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs
import numpy as np

from irflow.errors import RerankError, RerankerUnavailable
from irflow.util.extras import install_hint

__all__ = ["Segment", "Reranker", "DEFAULT_CROSS_ENCODER", "score_segments", "check_count", "cross_encoder_reranker",
           "CrossEncoderReranker"]

#: A retrieved passage: a mapping with at least ``"text"``, usually ``"id"`` and ``"metadata"``.
Segment = Mapping[str, Any]

#: The cross-encoder :func:`cross_encoder_reranker` loads when given no model name.
DEFAULT_CROSS_ENCODER = "cross-encoder/ms-marco-MiniLM-L-6-v2"


@runtime_checkable
class Reranker(Protocol):
    """A callable that re-scores ``(query, segments)`` — higher means more relevant.

    Returns one score per segment, in the same order.  A Protocol, not a base
    class, so a plain function of the right shape already is a reranker:

    >>> def by_length(query, segments):
    ...     return [len(s['text']) for s in segments]
    >>> isinstance(by_length, Reranker)
    True
    """

    def __call__(self, query: str, segments: Sequence[Segment]) -> Sequence[float]: ...


def check_count(name: str, value: Any, *, minimum: int) -> None:
    """RerankError unless ``value`` is an integer >= ``minimum`` (a count such as ``limit`` or ``batch_size``)."""
    # bool is an int subclass; limit=True is a bug, not "one".
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise RerankError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _describe(reranker: Any) -> str:
    return getattr(reranker, "__qualname__", None) or repr(reranker)


def score_segments(reranker: Reranker, query: str, segments: Sequence[Segment]) -> np.ndarray:
    """Call *reranker* once on all *segments* and return its scores, checked, as float64.

    The single validation point for reranker output, so ``rerank()`` and the
    engine's rerank stage refuse the same things: a score count that differs
    from the segment count, non-numeric scores, and NaN or infinite scores
    (which would make the new order arbitrary).  A column vector ``(n, 1)`` is
    accepted as ``n`` scores.

    >>> score_segments(lambda q, s: [1, 2.5], 'q', [{'text': 'a'}, {'text': 'b'}])
    array([1. , 2.5])
    """
    if not callable(reranker):
        raise RerankError(f"reranker must be callable as reranker(query, segments), got {reranker!r}")
    n = len(segments)
    raw = reranker(query, segments)
    if isinstance(raw, Iterator):
        raw = list(raw)  # a generator of scores is a fine answer; numpy cannot read one directly
    try:
        scores = np.asarray(raw)
    except (TypeError, ValueError):  # ragged nesting and the like
        scores = np.asarray(None)
    # Numbers only: numpy would otherwise turn ["0.5", "2"] into floats without a word.
    if raw is None or scores.dtype.kind not in "biuf":
        raise RerankError(
            f"reranker {_describe(reranker)} returned a {type(raw).__name__} that is not a sequence of numbers; "
            "a Reranker must return one float per segment"
        )
    scores = scores.astype(np.float64, copy=False)
    if scores.ndim == 2 and scores.shape[1] == 1:
        scores = scores[:, 0]  # models with one output label often return a column
    if scores.ndim != 1:
        raise RerankError(
            f"reranker {_describe(reranker)} returned scores of shape {scores.shape} for {n} segments; "
            "a Reranker must return a flat sequence with one score per segment"
        )
    if scores.shape[0] != n:
        raise RerankError(
            f"reranker {_describe(reranker)} returned {scores.shape[0]} scores for {n} segments; "
            "a Reranker must return exactly one score per segment, in order"
        )
    bad = np.flatnonzero(~np.isfinite(scores))
    if bad.size:
        shown = ", ".join(f"#{i}={float(scores[i])!r}" for i in bad[:5])
        raise RerankError(
            f"reranker {_describe(reranker)} returned {bad.size} non-finite score(s) ({shown}); "
            "scores must be finite numbers so the order they define is meaningful"
        )
    return scores


@attrs.frozen(eq=False)
class CrossEncoderReranker:
    """A :class:`Reranker` scoring ``(query, segment['text'])`` pairs with a loaded ``CrossEncoder``.

    Built by :func:`cross_encoder_reranker`, which loads the model once; every
    call is one ``CrossEncoder.predict`` over all pairs.  Frozen and with a
    readable repr so traces can say which model scored a run.
    """

    model_name: str
    model: Any = attrs.field(repr=False)
    device: str | None = None
    batch_size: int = 32
    predict_kwargs: Mapping[str, Any] = attrs.field(factory=dict, converter=dict)

    def __call__(self, query: str, segments: Sequence[Segment]) -> list[float]:
        if len(segments) == 0:
            return []
        pairs = []
        for index, segment in enumerate(segments):
            try:
                pairs.append((query, segment["text"]))
            except (KeyError, TypeError):
                raise RerankError(f"segment #{index} has no 'text' to score; cross-encoder segments need a 'text' key") from None
        scores = self.model.predict(pairs, batch_size=self.batch_size, **self.predict_kwargs)
        return [float(s) for s in np.asarray(scores, dtype=np.float64).reshape(-1)]


def cross_encoder_reranker(
    model_name: str = DEFAULT_CROSS_ENCODER, *, device: str | None = None, batch_size: int = 32, **predict_kwargs: Any
) -> CrossEncoderReranker:
    """Build a :class:`Reranker` backed by a sentence-transformers ``CrossEncoder``.

    A cross-encoder scores a (query, passage) pair jointly: the accurate,
    slower second stage.  sentence-transformers is an optional heavy
    dependency, imported only here, so importing this module stays cheap.
    The model is loaded once per call of this factory; *device* ``None`` lets
    sentence-transformers choose; *predict_kwargs* go to ``CrossEncoder.predict``.

    Raises :class:`RerankerUnavailable` (an ``ImportError``) naming
    the install command (:func:`irflow.util.extras.install_hint`) when sentence-transformers is missing.

    Example (downloads a model on first use)::

        retrieve = with_reranker(base_retriever, cross_encoder_reranker())
    """
    if not isinstance(model_name, str) or not model_name:
        raise RerankError(f"model_name must be a non-empty string (a model name or path), got {model_name!r}")
    if device is not None and not isinstance(device, str):
        raise RerankError(f"device must be a torch device string ('cpu', 'cuda', 'mps') or None, got {device!r}")
    check_count("batch_size", batch_size, minimum=1)
    try:  # lazily: an optional heavy dependency (torch), and `import irflow` must stay cheap
        from sentence_transformers import CrossEncoder
    except ImportError as exc:
        raise RerankerUnavailable(
            f"cross_encoder_reranker needs sentence-transformers, which could not be imported ({exc}); "
            f"install it with: {install_hint('st')}"
        ) from exc
    model = CrossEncoder(model_name, device=device)
    return CrossEncoderReranker(model_name, model, device, batch_size, predict_kwargs)
