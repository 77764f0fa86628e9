"""Checking a loaded trace's lines before anything is built from them (each check raises TraceError naming the field).

A trace file may come from anyone, so every field loading reads is checked
for its type and range, and the lines of one stage are checked against each
other: the cost of loading and of rendering a loaded trace back is bounded by
a small multiple of the file's size, whatever the file says.  A loaded trace
re-renders each line from what it rebuilt, so every value it renders must be
present in the line it renders to:

- every candidate's ``provenance`` holds every column its line declares in
  ``columns`` (a declared column is never filled in for a candidate that
  lacks it: 5,000 declared columns over 2,000 empty provenances would be ten
  million cells from a 300 KB line);
- the fields a stage repeats on each of its lines (kind, status, params,
  ports, output type, scale, columns, batch; the same of each input) are
  equal on every line, and a line's ``query`` is the header's query at its
  ``query_index`` (the first line's values are kept and rendered on every
  line);
- one corpus row is one record: every candidate naming a row gives it the
  same record id, artifact id and surface kind (the identity is rendered
  with every candidate of that row);
- the header's ``excerpts`` (a row's text, cut to :data:`EXCERPT_CHARS`, kept
  once per row and shown beside each of its candidates) name rows that are
  among the candidates, and none is longer than :data:`EXCERPT_CHARS`: what
  is shown per candidate stays a small multiple of what the file says per
  candidate.

``Trace.dump`` writes files that hold all of this.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from irflow.engine.batches import Scale
from irflow.engine.validators import is_finite
from irflow.errors import TraceError
from irflow.util.fileio import check_nesting, shown

__all__ = ["MAX_STRING_ITEMSIZE", "EXCERPT_CHARS", "excerpt", "column_dtype", "check_header", "check_stage_line",
           "check_same_as_first", "check_identity", "check_excerpts", "all_candidates"]

#: The widest fixed-width string provenance column a trace file may declare (``"<U1024"``, ``"|S1024"``).
MAX_STRING_ITEMSIZE = 1024
#: The longest text excerpt a trace keeps of a record (its text with runs of white space as one space, cut
#: with an ellipsis): what a table shows beside a record id.
EXCERPT_CHARS = 160
#: Rows, ranks and query indexes read from a trace are below this (numpy int64 holds them).
_MAX_INDEX = 1 << 62

# the dtypes Trace.dump writes for provenance columns (numpy's dtype.str): bool, ints, floats, object,
# fixed-width strings; anything else in a file (void, datetime, structured, "<U5000000"...) is refused
_DTYPE = re.compile(r"^[<>|=]?(?:b1|[iu][1248]|f[248]|O|[US]([1-9][0-9]{0,9}))\Z")
_SCALES = tuple(scale.value for scale in Scale)


def column_dtype(dtype: Any, name: str) -> np.dtype:
    match = _DTYPE.match(dtype) if isinstance(dtype, str) else None
    if match is None:
        raise TraceError(f"column {name!r} has dtype {dtype!r}, not one a trace holds (bool, int, uint, float, "
                         f"object, or a string of at most {MAX_STRING_ITEMSIZE} characters)")
    if match.group(1) is not None and int(match.group(1)) > MAX_STRING_ITEMSIZE:
        raise TraceError(f"column {name!r} has dtype {dtype!r}: strings of {match.group(1)} characters, over the "
                         f"limit of {MAX_STRING_ITEMSIZE}")
    checked: np.dtype[Any] = np.dtype(dtype)
    return checked


def excerpt(text: Any) -> str | None:
    """The first :data:`EXCERPT_CHARS` characters of a record's text, white space runs as one space (None: no text).

    >>> excerpt("Unpack  any\\narchive."), len(excerpt("x" * 500))
    ('Unpack any archive.', 160)
    """
    if not isinstance(text, str):
        return None
    # split() on the first few hundred characters only: a long text costs no more than a short one
    short = " ".join(text[: EXCERPT_CHARS * 4].split())
    if len(short) <= EXCERPT_CHARS and len(text) <= EXCERPT_CHARS * 4:
        return short
    return short[: EXCERPT_CHARS - 1].rstrip() + "…"


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


def check_header(header: Mapping[str, Any], where: str) -> None:
    try:
        check_nesting(header, "the header", error=TraceError)  # kept whole (recipe_dict, params): bounded here
        queries = header.get("queries")
        _need(queries is None or (isinstance(queries, list) and all(isinstance(q, str) for q in queries)),
              "queries", queries, "a list of query strings")
        _need(header.get("params") is None or isinstance(header.get("params"), Mapping), "params",
              header.get("params"), "an object")
        for key in ("recipe", "corpus", "recipe_source", "embedder", "analyzer"):
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
        column_dtype(dtype, name)
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
    if columns and not all(v.keys() >= columns.keys() for v in values):  # sizes compared first: cheap
        _lacking(values, columns, field)
    objects = [name for name, dtype in columns.items() if column_dtype(dtype, name).kind == "O"]
    if objects:  # an object column keeps its values as they are: bound their nesting
        check_nesting([[v.get(name) for name in objects] for v in values], f"{field}candidates[*].provenance",
                      error=TraceError)
    subqueries = [c["subquery"] for c in candidates if "subquery" in c]
    if subqueries and not all(_is_int(v, 0, max(n_texts, 1)) for v in subqueries):
        _first_bad([c.get("subquery", 0) for c in candidates], lambda v: _is_int(v, 0, max(n_texts, 1)),
                   f"{field}candidates", ".subquery", "an index into the batch's texts")


def _lacking(provenances: Sequence[Mapping[str, Any]], columns: Mapping[str, Any], field: str) -> None:
    """Raise the TraceError naming the first candidate whose provenance lacks a declared column."""
    for i, provenance in enumerate(provenances):
        missing = [name for name in columns if name not in provenance]
        if missing:
            listed = ", ".join(repr(name) for name in missing[:3]) + (", ..." if len(missing) > 3 else "")
            raise TraceError(f"field '{field}candidates[{i}].provenance' lacks {len(missing)} of the "
                             f"{len(columns)} columns declared in '{field}columns' ({listed}); every candidate "
                             "holds a value (null when absent) for every declared column")


def _first_bad(values: Sequence[Any], ok: Any, field: str, key: str, expected: str) -> None:
    """Raise the TraceError naming the first of ``values`` that is not ``ok``."""
    for i, value in enumerate(values):
        _need(ok(value), f"{field}[{i}]{key}", value, expected)


def check_stage_line(line: Mapping[str, Any], n_queries: int) -> None:
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


def all_candidates(line: Mapping[str, Any]) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    """Every candidate of a stage line (its output's, then its inputs'), with the field that holds it and its index."""
    for i, candidate in enumerate(line.get("candidates", ())):
        yield "candidates", i, candidate
    for name, value in (line.get("inputs") or {}).items():
        if isinstance(value, Mapping):
            for i, candidate in enumerate(value.get("candidates", ())):
                yield f"inputs.{name}.candidates", i, candidate


def check_identity(line: Mapping[str, Any], rows: dict[int, tuple[Any, Any, Any]]) -> None:
    """Record in ``rows`` the identity of every candidate row of ``line``; TraceError when it contradicts one seen.

    A loaded trace names a row's candidates by the one identity it keeps for the row: a file
    giving one row two identities would be rendered with the wrong (or a much longer) one.
    """
    for field, i, candidate in all_candidates(line):
        identity = (candidate.get("record_id"), candidate.get("artifact_id"), candidate.get("surface_kind"))
        known = rows.setdefault(candidate["row"], identity)
        if known != identity:
            raise TraceError(f"field '{field}[{i}]' gives row {candidate['row']} the record, artifact and surface "
                             f"{shown(identity)}, but an earlier candidate gave it {shown(known)}; a row is one "
                             "record")


def check_excerpts(value: Any, rows: Mapping[int, Any]) -> dict[int, str]:
    """The header's ``excerpts`` (``{"<row>": text}``) as ``{row: text}``; TraceError naming the entry at fault.

    Each key is a row among the trace's candidates (``rows``), each text at
    most :data:`EXCERPT_CHARS` characters: a row's excerpt is shown beside each
    of its candidates, so it may not be longer than what a candidate costs
    the file.  A file without excerpts (written before they existed) gives ``{}``.
    """
    if value is None:
        return {}
    _need(isinstance(value, Mapping), "excerpts", value, 'an object {"<row>": text}')
    out: dict[int, str] = {}
    for key, text in value.items():
        row = int(key) if isinstance(key, str) and key.isascii() and key.isdigit() and len(key) < 19 else -1
        _need(row in rows, f"excerpts[{shown(key)}]", key, "the row of a candidate in this trace")
        _need(isinstance(text, str) and len(text) <= EXCERPT_CHARS, f"excerpts[{key}]", text,
              f"a text of at most {EXCERPT_CHARS} characters")
        out[row] = text
    return out


#: What each line of a stage repeats (Trace.dump writes the stage's value on each): a loaded trace keeps
#: the first line's and renders it on every line.
_STAGE_FIELDS = ("kind", "status", "params", "ports", "output_type", "scale", "active", "columns", "batch")
#: The same for each of a stage's inputs.
_INPUT_FIELDS = ("type", "scale", "active", "columns", "batch")


def check_same_as_first(line: Mapping[str, Any], first: Mapping[str, Any], first_number: int,
                        originals: Sequence[str]) -> None:
    """Check that ``line`` names the header's query at its index and repeats what its stage's first line says.

    Else a small file could have a big value (params, a batch, a column list) rendered once per query.
    """
    query_index = line["query_index"]
    _need(line.get("query") == originals[query_index], "query", line.get("query"),
          f"the header's query {query_index}, {shown(originals[query_index])}")
    if line is first:
        return
    for field in _STAGE_FIELDS:
        _same(line.get(field), first.get(field), field, first_number)
    inputs, first_inputs = line.get("inputs", {}), first.get("inputs", {})
    _same(list(inputs), list(first_inputs), "inputs", first_number)
    for name, part in first_inputs.items():
        for field in _INPUT_FIELDS:
            _same(inputs[name].get(field), part.get(field), f"inputs.{name}.{field}", first_number)


def _same(value: Any, first: Any, field: str, first_number: int) -> None:
    if value != first:
        raise TraceError(f"field {field!r} is {shown(value)}, but the stage's first line (line {first_number}) "
                         f"says {shown(first)}; every line of a stage repeats it")
