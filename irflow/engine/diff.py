"""What changed between two rankings of one query: what entered, left, moved and was rescored.

Two stages of one trace (``dense`` -> ``fuse``), or one stage of two traces
(yesterday's run and today's): records are matched by record id, and a
record listed twice (several sub-queries) counts once, at its best rank.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

import attrs

from irflow.engine.report.reprs import diff_view
from irflow.errors import TraceError
from irflow.util.table import render_table
from irflow.util.unicode import escape_controls

__all__ = ["Change", "Diff", "diff_rankings"]


class _Ranked(Protocol):
    """A stage of a trace, as a diff reads it (:class:`irflow.engine.trace.StageView`)."""

    @property
    def label(self) -> str: ...

    @property
    def scale(self) -> str | None: ...

    trace: Any

    def ranking(self, query: int = 0) -> list[dict[str, Any]]: ...


@attrs.frozen
class Change:
    """One record's place before and after (None on the side where it is absent)."""

    record_id: str | None
    artifact_id: str | None
    surface_kind: str | None
    old_rank: int | None
    new_rank: int | None
    old_score: float | None
    new_score: float | None

    @property
    def moved_by(self) -> int | None:
        """Positive when the record moved up (toward rank 1); None when absent on a side."""
        if self.old_rank is None or self.new_rank is None:
            return None
        return self.old_rank - self.new_rank

    def to_dict(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "moved_by": self.moved_by}


@attrs.frozen
class Diff:
    """What entered, left, moved and was rescored between two rankings of one query (by record id).

    ``entered`` is ordered by new rank, ``left`` by old rank; ``moved``
    (another rank), ``rescored`` (same rank, another score) and
    ``unchanged`` (same rank and score) by new rank.  ``before_scale`` and
    ``after_scale`` name the score scales (``rrf``, ``blend``, ...): when
    they differ, the scores are different quantities and only ranks compare.
    """

    before: str
    after: str
    query: str | None
    query_index: int
    entered: tuple[Change, ...]
    left: tuple[Change, ...]
    moved: tuple[Change, ...]
    unchanged: tuple[Change, ...]
    rescored: tuple[Change, ...] = ()
    before_scale: str | None = None
    after_scale: str | None = None

    @property
    def same_scale(self) -> bool:
        return self.before_scale == self.after_scale

    def to_dict(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after, "query": self.query, "query_index": self.query_index,
                "before_scale": self.before_scale, "after_scale": self.after_scale,
                "entered": [c.to_dict() for c in self.entered], "left": [c.to_dict() for c in self.left],
                "moved": [c.to_dict() for c in self.moved], "rescored": [c.to_dict() for c in self.rescored],
                "unchanged": [c.to_dict() for c in self.unchanged]}

    def table(self, limit: int | None = None) -> str:
        """The diff as plain text: count and scale lines, then one table per non-empty section."""
        lines = [f"diff {self.before} -> {self.after} — query {self.query_index}: {self.query!r}",
                 f"{len(self.entered)} entered, {len(self.left)} left, {len(self.moved)} moved, "
                 f"{len(self.rescored)} rescored (same rank, new score), {len(self.unchanged)} unchanged"]
        if self.same_scale:
            lines.append(f"scale: {self.before_scale or '-'} on both sides")
        else:
            lines.append(f"scale: {self.before_scale or '-'} -> {self.after_scale or '-'} (different scales: the "
                         "scores are different quantities; compare ranks, not score values)")
        sections = (("entered", self.entered), ("left", self.left), ("moved", self.moved),
                    ("rescored", self.rescored))
        delta = self.same_scale
        for title, changes in sections:
            if not changes:
                continue
            shown = changes if limit is None else changes[:limit]
            both = title in ("moved", "rescored")
            rows: list[list[Any]] = [[c.old_rank, c.new_rank, c.moved_by if title == "moved" else None, c.old_score, c.new_score]
                    + ([_score_change(c) if both else None] if delta else [])
                    + [c.artifact_id, c.surface_kind, c.record_id] for c in shown]
            headers = (["old rank", "new rank", "moved", "old score", "new score"]
                       + (["score change"] if delta else []) + ["artifact", "surface", "record_id"])
            lines.extend(["", f"{title}:", render_table(headers, rows, max_width=32, indent="  ")])
            if len(shown) < len(changes):
                lines.append(f"  ... {len(changes) - len(shown)} more")
        return escape_controls("\n".join(lines))  # labels and ids from trace files: shown, not obeyed

    def __str__(self) -> str:
        return self.table()

    def _repr_html_(self) -> str:
        """A notebook's view: the counts and scales, then what entered, left, moved and was rescored."""
        return diff_view(self)


def _score_change(change: Change) -> float | None:
    if change.old_score is None or change.new_score is None:
        return None
    return float(change.new_score) - float(change.old_score)


def _by_record(ranking: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    # a record listed twice (several sub-queries of a reformulated query) counts once, at its best rank
    out: dict[Any, dict[str, Any]] = {}
    for candidate in ranking:
        kept = out.get(candidate["record_id"])
        if kept is None or candidate["rank"] < kept["rank"]:
            out[candidate["record_id"]] = candidate
    return out


def diff_rankings(before: _Ranked, after: _Ranked, query: int = 0) -> Diff:
    """The :class:`Diff` of two stage views for original query ``query``."""
    old = _by_record(before.ranking(query))
    new = _by_record(after.ranking(query))
    if before.trace.queries is not None and after.trace.queries is not None \
            and before.trace.queries.originals[query] != after.trace.queries.originals[query]:
        raise TraceError(f"query {query} differs between the two traces ({before.trace.queries.originals[query]!r} "
                         f"vs {after.trace.queries.originals[query]!r}); compare the same query")

    def change(o: dict[str, Any] | None, n: dict[str, Any] | None) -> Change:
        src: dict[str, Any] = n if n is not None else o  # type: ignore[assignment]  # one side is present
        return Change(src["record_id"], src["artifact_id"], src["surface_kind"],
                      None if o is None else o["rank"], None if n is None else n["rank"],
                      None if o is None else o["score"], None if n is None else n["score"])

    entered = [change(None, n) for rid, n in new.items() if rid not in old]
    left = [change(o, None) for rid, o in old.items() if rid not in new]
    both = [change(old[rid], n) for rid, n in new.items() if rid in old]
    moved = [c for c in both if c.old_rank != c.new_rank]
    rescored = [c for c in both if c.old_rank == c.new_rank and c.old_score != c.new_score]
    unchanged = [c for c in both if c.old_rank == c.new_rank and c.old_score == c.new_score]

    def by_new(changes: list[Change]) -> tuple[Change, ...]:
        return tuple(sorted(changes, key=lambda c: cast(int, c.new_rank)))  # present on these sides

    return Diff(before.label, after.label, before.trace.queries.originals[query] if before.trace.queries else None,
                query, by_new(entered), tuple(sorted(left, key=lambda c: cast(int, c.old_rank))), by_new(moved),
                by_new(unchanged), by_new(rescored), before.scale, after.scale)
