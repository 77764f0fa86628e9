"""Format 3 on disk: a generation lists its segments in order, each segment's files named after it.

A format-3 generation (see :mod:`irflow.store.persist` for format 2, whose
files one segment's are)::

    gen-000007/
      manifest.json     ... "version": 3, "next_segment": 5,
                        "segments": [{"id": "seg-000001", "rows": ..., "live": ...,
                                      "kinds": [...], "records": 2, "terms": ..., "postings": ...,
                                      "postings_arrays": [...], "vectors": true, "text_hash": true,
                                      "deleted": 12, "unlisted": 10}, ...]
      seg-000001.records.id.bytes.npy, seg-000001.ledger.rows.npy, ...   a segment's records (format 2,
                        or format 1's records.json / ledger.json for a corpus updated since)
      seg-000001.vocab.json, seg-000001.postings.<name>.npy              its postings
      seg-000001.vectors.npy                                             its vectors (absent: lexical-only)
      seg-000001.text_hash.npy                                           uint64 digest of each row's text
      seg-000001.tombstones.npy                                          its deleted local rows (when any)
      seg-000001.unlisted.npy                                            those of them off the ledger (when any)

A segment's files never change once written: a commit writes the new
segment's files, the tombstone files of the segments it changed and the
manifest, and hard-links every other file from the previous generation
(their checksums copied, not recomputed).  Everything is verified as
format 2 is: sizes always, checksums unless ``verify=False``, vectors on
first dense use; a damaged file raises CorpusError naming it (its name
names the segment).
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence

import numpy as np

from irflow.errors import CorpusError
from irflow.kernels.postings import ARRAY_NAMES, Postings
from irflow.store import generations as gens
from irflow.store import recordfiles
from irflow.store.persist import VECTORS_FILE, VOCAB_FILE, load_rows, map_vectors, postings_file
from irflow.store.record_store import CorpusStore
from irflow.store.recordfiles import all_of_type, load_array, load_json
from irflow.store.merging import KeptStrings, MergedParts
from irflow.store.segment import Segment
from irflow.store.vectors import VectorCheck

__all__ = ["FORMAT_V3", "prefix", "data_files", "tombstone_files", "segment_entry", "segment_payloads",
           "tombstone_payloads", "read_segment", "read_tombstones", "check_entry", "SEGMENT_ID_RE", "identity", "read_store",
           "merged_payloads"]

FORMAT_V3 = 3
TOMBSTONES = "tombstones.npy"
UNLISTED = "unlisted.npy"
TEXT_HASH = "text_hash.npy"
SEGMENT_ID_RE = re.compile(r"^seg-\d{6,}\Z")


def prefix(segment_id: str) -> str:
    """What a segment's file names start with."""
    return f"{segment_id}."


def data_files(entry: Mapping[str, Any]) -> list[str]:
    """The files of a segment's immutable data (records, postings, vectors, digests), by its manifest entry."""
    at = prefix(entry["id"])
    records = recordfiles.V2_FILES if entry["records"] == 2 else recordfiles.V1_FILES
    files = [at + f for f in records] + [at + VOCAB_FILE]
    files += [postings_file(n, at) for n in entry["postings_arrays"]]
    if entry["vectors"]:
        files.append(at + VECTORS_FILE)
    if entry["text_hash"]:
        files.append(at + TEXT_HASH)
    return files


def tombstone_files(entry: Mapping[str, Any]) -> list[str]:
    """The files of a segment's tombstones in one generation (none when nothing is deleted)."""
    at = prefix(entry["id"])
    return ([at + TOMBSTONES] if entry["deleted"] else []) + ([at + UNLISTED] if entry["unlisted"] else [])


def segment_entry(segment: Segment, *, records: int = 2, deleted: int = 0, unlisted: int = 0) -> dict[str, Any]:
    """A segment's manifest entry."""
    postings = segment.postings
    return {"id": segment.id, "rows": segment.n_rows, "live": segment.n_rows - deleted,
            "kinds": list(segment.store.kinds), "records": records, "terms": postings.vocab_size,
            "postings": postings.n_postings, "postings_arrays": sorted(postings.arrays()),
            "vectors": segment.raw_vectors is not None, "text_hash": "text_digests" in segment.derived,
            "deleted": deleted, "unlisted": unlisted}


def segment_payloads(segment: Segment) -> dict[str, gens.Payload]:
    """The data files of a segment made in memory (a commit's new records), by name."""
    at = prefix(segment.id)
    files = recordfiles.record_payloads(segment.store, at)
    terms = json.dumps(segment.postings.vocab_terms, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    files[at + VOCAB_FILE] = terms
    for name, array in segment.postings.arrays().items():
        files[postings_file(name, at)] = np.ascontiguousarray(array)
    if segment.raw_vectors is not None:
        files[at + VECTORS_FILE] = np.ascontiguousarray(segment.raw_vectors, dtype=np.float32)
    digests = segment.derived.get("text_digests")
    if digests is not None:
        files[at + TEXT_HASH] = np.ascontiguousarray(digests, dtype=np.uint64)
    return files


def tombstone_payloads(segment_id: str, deleted: np.ndarray, unlisted: np.ndarray) -> dict[str, gens.Payload]:
    at = prefix(segment_id)
    files: dict[str, gens.Payload] = {}
    if deleted.size:
        files[at + TOMBSTONES] = np.ascontiguousarray(deleted, dtype=np.int64)
    if unlisted.size:
        files[at + UNLISTED] = np.ascontiguousarray(unlisted, dtype=np.int64)
    return files


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def check_entry(generation: gens.Generation, entry: Any, index: int) -> None:
    """CorpusError naming the manifest unless *entry* is a well-formed segment entry."""
    def bad(what: str) -> CorpusError:
        return CorpusError(f"{generation.dir}/manifest.json: segment #{index} {what}; the corpus is damaged — "
                           f"rebuild it with irflow.build(..., path={str(generation.root)!r})")
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) or not SEGMENT_ID_RE.match(entry["id"]):
        raise bad("has no valid id (seg-NNNNNN)")
    if not all(_count(entry.get(k)) for k in ("rows", "live", "terms", "postings", "deleted", "unlisted")):
        raise bad("has counts that are not non-negative integers")
    if entry["live"] + entry["deleted"] != entry["rows"] or entry["unlisted"] > entry["deleted"]:
        raise bad("has counts that do not add up (rows = live + deleted, unlisted <= deleted)")
    if entry.get("records") not in (1, 2) or type(entry.get("records")) is not int:
        raise bad("has an unknown record format")
    kinds, names = entry.get("kinds"), entry.get("postings_arrays")
    if not isinstance(kinds, list) or not all_of_type(kinds, str):
        raise bad("has 'kinds' that are not a list of names")
    if not isinstance(names, list) or not all(isinstance(n, str) and n in ARRAY_NAMES for n in names):
        raise bad(f"has 'postings_arrays' not among {list(ARRAY_NAMES)}")
    if type(entry.get("vectors")) is not bool or type(entry.get("text_hash")) is not bool:
        raise bad("has 'vectors' / 'text_hash' that are not true or false")


def read_tombstones(generation: gens.Generation, entry: Mapping[str, Any], *,
                    verify: bool) -> tuple[np.ndarray, np.ndarray]:
    """(deleted local rows, unlisted local rows) of a segment in this generation, checked against its entry."""
    at, n = prefix(entry["id"]), entry["rows"]
    deleted = load_rows(generation, at + TOMBSTONES, n, verify=verify) if entry["deleted"] else np.empty(0, np.int64)
    unlisted = load_rows(generation, at + UNLISTED, n, verify=verify) if entry["unlisted"] else np.empty(0, np.int64)
    if deleted.size != entry["deleted"] or unlisted.size != entry["unlisted"] or \
            np.setdiff1d(unlisted, deleted).size:
        raise CorpusError(f"{generation.dir}/{at}{TOMBSTONES}: the segment's tombstones disagree with the manifest "
                          "(counts, or unlisted rows not deleted); the corpus is damaged — rebuild it")
    return deleted, unlisted


def read_store(generation: gens.Generation, entry: Mapping[str, Any], *, verify: bool,
               name: str | None, checked: bool = False) -> CorpusStore:
    """Only a segment's records (its files verified unless *checked* already), without tombstones."""
    at, n = prefix(entry["id"]), entry["rows"]
    if not checked:
        records = recordfiles.V2_FILES if entry["records"] == 2 else recordfiles.V1_FILES
        gens.verify_files(generation, [at + f for f in records], checksums=verify)
    if entry["records"] == 2:
        return recordfiles.read_v2(generation, np.empty(0, np.int64), name, prefix=at, n_rows=n,
                                   kinds=entry["kinds"])
    return recordfiles.read_v1(generation, np.empty(0, np.int64), name, prefix=at, n_rows=n)


def read_segment(generation: gens.Generation, entry: Mapping[str, Any], *, verify: bool, name: str | None,
                 dim: int | None) -> Segment:
    """A segment of a format-3 generation: verified (vectors: size now, checksum on first use), arrays mapped."""
    at, n = prefix(entry["id"]), entry["rows"]
    files = data_files(entry)
    vectors_file = at + VECTORS_FILE
    gens.verify_files(generation, [f for f in files if f != vectors_file], checksums=verify)
    store = read_store(generation, entry, verify=verify, name=name, checked=True)
    vocab = load_json(generation, at + VOCAB_FILE)
    if not isinstance(vocab, list) or not all_of_type(vocab, str):
        raise CorpusError(f"{generation.dir}/{at}{VOCAB_FILE} is not a list of terms; the corpus is damaged — rebuild it")
    arrays = {a: load_array(generation, postings_file(a, at)) for a in entry["postings_arrays"]}
    try:
        postings = Postings.from_arrays(vocab, arrays, n_rows=n, label=lambda a: postings_file(a, at))
    except CorpusError as exc:
        raise CorpusError(f"{generation.dir}: {exc}; the corpus is damaged — rebuild it") from None
    vectors = check = None
    if entry["vectors"]:
        gens.verify_files(generation, [vectors_file], checksums=False)  # its size now, its checksum on first use
        vectors, verify_vectors = map_vectors(generation, verify=verify, file=vectors_file)
        if dim is None or vectors.dtype != np.float32 or vectors.shape != (n, dim):
            raise CorpusError(f"{generation.dir}/{vectors_file} holds {vectors.dtype} {vectors.shape}, expected float32 "
                              f"({n}, {dim}); the corpus is damaged — rebuild it")
        check = VectorCheck(str(generation.dir / vectors_file), store.id_column, verify_vectors)
    segment = Segment(store=store, postings=postings, vectors=vectors, vectors_check=check, id=entry["id"],
                      source=identity(generation, files))
    if entry["text_hash"]:
        digests = load_array(generation, at + TEXT_HASH)
        if digests.dtype != np.uint64 or digests.shape != (n,):
            raise CorpusError(f"{generation.dir}/{at}{TEXT_HASH} holds {digests.dtype} {digests.shape}, expected "
                              f"uint64 ({n},); the corpus is damaged — rebuild it")
        segment.derived["text_digests"] = digests
    return segment


def identity(generation: gens.Generation, files: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """The checksums of a segment's data files: the same id and checksums are the same segment (reused on refresh)."""
    return tuple((f, gens.entry_checksum(generation.files[f])[1]) for f in files)


def merged_payloads(parts: MergedParts, segment_id: str) -> tuple[dict[str, gens.Payload], dict[str, Any]]:
    """The data files of the segment merging *parts* (strings and vectors streamed from the parts), and its entry."""
    at = prefix(segment_id)
    files: dict[str, gens.Payload] = {}
    for column, stem in recordfiles.STRING_STEMS.items():
        if column == "ledger":
            continue
        kept = parts.strings(column)
        files[f"{at}{stem}.bytes.npy"] = gens.StreamedArray(np.uint8, kept.size, kept.chunks)
        files[f"{at}{stem}.offsets.npy"] = kept.offsets
    kinds, codes = parts.kinds()
    files[at + recordfiles.KIND_CODES_FILE] = np.ascontiguousarray(codes, dtype=np.int32)
    files[at + recordfiles.SURFACE_INDEX_FILE] = parts.surface_indices()
    artifacts, offsets, rows, missing = parts.ledger()
    names = KeptStrings.of([np.array(artifacts, dtype=object)], [np.arange(len(artifacts))])
    ledger_stem = recordfiles.STRING_STEMS["ledger"]
    files[f"{at}{ledger_stem}.bytes.npy"] = gens.StreamedArray(np.uint8, names.size, names.chunks)
    files[f"{at}{ledger_stem}.offsets.npy"] = names.offsets
    files[at + recordfiles.LEDGER_OFFSETS_FILE] = offsets
    files[at + recordfiles.LEDGER_ROWS_FILE] = rows
    files[at + recordfiles.LEDGER_MISSING_FILE] = json.dumps(missing, ensure_ascii=False).encode("utf-8")
    postings = parts.postings()
    files[at + VOCAB_FILE] = json.dumps(postings.vocab_terms, ensure_ascii=False, separators=(",", ":")).encode()
    for name, array in postings.arrays().items():
        files[postings_file(name, at)] = np.ascontiguousarray(array)
    dim = parts.views[0].dim
    if dim is not None:
        files[at + VECTORS_FILE] = gens.StreamedArray(np.float32, parts.n_rows * dim,
                                                      lambda: (b.tobytes() for b in parts.vector_blocks()),
                                                      shape=(parts.n_rows, dim))
    digests = parts.digests()
    if digests is not None:
        files[at + TEXT_HASH] = digests
    deleted = parts.deleted()  # rows deleted out of band, still listed: kept (see irflow.store.merging)
    files.update(tombstone_payloads(segment_id, deleted, np.empty(0, np.int64)))
    entry = {"id": segment_id, "rows": parts.n_rows, "live": parts.n_rows - int(deleted.size), "kinds": list(kinds),
             "records": 2, "terms": postings.vocab_size, "postings": postings.n_postings,
             "postings_arrays": sorted(postings.arrays()), "vectors": dim is not None,
             "text_hash": digests is not None, "deleted": int(deleted.size), "unlisted": 0}
    return files, entry
