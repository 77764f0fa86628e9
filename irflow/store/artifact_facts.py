"""Whether every live record of a corpus is an artifact of its own (its collapse per artifact changes nothing).

A per-artifact search fetches ``max(5 k, 50)`` rows per query by default
so that the collapse to each artifact's best surface still finds ``k``
artifacts.  On a corpus whose live records all belong to different
artifacts (every BEIR collection, a corpus of one surface per artifact)
the first ``k`` rows of any ranking already are ``k`` artifacts, so the
first stages may fetch ``k`` (``stages/_util.py``, the ``lean`` stage
parameter) and give the same answer.

Decided from 64-bit digests of the artifact ids (``irflow.kernels.digests``:
vectorized over a stored column, no string decoded), computed and sorted
once per segment (segments never change) and kept by it; a corpus state
takes each segment's live digests in their sorted order (one gather), and
one stable sort merges those sorted runs (a few times faster than sorting
the digests afresh: ~15 ms at 1M rows) before looking for two equal
neighbours.  Two different ids with one digest read as a repeated
artifact: the answer errs towards "not unique" (a deeper fetch, the same
hits), never the other way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from irflow.kernels.digests import digests_of, string_digests
from irflow.store.columnar import StringColumn

__all__ = ["artifact_digests", "distinct_live"]

_KEY = "artifact_digests"


def artifact_digests(segment: Any) -> tuple[np.ndarray, np.ndarray]:
    """Each row's artifact-id digest in ascending order, and the rows in that order (computed once per segment).

    Read-only uint64 digests and int64 rows, kept in the segment's
    ``derived`` cache (a race computes them twice: the same arrays either way).
    """
    found = segment.derived.get(_KEY)
    if found is None:
        column = segment.store.artifact_column
        if isinstance(column, StringColumn):
            digests = string_digests(column.blob, column.offsets)
        else:
            digests = digests_of([str(a) for a in np.asarray(column, dtype=object).tolist()])
        order = np.argsort(digests, kind="stable")
        found = (digests[order], order)
        for array in found:
            array.flags.writeable = False
        segment.derived[_KEY] = found
    kept: tuple[np.ndarray, np.ndarray] = found
    return kept


def distinct_live(parts: Sequence[tuple[tuple[np.ndarray, np.ndarray], np.ndarray | None]]) -> bool:
    """Whether the live rows of ``parts`` hold no artifact twice.

    Each part: its ``artifact_digests`` (sorted digests, their rows) and its
    live mask (None: every row).

    >>> a = (np.array([1, 2, 3], dtype=np.uint64), np.array([2, 0, 1]))
    >>> distinct_live([(a, None)]), distinct_live([(a, None), (a, np.array([True, False, False]))])
    (True, False)
    """
    runs = [ordered if live is None else ordered[live[rows]] for (ordered, rows), live in parts]
    digests = np.sort(np.concatenate(runs), kind="stable") if runs else np.empty(0, dtype=np.uint64)
    return bool(digests.size < 2 or not (digests[1:] == digests[:-1]).any())
