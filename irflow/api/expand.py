"""Context expansion: each hit's sibling surfaces, through the ledger, in plan order.

A hit is one surface of an artifact (its name, one README chunk, ...).  To
judge or show it in context, expansion fetches the artifact's *other*
surfaces — all of them, or only the neighbours within ``window`` plan
positions of the hit — so that a reranker (retrieve -> expand -> rerank) or
a reader sees the chunk before and after the one that matched.

Rules (the ``expand`` stage and :func:`expand` share them):

- Siblings come from the corpus ledger, resolved by record id (the
  :func:`irflow.store.ledger.records_for_artifact` contract); ids are never
  re-derived.
- ``window=None``: every sibling; ``window=w``: siblings whose
  ``surface_index`` is within ``w`` of the hit's (``0``: the hit alone).
  Distances are plan positions, so a gap in the plan is not bridged.
- ``surface_kind`` (a kind or a list of kinds) keeps only surfaces of those
  kinds — the hit itself included: the result is "the surfaces of these
  kinds around each hit", as ``records_for_artifact(surface_kind=...)`` is.
- Several hits of one artifact (in one query) expand once: overlapping
  windows are merged, each surface appears once.  A surface that is itself a
  hit stays that hit; any other surface is attributed to the best-ranked hit
  whose window covers it and carries that hit's score (siblings are not
  re-scored; a reranker downstream gives them their own).
- Order: artifacts in the order of their best hit, each artifact's surfaces
  in plan order (``surface_index``).  The scores are therefore not sorted;
  the order is the ranking until a later stage re-sorts.
- Tombstoned siblings (``delete_record``) are skipped silently: a deleted
  surface is gone from every search, expansion included.  A *stale* ledger
  entry (a listed record id with no row in the store: an interrupted build or
  a torn copy) is skipped with one :class:`LedgerWarning` per call naming the
  record — :func:`~irflow.store.ledger.records_for_artifact` raises ``KeyError``
  for it, but one torn artifact must not fail a whole search.  An artifact
  without a ledger entry keeps its hits unexpanded (also warned).

>>> # hits = irflow.search(corpus, "sql parser", k=3)
>>> # expand(corpus, hits, window=1)   # each hit with the surface before and after it
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import numpy as np

from irflow.errors import LedgerWarning
from irflow.store.ledger import resolve_store
from irflow.store.records import SearchHit
from irflow.store.record_store import CorpusStore

__all__ = ["expand", "expand_rows", "Expansion", "LedgerWarning", "kinds_tuple", "EXPAND_FROM", "EXPAND_OFFSET"]

#: Metadata key of an expanded SearchHit: the record id of the hit that brought it.
EXPAND_FROM = "expand_from"
#: Metadata key of an expanded SearchHit: its surface_index minus that hit's.
EXPAND_OFFSET = "expand_offset"

# how many stale record ids a warning names before summarizing
_NAMED = 5


def kinds_tuple(value: Any) -> tuple[str, ...] | None:
    """``"readme_chunk"`` or ``["name", "deps"]`` as a tuple of kinds; None stays None.

    Anything else passes through unchanged so a validator can name it.
    """
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return value


def _check_window(window: Any) -> None:
    if window is None:
        return
    if isinstance(window, (bool, np.bool_)) or not isinstance(window, (int, np.integer)) or window < 0:
        raise ValueError(f"window must be an integer >= 0 (0: the hit alone) or None (every sibling), got {window!r}")


def _check_kinds(kinds: Any) -> tuple[str, ...] | None:
    kinds = kinds_tuple(kinds)
    if kinds is not None and not (isinstance(kinds, tuple) and all(isinstance(k, str) for k in kinds)):
        raise ValueError(f"surface_kind must be a surface kind, a list of kinds or None, got {kinds!r}")
    return kinds


@attrs.frozen
class Expansion:
    """The expanded surfaces of a batch of hits, in output order (flat, grouped by query).

    ``source`` is the position (in the input) of the hit each surface is
    attributed to; ``offset`` its ``surface_index`` minus that hit's (0: the
    hit itself, -1: the surface just before it).
    """

    query_index: np.ndarray
    row: np.ndarray
    source: np.ndarray
    offset: np.ndarray

    def __len__(self) -> int:
        return int(self.row.size)


class _Ledger:
    """Per-call sibling lookup: ledger ids -> live rows, sorted by surface_index.

    One ledger lookup per distinct artifact (small Python work per artifact,
    none per candidate); deleted ids are recognised from the tombstone list
    so they are told apart from stale ones.
    """

    def __init__(self, store: CorpusStore) -> None:
        self.store = store
        self.stale: list[tuple[str, str]] = []  # (artifact, record id)
        self.unlisted: list[str] = []           # artifacts without a ledger entry
        self._deleted: set[str] | None = None

    def _is_deleted(self, record_id: str) -> bool:
        if self._deleted is None:
            self._deleted = set(np.asarray(self.store.record_ids)[self.store.deleted_rows].tolist())
        return record_id in self._deleted

    def siblings(self, artifact: str) -> np.ndarray | None:
        """The artifact's live rows in plan order; None when the ledger has no entry for it."""
        try:
            record_ids = self.store.ledger[artifact]
        except KeyError:
            self.unlisted.append(artifact)
            return None
        rows = []
        for record_id in record_ids:
            try:
                rows.append(self.store.row_of(record_id))
            except KeyError:
                if not self._is_deleted(record_id):
                    self.stale.append((artifact, record_id))
        rows_array = np.asarray(rows, dtype=np.int64)
        # the ledger is written in plan order; sorting keeps the promise for a hand-made one
        order = np.argsort(self.store.surface_indices[rows_array], kind="stable")
        return rows_array[order]

    def warn(self, stacklevel: int) -> None:
        label = f"corpus {self.store.name!r}" if self.store.name else "the corpus"
        if self.stale:
            named = ", ".join(f"{rid!r} (artifact {art!r})" for art, rid in self.stale[:_NAMED])
            more = f" and {len(self.stale) - _NAMED} more" if len(self.stale) > _NAMED else ""
            warnings.warn(LedgerWarning(
                f"expand: the ledger of {label} lists {len(self.stale)} record(s) missing from the store, "
                f"skipped: {named}{more}. The ledger is stale (an interrupted build or a torn copy); "
                "rebuild the corpus to repair it"), stacklevel=stacklevel + 1)
        if self.unlisted:
            named = ", ".join(map(repr, self.unlisted[:_NAMED]))
            more = f" and {len(self.unlisted) - _NAMED} more" if len(self.unlisted) > _NAMED else ""
            warnings.warn(LedgerWarning(
                f"expand: the ledger of {label} has no entry for artifact(s) {named}{more}; their hits are kept "
                "unexpanded (a corpus built without ledger bookkeeping: rebuild it with irflow.build)"),
                stacklevel=stacklevel + 1)


def _grouped(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For groups of these lengths: the group of each flat position and its index within the group."""
    total = int(lengths.sum())
    group = np.repeat(np.arange(lengths.size), lengths)
    within = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return group, within


def expand_rows(corpus: Any, query_index: Any, rows: Any, *, window: int | None = None,
                surface_kind: str | Iterable[str] | None = None, stacklevel: int = 2) -> Expansion:
    """Expand ranked hits given as rows: the vectorized core of :func:`expand` and the expand stage.

    ``query_index`` must be grouped by query (non-decreasing) and each
    query's rows ranked best first (position = rank).  ``corpus`` is a
    Corpus, a CorpusStore, or anything :func:`irflow.store.ledger.resolve_store`
    accepts.  Python work is per distinct artifact; pairing, filtering,
    deduplication and ordering are numpy.

    >>> # e = expand_rows(corpus, [0, 0], [12, 40], window=1); e.row, e.offset
    """
    _check_window(window)
    kinds = _check_kinds(surface_kind)
    store = resolve_store(corpus)
    query_index = np.asarray(query_index, dtype=np.int64).reshape(-1)
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    m = rows.size
    if query_index.size != m:
        raise ValueError(f"expand_rows needs one query index per row, got {query_index.size} and {m}")
    empty = np.empty(0, np.int64)
    if m == 0:
        return Expansion(empty, empty, empty, empty)

    # one sibling list per distinct artifact of the batch, laid out as CSR
    artifacts, code = np.unique(np.asarray(store.artifact_ids)[rows], return_inverse=True)
    code = code.reshape(-1).astype(np.int64)
    ledger = _Ledger(store)
    parts = []
    for a, artifact in enumerate(artifacts.tolist()):
        siblings = ledger.siblings(artifact)
        if siblings is None:  # no ledger entry: its hits stand alone (live ones, in plan order)
            own = np.unique(rows[code == a])
            own = own[np.asarray(store.live)[own]]
            siblings = own[np.argsort(store.surface_indices[own], kind="stable")]
        parts.append(siblings)
    ledger.warn(stacklevel)
    lengths = np.fromiter((p.size for p in parts), dtype=np.int64, count=len(parts))
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    flat = np.concatenate(parts) if parts else empty

    # every (hit, sibling of its artifact) pair, then the window and kind filters
    hit, within = _grouped(lengths[code])
    pair_row = flat[starts[code][hit] + within]
    surface = np.asarray(store.surface_indices, dtype=np.int64)
    offset = surface[pair_row] - surface[rows][hit]
    keep = np.ones(pair_row.size, dtype=bool)
    if window is not None:
        keep &= np.abs(offset) <= window
    if kinds is not None:
        wanted = np.array([c for c, kind in enumerate(store.kinds) if kind in kinds], dtype=np.int32)
        keep &= np.isin(np.asarray(store.kind_codes)[pair_row], wanted)
    hit, pair_row, offset = hit[keep], pair_row[keep], offset[keep]
    pair_query = query_index[hit]

    # one entry per (query, row): the surface's own hit first, else the best-ranked hit covering it
    order = np.lexsort((hit, offset != 0, pair_row, pair_query))
    first = np.ones(order.size, dtype=bool)
    first[1:] = (pair_query[order][1:] != pair_query[order][:-1]) | (pair_row[order][1:] != pair_row[order][:-1])
    win = order[first]
    hit, pair_row, offset, pair_query = hit[win], pair_row[win], offset[win], pair_query[win]

    # artifacts in the order of their best hit (input positions ascend within a query)
    n_art = max(artifacts.size, 1)
    hit_key = query_index * n_art + code
    keys, first_pos = np.unique(hit_key, return_index=True)
    artifact_rank = first_pos[np.searchsorted(keys, hit_key[hit])]
    final = np.lexsort((surface[pair_row], artifact_rank, pair_query))
    return Expansion(pair_query[final], pair_row[final], hit[final], offset[final])


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
    ``corpus``: a Corpus, a CorpusStore, a corpus path or a name — only the
    store is read, nothing is embedded.  A hit itself is returned unchanged;
    a sibling is a new SearchHit carrying the score and source of the hit
    that brought it, with ``metadata["expand_from"]`` (that hit's record id)
    and ``metadata["expand_offset"]`` (surface_index distance, signed).

    >>> # expand(corpus, irflow.search(corpus, "http client", k=3), window=1, surface_kind="readme_chunk")
    """
    batched = bool(hits) and not isinstance(hits[0], SearchHit) and isinstance(hits[0], (list, tuple))
    lists: list[Sequence[SearchHit]] = list(hits) if batched else [hits]  # type: ignore[list-item]
    store = resolve_store(corpus)
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
