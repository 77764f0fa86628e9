"""Text irflow takes in: Unicode that UTF-8 can encode, checked where it enters.

irflow stores and writes text as UTF-8 (corpus columns, metadata JSON, run
files), and model tokenizers take only valid Unicode.  A Python ``str`` can
hold code points UTF-8 cannot encode: the surrogates U+D800..U+DFFF, alone
(a *lone surrogate*).  They come from a JSON or Python escape of half a
surrogate pair (``"\\ud800"``), or from bytes that are not UTF-8, which
Python turns into U+DC80..U+DCFF (*surrogate escapes*: command-line
arguments, file names).  Such text could not be stored, written or embedded
exactly, so irflow refuses it where it enters — a record's fields, metadata,
queries, recipes, run arguments, filters, test collections — with an error
naming the field, and never carries it inward to fail later in a writer or
a tokenizer.

>>> lone_surrogate("zip tool"), lone_surrogate("zip \\ud800")
(-1, 4)
>>> find_lone_surrogate({"tags": ["ok", "caf\\udce9"]}, "metadata")
("metadata['tags'][1]", 'caf\\udce9', 3)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from irflow.errors import InputError

__all__ = ["lone_surrogate", "surrogate_reason", "check_text", "find_lone_surrogate", "check_value_text",
           "argv_reason", "json_text", "escape_surrogates", "escape_controls", "visible"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> int:
    """The index of the first code point of ``text`` that UTF-8 cannot encode (a surrogate), or -1.

    ASCII text answers at once; other text costs one encode (a few µs per KB).
    """
    if text.isascii():
        return -1
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return int(error.start)
    return -1


def _shown(text: str, width: int = 60) -> str:
    shown = repr(text)  # repr escapes surrogates: the message itself stays encodable
    return shown if len(shown) <= width else f"{shown[:width - 5]}… ({len(text)} characters)"


def surrogate_reason(text: str, at: int) -> str:
    """Why ``text`` is refused, its surrogate at ``at``: what it is, where it comes from, the fix."""
    code = ord(text[at])
    if 0xDC80 <= code <= 0xDCFF:
        origin = f"a byte that is not UTF-8 (0x{code - 0xDC00:02x}) or a \\u{code:04x} escape"
    else:
        origin = f"a \\u{code:04x} escape without the other half of its surrogate pair"
    return (f"{_shown(text)} holds a lone surrogate (U+{code:04X} at character {at}, from {origin}), which is "
            "not text UTF-8 can store; irflow takes UTF-8 text only: fix the source (save it as UTF-8, or "
            "escape whole surrogate pairs)")


def check_text(text: str, where: str, *, error: Callable[[str], Exception] = InputError) -> None:
    """``error`` naming ``where`` when ``text`` holds a lone surrogate."""
    at = lone_surrogate(text)
    if at >= 0:
        raise error(f"{where}: {surrogate_reason(text, at)}")


_LEAVES = frozenset({int, float, bool, type(None)})


def _path(nodes: list[tuple[int, Any]], node: int, root: str) -> str:
    steps = []
    while node:
        node, step = nodes[node]
        steps.append(f"[{step!r}]")
    return root + "".join(reversed(steps))


def find_lone_surrogate(value: Any, path: str, *, limit: int = 10_000) -> tuple[str, str, int] | None:
    """A string of ``value`` (keys included, through mappings, lists and tuples) with a lone surrogate.

    Returns ``(where, text, index)``: ``where`` is ``path`` with the
    subscripts that lead to it (``metadata['tags'][1]``; a key is named as
    ``a key of metadata['a']``), or None when every string is clean.
    Iterative and bounded by ``limit`` containers (deeper data is checked
    for nesting elsewhere), so any value is walked without recursion; the
    path is spelled only for a string found (a run argument is walked on
    every search).
    """
    if type(value) is str:
        at = lone_surrogate(value)
        return None if at < 0 else (path, value, at)
    nodes: list[tuple[int, Any]] = [(0, None)]  # (parent node, step): node 0 is ``value``
    stack: list[tuple[Any, int]] = [(value, 0)]
    seen = 0
    while stack:
        item, node = stack.pop()
        kind = type(item)
        if kind is dict or (kind is not list and kind is not tuple and isinstance(item, Mapping)):
            pairs: Any = item.items()
        elif kind is list or kind is tuple or isinstance(item, (list, tuple)):
            pairs = enumerate(item)
        else:
            continue
        seen += 1
        if seen > limit:
            return None
        for step, child in pairs:
            if type(step) is str and not step.isascii() and (at := lone_surrogate(step)) >= 0:
                return f"a key of {_path(nodes, node, path)}", step, at
            child_kind = type(child)
            if child_kind in _LEAVES:
                continue
            nodes.append((node, step))
            if child_kind is str:
                if not child.isascii() and (at := lone_surrogate(child)) >= 0:
                    return _path(nodes, len(nodes) - 1, path), child, at
                nodes.pop()  # a clean string needs no node
                continue
            if isinstance(child, str):  # a subclass
                at = lone_surrogate(child)
                if at >= 0:
                    return _path(nodes, len(nodes) - 1, path), child, at
                continue
            stack.append((child, len(nodes) - 1))
    return None


def check_value_text(value: Any, where: str, *, error: Callable[[str], Exception] = InputError) -> None:
    """``error`` naming the path when any string in ``value`` (keys included) holds a lone surrogate."""
    if isinstance(value, str):
        check_text(value, where, error=error)
        return
    found = find_lone_surrogate(value, where)
    if found is not None:
        path, text, at = found
        raise error(f"{path}: {surrogate_reason(text, at)}")


def argv_reason(text: str) -> str | None:
    """Why a command-line argument is refused (None when it is UTF-8 text).

    Python decodes argv bytes that are not UTF-8 as surrogate escapes; they
    are turned back into the bytes typed, to name the byte.
    """
    at = lone_surrogate(text)
    if at < 0:
        return None
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that is no escape of a byte (not from argv bytes)
        return surrogate_reason(text, at)
    offset = len(text[:at].encode("utf-8", "surrogateescape"))
    shown = repr(raw) if len(repr(raw)) <= 60 else f"{repr(raw)[:55]}… ({len(raw)} bytes)"
    return (f"{shown} is not UTF-8 (byte 0x{raw[offset]:02x} at offset {offset}); "
            "irflow reads command-line text as UTF-8: pass it in UTF-8 (a terminal or script in another "
            "encoding can convert it, e.g. with iconv -t UTF-8)")


def json_text(value: Any, **options: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, **options)`` that UTF-8 can always encode.

    What irflow writes is UTF-8; a lone surrogate that is no user text (the
    name of a corpus whose folder name is not UTF-8) is written as its
    ``\\uXXXX`` escape, which JSON reads back as the same string.  Surrogates
    only occur inside JSON strings (everything else ``json.dumps`` writes is
    ASCII), so the escape is always in a string.

    >>> json_text({"name": "caf\\udce9"})
    '{"name": "caf\\\\udce9"}'
    """
    return escape_surrogates(json.dumps(value, ensure_ascii=False, **options))


def escape_surrogates(text: str) -> str:
    """JSON text with each lone surrogate written as its ``\\uXXXX`` escape (see :func:`json_text`)."""
    if not text.isascii() and _SURROGATE.search(text) is not None:
        text = _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
    return text


#: Characters shown as their escape: C0 controls but tab, newline and carriage return; DEL and C1
#: controls; the bidirectional controls (marks, embeddings, overrides, isolates); lone surrogates
#: (U+FFFD, below).
_INVISIBLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape_code(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """``text`` with the characters that act on a reader shown as their escapes (``\\x1b``, ``\\u202e``).

    C0 controls but tab, newline and carriage return, DEL and the C1 controls
    (a terminal's escape sequences), and the bidirectional controls (which
    reorder what follows them: ``exe.txt`` turned around).  What a terminal
    prints; lone surrogates are left to the output's encoder (a path's bytes
    print as given).
    """
    if text.isascii() and text.isprintable():
        return text
    return _INVISIBLE.sub(_escape_code, text)


def visible(text: str) -> str:
    """``text`` as a report shows it: lone surrogates as U+FFFD, controls as their escapes (:func:`escape_controls`).

    A Python ``str`` never holds a surrogate *pair* (JSON and Python join the
    two halves into one character), so every surrogate left is alone.
    """
    if not text.isascii():
        text = _SURROGATE.sub("\ufffd", text)
    return escape_controls(text)
