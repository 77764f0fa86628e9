"""A corpus's document vectors: made at build time (embedded or precomputed), checked once when read from disk.

Rows are L2-normalized float32; each distinct text is embedded once.  A
matrix read from disk is checked on first use (finite, unit or zero rows),
not on open: the check reads the whole matrix, which a memory-mapped open
otherwise never does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from irflow.errors import CorpusError
from irflow.kernels.embedders import Embedder, check_dimension, normalize_rows
from irflow.store.persist import EmbedderInfo
from irflow.store.records import Record
from irflow.util.progress import bar

__all__ = ["VectorCheck", "check_unit_rows", "document_vectors", "UNIT_NORM_TOLERANCE"]


#: Largest deviation of a stored row's squared norm from 1 (float32 sums over thousands of dims stay ~1e-4 off).
UNIT_NORM_TOLERANCE = 1e-3


class VectorCheck:
    """The once-per-corpus check of a matrix read from disk: its file's checksum, then finite, unit (or zero) rows.

    Done on first use, not on open: it reads the whole matrix (about 0.1 s per
    GB here for the norms, plus the checksum), which opening a memory-mapped
    corpus otherwise never does.  ``verify`` (from
    :func:`irflow.store.persist.load_corpus`) checks the file's bytes against
    the manifest.  A failure is raised on every use; a success is remembered.
    """

    def __init__(self, file: str, record_ids: Sequence[str] | np.ndarray,
                 verify: Callable[[], None] | None = None) -> None:
        self.file = file
        self.record_ids = record_ids
        self.verify = verify
        self.done = False
        self.lock = threading.Lock()

    def __call__(self, vectors: np.ndarray) -> None:
        if self.done:
            return
        with self.lock:
            if not self.done:
                if self.verify is not None:
                    self.verify()
                check_unit_rows(vectors, self.file, self.record_ids)
                self.done = True


def check_unit_rows(vectors: np.ndarray, file: str, record_ids: Sequence[str] | np.ndarray | None = None) -> None:
    """Raise CorpusError naming *file* and the first bad row unless every row is finite and of unit (or zero) norm.

    One pass in blocks of ~16 MiB (no copy of the matrix): a NaN or inf makes
    a squared norm non-finite, a tampered value moves it away from 1.
    """
    step = max(1, (1 << 24) // max(1, vectors.shape[1] * vectors.itemsize))
    for start in range(0, vectors.shape[0], step):
        block = vectors[start:start + step]
        squared = np.einsum("ij,ij->i", block, block)
        good = (np.abs(squared - 1) <= UNIT_NORM_TOLERANCE) | (squared == 0)
        if not good.all():
            row = start + int(np.argmin(good))
            value = float(squared[row - start])
            what = "NaN or inf" if not np.isfinite(value) else f"squared norm {value:.6g}, not 1"
            record = f" (record {record_ids[row]!r})" if record_ids is not None else ""
            raise CorpusError(f"{file}: row {row}{record} holds an invalid vector ({what}); dense scores would be "
                              "wrong — the corpus is damaged, rebuild it with irflow.build(..., path=...)")


def _precomputed_vectors(records: Sequence[Record], embedder: Embedder | None) -> tuple[np.ndarray, EmbedderInfo]:
    dims = {int(r.vector.shape[0]) for r in records}  # type: ignore[union-attr]
    if len(dims) != 1:
        raise CorpusError(
            f"records carry vectors of different dimensions {sorted(dims)}; every precomputed vector must have one dimension"
        )
    matrix = np.stack([r.vector for r in records]).astype(np.float32, copy=False)  # type: ignore[misc]
    bad = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
    if bad.size:
        raise CorpusError(f"record {records[int(bad[0])].id!r} carries a vector with NaN or inf; fix or drop it")
    dim = matrix.shape[1]
    if embedder is not None and embedder.dim is not None:
        check_dimension(embedder.describe(), int(embedder.dim), dim)
    info = EmbedderInfo(
        spec=None if embedder is None else embedder.spec,
        dim=dim,
        description="precomputed" if embedder is None else embedder.describe(),
        source="precomputed",
    )
    return normalize_rows(matrix), info


def _embedded_vectors(
    texts: Sequence[str], embedder: Embedder, *, batch_size: int, progress: bool
) -> tuple[np.ndarray, EmbedderInfo]:
    # each distinct text is embedded once (surfaces repeat: names, boilerplate), then scattered back
    first: dict[str, int] = {}
    inverse = np.fromiter((first.setdefault(text, len(first)) for text in texts), dtype=np.int64, count=len(texts))
    distinct = list(first)
    matrix: np.ndarray | None = None
    # counted in records, so the bar shows records/s and an ETA
    with bar(progress, "embedding", total=len(distinct), unit="record", unit_scale=True) as shown:
        for start in range(0, len(distinct), batch_size):
            batch = np.asarray(embedder.embed_documents(distinct[start:start + batch_size]), dtype=np.float32)
            if matrix is None:
                matrix = np.empty((len(distinct), batch.shape[1]), dtype=np.float32)
            elif batch.shape[1] != matrix.shape[1]:
                check_dimension(embedder.describe(), int(batch.shape[1]), int(matrix.shape[1]))
            matrix[start:start + batch.shape[0]] = batch
            shown.update(batch.shape[0])
    if matrix is None:  # pragma: no cover - build() refuses an empty record list
        raise CorpusError("no texts to embed")
    if len(distinct) < len(texts):
        matrix = matrix[inverse]
    info = EmbedderInfo(spec=embedder.spec, dim=int(matrix.shape[1]), description=embedder.describe(), source="embedded",
                        digest=embedder.digest())
    return matrix, info


def document_vectors(
    records: Sequence[Record], texts: Sequence[str], embedder: Embedder | None, *, batch_size: int, progress: bool
) -> tuple[np.ndarray | None, EmbedderInfo | None]:
    """The row-aligned document vectors and their manifest entry: precomputed, embedded, or none."""
    carrying = sum(r.vector is not None for r in records)
    if carrying == len(records):
        return _precomputed_vectors(records, embedder)
    if carrying:
        first = next(r for r in records if r.vector is None)
        raise CorpusError(
            f"{carrying} of {len(records)} records carry precomputed vectors but record {first.id!r} does not; "
            "give every record a vector, or none (the embedder then embeds them all)"
        )
    if embedder is None:
        return None, None
    return _embedded_vectors(texts, embedder, batch_size=batch_size, progress=progress)
