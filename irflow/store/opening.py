"""Reading a corpus directory of any format into a state: its segments' views, in row order.

Formats 1 and 2 (one build, files unprefixed; :mod:`irflow.store.persist`)
open as one segment, ``seg-000001``; format 3 (segments;
:mod:`irflow.store.segmentfiles`) as its segments.  Reading again after
another process committed (``corpus.refresh()``, or a writer about to
commit) reuses every segment whose data files are the same — the same id and
checksums: nothing is mapped or verified again — and every view whose
tombstones are the same (its caches stay warm).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from irflow.errors import CorpusError
from irflow.kernels.postings import ARRAY_NAMES
from irflow.kernels.text import Analyzer
from irflow.store import generations as gens
from irflow.store import persist
from irflow.store import segmentfiles as files
from irflow.store.chained_store import SegmentedStore
from irflow.store.persist import VECTORS_FILE, EmbedderInfo
from irflow.store.record_store import CorpusStore
from irflow.store.segment import CorpusContext, Segment, SegmentView
from irflow.store.vectors import VectorCheck

__all__ = ["LEGACY_ID", "context_of", "read_parts", "load_store", "stripped_identity", "legacy_entry"]

#: The id a corpus of format 1 or 2 has as a segment (its files take it as a prefix once it is updated).
LEGACY_ID = "seg-000001"


def stripped_identity(generation: gens.Generation, names: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """(file name without its segment prefix, checksum) of each file: equal for the same data, linked or renamed."""
    out = []
    for name in names:
        head, dot, rest = name.partition(".")
        short = rest if dot and files.SEGMENT_ID_RE.match(head) else name
        if short != files.TEXT_HASH:  # digests added later do not make another segment
            out.append((short, gens.entry_checksum(generation.files[name])[1]))
    return tuple(sorted(out))


def legacy_entry(generation: gens.Generation) -> dict[str, Any]:
    """The segment entry a format-1 or -2 generation's files make (for ``seg-000001`` once updated)."""
    manifest = generation.manifest
    counts = manifest["counts"]
    return {"id": LEGACY_ID, "rows": counts["rows"], "live": counts.get("live", counts["rows"]),
            "kinds": list(manifest.get("kinds", [])), "records": manifest["version"],
            "terms": counts.get("terms", 0), "postings": counts.get("postings", 0),
            "postings_arrays": list(manifest.get("postings_arrays", ARRAY_NAMES)),
            "vectors": manifest.get("embedder") is not None, "text_hash": False, "deleted": 0, "unlisted": 0}


def context_of(generation: gens.Generation, root: Path, embedder: Any) -> CorpusContext:
    """The context a corpus opened from *generation* gets (analyzer and embedder as its manifest records)."""
    manifest = generation.manifest
    info = manifest.get("embedder")
    try:
        embedder_info = None if info is None else EmbedderInfo(**info)
    except (TypeError, ValueError) as exc:
        raise CorpusError(f"{generation.dir}/manifest.json: unreadable embedder entry {info!r} ({exc}); "
                          "rebuild the corpus") from exc
    source = embedder if embedder is not None else (None if embedder_info is None else embedder_info.spec)
    return CorpusContext(name=root.name, analyzer=Analyzer.from_dict(manifest["analyzer"]), embedder=source,
                         embedder_info=embedder_info, path=root)


def _legacy_parts(generation: gens.Generation, context: CorpusContext, verify: bool,
                  reuse: Mapping[str, Segment]) -> list[tuple[Segment, np.ndarray, np.ndarray]]:
    names = [f for f in generation.files if f != persist.TOMBSTONES_FILE]
    identity = stripped_identity(generation, names)
    found = reuse.get(LEGACY_ID)
    if found is not None and found.source == identity:
        deleted = persist.load_rows(generation, persist.TOMBSTONES_FILE, found.n_rows, verify=verify)
        return [(found, deleted, np.empty(0, np.int64))]
    stored = persist.corpus_from(generation, verify=verify, name=context.name)
    check = None
    if stored.vectors is not None:
        check = VectorCheck(str(generation.dir / VECTORS_FILE), stored.store.id_column, stored.verify_vectors)
    segment = Segment(store=stored.store, postings=stored.postings, vectors=stored.vectors, vectors_check=check,
                      id=LEGACY_ID, source=identity)
    return [(segment, stored.store.deleted_rows, np.empty(0, np.int64))]


def read_parts(generation: gens.Generation, context: CorpusContext, *, verify: bool,
               previous: Sequence[SegmentView] = ()) -> list[SegmentView]:
    """The views of *generation*'s segments, reusing *previous* views' segments (and views) where unchanged."""
    reuse = {view.segment.id: view.segment for view in previous}
    views = {view.segment.id: view for view in previous}
    manifest = generation.manifest
    if manifest["version"] < files.FORMAT_V3:
        read = _legacy_parts(generation, context, verify, reuse)
    else:
        info = manifest.get("embedder")
        dim = None if info is None else int(info["dim"])
        read = []
        for index, entry in enumerate(manifest["segments"]):
            files.check_entry(generation, entry, index)
            found = reuse.get(entry["id"])
            if found is None or found.source != stripped_identity(generation, files.data_files(entry)):
                found = files.read_segment(generation, entry, verify=verify, name=context.name, dim=dim)
                found.source = stripped_identity(generation, files.data_files(entry))
            read.append((found, *files.read_tombstones(generation, entry, verify=verify)))
    parts = []
    for segment, deleted, unlisted in read:
        view = views.get(segment.id)
        if view is not None and view.segment is segment and np.array_equal(view.store.deleted_rows, deleted) \
                and np.array_equal(view.store.unlisted_rows, unlisted):
            parts.append(view)  # the same tombstones: keep its caches
        else:
            parts.append(SegmentView(segment, context, deleted=deleted, unlisted=unlisted))
    return parts


def load_store(root: Path, *, verify: bool = True, name: str | None = None) -> CorpusStore:
    """Only the records of the corpus at *root* (any format): records, ledgers, tombstones — no vectors, no postings."""
    def read(generation: gens.Generation) -> CorpusStore:
        if generation.manifest["version"] < files.FORMAT_V3:
            return persist.store_from(generation, verify=verify, name=name)
        stores = []
        for index, entry in enumerate(generation.manifest["segments"]):
            files.check_entry(generation, entry, index)
            deleted, unlisted = files.read_tombstones(generation, entry, verify=verify)
            stores.append(files.read_store(generation, entry, verify=verify, name=name)
                          .with_tombstones(deleted, unlisted))
        store = stores[0] if len(stores) == 1 else SegmentedStore(stores, name=name)
        store.set_delete_hook(_through_the_corpus(generation.root))
        return store
    return persist.retrying(Path(root), read)


def _through_the_corpus(root: Path) -> Any:
    def refuse(record_id: str) -> None:
        raise CorpusError(f"this store of the corpus at {root} was read for lookups; delete through the corpus: "
                          f"irflow.open_corpus({str(root)!r}).delete([{record_id!r}])")
    return refuse
