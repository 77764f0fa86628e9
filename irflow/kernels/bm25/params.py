"""BM25's parameters: the variant, k1, b, epsilon, delta, and where the statistics come from.

Validated when made (attrs validators), so a recipe or a ``search(bm25=...)``
call with a bad value fails with a message naming the parameter, its range
and what was given, before any scoring.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs
import numpy as np

from irflow.errors import BM25ParamError

__all__ = ["BM25Params", "BM25ParamError", "VARIANTS", "STATS", "DEFAULT_DELTA"]

VARIANTS: tuple[str, ...] = ("okapi", "bm25l", "bm25plus")
STATS: tuple[str, ...] = ("candidates", "corpus")
#: rank_bm25's default delta per variant (Okapi has none).
DEFAULT_DELTA: dict[str, float] = {"bm25l": 0.5, "bm25plus": 1.0}


def _choice(options: tuple[str, ...]) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value not in options:
            raise BM25ParamError(f"bm25 {attribute.name} must be one of {', '.join(options)}; got {value!r}")
    return check


def _number(low: float | None = None, high: float | None = None, optional: bool = False) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not _finite(value):
            raise BM25ParamError(f"bm25 {attribute.name} must be a finite number, got {value!r}")
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f">= {low}" if high is None else f"between {low} and {high}"
            raise BM25ParamError(f"bm25 {attribute.name} must be {bounds}, got {value!r}")
    return check


def _float_or_none(value: Any) -> Any:
    # keep non-numbers as they are so the validator can name them in its error
    # (and ints no float holds, 10**400: float() would overflow before the validator could speak)
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) and _finite(value):
        return float(value)
    return value


def _finite(value: Any) -> bool:
    # math.isfinite raises OverflowError on an int no float holds (10**400): that is not finite here
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


@attrs.frozen
class BM25Params:
    """BM25 variant, its parameters, and where its statistics come from.

    ``variant``: "okapi" (default, rank_bm25's BM25Okapi), "bm25l", "bm25plus".
    ``k1`` >= 0 and ``0 <= b <= 1`` as usual; ``epsilon`` scales Okapi's floor
    on negative idf; ``delta`` is BM25L / BM25Plus's lower bound (None: the
    variant's rank_bm25 default, 0.5 / 1.0).  Parameters a variant does not
    use are ignored.  ``stats="candidates"`` (default, the seed's semantics)
    computes N, average length and document frequencies over the candidate
    rows; ``"corpus"`` over the whole corpus.

    >>> BM25Params.from_mapping({"k1": 1.2, "b": 0.5}).k1
    1.2
    """

    variant: str = attrs.field(default="okapi", validator=_choice(VARIANTS))
    k1: float = attrs.field(default=1.5, converter=_float_or_none, validator=_number(low=0.0))
    b: float = attrs.field(default=0.75, converter=_float_or_none, validator=_number(0.0, 1.0))
    epsilon: float = attrs.field(default=0.25, converter=_float_or_none, validator=_number())
    delta: float | None = attrs.field(default=None, converter=_float_or_none,
                                      validator=_number(optional=True))
    stats: str = attrs.field(default="candidates", validator=_choice(STATS))

    @property
    def effective_delta(self) -> float:
        """``delta``, or the variant's default when unset (0.0 for Okapi, which has none)."""
        return self.delta if self.delta is not None else DEFAULT_DELTA.get(self.variant, 0.0)

    @classmethod
    def from_mapping(cls, mapping: "Mapping[str, Any] | BM25Params | None") -> "BM25Params":
        """Parameters from a mapping such as the seed's ``bm25={"k1": 1.5, "b": 0.75}``.

        ``None`` gives the defaults; a ``BM25Params`` is returned as is.  An
        unknown key raises ``BM25ParamError`` naming the valid keys.
        """
        if mapping is None:
            return _defaults(cls)
        if isinstance(mapping, BM25Params):
            return mapping
        if not isinstance(mapping, Mapping):
            raise BM25ParamError(f"bm25 parameters must be a mapping, got {type(mapping).__name__}")
        valid = [a.name for a in attrs.fields(cls)]
        unknown = sorted(set(mapping) - set(valid), key=str)
        if unknown:
            raise BM25ParamError(
                f"unknown bm25 parameter(s) {', '.join(map(repr, unknown))}; valid keys are {', '.join(valid)}"
            )
        return cls(**mapping)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready parameters (for traces and recipe files)."""
        return attrs.asdict(self)


_DEFAULTS: dict[type, BM25Params] = {}


def _defaults(cls: type[BM25Params]) -> BM25Params:
    """``cls()``, made once (frozen: shared; every query without parameters asks for it)."""
    found = _DEFAULTS.get(cls)
    if found is None:
        found = _DEFAULTS[cls] = cls()
    return found
