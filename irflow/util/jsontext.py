"""JSON text for people: the outer levels one item a line, the deeper ones compact.

``json.dumps(value, indent=2)`` puts every item of every level on its own
line, indented by its depth: a list of small numbers grows tenfold and a
value nested 64 deep grows with the square of its depth.  The command line
prints data read from files (traces), so its output is bounded instead: the
first ``levels`` levels of containers are laid out one item a line (what a
reader scans: the stages, the candidates), everything below them is written
as compact JSON on its item's line.  With enough levels the text is exactly
``json.dumps(value, indent=indent)``.

>>> print(outline({"stages": [{"stage": "fuse", "candidates": [{"row": 3, "p": [1, 2]}]}]}, levels=2))
{
  "stages": [
    {"stage": "fuse", "candidates": [{"row": 3, "p": [1, 2]}]}
  ]
}
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = ["outline"]


def outline(value: Any, *, levels: int = 4, indent: int = 2, ensure_ascii: bool = False) -> str:
    """``value`` as JSON text: containers at depth < ``levels`` one item a line, deeper ones compact.

    The text is at most a few times the compact JSON's size (at most
    ``levels * indent`` spaces and a newline per item of the outer levels), whatever the nesting.
    """
    parts: list[str] = []
    _emit(value, 0, levels, indent, ensure_ascii, parts)
    return "".join(parts)


def _emit(value: Any, depth: int, levels: int, indent: int, ensure_ascii: bool, parts: list[str]) -> None:
    # recursion is bounded by ``levels``: below it json.dumps (C, with its own recursion guard) writes the value
    if depth >= levels or not isinstance(value, (dict, list, tuple)) or not value:
        parts.append(json.dumps(value, ensure_ascii=ensure_ascii))
        return
    pad = "\n" + " " * (indent * (depth + 1))
    is_dict = isinstance(value, dict)
    items: Iterable[tuple[Any, Any]] = value.items() if isinstance(value, dict) else ((None, v) for v in value)
    parts.append("{" if is_dict else "[")
    for i, (key, item) in enumerate(items):
        parts.append("," + pad if i else pad)
        if is_dict:
            parts.append(_key(key, ensure_ascii) + ": ")
        _emit(item, depth + 1, levels, indent, ensure_ascii, parts)
    parts.append("\n" + " " * (indent * depth) + ("}" if is_dict else "]"))


def _key(key: Any, ensure_ascii: bool) -> str:
    if isinstance(key, str):
        return json.dumps(key, ensure_ascii=ensure_ascii)
    # an int, float, bool or None key: written as json.dumps writes it ('{"1": 0}' -> '"1"')
    return json.dumps({key: 0}, ensure_ascii=ensure_ascii)[1:-4]
