"""Context expansion over the corpus protocol: each hit's sibling surfaces, through the ledger, in plan order.

A hit is one surface of an artifact (its name, one README chunk, ...).  To
judge or show it in context, expansion fetches the artifact's *other*
surfaces — all of them, or only the neighbours within ``window`` plan
positions of the hit — so that a reranker (retrieve -> expand -> rerank) or
a reader sees the chunk before and after the one that matched.

Rules (the ``expand`` stage and :func:`irflow.api.expand.expand` share them, through :func:`expand_rows`):

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

>>> kinds_tuple("readme_chunk"), kinds_tuple(["name", "deps"])
(('readme_chunk',), ('name', 'deps'))
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs
import numpy as np

from irflow.errors import LedgerWarning
from irflow.store.protocol import Siblings

__all__ = ["expand_rows", "Expansion", "LedgerView", "LedgerWarning", "kinds_tuple"]

# how many stale record ids a warning names before summarizing
_NAMED = 5


@runtime_checkable
class LedgerView(Protocol):
    """The part of the corpus protocol expansion reads (a :class:`~irflow.store.protocol.CorpusProtocol`
    has it, and so has a bare :class:`~irflow.store.record_store.CorpusStore`)."""

    @property
    def name(self) -> str | None: ...

    @property
    def kinds(self) -> tuple[str, ...]: ...

    def artifact_ids_of(self, rows: Any) -> np.ndarray: ...

    def kind_codes_of(self, rows: Any) -> np.ndarray: ...

    def surface_indices_of(self, rows: Any) -> np.ndarray: ...

    def sibling_rows(self, artifact_ids: Sequence[str]) -> Siblings: ...


def kinds_tuple(value: Any) -> tuple[str, ...] | None:
    """``"readme_chunk"`` or ``["name", "deps"]`` as a tuple of kinds; None stays None.

    Anything else passes through unchanged so a validator can name it.
    """
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return value  # type: ignore[no-any-return]  # passed through, for the validator to name


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


def _warn(corpus: LedgerView, stale: Sequence[tuple[str, str]], unlisted: Sequence[str], stacklevel: int) -> None:
    """One LedgerWarning per kind of skipped entry: stale record ids, artifacts without a ledger entry."""
    label = f"corpus {corpus.name!r}" if corpus.name else "the corpus"
    if stale:
        named = ", ".join(f"{rid!r} (artifact {art!r})" for art, rid in stale[:_NAMED])
        more = f" and {len(stale) - _NAMED} more" if len(stale) > _NAMED else ""
        warnings.warn(LedgerWarning(
            f"expand: the ledger of {label} lists {len(stale)} record(s) missing from the store, "
            f"skipped: {named}{more}. The ledger is stale (an interrupted build or a torn copy); "
            "rebuild the corpus to repair it"), stacklevel=stacklevel + 1)
    if unlisted:
        named = ", ".join(map(repr, unlisted[:_NAMED]))
        more = f" and {len(unlisted) - _NAMED} more" if len(unlisted) > _NAMED else ""
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


def _sibling_lists(corpus: LedgerView, rows: np.ndarray, artifacts: np.ndarray, code: np.ndarray,
                   stacklevel: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each artifact's rows in plan order as CSR ``(lengths, starts, flat)``: its siblings through the ledger,
    or its own hits alone when the ledger has no entry for it (warned, as stale entries are)."""
    siblings = corpus.sibling_rows(artifacts.tolist())
    _warn(corpus, siblings.stale, artifacts[~siblings.listed].tolist(), stacklevel)
    parts = []
    for a in range(artifacts.size):
        if siblings.listed[a]:
            parts.append(siblings.rows_of(a))
        else:  # no ledger entry: its hits stand alone, in plan order
            own = np.unique(rows[code == a])
            parts.append(own[np.argsort(corpus.surface_indices_of(own), kind="stable")])
    lengths = np.fromiter((p.size for p in parts), dtype=np.int64, count=len(parts))
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    flat = np.concatenate(parts) if parts else np.empty(0, np.int64)
    return lengths, starts, flat


def expand_rows(corpus: LedgerView, query_index: Any, rows: Any, *, window: int | None = None,
                surface_kind: str | Iterable[str] | None = None, stacklevel: int = 2) -> Expansion:
    """Expand ranked hits given as rows: the vectorized core of ``irflow.api.expand.expand`` and the expand stage.

    ``query_index`` must be grouped by query (non-decreasing) and each
    query's rows ranked best first (position = rank).  ``corpus`` is
    anything with the ledger part of the corpus protocol (:class:`LedgerView`:
    a Corpus, a CorpusStore, a sharded corpus).  Python work is per distinct
    artifact (one ``sibling_rows`` call for all of them); pairing, filtering,
    deduplication and ordering are numpy.

    >>> # e = expand_rows(corpus, [0, 0], [12, 40], window=1); e.row, e.offset
    """
    _check_window(window)
    kinds = _check_kinds(surface_kind)
    query_index = np.asarray(query_index, dtype=np.int64).reshape(-1)
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    m = rows.size
    if query_index.size != m:
        raise ValueError(f"expand_rows needs one query index per row, got {query_index.size} and {m}")
    empty = np.empty(0, np.int64)
    if m == 0:
        return Expansion(empty, empty, empty, empty)

    # one sibling list per distinct artifact of the batch, laid out as CSR
    artifacts, code = np.unique(corpus.artifact_ids_of(rows), return_inverse=True)
    code = code.reshape(-1).astype(np.int64)
    lengths, starts, flat = _sibling_lists(corpus, rows, artifacts, code, stacklevel + 1)

    # every (hit, sibling of its artifact) pair, then the window and kind filters
    hit, within = _grouped(lengths[code])
    pair_row = flat[starts[code][hit] + within]
    pair_surface = np.asarray(corpus.surface_indices_of(pair_row), dtype=np.int64)
    offset = pair_surface - np.asarray(corpus.surface_indices_of(rows), dtype=np.int64)[hit]
    keep = np.ones(pair_row.size, dtype=bool)
    if window is not None:
        keep &= np.abs(offset) <= window
    if kinds is not None:
        wanted = np.array([c for c, kind in enumerate(corpus.kinds) if kind in kinds], dtype=np.int32)
        keep &= np.isin(corpus.kind_codes_of(pair_row), wanted)
    hit, pair_row, offset, pair_surface = hit[keep], pair_row[keep], offset[keep], pair_surface[keep]
    pair_query = query_index[hit]

    # one entry per (query, row): the surface's own hit first, else the best-ranked hit covering it
    order = np.lexsort((hit, offset != 0, pair_row, pair_query))
    first = np.ones(order.size, dtype=bool)
    first[1:] = (pair_query[order][1:] != pair_query[order][:-1]) | (pair_row[order][1:] != pair_row[order][:-1])
    win = order[first]
    hit, pair_row, offset, pair_query = hit[win], pair_row[win], offset[win], pair_query[win]
    pair_surface = pair_surface[win]

    # artifacts in the order of their best hit (input positions ascend within a query)
    n_art = max(artifacts.size, 1)
    hit_key = query_index * n_art + code
    keys, first_pos = np.unique(hit_key, return_index=True)
    artifact_rank = first_pos[np.searchsorted(keys, hit_key[hit])]
    final = np.lexsort((pair_surface, artifact_rank, pair_query))
    return Expansion(pair_query[final], pair_row[final], hit[final], offset[final])
