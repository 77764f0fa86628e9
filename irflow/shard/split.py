"""Splitting a corpus (or records) into shards that hold whole artifacts.

An artifact's surfaces all go to one shard, so collapse, expand and
``records_for_artifact`` stay local to a shard.  Artifacts are taken in the
order of their first record and cut into ``n`` consecutive groups of about
the same number of records; a shard holds its artifacts' rows in the global
record order, so when each artifact's records are together in that order
(the usual case) every shard is a contiguous slice of it.  A global row is
the shard's first row plus the local row, and ties break by global row,
exactly as on one machine.

Each shard is a new generation of an ordinary corpus directory, written
through the store layer (``save_corpus``; from records, built first as
``build`` builds them): its records and ledger, its own BM25 postings (the
same tokens: the same analyzer), its rows of the vector matrix bit for bit
(or the same embedder over the same texts, which gives the same bits), its
tombstones (a deleted row stays a deleted row, so global rows are the
source's rows), and its global rows when they are not contiguous.  None is
made live on its own: the manifest naming them all is the one commit
(:mod:`irflow.shard.disk`).

>>> # shard(irflow.open_corpus("corpus"), 4, "corpus.sharded")
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from irflow.store.corpus import Corpus, build, open_corpus
from irflow.errors import CorpusError
from irflow.store.generations import MANIFEST_FILE as MANIFEST_OF_GENERATION
from irflow.store.generations import check_writable_root, checksum, locked
from irflow.store.persist import EmbedderInfo, save_corpus
from irflow.kernels.embedders import AUTO, resolve_default
from irflow.kernels.postings import Postings
from irflow.util.corpusmarks import SHARDED_CORPUS, refuse_inside_corpus
from irflow.util.progress import bar
from irflow.store.records import Record
from irflow.shard.disk import commit, prepare_root
from irflow.shard.manifest import ROWS_FILE, ShardEntry, ShardManifest, shard_dir_name
from irflow.store.merging import MergedParts, merged_segment
from irflow.store.record_store import CorpusStore, prepare_records
from irflow.store.writer import segment_id

__all__ = ["plan_shards", "shard_corpus"]


def plan_shards(artifact_ids: Sequence[str] | np.ndarray, n: int) -> list[np.ndarray]:
    """The global rows of each of ``n`` shards (ascending int64): whole artifacts, balanced by record count.

    Artifacts in order of first appearance are cut into ``n`` consecutive
    groups; each cut goes to the artifact boundary nearest an even share of
    the rows.  CorpusError when there are fewer artifacts than shards.

    >>> [rows.tolist() for rows in plan_shards(["a", "a", "b", "c", "c", "c"], 2)]
    [[0, 1, 2], [3, 4, 5]]
    """
    ids = np.asarray(artifact_ids, dtype=object)
    n_rows = ids.size
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise CorpusError(f"the number of shards must be a positive integer, got {n!r}")
    if n_rows == 0:
        raise CorpusError("nothing to shard: the corpus has no records")
    _, first, inverse, counts = np.unique(ids.astype(str), return_index=True, return_inverse=True,
                                          return_counts=True)
    order = np.argsort(first, kind="stable")            # artifacts by first appearance
    n_artifacts = order.size
    if n > n_artifacts:
        raise CorpusError(f"cannot split {n_artifacts} artifact{'s' if n_artifacts != 1 else ''} into {n} shards: "
                          f"a shard holds whole artifacts; use at most {n_artifacts} shards")
    cumulative = np.cumsum(counts[order])                 # rows up to and including each artifact
    cuts = [0]
    for s in range(1, n):
        target = s * n_rows / n
        j = int(np.searchsorted(cumulative, target))      # first artifact reaching the target
        # the boundary after artifact j-1 or after artifact j, whichever lands nearer the target
        before = cumulative[j - 1] if j > 0 else 0
        cut = j if j < n_artifacts and abs(before - target) <= abs(cumulative[j] - target) else j + 1
        cut = min(max(cut, cuts[-1] + 1), n_artifacts - (n - s))  # every shard keeps at least one artifact
        cuts.append(cut)
    cuts.append(n_artifacts)
    group_of_rank = np.repeat(np.arange(n), np.diff(cuts))
    rank = np.empty(n_artifacts, dtype=np.int64)
    rank[order] = np.arange(n_artifacts)
    shard_of_row = group_of_rank[rank[inverse.reshape(-1)]]
    return [np.flatnonzero(shard_of_row == s).astype(np.int64) for s in range(n)]


def _one_segment(corpus: Corpus) -> Corpus:
    """A corpus updated in place as one segment in memory: what ``compact()`` would write; its files untouched.

    Its live records (and those deleted out of band that its ledger still
    lists) in order, postings and vectors merged as they are (nothing
    re-embedded); a deleted row's id may be live again in a later segment,
    and a shard holds each id once.
    """
    parts = corpus._state.parts
    if len(parts) == 1:
        return corpus
    merged = MergedParts.of(parts)
    segment = merged_segment(merged, segment_id(1), name=corpus.name)
    return Corpus(store=segment.store.with_tombstones(merged.deleted()), postings=segment.postings,
                  analyzer=corpus.analyzer, vectors=segment.vectors, embedder=None,
                  embedder_info=corpus.embedder_info, name=corpus.name)


def _shard_store(store: CorpusStore, rows: np.ndarray, artifacts: Sequence[str], name: str) -> CorpusStore:
    """The source store's rows ``rows`` as a store of their own (same ledger entries, same tombstones)."""
    kinds = store.kinds
    codes = store.kind_codes[rows]
    texts, metadata = store.texts, store.metadata
    local = rows.tolist()
    return CorpusStore(
        record_ids=store.record_ids[rows].tolist(),
        artifact_ids=store.artifact_ids[rows].tolist(),
        surface_kinds=[kinds[c] for c in codes.tolist()],
        surface_indices=store.surface_indices[rows],
        texts=[texts[r] for r in local],
        metadata=[metadata[r] for r in local],
        ledger={a: store.ledger[a] for a in artifacts},
        deleted_rows=np.flatnonzero(~store.live[rows]),
        name=name,
    )


def _ledger_groups(store: CorpusStore, plan: Sequence[np.ndarray]) -> list[list[str]]:
    """Ledger artifacts per shard, in ledger order; entries of artifacts without rows go to shard 0."""
    shard_of: dict[str, int] = {}
    for s, rows in enumerate(plan):
        for artifact in dict.fromkeys(store.artifact_ids[rows].tolist()):
            shard_of[artifact] = s
    groups: list[list[str]] = [[] for _ in plan]
    for artifact in store.ledger:
        groups[shard_of.get(artifact, 0)].append(artifact)
    return groups


def _write_shard(root: Path, s: int, rows: np.ndarray, *, store: CorpusStore, postings: Postings,
                 vectors: np.ndarray | None, analyzer: Mapping[str, Any], embedder: EmbedderInfo | None,
                 source: CorpusStore) -> ShardEntry:
    """Shard *s* (global rows *rows* of *source*) written as a new, uncommitted generation; its manifest entry."""
    contiguous = bool(rows[-1] - rows[0] + 1 == rows.size)
    generation = save_corpus(root / shard_dir_name(s), store=store, postings=postings, vectors=vectors,
                             analyzer=analyzer, embedder=embedder, extra_files=None if contiguous else {ROWS_FILE: rows},
                             commit=False)
    kinds, codes = source.kinds, source.kind_codes[rows]
    return ShardEntry(
        index=s, dir=shard_dir_name(s), n_rows=int(rows.size), live=int(source.live[rows].sum()),
        artifacts=len(dict.fromkeys(source.artifact_ids[rows].tolist())), first_row=int(rows[0]),
        build_id=str(generation.manifest["build_id"]),
        manifest_checksum=checksum(generation.dir / MANIFEST_OF_GENERATION),
        kinds=tuple(dict.fromkeys(kinds[c] for c in codes.tolist())), generation=generation.name,
        rows_file=None if contiguous else ROWS_FILE)


def _write_from_corpus(corpus: Corpus, plan: Sequence[np.ndarray], root: Path, name: str,
                       progress: bool) -> list[ShardEntry]:
    """Each shard written straight from the source corpus's arrays."""
    store = corpus.store
    analyzer = corpus.analyzer
    vectors = corpus.vectors
    groups = _ledger_groups(store, plan)
    entries = []
    with bar(progress, "sharding", total=len(plan), unit="shard") as shown:
        for s, rows in enumerate(plan):
            part = _shard_store(store, rows, groups[s], name)
            entries.append(_write_shard(
                root, s, rows, store=part, postings=Postings.build(analyzer.tokenize_many(part.texts)),
                vectors=None if vectors is None else np.ascontiguousarray(vectors[rows]),
                analyzer=analyzer.to_dict(), embedder=corpus.embedder_info, source=store))
            shown.update(1)
    return entries


def _write_from_records(records: Sequence[Record], store: CorpusStore, plan: Sequence[np.ndarray], root: Path,
                        name: str, embedder: Any, analyzer: Any, batch_size: int,
                        progress: bool) -> tuple[list[ShardEntry], dict[str, Any], EmbedderInfo | None]:
    """Each shard built from its records (``build``: the same tokens and vectors a whole build gives them).

    Returns the entries, and the analyzer settings and embedder every shard was built with.
    """
    entries = []
    built = None
    with bar(progress, "sharding", total=len(plan), unit="shard") as shown:
        for s, rows in enumerate(plan):
            built = build([records[r] for r in rows.tolist()], embedder=embedder, analyzer=analyzer, name=name,
                          batch_size=batch_size, progress=progress)  # its phases inside the shards' progress
            entries.append(_write_shard(
                root, s, rows, store=built.store, postings=built.postings, vectors=built.vectors,
                analyzer=built.analyzer.to_dict(), embedder=built.embedder_info, source=store))
            shown.update(1)
    if built is None:  # plan_shards gives at least one shard
        raise CorpusError("nothing to shard: the corpus has no records")
    return entries, built.analyzer.to_dict(), built.embedder_info


def shard_corpus(
    source: "Corpus | str | os.PathLike[str] | Iterable[Record | Mapping[str, Any]]",
    n: int,
    path: str | os.PathLike[str],
    *,
    embedder: Any = AUTO,
    analyzer: Any = None,
    name: str | None = None,
    progress: bool = False,
    batch_size: int = 512,
) -> ShardManifest:
    """Write ``source`` as ``n`` shards under ``path`` and return the manifest (see :func:`irflow.shard`)."""
    root = Path(path).expanduser()
    # a reshard replaces a sharded corpus; a plain corpus, or a folder inside any corpus, is refused
    refuse_inside_corpus(root, "sharded corpus", replacing=SHARDED_CORPUS)
    if isinstance(source, (str, os.PathLike)):
        source = open_corpus(source)
    if name is not None:
        corpus_name = name
    else:  # a corpus keeps its name (hits name their source); records are named after the directory
        corpus_name = source.name if isinstance(source, Corpus) and source.name else root.name
    if isinstance(source, Corpus):
        source = _one_segment(source)
        store = source.store
        plan = plan_shards(store.artifact_ids, n)
        analyzer_spec = source.analyzer.to_dict()
    else:
        if isinstance(source, (Mapping, Record)):
            raise CorpusError("shard() takes a Corpus, a corpus path, or an iterable of records; got a single record")
        prepared = prepare_records(source)
        if not prepared:
            raise CorpusError("shard() got no records; a corpus needs at least one record")
        embedder = resolve_default(embedder)  # every shard with one embedder (the default decided once)
        store = CorpusStore.from_records(prepared)
        plan = plan_shards(store.artifact_ids, n)
    prepare_root(root)
    for s in range(len(plan)):
        check_writable_root(root / shard_dir_name(s))
    with locked(root):  # one writer at a time; the shards' data first, then the one commit
        if isinstance(source, Corpus):
            entries = _write_from_corpus(source, plan, root, corpus_name, progress)
            info = source.embedder_info
        else:
            entries, analyzer_spec, info = _write_from_records(prepared, store, plan, root, corpus_name, embedder,
                                                               analyzer, batch_size, progress)
        manifest = ShardManifest(name=corpus_name, n_rows=store.n_rows, live=int(store.live.sum()), kinds=store.kinds,
                                 analyzer=dict(analyzer_spec), embedder=None if info is None else info.to_dict(),
                                 shards=tuple(entries))
        commit(root, manifest)
    return manifest
