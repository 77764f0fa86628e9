"""The metadata filter language: validation and canonical form (compiled to numpy predicates by :mod:`irflow.kernels.filters`).

:func:`normalize_filter` turns a user's filter into its JSON-ready canonical
form, or raises a :class:`~irflow.errors.FilterError` that names the
operator, its path and what would be right.  The language itself — its
operators, types and missing-field rules — is described in
:mod:`irflow.kernels.filters`.

>>> normalize_filter({"stars": {"$gte": 10}, "owner": "me"})
{'stars': {'$gte': 10}, 'owner': 'me'}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from irflow.errors import FilterError
from irflow.util.fileio import MAX_NESTING, check_nesting
from irflow.util.unicode import check_value_text

__all__ = ["FIELD_OPERATORS", "LOGICAL_OPERATORS", "normalize_filter"]

#: Operators allowed in a field's operator document.
FIELD_OPERATORS: tuple[str, ...] = (
    "$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$all", "$size", "$not",
)
#: Operators allowed where a filter document is expected (top level, inside $and/$or/$nor).
LOGICAL_OPERATORS: tuple[str, ...] = ("$and", "$or", "$nor")

_RANGE_OPERATORS = ("$gt", "$gte", "$lt", "$lte")
_LIST_OPERATORS = ("$in", "$nin", "$all")
_VALID_FIELD = ", ".join(FIELD_OPERATORS)
_VALID_LOGICAL = ", ".join(LOGICAL_OPERATORS)


# --------------------------------------------------------------------------------------
# Validation and normalization: user spec -> JSON-ready spec, or a FilterError that says
# which operator at which path is wrong and what would be right.
# --------------------------------------------------------------------------------------


def _type_name(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def _where(context: str) -> str:
    """Where a document sits, for messages: 'the top level' or 'in $or[1]'."""
    return f" (in {context})" if context else ""


def _at_path(op: str, path: str, context: str) -> str:
    return f"{op} at path '{path}'{_where(context)}"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _literal(value: Any, op: str, path: str, context: str, trail: tuple[str, ...] | None = ()) -> Any:
    """A plain comparison value made JSON-ready (tuples -> lists, numpy -> Python), or an error.

    ``trail`` is the chain of dict keys from the field to here, used to
    suggest a dotted path when an operator hides in a nested dict; None
    where that suggestion would be wrong (inside lists).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if _is_number(value):
        number = value.item() if isinstance(value, np.generic) else value
        if isinstance(number, float) and math.isnan(number):
            raise FilterError(
                f"{_at_path(op, path, context)}: NaN is not allowed in filters (it equals nothing); "
                "use {'$exists': ...} or drop the condition"
            )
        return number
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        # Inside a list a nested key no longer names a sub-field: drop the trail.
        return [_literal(v, op, path, context, None) for v in value]
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            if not isinstance(key, str):
                raise FilterError(
                    f"{_at_path(op, path, context)}: keys of a dict value must be strings, got {_type_name(key)} {key!r}"
                )
            if key.startswith("$"):
                hint = ""
                if trail is not None and op == "$eq":
                    hint = f"; to filter a nested field write {{'{'.'.join((path, *trail))}': {{'{key}': ...}}}}"
                raise FilterError(
                    f"operator '{key}' inside a plain value at path '{path}'{_where(context)} "
                    f"({op} compares whole values){hint}; "
                    f"operators go directly under a field; valid operators: {_VALID_FIELD}"
                )
            out[key] = _literal(inner, op, path, context, None if trail is None else (*trail, key))
        return out
    raise FilterError(
        f"{_at_path(op, path, context)}: unsupported value type {_type_name(value)}; "
        "use None, booleans, numbers, strings, lists or dicts"
    )


def _is_operator_document(value: Any, path: str, context: str) -> bool:
    """True for ``{"$gt": 1, ...}``; False for plain values; an error for a mix of both."""
    if not isinstance(value, Mapping) or not value:
        return False
    dollar = [isinstance(k, str) and k.startswith("$") for k in value]
    if all(dollar):
        return True
    if any(dollar):
        keys = ", ".join(repr(k) for k in value)
        raise FilterError(
            f"the value at path '{path}'{_where(context)} mixes operators and plain keys ({keys}); "
            f"write either an operator document such as {{'$gt': 1}} or a plain value; valid operators: {_VALID_FIELD}"
        )
    return False


def _operand(op: str, arg: Any, path: str, context: str) -> Any:
    """Check and normalize the operand of one field operator."""
    where = _at_path(op, path, context)
    if op in ("$eq", "$ne"):
        return _literal(arg, op, path, context)
    if op in _RANGE_OPERATORS:
        if isinstance(arg, str):
            return arg
        if _is_number(arg):
            return _literal(arg, op, path, context)
        raise FilterError(f"{where} needs a number or a string, got {_type_name(arg)}")
    if op in _LIST_OPERATORS:
        if isinstance(arg, np.ndarray):
            arg = arg.tolist()
        if not isinstance(arg, (list, tuple)):
            raise FilterError(f"{where} needs a list, got {_type_name(arg)}")
        return [_literal(v, op, path, context, None) for v in arg]
    if op == "$exists":
        if not isinstance(arg, (bool, np.bool_)):
            raise FilterError(f"{where} needs true or false, got {_type_name(arg)}")
        return bool(arg)
    if op == "$size":
        if not isinstance(arg, (int, np.integer)) or isinstance(arg, (bool, np.bool_)) or arg < 0:
            shown = f"{arg!r}" if isinstance(arg, (int, np.integer)) and not isinstance(arg, bool) else _type_name(arg)
            raise FilterError(f"{where} needs a non-negative integer, got {shown}")
        return int(arg)
    # $not: the only operator left once the caller checked the name.
    if not _is_operator_document(arg, path, context):
        raise FilterError(
            f"{where} needs an operator document such as {{'$gt': 1}}, got {_type_name(arg)} "
            f"(to negate an equality use $ne); valid operators: {_VALID_FIELD}"
        )
    return _operators(arg, path, context)


def _operators(doc: Mapping[str, Any], path: str, context: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for op, arg in doc.items():
        if op in LOGICAL_OPERATORS:
            raise FilterError(
                f"operator '{op}' at path '{path}'{_where(context)} combines whole filters and belongs at the "
                f"document level: {{'{op}': [{{'{path}': ...}}, ...]}}; valid operators at a field: {_VALID_FIELD}"
            )
        if op not in FIELD_OPERATORS:
            raise FilterError(f"unknown operator '{op}' at path '{path}'{_where(context)}; valid operators: {_VALID_FIELD}")
        out[op] = _operand(op, arg, path, context)
    return out


def _check_path(path: str, context: str) -> None:
    if not path or any(not part for part in path.split(".")):
        raise FilterError(
            f"invalid field path {path!r}{_where(context)}: a dotted path needs non-empty parts, "
            "such as 'owner' or 'repo.owner'"
        )


def _logical(op: str, value: Any, context: str) -> list[dict[str, Any]]:
    here = context or "the top level"
    if isinstance(value, Mapping) or not isinstance(value, (list, tuple)) or not value:
        got = "an empty list" if isinstance(value, (list, tuple)) else _type_name(value)
        raise FilterError(f"{op} at {here} needs a non-empty list of filter documents, got {got}")
    documents = []
    for index, sub in enumerate(value):
        inner = f"{context}.{op}[{index}]" if context else f"{op}[{index}]"
        if not isinstance(sub, Mapping):
            raise FilterError(f"{inner} must be a filter document (a mapping), got {_type_name(sub)}")
        documents.append(_document(sub, inner))
    return documents


def _document(doc: Mapping[Any, Any], context: str) -> dict[str, Any]:
    here = "at the top level" if not context else f"in {context}"
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if not isinstance(key, str):
            raise FilterError(f"field names must be strings, got {_type_name(key)} {key!r} {here}")
        if key in LOGICAL_OPERATORS:
            out[key] = _logical(key, value, context)
        elif key in FIELD_OPERATORS:
            raise FilterError(
                f"operator '{key}' {here} needs a field: write {{'<field>': {{'{key}': ...}}}}; "
                f"valid operators here: {_VALID_LOGICAL}"
            )
        elif key.startswith("$"):
            raise FilterError(
                f"unknown operator '{key}' {here}; valid operators here: {_VALID_LOGICAL}; "
                f"under a field: {_VALID_FIELD}"
            )
        else:
            _check_path(key, context)
            if _is_operator_document(value, key, context):
                out[key] = _operators(value, key, context)
            else:
                out[key] = _literal(value, "$eq", key, context)
    return out


def normalize_filter(spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate a filter and return it JSON-ready (plain dicts, lists and Python scalars).

    Raises ``FilterError`` naming the operator, its path and the valid
    operators.  ``None`` is the empty filter.

    >>> normalize_filter({"tags": ("a", "b")})
    {'tags': ['a', 'b']}
    """
    if spec is None:
        return {}
    if not isinstance(spec, Mapping):
        raise FilterError(
            f"a filter must be a mapping such as {{'owner': 'me'}} or {{'stars': {{'$gte': 10}}}}, "
            f"got {_type_name(spec)}"
        )
    # validation recurses: bound the depth first (a filter nested 1,000 deep, or one holding itself)
    check_nesting(spec, "the filter", limit=MAX_NESTING, error=FilterError)
    # field names and values are compared with metadata, which is UTF-8 text (irflow.util.unicode)
    check_value_text(spec, "filter", error=FilterError)
    return _document(spec, "")
