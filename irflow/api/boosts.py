"""Score boosts: structural ranking signals added to a candidate's score.

A boost is a ``hit -> float`` (a :data:`~irflow.api.constants.ScoreBoost`) that
``search()`` adds after fusion and the reranker, before the per-artifact
collapse.  The shipped one, :func:`dependency_evidence_boost`, rewards
candidates that depend on libraries the caller deems relevant: cheap,
model-free, and not fooled by prose (a task queue whose README says "DAG"
does not depend on graph libraries).

>>> from irflow.store.records import SearchHit
>>> boost = dependency_evidence_boost({"networkx"}, weight=0.1)
>>> boost(SearchHit("unbox", "description", 0.4, "", {"deps": ["networkx>=3"]}))
0.1
"""

from __future__ import annotations

import functools
import numbers
import re
from typing import Any, Iterable

import attrs

from irflow.errors import BoostError
from irflow.store.records import SearchHit
from irflow.engine.validators import is_finite

__all__ = [
    "BoostError",
    "DependencyEvidenceBoost",
    "dependency_evidence_boost",
    "normalize_name",
    "requirement_name",
]


_SEPARATORS = re.compile(r"[-_.]+")
# A PEP 508 project name: letters/digits, with . _ - inside, starting and ending alphanumeric.
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")


def normalize_name(name: str) -> str:
    """The PEP 503 normalized form of a project name: lowercase, runs of ``-_.`` become ``-``.

    >>> normalize_name("Foo__Bar.baz")
    'foo-bar-baz'
    """
    return _SEPARATORS.sub("-", name).lower()


@functools.lru_cache(maxsize=4096)
def requirement_name(spec: str) -> str | None:
    """The bare normalized project name of a requirement string, or None if it names none.

    Drops environment markers (after ``;``), a direct URL (after ``@``),
    extras (``[..]``), version specifiers and whitespace.  Cached: the same
    dependency strings recur across every candidate of a search.

    >>> requirement_name("Requests[security] >= 2.8 ; python_version < '3.8'")
    'requests'
    >>> requirement_name("my_pkg @ https://example.com/my_pkg.zip")
    'my-pkg'
    """
    head = spec.split(";", 1)[0].split("@", 1)[0].strip()
    match = _NAME.match(head)
    if match is None or head[match.end():].lstrip()[:1] in (":", "+"):
        return None  # no name, or a bare / VCS URL ("https://...", "git+https://...")
    return normalize_name(match.group(0))


def _split_requirements(text: str) -> list[str]:
    """Split a single deps string into requirements, on newlines and top-level commas.

    Commas inside ``[..]`` (extras) or ``(..)`` (old-style version lists) stay;
    a piece that is only a version clause (``<2`` in ``numpy>=1,<2``) names no
    project and is dropped later.
    """
    pieces: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char in "[(":
            depth += 1
        elif char in "])":
            depth = max(depth - 1, 0)
        if (char == "," and depth == 0) or char == "\n":
            pieces.append("".join(current))
            current = []
        else:
            current.append(char)
    pieces.append("".join(current))
    return pieces


def _dependency_names(value: Any) -> set[str]:
    """Normalized names in a deps field: a list of requirement strings, or one string."""
    if value is None:
        return set()
    if isinstance(value, str):
        specs: Iterable[Any] = _split_requirements(value)
    elif isinstance(value, Iterable) and not isinstance(value, (bytes, dict)):
        specs = value
    else:
        return set()  # a field of another shape carries no dependency evidence
    names = set()
    for spec in specs:
        if isinstance(spec, str):  # messy metadata (None, numbers) is evidence of nothing
            name = requirement_name(spec)
            if name:
                names.add(name)
    return names


def _relevant(value: Any) -> frozenset[str]:
    """Normalize *relevant_libs* like the dependencies; a single str is one library."""
    items = [value] if isinstance(value, str) else value
    try:
        items = list(items)
    except TypeError:
        raise BoostError(f"relevant_libs must be an iterable of library names, got {type(value).__name__}") from None
    names = set()
    for item in items:
        name = requirement_name(item) if isinstance(item, str) else None
        if name is None:
            raise BoostError(f"relevant_libs holds {item!r}, which is not a library name (e.g. 'networkx')")
        names.add(name)
    return frozenset(names)


def _check_weight(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not is_finite(value):
        raise BoostError(f"weight must be a finite number (on the search's score scale), got {value!r}")


def _check_saturate(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BoostError(f"saturate must be an integer >= 1 (relevant dependencies for the full weight), got {value!r}")


def _check_field(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise BoostError(f"deps_field must be a non-empty metadata key, got {value!r}")


@attrs.frozen
class DependencyEvidenceBoost:
    """A :data:`~irflow.api.constants.ScoreBoost` rewarding dependencies on relevant libraries.

    ``boost(hit) = weight * min(n, saturate) / saturate``, where ``n`` counts
    the distinct relevant names among the hit's ``metadata[deps_field]``
    (0.0 when there are none).  Build it with :func:`dependency_evidence_boost`.
    """

    # Shown sorted: a frozenset's own repr order changes between interpreter runs.
    relevant_libs: frozenset[str] = attrs.field(converter=_relevant, repr=lambda names: repr(sorted(names)))
    weight: float = attrs.field(validator=_check_weight)
    saturate: int = attrs.field(default=1, validator=_check_saturate)
    deps_field: str = attrs.field(default="deps", validator=_check_field)

    def matches(self, hit: SearchHit) -> frozenset[str]:
        """The relevant libraries *hit* depends on (normalized names); useful to explain a boost."""
        return frozenset(_dependency_names(hit.metadata.get(self.deps_field)) & self.relevant_libs)

    def __call__(self, hit: SearchHit) -> float:
        n = len(self.matches(hit))
        if n == 0:
            return 0.0  # not weight * 0, which is -0.0 for a negative weight
        return float(self.weight * min(n, self.saturate) / self.saturate)


def dependency_evidence_boost(
    relevant_libs: Iterable[str], *, weight: float, saturate: int = 1, deps_field: str = "deps"
) -> DependencyEvidenceBoost:
    """A ``dep_boost`` for ``search()``: reward dependencies on *relevant_libs*.

    Reads the candidate's ``metadata[deps_field]`` (a list of requirement
    strings, or one string with one requirement per line or comma), reduces
    each spec to its bare PEP 503-normalized name — and *relevant_libs* the
    same way — and returns ``weight * min(n, saturate) / saturate`` where
    ``n`` counts the distinct relevant names found.  With ``saturate=1`` one
    relevant dependency earns the full *weight*.  *relevant_libs* is the
    caller's decision (which libraries matter for a goal belongs to the
    planning layer).  *weight* is added on the search's own score scale (RRF
    near 0.03, cosine near 0.5), so tune it per configuration.

    >>> from irflow.store.records import SearchHit
    >>> boost = dependency_evidence_boost({"networkx"}, weight=0.1)
    >>> boost(SearchHit("unbox", "description", 0.4, "", {"deps": ["networkx>=3"]}))
    0.1
    >>> boost(SearchHit("au", "description", 0.5, "", {"deps": ["anyio"]}))
    0.0
    """
    return DependencyEvidenceBoost(relevant_libs, weight, saturate, deps_field)
