"""Port types: what flows along an edge of a recipe's DAG.

Every stage declares the type of each input port and of its one output, and
the DAG is type-checked when it is built — a recipe that wires a candidate
mask into a stage expecting ranked candidates is refused before any data
moves, with a message saying which types would fit.

The types are deliberately few and coarse:

- ``QUERY``      the raw query batch as the caller gave it (the implicit
                 source node named ``"query"``);
- ``QUERIES``    a query batch that may have been reformulated (one original
                 query -> several texts); a ``QUERY`` fits a ``QUERIES`` port;
- ``MASK``       one boolean array over the corpus rows (the candidate set);
- ``CANDIDATES`` a ranked, columnar candidate batch (:class:`irflow.engine.batches.Candidates`);
- ``HITS``       per original query, a list of ``SearchHit``;
- ``CONTEXTS``   per original query, expanded contexts (sibling surfaces).

>>> fits(QUERY, QUERIES), fits(MASK, CANDIDATES)
(True, False)
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = [
    "PortType",
    "Port",
    "QUERY",
    "QUERIES",
    "MASK",
    "CANDIDATES",
    "HITS",
    "CONTEXTS",
    "PORT_TYPES",
    "fits",
    "fitting_sources",
]


@attrs.frozen
class PortType:
    """The type of a port: a name (shown in messages) and one line of documentation."""

    name: str
    doc: str = attrs.field(default="", eq=False)

    def __str__(self) -> str:
        return self.name


QUERY = PortType("Query", "the raw query batch, one text per original query")
QUERIES = PortType("Queries", "a query batch, possibly several texts per original query")
MASK = PortType("Mask", "a boolean candidate mask over the corpus rows")
CANDIDATES = PortType("Candidates", "ranked candidates per query, columnar, with a score scale")
HITS = PortType("Hits", "per original query, a list of SearchHit")
CONTEXTS = PortType("Contexts", "per original query, hits expanded with their sibling surfaces")

#: Every port type by name.
PORT_TYPES: dict[str, PortType] = {t.name: t for t in (QUERY, QUERIES, MASK, CANDIDATES, HITS, CONTEXTS)}

# Which source types fit a destination type besides the type itself: a raw
# query batch is a (trivially formulated) query batch.
_WIDENING: dict[PortType, tuple[PortType, ...]] = {QUERIES: (QUERY,)}


def fits(source: PortType, destination: PortType) -> bool:
    """True when an output of type ``source`` may feed an input of type ``destination``."""
    return source == destination or source in _WIDENING.get(destination, ())


def fitting_sources(destination: PortType) -> tuple[PortType, ...]:
    """The output types that fit an input of type ``destination`` (for messages)."""
    return (destination, *_WIDENING.get(destination, ()))


def _check_type(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, PortType):
        raise TypeError(f"{attribute.name} must be a PortType (e.g. irflow.engine.ports.CANDIDATES), got {value!r}")


@attrs.frozen
class Port:
    """An input port of a stage kind.

    ``variadic`` ports take any number (at least ``minimum``) of upstream
    stages and hand the stage a mapping ``{upstream stage name: value}`` in
    declared order — a fuse stage keys its weights by those names.  A port
    of type ``QUERY`` or ``QUERIES`` that a recipe leaves unwired is fed the
    raw query batch automatically; other unwired ports are an error unless
    ``required`` is False.

    >>> Port("mask", MASK, "the candidate rows").is_query
    False
    """

    name: str
    type: PortType = attrs.field(validator=_check_type)
    doc: str = ""
    required: bool = True
    variadic: bool = False
    minimum: int = 1

    @property
    def is_query(self) -> bool:
        """True for ports the raw query batch feeds when left unwired."""
        return self.type in (QUERY, QUERIES)

    def describe(self) -> str:
        """``name (Type)`` or ``name (Type, any number)`` for messages."""
        extra = ", any number" if self.variadic else ""
        return f"{self.name} ({self.type}{extra})"
