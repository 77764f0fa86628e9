"""Helpers shared by the built-in first-stage kinds (not public API)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from irflow.engine import Candidates, QueryBatch, Scale


def unique_texts(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Distinct texts in first-seen order and, per text, the index of its distinct text.

    Embedding / tokenizing each distinct text once matters when a formulated
    batch repeats the original query.  A loop over the queries of a batch
    (not over candidates): small, and dict-based dedup keeps first-seen order.
    """
    if len(texts) == 1:  # one query (every search())
        return [texts[0]], np.zeros(1, dtype=np.int64)
    index: dict[str, int] = {}
    inverse = np.fromiter((index.setdefault(t, len(index)) for t in texts), dtype=np.int64, count=len(texts))
    return list(index), inverse


def spread(topk: Any, inverse: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(query_index, row, score)`` for the whole batch from a TopK over its distinct texts.

    Query ``i`` of the batch gets the hits of distinct text ``inverse[i]``:
    one gather with an index built from per-query offsets, no Python loop.
    Grouped by query and ranked, as the TopK is.
    """
    qi, rows, scores = topk.query_index, topk.row, topk.score
    n_unique = int(topk.n_queries)
    if inverse.size == n_unique and (n_unique == 1 or np.array_equal(inverse, np.arange(n_unique))):
        return qi, rows, scores
    counts = np.bincount(qi, minlength=n_unique)
    offsets = np.concatenate(([0], np.cumsum(counts)))
    lengths = counts[inverse]
    starts = offsets[inverse]
    total = int(lengths.sum())
    # position j of query i maps to starts[i] + j: repeat the per-query shift, add a running index
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    index = shift + np.arange(total)
    return np.repeat(np.arange(inverse.size), lengths), rows[index], scores[index]


def channel(queries: QueryBatch, topk: Any, inverse: np.ndarray, scale: Scale, name: str) -> Candidates:
    """A first-stage channel's Candidates from its kernel's TopK over the distinct texts (see :func:`spread`),
    with the ``<name>.score`` / ``<name>.rank`` provenance."""
    return Candidates.already_ranked(queries, *spread(topk, inverse), scale).with_channel_columns(name)


def empty_channel(queries: QueryBatch, scale: Scale, name: str) -> Candidates:
    """An empty channel output that still has the channel's provenance columns."""
    return Candidates.empty(queries, scale).with_channel_columns(name)


def several_texts(queries: QueryBatch) -> np.ndarray:
    """Per text of the batch: True when its original query was formulated into several texts.

    Those texts are the seed's sub-searches: each runs the whole path on its
    own (its own fetch depth, its own cut to ``k``) before their union merges
    back into the original query.  ``bool (len(queries),)``.
    """
    if len(queries) == 1:  # one text (every search() without formulate) is one original's only text
        return np.zeros(1, dtype=bool)
    counts = np.bincount(queries.origin, minlength=queries.n_original)
    return counts[queries.origin] > 1


def cut_per_text(candidates: Candidates, fetch_k: int, subquery_fetch_k: int | None) -> Candidates:
    """Each text's first ``fetch_k`` candidates — ``subquery_fetch_k`` for sub-query texts when given."""
    if subquery_fetch_k is None or len(candidates.queries) == 1:  # one text is no sub-query
        return candidates.cut(fetch_k)
    several = several_texts(candidates.queries)
    if not several.any():
        return candidates.cut(fetch_k)
    limit = np.where(several, subquery_fetch_k, fetch_k)[candidates.query_index]
    keep = candidates.rank <= limit
    return candidates if bool(keep.all()) else candidates.select(keep)


def fetch_depth(queries: QueryBatch, fetch_k: int, subquery_fetch_k: int | None) -> int:
    """How deep a channel must fetch so that :func:`cut_per_text` can give every text its depth."""
    if subquery_fetch_k is None or len(queries) == 1 or not several_texts(queries).any():
        return fetch_k
    return max(fetch_k, subquery_fetch_k)


def callable_or_name(instance: Any, attribute: Any, value: Any) -> None:
    """attrs validator: None, a callable, or the name of an :mod:`irflow.registry` entry.

    Names are resolved when the stage runs (the application may register
    them after the recipe is loaded); a recipe file can only hold names.
    """
    if value is None or callable(value) or (isinstance(value, str) and value):
        return
    raise ValueError(f"must be a callable or the name of an irflow.registry entry (a non-empty string), "
                     f"got {value!r} ({type(value).__name__})")
