"""Reranking — a precision pass over retrieved segments.

First-stage retrieval casts a wide, cheap net; a *reranker* re-scores a
handful of candidates with a slower, more accurate model.  The standard
two-stage pattern is "retrieve ``fetch_k`` cheaply, rerank, keep the top
``limit``".  This module is that pattern as plain functions:

- :class:`Reranker` — the structural protocol ``(query, segments) -> one score
  per segment``; any plain function of that shape *is* a reranker.
- :func:`rerank` — re-score and re-order segment dicts; each returned copy
  carries the score in ``metadata["rerank_score"]``.
- :func:`with_reranker` — wrap a retrieve-style callable so every call
  over-fetches, reranks and trims.
- :func:`cross_encoder_reranker` — a ready reranker backed by a
  sentence-transformers ``CrossEncoder``, imported lazily.
- :func:`score_segments` — the one place a reranker's output is checked (count
  and finiteness), shared by :func:`rerank` and the engine's rerank stage.

A segment is a mapping with at least ``"text"`` (usually ``"id"`` and
``"metadata"`` too).

>>> segments = [{'text': 'cat', 'id': '1'}, {'text': 'dog', 'id': '2'},
...             {'text': 'cathedral', 'id': '3'}]
>>> def by_length(query, segments):
...     return [len(segment['text']) for segment in segments]
>>> [segment['text'] for segment in rerank('a query', segments, by_length, limit=2)]
['cathedral', 'cat']
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence, runtime_checkable

import attrs
import numpy as np

from irflow.errors import RerankError, RerankerUnavailable
from irflow.util.extras import install_hint

__all__ = [
    "Segment",
    "Reranker",
    "RerankError",
    "RerankerUnavailable",
    "DEFAULT_CROSS_ENCODER",
    "score_segments",
    "rerank",
    "with_reranker",
    "cross_encoder_reranker",
    "CrossEncoderReranker",
]

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


def _check_count(name: str, value: Any, *, minimum: int) -> None:
    # bool is an int subclass; limit=True is a bug, not "one".
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise RerankError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_limit(limit: int | None) -> None:
    if limit is not None:
        _check_count("limit", limit, minimum=0)


def _describe(reranker: Any) -> str:
    return getattr(reranker, "__qualname__", None) or repr(reranker)


def score_segments(reranker: Reranker, query: str, segments: Sequence[Segment]) -> np.ndarray:
    """Call *reranker* once on all *segments* and return its scores, checked, as float64.

    The single validation point for reranker output, so :func:`rerank` and the
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


def _scored_copy(segment: Segment, index: int, score: float) -> dict[str, Any]:
    """A copy of *segment* whose (copied) metadata carries ``rerank_score``.

    Two levels are copied — the segment and its metadata — which is exactly
    what we write to; deeper values (vectors, nested lists) are shared, as
    copying them would cost much and protect nothing.
    """
    copied = dict(segment)
    metadata = segment.get("metadata")
    if metadata is None:
        metadata = {}
    elif not isinstance(metadata, Mapping):
        raise RerankError(f"segment #{index} has metadata of type {type(metadata).__name__}; it must be a mapping or absent")
    copied["metadata"] = {**metadata, "rerank_score": float(score)}
    return copied


def rerank(query: str, segments: Sequence[Segment], reranker: Reranker, *, limit: int | None = None) -> list[dict[str, Any]]:
    """Re-score *segments* against *query* with *reranker* and re-order them, best first.

    The reranker is called once with the whole candidate list (never for an
    empty one).  Segments come back sorted by descending score — ties keep
    their incoming order — and cut to *limit* (``None`` keeps all).  Each is a
    copy whose ``metadata["rerank_score"]`` holds the score as a float, so the
    new ranking is auditable; the caller's dicts are left untouched.

    Raises :class:`RerankError` (a ``ValueError``) when the reranker returns a
    score count that differs from the segment count, or non-finite scores.

    >>> segs = [{'text': 'a', 'id': '1'}, {'text': 'bbb', 'id': '2'}]
    >>> ranked = rerank('q', segs, lambda q, s: [len(x['text']) for x in s])
    >>> [r['text'] for r in ranked]
    ['bbb', 'a']
    >>> ranked[0]['metadata']['rerank_score']
    3.0
    """
    _check_limit(limit)
    segments = list(segments)
    for index, segment in enumerate(segments):
        if not isinstance(segment, Mapping):
            raise RerankError(
                f"segment #{index} is a {type(segment).__name__}, not a mapping; "
                "rerank() takes segment dicts with at least a 'text' key"
            )
    if not segments or limit == 0:
        return []  # nothing to rank: spare the (possibly expensive) model call
    scores = score_segments(reranker, query, segments)
    # A stable sort of the negated scores: descending, equal scores keep input order.
    order = np.argsort(-scores, kind="stable")
    if limit is not None:
        order = order[:limit]
    return [_scored_copy(segments[i], int(i), scores[i]) for i in order]


def with_reranker(
    retriever: Callable[..., Sequence[Segment]], reranker: Reranker, *, fetch_k: int = 50
) -> Callable[..., list[dict[str, Any]]]:
    """Decorate a retrieve-style callable with a two-stage reranking pass.

    The result is a drop-in replacement ``(query, *, limit=10, **kwargs)``:
    it calls ``retriever(query, limit=fetch_k, **kwargs)`` (extra keyword
    arguments such as ``filter`` pass straight through), :func:`rerank`\\ s the
    candidates and returns the top ``limit``.  When a caller asks for more than
    ``fetch_k`` it fetches ``limit`` instead, so the wrapper never returns
    fewer results than the plain retriever would.  It keeps the retriever's
    name and docstring, and exposes ``.retriever``, ``.reranker`` and
    ``.fetch_k``.

    >>> pool = [{'text': t, 'id': t} for t in ['ab', 'abcd', 'abc']]
    >>> def base(query, *, limit=10):
    ...     return pool[:limit]
    >>> retrieve = with_reranker(base, lambda q, segs: [len(s['text']) for s in segs], fetch_k=10)
    >>> [s['text'] for s in retrieve('a query', limit=2)]
    ['abcd', 'abc']
    """
    if not callable(retriever):
        raise RerankError(f"retriever must be callable as retriever(query, limit=...), got {retriever!r}")
    if not callable(reranker):
        raise RerankError(f"reranker must be callable as reranker(query, segments), got {reranker!r}")
    _check_count("fetch_k", fetch_k, minimum=1)

    def reranked(query: str, *, limit: int | None = 10, **kwargs: Any) -> list[dict[str, Any]]:
        _check_limit(limit)
        fetch = fetch_k if limit is None else max(fetch_k, limit)
        candidates = retriever(query, limit=fetch, **kwargs)
        return rerank(query, candidates, reranker, limit=limit)

    # Our own signature, not the retriever's: functools.wraps sets __wrapped__,
    # which inspect.signature would otherwise follow to the wrong parameters.
    signature = inspect.signature(reranked)
    try:
        functools.wraps(retriever)(reranked)
    except (AttributeError, TypeError):  # exotic callables: keep our own name and doc
        pass
    reranked.__signature__ = signature  # type: ignore[attr-defined]
    reranked.retriever = retriever  # type: ignore[attr-defined]
    reranked.reranker = reranker  # type: ignore[attr-defined]
    reranked.fetch_k = fetch_k  # type: ignore[attr-defined]
    return reranked


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
    _check_count("batch_size", batch_size, minimum=1)
    try:
        from sentence_transformers import CrossEncoder
    except ImportError as exc:
        raise RerankerUnavailable(
            f"cross_encoder_reranker needs sentence-transformers, which could not be imported ({exc}); "
            f"install it with: {install_hint('st')}"
        ) from exc
    model = CrossEncoder(model_name, device=device)
    return CrossEncoderReranker(model_name, model, device, batch_size, predict_kwargs)
