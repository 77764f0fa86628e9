"""A plain per-record evaluator of the filter language, written from the MongoDB rules.

It is the oracle of the property tests: deliberately naive (recursion over
Python values, one record at a time) and independent of ``irflow.kernels.columns``
and ``irflow.kernels.filters``.  It assumes a valid filter.

>>> matches({"a": [{"b": 1}]}, {"a.b": 1})
True
>>> matches({}, {"a": {"$ne": 1}})
True
"""

from __future__ import annotations

import operator
from typing import Any

MISSING = object()  # a path branch that ends before its last part

_COMPARE = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}


def type_class(value: Any) -> str:
    """MongoDB's comparison classes for the types we support (bool is not a number)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "other"


def same(a: Any, b: Any) -> bool:
    """MongoDB equality of two values (dict key order ignored, numbers by value)."""
    kind = type_class(a)
    if kind != type_class(b):
        return False
    if kind == "array":
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if kind == "object":
        return set(a) == set(b) and all(same(a[k], b[k]) for k in a)
    if kind == "other":
        return False
    return a == b  # NaN != NaN here, as a NaN never equals a filter value


def lookup(value: Any, parts: list[str]) -> list[Any]:
    """Values at a dotted path: mapping steps look keys up, lists pass to their dict elements."""
    if not parts:
        return [value]
    if isinstance(value, dict):
        return lookup(value[parts[0]], parts[1:]) if parts[0] in value else [MISSING]
    if isinstance(value, (list, tuple)):
        found: list[Any] = []
        for element in value:
            if isinstance(element, dict):  # scalars and nested lists do not continue a path
                found += lookup(element, parts)
        return found
    return [MISSING]


def candidates(items: list[Any]) -> list[Any]:
    """What value operators test: each found value and, for a list, its elements."""
    out: list[Any] = []
    for item in items:
        if item is MISSING:
            continue
        out.append(item)
        if isinstance(item, (list, tuple)):
            out.extend(item)
    return out


def equal(items: list[Any], value: Any) -> bool:
    if value is None and any(item is MISSING for item in items):
        return True  # {f: None} matches a missing field
    return any(same(c, value) for c in candidates(items))


def compare(items: list[Any], op: str, bound: Any) -> bool:
    kind = type_class(bound)
    return any(type_class(c) == kind and _COMPARE[op](c, bound) for c in candidates(items))


def is_operator_document(value: Any) -> bool:
    return isinstance(value, dict) and bool(value) and all(k.startswith("$") for k in value)


def field(items: list[Any], condition: Any) -> bool:
    if not is_operator_document(condition):
        return equal(items, condition)
    return all(apply(items, op, arg) for op, arg in condition.items())


def apply(items: list[Any], op: str, arg: Any) -> bool:
    if op == "$eq":
        return equal(items, arg)
    if op == "$ne":
        return not equal(items, arg)
    if op == "$in":
        return any(equal(items, v) for v in arg)
    if op == "$nin":
        return not any(equal(items, v) for v in arg)
    if op == "$all":
        return bool(arg) and all(equal(items, v) for v in arg)
    if op == "$exists":
        return any(item is not MISSING for item in items) == arg
    if op == "$size":
        return any(isinstance(item, (list, tuple)) and len(item) == arg for item in items)
    if op == "$not":
        return not field(items, arg)
    return compare(items, op, arg)


def matches(record: dict[str, Any], spec: dict[str, Any] | None) -> bool:
    """Whether one record's metadata satisfies the filter."""
    for key, value in (spec or {}).items():
        if key == "$and":
            ok = all(matches(record, sub) for sub in value)
        elif key == "$or":
            ok = any(matches(record, sub) for sub in value)
        elif key == "$nor":
            ok = not any(matches(record, sub) for sub in value)
        else:
            ok = field(lookup(record, key.split(".")), value)
        if not ok:
            return False
    return True
