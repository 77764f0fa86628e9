"""The vectors of records an update adds: checked like a build's, embedded only when the corpus lacks the text.

A corpus's vectors come from one source, and an update keeps to it:

- **embedded** (built with an embedder): the new texts are embedded with
  the corpus's embedder (``corpus.embedder``; a custom callable must be
  passed again to ``open_corpus`` for that).  A text some row of the corpus
  holds already reuses that row's vector (:mod:`irflow.store.textdigest`),
  and a text repeated in the update is embedded once.  Records carrying
  their own vectors are refused: the corpus would mix two sources, and
  nothing could tell that those vectors match what the embedder gives.
- **precomputed** (built from records carrying vectors): every new record
  must carry a vector of the corpus's dimension, finite; it is normalized
  as ``build`` normalizes.
- **none** (lexical-only): a record carrying a vector is refused.

Errors name the records (the first few and the count) and change nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from irflow.errors import CorpusError
from irflow.kernels.embedders import check_digest, check_dimension, normalize_rows
from irflow.store.records import Record
from irflow.store.segment import CorpusContext, SegmentView
from irflow.kernels.digests import KeyIndex
from irflow.store.textdigest import text_digests, text_index
from irflow.util.fileio import shown
from irflow.util.progress import bar

__all__ = ["new_vectors", "texts_of", "named"]


def named(ids: Sequence[str], limit: int = 5) -> str:
    """The first few of *ids*, quoted (a long one cut: it may be a whole line of a file), and how many in all."""
    listed = ", ".join(shown(i, 80) for i in ids[:limit])
    return listed + (f" and {len(ids) - limit} more ({len(ids)} in all)" if len(ids) > limit else "")


def texts_of(view: SegmentView) -> KeyIndex:
    """The segment's rows by text digest (made on first need, kept with the segment)."""
    segment = view.segment
    found = segment.derived.get("text_index")
    if found is None:
        digests = segment.derived.get("text_digests")
        if digests is None:
            digests = text_digests(segment.store.texts)  # a segment of an older format: computed once
            segment.derived["text_digests"] = digests
        found = segment.derived["text_index"] = text_index(segment.store.texts, digests)
    return found


def _precomputed(records: Sequence[Record], dim: int, label: str) -> np.ndarray:
    lacking = [str(r.id) for r in records if r.vector is None]
    if lacking:
        raise CorpusError(f"{label} holds precomputed vectors, so every record it takes needs one; records "
                          f"{named(lacking)} carry none — give each its vector ({dim} dimensions)")
    odd = [f"{r.id} ({r.vector.shape[0]})" for r in records if r.vector is not None and r.vector.shape[0] != dim]
    if odd:
        raise CorpusError(f"{label} holds vectors of {dim} dimensions; records {named(odd)} carry vectors of "
                          "other dimensions — give every record a vector of the corpus's dimension")
    matrix = np.stack([r.vector for r in records]).astype(np.float32, copy=False)  # type: ignore[misc]
    bad = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
    if bad.size:
        raise CorpusError(f"records {named([str(records[i].id) for i in bad.tolist()])} carry vectors with NaN or "
                          "inf; fix or drop them")
    return normalize_rows(matrix)


def _reused(texts: list[str], parts: Sequence[SegmentView]) -> tuple[np.ndarray, np.ndarray]:
    """For each distinct text, (segment, row) of a row holding it (-1, -1 when none does)."""
    where = np.full(len(texts), -1, dtype=np.int64)
    rows = np.full(len(texts), -1, dtype=np.int64)
    for s, part in enumerate(parts):
        todo = np.flatnonzero(where < 0)
        if not todo.size:
            break
        found = texts_of(part).find([texts[i] for i in todo.tolist()])
        hit = found >= 0
        where[todo[hit]] = s
        rows[todo[hit]] = found[hit]
    return where, rows


def _embedded(records: Sequence[Record], parts: Sequence[SegmentView], context: CorpusContext, dim: int,
              batch_size: int, progress: bool) -> tuple[np.ndarray, int, int]:
    label = context.label()
    carrying = [str(r.id) for r in records if r.vector is not None]
    if carrying:
        raise CorpusError(f"{label} embeds its texts with {context.embedder_label(True)}; records "
                          f"{named(carrying)} carry vectors of their own, which it refuses (a corpus never mixes "
                          "vectors of two sources) — drop the vectors: the corpus embeds the texts")
    first: dict[str, int] = {}
    inverse = np.fromiter((first.setdefault(r.text, len(first)) for r in records), dtype=np.int64,
                          count=len(records))
    distinct = list(first)
    matrix = np.empty((len(distinct), dim), dtype=np.float32)
    where, rows = _reused(distinct, parts)
    for s in np.unique(where[where >= 0]).tolist():
        mine = np.flatnonzero(where == s)
        matrix[mine] = parts[s].require_vectors()[rows[mine]]
    todo = np.flatnonzero(where < 0)
    if todo.size:
        embedder = context.query_embedder.get()
        if embedder is None:
            raise CorpusError(f"{label} has no embedder to embed new texts with: "
                              f"{context.no_embedder_message()}")
        # the same graph as the corpus's vectors, or a corpus would mix two geometries
        check_digest(embedder, None if context.embedder_info is None else context.embedder_info.digest, label)
        with bar(progress, "embedding", total=int(todo.size), unit="record", unit_scale=True) as shown:
            for start in range(0, int(todo.size), batch_size):
                chunk = todo[start:start + batch_size]
                batch = np.asarray(embedder.embed_documents([distinct[i] for i in chunk.tolist()]), dtype=np.float32)
                check_dimension(embedder.describe(), int(batch.shape[1]), dim)
                matrix[chunk] = batch
                shown.update(int(chunk.size))
    reused = int(np.count_nonzero(where[inverse] >= 0))
    return matrix[inverse], int(todo.size), reused


def new_vectors(records: Sequence[Record], parts: Sequence[SegmentView], context: CorpusContext, *,
                batch_size: int = 512, progress: bool = False) -> tuple[np.ndarray | None, int, int]:
    """(vectors of *records* in order or None for a lexical-only corpus, texts embedded, vectors reused)."""
    info = context.embedder_info
    label = context.label()
    if not records:
        return None, 0, 0
    if info is None:
        carrying = [str(r.id) for r in records if r.vector is not None]
        if carrying:
            raise CorpusError(f"{label} is lexical-only (built with embedder=None); records {named(carrying)} "
                              "carry vectors — drop the vectors, or rebuild the corpus with vectors")
        return None, 0, 0
    if info.source == "precomputed":
        return _precomputed(records, info.dim, label), 0, 0
    return _embedded(records, parts, context, info.dim, batch_size, progress)
