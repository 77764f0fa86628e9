"""The plan of an untraced, uncached run: for each stage, switched off, passed through, or run.

Whether a stage's ``when`` holds, which of its upstreams are switched off and
whether it then declares it passes an input through
(:meth:`~irflow.engine.stage.Stage.passes_through`) follow from the run's
parameter values alone — so they are worked out once per pipeline and
argument key instead of on every stage of every run (a fixed cost of every
``search()``).  At run time a pass-through step only checks that its
upstreams came out as planned (a stage may switch itself off by returning
an inactive output), and a run step is called with its planned inputs;
when they did not, the executor runs the stage the general way.

>>> from irflow.engine.recipe import load_recipe
>>> from irflow.engine.pipeline import Pipeline
>>> recipe = load_recipe("search")
>>> pipeline = Pipeline.of(recipe)
>>> values = recipe.resolve_params({"mode": "lexical"})
>>> needed = pipeline.needed()
>>> steps = plan_run(pipeline, pipeline.instances(values, needed), needed, values)
>>> [(s.name, s.action) for s in steps][:4]
[('formulate', 'through'), ('candidates', 'run'), ('dense', 'off'), ('lexical', 'run')]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from irflow.engine.model import QUERY_NODE, when_holds
from irflow.engine.pipeline import Pipeline
from irflow.engine.ports import CANDIDATES
from irflow.engine.stage import Stage

__all__ = ["Step", "plan_run", "when_holds", "OFF", "THROUGH", "RUN"]

#: A step's action: output an inactive batch, alias an upstream's output, or call the stage.
OFF, THROUGH, RUN = "off", "through", "run"


@attrs.frozen
class Step:
    """One stage of a planned run: its action, and for a pass-through the upstreams it assumed."""

    name: str
    action: str
    source: str = ""  # THROUGH: the upstream whose output is this stage's output
    # THROUGH, RUN: stage upstreams planned active / switched off (checked at run time; the query
    # batch, never switched off, is not listed)
    live: tuple[str, ...] = ()
    off: tuple[str, ...] = ()
    # RUN: per bound port (name, variadic, upstreams: a variadic port's planned-active ones): its arguments
    ports: tuple[tuple[str, bool, tuple[str, ...]], ...] = ()
    candidates: bool = False  # OFF: the stage outputs Candidates (an inactive batch), else INACTIVE


def plan_run(pipeline: Pipeline, stages: Mapping[str, Stage], needed: Sequence[str],
             values: Mapping[str, Any]) -> tuple[Step, ...]:
    """The steps of an untraced run of ``needed`` (in order) with these stage objects and values."""
    off: set[str] = set()
    steps = []
    for name in needed:
        when, ports = pipeline.input_plan(name)
        live: dict[str, tuple[str, ...]] = {}
        active = when_holds(when, values)
        for port, variadic, minimum, required, sources in ports:
            live[port] = tuple(s for s in sources if s not in off)
            if (variadic and len(live[port]) < minimum) or (not variadic and required and not live[port]):
                active = False
        if not active:
            off.add(name)
            steps.append(Step(name, OFF, candidates=pipeline.classes[name].output is CANDIDATES))
            continue
        through = stages[name].passes_through({port: len(sources) for port, sources in live.items()})
        bound = [s for *_, sources in ports for s in sources if s != QUERY_NODE]
        planned_live, planned_off = tuple(s for s in bound if s not in off), tuple(s for s in bound if s in off)
        single = {port: sources for port, variadic, _minimum, _required, sources in ports if not variadic}
        if through is not None and live.get(through):
            steps.append(Step(name, THROUGH, live[through][0], planned_live, planned_off))
        elif through is not None and through in single:  # its one upstream is switched off: so is its output
            off.add(name)
            steps.append(Step(name, THROUGH, single[through][0], planned_live, planned_off))
        else:
            # a variadic port takes its active upstreams, a single port its upstream (active or not)
            arguments = tuple((port, variadic, live[port] if variadic else sources)
                              for port, variadic, _minimum, _required, sources in ports)
            steps.append(Step(name, RUN, "", planned_live, planned_off, arguments))
    return tuple(steps)
