"""Cross-source fusion: merge ranked hit lists from different sources by rank, not score.

Scores from different (corpus, mode, embedder) tuples live on incommensurable
scales, so raw scores never cross a source boundary.  Within one list they
order and deduplicate that list's hits (one scale, sound); across lists only
ranks interact, through weighted Reciprocal Rank Fusion: a hit at rank ``r``
of the list under key ``s`` contributes ``weights[s] / (rrf_k + r)``.

Ties: equal scores keep first-seen order — within a list, the list's order;
across lists, mapping order, then rank — the rule of the engine's fuse stage
and of the seed (README, "Ties"), deterministic for the same inputs.

>>> from irflow.store.records import SearchHit
>>> fused = fuse_hits({"a": [SearchHit("x", "name", 0.9), SearchHit("y", "name", 0.5)],
...                    "b": [SearchHit("y", "name", 12.0)]})
>>> [(h.source, h.artifact_id, round(h.score, 5)) for h in fused]
[('a', 'x', 0.01639), ('b', 'y', 0.01639), ('a', 'y', 0.01613)]
"""

from __future__ import annotations

import numbers
from typing import Any, Hashable, Iterable, Mapping, Sequence

import attrs
import numpy as np

from irflow.api.constants import DFLT_RRF_K, Identity
from irflow.errors import FusionError
from irflow.store.records import SearchHit
from irflow.engine.validators import is_finite

__all__ = ["FusionError", "fuse_hits"]


# Identity keys live in two namespaces that can never collide: a per-source key
# (source, artifact_id), and a shared key from the identity (pointer / callable).
_LOCAL = object()
_SHARED = object()


def _is_real(value: Any) -> bool:
    # bool is an int subclass, but weights=True or rrf_k=False is a bug, not a number.
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _check_rrf_k(rrf_k: Any) -> float:
    if not _is_real(rrf_k) or not is_finite(rrf_k) or rrf_k < 0:
        raise FusionError(f"rrf_k must be a finite number >= 0 (standard: {DFLT_RRF_K}), got {rrf_k!r}")
    return rrf_k


def _check_k(k: Any) -> None:
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
        raise FusionError(f"k must be None (keep all) or an integer >= 0, got {k!r}")


def _check_weights(weights: Mapping[str | None, float] | None) -> Mapping[str | None, float]:
    if weights is None:
        return {}
    if not isinstance(weights, Mapping):
        raise FusionError(f"weights must be a mapping {{source: multiplier}} or None, got {type(weights).__name__}")
    for source, weight in weights.items():
        # Every value is checked, even for absent sources: a bad value is a bug either way.
        if not _is_real(weight) or not is_finite(weight) or weight < 0:
            raise FusionError(f"weights[{source!r}] must be a finite number >= 0, got {weight!r}")
    return weights


def _identity_function(identity: Identity) -> Any:
    """The function hit -> identity key for *identity* (validated)."""

    def local(hit: SearchHit) -> tuple:
        return (_LOCAL, hit.source, hit.artifact_id)

    if identity is None:
        return local
    if isinstance(identity, str):
        if identity != "pointer":
            raise FusionError(f"identity must be None, 'pointer' or a callable hit -> hashable key, got {identity!r}")

        def by_pointer(hit: SearchHit) -> tuple:
            pointer = hit.pointer
            return (_SHARED, pointer) if pointer else local(hit)

        return by_pointer
    if not callable(identity):
        raise FusionError(f"identity must be None, 'pointer' or a callable hit -> hashable key, got {identity!r}")

    def by_callable(hit: SearchHit) -> tuple:
        key = identity(hit)
        if not key:
            return local(hit)  # the seed's rule: a falsy key falls back to per-source identity
        try:
            hash(key)
        except TypeError:
            raise FusionError(
                f"identity returned an unhashable {type(key).__name__} for {hit.artifact_id!r}; "
                "return a str, tuple or other hashable key"
            ) from None
        return (_SHARED, key)

    return by_callable


@attrs.frozen
class _Ranked:
    """One list after stamping, ordering and dedup: (identity key, hit) pairs, best first."""

    key: str | None
    entries: list[tuple[Hashable, SearchHit]]


def _rank_list(key: str | None, hits: Iterable[SearchHit], identity_of: Any) -> _Ranked:
    """Stamp, order by raw score and collapse duplicates of one list; rank = position + 1."""
    stamped = []
    for position, hit in enumerate(hits):
        if not isinstance(hit, SearchHit):
            raise FusionError(f"hits_by_source[{key!r}][{position}] is a {type(hit).__name__}, not a SearchHit")
        # Existing tags win: one corpus bound under two keys still counts as one source.
        stamped.append(hit if hit.source is not None or key is None else attrs.evolve(hit, source=key))
    # Raw scores order the list (one scale, sound); the sort is stable, so equal
    # scores keep list order, and the first of a duplicate group is its best.
    stamped.sort(key=lambda hit: -hit.score)
    seen: set[Hashable] = set()
    entries = []
    for hit in stamped:
        ident = identity_of(hit)
        if ident not in seen:
            seen.add(ident)
            entries.append((ident, hit))
    return _Ranked(key, entries)


def _annotated(hit: SearchHit, score: float, rank: int, sources: list[str | None]) -> SearchHit:
    metadata = dict(hit.metadata)  # a copy: the caller's hit keeps its own dict
    metadata["source_score"] = hit.score
    metadata["source_rank"] = rank
    if len(sources) > 1:
        metadata["fused_sources"] = list(sources)
    return attrs.evolve(hit, score=score, metadata=metadata)


class _Fused:
    """Accumulator of one identity group across lists."""

    __slots__ = ("hit", "rank", "score", "sources")

    def __init__(self, hit: SearchHit, rank: int) -> None:
        self.hit, self.rank, self.score = hit, rank, 0.0
        self.sources: list[str | None] = []


def fuse_hits(
    hits_by_source: Mapping[str | None, Sequence[SearchHit]],
    *,
    rrf_k: float = DFLT_RRF_K,
    weights: Mapping[str | None, float] | None = None,
    identity: Identity = None,
    k: int | None = None,
) -> list[SearchHit]:
    """Merge per-source ranked hit lists into one ranking — by rank, not score.

    Rules, in the order they apply:

    1. *Stamping.* A hit whose ``source`` is ``None`` takes its mapping key as
       ``source``; an existing tag wins.  The ``None`` key is the untagged
       pseudo-source: its list fuses as one rank group and its hits stay
       ``source=None``.
    2. *Per-list order and dedup.* Each list is ordered by raw score
       (descending, stable: equal scores keep list order) and hits sharing an
       identity key collapse to the best-scored one; ranks count from 1 after
       that.  Without *identity* the key is ``(source, artifact_id)``.
    3. *Identity.* ``None``: never merge across sources, each
       ``(source, artifact_id)`` is distinct.  ``"pointer"``: hits whose
       ``.pointer`` match merge (a hit without a pointer keeps per-source
       identity).  A callable ``hit -> hashable``: equal keys merge (a falsy
       key keeps per-source identity).
    4. *Fusion.* With two or more non-empty lists, each group scores
       ``sum(weights[key] / (rrf_k + rank))`` over the lists it appears in;
       weights are looked up by mapping key (default 1.0; keys naming absent
       sources are ignored; negative or non-finite weights are refused).
       The representative of a group is its best-ranked hit; on equal ranks
       the earlier list in mapping order wins.  With exactly one non-empty
       list the hits pass through with their raw scores (RRF of one list is
       that list's order).
    5. *Output.* Sorted by score, best first; equal scores keep first-seen
       order (lists in mapping order, each in rank order).  Every hit is a
       copy carrying ``metadata["source_score"]`` (its raw score) and
       ``metadata["source_rank"]``; when a group's contributing hits came from
       several sources, ``metadata["fused_sources"]`` lists them (mapping
       order of first appearance).  *k* cuts the result.

    The fused score is ordinal: fine for ordering and relative cuts,
    meaningless against absolute floors — apply calibrated floors per source
    before fusing.  Input hits are never mutated.
    """
    rrf_k = _check_rrf_k(rrf_k)
    _check_k(k)
    weight_of = _check_weights(weights)
    identity_of = _identity_function(identity)
    ranked = _ranked_lists(hits_by_source, identity_of)
    if len(ranked) == 1:
        # Single source: its own order and raw scores, nothing to rescale.
        fused = [_annotated(hit, hit.score, rank, [hit.source]) for rank, (_, hit) in enumerate(ranked[0].entries, start=1)]
        return fused if k is None else fused[:k]
    groups = _fused_groups(ranked, weight_of, rrf_k)
    # sorted() is stable, so equal fused scores keep first-seen order.
    ordered = sorted(groups, key=lambda group: -group.score)
    if k is not None:
        ordered = ordered[:k]
    return [_annotated(group.hit, group.score, group.rank, group.sources) for group in ordered]


def _ranked_lists(hits_by_source: Any, identity_of: Any) -> list[_Ranked]:
    """Each non-empty source list, checked, ordered and deduplicated (rules 1 to 3 of :func:`fuse_hits`)."""
    if not isinstance(hits_by_source, Mapping):
        raise FusionError(f"hits_by_source must be a mapping {{source: ranked hits}}, got {type(hits_by_source).__name__}")
    ranked: list[_Ranked] = []
    for key, hits in hits_by_source.items():
        if key is not None and not isinstance(key, str):
            raise FusionError(f"source keys must be str or None (the untagged pseudo-source), got {key!r}")
        if hits is None or isinstance(hits, (str, bytes, SearchHit)):
            raise FusionError(f"hits_by_source[{key!r}] must be a sequence of SearchHit, got {type(hits).__name__}")
        listed = _rank_list(key, hits, identity_of)
        if listed.entries:  # an empty list contributes nothing and must not block pass-through
            ranked.append(listed)
    return ranked


def _fused_groups(ranked: list[_Ranked], weight_of: Mapping[str | None, float], rrf_k: float) -> list[_Fused]:
    """One group per identity, in first-seen order, scored by weighted RRF (rule 4 of :func:`fuse_hits`)."""
    groups: dict[Hashable, _Fused] = {}  # insertion order = first-seen order
    for listed in ranked:
        weight = float(weight_of.get(listed.key, 1.0))
        for rank, (ident, hit) in enumerate(listed.entries, start=1):
            group = groups.get(ident)
            if group is None:
                group = groups[ident] = _Fused(hit, rank)
            elif rank < group.rank:  # strictly better: an equal rank keeps the earlier list's hit
                group.hit, group.rank = hit, rank
            group.score += weight / (rrf_k + rank)
            if hit.source not in group.sources:
                group.sources.append(hit.source)
    return list(groups.values())
