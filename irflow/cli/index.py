"""Reading the input of ``irflow index`` and ``irflow add``: one record per line, irflow records or BEIR documents.

Two line formats, one per file (the first JSON object decides):

- an irflow record: ``{"artifact_id": "unbox", "surface_kind": "description",
  "text": "Unpack any archive.", "metadata": {"license": "MIT"}}`` — required
  ``artifact_id``, ``surface_kind``, ``text``; optional ``metadata`` (an
  object, what filters see), ``surface_index``, ``id``, ``vector``;
- a BEIR document (the ``corpus.jsonl`` that ``irflow eval`` reads):
  ``{"_id": "d1", "title": "...", "text": "...", "metadata": {...}}`` — the
  ``_id`` becomes the artifact id and title + text become records exactly as
  evaluation corpora are built (:func:`irflow.evaluation.datasets.document_records`).

The file is read line by line (never whole into memory), with a progress bar
over its bytes when asked.  Every bad line is collected with its number and a
plain reason — never a Python or attrs message — so a large file is fixed in
one pass; the command then refuses the file, or skips those lines
(``--skip-bad``) and says how many.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from irflow.evaluation.datasets import DatasetError, document_records, parse_document
from irflow.errors import InputError, RecordError
from irflow.util.fileio import loads_json, open_regular, read_lines
from irflow.util.progress import bar
from irflow.store.records import Record
from irflow.engine.validators import closest
from irflow.store.record_store import prepare_records
from irflow.store.recordcheck import checked_record

__all__ = ["RECORD_FORMAT", "BadLine", "RecordFile", "read_record_file", "bad_lines_report", "skipped_report"]

#: Keys of an irflow record line, required first.
RECORD_KEYS: tuple[str, ...] = ("artifact_id", "surface_kind", "text", "metadata", "surface_index", "id", "vector")
REQUIRED_KEYS: tuple[str, ...] = ("artifact_id", "surface_kind", "text")
#: Keys of a BEIR document line.
BEIR_KEYS: tuple[str, ...] = ("_id", "title", "text", "metadata")

#: What a line looks like, for --help and error messages.
RECORD_FORMAT = (
    'One JSON object per line. An irflow record: {"artifact_id": "unbox", "surface_kind": "description", '
    '"text": "Unpack any archive.", "metadata": {"license": "MIT"}} (artifact_id, surface_kind and text '
    "required; metadata, surface_index, id and vector optional). Or a BEIR document, as in a BEIR "
    'corpus.jsonl: {"_id": "d1", "title": "A title", "text": "The body."} (_id becomes the artifact id; '
    "title and text become its records, as irflow eval builds them)."
)

#: Bad lines shown with their reason before the rest are listed by number only.
DETAILED = 50


@attrs.frozen
class BadLine:
    """One refused line: its number, the kind of problem (for counts) and a plain reason."""

    number: int
    kind: str
    reason: str


@attrs.frozen
class RecordFile:
    """What a record file held: its format, the good records, the bad lines and the lines read."""

    path: Path
    format: str  # "records" or "beir"
    records: list[Record] = attrs.field(repr=False)
    bad: tuple[BadLine, ...]
    lines: int  # non-blank lines


def _type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _and(names: list[str]) -> str:
    quoted = [f"'{n}'" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _record_problems(obj: Mapping[str, Any]) -> list[str]:
    """What is wrong with one irflow record object, in plain words ([] when it is fine)."""
    problems = []
    unknown = [k for k in obj if k not in RECORD_KEYS]
    for key in unknown:
        match = closest(str(key), RECORD_KEYS)
        problems.append(f"unknown key '{key}'" + (f" (did you mean '{match}'?)" if match else ""))
    missing = [k for k in REQUIRED_KEYS if k not in obj]
    if missing:
        problems.append(f"missing {_and(missing)}")
    for key in ("artifact_id", "surface_kind"):
        value = obj.get(key)
        if key in obj and (not isinstance(value, str) or not value):
            problems.append(f"'{key}' must be a non-empty string, got {_shown(value)}")
    if "text" in obj and not isinstance(obj["text"], str):
        problems.append(f"'text' must be a string, got {_type(obj['text'])}")
    if obj.get("metadata") is not None and not isinstance(obj["metadata"], dict):
        problems.append(f"'metadata' must be an object ({{\"key\": value, ...}}), got {_type(obj['metadata'])}")
    index = obj.get("surface_index")
    if index is not None and (isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 2**63):
        # beyond int64 it cannot be stored: it would end the build in an OverflowError
        problems.append(f"'surface_index' must be an integer from 0 to 2**63 - 1, got {_shown(index)}")
    if obj.get("id") is not None and (not isinstance(obj["id"], str) or not obj["id"]):
        problems.append(f"'id' must be a non-empty string, got {_shown(obj['id'])}")
    vector = obj.get("vector")
    if vector is not None and not (isinstance(vector, list) and vector and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in vector)):
        problems.append("'vector' must be a non-empty list of finite numbers")
    return problems


def _record(obj: Mapping[str, Any]) -> tuple[Record | None, str, str]:
    problems = _record_problems(obj)
    if problems:
        kind = "keys" if any(p.startswith(("unknown key", "missing")) for p in problems) else "value"
        hint = ""
        if any(p.startswith("missing") for p in problems):
            hint = "; a record needs artifact_id, surface_kind and text"
            if "id" in obj and "artifact_id" not in obj:
                hint += " ('id' is the record's own optional id; a BEIR document uses '_id')"
        return None, kind, "; ".join(problems) + hint
    try:
        return Record(**dict(obj)), "", ""
    except (TypeError, ValueError) as error:  # pragma: no cover - the checks above cover Record's validators
        return None, "value", str(error)


def _document(obj: Mapping[str, Any], title_mode: str) -> tuple[list[Record] | None, str, str]:
    unknown = [k for k in obj if k not in BEIR_KEYS]
    if unknown:
        hints = [f"'{k}'" + (f" (did you mean '{m}'?)" if (m := closest(str(k), BEIR_KEYS)) else "") for k in unknown]
        return None, "keys", f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; a BEIR document " \
                             f"has the keys {', '.join(BEIR_KEYS)}"
    try:
        return document_records(parse_document(obj), title_mode), "", ""
    except DatasetError as error:
        return None, "value", str(error)


class _Lines:
    """Parses the lines of one records file: its format (decided by the first line), BEIR documents seen."""

    def __init__(self, title_mode: str) -> None:
        self.title_mode = title_mode
        self.fmt: str | None = None
        self.first_line = 0
        self.doc_line: dict[str, int] = {}

    def parse(self, number: int, line: str) -> list[Record] | BadLine:
        """The records of one non-blank line, or what is wrong with it."""
        try:
            obj = loads_json(line, f"line {number}")  # bounded nesting and digits
        except json.JSONDecodeError as error:
            return BadLine(number, "json", f"not JSON ({error.msg} at column {error.colno})")
        except InputError as error:
            return BadLine(number, "json", str(error).removeprefix(f"line {number}: "))
        if not isinstance(obj, dict):
            return BadLine(number, "shape", f"{_type(obj)}, not an object; each line must be one JSON "
                                            "object (a record or a BEIR document)")
        this = "beir" if "_id" in obj else "records"
        if self.fmt is None:
            self.fmt, self.first_line = this, number
        elif this != self.fmt:
            mine = "a BEIR document (it has '_id')" if this == "beir" else "an irflow record (it has no '_id')"
            theirs = "BEIR documents" if self.fmt == "beir" else "irflow records"
            return BadLine(number, "format", f"{mine} in a file of {theirs} (line {self.first_line} decided); "
                                             "use one format per file")
        if self.fmt == "beir":
            made, kind, reason = _document(obj, self.title_mode)
            if made is not None:
                doc_id = made[0].artifact_id
                if doc_id in self.doc_line:
                    made, kind, reason = None, "duplicate", (f"duplicate document id {doc_id!r} "
                                                             f"(first on line {self.doc_line[doc_id]})")
                else:
                    self.doc_line[doc_id] = number
        else:
            record, kind, reason = _record(obj)
            made = None if record is None else [record]
        if made is None:
            return BadLine(number, kind, reason)
        try:
            # what build() would refuse (text UTF-8 cannot hold, metadata JSON cannot), said per line
            return [checked_record(r) for r in made]
        except RecordError as error:
            return BadLine(number, "value", str(error))


def read_record_file(path: str | Path, *, title_mode: str = "prepend", progress: bool = False) -> RecordFile:
    """Read ``path`` line by line: its records and every bad line (see the module docstring).

    Duplicate surfaces (an artifact's surface index, or a record id, given
    twice) are bad lines too, naming the line that came first.
    """
    path = Path(path)
    size = path.stat().st_size
    records: list[Record] = []
    line_of: list[int] = []  # the line of each record (a BEIR document's records share one)
    bad: list[BadLine] = []
    parser = _Lines(title_mode)
    lines = 0
    with open_regular(path, "records file") as handle, bar(progress, f"reading {path.name}", total=size, unit="B",
                                                            unit_scale=True) as shown:
        for number, raw in read_lines(handle, str(path), "records file"):
            shown.update(len(raw))
            try:
                # utf-8-sig on the first line: a byte-order mark is not part of the data
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                lines += 1
                bad.append(BadLine(number, "encoding", f"not UTF-8 text (byte {error.start + 1} of the line); "
                                                       "save the file as UTF-8"))
                continue
            if not line.strip():
                continue
            lines += 1
            made = parser.parse(number, line)
            if isinstance(made, BadLine):
                bad.append(made)
                continue
            records.extend(made)
            line_of.extend([number] * len(made))
    duplicates: list[tuple[int, int, str]] = []
    prepared = prepare_records(records, duplicates=duplicates)
    for position, first, what in duplicates:
        bad.append(BadLine(line_of[position], "duplicate", f"{what} (first on line {line_of[first]}); each "
                                                           "surface of an artifact needs its own surface_index / id"))
    bad.sort(key=lambda b: b.number)
    return RecordFile(path, parser.fmt or "records", prepared, tuple(bad), lines)


def _numbers(numbers: Iterable[int], limit: int = 1000) -> str:
    """``[3, 4, 5, 9]`` -> ``"3-5, 9"``; at most ``limit`` ranges, then a count."""
    ranges: list[list[int]] = []
    for n in sorted(numbers):
        if ranges and n <= ranges[-1][1] + 1:
            ranges[-1][1] = n
        else:
            ranges.append([n, n])
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in ranges]
    if len(parts) > limit:
        parts = parts[:limit] + [f"... ({len(parts) - limit} more ranges)"]
    return ", ".join(parts)


def _counts(bad: Iterable[BadLine]) -> str:
    names = {"encoding": "not UTF-8", "json": "not JSON", "shape": "not an object", "format": "other format",
             "keys": "missing or unknown keys", "value": "bad values", "duplicate": "duplicates"}
    counted = Counter(b.kind for b in bad)
    return ", ".join(f"{n:,} {names.get(kind, kind)}" for kind, n in counted.most_common())


def bad_lines_report(found: RecordFile, *, done: str = "nothing was indexed", to: str = "index") -> str:
    """The error for a file with bad lines: every bad line by number, the first ones with their reason.

    ``done`` says what the command did not do, ``to`` what --skip-bad does (``irflow add``: "add").
    """
    bad = found.bad
    head = (f"{found.path}: {len(bad):,} bad line{'s' if len(bad) != 1 else ''} of {found.lines:,} "
            f"({_counts(bad)}); {done}. Fix them, or pass --skip-bad to {to} the other lines.")
    lines = [head] + [f"  line {b.number}: {b.reason}" for b in bad[:DETAILED]]
    if len(bad) > DETAILED:
        lines.append(f"  and {len(bad) - DETAILED:,} more: lines {_numbers(b.number for b in bad[DETAILED:])}")
    lines.append(f"Format: {RECORD_FORMAT}")
    return "\n".join(lines)


def skipped_report(found: RecordFile) -> str:
    """The note for --skip-bad: how many lines were skipped, why, and which."""
    bad = found.bad
    first = "; ".join(f"line {b.number}: {b.reason}" for b in bad[:3])
    return (f"skipped {len(bad):,} bad line{'s' if len(bad) != 1 else ''} of {found.lines:,} ({_counts(bad)}): "
            f"lines {_numbers(b.number for b in bad)}. First: {first}")
