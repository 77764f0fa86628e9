"""One stage of a trace as a reader sees it: its ranking per query, its counts, and its plain-text table.

:meth:`irflow.engine.trace.Trace.stage` returns a :class:`StageView`; diffs,
the terminal's tables and the HTML report read stages through it, so they
say the same thing.  A stage that did nothing is said in one line: switched
off (its ``when`` did not hold, or an input it needs was off), or passed
through (it returned an input unchanged: no reranker, no boost, one channel
to fuse), without repeating its input's table.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from irflow.engine.batches import Candidates, QueryBatch
from irflow.engine.events import INACTIVE, StageEvent
from irflow.engine.tracefile import candidate_dicts, query_positions, render
from irflow.engine.values import Summary, jsonable
from irflow.errors import TraceError
from irflow.util.table import render_table
from irflow.util.unicode import escape_controls

if TYPE_CHECKING:  # the trace holds its views; trace.py imports this module
    from irflow.engine.trace import Trace

__all__ = ["StageView", "render_count", "own_columns", "candidate_stages", "TEXT_WIDTH"]

#: How many characters of a record's text excerpt a terminal table shows.
TEXT_WIDTH = 40


def own_columns(name: str, columns: Iterable[str]) -> list[str]:
    """The provenance columns stage ``name`` wrote, minus the copies of its score and rank."""
    prefix = f"{name}."
    return [c for c in columns if c.startswith(prefix) and c not in (f"{name}.score", f"{name}.rank")]


class StageView:
    """One stage of a trace: its output ranking per query, counts and table."""

    def __init__(self, trace: "Trace", event: StageEvent) -> None:
        self.trace = trace
        self.event = event

    @property
    def name(self) -> str:
        return self.event.name

    @property
    def label(self) -> str:
        """``<trace>:<stage>``, how a diff names its sides."""
        return f"{self.trace.label}:{self.name}"

    @property
    def output(self) -> Any:
        return self.event.output

    @property
    def has_candidates(self) -> bool:
        return isinstance(self.event.output, Candidates)

    @property
    def scale(self) -> str | None:
        output = self.event.output
        return output.scale.value if isinstance(output, Candidates) and output.active else None

    @property
    def switched_off(self) -> bool:
        """True when the stage did not run: its ``when`` did not hold, or an input it needs was off."""
        return self.event.status == "inactive" or self.event.output is INACTIVE or (
            isinstance(self.event.output, Candidates) and not self.event.output.active)

    @functools.cached_property
    def passed_from(self) -> str | None:
        """The input this stage passed through unchanged (None when it changed something, or was off).

        Recorded as status ``"passed"`` by the executor; a trace written before
        that (status ``"ran"``) is recognized by an output equal to one of its
        candidate inputs.
        """
        event = self.event
        output = event.output
        if self.switched_off or not isinstance(output, Candidates):
            return None
        inputs = [(name, value) for name, value in event.inputs.items() if isinstance(value, Candidates)]
        for name, value in inputs:
            if value is output:
                return name
        if event.status in ("passed", "ran", "cached"):
            for name, value in inputs:
                if len(value) == len(output) and value == output:
                    return name
        return None

    @property
    def state(self) -> str:
        """What the stage did, as tables say it: ``inactive``, ``passed`` (an input unchanged), else its status."""
        if self.switched_off:
            return "inactive"
        return "passed" if self.passed_from is not None else self.event.status

    def ranking(self, query: int = 0) -> list[dict[str, Any]]:
        """The stage's candidates for original ``query``, best first, as dumped (record id, scores, provenance)."""
        query = self.trace.check_query(query)
        output = self.event.output
        if not isinstance(output, Candidates):
            raise TraceError(f"stage {self.name!r} ({self.event.kind}) outputs "
                             f"{render(output, query, self.trace.identify)['type']}, not candidates; "
                             f"stages with candidates: {', '.join(candidate_stages(self.trace)) or '(none)'}")
        return candidate_dicts(output, query_positions(output, query), self.trace.identify)

    def out_count(self, query: int) -> str:
        value = render_count(self.event.output, query)
        return "off" if self.event.status == "inactive" else value

    def in_counts(self, query: int) -> str:
        counts = [render_count(value, query) for name, value in self.event.inputs.items()
                  if not isinstance(value, QueryBatch) and not (isinstance(value, Summary) and value.type == "queries")]
        return " + ".join(counts) if counts else "-"

    def heading(self, query: int) -> str:
        """The stage's one-line heading: kind, what it did, scale, counts, time."""
        event = self.event
        ms = f"{float(event.elapsed_ms):.2f} ms"
        if self.switched_off:
            return f"== {event.name} ({event.kind}) · switched off · {ms}"
        source = self.passed_from
        if source is not None:
            return (f"== {event.name} ({event.kind}) · passed through: output = input {source!r} · "
                    f"scale {self.scale or '-'} · out {self.out_count(query)} · {ms}")
        return (f"== {event.name} ({event.kind}) · {event.status} · scale {self.scale or '-'} · "
                f"in {self.in_counts(query)} -> out {self.out_count(query)} · {ms}")

    def table(self, query: int = 0, limit: int = 10, *, params: bool = True) -> str:
        """This stage's heading (kind, scale, counts, ms, parameters) and top ``limit`` candidates for ``query``.

        A stage that was switched off or passed its input through is its heading alone.
        """
        event = self.event
        query = self.trace.check_query(query)
        lines = [self.heading(query)]
        if params and event.params:
            lines.append("params: " + ", ".join(f"{k}={json.dumps(jsonable(v), ensure_ascii=False)}"
                                                for k, v in event.params.items()))
        if not self.has_candidates or self.switched_off or self.passed_from is not None:
            return escape_controls("\n".join(lines))
        ranking = self.ranking(query)
        if not ranking:
            lines.append("(no candidates)")
            return escape_controls("\n".join(lines))
        shown = ranking[:limit]
        texts = self.trace.excerpts(np.array([c["row"] for c in shown], dtype=np.int64))
        extra = own_columns(event.name, self.event.output.provenance)
        headers = ["rank", "score", "artifact", "surface", "record_id", "text"] + [c[len(event.name) + 1:]
                                                                                   for c in extra]
        rows = [[c["rank"], c["score"], c["artifact_id"], c["surface_kind"], c["record_id"], text]
                + [c["provenance"][col] for col in extra] for c, text in zip(shown, texts)]
        lines.append(render_table(headers, rows, max_width=32, widths={"text": TEXT_WIDTH}))
        if len(ranking) > limit:
            lines.append(f"... {len(ranking) - limit} more")
        # names, kinds and parameters come from a trace file: a terminal escape in one is shown, not obeyed
        return escape_controls("\n".join(lines))

    def __repr__(self) -> str:
        return f"StageView({self.label!r}, kind={self.event.kind!r}, status={self.event.status!r})"


def candidate_stages(trace: Iterable[StageEvent]) -> list[str]:
    """The stages of ``trace`` whose output is Candidates."""
    return [e.name for e in trace if isinstance(e.output, Candidates)]


def render_count(value: Any, query: int) -> str:
    """How many items ``value`` (a stage's input or output) holds for original ``query``, as a table shows it."""
    if isinstance(value, Candidates):
        return "off" if not value.active else str(int(np.count_nonzero(value.origin_index == query)))
    if isinstance(value, np.ndarray) and value.dtype == np.bool_:
        return f"{int(np.count_nonzero(value))} rows"
    if isinstance(value, Summary):
        count = value.of_query(query).get("count")
        return f"{count} rows" if value.type == "mask" else str(count if count is not None else "?")
    if value is INACTIVE:
        return "off"
    if isinstance(value, QueryBatch):
        return f"{int(np.count_nonzero(value.origin == query))} texts"
    if isinstance(value, list) and query < len(value):
        return str(len(value[query]))
    return "?"
