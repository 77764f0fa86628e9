"""Parameter validators: attrs validators whose messages say what is expected and what was given.

Stage kinds (``param(..., validator=positive_int)``), derived-parameter rules
and the seed API share them, so a value is refused with the same words
wherever it comes from — a recipe file, ``Recipe.run`` or ``search()``.

>>> positive_int(None, None, 3)
>>> one_of("rrf", "blend")(None, None, "rff")
Traceback (most recent call last):
...
ValueError: must be one of 'rrf', 'blend'; got 'rff' (did you mean 'rrf'?)
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from irflow.errors import WeightError

__all__ = [
    "closest",
    "did_you_mean",
    "listing",
    "is_finite",
    "positive_int",
    "non_negative_int",
    "finite_number",
    "non_negative_number",
    "positive_number",
    "boolean",
    "one_of",
    "optional_mapping",
    "optional_str_list",
    "str_tuple",
    "number_mapping",
    "check_surface_weights",
]


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The closest match of ``word`` among ``candidates`` (difflib), or None."""
    matches = difflib.get_close_matches(str(word), list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(word: Any, options: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` naming the closest of ``options``, or ``""`` when none is close."""
    match = closest(str(word), options)
    return f" (did you mean {match!r}?)" if match else ""


def listing(names: Iterable[str]) -> str:
    """``a, b, c`` — or ``(none)``."""
    names = list(names)
    return ", ".join(names) if names else "(none)"


def _got(value: Any) -> str:
    return f"got {value!r} ({type(value).__name__})"


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def is_finite(value: Any) -> bool:
    """A finite number a float can hold: False for NaN, inf and ints like 10**400 (where math.isfinite raises)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def positive_int(instance: Any, attribute: Any, value: Any) -> None:
    """An integer >= 1."""
    if not _is_int(value) or value < 1:
        raise ValueError(f"must be a positive integer, {_got(value)}")


def non_negative_int(instance: Any, attribute: Any, value: Any) -> None:
    """An integer >= 0."""
    if not _is_int(value) or value < 0:
        raise ValueError(f"must be an integer >= 0, {_got(value)}")


def finite_number(instance: Any, attribute: Any, value: Any) -> None:
    """A finite int or float."""
    if not _is_number(value) or not is_finite(value):
        raise ValueError(f"must be a finite number, {_got(value)}")


def non_negative_number(instance: Any, attribute: Any, value: Any) -> None:
    """A finite number >= 0."""
    if not _is_number(value) or not is_finite(value) or value < 0:
        raise ValueError(f"must be a finite number >= 0, {_got(value)}")


def positive_number(instance: Any, attribute: Any, value: Any) -> None:
    """A finite number > 0."""
    if not _is_number(value) or not is_finite(value) or value <= 0:
        raise ValueError(f"must be a finite number > 0, {_got(value)}")


def boolean(instance: Any, attribute: Any, value: Any) -> None:
    """True or False (not 0/1, not "true")."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"must be true or false, {_got(value)}")


def one_of(*choices: Any) -> Callable[[Any, Any, Any], None]:
    """A validator accepting exactly the listed values (True is not 1)."""
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if not any(value == c and isinstance(value, bool) == isinstance(c, bool) for c in choices):
            hint = closest(value, [str(c) for c in choices]) if isinstance(value, str) else None
            did = f" (did you mean {hint!r}?)" if hint else ""
            raise ValueError(f"must be one of {', '.join(map(repr, choices))}; got {value!r}{did}")
    return check


def optional_mapping(instance: Any, attribute: Any, value: Any) -> None:
    """None or a mapping with string keys."""
    if value is None:
        return
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"must be a table (mapping with string keys) or left out, {_got(value)}")


def str_tuple(value: Any) -> Any:
    """Converter: a list or tuple of strings becomes a tuple; anything else passes through
    unchanged so that :func:`optional_str_list` can name it in its error."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return value


def optional_str_list(instance: Any, attribute: Any, value: Any) -> None:
    """None or a tuple of strings (use with the :func:`str_tuple` converter)."""
    if value is not None and not (isinstance(value, tuple) and all(isinstance(v, str) for v in value)):
        raise ValueError(f"must be a list of strings (e.g. [\"name\", \"description\"]) or left out, {_got(value)}")


def number_mapping(instance: Any, attribute: Any, value: Any) -> None:
    """None or a mapping of str -> finite non-negative number."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise ValueError(f"must be a table of name = number, {_got(value)}")
    for key, number in value.items():
        if not isinstance(key, str):
            raise ValueError(f"keys must be strings, got {key!r}")
        if not _is_number(number) or not is_finite(number) or number < 0:
            raise ValueError(f"values must be finite numbers >= 0; {key!r} is {number!r}")


def check_surface_weights(weights: Any) -> None:
    """Raise :class:`~irflow.errors.WeightError` unless ``weights`` is None or ``{kind: finite number >= 0}``.

    The weight stage's validator and ``search(surface_weights=...)``'s own check.

    >>> check_surface_weights({"deps": 2.0, "name": 0})
    """
    if weights is None:
        return
    if not isinstance(weights, Mapping):
        raise WeightError(f"surface_weights must be a mapping of surface kind -> weight (e.g. {{'deps': 2.0}}), "
                          f"got {type(weights).__name__}")
    for kind, weight in weights.items():
        if not isinstance(kind, str):
            raise WeightError(f"surface_weights keys are surface kinds (strings), got {kind!r}")
        number = isinstance(weight, (int, float, np.integer, np.floating)) and not isinstance(weight, (bool, np.bool_))
        if not number or not is_finite(weight) or weight < 0:
            raise WeightError(f"surface_weights[{kind!r}] is {weight!r}; weights must be finite numbers >= 0")
