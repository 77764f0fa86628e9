"""Committing a corpus's next state to disk: one new generation per commit, sharing every unchanged file.

:class:`DiskWriter` is the on-disk :class:`~irflow.store.writer.MemoryWriter`.
Under the corpus's writer lock (waiting at most ``lock_timeout`` seconds for
another process's commit), it first moves to the latest committed state —
so two processes' updates both land, each validated against the other's —
then writes a generation holding only what the commit made: the new
segment's files, the tombstone files of the segments it changed, the
manifest; every other file is a hard link of the previous generation's
(:mod:`irflow.store.segmentfiles`).  ``CURRENT`` is replaced last, atomically:
a process killed at any point leaves the old state or the new one.

A corpus of format 1 or 2 (one build) becomes format 3 at its first update:
its files are linked under the name of segment ``seg-000001``.  Its
out-of-band ``store.delete_record`` keeps it in its format (only the
tombstones file changes, as before).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from irflow.errors import CorpusError
from irflow.store import generations as gens
from irflow.store import persist
from irflow.store import segmentfiles as files
from irflow.store.merging import MergedParts
from irflow.store.mergepolicy import SegmentInfo
from irflow.store.opening import LEGACY_ID, legacy_entry, read_parts, stripped_identity
from irflow.store.segment import CorpusContext, SegmentView
from irflow.store.state import CorpusState, make_state
from irflow.store.updates import Change
from irflow.store.writer import MemoryWriter, infos, segment_id
from irflow.util.progress import bar

__all__ = ["DiskWriter"]

class DiskWriter(MemoryWriter):
    """Makes the next state of a corpus on disk as a new generation of its directory."""

    def __init__(self, root: Path, context: CorpusContext, generation: gens.Generation, *, verify: bool = True,
                 lock_timeout: float | None = gens.LOCK_TIMEOUT, publish: bool = True) -> None:
        super().__init__(context, 2)
        self.root = root
        self.verify = verify
        self.lock_timeout = lock_timeout
        #: False: each generation is written complete but not made live (``CURRENT`` stays; a sharded corpus
        #: commits its shards' new generations together, with one manifest: :mod:`irflow.shard.updating`)
        self.publish = publish
        self._note(generation)

    def with_context(self, context: CorpusContext) -> "DiskWriter":
        return DiskWriter(self.root, context, self._current, verify=self.verify, lock_timeout=self.lock_timeout,
                          publish=self.publish)

    def _note(self, generation: gens.Generation) -> None:
        self._current = generation
        self.next_number = max(self.next_number, int(generation.manifest.get("next_segment", 2)))

    @property
    def generation(self) -> str | None:
        return self._current.name

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with gens.locked(self.root, timeout=self.lock_timeout):
            yield

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A file the commit cannot write (a read-only directory, a full disk) is a CorpusError; nothing changed."""
        try:
            yield
        except OSError as error:
            where = f" ({error.filename})" if error.filename else ""
            raise CorpusError(f"cannot write to the corpus at {self.root}: {error.strerror or error}{where}; nothing "
                              "was changed (CURRENT still names the previous generation) — make the directory "
                              "writable, or free some space, and retry") from error

    # -- reading what others committed ------------------------------------------------------

    def latest(self, state: CorpusState) -> CorpusState:
        """The latest committed state: *state* itself, or what another process committed since (read once)."""
        known = state.generation
        if known is not None and not gens.moved(self.root, known.name):
            return state

        def read(generation: gens.Generation) -> tuple[gens.Generation, list[SegmentView]]:
            persist.check_format(generation)
            if known is not None:
                persist.check_lineage(generation, known)
            return generation, read_parts(generation, self.context, verify=self.verify, previous=state.parts)
        generation, parts = persist.retrying(self.root, read)
        self._note(generation)
        return make_state(parts, state.version + 1, self.context, generation)

    # -- commits ------------------------------------------------------------------------------

    def commit(self, state: CorpusState, change: Change, vectors: np.ndarray | None,
               progress: bool = False) -> CorpusState:
        new = super().commit(state, change, vectors, progress)
        fresh = {}
        if change.records:
            segment = new.parts[-1].segment
            fresh[segment.id] = (files.segment_payloads(segment), files.segment_entry(segment))
        generation = self._write(state, list(new.parts), fresh, progress)
        if change.records:
            segment = new.parts[-1].segment
            segment.source = stripped_identity(generation, files.data_files(fresh[segment.id][1]))
        return make_state(new.parts, new.version, self.context, generation)

    def delete_record(self, state: CorpusState, part: int, row: int) -> CorpusState:
        previous = self._previous(state)
        if previous.manifest["version"] < files.FORMAT_V3:  # a corpus of one build stays in its format
            view = state.parts[0]
            deleted = np.union1d(view.store.deleted_rows, [row]).astype(np.int64)
            with self._writing():
                generation = persist.write_tombstones(previous, deleted)
            self._note(generation)
            parts = [SegmentView(view.segment, self.context, deleted=deleted)]
            return make_state(parts, state.version + 1, self.context, generation)
        new = super().delete_record(state, part, row)
        generation = self._write(state, list(new.parts), {}, False)
        return make_state(new.parts, new.version, self.context, generation)

    def merge(self, state: CorpusState, runs: Sequence[tuple[int, int]], progress: bool = False, *,
              keep_empty: bool = False) -> CorpusState:
        items: list[SegmentView | str] = []
        fresh: dict[str, tuple[dict[str, gens.Payload], dict[str, Any]]] = {}
        at = 0
        for start, end in runs:
            items.extend(state.parts[at:start])
            run = state.parts[start:end]
            if keep_empty or any(p.n_live for p in run) or any(p.n_rows - p.n_live > p.store.unlisted_rows.size
                                                                for p in run):
                sid = segment_id(self.take_number())
                fresh[sid] = files.merged_payloads(MergedParts.of(run), sid)
                items.append(sid)
            at = end
        items.extend(state.parts[at:])
        with bar(progress, "merging", total=1, unit="commit") as shown:
            generation = self._write(state, items, fresh, progress)
            shown.update(1)
        info = generation.manifest.get("embedder")
        dim = None if info is None else int(info["dim"])
        parts = []
        for item in items:
            if isinstance(item, str):
                entry = fresh[item][1]
                segment = files.read_segment(generation, entry, verify=False, name=self.context.name, dim=dim)
                segment.source = stripped_identity(generation, files.data_files(entry))
                deleted, unlisted = files.read_tombstones(generation, entry, verify=False)
                item = SegmentView(segment, self.context, deleted=deleted, unlisted=unlisted)
            parts.append(item)
        return make_state(parts, state.version + 1, self.context, generation)

    # -- the generation ---------------------------------------------------------------------------

    def _previous(self, state: CorpusState) -> gens.Generation:
        if state.generation is None:
            raise CorpusError(f"corpus at {self.root}: its state names no generation (an internal error)")
        return state.generation

    def _entries(self, previous: gens.Generation) -> dict[str, dict[str, Any]]:
        if previous.manifest["version"] < files.FORMAT_V3:
            return {LEGACY_ID: legacy_entry(previous)}
        return {entry["id"]: entry for entry in previous.manifest["segments"]}

    def _write(self, state: CorpusState, items: Sequence[SegmentView | str],
               fresh: Mapping[str, tuple[Mapping[str, gens.Payload], Mapping[str, Any]]],
               progress: bool) -> gens.Generation:
        """Write the generation of *items* in order: fresh segments' files, changed tombstones; link the rest."""
        previous = self._previous(state)
        legacy = previous.manifest["version"] < files.FORMAT_V3
        old_entries = self._entries(previous)
        old_views = {view.segment.id: view for view in state.parts}
        payloads: dict[str, gens.Payload] = {}
        reuse: dict[str, str] = {}
        entries = []
        for item in items:
            if isinstance(item, str):
                data, entry = fresh[item]
                payloads.update(data)
                entries.append(dict(entry))
                continue
            sid = item.segment.id
            if sid in fresh:
                data, base = fresh[sid]
                payloads.update(data)
                entry = dict(base)
            else:
                entry = dict(old_entries[sid])
                for name in files.data_files(entry):
                    reuse[name] = name[len(files.prefix(sid)):] if legacy else name
                digests = item.segment.derived.get("text_digests")
                if not entry["text_hash"] and digests is not None:  # computed since: kept for the next update
                    payloads[files.prefix(sid) + files.TEXT_HASH] = np.ascontiguousarray(digests, dtype=np.uint64)
                    entry["text_hash"] = True
            deleted, unlisted = item.store.deleted_rows, item.store.unlisted_rows
            entry.update(live=item.n_rows - int(deleted.size), deleted=int(deleted.size),
                         unlisted=int(unlisted.size))
            if old_views.get(sid) is item and not legacy and sid not in fresh:
                reuse.update((name, name) for name in files.tombstone_files(entry))
            else:
                payloads.update(files.tombstone_payloads(sid, deleted, unlisted))
            entries.append(entry)
        manifest = self._manifest(previous, entries, items)
        with self._writing():
            generation = gens.write_generation(self.root, payloads, manifest, reuse_from=previous, reuse=reuse,
                                               commit=self.publish)
        self._note(generation)
        return generation

    def _manifest(self, previous: gens.Generation, entries: list[dict[str, Any]],
                  items: Sequence[SegmentView | str]) -> dict[str, Any]:
        manifest = {k: v for k, v in previous.manifest.items() if k not in ("files", "segments", "postings_arrays")}
        kinds: dict[str, None] = {}
        for item, entry in zip(items, entries):
            kinds.update(dict.fromkeys(entry["kinds"] if isinstance(item, str) else item.kinds))
        manifest.update(
            version=files.FORMAT_V3, segments=entries, next_segment=self.next_number, kinds=list(kinds),
            modified=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            counts={"rows": sum(e["rows"] for e in entries), "live": sum(e["live"] for e in entries),
                    "segments": len(entries)})
        return manifest

    def describe(self, state: CorpusState) -> list[SegmentInfo]:
        """Each segment's rows, live rows, files in the state's generation, and their bytes."""
        generation = self._previous(state)
        out = []
        entries = self._entries(generation)
        legacy = generation.manifest["version"] < files.FORMAT_V3
        for info in infos(state):
            if legacy:
                names = tuple(generation.files)
            else:
                entry = entries[info.id]
                names = tuple(files.data_files(entry) + files.tombstone_files(entry))
            size = sum(int(generation.files[n]["bytes"]) for n in names)
            out.append(SegmentInfo(rows=info.rows, live=info.live, stale=info.stale, id=info.id, files=names,
                                   bytes=size))
        return out
