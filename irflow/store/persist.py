"""The on-disk format of a corpus: which files a generation holds and how they read back.

A corpus directory (see :mod:`irflow.store.generations` for the atomic mechanics)::

    <corpus>/
      CURRENT                 "gen-000002 <blake2b of its manifest>"
      .lock                   writer lock (flock)
      gen-000002/
        manifest.json         format, version, build id, counts, kinds, embedder
                              spec + dim, analyzer settings, files (bytes, crc32)
        records.<col>.bytes.npy / records.<col>.offsets.npy
                              id, artifact_id, text, metadata: each column's
                              UTF-8 bytes end to end (uint8) + n+1 int64 offsets;
                              metadata one JSON text per row, comma-terminated
        records.kind_code.npy int32 index into the manifest's "kinds", per row
        records.surface_index.npy  int64 plan-global surface index, per row
        ledger.artifact.bytes.npy / .offsets.npy   artifacts in ledger order
        ledger.offsets.npy    int64 CSR offsets of each artifact's rows
        ledger.rows.npy       int64 rows in plan order (-1: an id the store lacks)
        ledger.missing.json   the record ids of those -1 entries ([] normally)
        tombstones.npy        int64 deleted rows, ascending
        vectors.npy           float32 (rows, dim), L2-normalized (absent: lexical-only)
        vocab.json            BM25 terms in term-id order
        postings.<name>.npy   the Postings arrays (term_offsets, post_rows, ...)

Format version 2.  Every record column is a flat array, so opening a
million records does nothing per record: arrays are ``np.save``d and
reopened with ``mmap_mode="r"`` and ``allow_pickle=False``, checked with a
few vectorized passes (shapes, offsets, ranges), and a string or metadata
mapping is decoded when first read; the id -> row and artifact -> ledger
dicts are built on first lookup (:mod:`irflow.store.recordfiles`).  Version 1
(``records.json``: columnar JSON; ``ledger.json``: artifact -> ids) is still
read.  Reading verifies sizes always and checksums unless ``verify=False``:
every file on open, except the vectors, which are mapped and verified on
first dense use (with the check of their norms: one pass, which a
lexical-only use never pays); anything off raises ``CorpusError`` naming the
file — a damaged corpus never answers.  Files edited with their checksums
recomputed are caught by consistency checks, vectorized per array: the
manifest's kinds (each once, each held by a row) and counts against the files,
the ledger (no row twice; a row of another artifact when its entry is read),
the postings (:mod:`irflow.kernels.postings_checks`; the exact row-by-row
ones on first lexical use).

>>> # save_corpus(root, ...) writes a generation; load_store(root) reads only
>>> # the store files (no vectors, no postings) for sibling lookups.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

import attrs
import numpy as np

from irflow.store import generations as gens
from irflow.errors import AnalyzerError, CorpusError
from irflow.kernels.postings import ARRAY_NAMES, Postings
from irflow.store import recordfiles
from irflow.store.recordfiles import all_of_type, load_array, load_json
from irflow.store.record_store import CorpusStore
from irflow.kernels.text import Analyzer
from irflow.util.unicode import json_text
from irflow.util import npyfiles

__all__ = [
    "check_format",
    "check_lineage",
    "corpus_from",
    "store_from",
    "load_rows",
    "map_vectors",
    "postings_file",
    "retrying",
    "write_tombstones",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "STORE_FILES",
    "StoredCorpus",
    "EmbedderInfo",
    "save_corpus",
    "load_store",
    "load_corpus",
]

FORMAT_NAME = "irflow-corpus"
#: Written by this release; version 1 (records and ledger as JSON) is still read.
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2, 3)  # 3: segments (irflow.store.segmentfiles), written by updates
TOMBSTONES_FILE = "tombstones.npy"
VECTORS_FILE = "vectors.npy"
VOCAB_FILE = "vocab.json"
#: What a store needs, by format version; sibling lookup by name reads (and verifies) only these.
STORE_FILES: dict[int, tuple[str, ...]] = {1: (*recordfiles.V1_FILES, TOMBSTONES_FILE),
                                           2: (*recordfiles.V2_FILES, TOMBSTONES_FILE)}

T = TypeVar("T")


def _postings_file(name: str) -> str:
    return postings_file(name)


def postings_file(name: str, prefix: str = "") -> str:
    """The file of one postings array (``prefix``: a segment's, ``seg-000003.``)."""
    return f"{prefix}postings.{name}.npy"


@attrs.frozen
class EmbedderInfo:
    """What the manifest records about the vectors: the embedder spec (None: custom callable or none) and dim.

    ``digest``: the identity of the weights or graph that embedded them
    (:meth:`irflow.kernels.embedders.Embedder.digest`), checked before a
    query is embedded (:func:`irflow.kernels.embedders.check_digest`); None
    when the embedder has none, and in corpora of earlier releases.
    """

    spec: str | None
    dim: int
    description: str = ""
    source: str = attrs.field(default="embedded", validator=attrs.validators.in_(("embedded", "precomputed")))
    digest: str | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.instance_of(str)))

    def to_dict(self) -> dict[str, Any]:
        """The manifest's entry; ``digest`` only when known, so a corpus without one reads as before."""
        entry = attrs.asdict(self)
        if self.digest is None:
            del entry["digest"]
        return entry


@attrs.frozen
class StoredCorpus:
    """The parts of a corpus read back from disk (what :func:`irflow.store.corpus.open_corpus` assembles)."""

    generation: gens.Generation
    store: CorpusStore
    postings: Postings
    vectors: np.ndarray | None = attrs.field(repr=False)
    analyzer: Mapping[str, Any]
    embedder: EmbedderInfo | None
    #: Checks the vectors file's checksum (CorpusError naming it), for the first dense use; None: nothing to check.
    verify_vectors: Callable[[], None] | None = attrs.field(default=None, repr=False)


# -- writing ----------------------------------------------------------------------------


def _json_bytes(value: Any, what: str) -> bytes:
    try:
        # UTF-8 whatever it holds: a model path whose bytes are not UTF-8 is written as its \\uXXXX escapes
        return json_text(value, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise CorpusError(
            f"cannot write {what} as JSON ({exc}); on-disk corpora store metadata as JSON — "
            "use str, numbers, bools, None, lists and dicts"
        ) from exc


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def save_corpus(
    root: Path,
    *,
    store: CorpusStore,
    postings: Postings,
    vectors: np.ndarray | None,
    analyzer: Mapping[str, Any],
    embedder: EmbedderInfo | None,
    extra_files: Mapping[str, gens.Payload] | None = None,
    commit: bool = True,
) -> gens.Generation:
    """Write a corpus to *root* as a new generation and switch to it atomically.

    Over an existing corpus this is a rebuild: readers see the old corpus
    until the single ``os.replace`` of ``CURRENT``, then the new one.
    ``extra_files`` go into the generation too (checksummed like the rest; a
    shard's global rows); ``commit=False`` writes the generation without
    making it live (see :func:`irflow.store.generations.write_generation`).
    """
    root = Path(root)
    gens.check_writable_root(root)  # before locking, so a foreign directory gets no .lock file
    files: dict[str, gens.Payload] = {
        **recordfiles.record_payloads(store),
        TOMBSTONES_FILE: store.deleted_rows,
        VOCAB_FILE: _json_bytes(postings.vocab_terms, "the BM25 vocabulary"),
    }
    for name, array in postings.arrays().items():
        files[_postings_file(name)] = np.ascontiguousarray(array)
    if vectors is not None:
        files[VECTORS_FILE] = np.ascontiguousarray(vectors, dtype=np.float32)
    for name, payload in (extra_files or {}).items():
        if name in files:
            raise ValueError(f"an extra corpus file may not be named {name!r}: the corpus has a file of that name")
        files[name] = payload
    manifest = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "build_id": uuid.uuid4().hex,
        "created": _now(),
        "counts": {
            "rows": store.n_rows,
            "live": len(store),
            "artifacts": len(store.ledger),
            "terms": postings.vocab_size,
            "postings": postings.n_postings,
        },
        "kinds": list(store.kinds),
        "analyzer": dict(analyzer),
        "embedder": None if embedder is None else embedder.to_dict(),
        "postings_arrays": sorted(postings.arrays()),
    }
    with gens.locked(root):
        generation = gens.write_generation(root, files, manifest, commit=commit)
    if commit:
        store.set_tombstone_writer(TombstoneWriter(generation))
    return generation


@attrs.define
class TombstoneWriter:
    """Persists a store's tombstones as a new generation (hard-linking every other file).

    Tombstones already on disk from another process are merged in, so two
    processes deleting from one corpus never undo each other's deletes; a
    corpus rebuilt since it was opened refuses the write instead.
    """

    generation: gens.Generation

    def __call__(self, deleted: np.ndarray) -> np.ndarray:
        root = self.generation.root
        with gens.locked(root):
            current = gens.read_current(root)
            check_format(current)
            check_lineage(current, self.generation)
            if current.manifest["version"] >= 3:
                raise CorpusError(f"corpus at {root} was updated since this store was read; delete through the "
                                  "corpus: irflow.open_corpus(path).delete([...])")
            if current.name != self.generation.name:
                deleted = np.union1d(deleted, _load_tombstones(current, verify=True))
            self.generation = write_tombstones(current, np.asarray(deleted, dtype=np.int64))
        return deleted


def check_lineage(current: gens.Generation, opened: gens.Generation) -> None:
    """CorpusError unless *current* is a generation of the same build as *opened* (updates keep the build id)."""
    if current.manifest.get("build_id") != opened.manifest.get("build_id"):
        raise CorpusError(
            f"corpus at {current.root} was rebuilt since it was opened; reopen it (irflow.open_corpus) and try again"
        )


def write_tombstones(current: gens.Generation, deleted: np.ndarray) -> gens.Generation:
    """A new generation of a format-1 or -2 corpus with these tombstones (every other file linked); under the lock."""
    manifest = {k: v for k, v in current.manifest.items() if k != "files"}
    manifest["counts"] = dict(manifest["counts"], live=int(manifest["counts"]["rows"]) - int(deleted.size))
    manifest["modified"] = _now()
    reuse = [f for f in current.files if f != TOMBSTONES_FILE]
    return gens.write_generation(current.root, {TOMBSTONES_FILE: deleted}, manifest, reuse_from=current, reuse=reuse)


# -- reading ----------------------------------------------------------------------------


def _bad_manifest(generation: gens.Generation, what: str) -> CorpusError:
    return CorpusError(f"{generation.dir}/manifest.json: {what}; the corpus is damaged — rebuild it with "
                       f"irflow.build(..., path={str(generation.root)!r})")


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def check_format(generation: gens.Generation) -> None:
    """Format and version first (their own messages), then every manifest key a reader relies on, typed."""
    manifest = generation.manifest
    if manifest.get("format") != FORMAT_NAME:
        raise CorpusError(
            f"{generation.dir}/manifest.json: format {manifest.get('format')!r} is not {FORMAT_NAME!r}; "
            "this is not an irflow corpus — rebuild it with irflow.build(..., path=...)"
        )
    if manifest.get("version") not in READ_VERSIONS or type(manifest.get("version")) is not int:
        raise CorpusError(
            f"{generation.dir}/manifest.json: corpus format version {manifest.get('version')!r} is unknown to this irflow "
            f"(it reads versions {', '.join(map(str, READ_VERSIONS))}); rebuild the corpus with this irflow, or "
            "upgrade irflow"
        )
    counts = manifest.get("counts")
    if not isinstance(counts, dict) or not _is_count(counts.get("rows")):
        raise _bad_manifest(generation, "'counts' must be a table whose 'rows' is a non-negative integer")
    odd = sorted(k for k, v in counts.items() if not _is_count(v))
    if odd:
        raise _bad_manifest(generation, f"'counts' entries {odd} are not non-negative integers")
    kinds = manifest.get("kinds", [])
    if not isinstance(kinds, list) or not all(type(k) is str for k in kinds):
        raise _bad_manifest(generation, "'kinds' must be a list of surface kind names")
    if len(set(kinds)) != len(kinds):  # a kind listed twice would split its rows between two codes
        twice = sorted({k for k in kinds if kinds.count(k) > 1})
        raise _bad_manifest(generation, f"'kinds' lists {', '.join(map(repr, twice))} more than once")
    names = manifest.get("postings_arrays", list(ARRAY_NAMES))
    if not isinstance(names, list) or not all(isinstance(n, str) and n in ARRAY_NAMES for n in names):
        raise _bad_manifest(generation, f"'postings_arrays' must list names among {list(ARRAY_NAMES)}")
    if manifest["version"] >= 3 and (not isinstance(manifest.get("segments"), list) or not manifest["segments"]
                                     or not _is_count(manifest.get("next_segment"))):
        raise _bad_manifest(generation, "'segments' must be a non-empty list and 'next_segment' a count")
    analyzer = manifest.get("analyzer")
    if not isinstance(analyzer, dict):
        raise _bad_manifest(generation, "'analyzer' must be a table of analyzer settings")
    try:
        Analyzer.from_dict(analyzer)
    except (AnalyzerError, TypeError) as exc:
        raise CorpusError(f"{generation.dir}/manifest.json: its analyzer cannot be restored ({exc})") from None
    info = manifest.get("embedder")
    if info is not None and (
        not isinstance(info, dict) or type(info.get("dim")) is not int or info["dim"] < 1
        or not isinstance(info.get("spec"), (str, type(None))) or not isinstance(info.get("description", ""), str)
    ):
        raise _bad_manifest(generation, f"unreadable embedder entry {str(info)[:200]} (expected spec, dim >= 1, "
                                        "description, source)")


def map_vectors(generation: gens.Generation, *, verify: bool,
                file: str = "vectors.npy") -> tuple[np.ndarray, Callable[[], None] | None]:
    """The vectors file mapped read-only (never copied), and its checksum check for later.

    The whole file is mapped and the array is a view past the ``.npy``
    header, so the check digests exactly the file's bytes from the mapping:
    it needs neither the path nor the reader's lock, and still works after a
    writer removed the generation (the mapping keeps the pages).  Hashing
    1.5 GB of vectors at every open would cost seconds; a corpus used for
    lexical search or records only never pays it.
    """
    path = generation.path(file)
    where = f"{generation.dir}/{file}"
    try:
        with open(path, "rb") as fh:
            shape, fortran, dtype = npyfiles.read_header(fh)  # threads: one header at a time
            offset = fh.tell()
        if fortran or dtype.hasobject:
            raise ValueError("not a C-ordered numeric array")
        mapped = np.memmap(path, dtype=np.uint8, mode="r")  # the whole file, header included
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        # a plain ndarray view (the memmap subclass would spread into every result), read-only, not copied
        vectors = mapped[offset:offset + size].view(np.ndarray).view(dtype).reshape(shape)
    except (ValueError, OSError, EOFError) as exc:
        raise CorpusError(f"{where} cannot be read as a numpy array ({exc}); the corpus is damaged — rebuild it") from exc
    if not verify:
        return vectors, None
    algorithm, digest = gens.entry_checksum(generation.files[file])

    def check() -> None:
        if gens.buffer_digest(mapped, algorithm) != digest:
            raise gens.damaged(generation.root, gens.mismatch(generation, file))
    return vectors, check


def load_rows(generation: gens.Generation, file: str, n_rows: int, *, verify: bool) -> np.ndarray:
    """A file of row numbers (tombstones, unlisted rows): 1-d integers in ``0 .. n_rows - 1``, ascending, int64."""
    gens.verify_files(generation, [file], checksums=verify)
    rows = load_array(generation, file, mmap=False)
    if rows.ndim != 1 or rows.dtype.kind not in "iu":
        raise CorpusError(f"{generation.dir}/{file} is not a 1-d integer array; the corpus is damaged — rebuild it")
    rows = rows.astype(np.int64)
    if rows.size and (rows.min() < 0 or rows.max() >= n_rows):
        raise CorpusError(f"{generation.dir}/{file} names rows outside 0..{n_rows - 1}; the corpus is damaged — "
                          "rebuild it")
    if bool((np.diff(rows) <= 0).any()):
        raise CorpusError(f"{generation.dir}/{file} does not list rows once each, ascending; the corpus is "
                          "damaged — rebuild it")
    return rows


def _load_tombstones(generation: gens.Generation, *, verify: bool) -> np.ndarray:
    return load_rows(generation, TOMBSTONES_FILE, generation.manifest["counts"]["rows"], verify=verify)


def _check_count(generation: gens.Generation, key: str, found: int, what: str) -> None:
    """The manifest's ``counts[key]`` (when written) is ``found``, what the files hold."""
    said = generation.manifest["counts"].get(key)
    if said is not None and said != found:
        raise _bad_manifest(generation, f"'counts' says {said} {what}, but the files hold {found}")


def store_from(generation: gens.Generation, *, verify: bool, name: str | None) -> CorpusStore:
    version = generation.manifest["version"]
    gens.verify_files(generation, STORE_FILES[version], checksums=verify)
    deleted = _load_tombstones(generation, verify=False)  # just verified
    read = recordfiles.read_v2 if version == 2 else recordfiles.read_v1
    store = read(generation, deleted, name)
    _check_count(generation, "live", store.n_rows - int(deleted.size), "live records")
    _check_count(generation, "artifacts", len(store.ledger_table), "artifacts in the ledger")
    store.set_tombstone_writer(TombstoneWriter(generation))
    return store


def retrying(root: Path, read: Callable[[gens.Generation], T]) -> T:
    """Run *read* on the live generation, held against removal (:func:`irflow.store.generations.reading`).

    A reader holds its generation, so a failure inside *read* is damage, not
    a race — unless ``CURRENT`` moved meanwhile (no locks on this platform or
    file system): then the newer generation is read instead.
    """
    for attempt in range(gens.READ_ATTEMPTS):
        with gens.reading(root) as generation:
            check_format(generation)
            try:
                return read(generation)
            except (CorpusError, OSError) as exc:
                if attempt == gens.READ_ATTEMPTS - 1 or not gens.moved(root, generation.name):
                    if isinstance(exc, CorpusError):
                        raise
                    raise CorpusError(f"corpus at {root}: {generation.name} cannot be read ({exc}); the corpus is "
                                      "damaged — rebuild it") from exc
    raise AssertionError("unreachable")  # pragma: no cover


def load_store(root: Path, *, verify: bool = True, name: str | None = None) -> CorpusStore:
    """Only the store of the corpus at *root*: records, ledger, tombstones — no vectors, no postings, no embedder."""
    return retrying(Path(root), lambda generation: store_from(generation, verify=verify, name=name))


def load_corpus(root: Path, *, verify: bool = True, name: str | None = None,
                generation: tuple[str, str, str] | None = None) -> StoredCorpus:
    """Every part of the corpus at *root*, verified (checksums unless ``verify=False``), arrays memory-mapped.

    ``generation``: (name, manifest checksum, where they are recorded) of the
    generation to read instead of ``CURRENT``'s (a shard of a sharded
    corpus: the one its manifest names), held while it is read.
    """
    if generation is None:
        return retrying(Path(root), lambda live: corpus_from(live, verify=verify, name=name))
    name_of, digest, recorded_in = generation
    with gens.holding(Path(root), name_of, digest, recorded_in=recorded_in) as held:
        check_format(held)
        return corpus_from(held, verify=verify, name=name)


def corpus_from(generation: gens.Generation, *, verify: bool, name: str | None) -> StoredCorpus:
    manifest = generation.manifest
    mapped = VECTORS_FILE if manifest.get("embedder") is not None else None
    gens.verify_files(generation, [f for f in generation.files if f != mapped], checksums=verify)
    if mapped is not None:
        gens.verify_files(generation, [mapped], checksums=False)  # its size now, its checksum on first use
    store = store_from(generation, verify=False, name=name)  # just verified with everything else
    rows = store.n_rows
    arrays = {n: load_array(generation, _postings_file(n)) for n in manifest.get("postings_arrays", ARRAY_NAMES)}
    vocab = load_json(generation, VOCAB_FILE)
    if not isinstance(vocab, list) or not all_of_type(vocab, str):
        raise CorpusError(f"{generation.dir}/{VOCAB_FILE} is not a list of terms; the corpus is damaged — rebuild it")
    try:
        postings = Postings.from_arrays(vocab, arrays, n_rows=rows,
                                        label=lambda array: f"{generation.dir}/{_postings_file(array)}")
    except CorpusError as exc:
        raise CorpusError(f"{exc}; the corpus is damaged — rebuild it") from None
    _check_count(generation, "terms", postings.vocab_size, "terms")
    _check_count(generation, "postings", postings.n_postings, "postings")
    info = manifest.get("embedder")
    try:
        embedder = None if info is None else EmbedderInfo(**info)
    except (TypeError, ValueError) as exc:
        raise CorpusError(f"{generation.dir}/manifest.json: unreadable embedder entry {info!r} ({exc}); rebuild the corpus") from exc
    vectors = verify_vectors = None
    if embedder is not None:
        vectors, verify_vectors = map_vectors(generation, verify=verify)
        if vectors.dtype != np.float32 or vectors.shape != (rows, embedder.dim):
            raise CorpusError(
                f"{generation.dir}/{VECTORS_FILE} holds {vectors.dtype} {vectors.shape}, expected float32 "
                f"({rows}, {embedder.dim}); the corpus is damaged — rebuild it"
            )
        # NaN, inf and unnormalized rows are checked on first use (Corpus), not here: that is a pass over
        # the whole matrix, which opening does not otherwise need (the arrays stay mapped, not read).
    return StoredCorpus(
        generation=generation,
        store=store,
        postings=postings,
        vectors=vectors,
        analyzer=manifest["analyzer"],
        embedder=embedder,
        verify_vectors=verify_vectors,
    )
