"""When a corpus merges its segments by itself: a tiered policy, plus deleted rows and a cap on the count.

Every segment and every tombstone costs search time (each segment is asked
for its top rows; a deleted row's postings and codes are still read until a
merge drops them), so after each commit a corpus asks its
:class:`MergePolicy` which runs of adjacent segments to merge, and commits
each merge on its own (the user's operation is durable first).  A merge never changes an answer (see
:mod:`irflow.store.merging`).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import attrs

__all__ = ["MergePolicy", "SegmentInfo"]


@attrs.frozen
class SegmentInfo:
    """A segment as ``corpus.segments`` shows it (and the merge policy reads it).

    ``rows`` (deleted ones included), ``live``, ``stale`` (deleted out of
    band by ``delete_record`` and still listed by the ledger: a merge keeps
    them listed); its ``id``; on disk, its ``files`` and their ``bytes``.
    """

    rows: int
    live: int
    stale: int = 0
    id: str = ""
    files: tuple[str, ...] = ()
    bytes: int | None = None

    @property
    def deleted(self) -> int:
        return self.rows - self.live

    @property
    def removable(self) -> int:
        """Deleted rows a merge drops (not those the ledger still lists)."""
        return self.rows - self.live - self.stale

    @property
    def droppable(self) -> bool:
        """No live row and nothing listed: the segment can go without a trace."""
        return self.live == 0 and self.stale == 0


def _fraction(instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"MergePolicy.{attribute.name} must be a fraction in (0, 1], got {value!r}")


def _at_least(low: int) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"MergePolicy.{attribute.name} must be an integer >= {low}, got {value!r}")
    return check


@attrs.frozen
class MergePolicy:
    """Which adjacent segments a corpus merges after each commit (``corpus.merge_policy``).

    In this order, over the segments in row order:

    1. a segment with no live row (and no deleted row its ledger still
       lists) is dropped — nothing is written;
    2. a segment whose deleted fraction is at least ``max_deleted`` is
       rewritten alone, without its deleted rows (those deleted out of band,
       which the ledger still lists, stay: see :mod:`irflow.store.merging`);
    3. tiers: a segment's tier is ``floor(log(live rows, merge_factor))``;
       ``merge_factor`` adjacent segments of one tier merge into one (of
       the next tier, about) — many small appends become few large segments,
       and a row is rewritten about ``log(corpus / append, merge_factor)``
       times in all;
    4. never more than ``max_segments``: the adjacent pair with the fewest
       live rows merges until there are no more.

    ``MergePolicy.never()`` merges nothing (``corpus.compact()`` still
    merges everything).  A merge never changes an answer.

    >>> MergePolicy().plan([SegmentInfo(1000, 1000)] + [SegmentInfo(10, 10)] * 10)
    [(1, 11)]
    >>> MergePolicy().plan([SegmentInfo(100, 0), SegmentInfo(100, 60)])
    [(0, 1), (1, 2)]
    """

    max_deleted: float = attrs.field(default=0.3, validator=_fraction)
    merge_factor: int = attrs.field(default=10, validator=_at_least(2))
    max_segments: int = attrs.field(default=12, validator=_at_least(1))
    enabled: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))

    @classmethod
    def never(cls) -> "MergePolicy":
        """A policy that merges nothing by itself."""
        return cls(enabled=False)

    def tier(self, live: int) -> int:
        return int(math.log(max(live, 1), self.merge_factor) + 1e-9)

    def plan(self, segments: Sequence[SegmentInfo]) -> list[tuple[int, int]]:
        """Runs ``[start, end)`` of adjacent segments to replace: each by one merged segment, or by none.

        A run whose segments are all droppable is dropped; any other is
        merged into one segment.  Runs do not overlap and come in order.
        """
        if not self.enabled or not segments:
            return []
        # groups of adjacent segments, each [start, end): a group of one that is not marked stays as it is
        groups = [[i, i + 1] for i in range(len(segments))]
        marked = [s.droppable or bool(s.rows and s.live and s.removable and s.removable >= self.max_deleted * s.rows)
                  for s in segments]
        if all(s.droppable for s in segments):
            marked[-1] = False  # a corpus keeps one segment, if empty
        groups, marked = self._tiers(segments, groups, marked)
        groups, marked = self._cap(segments, groups, marked)
        return [(g[0], g[1]) for g, m in zip(groups, marked) if m or g[1] - g[0] > 1]

    def _live(self, segments: Sequence[SegmentInfo], group: list[int]) -> int:
        return sum(s.live for s in segments[group[0]:group[1]])

    def _tiers(self, segments: Sequence[SegmentInfo], groups: list[list[int]],
               marked: list[bool]) -> tuple[list[list[int]], list[bool]]:
        out: list[list[int]] = []
        out_marked: list[bool] = []
        run: list[int] = []  # indices into out of the current run of one tier
        for group, mark in zip(groups, marked):
            live = self._live(segments, group)
            if live == 0:  # dropped: not part of a tier
                out.append(group)
                out_marked.append(mark)
                continue
            tier = self.tier(live)
            if run and self.tier(self._live(segments, out[run[0]])) != tier:
                run = []
            out.append(group)
            out_marked.append(mark)
            run.append(len(out) - 1)
            if len(run) == self.merge_factor:
                first, last = run[0], run[-1]
                out[first:last + 1] = [[out[first][0], out[last][1]]]
                out_marked[first:last + 1] = [True]
                run = []
        return out, out_marked

    def _cap(self, segments: Sequence[SegmentInfo], groups: list[list[int]],
             marked: list[bool]) -> tuple[list[list[int]], list[bool]]:
        def kept() -> list[int]:
            return [i for i, g in enumerate(groups) if self._live(segments, g) or not marked[i]]
        remaining = kept()
        while len(remaining) > self.max_segments:
            pairs = [(self._live(segments, groups[a]) + self._live(segments, groups[b]), a, b)
                     for a, b in zip(remaining[:-1], remaining[1:])]
            _, a, b = min(pairs)
            groups[a:b + 1] = [[groups[a][0], groups[b][1]]]
            marked[a:b + 1] = [True]
            remaining = kept()
        return groups, marked
