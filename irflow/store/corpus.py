"""The corpus: records plus everything retrieval needs, built in memory or opened from disk.

A :class:`Corpus` bundles a :class:`~irflow.store.record_store.CorpusStore` (records, ledger,
tombstones) with the row-aligned indexes the stages read: the normalized
float32 vector matrix (absent for lexical-only corpora), BM25 postings, and a
lazily built columnar view of the metadata.  :func:`build` makes one from
records; :func:`open_corpus` reopens a built one by path or by name, with its
arrays memory-mapped and its embedder restored from the recorded spec — lazily,
so lexical search and record lookups never load a model.

A corpus changes in place (``add``, ``upsert``, ``delete``, ``put_artifact``,
``delete_artifact``, ``batch``, ``compact``): underneath it is an ordered
sequence of immutable segments (:mod:`irflow.store.segment`) plus per-segment
tombstones, and after any sequence of changes it answers every query exactly
as a fresh :func:`build` of its live records, ``list(corpus)``, would.

>>> corpus = build([{"artifact_id": "unbox", "surface_kind": "name", "text": "unbox"}])
>>> corpus.n_rows, corpus.kinds
(1, ('name',))
>>> corpus.add([{"artifact_id": "graphy", "surface_kind": "name", "text": "graphy"}]).added
1
>>> [r.text for r in corpus], len(corpus.segments)
(['unbox', 'graphy'], 2)
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from irflow.errors import CorpusError, IrflowError
from irflow.kernels.embedders import AUTO, resolve_embedder
from irflow.kernels.postings import Postings
from irflow.kernels.text import Analyzer, get_analyzer
from irflow.store.generations import check_writable_root
from irflow.store.paths import HOME_ENV, is_corpus_name, resolve_corpus_path
from irflow.store.diskwriter import DiskWriter
from irflow.store.generations import LOCK_TIMEOUT, Generation, holding
from irflow.store.opening import context_of, read_parts, stripped_identity
from irflow.store.persist import TOMBSTONES_FILE, EmbedderInfo, check_format, retrying, save_corpus
from irflow.store.reading import CorpusReader
from irflow.store.record_store import CorpusStore, prepare_records
from irflow.store.records import Record
from irflow.store.mergepolicy import MergePolicy, SegmentInfo
from irflow.store.newvectors import new_vectors
from irflow.store.segment import CorpusContext, Segment, SegmentView
from irflow.store.state import CorpusState, make_state
from irflow.store.update_methods import UpdateMethods
from irflow.store.updates import Operation, UpdateReport, apply_operations
from irflow.store.writer import MemoryWriter, infos, segment_id, segment_number
from irflow.store.vectors import VectorCheck, document_vectors
from irflow.util.corpusmarks import CORPUS, refuse_inside_corpus
from irflow.util.progress import bar, phase, tracked
from irflow.util.unicode import check_text

__all__ = ["Corpus", "build", "open_corpus"]

logger = logging.getLogger(__name__)


class Corpus(CorpusReader, UpdateMethods):
    """Records and their indexes, row-aligned; what every retrieval stage reads, through the corpus protocol.

    Implements :class:`irflow.store.protocol.CorpusProtocol` (the members
    retrieval code may use) and offers more for building, inspecting and
    maintaining a corpus (``store``, ``vectors``, ``columns``, ``record_ids``...).

    Made by :func:`build` or :func:`open_corpus`, not by hand.  Rows are the
    records in build order; deleted rows stay (ids keep their rows) but no
    candidate mask ever includes them.

    A corpus holds one committed *state* at a time (see
    :mod:`irflow.store.state`) and every read member answers from the state
    current when it is called; ``snapshot()`` is that state's view, which
    never changes (a recipe run takes one when it starts).

    Updates (each one atomic commit, returning an :class:`UpdateReport`):
    ``add``, ``upsert``, ``delete``, ``put_artifact``, ``delete_artifact``,
    ``batch()`` (several as one commit), ``compact()``; ``refresh()`` picks up
    other processes' commits; ``merge_policy`` says when segments merge by
    themselves; ``segments`` describes them.  Writers of one object take
    turns (a lock); writers of one directory too (its file lock, waiting at
    most ``lock_timeout`` seconds).  The rules and refusals:
    :mod:`irflow.store.updates`; vectors: :mod:`irflow.store.newvectors`.
    """

    def __init__(
        self,
        *,
        store: CorpusStore,
        postings: Postings,
        analyzer: Analyzer,
        vectors: np.ndarray | None,
        embedder: Any = None,
        embedder_info: EmbedderInfo | None = None,
        name: str | None = None,
        path: Path | None = None,
        vectors_check: VectorCheck | None = None,
    ) -> None:
        context = CorpusContext(name=name, analyzer=analyzer, embedder=embedder, embedder_info=embedder_info,
                                path=path)
        segment = Segment(store=store, postings=postings, vectors=vectors, vectors_check=vectors_check,
                          id=segment_id(1))
        view = SegmentView(segment, context, deleted=store.deleted_rows, unlisted=store.unlisted_rows)
        self._setup(context, make_state([view], 0, context))

    def _setup(self, context: CorpusContext, state: CorpusState, writer: MemoryWriter | None = None) -> None:
        self._context = context
        self._write_lock = threading.RLock()  # writers of this object, one at a time
        self._writer = writer if writer is not None else MemoryWriter(
            context, 1 + max(segment_number(p.segment.id) for p in state.parts))
        self._merge_policy = MergePolicy()
        self._install(state)

    def _install(self, state: CorpusState) -> None:
        """Make *state* current (one assignment: readers see the old state or the new one)."""
        for part in state.parts:  # a store handed out never changes: its delete_record goes through here
            part.store.set_delete_hook(self._delete_record)
        state.view.store.set_delete_hook(self._delete_record)
        self._state = state

    def _on_disk(self, generation: Generation, *, lock_timeout: float | None) -> None:
        """Commit to the corpus directory of *generation* from now on (a corpus just built there)."""
        state = self._state
        segment = state.parts[0].segment
        segment.source = stripped_identity(generation, [f for f in generation.files if f != TOMBSTONES_FILE])
        self._writer = DiskWriter(generation.root, self._context, generation, lock_timeout=lock_timeout)
        self._state = make_state(state.parts, state.version, self._context, generation)

    @property
    def lock_timeout(self) -> float | None:
        """How long an update of an on-disk corpus waits for another process's commit (seconds; None: no limit)."""
        timeout: float | None = getattr(self._writer, "lock_timeout", None)
        return timeout

    @lock_timeout.setter
    def lock_timeout(self, seconds: float | None) -> None:
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0):
            raise ValueError(f"lock_timeout must be a number of seconds >= 0 or None, got {seconds!r}")
        if isinstance(self._writer, DiskWriter):
            self._writer.lock_timeout = seconds

    def with_embedder(self, embedder: Any) -> "Corpus":
        """The same corpus (shared records and arrays) with another query embedder.

        For in-memory corpora built from precomputed vectors with
        ``embedder=None``; its dimension is checked on first use.
        """
        context = self._context.with_embedder(embedder)
        state = self._state
        parts = [SegmentView(part.segment, context, deleted=part.store.deleted_rows, unlisted=part.store.unlisted_rows)
                 for part in state.parts]
        other = Corpus.__new__(Corpus)
        other._setup(context, make_state(parts, state.version, context, state.generation),
                     self._writer.with_context(context))
        other._merge_policy = self._merge_policy
        return other

    # -- updates -----------------------------------------------------------------------------

    def compact(self, *, progress: bool = False) -> UpdateReport:
        """Merge every segment into one, without deleted rows (answers unchanged); a no-op when there is nothing to merge."""
        with self._write_lock, self._writer.locked():
            state = self._latest()
            if len(state.parts) == 1 and not infos(state)[0].removable:
                return UpdateReport(segments=1, generation=self._writer.generation)
            self._install(self._writer.merge(state, [(0, len(state.parts))], progress, keep_empty=True))
        return UpdateReport(segments=1, generation=self._writer.generation, merged=len(state.parts))

    def refresh(self) -> bool:
        """Move to the latest committed state (commits of other processes, on disk); True when it changed."""
        with self._write_lock:
            before = self._state
            return self._latest() is not before

    @property
    def segments(self) -> tuple[SegmentInfo, ...]:
        """Each segment in row order: its id, rows, live rows (and on disk its files and their bytes)."""
        return tuple(self._writer.describe(self._state))

    def _latest(self) -> CorpusState:
        state = self._writer.latest(self._state)
        if state is not self._state:
            self._install(state)
        return state

    def _commit(self, operations: Sequence[Operation], progress: bool, batch_size: int) -> UpdateReport:
        """Validate *operations* against the latest state and commit them as one new state (then merge by policy)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        with self._write_lock, self._writer.locked():
            state = self._latest()
            change = apply_operations(state.parts, operations, self._context.label())
            if change.empty:
                return UpdateReport(segments=len(state.parts), generation=self._writer.generation)
            vectors, embedded, reused = new_vectors(change.records, state.parts, self._context,
                                                    batch_size=batch_size, progress=progress)
            self._install(self._writer.commit(state, change, vectors, progress))
        merged = self._merge_by_policy(progress)
        return UpdateReport(added=change.added, replaced=change.replaced, deleted=change.deleted,
                            embedded=embedded, reused=reused, segments=len(self._state.parts),
                            generation=self._writer.generation, merged=merged)

    def _merge_by_policy(self, progress: bool) -> int:
        """Merges the policy asks for, each its own commit (a merge can make another due: a tier fills).

        The caller's operation is committed already: a merge that fails
        (another writer holds the lock too long, the disk is full) is logged
        and left for a later commit, never raised over a commit that landed.
        """
        merged = 0
        try:
            for _ in range(16):
                with self._write_lock, self._writer.locked():
                    state = self._latest()
                    runs = self._merge_policy.plan(infos(state))
                    if not runs:
                        break
                    self._install(self._writer.merge(state, runs, progress))
                merged += sum(end - start for start, end in runs)
        except (IrflowError, OSError) as error:
            logger.warning("%s: segments not merged this time (%s); a later commit or compact() merges them",
                           self._context.label(), error)
        return merged

    def _delete_record(self, record_id: str) -> None:
        """``store.delete_record``: tombstone one record, leaving it listed (the seed's stale-ledger case)."""
        with self._write_lock, self._writer.locked():
            state = self._latest()
            for part, view in enumerate(state.parts):
                row = view.store.live_row(record_id)
                if row is not None:
                    self._install(self._writer.delete_record(state, part, row))
                    return
            state.view.store.row_of(record_id)  # raises the KeyError naming the id

    def __repr__(self) -> str:
        return repr(self._state.view)


# -- building ---------------------------------------------------------------------------------


def _tokenize(analyzer: Analyzer, texts: Sequence[str], progress: bool, chunk: int = 1024) -> Iterator[list[str]]:
    """The tokens of every text, streamed chunk by chunk (the same tokens as one call).

    A generator, so the postings builder holds one chunk of token lists at a
    time, never the whole collection's (several GB of Python lists at 1M
    records); the chunks also let a progress bar follow.
    """
    with bar(progress, "tokenizing", total=len(texts), unit="record", unit_scale=True) as shown:
        for start in range(0, len(texts), chunk):
            yield from analyzer.tokenize_many(texts[start:start + chunk])
            shown.update(min(chunk, len(texts) - start))


def build(
    records: Iterable[Record | Mapping[str, Any]],
    *,
    embedder: Any = AUTO,
    analyzer: Analyzer | str | Mapping[str, Any] | None = None,
    path: str | os.PathLike[str] | None = None,
    name: str | None = None,
    progress: bool = False,
    batch_size: int = 512,
) -> Corpus:
    """Build a corpus from records (Record objects or dicts with the same keys).

    ``embedder``: by default ``"auto"`` — all-MiniLM-L6-v2 when the models
    extra is installed, else the ``"hash"`` stand-in, said once (the rule of
    every entry point: :func:`irflow.kernels.embedders.default_embedder`) —;
    a spec ("onnx:all-MiniLM-L6-v2", "hash", "hash:512", "st:<model>"), a
    callable ``texts -> (n, d)``, an object with ``embed(texts, kind)``, or
    None for a lexical-only corpus.  Records may instead all carry
    precomputed vectors.
    ``analyzer`` defaults to :data:`irflow.kernels.text.DEFAULT_ANALYZER`.
    ``progress=True`` shows the progress of each phase (checking records,
    tokenizing, postings, embedding, writing; see :mod:`irflow.util.progress`).  With
    ``path`` the corpus is written there (atomically; over an existing corpus
    it is a rebuild) and named after the directory unless ``name`` is given;
    a path inside another corpus is refused (OutputError).

    >>> build([Record("unbox", "name", "unbox")], embedder=None).vectors is None
    True
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if isinstance(name, str):
        check_text(name, "build(): name")  # hits carry it (their source): UTF-8 text, as every name
    prepared = prepare_records(tracked(progress, "checking records", records, unit="record"))
    if not prepared:
        raise CorpusError("build() got no records; a corpus needs at least one record")
    root = None if path is None else Path(path).expanduser()
    if root is not None:  # refuse early, before tokenizing and embedding
        refuse_inside_corpus(root, "corpus", replacing=CORPUS)  # a rebuild, never a corpus inside another
        check_writable_root(root)
    corpus_name = name if name is not None else (root.name if root is not None else None)
    the_analyzer = get_analyzer(analyzer)
    the_embedder = resolve_embedder(embedder)
    store = CorpusStore.from_records(prepared, name=corpus_name)
    postings = Postings.build(_tokenize(the_analyzer, store.texts, progress),
                              second_phase=lambda: phase(progress, "postings"))
    vectors, info = document_vectors(prepared, store.texts, the_embedder, batch_size=batch_size, progress=progress)
    generation = None
    if root is not None:
        with phase(progress, "writing"):
            generation = save_corpus(root, store=store, postings=postings, vectors=vectors,
                                     analyzer=the_analyzer.to_dict(), embedder=info)
    corpus = Corpus(
        store=store, postings=postings, analyzer=the_analyzer, vectors=vectors,
        embedder=the_embedder, embedder_info=info, name=corpus_name, path=root,
    )
    if generation is not None:
        corpus._on_disk(generation, lock_timeout=LOCK_TIMEOUT)
    return corpus


def open_corpus(path_or_name: str | os.PathLike[str], *, embedder: Any = None, verify: bool = True,
                lock_timeout: float | None = LOCK_TIMEOUT, generation: tuple[str, str, str] | None = None) -> Corpus:
    """Open a built corpus by path, or by name under ``$IRFLOW_HOME/corpora``.

    Files are verified (sizes always, checksums unless ``verify=False``) and
    arrays memory-mapped.  The embedder recorded by spec is restored lazily;
    a corpus built with a custom callable needs ``embedder=`` for dense search
    (lexical search and records work without) and to embed added records.
    A passed embedder's dimension is checked against the corpus on first use.
    ``lock_timeout``: how long an update waits for another process's
    commit to this corpus (seconds; None: as long as it takes).
    ``generation``: (name, manifest checksum, where they are recorded) of a
    generation to open instead of the live one (a shard of a sharded corpus:
    the one its manifest names), held while it is read.
    """
    root = resolve_corpus_path(path_or_name)
    if not root.exists() and is_corpus_name(path_or_name):
        raise CorpusError(
            f"no corpus named {str(path_or_name)!r}: {root} does not exist (names resolve under ${HOME_ENV}/corpora); "
            "build it with irflow.build(..., path=...) or pass a path"
        )

    def read(generation: Generation) -> tuple[Generation, CorpusContext, list[SegmentView]]:
        check_format(generation)
        context = context_of(generation, root, embedder)
        return generation, context, read_parts(generation, context, verify=verify)
    if generation is None:
        opened, context, parts = retrying(root, read)
    else:
        name_of, digest, recorded_in = generation
        with holding(root, name_of, digest, recorded_in=recorded_in) as held:
            opened, context, parts = read(held)
    corpus = Corpus.__new__(Corpus)
    corpus._setup(context, make_state(parts, 0, context, opened),
                  DiskWriter(root, context, opened, verify=verify, lock_timeout=lock_timeout))
    return corpus
