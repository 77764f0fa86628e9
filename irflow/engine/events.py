"""What a run records: stage events, the recorder, and the marker of a switched-off stage.

The executor appends one :class:`StageEvent` per stage to a
:class:`TraceRecorder` when a run is traced; :class:`irflow.engine.trace.Trace`
wraps the recorder to render, dump, diff and explain it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from irflow.engine.batches import Candidates, QueryBatch
from irflow.engine.model import RecipeSpec

__all__ = ["INACTIVE", "is_inactive", "StageEvent", "TraceRecorder"]


class _Inactive:
    """The output of a switched-off stage whose output is not Candidates."""

    _instance: "_Inactive | None" = None

    def __new__(cls) -> "_Inactive":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "INACTIVE"

    def __bool__(self) -> bool:
        return False


#: The output of a switched-off stage whose port type is not Candidates.
INACTIVE = _Inactive()


def is_inactive(value: Any) -> bool:
    """True for :data:`INACTIVE` and for inactive Candidates."""
    return value is INACTIVE or (isinstance(value, Candidates) and not value.active)


@attrs.frozen(eq=False)
class StageEvent:
    """One stage of a traced run.

    ``status`` is ``"ran"``, ``"passed"`` (it ran and returned an input
    unchanged, as it declares for these parameters: no reranker, no boost,
    one channel to fuse), ``"cached"`` (output reused from a StageCache),
    ``"override"`` (output injected by the caller) or ``"inactive"`` (its
    ``when`` did not hold or a required input was inactive).  ``inputs`` maps
    each upstream name (``"query"`` for the raw batch) to the value the stage
    received; ``ports`` maps each input port to its upstream names.
    """

    name: str
    kind: str
    params: dict[str, Any]
    inputs: dict[str, Any]
    ports: dict[str, tuple[str, ...]]
    output: Any
    elapsed_ms: float
    status: str = "ran"


class TraceRecorder(list[StageEvent]):
    """The events of a traced run, in execution order (a plain list of StageEvent).

    Carries the run's context as attributes: ``recipe`` (the Recipe),
    ``queries`` (the raw QueryBatch), ``params`` (the resolved recipe
    parameters) and ``corpus``, so a trace module can render record ids and
    artifacts without re-running anything; and ``short``, the run's
    shortfalls (:mod:`irflow.engine.shortfall`), set when the run ends.
    """

    def __init__(self, recipe: RecipeSpec | None = None, queries: QueryBatch | None = None,
                 params: Mapping[str, Any] | None = None, corpus: Any = None) -> None:
        super().__init__()
        self.recipe = recipe
        self.queries = queries
        self.params = dict(params or {})
        self.corpus = corpus
        self.short: tuple[Any, ...] = ()  # the run's Shortfalls, set when it ends

    def event(self, name: str) -> StageEvent:
        """The event of stage ``name``."""
        for event in self:
            if event.name == name:
                return event
        raise KeyError(f"no stage {name!r} in this trace; stages: {', '.join(e.name for e in self)}")
