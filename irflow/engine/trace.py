"""Traces: what every stage of a run received and produced, per query.

``recipe.run(corpus, query, trace=True).trace`` is a :class:`Trace`: the
stage events of the run in execution order (a :class:`TraceRecorder`, so
``trace.event("fuse")`` and iteration keep working) plus everything needed to
read them — record ids, artifacts and surface kinds of the candidates — so a
trace can be printed, diffed, explained, dumped and loaded back without the
corpus and without re-running anything::

    trace = recipe.run(corpus, "sql parser", trace=True).trace
    print(trace.table())
    trace.dump("run.jsonl")
    again = Trace.load("run.jsonl")
    print(diff(again.stage("dense"), again.stage("fuse")).table())

JSON Lines schema (``Trace.dump``; ``format_version`` 1).  Line 1 is the header::

    {"type": "header", "format": "irflow-trace", "format_version": 1,
     "recipe": "hybrid", "recipe_source": "recipes/hybrid.toml", "recipe_dict": {...},
     "params": {...resolved recipe parameters...}, "queries": ["q0", "q1"],
     "corpus": "name" | null, "n_rows": 40 | null, "irflow_version": "0.1.0",
     "stages": ["candidates", "dense", ...]}

then one line per (stage, original query), stages in execution order::

    {"type": "stage", "stage": "fuse", "kind": "fuse", "query": "q0", "query_index": 0,
     "status": "ran" | "cached" | "override" | "inactive",
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
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from irflow.engine.batches import Candidates, QueryBatch, Scale
from irflow.errors import NotInTrace, TraceError, TraceFileNotFound
from irflow.engine.executor import INACTIVE, StageEvent, TraceRecorder
from irflow.util.fileio import MAX_NESTING, atomic_writer, check_nesting, decode_utf8, open_regular, read_lines, \
    shown, too_many_digits
from irflow.engine.stage import is_finite
from irflow.util.table import render_table

if TYPE_CHECKING:
    from irflow.engine.explain import Explanation

__all__ = ["Trace", "StageView", "Summary", "Diff", "Change", "diff", "TraceError", "NotInTrace", "jsonable",
           "FORMAT", "FORMAT_VERSION", "MAX_TRACE_BYTES", "MAX_STRING_ITEMSIZE", "MAX_COLUMN_BYTES"]

FORMAT = "irflow-trace"
FORMAT_VERSION = 1

#: The largest trace file :meth:`Trace.load` reads (its lines are held in memory): 1 GiB.
MAX_TRACE_BYTES = 1 << 30
#: The widest fixed-width string provenance column a trace file may declare (``"<U1024"``, ``"|S1024"``).
MAX_STRING_ITEMSIZE = 1024
#: The most memory one provenance column of a loaded trace may take: 256 MiB.
MAX_COLUMN_BYTES = 256 << 20
#: Rows, ranks and query indexes read from a trace are below this (numpy int64 holds them).
_MAX_INDEX = 1 << 62

# the dtypes Trace.dump writes for provenance columns (numpy's dtype.str): bool, ints, floats, object,
# fixed-width strings; anything else in a file (void, datetime, structured, "<U5000000"...) is refused
_DTYPE = re.compile(r"^[<>|=]?(?:b1|[iu][1248]|f[248]|O|[US]([1-9][0-9]{0,9}))\Z")
_SURROGATE = re.compile("[\ud800-\udfff]")
_SCALES = tuple(scale.value for scale in Scale)


# --------------------------------------------------------------------------
# JSON-safe values


def _float(value: float) -> Any:
    if math.isnan(value):
        return None
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: numpy to Python, NaN to None, callables to ``"<module.name>"``.

    Used for stage parameters, which may hold numpy arrays or the Python
    callables a rerank / formulate / boost stage received from the API.

    >>> jsonable({"w": np.float32(0.5), "f": len, "t": (1, np.nan)})
    {'w': 0.5, 'f': '<builtins.len>', 't': [1, None]}
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, Enum):
        return jsonable(value.value)
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if callable(value) and hasattr(value, "__qualname__"):
        return f"<{getattr(value, '__module__', None) or '?'}.{value.__qualname__}>"
    return repr(value)


def _encode_column(column: np.ndarray) -> list[Any]:
    if column.dtype.kind == "f":
        return [_float(v) for v in column.tolist()]
    if column.dtype.kind == "O":
        return [jsonable(v) for v in column.tolist()]
    return column.tolist()


def _decode_column(values: Sequence[Any], dtype: str, name: str = "score") -> np.ndarray:
    """A column of a loaded trace; TraceError for a dtype off the allow-list or a value it cannot hold."""
    dt = _column_dtype(dtype, name)
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


def _column_dtype(dtype: Any, name: str) -> np.dtype:
    match = _DTYPE.match(dtype) if isinstance(dtype, str) else None
    if match is None:
        raise TraceError(f"column {name!r} has dtype {dtype!r}, not one a trace holds (bool, int, uint, float, "
                         f"object, or a string of at most {MAX_STRING_ITEMSIZE} characters)")
    if match.group(1) is not None and int(match.group(1)) > MAX_STRING_ITEMSIZE:
        raise TraceError(f"column {name!r} has dtype {dtype!r}: strings of {match.group(1)} characters, over the "
                         f"limit of {MAX_STRING_ITEMSIZE}")
    return np.dtype(dtype)


# --------------------------------------------------------------------------
# rows -> record identity


@attrs.frozen
class Summary:
    """What a loaded trace knows of a value that is not Candidates (a mask, hits): its rendered summary.

    ``fields`` is the dumped dict of one query, e.g. ``{"type": "mask", "count": 40, "size": 40}``.
    """

    type: str
    fields: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def count(self) -> int | None:
        return self.fields.get("count")


class _Identity:
    """Row -> (record id, artifact id, surface kind), from a corpus or from a dumped trace."""

    def __init__(self, corpus: Any = None, rows: Mapping[int, tuple[str, str, str]] | None = None) -> None:
        self.corpus = corpus
        self.rows = dict(rows or {})

    def __call__(self, rows: np.ndarray) -> tuple[list[Any], list[Any], list[Any]]:
        rows = np.asarray(rows, dtype=np.int64)
        corpus = self.corpus
        if corpus is not None and hasattr(corpus, "record_ids") and hasattr(corpus, "kind_codes"):
            kinds = np.asarray(corpus.kinds, dtype=object)
            return (np.asarray(corpus.record_ids)[rows].tolist(), np.asarray(corpus.artifact_ids)[rows].tolist(),
                    kinds[np.asarray(corpus.kind_codes)[rows]].tolist() if len(kinds) else [None] * rows.size)
        if corpus is not None and hasattr(corpus, "hit"):  # a minimal corpus facade: one hit per row
            hits = [corpus.hit(int(r), 0.0) for r in rows.tolist()]
            return [h.record_id for h in hits], [h.artifact_id for h in hits], [h.surface_kind for h in hits]
        known = [self.rows.get(int(r), (None, None, None)) for r in rows.tolist()]
        return [k[0] for k in known], [k[1] for k in known], [k[2] for k in known]

    def find(self, key: str) -> tuple[np.ndarray, bool]:
        """Rows whose record id is ``key`` (exact), else rows of artifact ``key``; and whether it was a record id."""
        corpus = self.corpus
        if corpus is not None and hasattr(corpus, "record_ids"):
            ids, artifacts = np.asarray(corpus.record_ids), np.asarray(corpus.artifact_ids)
            rows = np.flatnonzero(ids == key)
            if rows.size:
                return rows, True
            return np.flatnonzero(artifacts == key), False
        rows = [r for r, (rid, _, _) in self.rows.items() if rid == key]
        if rows:
            return np.array(rows, dtype=np.int64), True
        return np.array(sorted(r for r, (_, aid, _) in self.rows.items() if aid == key), dtype=np.int64), False


# --------------------------------------------------------------------------
# rendering one value for one original query


def _query_positions(cands: Candidates, query: int) -> np.ndarray:
    """Positions of the candidates of original query ``query``, in batch order."""
    return np.flatnonzero(cands.origin_index == query)


def _candidate_dicts(cands: Candidates, positions: np.ndarray, ident: _Identity) -> list[dict[str, Any]]:
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


def _render(value: Any, query: int, ident: _Identity) -> dict[str, Any]:
    """One stage input or output, for one original query, as JSON data (``"type"`` says what it is)."""
    if isinstance(value, Summary):
        return {"type": value.type, **value.fields}
    if value is INACTIVE:
        return {"type": "inactive"}
    if isinstance(value, Candidates):
        positions = _query_positions(value, query)
        batch = None if value.queries.is_root else {"texts": list(value.queries.texts),
                                                    "origin": value.queries.origin.tolist()}
        return {"type": "candidates", "scale": value.scale.value, "active": value.active,
                "count": int(positions.size), "columns": {n: c.dtype.str for n, c in value.provenance.items()},
                "batch": batch, "candidates": _candidate_dicts(value, positions, ident)}
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
    """The value a stage saw, rebuilt from its per-query renderings (inverse of :func:`_render`)."""
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
        return Summary(str(kind), {k: v for k, v in first.items() if k != "type"})
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


# --------------------------------------------------------------------------
# the trace


class Trace(TraceRecorder):
    """The stage events of a traced run, renderable without the corpus.

    Made by the executor's recorder (``Result.trace``) or by :meth:`load`.
    A loaded trace has ``recipe`` and ``corpus`` None (``recipe_name`` and
    ``corpus_name`` say what they were); its events hold real Candidates
    rebuilt from the file, masks and hit lists as :class:`Summary`.
    """

    def __init__(self, recipe: Any = None, queries: QueryBatch | None = None, params: Mapping[str, Any] | None = None,
                 corpus: Any = None, *, rows: Mapping[int, tuple[str, str, str]] | None = None,
                 header: Mapping[str, Any] | None = None, source: str | None = None) -> None:
        super().__init__(recipe, queries, params, corpus)
        header = dict(header or {})
        self.recipe_name: str | None = getattr(recipe, "name", None) or header.get("recipe")
        self.corpus_name: str | None = getattr(corpus, "name", None) if corpus is not None else header.get("corpus")
        self.n_rows: int | None = getattr(corpus, "n_rows", None) if corpus is not None else header.get("n_rows")
        self.header = header
        self.source = source
        self._ident = _Identity(corpus, rows)
        self._records: list[dict[str, Any]] | None = None

    @classmethod
    def from_recorder(cls, recorder: TraceRecorder) -> "Trace":
        """Wrap the events a run recorded (shares them: nothing is copied or rendered yet)."""
        trace = cls(recorder.recipe, recorder.queries, recorder.params, recorder.corpus)
        trace.extend(recorder)
        return trace

    # -- lookups ---------------------------------------------------------------

    @property
    def stages(self) -> tuple[str, ...]:
        """Stage names in execution order."""
        return tuple(event.name for event in self)

    @property
    def n_queries(self) -> int:
        """Number of original queries of the run."""
        return 0 if self.queries is None else self.queries.n_original

    @property
    def label(self) -> str:
        """How tables name this trace: the file it came from, else the recipe."""
        if self.source:
            return Path(self.source).name
        return self.recipe_name or "trace"

    def event(self, name: str) -> StageEvent:
        """The event of stage ``name`` (NotInTrace, a KeyError, listing the stages otherwise)."""
        for event in self:
            if event.name == name:
                return event
        raise NotInTrace(f"no stage {name!r} in this trace; stages: {', '.join(self.stages) or '(none)'}")

    def stage(self, name: str) -> "StageView":
        """A view of stage ``name``: its ranking per query, its table."""
        return StageView(self, self.event(name))

    def check_query(self, query: int) -> int:
        """``query`` if it indexes an original query of the run (NotInTrace otherwise)."""
        if not isinstance(query, (int, np.integer)) or not 0 <= int(query) < self.n_queries:
            raise NotInTrace(f"query {query!r} is not in this trace: it holds {self.n_queries} "
                             f"quer{'y' if self.n_queries == 1 else 'ies'} (0..{self.n_queries - 1}): "
                             f"{list(self.queries.originals) if self.queries is not None else []}")
        return int(query)

    def identify(self, rows: np.ndarray) -> tuple[list[Any], list[Any], list[Any]]:
        """Record ids, artifact ids and surface kinds of corpus ``rows``."""
        return self._ident(rows)

    def find_rows(self, key: str) -> tuple[np.ndarray, bool]:
        """Rows of record id ``key``, else of artifact ``key``; and whether ``key`` was a record id."""
        return self._ident.find(key)

    # -- JSON Lines ------------------------------------------------------------

    def records(self) -> list[dict[str, Any]]:
        """The header and one dict per (stage, query): exactly what :meth:`dump` writes."""
        if self._records is None:
            self._records = [self._header()] + [self._line(event, q) for event in self
                                                for q in range(self.n_queries)]
        return self._records

    def _header(self) -> dict[str, Any]:
        if self.header:
            return dict(self.header)
        import irflow

        recipe = self.recipe
        return {"type": "header", "format": FORMAT, "format_version": FORMAT_VERSION,
                "recipe": self.recipe_name, "recipe_source": getattr(recipe, "source", None),
                "recipe_dict": jsonable(recipe.to_dict()) if hasattr(recipe, "to_dict") else None,
                "params": jsonable(self.params),
                "queries": list(self.queries.originals) if self.queries is not None else [],
                "corpus": self.corpus_name, "n_rows": self.n_rows,
                "irflow_version": getattr(irflow, "__version__", None), "stages": list(self.stages)}

    def _line(self, event: StageEvent, query: int) -> dict[str, Any]:
        output = _render(event.output, query, self._ident)
        kind = output.pop("type")
        line: dict[str, Any] = {
            "type": "stage", "stage": event.name, "kind": event.kind,
            "query": self.queries.originals[query] if self.queries is not None else None, "query_index": query,
            "status": event.status, "elapsed_ms": _float(float(event.elapsed_ms)),
            "params": jsonable(event.params), "ports": {p: list(s) for p, s in event.ports.items()},
            "output_type": kind, "scale": output.pop("scale", None), "active": output.pop("active", kind != "inactive"),
            "count": output.pop("count", None), "columns": output.pop("columns", {}), "batch": output.pop("batch", None),
            "candidates": output.pop("candidates", []),
        }
        if output:  # what a non-candidate output still has to say (texts, hits, repr, size)
            line["output"] = output
        line["inputs"] = {name: _render(value, query, self._ident) for name, value in event.inputs.items()}
        return line

    def dump(self, path: str | os.PathLike[str]) -> Path:
        """Write the trace as JSON Lines (schema in the module docstring); returns the path.

        Atomic: the lines go to a temporary file in the same folder, renamed
        over ``path`` once complete, so a failed dump leaves the previous
        file as it was.  Any ``str`` is written: a lone surrogate (argv bytes
        that were not UTF-8) is stored as its ``\\uXXXX`` escape and loads
        back as the same string.
        """
        path = Path(path)
        with atomic_writer(path, "trace") as out:
            for record in self.records():
                out.write(_json_line(record))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, max_bytes: int = MAX_TRACE_BYTES) -> "Trace":
        """Read a trace written by :meth:`dump` (TraceError naming the file and line when it cannot).

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
        return cls.from_records(lines, source=name, line_numbers=numbers)

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]], *, source: str = "<records>",
                     line_numbers: Sequence[int] | None = None) -> "Trace":
        """A trace from the dicts :meth:`records` returns (what :meth:`load` parses).

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
        _check_header(header, f"{source}:{numbers[0]}")
        originals = tuple(header.get("queries") or ())
        by_stage: dict[str, list[Mapping[str, Any]]] = {}
        rows: dict[int, tuple[str, str, str]] = {}
        events: list[StageEvent] = []
        where = source
        try:
            for number, line in zip(numbers[1:], records[1:]):
                where = f"{source}:{number}"
                if not isinstance(line, Mapping) or line.get("type") != "stage" or "stage" not in line:
                    raise TraceError(f"{where}: expected a stage line {{\"type\": \"stage\", ...}}")
                _check_stage_line(line, len(originals))
                by_stage.setdefault(line["stage"], []).append(line)
                for candidate in _all_candidates(line):
                    rows[int(candidate["row"])] = (candidate["record_id"], candidate["artifact_id"],
                                                   candidate["surface_kind"])
            for name, lines in by_stage.items():
                where = f"{source}: stage {name!r}"
                lines = sorted(lines, key=lambda line: line["query_index"])
                if [line["query_index"] for line in lines] != list(range(len(originals))):
                    raise TraceError(f"needs one line per query (query_index 0..{len(originals) - 1}), got "
                                     f"{[line['query_index'] for line in lines]}")
                events.append(_event_from_lines(name, lines, originals))
        except TraceError as error:
            raise TraceError(f"{where}: a stage line is malformed: {error}; the file was not written by "
                             "Trace.dump, or was edited") from None
        except (KeyError, TypeError, ValueError, IndexError, OverflowError) as error:
            raise TraceError(f"{where}: a stage line is malformed ({type(error).__name__}: {error}); "
                             "the file was not written by Trace.dump, or was edited") from None
        trace = cls(None, QueryBatch(originals), header.get("params") or {}, None, rows=rows, header=header,
                    source=source)
        trace.extend(events)
        return trace

    # -- rendering ---------------------------------------------------------------

    def table(self, stage: str | None = None, query: int = 0, limit: int = 10) -> str:
        """A readable plain-text table for ``query``: the stage summary and each stage's top candidates.

        With ``stage``, that stage only: its parameters, inputs and top ``limit`` candidates.
        """
        query = self.check_query(query)
        head = (f"trace of recipe {self.recipe_name!r} on corpus {self.corpus_name!r} — query {query}: "
                f"{self.queries.originals[query]!r}")
        if stage is not None:
            return head + "\n\n" + self.stage(stage).table(query, limit)
        parts = [head, "", self.summary_table(query)]
        for event in self:
            view = StageView(self, event)
            if view.has_candidates:
                parts.extend(["", view.table(query, limit, params=False)])
        return "\n".join(parts)

    def summary_table(self, query: int = 0) -> str:
        """One row per stage: stage, kind, status, in -> out counts, scale, elapsed ms."""
        query = self.check_query(query)
        rows = []
        for event in self:
            view = StageView(self, event)
            rows.append([event.name, event.kind, event.status, view.in_counts(query), view.out_count(query),
                         view.scale or None, f"{float(event.elapsed_ms):.2f}"])
        return render_table(["stage", "kind", "status", "in", "out", "scale", "ms"], rows, right=("in", "out", "ms"))

    def diff(self, before: str, after: str, query: int = 0) -> "Diff":
        """What entered, left and moved between stages ``before`` and ``after`` of this trace."""
        return diff(self.stage(before), self.stage(after), query=query)

    def explain(self, record: str, query: int = 0) -> "Explanation":
        """Why record (or artifact) ``record`` ranks where it does, stage by stage, from this trace alone."""
        from irflow.engine.explain import explain_trace

        return explain_trace(self, record, query=query)

    def __repr__(self) -> str:
        where = f", source={self.source!r}" if self.source else ""
        return (f"Trace(recipe={self.recipe_name!r}, corpus={self.corpus_name!r}, queries={self.n_queries}, "
                f"stages={list(self.stages)}{where})")


def _event_from_lines(name: str, lines: Sequence[Mapping[str, Any]], originals: tuple[str, ...]) -> StageEvent:
    """One stage's event rebuilt from its lines (one per query, in query order)."""
    first = lines[0]
    parts = [{"type": line["output_type"], "scale": line.get("scale"), "active": line.get("active", True),
              "count": line.get("count"), "columns": line.get("columns", {}), "batch": line.get("batch"),
              "candidates": line.get("candidates", []), **line.get("output", {})} for line in lines]
    if parts[0]["type"] != "candidates":
        # a mask, queries or hits line: keep what it said (texts, batch, size...), not the empty
        # candidate fields every line carries
        parts = [{k: v for k, v in part.items() if v is not None and k not in ("scale", "active", "columns",
                                                                                "candidates")} for part in parts]
    inputs = {up: _restore([line["inputs"][up] for line in lines], originals) for up in first.get("inputs", {})}
    ports = {p: tuple(s) for p, s in (first.get("ports") or {}).items()}
    return StageEvent(name, first["kind"], dict(first.get("params") or {}), inputs, ports,
                      _restore(parts, originals), first.get("elapsed_ms") or 0.0, first.get("status", "ran"))


def _json_line(record: Mapping[str, Any]) -> bytes:
    """One trace line as UTF-8 bytes; any ``str`` welcome."""
    text = json.dumps(record, ensure_ascii=False, allow_nan=False)
    if _SURROGATE.search(text) is not None:
        # a lone surrogate cannot be encoded as UTF-8; in JSON its \\uXXXX escape is the same string
        # (surrogates only occur inside JSON strings: every other character json.dumps writes is ASCII)
        text = _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
    return (text + "\n").encode("utf-8")


# --------------------------------------------------------------------------
# checking a loaded trace's fields before using them (each raises TraceError naming the field)


def _is_int(value: Any, low: int = 0, high: int = _MAX_INDEX) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value < high


def _need(ok: bool, field: str, value: Any, expected: str) -> None:
    if not ok:
        raise TraceError(f"field {field!r} is {shown(value)}, expected {expected}")


def _is_text(value: Any, optional: bool = True) -> bool:
    return isinstance(value, str) or (optional and value is None)


def _is_score(value: Any) -> bool:
    if value is None or isinstance(value, bool):
        return value is None
    if isinstance(value, str):
        return value in ("inf", "-inf")
    return isinstance(value, (int, float)) and is_finite(value)


def _check_header(header: Mapping[str, Any], where: str) -> None:
    try:
        check_nesting(header, "the header", error=TraceError)  # kept whole (recipe_dict, params): bounded here
        queries = header.get("queries")
        _need(queries is None or (isinstance(queries, list) and all(isinstance(q, str) for q in queries)),
              "queries", queries, "a list of query strings")
        _need(header.get("params") is None or isinstance(header.get("params"), Mapping), "params",
              header.get("params"), "an object")
        for key in ("recipe", "corpus", "recipe_source"):
            _need(_is_text(header.get(key)), key, header.get(key), "a string or null")
        _need(header.get("n_rows") is None or _is_int(header.get("n_rows")), "n_rows", header.get("n_rows"),
              "a row count or null")
    except TraceError as error:
        raise TraceError(f"{where}: the header is malformed: {error}; the file was not written by Trace.dump, "
                         "or was edited") from None


def _check_batch(batch: Any, field: str, n_queries: int) -> int:
    """Check a reformulated batch ``{"texts", "origin"}``; its number of texts (0 when absent)."""
    if batch is None:
        return 0
    _need(isinstance(batch, Mapping), field, batch, "an object {texts, origin} or null")
    texts, origin = batch.get("texts"), batch.get("origin")
    _need(isinstance(texts, list) and all(isinstance(t, str) for t in texts), f"{field}.texts", texts,
          "a list of strings")
    _need(isinstance(origin, list) and len(origin) == len(texts) and all(_is_int(o, 0, n_queries) for o in origin),
          f"{field}.origin", origin, f"one original query index (0..{n_queries - 1}) per text")
    return len(texts)


def _check_candidates(part: Mapping[str, Any], field: str, n_queries: int) -> None:
    """Check the candidate fields of one rendered value (a stage's output or one of its inputs)."""
    scale = part.get("scale")
    _need(scale is None or scale in _SCALES, f"{field}scale", scale, f"null or a scale: {', '.join(_SCALES)}")
    _need(isinstance(part.get("active", True), bool), f"{field}active", part.get("active"), "true or false")
    _need(part.get("count") is None or _is_int(part.get("count")), f"{field}count", part.get("count"),
          "a count or null")
    columns = part.get("columns", {})
    _need(isinstance(columns, Mapping), f"{field}columns", columns, "an object {column: dtype}")
    for name, dtype in columns.items():
        _column_dtype(dtype, name)
    n_texts = _check_batch(part.get("batch"), f"{field}batch", n_queries)
    candidates = part.get("candidates", [])
    _need(isinstance(candidates, list), f"{field}candidates", candidates, "a list of candidate objects")
    # one pass per field over all candidates (a trace holds thousands): cheap generator checks, and the
    # index of the first bad entry only when one is bad
    if not all(type(c) is dict or isinstance(c, Mapping) for c in candidates):
        _first_bad(candidates, lambda c: isinstance(c, Mapping), f"{field}candidates", "",
                   "an object {record_id, artifact_id, surface_kind, row, score, rank}")
    for key in ("record_id", "artifact_id", "surface_kind"):
        values = [c.get(key) for c in candidates]
        if not all(type(v) is str or v is None for v in values):
            _first_bad(values, _is_text, f"{field}candidates", f".{key}", "a string or null")
    for key, what in (("row", "a corpus row (an integer >= 0)"), ("rank", "a rank (an integer >= 0)")):
        values = [c.get(key) for c in candidates]
        if not all(type(v) is int and 0 <= v < _MAX_INDEX for v in values):
            _first_bad(values, _is_int, f"{field}candidates", f".{key}", what)
    values = [c.get("score") for c in candidates]
    if not all(type(v) is float and v - v == 0.0 for v in values):  # finite floats: the common case, fast
        _first_bad(values, _is_score, f"{field}candidates", ".score", 'a number, null, "inf" or "-inf"')
    values = [c.get("provenance", {}) for c in candidates]
    if not all(type(v) is dict or isinstance(v, Mapping) for v in values):
        _first_bad(values, lambda v: isinstance(v, Mapping), f"{field}candidates", ".provenance",
                   "an object {column: value}")
    objects = [name for name, dtype in columns.items() if _column_dtype(dtype, name).kind == "O"]
    if objects:  # an object column keeps its values as they are: bound their nesting
        check_nesting([[v.get(name) for name in objects] for v in values], f"{field}candidates[*].provenance",
                      error=TraceError)
    subqueries = [c["subquery"] for c in candidates if "subquery" in c]
    if subqueries and not all(_is_int(v, 0, max(n_texts, 1)) for v in subqueries):
        _first_bad([c.get("subquery", 0) for c in candidates], lambda v: _is_int(v, 0, max(n_texts, 1)),
                   f"{field}candidates", ".subquery", "an index into the batch's texts")


def _first_bad(values: Sequence[Any], ok: Any, field: str, key: str, expected: str) -> None:
    """Raise the TraceError naming the first of ``values`` that is not ``ok``."""
    for i, value in enumerate(values):
        _need(ok(value), f"{field}[{i}]{key}", value, expected)


def _check_stage_line(line: Mapping[str, Any], n_queries: int) -> None:
    """Check every field of one stage line that loading reads (TraceError naming the field)."""
    _need(isinstance(line["stage"], str), "stage", line["stage"], "a stage name")
    _need(isinstance(line.get("kind"), str), "kind", line.get("kind"), "a stage kind")
    _need(_is_int(line.get("query_index"), 0, max(n_queries, 0)), "query_index", line.get("query_index"),
          f"a query index 0..{n_queries - 1} (the header lists {n_queries} queries)")
    _need(isinstance(line.get("status", "ran"), str), "status", line.get("status"), "a status name")
    _need(_is_score(line.get("elapsed_ms")), "elapsed_ms", line.get("elapsed_ms"), "a number of milliseconds")
    _need(line.get("params") is None or isinstance(line.get("params"), Mapping), "params", line.get("params"),
          "an object")
    ports = line.get("ports") or {}
    _need(isinstance(ports, Mapping) and all(isinstance(v, list) and all(isinstance(s, str) for s in v)
                                             for v in ports.values()),
          "ports", ports, "an object {port: [upstream names]}")
    _need(isinstance(line.get("output_type"), str), "output_type", line.get("output_type"), "a type name")
    _need(isinstance(line.get("output", {}), Mapping), "output", line.get("output"), "an object")
    # the free-form fields a loaded trace keeps (and renders recursively): nesting bounded
    check_nesting(line.get("params"), "params", error=TraceError)
    check_nesting(line.get("output"), "output", error=TraceError)
    _check_candidates(line, "", n_queries)
    inputs = line.get("inputs", {})
    _need(isinstance(inputs, Mapping), "inputs", inputs, "an object {upstream: value}")
    for name, part in inputs.items():
        _need(isinstance(part, Mapping) and isinstance(part.get("type"), str), f"inputs.{name}", part,
              'an object with a "type"')
        if part["type"] == "candidates":
            _check_candidates(part, f"inputs.{name}.", n_queries)
        else:  # kept as a Summary of these fields
            check_nesting(part, f"inputs.{name}", error=TraceError)
            if part["type"] == "queries":
                _check_batch(part.get("batch"), f"inputs.{name}.batch", n_queries)


def _all_candidates(line: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield from line.get("candidates", ())
    for value in (line.get("inputs") or {}).values():
        if isinstance(value, Mapping):
            yield from value.get("candidates", ())


# --------------------------------------------------------------------------
# one stage


def _own_columns(name: str, columns: Iterable[str]) -> list[str]:
    """The provenance columns stage ``name`` wrote, minus the copies of its score and rank."""
    prefix = f"{name}."
    return [c for c in columns if c.startswith(prefix) and c not in (f"{name}.score", f"{name}.rank")]


class StageView:
    """One stage of a trace: its output ranking per query, counts and table."""

    def __init__(self, trace: Trace, event: StageEvent) -> None:
        self.trace = trace
        self.event = event

    @property
    def name(self) -> str:
        return self.event.name

    @property
    def label(self) -> str:
        """``<trace>:<stage>``, how a diff names its sides."""
        return f"{self.trace.label}:{self.name}"

    @property
    def output(self) -> Any:
        return self.event.output

    @property
    def has_candidates(self) -> bool:
        return isinstance(self.event.output, Candidates)

    @property
    def scale(self) -> str | None:
        output = self.event.output
        return output.scale.value if isinstance(output, Candidates) and output.active else None

    def ranking(self, query: int = 0) -> list[dict[str, Any]]:
        """The stage's candidates for original ``query``, best first, as dumped (record id, scores, provenance)."""
        query = self.trace.check_query(query)
        output = self.event.output
        if not isinstance(output, Candidates):
            raise TraceError(f"stage {self.name!r} ({self.event.kind}) outputs "
                             f"{_render(output, query, self.trace._ident)['type']}, not candidates; "
                             f"stages with candidates: {', '.join(_candidate_stages(self.trace)) or '(none)'}")
        return _candidate_dicts(output, _query_positions(output, query), self.trace._ident)

    def out_count(self, query: int) -> str:
        value = _render_count(self.event.output, query)
        return "off" if self.event.status == "inactive" else value

    def in_counts(self, query: int) -> str:
        counts = [_render_count(value, query) for name, value in self.event.inputs.items()
                  if not isinstance(value, QueryBatch) and not (isinstance(value, Summary) and value.type == "queries")]
        return " + ".join(counts) if counts else "-"

    def table(self, query: int = 0, limit: int = 10, *, params: bool = True) -> str:
        """This stage's heading (kind, scale, counts, ms, parameters) and top ``limit`` candidates for ``query``."""
        event = self.event
        query = self.trace.check_query(query)
        head = (f"== {event.name} ({event.kind}) · {event.status} · scale {self.scale or '-'} · "
                f"in {self.in_counts(query)} -> out {self.out_count(query)} · {float(event.elapsed_ms):.2f} ms")
        lines = [head]
        if params and event.params:
            lines.append("params: " + ", ".join(f"{k}={json.dumps(jsonable(v), ensure_ascii=False)}"
                                                for k, v in event.params.items()))
        if not self.has_candidates:
            return "\n".join(lines)
        ranking = self.ranking(query)
        if not ranking:
            lines.append("(no candidates)")
            return "\n".join(lines)
        extra = _own_columns(event.name, self.event.output.provenance)
        headers = ["rank", "score", "artifact", "surface", "record_id"] + [c[len(event.name) + 1:] for c in extra]
        rows = [[c["rank"], c["score"], c["artifact_id"], c["surface_kind"], c["record_id"]]
                + [c["provenance"][col] for col in extra] for c in ranking[:limit]]
        lines.append(render_table(headers, rows, max_width=32))
        if len(ranking) > limit:
            lines.append(f"... {len(ranking) - limit} more")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"StageView({self.label!r}, kind={self.event.kind!r}, status={self.event.status!r})"


def _candidate_stages(trace: Trace) -> list[str]:
    return [e.name for e in trace if isinstance(e.output, Candidates)]


def _render_count(value: Any, query: int) -> str:
    if isinstance(value, Candidates):
        return "off" if not value.active else str(int(np.count_nonzero(value.origin_index == query)))
    if isinstance(value, np.ndarray) and value.dtype == np.bool_:
        return f"{int(np.count_nonzero(value))} rows"
    if isinstance(value, Summary):
        return f"{value.count} rows" if value.type == "mask" else str(value.count if value.count is not None else "?")
    if value is INACTIVE:
        return "off"
    if isinstance(value, QueryBatch):
        return f"{int(np.count_nonzero(value.origin == query))} texts"
    if isinstance(value, list) and query < len(value):
        return str(len(value[query]))
    return "?"


# --------------------------------------------------------------------------
# diff


@attrs.frozen
class Change:
    """One record's place before and after (None on the side where it is absent)."""

    record_id: str | None
    artifact_id: str | None
    surface_kind: str | None
    old_rank: int | None
    new_rank: int | None
    old_score: float | None
    new_score: float | None

    @property
    def moved_by(self) -> int | None:
        """Positive when the record moved up (toward rank 1); None when absent on a side."""
        if self.old_rank is None or self.new_rank is None:
            return None
        return self.old_rank - self.new_rank

    def to_dict(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "moved_by": self.moved_by}


@attrs.frozen
class Diff:
    """What entered, left, moved and was rescored between two rankings of one query (by record id).

    ``entered`` is ordered by new rank, ``left`` by old rank; ``moved``
    (another rank), ``rescored`` (same rank, another score) and
    ``unchanged`` (same rank and score) by new rank.  ``before_scale`` and
    ``after_scale`` name the score scales (``rrf``, ``blend``, ...): when
    they differ, the scores are different quantities and only ranks compare.
    """

    before: str
    after: str
    query: str | None
    query_index: int
    entered: tuple[Change, ...]
    left: tuple[Change, ...]
    moved: tuple[Change, ...]
    unchanged: tuple[Change, ...]
    rescored: tuple[Change, ...] = ()
    before_scale: str | None = None
    after_scale: str | None = None

    @property
    def same_scale(self) -> bool:
        return self.before_scale == self.after_scale

    def to_dict(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after, "query": self.query, "query_index": self.query_index,
                "before_scale": self.before_scale, "after_scale": self.after_scale,
                "entered": [c.to_dict() for c in self.entered], "left": [c.to_dict() for c in self.left],
                "moved": [c.to_dict() for c in self.moved], "rescored": [c.to_dict() for c in self.rescored],
                "unchanged": [c.to_dict() for c in self.unchanged]}

    def table(self, limit: int | None = None) -> str:
        """The diff as plain text: count and scale lines, then one table per non-empty section."""
        lines = [f"diff {self.before} -> {self.after} — query {self.query_index}: {self.query!r}",
                 f"{len(self.entered)} entered, {len(self.left)} left, {len(self.moved)} moved, "
                 f"{len(self.rescored)} rescored (same rank, new score), {len(self.unchanged)} unchanged"]
        if self.same_scale:
            lines.append(f"scale: {self.before_scale or '-'} on both sides")
        else:
            lines.append(f"scale: {self.before_scale or '-'} -> {self.after_scale or '-'} (different scales: the "
                         "scores are different quantities; compare ranks, not score values)")
        sections = (("entered", self.entered), ("left", self.left), ("moved", self.moved),
                    ("rescored", self.rescored))
        delta = self.same_scale
        for title, changes in sections:
            if not changes:
                continue
            shown = changes if limit is None else changes[:limit]
            both = title in ("moved", "rescored")
            rows = [[c.old_rank, c.new_rank, c.moved_by if title == "moved" else None, c.old_score, c.new_score]
                    + ([_score_change(c) if both else None] if delta else [])
                    + [c.artifact_id, c.surface_kind, c.record_id] for c in shown]
            headers = (["old rank", "new rank", "moved", "old score", "new score"]
                       + (["score change"] if delta else []) + ["artifact", "surface", "record_id"])
            lines.extend(["", f"{title}:", render_table(headers, rows, max_width=32, indent="  ")])
            if len(shown) < len(changes):
                lines.append(f"  ... {len(changes) - len(shown)} more")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _score_change(change: Change) -> float | None:
    if change.old_score is None or change.new_score is None:
        return None
    return float(change.new_score) - float(change.old_score)


def _by_record(ranking: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    # a record listed twice (several sub-queries of a reformulated query) counts once, at its best rank
    out: dict[Any, dict[str, Any]] = {}
    for candidate in ranking:
        kept = out.get(candidate["record_id"])
        if kept is None or candidate["rank"] < kept["rank"]:
            out[candidate["record_id"]] = candidate
    return out


def diff(a: "StageView | Trace", b: "StageView | Trace", *, stage: str | None = None, query: int = 0) -> Diff:
    """Compare two rankings of one query: two stages of a trace, or one stage of two traces::

        diff(trace.stage("dense"), trace.stage("fuse"))
        diff(old_trace, new_trace, stage="collapse", query=1)
    """
    views = []
    for side in (a, b):
        if isinstance(side, Trace):
            if stage is None:
                raise TraceError("diff of two traces needs stage=NAME (the stage to compare in both); to compare "
                                 "two stages of one trace, pass trace.stage(A) and trace.stage(B)")
            side = side.stage(stage)
        if not isinstance(side, StageView):
            raise TraceError(f"diff compares StageView or Trace objects, got {type(side).__name__}")
        views.append(side)
    before, after = views
    old = _by_record(before.ranking(query))
    new = _by_record(after.ranking(query))
    if before.trace.queries is not None and after.trace.queries is not None \
            and before.trace.queries.originals[query] != after.trace.queries.originals[query]:
        raise TraceError(f"query {query} differs between the two traces ({before.trace.queries.originals[query]!r} "
                         f"vs {after.trace.queries.originals[query]!r}); compare the same query")

    def change(o: dict[str, Any] | None, n: dict[str, Any] | None) -> Change:
        src: dict[str, Any] = n if n is not None else o  # type: ignore[assignment]  (one side is present)
        return Change(src["record_id"], src["artifact_id"], src["surface_kind"],
                      None if o is None else o["rank"], None if n is None else n["rank"],
                      None if o is None else o["score"], None if n is None else n["score"])

    entered = [change(None, n) for rid, n in new.items() if rid not in old]
    left = [change(o, None) for rid, o in old.items() if rid not in new]
    both = [change(old[rid], n) for rid, n in new.items() if rid in old]
    moved = [c for c in both if c.old_rank != c.new_rank]
    rescored = [c for c in both if c.old_rank == c.new_rank and c.old_score != c.new_score]
    unchanged = [c for c in both if c.old_rank == c.new_rank and c.old_score == c.new_score]

    def by_new(changes: list[Change]) -> tuple[Change, ...]:
        return tuple(sorted(changes, key=lambda c: c.new_rank))

    return Diff(before.label, after.label, before.trace.queries.originals[query] if before.trace.queries else None,
                query, by_new(entered), tuple(sorted(left, key=lambda c: c.old_rank)), by_new(moved),
                by_new(unchanged), by_new(rescored), before.scale, after.scale)
