"""Safe HTML and SVG for irflow's reports and notebook views: one small builder that escapes by context.

Every value a report shows may come from a stranger (record texts, metadata,
queries, recipe and stage names, trace files), so markup is never made by
formatting a value into a string.  It is made by :func:`el`, which escapes
each child for HTML text and each attribute value for a quoted attribute,
and refuses what no report needs and an attacker would want: an event
handler attribute (``onclick``), a URL attribute that is not a fragment
(``href="#..."``) or an inline image (``data:image/...``), a tag or
attribute name that is not a plain identifier.  Data for a page's script
goes through :func:`script_json` (JSON with ``<``, ``>``, ``&``, U+2028 and
U+2029 escaped, so ``</script>`` or ``<!--`` in a value cannot end the
element).  SVG is built with the same :func:`el`: inline SVG in HTML is read
by the HTML parser, so the same escaping holds.

What is shown is first made *visible* (:func:`irflow.util.unicode.visible`): a lone surrogate
(text from an old file, half of a ``\\ud83d\\ude00`` pair) becomes U+FFFD, and
the invisible characters that change how text reads — bidirectional
controls (U+202E turns ``exe.txt`` around), C0 and C1 controls — are shown
as their escapes (``\\u202e``), so a table says what a value holds.

>>> str(el("td", {"title": 'a"b'}, "<script>"))
'<td title="a&quot;b">&lt;script&gt;</td>'
>>> visible("abc\\u202edef\\ud800")
'abc\\\\u202edef�'
"""

from __future__ import annotations

import html
import json
import math
import re
import secrets
from collections.abc import Iterable, Mapping
from numbers import Real
from typing import Any

from irflow.util.unicode import escape_surrogates, visible

__all__ = ["Markup", "visible", "escape", "el", "join", "script_json", "json_for_script", "page", "fragment",
           "CSP", "number"]


class Markup(str):
    """Markup made by this module (:func:`el`, :func:`join`, :func:`script_json`): inserted as it is.

    Only this module makes it from values; code elsewhere makes it from its own
    constants (a style sheet, a script), never from data.
    """

    __slots__ = ()


def number(value: float, digits: int = 1) -> str:
    """A coordinate or size for an SVG attribute: fixed decimals, never ``nan`` or ``inf``."""
    kind = type(value)
    if kind is not float and kind is not int:  # the common cases first: a chart has thousands of these
        if isinstance(value, bool) or not isinstance(value, Real):
            return "0"
        value = float(value)
    if not math.isfinite(value):
        return "0"
    return f"{value:.{digits}f}"


def escape(value: Any) -> str:
    """``value`` as text for HTML content or a quoted attribute (``&<>"'`` escaped), made visible."""
    return html.escape(visible(value if isinstance(value, str) else str(value)), quote=True)


_NAME = re.compile(r"[a-zA-Z][a-zA-Z0-9]*(?:[-:][a-zA-Z0-9]+)*\Z")
_URL_ATTRIBUTES = frozenset({"href", "xlink:href", "src", "action", "formaction", "poster", "srcset", "background",
                             "cite", "data", "ping"})
_SAFE_URL = re.compile(r"#[A-Za-z0-9_.:-]*\Z|data:image/(?:png|gif|jpeg|webp);base64,[A-Za-z0-9+/=]*\Z")
_VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "col", "wbr"})


def _attribute(name: str, value: Any) -> str:
    if not _NAME.match(name) or name.lower().startswith("on") or name.lower() in ("srcdoc", "formaction"):
        raise ValueError(f"attribute {name!r} is not one a report writes")
    if value is True:
        return f" {name}"
    text = value if isinstance(value, str) else str(value)
    if name.lower() in _URL_ATTRIBUTES and not _SAFE_URL.match(text):
        raise ValueError(f"attribute {name}={text[:40]!r}: a report links only within the page or to inline images")
    return f' {name}="{escape(text)}"'


def _children(children: Iterable[Any]) -> Iterable[str]:
    for child in children:
        if child is None or child is False:
            continue
        if isinstance(child, Markup):
            yield child
        elif isinstance(child, str):
            yield escape(child)
        elif isinstance(child, (int, float)):
            yield escape(child)
        elif isinstance(child, Iterable):
            yield from _children(child)
        else:
            yield escape(child)


def el(tag: str, attributes: Mapping[str, Any] | None = None, *children: Any) -> Markup:
    """The element ``<tag attributes>children</tag>``; every attribute value and text child escaped.

    ``None`` / ``False`` attribute values and children are left out; ``True``
    is a bare attribute; a child that is :class:`Markup` is kept as it is, a
    list is flattened.  ``script`` and ``style`` are not made here (their
    content is not HTML text): see :func:`script_json` and :func:`page`.
    """
    if not _NAME.match(tag) or tag.lower() in ("script", "style", "iframe", "object", "embed", "base", "meta",
                                               "link", "form", "foreignobject", "template"):
        raise ValueError(f"element {tag!r} is not one a report writes with el()")
    attrs = "".join(_attribute(name, value) for name, value in (attributes or {}).items()
                    if value is not None and value is not False)
    if tag.lower() in _VOID:
        return Markup(f"<{tag}{attrs}>")
    return Markup(f"<{tag}{attrs}>{''.join(_children(children))}</{tag}>")


def join(*parts: Any) -> Markup:
    """Children as one piece of markup (text escaped, markup kept)."""
    return Markup("".join(_children(parts)))


_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_SCRIPT_UNSAFE_RE = re.compile("[<>&\u2028\u2029]")


def json_for_script(data: Any) -> str:
    """``data`` as JSON that is safe inside a ``<script>`` element: no ``<``, ``>``, ``&``, U+2028, U+2029.

    Each is written as its ``\\uXXXX`` escape, which JSON reads back as the same
    character, so no value can close the element or open a comment; a lone
    surrogate is written as its escape too (the page stays UTF-8).
    """
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return _SCRIPT_UNSAFE_RE.sub(lambda match: _SCRIPT_UNSAFE[match.group()], escape_surrogates(text))


def script_json(data: Any, element_id: str) -> Markup:
    """A ``<script type="application/json">`` holding ``data`` (read with ``JSON.parse(el.textContent)``).

    A data block is not run (its type is not JavaScript); its content is escaped anyway.
    """
    if not _NAME.match(element_id):
        raise ValueError(f"element id {element_id!r} is not a plain identifier")
    return Markup(f'<script type="application/json" id="{element_id}">{json_for_script(data)}</script>')


#: The page's Content-Security-Policy: nothing is fetched, styles inline, scripts only with the page's
#: nonce, images only inline; even a value that escaped its escaping could load or run nothing.
CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'nonce-{nonce}'; img-src data:; "
       "base-uri 'none'; form-action 'none'")


def fragment(body: Markup, *, style: str) -> str:
    """A piece of HTML for a notebook cell: a ``<style>`` (the caller's constant) and ``body``; no script."""
    if "</" in style:
        raise ValueError("a fragment's style is a constant without closing tags")
    return f"<style>{style}</style>{body}"


def page(title: str, body: Markup, *, style: str, script: str = "", lang: str = "en") -> str:
    """A whole self-contained document: the CSP first, the title, ``style`` and ``body``, then ``script``.

    ``style`` and ``script`` are the caller's constants (never data: data goes
    into the body through :func:`el` or :func:`script_json`); the script runs
    only with the page's nonce.  The ``<html>`` element has class ``nojs``,
    which the script replaces with ``js``: the page reads without JavaScript
    and the script only adds interaction.
    """
    if "</" in style or "</" in script:
        raise ValueError("a page's style and script are constants without closing tags")
    nonce = secrets.token_urlsafe(18)
    head = (f'<meta charset="utf-8">\n<meta http-equiv="Content-Security-Policy" content="{CSP.format(nonce=nonce)}">\n'
            '<meta name="referrer" content="no-referrer">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{escape(title)}</title>\n<style>{style}</style>")
    tail = f'<script nonce="{nonce}">{script}</script>' if script else ""
    return (f'<!DOCTYPE html>\n<html lang="{escape(lang)}" class="nojs">\n<head>\n{head}\n</head>\n'
            f"<body>\n{body}\n{tail}\n</body>\n</html>\n")
