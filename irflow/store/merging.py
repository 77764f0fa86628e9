"""Merging adjacent segments: one segment of their live rows, in order, exactly what a fresh build of them gives.

A merge replaces a run of ADJACENT segments by one segment holding their
live rows in order (adjacent only: the corpus's row order, hence its ties,
stays), and drops their tombstones — except the rows deleted out of band
(``store.delete_record``), which the ledger still lists: they stay, deleted,
so the stale ledger stays stale and a later update of their id or artifact
still takes them off it.  Nothing is re-tokenized or re-embedded:

- record columns (ids, artifact ids, texts, metadata): each kept row's bytes,
  copied from the parts' columns chunk by chunk (:class:`KeptStrings`:
  in memory, or streamed into a generation's files);
- surface kinds: the live kinds in order of first appearance; kind codes
  and surface indices mapped and gathered;
- the ledger: the parts' listed entries, merged by artifact (plan order by
  ``surface_index``), artifacts in order of first listed row;
- postings: the parts' kept postings, merged term by term
  (:func:`irflow.kernels.postings_merge.merge_postings`);
- vectors: the kept rows' vectors, copied; text digests likewise.

The merged segment answers every query as the parts did (the proof is the
postings' and vectors' equality with a fresh build's: the same per-term
postings, lengths and document frequencies, the same vectors, the same row
order); ``tests/test_living.py`` checks it against fresh builds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import numpy as np

from irflow.kernels.postings import Postings
from irflow.kernels.postings_merge import merge_postings
from irflow.store.columnar import JsonColumn, LedgerTable, StringColumn, utf8_chunks, utf8_offsets
from irflow.store.record_store import CorpusStore
from irflow.store.segment import Segment, SegmentView

__all__ = ["KeptStrings", "MergedParts", "merged_segment"]

_CHUNK_BYTES = 1 << 22


@attrs.frozen(eq=False)
class KeptStrings:
    """The kept rows' strings of several columns, one after the other: offsets, and the bytes in chunks."""

    offsets: np.ndarray
    chunks: Callable[[], Iterator[bytes]]

    @property
    def size(self) -> int:
        return int(self.offsets[-1])

    def column(self, where: str = "a merged column") -> StringColumn:
        """The strings as a column in memory."""
        blob = np.frombuffer(b"".join(self.chunks()), dtype=np.uint8) if self.size else np.empty(0, np.uint8)
        return StringColumn(blob, self.offsets, where=where)

    @classmethod
    def of(cls, columns: Sequence[Any], kept: Sequence[np.ndarray]) -> "KeptStrings":
        """*kept* rows (ascending) of each column: a stored column's bytes copied, a list's strings encoded."""
        lengths = []
        for column, rows in zip(columns, kept):
            if isinstance(column, StringColumn):
                lengths.append(column.offsets[rows + 1] - column.offsets[rows])
            else:
                lengths.append(np.diff(utf8_offsets(_values(column, rows))))
        offsets = np.zeros(sum(r.size for r in kept) + 1, dtype=np.int64)
        if len(offsets) > 1:
            np.cumsum(np.concatenate(lengths), out=offsets[1:])

        def chunks() -> Iterator[bytes]:
            for column, rows in zip(columns, kept):
                if isinstance(column, StringColumn):
                    yield from _byte_runs(column, rows)
                else:
                    yield from utf8_chunks(_values(column, rows))
        return cls(offsets, chunks)


def _values(column: Any, rows: np.ndarray) -> list[str]:
    if isinstance(column, np.ndarray):
        values: list[str] = column[rows].tolist()
        return values
    return [column[r] for r in rows.tolist()]


def _byte_runs(column: StringColumn, rows: np.ndarray) -> Iterator[bytes]:
    """The bytes of *rows* of a stored column, a few MB at a time (one gather per chunk)."""
    if rows.size == len(column):  # every row: the blob as it is
        blob = column.blob
        for lo in range(0, blob.size, _CHUNK_BYTES):
            yield blob[lo:lo + _CHUNK_BYTES].tobytes()
        return
    starts = column.offsets[rows]
    lengths = column.offsets[rows + 1] - starts
    ends = np.cumsum(lengths)
    lo = 0
    while lo < rows.size:
        hi = int(np.searchsorted(ends, (ends[lo - 1] if lo else 0) + _CHUNK_BYTES, side="right"))
        hi = max(hi, lo + 1)
        size = lengths[lo:hi]
        base = ends[lo - 1] if lo else 0
        index = np.repeat(starts[lo:hi] - (ends[lo:hi] - size - base), size) + np.arange(int(size.sum()))
        yield column.blob[index].tobytes()
        lo = hi


def _metadata_strings(column: Any) -> Any:
    """The JSON texts of a metadata column (a stored one's, or a list's encoded)."""
    return column.strings if isinstance(column, JsonColumn) else JsonColumn.of(column).strings


def _kept(view: SegmentView) -> np.ndarray:
    """A segment's rows a merge keeps: the live ones, and the deleted ones the ledger still lists."""
    store = view.store
    keep = store.live.copy()
    stale = store.stale_rows(artifact=None, every=True)
    keep[stale] = True
    return np.flatnonzero(keep)


@attrs.frozen(eq=False)
class MergedParts:
    """What a run of adjacent segment views merges into: their kept rows, and each merged column."""

    views: tuple[SegmentView, ...]
    kept: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, views: Sequence[SegmentView]) -> "MergedParts":
        return cls(tuple(views), tuple(_kept(v) for v in views))

    @property
    def n_rows(self) -> int:
        return sum(k.size for k in self.kept)

    def deleted(self) -> np.ndarray:
        """The merged segment's deleted rows: those deleted out of band and still listed (ascending)."""
        parts, base = [], 0
        for view, rows in zip(self.views, self.kept):
            parts.append(np.flatnonzero(~view.store.live[rows]) + base)
            base += rows.size
        return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)

    def strings(self, column: str) -> KeptStrings:
        """``"id"``, ``"artifact_id"``, ``"text"`` or ``"metadata"`` (JSON texts) of the kept rows."""
        stores = [v.segment.store for v in self.views]
        held: dict[str, list[Any]] = {
            "id": [s.id_column for s in stores], "artifact_id": [s.artifact_column for s in stores],
            "text": [s.texts for s in stores], "metadata": [_metadata_strings(s.metadata) for s in stores]}
        return KeptStrings.of(held[column], self.kept)

    def kinds(self) -> tuple[tuple[str, ...], np.ndarray]:
        """The kept rows' kinds in order of first appearance, and their codes."""
        order: dict[str, None] = {}
        locals_ = []
        for view, rows in zip(self.views, self.kept):
            local = np.asarray(view.store.kind_codes)[rows]
            codes, first = np.unique(local, return_index=True)
            order.update(dict.fromkeys(view.store.kinds[c] for c in codes[np.argsort(first)].tolist()))
            locals_.append(local)
        index = {kind: code for code, kind in enumerate(order)}
        mapped = [np.array([index.get(k, -1) for k in view.store.kinds] or [-1], dtype=np.int32)[local]
                  for view, local in zip(self.views, locals_)]
        return tuple(order), np.concatenate(mapped) if mapped else np.empty(0, np.int32)

    def surface_indices(self) -> np.ndarray:
        parts = [np.asarray(v.store.surface_indices)[rows] for v, rows in zip(self.views, self.kept)]
        return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)

    def postings(self) -> Postings:
        masks = []
        for view, rows in zip(self.views, self.kept):
            mask = None
            if rows.size != view.n_rows:
                mask = np.zeros(view.n_rows, dtype=bool)
                mask[rows] = True
            masks.append(mask)
        for view in self.views:  # an index read from files: its exact cross-checks, before it is copied
            view.postings.check_pending()
        vocab, arrays = merge_postings([v.postings for v in self.views], masks)
        return Postings(vocab=vocab, term_offsets=arrays["term_offsets"], post_rows=arrays["post_rows"],
                        post_tfs=arrays["post_tfs"], doc_lengths=arrays["doc_lengths"],
                        row_offsets=arrays["row_offsets"], row_terms=arrays["row_terms"])

    def vector_blocks(self) -> Iterator[np.ndarray]:
        """The kept rows' vectors, a block at a time (checked first: a damaged matrix is not copied)."""
        for view, rows in zip(self.views, self.kept):
            vectors = view.require_vectors()
            step = max(1, (1 << 24) // max(1, vectors.shape[1] * 4))
            for lo in range(0, rows.size, step):
                yield np.ascontiguousarray(vectors[rows[lo:lo + step]], dtype=np.float32)

    def vectors(self) -> np.ndarray | None:
        dim = self.views[0].dim
        if dim is None:
            return None
        blocks = list(self.vector_blocks())
        return np.concatenate(blocks) if blocks else np.empty((0, dim), dtype=np.float32)

    def digests(self) -> np.ndarray | None:
        """The kept rows' text digests, when every part has them (else computed when first needed)."""
        found = [v.segment.derived.get("text_digests") for v in self.views]
        if any(d is None for d in found):
            return None
        return np.concatenate([np.asarray(d)[rows] for d, rows in zip(found, self.kept)]).astype(np.uint64)

    def ledger(self) -> tuple[list[str], np.ndarray, np.ndarray, list[str]]:
        """(artifacts, offsets, rows, missing ids) of the merged ledger (see :func:`merged_ledger`)."""
        return merged_ledger(self.views, self.kept)


def merged_ledger(views: Sequence[SegmentView], kept: Sequence[np.ndarray]) -> tuple[list[str], np.ndarray,
                                                                                      np.ndarray, list[str]]:
    """The listed entries of the views' ledgers over the merged rows: artifacts, CSR offsets, rows, missing ids."""
    names: dict[str, int] = {}
    gids, rows_out, keys, gone_ids = [], [], [], []
    base = 0
    for view, rows_kept in zip(views, kept):
        store = view.store
        table = store.ledger_table
        rows = np.asarray(table.rows, dtype=np.int64)
        offsets = np.asarray(table.offsets, dtype=np.int64)
        unlisted = store._unlisted
        keep = (rows < 0) if unlisted is not None else np.ones(rows.size, dtype=bool)
        if unlisted is not None:
            keep |= ~unlisted[np.maximum(rows, 0)]
        artifacts = table.artifacts
        listed = artifacts.to_array().tolist() if isinstance(artifacts, StringColumn) else list(artifacts)
        gid_of = np.fromiter((names.setdefault(a, len(names)) for a in listed), dtype=np.int64, count=len(listed))
        entry_gid = np.repeat(gid_of, np.diff(offsets))[keep]
        entry = rows[keep]
        remap = np.full(store.n_rows, -1, dtype=np.int64)
        remap[rows_kept] = np.arange(rows_kept.size) + base
        new = np.where(entry >= 0, remap[np.maximum(entry, 0)], -1)  # every listed row is kept
        present = entry >= 0
        key = np.full(entry.size, -1, dtype=np.int64)
        key[present] = np.asarray(store.surface_indices)[entry[present]]
        # an id without a row keeps its place after the entry before it
        positions = np.maximum.accumulate(np.where(present, np.arange(entry.size), -1)) if entry.size else entry
        key = np.where(positions >= 0, key[np.maximum(positions, 0)], -1)
        missing_at = dict(zip(np.flatnonzero(rows < 0).tolist(), table.missing))
        full_index = np.flatnonzero(keep)
        gone = [missing_at[int(full_index[i])] for i in np.flatnonzero(entry < 0).tolist()]  # ids the store lacks
        gids.append(entry_gid)
        rows_out.append(new)
        keys.append(key)
        gone_ids.append(iter(gone))
        base += rows_kept.size
    return _assemble(names, gids, rows_out, keys, gone_ids)


def _assemble(names: dict[str, int], gids: list[np.ndarray], rows_out: list[np.ndarray], keys: list[np.ndarray],
              gone_ids: list[Iterator[str]]) -> tuple[list[str], np.ndarray, np.ndarray, list[str]]:
    gid = np.concatenate(gids) if gids else np.empty(0, np.int64)
    new = np.concatenate(rows_out) if rows_out else np.empty(0, np.int64)
    key = np.concatenate(keys) if keys else np.empty(0, np.int64)
    missing = [m for it in gone_ids for m in it]  # in concatenation order of the -1 entries
    missing_of = dict(zip(np.flatnonzero(new < 0).tolist(), missing))
    n = len(names)
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, gid[new >= 0], new[new >= 0])
    seen = np.full(n, gid.size, dtype=np.int64)  # first appearance among the entries, for ties (no live row)
    np.minimum.at(seen, gid, np.arange(gid.size))
    listed = np.flatnonzero(seen < gid.size)
    ordered = listed[np.lexsort((seen[listed], first[listed]))]
    rank = np.full(n, -1, dtype=np.int64)
    rank[ordered] = np.arange(ordered.size)
    order = np.lexsort((key, rank[gid]))
    counts = np.bincount(rank[gid], minlength=ordered.size)
    offsets = np.zeros(ordered.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    by_name = list(names)
    return ([by_name[g] for g in ordered.tolist()], offsets, new[order],
            [missing_of[i] for i in order.tolist() if new[i] < 0])


def merged_segment(parts: MergedParts, segment_id: str, *, name: str | None = None) -> Segment:
    """The segment in memory holding the parts' kept rows in order (see the module docstring)."""
    kinds, codes = parts.kinds()
    artifacts, offsets, rows, missing = parts.ledger()

    def ledger(record_ids_of: Callable[[np.ndarray], np.ndarray]) -> LedgerTable:
        return LedgerTable(artifacts, offsets, rows, missing, record_ids_of)
    store = CorpusStore.from_columns(
        record_ids=parts.strings("id").column(), artifact_ids=parts.strings("artifact_id").column(),
        kinds=kinds, kind_codes=codes, surface_indices=parts.surface_indices(),
        texts=parts.strings("text").column(),
        metadata=JsonColumn(parts.strings("metadata").column(), check=lambda v: type(v) is dict,
                            what="a metadata mapping"),
        ledger=ledger, deleted_rows=np.empty(0, np.int64), name=name)
    segment = Segment(store=store, postings=parts.postings(), vectors=parts.vectors(), id=segment_id)
    digests = parts.digests()
    if digests is not None:
        segment.derived["text_digests"] = digests
    return segment
