"""Trace files: the JSON Lines form of a trace, written by ``Trace.dump`` and read by ``Trace.load``.

Every field of a file is checked before it is used (a malformed or hostile file is a
:class:`~irflow.errors.TraceError` naming the file, the line and the field), and sizes are
bounded before anything is allocated: loading a file and rendering the loaded trace back
cost a small multiple of the file's size, whatever it says (the rules are in
:mod:`irflow.engine.tracecheck`: no column filled in for a candidate that lacks it, one
value per stage field on every line of the stage, one identity per row).

JSON Lines schema (``Trace.dump``; ``format_version`` 1).  Line 1 is the header::

    {"type": "header", "format": "irflow-trace", "format_version": 1,
     "recipe": "hybrid", "recipe_source": "recipes/hybrid.toml", "recipe_dict": {...},
     "params": {...resolved recipe parameters...}, "queries": ["q0", "q1"],
     "corpus": "name" | null, "n_rows": 40 | null,
     "embedder": "onnx:all-MiniLM-L6-v2" | "none" | null, "analyzer": "english" | null,
     "irflow_version": "0.2.0",
     "stages": ["candidates", "dense", ...],
     "short": [{"query_index": 0, "query": "q0", "got": 4, "k": 5, "per_artifact": true,
                "fetch_k": 50, "needed": 73, "gives": 5, "reason": "depth", "message": "..."}],
     "excerpts": {"<row>": "the record's text, cut to 160 characters", ...}}

(``short``: the queries that got fewer than ``k`` hits while more may match,
:class:`~irflow.engine.shortfall.Shortfall`; absent in older files.)
``excerpts`` holds once per record (by corpus row) the start of its text, which
tables show beside the record id; a file written before excerpts existed has
none and loads the same (its tables show the ids alone).

``embedder`` and ``analyzer`` name what the corpus ranked with (its
:class:`~irflow.store.protocol.CorpusSettings`); files written before they
existed load with both None.

then one line per (stage, original query), stages in execution order::

    {"type": "stage", "stage": "fuse", "kind": "fuse", "query": "q0", "query_index": 0,
     "status": "ran" | "passed" | "cached" | "override" | "inactive",   # passed: an input unchanged
     "elapsed_ms": 0.4,                  # the stage's time for the whole batch (it runs once)
     "params": {...},                    # JSON-safe: callables as "<module.name>", numpy as lists
     "ports": {"inputs": ["dense", "lexical"]},
     "output_type": "candidates" | "mask" | "queries" | "hits" | "inactive" | "other",
     "scale": "rrf" | null, "active": true, "count": 18,
     "columns": {"fuse.dense.rank": "<i4", ...},   # provenance column -> numpy dtype
     "batch": null | {"texts": [...], "origin": [...]},   # set when the batch was reformulated
     "candidates": [{"record_id", "artifact_id", "surface_kind", "row", "score", "rank",
                     "provenance": {column: value}, "subquery": int (reformulated batches only)}],
     "output": {...},                    # non-candidate outputs: {"type": "mask", "count", "size"} ...
     "inputs": {"dense": {"type": "candidates", "scale", "active", "count", "columns", "batch",
                          "candidates"}, "query": {"type": "queries", "texts": [...]}, ...}}

Floats that JSON cannot hold are written as ``null`` (NaN: an absent
provenance entry) and ``"inf"`` / ``"-inf"``.  ``columns`` restores the exact
dtypes on load, so a loaded trace holds real
:class:`~irflow.engine.batches.Candidates` again (masks and hit lists come back as
:class:`Summary` objects: their counts, not their content).
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from irflow.engine.batches import Candidates, QueryBatch
from irflow.engine.events import INACTIVE, StageEvent
from irflow.engine.tracecheck import MAX_STRING_ITEMSIZE, check_excerpts, check_header, check_identity, \
    check_same_as_first, check_stage_line, column_dtype
from irflow.engine.shortfall import Shortfall
from irflow.engine.values import Summary, json_float, jsonable
from irflow.errors import TraceError, TraceFileNotFound
from irflow.util.fileio import MAX_NESTING, decode_utf8, open_regular, read_lines, shown, too_many_digits
from irflow.util.unicode import json_text

__all__ = ["FORMAT", "FORMAT_VERSION", "MAX_TRACE_BYTES", "MAX_STRING_ITEMSIZE", "MAX_COLUMN_BYTES", "render",
           "candidate_dicts", "query_positions", "json_line", "read_trace_file", "parse_trace_records", "ParsedTrace"]

#: Row -> (record ids, artifact ids, surface kinds) of those rows: how rendering names candidates.
Identify = Callable[[np.ndarray], tuple[list[Any], list[Any], list[Any]]]

FORMAT = "irflow-trace"
FORMAT_VERSION = 1

#: The largest trace file :meth:`Trace.load` reads (its lines are held in memory): 1 GiB.
MAX_TRACE_BYTES = 1 << 30
#: The most memory one provenance column of a loaded trace may take: 256 MiB.
MAX_COLUMN_BYTES = 256 << 20



def _encode_column(column: np.ndarray) -> list[Any]:
    if column.dtype.kind == "f":
        return [json_float(v) for v in column.tolist()]
    if column.dtype.kind == "O":
        return [jsonable(v) for v in column.tolist()]
    values: list[Any] = column.tolist()
    return values


def _decode_column(values: Sequence[Any], dtype: str, name: str = "score") -> np.ndarray:
    """A column of a loaded trace; TraceError for a dtype off the allow-list or a value it cannot hold."""
    dt = column_dtype(dtype, name)
    if dt.itemsize * len(values) > MAX_COLUMN_BYTES:
        raise TraceError(f"column {name!r} ({dtype}) of {len(values)} entries would take "
                         f"{dt.itemsize * len(values)} bytes, over the limit of {MAX_COLUMN_BYTES}")
    try:
        if dt.kind == "f":
            return np.array([np.nan if v is None else float(v) for v in values], dtype=dt)
        if dt.kind == "O":
            out = np.empty(len(values), dtype=object)
            out[:] = list(values)
            return out
        if dt.kind in "US" and any(not isinstance(v, str) for v in values):
            raise TypeError("a string column holds a non-string")
        if dt.kind in "iub" and any(not isinstance(v, (int, float)) for v in values):
            raise TypeError("a number column holds a non-number")
        return np.asarray(list(values), dtype=dt)
    except (TypeError, ValueError, OverflowError) as error:
        raise TraceError(f"column {name!r} ({dtype}) holds a value it cannot ({error})") from None


# rendering one value for one original query


def query_positions(cands: Candidates, query: int) -> np.ndarray:
    """Positions of the candidates of original query ``query``, in batch order."""
    return np.flatnonzero(cands.origin_index == query)


def candidate_dicts(cands: Candidates, positions: np.ndarray, ident: Identify) -> list[dict[str, Any]]:
    rows = cands.row[positions]
    record_ids, artifact_ids, kinds = ident(rows)
    columns = {name: _encode_column(col[positions]) for name, col in cands.provenance.items()}
    scores = _encode_column(cands.score[positions])
    ranks = cands.rank[positions].tolist()
    subqueries = None if cands.queries.is_root else cands.query_index[positions].tolist()
    out = []
    # one dict per candidate: this runs when a trace is rendered, never on the search path
    for i, row in enumerate(rows.tolist()):
        entry = {"record_id": record_ids[i], "artifact_id": artifact_ids[i], "surface_kind": kinds[i],
                 "row": row, "score": scores[i], "rank": ranks[i],
                 "provenance": {name: values[i] for name, values in columns.items()}}
        if subqueries is not None:
            entry["subquery"] = subqueries[i]
        out.append(entry)
    return out


def render(value: Any, query: int, ident: Identify) -> dict[str, Any]:
    """One stage input or output, for one original query, as JSON data (``"type"`` says what it is)."""
    if isinstance(value, Summary):
        return {"type": value.type, **value.of_query(query)}
    if value is INACTIVE:
        return {"type": "inactive"}
    if isinstance(value, Candidates):
        positions = query_positions(value, query)
        batch = None if value.queries.is_root else {"texts": list(value.queries.texts),
                                                    "origin": value.queries.origin.tolist()}
        return {"type": "candidates", "scale": value.scale.value, "active": value.active,
                "count": int(positions.size), "columns": {n: c.dtype.str for n, c in value.provenance.items()},
                "batch": batch, "candidates": candidate_dicts(value, positions, ident)}
    if isinstance(value, np.ndarray) and value.dtype == np.bool_:
        return {"type": "mask", "count": int(np.count_nonzero(value)), "size": int(value.size)}
    if isinstance(value, QueryBatch):
        texts = [t for t, o in zip(value.texts, value.origin.tolist()) if o == query]
        out: dict[str, Any] = {"type": "queries", "count": len(texts), "texts": texts}
        if not value.is_root:
            out["batch"] = {"texts": list(value.texts), "origin": value.origin.tolist()}
        return out
    if isinstance(value, list):  # a Hits output: one list of SearchHit per original query
        hits = value[query] if query < len(value) else []
        return {"type": "hits", "count": len(hits),
                "hits": [jsonable(h.to_dict()) if hasattr(h, "to_dict") else repr(h) for h in hits]}
    return {"type": "other", "repr": repr(value)}


def _restore(parts: Sequence[Mapping[str, Any]], originals: tuple[str, ...]) -> Any:
    """The value a stage saw, rebuilt from its per-query renderings (inverse of :func:`render`)."""
    first = parts[0]
    kind = first.get("type")
    if kind == "inactive":
        return INACTIVE
    if kind == "queries":
        batch = first.get("batch")
        if batch:
            return QueryBatch(batch["texts"], batch["origin"], originals)
        return QueryBatch(originals)
    if kind != "candidates":
        fields = [{k: v for k, v in part.items() if k != "type"} for part in parts]
        # a mask says the same on every query's line; hits differ per query: each line keeps its own
        same = all(f == fields[0] for f in fields)
        return Summary(str(kind), fields[0], () if same else tuple(fields))
    batch_data = first.get("batch")
    queries = (QueryBatch(batch_data["texts"], batch_data["origin"], originals) if batch_data
               else QueryBatch(originals))
    if not first.get("active", True):
        return Candidates.inactive(queries)
    entries = [(q, c) for q, part in enumerate(parts) for c in part.get("candidates", ())]
    query_index = np.array([c.get("subquery", q) for q, c in entries], dtype=np.int64)
    rank = np.array([c["rank"] for _, c in entries], dtype=np.int64)
    order = np.lexsort((rank, query_index))  # the ranking order within each query text
    cands = [entries[i][1] for i in order.tolist()]
    columns = first.get("columns", {})
    provenance = {name: _decode_column([c["provenance"].get(name) for c in cands], dtype, name)
                  for name, dtype in columns.items()}
    return Candidates(queries, query_index[order], [c["row"] for c in cands],
                      _decode_column([c["score"] for c in cands], "<f8"), first["scale"], provenance)


def read_trace_file(path: str | os.PathLike[str], *, max_bytes: int = MAX_TRACE_BYTES
                    ) -> tuple[list[Any], list[int]]:
    """The JSON records of a trace file and their line numbers (TraceError naming the file and line when it cannot).

    Refuses, before allocating: a file larger than ``max_bytes``, a
    line nested deeper than :data:`~irflow.util.fileio.MAX_NESTING`, a
    provenance dtype off the allow-list or wider than
    :data:`MAX_STRING_ITEMSIZE`, fields of the wrong type.
    """
    name = os.fspath(path)
    if not os.path.lexists(name):
        raise TraceFileNotFound(f"{name}: no such trace file (write one with irflow run --trace FILE, "
                                "or Trace.dump(path))")
    lines, numbers = [], []
    with open_regular(name, "trace file", error=TraceError) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > max_bytes:
            raise TraceError(f"{name}: the trace file has {size} bytes, over the limit of {max_bytes}; "
                             "pass Trace.load(path, max_bytes=...) to read it anyway")
        for number, raw in read_lines(handle, name, "trace file", max_line_bytes=max_bytes, error=TraceError):
            text = decode_utf8(raw, f"{name} line {number}", "trace file", error=TraceError, bom=number == 1)
            if not text.strip():
                continue
            where = f"{name}:{number}"
            # json's C parser guards its own recursion (RecursionError below); what loading keeps of
            # free-form fields is bounded by from_records, so no pre-scan of these long lines is needed
            try:
                lines.append(json.loads(text))
            except json.JSONDecodeError as error:
                raise TraceError(f"{where}: not JSON ({error.msg}); is this an irflow trace "
                                 "(irflow run --trace FILE)?") from None
            except RecursionError:
                raise TraceError(f"{where}: nested too deeply to read; a trace line nests a few levels, "
                                 f"and its free-form fields at most {MAX_NESTING}") from None
            except ValueError:
                raise TraceError(f"{where}: {too_many_digits()}") from None
            numbers.append(number)
    return lines, numbers


@attrs.frozen
class ParsedTrace:
    """What a trace's records hold: the header, the original queries, each row's identity, the stage events,
    and the rows' text excerpts (none in a file written before they existed)."""

    header: dict[str, Any]
    originals: tuple[str, ...]
    rows: dict[int, tuple[str, str, str]]
    events: list[StageEvent]
    short: tuple[Shortfall, ...] = ()
    excerpts: dict[int, str] = attrs.field(factory=dict)


def parse_trace_records(records: Iterable[Mapping[str, Any]], *, source: str = "<records>",
                        line_numbers: Sequence[int] | None = None) -> ParsedTrace:
    """The content of a trace's records (the dicts ``Trace.records`` returns, what ``Trace.load`` reads).

    Every field is checked before it is used (types, ranges, one line
    per stage and query, dtypes on the allow-list): a malformed record
    is a TraceError naming ``source``, the line and the field.
    """
    records = list(records)
    numbers = list(line_numbers) if line_numbers is not None else list(range(1, len(records) + 1))
    if not records or not isinstance(records[0], Mapping) or records[0].get("type") != "header" \
            or records[0].get("format") != FORMAT:
        raise TraceError(f"{source}: not an irflow trace: the first line must be the header "
                         f"{{\"type\": \"header\", \"format\": \"{FORMAT}\", ...}}")
    header = dict(records[0])
    version = header.get("format_version")
    if version != FORMAT_VERSION:
        raise TraceError(f"{source}: trace format version {version!r}; this irflow reads version "
                         f"{FORMAT_VERSION} (re-run with --trace to write a new one)")
    check_header(header, f"{source}:{numbers[0]}")
    originals = tuple(header.get("queries") or ())
    short = _shortfalls(header.get("short"), len(originals), f"{source}:{numbers[0]}")
    by_stage: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    rows: dict[int, tuple[str, str, str]] = {}
    events: list[StageEvent] = []
    where = source
    try:
        for number, line in zip(numbers[1:], records[1:]):
            where = f"{source}:{number}"
            if not isinstance(line, Mapping) or line.get("type") != "stage" or "stage" not in line:
                raise TraceError(f"{where}: expected a stage line {{\"type\": \"stage\", ...}}")
            check_stage_line(line, len(originals))
            check_identity(line, rows)
            by_stage.setdefault(line["stage"], []).append((number, line))
        for name, numbered in by_stage.items():
            where = f"{source}: stage {name!r}"
            numbered.sort(key=lambda item: item[1]["query_index"])
            if [line["query_index"] for _, line in numbered] != list(range(len(originals))):
                raise TraceError(f"needs one line per query (query_index 0..{len(originals) - 1}), got "
                                 f"{[line['query_index'] for _, line in numbered]}")
            first_number, first = numbered[0]
            for number, line in numbered:
                where = f"{source}:{number}"
                check_same_as_first(line, first, first_number, originals)
            where = f"{source}: stage {name!r}"
            events.append(event_from_lines(name, [line for _, line in numbered], originals))
    except TraceError as error:
        raise TraceError(f"{where}: a stage line is malformed: {error}; the file was not written by "
                         "Trace.dump, or was edited") from None
    except (KeyError, TypeError, ValueError, IndexError, OverflowError) as error:
        raise TraceError(f"{where}: a stage line is malformed ({type(error).__name__}: {error}); "
                         "the file was not written by Trace.dump, or was edited") from None
    try:
        excerpts = check_excerpts(header.get("excerpts"), rows)
    except TraceError as error:
        raise TraceError(f"{source}:{numbers[0]}: the header is malformed: {error}; the file was not written by "
                         "Trace.dump, or was edited") from None
    return ParsedTrace(header, originals, rows, events, short, excerpts)


def _shortfalls(entries: Any, n_queries: int, where: str) -> tuple[Shortfall, ...]:
    """The header's ``short`` entries (absent: none), each checked; TraceError naming a bad one."""
    if entries is None:
        return ()
    if not isinstance(entries, list) or len(entries) > n_queries:
        raise TraceError(f"{where}: the header is malformed: field 'short' is {shown(entries)}, expected a list "
                         f"of at most one entry per query ({n_queries})")
    out = []
    for i, entry in enumerate(entries):
        try:
            if not isinstance(entry, Mapping):
                raise TypeError(f"expected an object, got {shown(entry)}")
            note = Shortfall.from_dict(entry)
            if note.query_index >= n_queries:
                raise ValueError(f"query_index {note.query_index} is not one of the {n_queries} queries")
        except (TypeError, ValueError) as error:
            raise TraceError(f"{where}: the header is malformed: short[{i}]: {error}; the file was not written "
                             "by Trace.dump, or was edited") from None
        out.append(note)
    return tuple(out)


def event_from_lines(name: str, lines: Sequence[Mapping[str, Any]], originals: tuple[str, ...]) -> StageEvent:
    """One stage's event rebuilt from its lines (one per query, in query order)."""
    first = lines[0]
    # the checked fields of a line win over what its free-form "output" says (Trace.dump never writes them twice)
    parts = [{**line.get("output", {}), "type": line["output_type"], "scale": line.get("scale"),
              "active": line.get("active", True), "count": line.get("count"), "columns": line.get("columns", {}),
              "batch": line.get("batch"), "candidates": line.get("candidates", [])} for line in lines]
    if parts[0]["type"] != "candidates":
        # a mask, queries or hits line: keep what it said (texts, batch, size...), not the empty
        # candidate fields every line carries
        parts = [{k: v for k, v in part.items() if v is not None and k not in ("scale", "active", "columns",
                                                                                "candidates")} for part in parts]
    inputs = {up: _restore([line["inputs"][up] for line in lines], originals) for up in first.get("inputs", {})}
    ports = {p: tuple(s) for p, s in (first.get("ports") or {}).items()}
    return StageEvent(name, first["kind"], dict(first.get("params") or {}), inputs, ports,
                      _restore(parts, originals), first.get("elapsed_ms") or 0.0, first.get("status", "ran"))


def json_line(record: Mapping[str, Any]) -> bytes:
    """One trace line as UTF-8 bytes; any ``str`` welcome."""
    # a lone surrogate cannot be encoded as UTF-8; in JSON its \\uXXXX escape is the same string
    return (json_text(record, allow_nan=False) + "\n").encode("utf-8")
