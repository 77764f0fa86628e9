"""The record store's files in a generation: binary columns (format 2, written) and columnar JSON (format 1, read).

Format 2 stores every record column so that opening does nothing per
record: strings (ids, artifact ids, texts) are one UTF-8 blob and n + 1
int64 offsets each, metadata one comma-terminated JSON text per row (see
:mod:`irflow.store.columnar`), kind codes and surface indices small integer
arrays, the ledger its artifacts (a string column), each one's rows in plan
order (CSR offsets + rows, -1 for a listed id the store does not hold) and
the ids of those -1 entries (``ledger.missing.json``, empty unless the ledger
is stale).  Every array is ``np.save``d and mapped back read-only,
``allow_pickle=False``; opening checks shapes, dtypes, offsets and ranges
with a few vectorized passes, and a string or JSON value is decoded when it
is first read (a damaged one raises CorpusError naming its file then — the
checksums, verified before any byte is used, catch damage first).

Format 1 (irflow releases before format 2) kept ``records.json`` (columnar
JSON) and ``ledger.json`` (artifact -> record ids): still read, the old way.
"""

from __future__ import annotations

import itertools
import json
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from irflow.errors import CorpusError
from irflow.store import generations as gens
from irflow.store.columnar import JsonColumn, LedgerTable, StringColumn, check_offsets, utf8_chunks, utf8_offsets
from irflow.store.record_store import CorpusStore
from irflow.util import npyfiles

__all__ = ["RECORDS_FILE", "LEDGER_FILE", "V1_FILES", "V2_FILES", "STRING_STEMS", "record_payloads", "read_v1",
           "read_v2", "load_array", "load_json", "all_of_type"]

# format 1 (read only)
RECORDS_FILE = "records.json"
LEDGER_FILE = "ledger.json"
V1_FILES: tuple[str, ...] = (RECORDS_FILE, LEDGER_FILE)
_RECORD_COLUMNS = ("id", "artifact_id", "surface_kind", "surface_index", "text", "metadata")

# format 2: string columns as <stem>.bytes.npy + <stem>.offsets.npy
_STRINGS = {"id": "records.id", "artifact_id": "records.artifact_id", "text": "records.text",
            "metadata": "records.metadata", "ledger": "ledger.artifact"}
#: Each string column's file stem (``<stem>.bytes.npy`` + ``<stem>.offsets.npy``).
STRING_STEMS = dict(_STRINGS)
KIND_CODES_FILE = "records.kind_code.npy"
SURFACE_INDEX_FILE = "records.surface_index.npy"
LEDGER_OFFSETS_FILE = "ledger.offsets.npy"
LEDGER_ROWS_FILE = "ledger.rows.npy"
LEDGER_MISSING_FILE = "ledger.missing.json"
V2_FILES: tuple[str, ...] = (
    *(f"{stem}.{part}.npy" for stem in _STRINGS.values() for part in ("bytes", "offsets")),
    KIND_CODES_FILE, SURFACE_INDEX_FILE, LEDGER_OFFSETS_FILE, LEDGER_ROWS_FILE, LEDGER_MISSING_FILE,
)


def _damaged(generation: gens.Generation, file: str, what: str) -> CorpusError:
    return CorpusError(f"{generation.dir}/{file} {what}; the corpus is damaged — rebuild it")


# -- shared readers ------------------------------------------------------------------------


def load_array(generation: gens.Generation, file: str, *, mmap: bool = True) -> np.ndarray:
    """A ``.npy`` file of the generation, memory-mapped read-only (or read), never unpickled."""
    path = generation.path(file)
    try:
        array = npyfiles.load(path, mmap_mode="r" if mmap else None)  # threads: one header at a time
    except (ValueError, OSError, EOFError) as exc:
        raise _damaged(generation, file, f"cannot be read as a numpy array ({exc})") from exc
    # A plain ndarray view keeps the mapping alive but drops the memmap subclass,
    # whose results would otherwise propagate the type into every computation.
    return array.view(np.ndarray) if isinstance(array, np.memmap) else array


def load_json(generation: gens.Generation, file: str) -> Any:
    """A JSON file of the generation, read up to the size its manifest promises, from a regular file only."""
    try:
        raw = gens.read_small_file(generation.path(file), int(generation.files[file]["bytes"]), root=generation.root)
    except FileNotFoundError:
        raise _damaged(generation, file, "is missing") from None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise _damaged(generation, file, f"is not valid JSON ({exc})") from None


def all_of_type(values: Iterable[Any], kind: type) -> bool:
    """Whether every value is exactly of type *kind* (JSON gives no subclasses; a bool is not an int here)."""
    return set(map(type, values)) <= {kind}  # map(type) runs in C


# -- format 2 -------------------------------------------------------------------------------


def _blob_and_offsets(held: Sequence[str] | np.ndarray | StringColumn) -> tuple[gens.Payload, np.ndarray]:
    """A string column's blob payload and offsets: a stored column's own arrays, or the strings streamed to disk."""
    if isinstance(held, StringColumn):
        return np.ascontiguousarray(held.blob, dtype=np.uint8), np.ascontiguousarray(held.offsets, dtype=np.int64)
    values = held.tolist() if isinstance(held, np.ndarray) else held
    offsets = utf8_offsets(values)
    return gens.StreamedArray(np.uint8, int(offsets[-1]), lambda: utf8_chunks(values)), offsets


def record_payloads(store: CorpusStore, prefix: str = "") -> dict[str, gens.Payload]:
    """The format-2 files of *store*: name -> payload (stored columns reused; texts streamed, never joined whole).

    ``prefix`` starts every name (a segment's files: ``seg-000003.``).
    """
    metadata = store.metadata
    meta = metadata if isinstance(metadata, JsonColumn) else JsonColumn.of(
        metadata, name=lambda row: f"the metadata of record {store.record_ids_of([row])[0]!r}")
    table = store.ledger_table
    columns = {"id": store.id_column, "artifact_id": store.artifact_column, "text": store.texts,
               "metadata": meta.strings, "ledger": table.artifacts}
    files: dict[str, gens.Payload] = {}
    for column, stem in _STRINGS.items():
        files[f"{prefix}{stem}.bytes.npy"], files[f"{prefix}{stem}.offsets.npy"] = _blob_and_offsets(columns[column])
    files[prefix + KIND_CODES_FILE] = np.ascontiguousarray(store.kind_codes, dtype=np.int32)
    files[prefix + SURFACE_INDEX_FILE] = np.ascontiguousarray(store.surface_indices, dtype=np.int64)
    files[prefix + LEDGER_OFFSETS_FILE] = np.ascontiguousarray(table.offsets, dtype=np.int64)
    files[prefix + LEDGER_ROWS_FILE] = np.ascontiguousarray(table.rows, dtype=np.int64)
    files[prefix + LEDGER_MISSING_FILE] = json.dumps(list(table.missing), ensure_ascii=False).encode("utf-8")
    return files


def _string_column(generation: gens.Generation, stem: str, n: int) -> StringColumn:
    blob = load_array(generation, f"{stem}.bytes.npy")
    offsets = load_array(generation, f"{stem}.offsets.npy")
    if blob.ndim != 1 or blob.dtype != np.uint8:
        raise _damaged(generation, f"{stem}.bytes.npy", f"holds {blob.dtype} {blob.shape}, expected a 1-d uint8 blob")
    check_offsets(offsets, n, int(blob.size), f"{generation.dir}/{stem}.offsets.npy")
    return StringColumn(blob, offsets, where=f"{generation.dir}/{stem}.bytes.npy")


def _int_array(generation: gens.Generation, file: str, n: int, dtype: type, low: int, high: int) -> np.ndarray:
    array = load_array(generation, file)
    if array.ndim != 1 or array.dtype != dtype or array.size != n:
        raise _damaged(generation, file, f"holds {array.dtype} {array.shape}, expected {np.dtype(dtype)} ({n},)")
    if n and (int(array.min()) < low or int(array.max()) > high):
        raise _damaged(generation, file, f"holds values outside {low}..{high}")
    return array


def read_v2(generation: gens.Generation, deleted: np.ndarray, name: str | None, *, prefix: str = "",
            n_rows: int | None = None, kinds: Sequence[str] | None = None) -> CorpusStore:
    """The store of a format-2 generation (or of a segment's files, ``prefix``): columns mapped and checked, nothing decoded."""
    n = int(generation.manifest["counts"]["rows"]) if n_rows is None else n_rows
    kinds = generation.manifest.get("kinds", []) if kinds is None else list(kinds)
    ids = _string_column(generation, prefix + _STRINGS["id"], n)
    artifacts = _string_column(generation, prefix + _STRINGS["artifact_id"], n)
    texts = _string_column(generation, prefix + _STRINGS["text"], n)
    metadata = JsonColumn(_string_column(generation, prefix + _STRINGS["metadata"], n),
                          check=lambda value: type(value) is dict, what="a metadata mapping")
    metadata.validate()
    codes = _int_array(generation, prefix + KIND_CODES_FILE, n, np.int32, 0, len(kinds) - 1)
    unused = np.flatnonzero(np.bincount(codes, minlength=len(kinds)) == 0)
    if unused.size:  # a kind no row has would make a surface restriction to it empty, not an error
        raise _damaged(generation, prefix + KIND_CODES_FILE, f"gives no row the kind {kinds[int(unused[0])]!r} the "
                                                             "manifest lists")
    surface = _int_array(generation, prefix + SURFACE_INDEX_FILE, n, np.int64, 0, np.iinfo(np.int64).max)
    offsets = load_array(generation, prefix + LEDGER_OFFSETS_FILE)
    n_artifacts = int(offsets.size) - 1
    listed = _int_array(generation, prefix + LEDGER_ROWS_FILE, int(offsets[-1]) if offsets.size else 0, np.int64,
                        -1, n - 1)
    check_offsets(offsets, n_artifacts, int(listed.size), f"{generation.dir}/{prefix}{LEDGER_OFFSETS_FILE}")
    held = listed[listed >= 0]
    if held.size and int(np.bincount(held, minlength=n).max()) > 1:  # a record has one place in one artifact
        twice = int(np.flatnonzero(np.bincount(held, minlength=n) > 1)[0])
        raise _damaged(generation, prefix + LEDGER_ROWS_FILE, f"lists row {twice} more than once")
    ledger_artifacts = _string_column(generation, prefix + _STRINGS["ledger"], n_artifacts)
    missing = load_json(generation, prefix + LEDGER_MISSING_FILE)
    if not isinstance(missing, list) or not all_of_type(missing, str) or len(missing) != int((listed < 0).sum()):
        raise _damaged(generation, prefix + LEDGER_MISSING_FILE, "is not the list of the ledger's ids the store lacks")

    def ledger(record_ids_of: Callable[[np.ndarray], np.ndarray]) -> LedgerTable:
        return LedgerTable(ledger_artifacts, offsets, listed, missing, record_ids_of,
                           where=f"{generation.dir}/{prefix}{LEDGER_ROWS_FILE}")
    return CorpusStore.from_columns(record_ids=ids, artifact_ids=artifacts, kinds=kinds, kind_codes=codes,
                                    surface_indices=surface, texts=texts, metadata=metadata, ledger=ledger,
                                    deleted_rows=deleted, name=name)


# -- format 1 -------------------------------------------------------------------------------


def _check_records(generation: gens.Generation, columns: Any, rows: int, file: str = RECORDS_FILE) -> None:
    """Each record column holds *rows* values of its type: one pass per column, no per-record objects."""
    if not isinstance(columns, dict) or any(not isinstance(columns.get(c), list) or len(columns[c]) != rows
                                            for c in _RECORD_COLUMNS):
        raise _damaged(generation, file, f"does not hold {rows} rows of {_RECORD_COLUMNS}")
    for column, kind in (("id", str), ("artifact_id", str), ("surface_kind", str), ("surface_index", int),
                         ("text", str), ("metadata", dict)):
        if not all_of_type(columns[column], kind):
            bad = next(i for i, v in enumerate(columns[column]) if type(v) is not kind)
            raise CorpusError(f"{generation.dir}/{file}: column {column!r} holds a "
                              f"{type(columns[column][bad]).__name__} at row {bad}, expected {kind.__name__}; the "
                              "corpus is damaged — rebuild it")


def _check_ledger(generation: gens.Generation, ledger: Any, file: str = LEDGER_FILE) -> None:
    if (not isinstance(ledger, dict) or not all_of_type(ledger.values(), list)
            or not all_of_type(itertools.chain.from_iterable(ledger.values()), str)):
        raise _damaged(generation, file, "is not a mapping of artifact ids to lists of record ids")


def read_v1(generation: gens.Generation, deleted: np.ndarray, name: str | None, *, prefix: str = "",
            n_rows: int | None = None) -> CorpusStore:
    """The store of a format-1 generation (``records.json``, ``ledger.json``), parsed whole as before."""
    columns = load_json(generation, prefix + RECORDS_FILE)
    _check_records(generation, columns, generation.manifest["counts"]["rows"] if n_rows is None else n_rows,
                   prefix + RECORDS_FILE)
    ledger = load_json(generation, prefix + LEDGER_FILE)
    _check_ledger(generation, ledger, prefix + LEDGER_FILE)
    try:
        store = CorpusStore(
            record_ids=columns["id"],
            artifact_ids=columns["artifact_id"],
            surface_kinds=columns["surface_kind"],
            surface_indices=columns["surface_index"],
            texts=columns["text"],
            metadata=columns["metadata"],
            ledger=ledger,
            deleted_rows=deleted,
            name=name,
        )
    except OverflowError:  # a surface_index beyond int64
        raise CorpusError(f"{generation.dir}/{prefix}{RECORDS_FILE}: a surface_index does not fit 64 bits; the "
                          "corpus is damaged — rebuild it") from None
    except CorpusError as exc:  # duplicate record ids
        raise CorpusError(f"{generation.dir}/{prefix}{RECORDS_FILE}: {exc}") from None
    store.ledger_table.where = f"{generation.dir}/{prefix}{LEDGER_FILE}"
    return store
