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

The protocol, the output check and the cross-encoder live in
:mod:`irflow.kernels.rerankers` (the rerank stage uses them too); this module
is the seed API on top of them.

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
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from irflow.errors import RerankError, RerankerUnavailable
from irflow.kernels.rerankers import (
    DEFAULT_CROSS_ENCODER,
    CrossEncoderReranker,
    Reranker,
    Segment,
    check_count,
    cross_encoder_reranker,
    score_segments,
)

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


def _check_limit(limit: int | None) -> None:
    if limit is not None:
        check_count("limit", limit, minimum=0)


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
    check_count("fetch_k", fetch_k, minimum=1)

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
