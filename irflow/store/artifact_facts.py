"""Whether every live record of a corpus is an artifact of its own (its collapse per artifact changes nothing).

A per-artifact search fetches ``max(5 k, 50)`` rows per query by default
so that the collapse to each artifact's best surface still finds ``k``
artifacts.  On a corpus whose live records all belong to different
artifacts (every BEIR collection, a corpus of one surface per artifact)
the first ``k`` rows of any ranking already are ``k`` artifacts, so the
first stages may fetch ``k`` (``stages/_util.py``, the ``lean`` stage
parameter) and give the same answer.

Decided from 64-bit digests of the artifact ids (``irflow.kernels.digests``:
vectorized over a stored column, no string decoded), computed once per
segment (segments never change) and kept by it; a corpus state sorts its
live rows' digests once and looks for two equal ones.  Two different ids
with one digest read as a repeated artifact: the answer errs towards
"not unique" (a deeper fetch, the same hits), never the other way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from irflow.kernels.digests import digests_of, string_digests
from irflow.store.columnar import StringColumn

__all__ = ["artifact_digests", "distinct_live"]

_KEY = "artifact_digests"


def artifact_digests(segment: Any) -> np.ndarray:
    """A digest of each row's artifact id (uint64, read-only), computed once per segment and kept in it."""
    found = segment.derived.get(_KEY)
    if found is None:
        column = segment.store.artifact_column
        if isinstance(column, StringColumn):
            found = string_digests(column.blob, column.offsets)
        else:
            found = digests_of([str(a) for a in np.asarray(column, dtype=object).tolist()])
        found.flags.writeable = False
        segment.derived[_KEY] = found  # a race computes it twice: the same array either way
    digests: np.ndarray = found
    return digests


def distinct_live(parts: Sequence[tuple[np.ndarray, np.ndarray | None]]) -> bool:
    """Whether the live rows of ``parts`` — (digests, live mask or None for every row) — hold no artifact twice.

    >>> a = np.array([1, 2, 3], dtype=np.uint64)
    >>> distinct_live([(a, None)]), distinct_live([(a, None), (a, np.array([False, False, True]))])
    (True, False)
    """
    live = [d if m is None else d[m] for d, m in parts]
    digests = np.sort(np.concatenate(live)) if live else np.empty(0, dtype=np.uint64)
    return bool(digests.size < 2 or not (digests[1:] == digests[:-1]).any())
