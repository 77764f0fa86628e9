"""Records (what a corpus stores) and search hits (what callers get back).

A *record* is one stored surface of an artifact — its name, its description,
one chunk of its README, its dependency list.  An artifact has several
records; the corpus ledger lists them in plan order.  A *hit* is one record
as a search returns it: the seed API's ``SearchHit`` with the first five
fields positional, plus where it came from (``source``), which surface of its
artifact it is (``surface_index``) and the record it was read from.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Callable, Mapping

import attrs
import numpy as np

from irflow.util.fileio import shown

__all__ = ["Record", "SearchHit", "POINTER_KEYS"]

#: Metadata keys a hit's disclosure pointer is read from, first present wins.
POINTER_KEYS: tuple[str, ...] = ("pointer", "path", "url", "uri", "source_path")


def _vector(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    array = np.asarray(value, dtype=np.float32)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"a record vector must be a non-empty 1-d sequence of floats, got shape {array.shape}")
    return array


def _metadata(value: Mapping[str, Any] | None) -> dict[str, Any]:
    if type(value) is dict:  # the common case, without the (slow) abstract Mapping check: a copy all the same
        return dict(value)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"metadata must be a mapping, got {type(value).__name__}")
    return dict(value)


def _optional_index(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(value) or int(value) != value or not 0 <= value < 2**63:
        # stored as int64: 10**30 would end a build in an OverflowError, NaN and inf in a ValueError of int()
        raise ValueError(f"surface_index must be an integer from 0 to 2**63 - 1, got {shown(value)}")
    return int(value)


def _nonempty_str(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{attribute.name} must be a non-empty string, got {value!r}")


@attrs.frozen
class Record:
    """One stored surface of an artifact.

    ``surface_index`` is the record's position in its artifact's plan, one
    index across all surface kinds; left ``None`` it is filled at build time
    from the input order.  ``id`` defaults to :meth:`make_id` of the three.

    >>> Record("unbox", "description", "Unpack any archive.").surface_kind
    'description'
    """

    artifact_id: str = attrs.field(validator=_nonempty_str)
    surface_kind: str = attrs.field(validator=_nonempty_str)
    text: str = attrs.field(validator=attrs.validators.instance_of(str))
    metadata: dict[str, Any] = attrs.field(factory=dict, converter=_metadata)
    surface_index: int | None = attrs.field(default=None, converter=_optional_index)
    id: str | None = attrs.field(default=None)
    vector: np.ndarray | None = attrs.field(
        default=None, converter=_vector, eq=attrs.cmp_using(eq=lambda a, b: (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))), repr=False
    )

    def __attrs_post_init__(self) -> None:
        if self.id is None and self.surface_index is not None:
            object.__setattr__(self, "id", self.make_id(self.artifact_id, self.surface_kind, self.surface_index))

    @staticmethod
    def make_id(artifact_id: str, surface_kind: str, surface_index: int) -> str:
        """The deterministic record id of a surface: same inputs, same id, on any machine.

        A short digest of the three, so ids never depend on escaping rules and
        never collide in practice; traces show the artifact and kind beside it.
        """
        payload = json.dumps([artifact_id, surface_kind, int(surface_index)], ensure_ascii=False)
        # surrogatepass: any str gets an id (the same bytes as UTF-8 for all text build() accepts), so a
        # record is refused by build()'s check, naming the field, never by a UnicodeEncodeError here
        return hashlib.blake2b(payload.encode("utf-8", "surrogatepass"), digest_size=10).hexdigest()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Record":
        """A record from a mapping with the same keys as the constructor."""
        known = {f.name for f in attrs.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown record keys {unknown}; valid keys are {sorted(known)}")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping (the vector as a list, or omitted when absent)."""
        out: dict[str, Any] = {
            "id": self.id,
            "artifact_id": self.artifact_id,
            "surface_kind": self.surface_kind,
            "surface_index": self.surface_index,
            "text": self.text,
            "metadata": dict(self.metadata),
        }
        if self.vector is not None:
            out["vector"] = self.vector.tolist()
        return out


def _score(value: Any) -> float:
    score = float(value)
    if math.isnan(score):
        raise ValueError("a hit score must not be NaN")
    return score


@attrs.frozen
class SearchHit:
    """One search result: a record of an artifact, with its score.

    The first five fields are positional, as in the seed API:

    >>> hit = SearchHit("unbox", "description", 0.4, "", {"deps": ["networkx>=3"]})
    >>> hit.score, hit.source
    (0.4, None)
    """

    artifact_id: str
    surface_kind: str
    score: float = attrs.field(converter=_score)
    text: str = ""
    metadata: dict[str, Any] = attrs.field(factory=dict, converter=_metadata)
    source: str | None = None
    surface_index: int | None = None
    record_id: str | None = None

    @classmethod
    def _stored(cls, artifact_id: str, surface_kind: str, score: float, text: str, metadata: Mapping[str, Any],
                source: str | None, surface_index: int, record_id: str) -> "SearchHit":
        """A hit of a corpus's own columns, whose values already have their types (no converters run).

        ``score`` a Python float that is not NaN; ``metadata`` is copied, as
        the constructor does, so a caller changing a hit never changes the
        store.  Every ``search()`` makes ``k`` of them.
        """
        hit = object.__new__(cls)
        # frozen: each field set through its slot, as attrs' own __init__ does (half the cost of
        # object.__setattr__, which looks the slot up by name every time)
        a, b, c, d, e, f, g, h = _SLOTS
        a(hit, artifact_id)
        b(hit, surface_kind)
        c(hit, score)
        d(hit, text)
        e(hit, dict(metadata))
        f(hit, source)
        g(hit, surface_index)
        h(hit, record_id)
        return hit

    @property
    def pointer(self) -> str | None:
        """The disclosure pointer (a path or URL) read from metadata, if any."""
        for key in POINTER_KEYS:
            value = self.metadata.get(key)
            if value:
                return str(value)
        return None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping of every field."""
        return {
            "artifact_id": self.artifact_id,
            "surface_kind": self.surface_kind,
            "score": self.score,
            "text": self.text,
            "metadata": dict(self.metadata),
            "source": self.source,
            "surface_index": self.surface_index,
            "record_id": self.record_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SearchHit":
        """The inverse of :meth:`to_dict`."""
        return cls(**dict(data))


#: The slot setters of SearchHit's fields, in field order (for :meth:`SearchHit._stored`).
_SLOTS: tuple[Callable[[SearchHit, Any], None], ...] = tuple(
    SearchHit.__dict__[field.name].__set__ for field in attrs.fields(SearchHit))
