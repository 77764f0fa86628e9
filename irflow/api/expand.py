"""Context expansion: each hit's sibling surfaces, through the ledger, in plan order.

A hit is one surface of an artifact (its name, one README chunk, ...).  To
judge or show it in context, expansion fetches the artifact's *other*
surfaces — all of them, or only the neighbours within ``window`` plan
positions of the hit — so that a reranker (retrieve -> expand -> rerank) or
a reader sees the chunk before and after the one that matched.

The rules (siblings from the ledger, ``window`` in plan positions,
``surface_kind``, several hits of one artifact, order, tombstoned and stale
entries) are the ``expand`` stage's too, written once in
:mod:`irflow.store.expansion`, whose :func:`~irflow.store.expansion.expand_rows`
both call over the corpus protocol.

>>> # hits = irflow.search(corpus, "sql parser", k=3)
>>> # expand(corpus, hits, window=1)   # each hit with the surface before and after it
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from irflow.errors import LedgerWarning
from irflow.store.expansion import Expansion, expand_rows, kinds_tuple
from irflow.store.ledger import resolve_store
from irflow.store.record_store import CorpusStore
from irflow.store.records import SearchHit

__all__ = ["expand", "expand_rows", "Expansion", "LedgerWarning", "kinds_tuple", "EXPAND_FROM", "EXPAND_OFFSET"]

#: Metadata key of an expanded SearchHit: the record id of the hit that brought it.
EXPAND_FROM = "expand_from"
#: Metadata key of an expanded SearchHit: its surface_index minus that hit's.
EXPAND_OFFSET = "expand_offset"

# how many deleted hits a warning names before summarizing
_NAMED = 5


def _hit_rows(store: CorpusStore, hits: Sequence[SearchHit], corpus_name: str | None) -> tuple[list[int], list[int]]:
    """Rows of the hits still in the store and their positions; deleted hits are dropped with a warning."""
    rows, kept, gone = [], [], []
    for position, hit in enumerate(hits):
        if not isinstance(hit, SearchHit):
            raise TypeError(f"expand needs SearchHit objects, got {type(hit).__name__}: {hit!r}")
        if hit.record_id is None:
            raise ValueError(f"hit {hit.artifact_id!r}/{hit.surface_kind} has no record_id; expand resolves hits "
                             "by record id (use hits from irflow.search or a recipe run)")
        if hit.source is not None and corpus_name is not None and hit.source != corpus_name:
            raise ValueError(f"hit {hit.record_id!r} comes from corpus {hit.source!r}, not {corpus_name!r}; "
                             "expand each source's hits with its own corpus")
        try:
            rows.append(store.row_of(hit.record_id))
        except KeyError:
            gone.append(hit.record_id)
            continue
        kept.append(position)
    if gone:
        warnings.warn(LedgerWarning(f"expand: {len(gone)} hit(s) are no longer in the store (deleted since the "
                                    f"search) and were dropped: {', '.join(map(repr, gone[:_NAMED]))}"), stacklevel=3)
    return rows, kept


def expand(corpus: Any, hits: Sequence[SearchHit] | Sequence[Sequence[SearchHit]], *, window: int | None = None,
           surface_kind: str | Iterable[str] | None = None) -> list[SearchHit] | list[list[SearchHit]]:
    """Each hit with its sibling surfaces, through the ledger (see the module rules).

    ``hits`` is one query's ranked hits (returns one list) or a list of such
    lists (``Result.hits`` of several queries; returns a list of lists).
    ``corpus``: a Corpus, a CorpusStore, a sharded corpus, a corpus path or a
    name — only records are read, nothing is embedded.  A hit itself is returned unchanged;
    a sibling is a new SearchHit carrying the score and source of the hit
    that brought it, with ``metadata["expand_from"]`` (that hit's record id)
    and ``metadata["expand_offset"]`` (surface_index distance, signed).

    >>> # expand(corpus, irflow.search(corpus, "http client", k=3), window=1, surface_kind="readme_chunk")
    """
    batched = bool(hits) and not isinstance(hits[0], SearchHit) and isinstance(hits[0], (list, tuple))
    lists: list[Sequence[SearchHit]] = list(hits) if batched else [hits]  # type: ignore[arg-type, list-item]
    # a corpus with no single store (a sharded one) serves the rows itself: row_of, record, the ledger view
    serves_rows = getattr(corpus, "store", None) is None and all(
        hasattr(corpus, name) for name in ("row_of", "record", "sibling_rows"))
    store = corpus if serves_rows else resolve_store(corpus)
    corpus_name = getattr(corpus, "name", None) if not isinstance(corpus, (str, bytes)) else store.name
    flat: list[SearchHit] = []
    query_index: list[int] = []
    rows: list[int] = []
    for i, query_hits in enumerate(lists):
        query_rows, kept = _hit_rows(store, query_hits, corpus_name)
        rows.extend(query_rows)
        query_index.extend([i] * len(query_rows))
        flat.extend(query_hits[p] for p in kept)
    expansion = expand_rows(store, query_index, rows, window=window, surface_kind=surface_kind, stacklevel=3)
    out: list[list[SearchHit]] = [[] for _ in lists]
    # one SearchHit per expanded surface: bounded by the caller's hit lists, not a corpus-scale loop
    for q, row, source, offset in zip(expansion.query_index.tolist(), expansion.row.tolist(),
                                      expansion.source.tolist(), expansion.offset.tolist()):
        hit = flat[source]
        if offset == 0:
            out[q].append(hit)
            continue
        record = store.record(row)
        metadata = {**record.metadata, EXPAND_FROM: hit.record_id, EXPAND_OFFSET: offset}
        out[q].append(SearchHit(record.artifact_id, record.surface_kind, hit.score, record.text, metadata,
                                source=hit.source, surface_index=record.surface_index, record_id=record.id))
    return out if batched else out[0]
