"""How a corpus's state changes: a validated change or a merge made into the next state, in memory.

:class:`MemoryWriter` makes the next :class:`~irflow.store.state.CorpusState`
of an in-memory corpus: the segments a change tombstones get new views (the
segment itself is shared), the new records become one new segment (their
postings built, their vectors given), merged runs become one segment each.
The on-disk writer (:mod:`irflow.store.diskwriter`) does the same through a
new generation and opens its result.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from irflow.kernels.postings import Postings
from irflow.store.merging import MergedParts, merged_segment
from irflow.store.mergepolicy import SegmentInfo
from irflow.store.record_store import CorpusStore
from irflow.store.records import Record
from irflow.store.segment import CorpusContext, Segment, SegmentView
from irflow.store.state import CorpusState, make_state
from irflow.store.textdigest import text_digests
from irflow.store.updates import Change
from irflow.util.progress import bar

__all__ = ["MemoryWriter", "segment_id", "segment_number", "infos", "new_segment"]


def segment_id(number: int) -> str:
    """The id of segment number *number*: ``seg-000003`` (its files on disk start with it)."""
    return f"seg-{number:06d}"


def segment_number(segment_id_: str) -> int:
    """The number in a segment id (0 for an id of another form)."""
    head, _, number = segment_id_.partition("-")
    return int(number) if head == "seg" and number.isdigit() else 0


def infos(state: CorpusState) -> list[SegmentInfo]:
    """What the merge policy sees of each segment of *state*."""
    out = []
    for part in state.parts:
        store = part.store
        rows, live = store.n_rows, part.n_live
        stale = rows - live - int(store.unlisted_rows.size)
        out.append(SegmentInfo(rows=rows, live=live, stale=stale, id=part.segment.id))
    return out


def _tokens(analyzer: Any, texts: Sequence[str], progress: bool, chunk: int = 1024) -> Iterator[list[str]]:
    with bar(progress, "tokenizing", total=len(texts), unit="record", unit_scale=True) as shown:
        for start in range(0, len(texts), chunk):
            yield from analyzer.tokenize_many(texts[start:start + chunk])
            shown.update(min(chunk, len(texts) - start))


def new_segment(records: Sequence[Record], vectors: np.ndarray | None, context: CorpusContext, number: int,
                progress: bool = False) -> Segment:
    """A segment in memory of prepared records (in order) and their vectors: postings built, digests made."""
    store = CorpusStore.from_records(records, name=context.name)
    postings = Postings.build(_tokens(context.analyzer, store.texts, progress))
    segment = Segment(store=store, postings=postings, vectors=vectors, id=segment_id(number))
    segment.derived["text_digests"] = text_digests(store.texts)
    return segment


class MemoryWriter:
    """Makes the next state of an in-memory corpus (the base of the on-disk writer)."""

    def __init__(self, context: CorpusContext, next_number: int) -> None:
        self.context = context
        self.next_number = next_number

    def with_context(self, context: CorpusContext) -> "MemoryWriter":
        """The same writer for another context (a corpus with another query embedder)."""
        return MemoryWriter(context, self.next_number)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Held while a commit is made (in memory: the corpus's own lock is enough)."""
        yield

    def latest(self, state: CorpusState) -> CorpusState:
        """The state to apply the next commit to (in memory: the current one)."""
        return state

    @property
    def generation(self) -> str | None:
        return None

    def describe(self, state: CorpusState) -> list[SegmentInfo]:
        """``corpus.segments`` (in memory: rows and live rows)."""
        return infos(state)

    def take_number(self) -> int:
        number = self.next_number
        self.next_number += 1
        return number

    def tombstoned(self, state: CorpusState, change: Change) -> list[SegmentView]:
        """The state's views with the change's removals (views of unchanged segments are kept, caches and all)."""
        parts = []
        unlisted = change.unlisted or tuple(np.empty(0, np.int64) for _ in change.removed)
        for part, removed, stale in zip(state.parts, change.removed, unlisted):
            if not removed.size and not stale.size:
                parts.append(part)
                continue
            store = part.store
            parts.append(SegmentView(part.segment, self.context, deleted=np.union1d(store.deleted_rows, removed),
                                     unlisted=np.union1d(np.union1d(store.unlisted_rows, removed), stale)))
        return parts

    def commit(self, state: CorpusState, change: Change, vectors: np.ndarray | None,
               progress: bool = False) -> CorpusState:
        """The state after *change*: tombstones applied, the new records one new segment at the end."""
        parts = self.tombstoned(state, change)
        if change.records:
            segment = new_segment(change.records, vectors, self.context, self.take_number(), progress)
            parts.append(SegmentView(segment, self.context))
        return make_state(parts, state.version + 1, self.context)

    def delete_record(self, state: CorpusState, part: int, row: int) -> CorpusState:
        """The state with one row tombstoned and left on the ledger (``store.delete_record``)."""
        view = state.parts[part]
        parts = list(state.parts)
        parts[part] = SegmentView(view.segment, self.context,
                                  deleted=np.union1d(view.store.deleted_rows, [row]),
                                  unlisted=view.store.unlisted_rows)
        return make_state(parts, state.version + 1, self.context, state.generation)

    def merge(self, state: CorpusState, runs: Sequence[tuple[int, int]], progress: bool = False, *,
              keep_empty: bool = False) -> CorpusState:
        """The state with each run of adjacent segments replaced by one merged segment (or by none: all dead).

        ``keep_empty``: a run with no live row still becomes one (empty) segment (``compact`` of a corpus
        whose every record was deleted).
        """
        parts: list[SegmentView] = []
        at = 0
        for start, end in runs:
            parts.extend(state.parts[at:start])
            run = state.parts[start:end]
            if keep_empty or any(p.n_live for p in run) or _stale(run):
                with bar(progress, "merging", total=1, unit="merge") as shown:
                    merged = MergedParts.of(run)
                    segment = merged_segment(merged, segment_id(self.take_number()), name=self.context.name)
                    shown.update(1)
                parts.append(SegmentView(segment, self.context, deleted=merged.deleted()))
            at = end
        parts.extend(state.parts[at:])
        return make_state(parts, state.version + 1, self.context)


def _stale(views: Sequence[SegmentView]) -> bool:
    """Whether some deleted row of these views is still listed (``delete_record``): a merge must keep it listed."""
    return any(v.n_rows - v.n_live > v.store.unlisted_rows.size for v in views)
