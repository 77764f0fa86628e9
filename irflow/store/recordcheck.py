"""What :func:`irflow.build` accepts of a record: UTF-8 text, and metadata that is JSON.

A corpus on disk stores every string as UTF-8 and every record's metadata
as JSON; a corpus in memory must answer exactly as the same corpus saved
and reopened.  So build time checks each record once, before anything is
computed from it, and refuses what the stored corpus could not hold as
given — an error naming the field, never a silent change:

- a lone surrogate in any string (text, ids, kind, metadata keys and
  values): see :mod:`irflow.util.unicode`;
- a metadata key that is not a string (``{1: "x"}``: JSON would write it as
  ``"1"``, so a filter on ``"1"`` would find it on disk only, and
  ``{1: "x", "1": "y"}`` would lose a value), at any depth;
- a value JSON cannot hold: a set, bytes, NaN or an infinity, an integer
  longer than Python writes, any other object.

Values JSON holds as another Python type of the same value are stored as
that type, exactly as reopening would give them: a tuple (or a numpy array)
as a list, numpy numbers and booleans and subclasses of ``str`` / ``int`` /
``float`` as the plain value.  The checked metadata is a new object all the
way down, so changing the caller's dicts and lists after ``build()`` never
changes the corpus.

>>> json_metadata({"tags": ("a", "b"), "stars": 3})
{'tags': ['a', 'b'], 'stars': 3}
>>> json_metadata({1: "x"})
Traceback (most recent call last):
...
irflow.errors.RecordError: metadata has the key 1 (an int); metadata is JSON, whose keys are strings: write '1'
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from irflow.errors import RecordError
from irflow.store.records import Record
from irflow.util.fileio import MAX_NESTING, too_many_digits
from irflow.util.unicode import lone_surrogate, surrogate_reason

__all__ = ["json_metadata", "checked_record", "record_label", "TEXT_FIELDS"]

#: The string fields of a record, checked for lone surrogates.
TEXT_FIELDS: tuple[str, ...] = ("artifact_id", "surface_kind", "text", "id")

#: Integers this many bits long or more are checked against Python's digit limit (str() of them may fail).
_LONG_INT_BITS = 3000


def record_label(record: Record) -> str:
    """How a message names a record beside its position: ``artifact 'x', kind 'name'`` (shown escaped)."""
    return f"artifact {record.artifact_id!r}, kind {record.surface_kind!r}"


class _Refused(Exception):
    """A refused value deep in metadata: the reason, and the path filled in as it unwinds (no cost otherwise)."""

    def __init__(self, reason: str, *, key: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.key = key  # the reason is about a key of the mapping the path leads to
        self.path: list[Any] = []  # innermost first

    def error(self, where: str) -> RecordError:
        path = where + "".join(f"[{step!r}]" for step in reversed(self.path))
        if self.key:
            return RecordError(f"{path} has {self.reason}")
        return RecordError(f"{path}{self.reason}")


def _an(kind: str) -> str:
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def _refuse(value: Any) -> _Refused:
    if isinstance(value, (set, frozenset)):
        fix = "a set has no order and JSON has no sets: use a list (sorted, for a stable order)"
    elif isinstance(value, (bytes, bytearray, memoryview)):
        fix = "JSON holds text, not bytes: decode them (e.g. value.decode('utf-8'))"
    else:
        fix = "JSON cannot hold it: use strings, numbers, booleans, None, lists and dicts (e.g. str(value))"
    what = "bytes" if isinstance(value, (bytes, bytearray, memoryview)) else _an(type(value).__name__)
    return _Refused(f" is {what}; metadata is stored as JSON, and {fix}")


def _bad_key(key: Any, mapping: Mapping[Any, Any]) -> _Refused:
    fix = "use strings"
    if key is None or isinstance(key, (bool, int, float)):
        text = json.dumps(key)  # what JSON would have written: the key it would have become
        fix = f"write {text!r}" + (f" (it also has the key {text!r}: merge the two)" if text in mapping else "")
    return _Refused(f"the key {key!r} ({_an(type(key).__name__)}); metadata is JSON, whose keys are strings: {fix}",
                    key=True)


def _text(value: str) -> str:
    if not value.isascii():
        at = lone_surrogate(value)
        if at >= 0:
            raise _Refused(f": {surrogate_reason(value, at)}")
    return value


def _int(value: int) -> int:
    if value.bit_length() >= _LONG_INT_BITS:
        try:
            str(value)
        except ValueError:
            raise _Refused(f": {too_many_digits()}") from None
    return value


def _float(value: float) -> float:
    if value - value != 0.0:  # NaN or an infinity (one subtraction: the common case stays cheap)
        raise _Refused(f" is {value!r}; metadata is stored as JSON, which has no NaN or infinity: use None, or a "
                       "string")
    return value


def _other(value: Any, depth: int) -> Any:
    """A value of a type other than the plain ones: containers, numpy values, subclasses; or refused."""
    if isinstance(value, Mapping):
        return _object(value, depth + 1)
    if isinstance(value, (list, tuple)):
        return _array(value, depth + 1)
    if isinstance(value, np.ndarray):
        return _array(value.tolist(), depth + 1) if value.ndim else _other(value.item(), depth)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return _int(operator.index(value))  # an int subclass (an IntEnum) or a numpy int: the plain int
    if isinstance(value, (float, np.floating)):
        return _float(float(value))  # exact: a float32 or float16 widens without rounding
    if isinstance(value, str):
        return _text(str.__str__(value))  # a subclass: its characters, not its __str__ (an Enum's name)
    raise _refuse(value)


def _value(value: Any, depth: int) -> Any:
    kind = type(value)
    if kind is str:
        return _text(value)
    if kind is int:
        return _int(value)
    if kind is float:
        return _float(value)
    if kind is bool or value is None:
        return value
    if kind is dict:
        return _object(value, depth + 1)
    if kind is list:
        return _array(value, depth + 1)
    return _other(value, depth)


def _deep(depth: int) -> None:
    if depth > MAX_NESTING:
        raise _Refused(f": nested more than {MAX_NESTING} levels deep, the limit (flatten the value)")


def _array(values: Any, depth: int) -> list[Any]:
    _deep(depth)
    out = []
    for i, child in enumerate(values):
        try:
            out.append(_value(child, depth))
        except _Refused as refused:
            refused.path.append(i)
            raise
    return out


def _object(value: Mapping[Any, Any], depth: int) -> dict[str, Any]:
    _deep(depth)
    out: dict[str, Any] = {}
    for key, child in value.items():
        if type(key) is not str:
            if not isinstance(key, str):
                raise _bad_key(key, value)
            key = str.__str__(key)  # a subclass: its characters
        if not key.isascii() and (at := lone_surrogate(key)) >= 0:
            raise _Refused(f"a key that is not UTF-8 text: {surrogate_reason(key, at)}", key=True)
        try:
            out[key] = _value(child, depth)
        except _Refused as refused:
            refused.path.append(key)
            raise
    return out


def json_metadata(value: Mapping[Any, Any], where: str = "metadata") -> dict[str, Any]:
    """``value`` as the stored corpus holds it: a new dict of plain JSON values, or RecordError naming the path.

    See the module docstring for what is refused and what is stored as
    another type of the same value.
    """
    if not value:
        return {}
    try:
        return _object(value, 1)
    except _Refused as refused:
        raise refused.error(where) from None


def checked_record(record: Record, **changes: Any) -> Record:
    """``record`` as :func:`irflow.build` stores it (metadata by :func:`json_metadata`); RecordError naming the field.

    ``changes`` are other fields to set in the same copy (``surface_index``).
    """
    for field in TEXT_FIELDS:
        text = getattr(record, field)
        if isinstance(text, str):
            at = lone_surrogate(text)
            if at >= 0:
                raise RecordError(f"{field}: {surrogate_reason(text, at)}")
    return attrs.evolve(record, metadata=json_metadata(record.metadata), **changes)
