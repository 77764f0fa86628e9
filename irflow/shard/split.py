"""Splitting a corpus (or records) into shards that hold whole artifacts.

An artifact's surfaces all go to one shard, so collapse, expand and
``records_for_artifact`` stay local to a shard.  Artifacts are taken in the
order of their first record and cut into ``n`` consecutive groups of about
the same number of records; a shard holds its artifacts' rows in the global
record order, so when each artifact's records are together in that order
(the usual case) every shard is a contiguous slice of it.  A global row is
the shard's first row plus the local row, and ties break by global row,
exactly as on one machine.

Each shard is an ordinary corpus directory written through the store layer
(``save_corpus``; records are first ``build``-t in memory): its records and
ledger, its own BM25 postings (the same tokens: the same analyzer), its
rows of the vector matrix bit for bit (or the same embedder over the same
texts, which gives the same bits), and its tombstones (a deleted row stays
a deleted row, so global rows are the source's rows).

>>> # shard(irflow.open_corpus("corpus"), 4, "corpus.sharded")
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from irflow.store.corpus import Corpus, build, open_corpus
from irflow.errors import CorpusError
from irflow.store.generations import MANIFEST_FILE as MANIFEST_OF_GENERATION
from irflow.store.generations import check_writable_root, checksum, has_current, read_current
from irflow.store.persist import save_corpus
from irflow.kernels.postings import Postings
from irflow.util.corpusmarks import SHARDED_CORPUS, refuse_inside_corpus
from irflow.util.fileio import atomic_writer
from irflow.util.progress import bar
from irflow.store.records import Record
from irflow.shard.manifest import (MANIFEST_FILE, SHARD_DIR_RE, ShardEntry, ShardManifest, is_sharded,
                                   shard_dir_name, write_manifest)
from irflow.store.record_store import CorpusStore, prepare_records

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


def _prepare_root(root: Path) -> None:
    """Refuse a target that is neither empty, absent, nor a sharded corpus (resharding replaces one)."""
    if root.exists() and not root.is_dir():
        raise CorpusError(f"cannot shard into {root}: it is a file; choose a directory")
    if root.is_dir() and any(root.iterdir()) and not is_sharded(root):
        raise CorpusError(f"cannot shard into {root}: it is not empty and not a sharded corpus (no {MANIFEST_FILE}); "
                          "choose a new or empty directory")
    root.mkdir(parents=True, exist_ok=True)


def _remove_strays(root: Path, n: int) -> None:
    """After a reshard into fewer shards: remove the old shard directories and rows files beyond ``n``."""
    for path in root.iterdir():
        match = SHARD_DIR_RE.match(path.name.split(".")[0])
        if match is None or int(match.group(1)) < n:
            continue
        if path.is_dir() and has_current(path):
            shutil.rmtree(path)
        elif path.is_file() and path.name.endswith(".rows.npy"):
            path.unlink()


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


def _write_from_corpus(corpus: Corpus, plan: Sequence[np.ndarray], root: Path, name: str,
                       progress: bool) -> list[tuple[str, str]]:
    """Each shard written straight from the source corpus's arrays; returns the shards' identities."""
    store = corpus.store
    analyzer = corpus.analyzer
    vectors = corpus.vectors
    info = corpus.embedder_info
    groups = _ledger_groups(store, plan)
    build_ids = []
    with bar(progress, "sharding", total=len(plan), unit="shard") as shown:
        for s, rows in enumerate(plan):
            part = _shard_store(store, rows, groups[s], name)
            postings = Postings.build(analyzer.tokenize_many(part.texts))
            save_corpus(
                root / shard_dir_name(s), store=part, postings=postings,
                vectors=None if vectors is None else np.ascontiguousarray(vectors[rows]),
                analyzer=analyzer.to_dict(), embedder=info)
            build_ids.append(_identity(root / shard_dir_name(s)))
            shown.update(1)
    return build_ids


def _identity(shard_root: Path) -> tuple[str, str]:
    """(build id, manifest checksum) of the shard corpus just written at *shard_root*."""
    generation = read_current(shard_root)
    return str(generation.manifest["build_id"]), checksum(generation.dir / MANIFEST_OF_GENERATION)


def _write_from_records(records: Sequence[Record], plan: Sequence[np.ndarray], root: Path, name: str,
                        embedder: Any, analyzer: Any, batch_size: int, progress: bool) -> list[tuple[str, str]]:
    """Each shard built from its records (``build``: the same tokens and vectors a whole build gives them)."""
    build_ids = []
    with bar(progress, "sharding", total=len(plan), unit="shard") as shown:
        for s, rows in enumerate(plan):
            # built in memory, then saved as build(path=...) saves it: build refuses a path inside a sharded
            # corpus (the user's outputs), and this is the sharded corpus's own writer, resharding it
            part = build([records[r] for r in rows.tolist()], embedder=embedder, analyzer=analyzer, name=name,
                         batch_size=batch_size)
            save_corpus(root / shard_dir_name(s), store=part.store, postings=part.postings, vectors=part.vectors,
                        analyzer=part.analyzer.to_dict(), embedder=part.embedder_info)
            build_ids.append(_identity(root / shard_dir_name(s)))
            shown.update(1)
    return build_ids


def shard_corpus(
    source: "Corpus | str | os.PathLike[str] | Iterable[Record | Mapping[str, Any]]",
    n: int,
    path: str | os.PathLike[str],
    *,
    embedder: Any = "hash",
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
        store = source.store
        plan = plan_shards(store.artifact_ids, n)
        analyzer_spec = source.analyzer.to_dict()
    else:
        if isinstance(source, (Mapping, Record)):
            raise CorpusError("shard() takes a Corpus, a corpus path, or an iterable of records; got a single record")
        prepared = prepare_records(source)
        if not prepared:
            raise CorpusError("shard() got no records; a corpus needs at least one record")
        store = CorpusStore.from_records(prepared)
        plan = plan_shards(store.artifact_ids, n)
    _prepare_root(root)
    for s in range(len(plan)):
        check_writable_root(root / shard_dir_name(s))
    if isinstance(source, Corpus):
        build_ids = _write_from_corpus(source, plan, root, corpus_name, progress)
        info = source.embedder_info
        embedder_entry = None if info is None else {"spec": info.spec, "dim": info.dim,
                                                    "description": info.description, "source": info.source}
    else:
        build_ids = _write_from_records(prepared, plan, root, corpus_name, embedder, analyzer, batch_size, progress)
        first = read_current(root / shard_dir_name(0)).manifest
        analyzer_spec, embedder_entry = first["analyzer"], first["embedder"]
    return _finish(root, store, plan, build_ids, corpus_name, analyzer_spec, embedder_entry)


def _finish(root: Path, store: CorpusStore, plan: Sequence[np.ndarray], build_ids: Sequence[tuple[str, str]],
            name: str,
            analyzer: Mapping[str, Any], embedder: Mapping[str, Any] | None) -> ShardManifest:
    """Rows files for interleaved shards, then the manifest (last), then the strays of an older sharding."""
    entries = []
    kinds, codes, live = store.kinds, store.kind_codes, store.live
    for s, rows in enumerate(plan):
        contiguous = bool(rows[-1] - rows[0] + 1 == rows.size)
        rows_file = rows_checksum = None
        if not contiguous:
            rows_file = f"{shard_dir_name(s)}.rows.npy"
            target = root / rows_file
            # atomic, and a killed earlier writer's temporary file is removed; the sharded corpus's own file
            with atomic_writer(target, "shard rows file", corpus_file=True) as handle:
                np.save(handle, rows, allow_pickle=False)
            rows_checksum = checksum(target)
        entries.append(ShardEntry(
            index=s, dir=shard_dir_name(s), n_rows=int(rows.size), live=int(live[rows].sum()),
            artifacts=len(dict.fromkeys(store.artifact_ids[rows].tolist())), first_row=int(rows[0]),
            build_id=build_ids[s][0], manifest_checksum=build_ids[s][1], kinds=tuple(dict.fromkeys(kinds[c] for c in codes[rows].tolist())),
            rows_file=rows_file, rows_checksum=rows_checksum))
    manifest = ShardManifest(name=name, n_rows=store.n_rows, live=int(live.sum()), kinds=store.kinds,
                             analyzer=dict(analyzer), embedder=None if embedder is None else dict(embedder),
                             shards=tuple(entries))
    write_manifest(root, manifest)
    _remove_strays(root, len(plan))
    return manifest
