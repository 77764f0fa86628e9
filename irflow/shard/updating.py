"""Updating a sharded corpus in place: one machine's operations, validated over every shard, committed in one step.

A sharded corpus takes the same updates as a corpus (``add``, ``upsert``,
``delete``, ``put_artifact``, ``delete_artifact``, a batch of them,
``compact``) and afterwards answers, to the bit, as the single corpus would
after the same operations — which answers as a fresh build of its live
records (:mod:`irflow.store.updates`).  What keeps it equal:

- **one validation**: the operations are checked, in call order, against
  the live records of every shard at once (the segments of all shards are
  one sequence of parts to :func:`~irflow.store.updates.apply_operations`),
  so an id live in any shard is "already in the corpus", an upsert or a
  delete finds the record in whichever shard holds it, and a refusal
  changes nothing anywhere;
- **where new records go**: to the shard whose ledger lists their artifact
  (its surfaces stay together, so collapse, expansion and
  ``records_for_artifact`` stay local to one shard); an artifact no shard
  lists goes to the **last** shard;
- **global row order**: the new records take the next global rows in the
  order they were written (``n_rows``, ``n_rows + 1``, ...), exactly where
  the single corpus puts them, whatever shard holds them; a shard's new
  rows are appended to it (a new segment), so its local order stays
  ascending in global rows.  So ``list(sharded) == list(single)`` and ties
  break alike;
- **merges** inside a shard (its merge policy after a commit, or
  ``compact``) merge adjacent segments, which keeps its rows' relative
  order; the rows they drop (deleted ones) leave the global row space and
  every shard's rows are renumbered by rank (one machine renumbers its rows
  when it merges too: answers depend on the order of the live rows, never
  on their numbers);
- **vectors**: only texts no shard holds are embedded
  (:mod:`irflow.store.newvectors` looks across every shard's segments).

**One commit.**  Under the sharded corpus's writers' lock, each shard that
changes is written as new generations of its directory that are *not* made
live (``DiskWriter(publish=False)``: the change, then its merges, then one
holding its global rows when they are not one contiguous run); then one
new ``shards.json`` names them all (:func:`irflow.shard.disk.commit`): a
process killed at any point leaves the old sharded state or the new one,
and a reader opens one of them, whole.  Shards that do not change keep
their generation (a shard whose global rows are renumbered gets a new
generation of hard links and its new rows file).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from irflow.errors import CorpusError
from irflow.store import generations as gens
from irflow.store.corpus import Corpus, open_corpus
from irflow.store.diskwriter import DiskWriter
from irflow.store.merging import MergedParts
from irflow.store.mergepolicy import MergePolicy
from irflow.store.newvectors import new_vectors
from irflow.store.updates import Change, Operation, UpdateReport, apply_operations
from irflow.store.writer import infos
from irflow.shard.disk import commit, hold, open_manifest
from irflow.shard.manifest import MANIFEST_FILE, ROWS_FILE, ShardEntry, ShardManifest, check_layout

__all__ = ["update_sharded", "PAUSE_AFTER_SHARDS"]

#: The pause point (see irflow.store.generations.PAUSE_ENV) after every shard's new generations are written.
PAUSE_AFTER_SHARDS = "shard-update:shards-written"


class _Shard:
    """One shard while a commit is made: its corpus (a writer that makes nothing live) and each local row's key.

    ``keys``: the global-order key of each local row (its global row before
    the commit; ``n_rows + i`` for the i-th new record), ascending.
    """

    def __init__(self, root: Path, entry: ShardEntry, rows: np.ndarray, embedder: Any) -> None:
        self.entry = entry
        self.dir = root / entry.dir
        named = (str(entry.generation), entry.manifest_checksum, str(root / MANIFEST_FILE))
        # sizes are checked when opened; the bytes were checked when the sharded corpus was opened to be updated
        self.corpus: Corpus = open_corpus(self.dir, embedder=embedder, verify=False, generation=named)
        writer = self.corpus._writer
        if not isinstance(writer, DiskWriter):  # open_corpus gives a corpus on disk
            raise CorpusError(f"{self.dir}: not a corpus on disk")
        writer.publish = False
        self.writer = writer
        self.rows_before = np.asarray(rows, dtype=np.int64)
        self.keys = self.rows_before
        self.written = False  # a new generation of this shard's data was written

    @property
    def parts(self) -> tuple[Any, ...]:
        return tuple(self.corpus._state.parts)

    def install(self, state: Any) -> None:
        self.corpus._install(state)
        self.written = True


def _homes(shards: Sequence[_Shard], artifacts: Sequence[str]) -> dict[str, int]:
    """The shard of each artifact: the first whose ledger lists it, else the last shard."""
    names = list(dict.fromkeys(artifacts))
    homes: dict[str, int] = {}
    for s, shard in enumerate(shards):
        for part in shard.parts:
            listed = np.asarray(part.store.sibling_rows(names).listed, dtype=bool)
            for name in np.asarray(names, dtype=object)[listed].tolist():
                homes.setdefault(name, s)
    return {name: homes.get(name, len(shards) - 1) for name in names}


def _write_change(shards: Sequence[_Shard], change: Change, vectors: np.ndarray | None, n_rows: int,
                  progress: bool) -> None:
    """Each shard's share of *change* written (uncommitted): its tombstones, and its new records as a segment."""
    homes = _homes(shards, [r.artifact_id for r in change.records])
    home = np.array([homes[r.artifact_id] for r in change.records], dtype=np.int64)
    at = 0
    for s, shard in enumerate(shards):
        n = len(shard.parts)
        mine = np.flatnonzero(home == s)
        part = Change(removed=change.removed[at:at + n], records=tuple(change.records[i] for i in mine.tolist()),
                      added=0, replaced=0, deleted=0, unlisted=change.unlisted[at:at + n])
        at += n
        if part.empty:
            continue
        own = None if vectors is None or not mine.size else np.ascontiguousarray(vectors[mine])
        with gens.locked(shard.dir, timeout=shard.writer.lock_timeout):
            shard.install(shard.writer.commit(shard.corpus._state, part, own, progress))
        shard.keys = np.concatenate([shard.keys, n_rows + mine])


def _merge_runs(shard: _Shard, runs: Sequence[tuple[int, int]], keep_empty: bool, progress: bool) -> None:
    """Merge these runs of the shard's segments (uncommitted); its keys follow the rows each merge keeps."""
    parts = shard.parts
    sizes = [p.n_rows for p in parts]
    starts = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))
    keep = np.ones(int(starts[-1]), dtype=bool)
    for start, end in runs:
        for i, view in enumerate(parts[start:end], start):
            kept = np.zeros(sizes[i], dtype=bool)
            kept[MergedParts.of([view]).kept[0]] = True
            keep[starts[i]:starts[i + 1]] = kept
    with gens.locked(shard.dir, timeout=shard.writer.lock_timeout):
        shard.install(shard.writer.merge(shard.corpus._state, runs, progress, keep_empty=keep_empty))
    shard.keys = shard.keys[keep]


def _merges(shards: Sequence[_Shard], policy: MergePolicy, compact: bool, progress: bool) -> int:
    """``compact``: every shard's segments merged into one; else what the merge policy asks of the changed shards."""
    merged = 0
    for shard in shards:
        if compact:
            parts = shard.parts
            if len(parts) == 1 and not infos(shard.corpus._state)[0].removable:
                continue
            _merge_runs(shard, [(0, len(parts))], True, progress)
            merged += len(parts)
            continue
        if not shard.written:
            continue
        for _ in range(16):
            runs = policy.plan(infos(shard.corpus._state))
            if not runs:
                break
            _merge_runs(shard, runs, False, progress)
            merged += sum(end - start for start, end in runs)
    return merged


def _with_rows(shard: _Shard, rows: np.ndarray) -> gens.Generation:
    """The shard's latest generation again (hard links) with these global rows (or none: contiguous), uncommitted."""
    latest = shard.corpus._state.generation
    if latest is None:
        raise CorpusError(f"{shard.dir}: its state names no generation (an internal error)")
    contiguous = rows.size == 0 or int(rows[-1]) - int(rows[0]) + 1 == rows.size
    if contiguous and ROWS_FILE not in latest.files:
        return latest  # its rows are a range (the manifest's first row): nothing to add
    payloads: dict[str, Any] = {} if contiguous else {ROWS_FILE: rows}
    reuse = [name for name in latest.files if name != ROWS_FILE]
    manifest = {k: v for k, v in latest.manifest.items() if k != "files"}
    with gens.locked(shard.dir, timeout=shard.writer.lock_timeout):
        return gens.write_generation(shard.dir, payloads, manifest, reuse_from=latest, reuse=reuse, commit=False)


def _entry(shard: _Shard, generation: gens.Generation, rows: np.ndarray) -> ShardEntry:
    corpus = shard.corpus
    contiguous = rows.size == 0 or int(rows[-1]) - int(rows[0]) + 1 == rows.size
    return ShardEntry(index=shard.entry.index, dir=shard.entry.dir, n_rows=int(rows.size), live=len(corpus),
                      artifacts=len(corpus.store.ledger), first_row=int(rows[0]) if rows.size else 0,
                      build_id=str(generation.manifest["build_id"]),
                      manifest_checksum=gens.checksum(generation.dir / gens.MANIFEST_FILE),
                      kinds=tuple(corpus.kinds), generation=generation.name,
                      rows_file=None if contiguous else ROWS_FILE)


def _kinds(shards: Sequence[_Shard], rows: Sequence[np.ndarray]) -> list[str]:
    """The live records' kinds in order of first appearance in the global row order (one machine's ``kinds``)."""
    first: dict[str, int] = {}
    for shard, global_rows in zip(shards, rows):
        corpus = shard.corpus
        live = np.flatnonzero(corpus.live)
        codes = np.asarray(corpus.kind_codes_of(live))
        found, at = np.unique(codes, return_index=True)
        for code, position in zip(found.tolist(), at.tolist()):
            if code >= 0:
                kind = corpus.kinds[code]
                first[kind] = min(first.get(kind, 1 << 62), int(global_rows[live[position]]))
    return sorted(first, key=first.__getitem__)


def _manifest(old: ShardManifest, shards: Sequence[_Shard]) -> ShardManifest:
    """The new manifest: global rows renumbered by rank of the kept keys, changed shards' new generations."""
    everything = np.sort(np.concatenate([shard.keys for shard in shards]))
    entries = []
    for shard in shards:
        rows = np.searchsorted(everything, shard.keys).astype(np.int64)
        if not shard.written and np.array_equal(rows, shard.rows_before):
            entries.append(shard.entry)  # untouched: its generation as it was
        else:
            entries.append(_entry(shard, _with_rows(shard, rows), rows))
    kinds = _kinds(shards, [np.searchsorted(everything, shard.keys) for shard in shards])
    return ShardManifest(name=old.name, n_rows=int(everything.size), live=sum(e.live for e in entries),
                         kinds=tuple(kinds), analyzer=dict(old.analyzer),
                         embedder=None if old.embedder is None else dict(old.embedder), shards=tuple(entries))


def update_sharded(root: Path, operations: Sequence[Operation], *, embedder: Any = None, compact: bool = False,
                   policy: MergePolicy | None = None, lock_timeout: float | None = gens.LOCK_TIMEOUT,
                   progress: bool = False, batch_size: int = 512) -> tuple[UpdateReport, bool]:
    """Apply *operations* (then merges; ``compact``: merge every shard whole) to the sharded corpus at *root*.

    Returns the report and whether a new sharded state was committed.  A
    refused operation raises before anything is written; an error while
    writing leaves the committed state as it was (the uncommitted
    generations are removed by the next commit).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    policy = MergePolicy() if policy is None else policy
    with gens.locked(root, timeout=lock_timeout):
        manifest = open_manifest(root)
        if manifest.version < 2:
            raise CorpusError(f"{root / MANIFEST_FILE} is a sharding of an earlier irflow (version {manifest.version}), "
                              f"which cannot be updated in place; shard it again first (irflow shard {root} --shards "
                              f"{len(manifest.shards)} --out {root})")
        label = f"corpus {manifest.name!r}" if manifest.name else "this corpus"
        with contextlib.ExitStack() as held:
            rows = hold(root, manifest, held)
            check_layout(root, manifest, rows)
            shards = [_Shard(root, entry, r, embedder) for entry, r in zip(manifest.shards, rows)]
            report = UpdateReport(segments=sum(len(s.parts) for s in shards))
            embedded = reused = 0
            change = None
            if operations:
                parts = [part for shard in shards for part in shard.parts]
                change = apply_operations(parts, operations, label)
                if not change.empty:
                    vectors, embedded, reused = new_vectors(change.records, parts, shards[0].corpus._context,
                                                            batch_size=batch_size, progress=progress)
                    _write_change(shards, change, vectors, manifest.n_rows, progress)
            merged = _merges(shards, policy, compact, progress)
            if not any(shard.written for shard in shards):
                return report, False
            new = _manifest(manifest, shards)
            segments = sum(len(s.parts) for s in shards)
        gens.pause_point(PAUSE_AFTER_SHARDS)
        commit(root, new)
    if change is None:
        return UpdateReport(segments=segments, merged=merged), True
    return UpdateReport(added=change.added, replaced=change.replaced, deleted=change.deleted, embedded=embedded,
                        reused=reused, segments=segments, merged=merged), True

