"""The application's registry of named objects that recipes may refer to.

A recipe file is data: it can never name code to import.  A stage parameter
that takes a callable (a reranker, a formulator, a score boost) accepts, from
Python, the callable itself — and, from a recipe file, only a *string naming
an entry of this registry*, which the application filled on purpose::

    import irflow.engine.registry
    irflow.registry.register("my_ce", my_cross_encoder)
    # recipe: [stages.rerank] kind = "rerank"  reranker = "my_ce"

Nothing is ever imported by name; an unknown name is an error that lists the
registered names.
"""

from __future__ import annotations

import contextlib
import difflib
import re
import threading
from typing import Any, Iterator

from irflow.errors import UnknownEntry

__all__ = ["UnknownEntry", "register", "unregister", "lookup", "names", "resolve", "registered"]

_ENTRIES: dict[str, Any] = {}
_LOCK = threading.Lock()
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]*\Z")


def register(name: str, obj: Any, *, replace: bool = False) -> Any:
    """Register ``obj`` under ``name`` and return it.

    Names are identifier-like (letters, digits, ``_ . : -``).  Registering a
    taken name raises ``ValueError`` unless ``replace=True``.

    >>> register("doc_identity", str.strip, replace=True) is str.strip
    True
    >>> unregister("doc_identity")
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"registry names are identifier-like strings (letters, digits, _ . : -), got {name!r}")
    with _LOCK:
        if name in _ENTRIES and _ENTRIES[name] is not obj and not replace:
            raise ValueError(f"registry name {name!r} is taken; pass replace=True to replace it")
        _ENTRIES[name] = obj
    return obj


def unregister(name: str) -> None:
    """Remove ``name`` (no error when absent)."""
    with _LOCK:
        _ENTRIES.pop(name, None)


def names() -> tuple[str, ...]:
    """The registered names, sorted."""
    with _LOCK:
        return tuple(sorted(_ENTRIES))


def lookup(name: str, *, what: str = "object") -> Any:
    """The object registered under ``name``; ``UnknownEntry`` (a KeyError) if none.

    The message lists the registered names, the closest match, and the call
    that registers one.
    """
    with _LOCK:
        if name in _ENTRIES:
            return _ENTRIES[name]
        known = sorted(_ENTRIES)
    hint = difflib.get_close_matches(name, known, n=1)
    did = f" (did you mean {hint[0]!r}?)" if hint else ""
    listing = ", ".join(known) if known else "(none registered)"
    raise UnknownEntry(
        f"no {what} named {name!r} in irflow.registry{did}; registered names: {listing}. "
        f"Register it first: irflow.registry.register({name!r}, obj)"
    )


def resolve(value: Any, *, what: str = "callable") -> Any:
    """A callable given directly, or the registry entry a string names; None stays None.

    Recipe files can only hold strings, so this is the one place where a
    name becomes code — and only code the application registered.
    """
    if value is None or callable(value):
        return value
    if isinstance(value, str):
        return lookup(value, what=what)
    raise TypeError(f"expected a {what} or the name of an irflow.registry entry, got {type(value).__name__}")


@contextlib.contextmanager
def registered(name: str, obj: Any) -> Iterator[Any]:
    """Register ``obj`` for the duration of a ``with`` block (tests, scripts)."""
    with _LOCK:
        previous = _ENTRIES.get(name, _MISSING)
    register(name, obj, replace=True)
    try:
        yield obj
    finally:
        with _LOCK:
            if previous is _MISSING:
                _ENTRIES.pop(name, None)
            else:
                _ENTRIES[name] = previous


_MISSING = object()
