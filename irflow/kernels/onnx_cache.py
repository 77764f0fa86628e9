"""A cache of derived ONNX graphs under ``$IRFLOW_HOME/cache/models/<key>/``, built once, verified on every load.

The fast graph of the pinned model (:mod:`irflow.kernels.onnx_fastgraph`) is
derived from the installed weights, never downloaded; deriving it takes a
few seconds, so it is written once and reused.  The folder's ``key`` is a
digest of what decides the graph and how it runs: the source weights'
sha256, the transformation's version and the onnxruntime version (another
runtime gets its own entry, built with its own ops).  The folder holds
``model.onnx`` and ``model.json``, which records the graph's own sha256;
a load reads the bytes once, checks them against it and hands onnxruntime
those very bytes (nothing read twice, so nothing can change in between).

Writes are atomic (:func:`irflow.util.fileio.atomic_writer`: a temporary
file renamed over the target), and the build is deterministic — the same
bytes from every process — so two processes building at once each write
the same complete file, in either order.  A file that does not match its
record (a bit flipped on disk, an edit) is built again, with a warning.
Where the cache cannot be written (a read-only home, a home inside a
corpus) the graph is built in memory for this process, with a warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Callable

import attrs

from irflow.errors import IrflowError
from irflow.util.cachekey import stable_digest
from irflow.util.corpusmarks import refuse_inside_corpus
from irflow.util.fileio import atomic_writer
from irflow.util.home import irflow_home

__all__ = ["CachedGraph", "models_cache_dir", "cached_graph"]

log = logging.getLogger(__name__)

MODEL_FILE = "model.onnx"
RECORD_FILE = "model.json"
# far above a model of this size: a larger record is not one this module wrote
_MAX_RECORD_BYTES = 1 << 16


@attrs.frozen
class CachedGraph:
    """A derived graph's bytes, their sha256, and where they are cached (None: built in memory only)."""

    data: bytes = attrs.field(repr=False)
    sha256: str
    path: Path | None


def models_cache_dir() -> Path:
    """``$IRFLOW_HOME/cache/models``."""
    return irflow_home() / "cache" / "models"


def _read_cached(folder: Path, key_fields: dict[str, object]) -> CachedGraph | None:
    """The cached graph when its files are there and agree with each other and the key; None otherwise."""
    model, record = folder / MODEL_FILE, folder / RECORD_FILE
    try:
        with record.open("rb") as handle:
            raw = handle.read(_MAX_RECORD_BYTES + 1)
        data = model.read_bytes()
    except OSError:
        return None
    try:
        meta = json.loads(raw) if len(raw) <= _MAX_RECORD_BYTES else None
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or any(meta.get(k) != v for k, v in key_fields.items()):
        log.warning("irflow: %s is not a record of this cache entry; building the graph again", record)
        return None
    digest = hashlib.sha256(data).hexdigest()
    if meta.get("sha256") != digest:
        log.warning("irflow: %s has sha256 %s, not the %s recorded beside it (changed or damaged); building it again",
                    model, digest, meta.get("sha256"))
        return None
    return CachedGraph(data, digest, model)


def _write(folder: Path, data: bytes, record: dict[str, object]) -> Path | None:
    """Write the graph, then its record (each atomically); the model's path, or None when it cannot be written."""
    try:
        refuse_inside_corpus(folder, "model cache")  # before the folder is made
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_writer(folder / MODEL_FILE, "cached model graph") as out:
            out.write(data)
        with atomic_writer(folder / RECORD_FILE, "cached model record") as out:
            out.write(json.dumps(record, indent=1, sort_keys=True).encode("utf-8"))
    except (OSError, IrflowError) as exc:  # OutputError: read-only, full, or inside a corpus
        log.warning("irflow: cannot cache the derived model graph in %s (%s); it is built again by each process",
                    folder, exc)
        return None
    return folder / MODEL_FILE


def cached_graph(key_fields: dict[str, object], build: Callable[[], bytes]) -> CachedGraph:
    """The graph that ``key_fields`` names, from the cache, or built by ``build()`` and cached.

    ``key_fields`` (JSON values: the source's sha256, the transformation's
    version, the runtime's version...) decide the folder and are recorded
    beside the graph with its sha256; a cached graph is used only when all
    of them agree.
    """
    folder = models_cache_dir() / stable_digest(key_fields)
    found = _read_cached(folder, key_fields)
    if found is not None:
        return found
    data = build()
    digest = hashlib.sha256(data).hexdigest()
    path = _write(folder, data, {**key_fields, "sha256": digest})
    return CachedGraph(data, digest, path)
