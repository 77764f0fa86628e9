"""The DAG of a validated recipe, ready to run.

A :class:`Pipeline` holds what validation learned (each stage's kind class,
its port bindings, the graph) and answers the executor's questions: which
stages does an output need (its ancestors — and none behind an injected
override), in which order (a topological order, ties broken by declaration
order so runs and traces are reproducible), and which stage objects a run's
parameter values make (validated, cached per values).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, TypeVar

import attrs
import networkx as nx

from irflow.engine.batches import Scale
from irflow.engine.graph import QUERY_NODE
from irflow.engine.instantiate import instantiate, stage_values
from irflow.engine.model import FrozenMap, RecipeSpec
from irflow.engine.stage import Stage, stage_params
from irflow.engine.facts import stage_label, upstreams
from irflow.engine.validate import analyze
from irflow.engine.validators import did_you_mean
from irflow.errors import RecipeError
from irflow.util.cachekey import UnkeyableError, cache_key

__all__ = ["Pipeline"]


_Made = TypeVar("_Made")

#: :meth:`Pipeline.input_plan`: ``(when pairs, bound ports)``.
InputPlan = tuple[tuple[tuple[str, tuple[Any, ...]], ...], tuple[tuple[str, bool, int, bool, tuple[str, ...]], ...]]


@attrs.frozen(eq=False)
class Pipeline:
    """A validated recipe as a DAG, ready to run.

    ``classes[stage]`` is the stage's kind class, ``bindings[stage]`` maps its
    ports to upstream names, ``order`` is the whole recipe in execution order.
    """

    recipe: RecipeSpec
    graph: nx.DiGraph
    classes: Mapping[str, type[Stage]]
    bindings: Mapping[str, Mapping[str, tuple[str, ...]]]
    order: tuple[str, ...]
    _instances: dict[Any, Any] = attrs.field(factory=dict, init=False, repr=False)
    _needed: dict[Any, tuple[str, ...]] = attrs.field(factory=dict, init=False, repr=False)
    _plans: dict[str, InputPlan] = attrs.field(factory=dict, init=False, repr=False)
    _remembered: dict[Hashable, Any] = attrs.field(factory=dict, init=False, repr=False)

    @classmethod
    def of(cls, recipe: RecipeSpec) -> "Pipeline":
        """The pipeline of ``recipe``, validated and built once per recipe object."""
        return recipe.memo("pipeline", lambda: cls.from_recipe(recipe))

    @classmethod
    def from_recipe(cls, recipe: RecipeSpec) -> "Pipeline":
        """Validate ``recipe`` (one RecipeError with every problem) and build its pipeline."""
        analysis = analyze(recipe)
        if analysis.problems:
            raise RecipeError(list(analysis.problems), source=recipe.source)
        graph = analysis.graph
        index = nx.get_node_attributes(graph, "index")
        order = tuple(n for n in nx.lexicographical_topological_sort(graph, key=lambda n: index[n])
                      if n != QUERY_NODE)
        return cls(recipe, graph, FrozenMap(analysis.classes), FrozenMap(analysis.bindings), order)

    def upstream(self, stage: str) -> set[str]:
        """Every stage ``stage`` depends on (its ancestors, without ``"query"``)."""
        self._known(stage)
        return set(nx.ancestors(self.graph, stage)) - {QUERY_NODE}

    def downstream(self, stage: str) -> set[str]:
        """Every stage that depends on ``stage``."""
        self._known(stage)
        return set(nx.descendants(self.graph, stage))

    def needed(self, output: str | None = None, overrides: Iterable[str] = ()) -> tuple[str, ...]:
        """The stages a run of ``output`` executes, in execution order.

        Walks upstream from the output and stops at overridden stages: what
        only an override needs does not run.  Overridden stages are included
        (the executor takes their output from the override).
        """
        output = output or self.recipe.output
        stop = frozenset(overrides)
        found = self._needed.get((output, stop))  # the graph is fixed: once per output and overrides
        if found is None:
            found = self._walk_up(output, stop)
            if len(self._needed) >= 64:
                self._needed.pop(next(iter(self._needed)), None)
            self._needed[(output, stop)] = found
        return found

    def input_plan(self, stage: str) -> InputPlan:
        """What the executor reads to feed ``stage``, flattened once (a fixed cost of every run otherwise).

        ``(when, ports)``: the stage's ``when`` as ``(parameter, allowed values)``
        pairs, and per bound port ``(name, variadic, minimum, required, upstreams)``.
        """
        plan = self._plans.get(stage)
        if plan is None:
            bound = self.bindings[stage]
            when = tuple((param, tuple(allowed)) for param, allowed in self.recipe.stages[stage].when.items())
            ports = tuple((port.name, port.variadic, port.minimum, port.required, tuple(bound[port.name]))
                          for port in self.classes[stage].inputs if bound.get(port.name))
            plan = self._plans[stage] = (when, ports)
        return plan

    def remember(self, key: Hashable, make: Callable[[], _Made]) -> _Made:
        """``make()``, kept under ``key`` for later runs (a sweep's worth: the oldest dropped past 64).

        For what the executor derives from a run's values and this pipeline
        alone (the plan of an untraced run, :mod:`irflow.engine.plan`).
        """
        if key in self._remembered:
            found: _Made = self._remembered[key]
            return found
        made = make()
        if len(self._remembered) >= 64:
            self._remembered.pop(next(iter(self._remembered)))
        self._remembered[key] = made
        return made

    def _walk_up(self, output: str, stop: frozenset[str]) -> tuple[str, ...]:
        self._known(output)
        seen = {output}
        stack = [output]
        while stack:
            node = stack.pop()
            if node in stop:
                continue
            for parent in self.graph.predecessors(node):
                if parent != QUERY_NODE and parent not in seen:
                    seen.add(parent)
                    stack.append(parent)
        return tuple(n for n in self.order if n in seen)

    def _known(self, stage: str) -> None:
        if stage not in self.classes:
            raise KeyError(f"recipe {self.recipe.name!r} has no stage {stage!r}"
                           f"{did_you_mean(stage, self.classes)}; stages: {', '.join(self.order)}")

    def instances(self, values: Mapping[str, Any], stages: Iterable[str], *,
                  values_key: Hashable | None = None) -> dict[str, Stage]:
        """Stage objects for these recipe-parameter values (validated; cached per values).

        Raises one RecipeError naming every stage whose resolved parameters
        are invalid (e.g. ``run(..., k="ten")``).  ``values_key``: a
        type-exact key of the run's arguments that ``values`` were resolved
        from (:func:`irflow.engine.params.resolve_params_keyed`), which then
        keys the cache instead of the values themselves (cheaper: a run's
        arguments are few).
        """
        stages = tuple(stages)
        # Type-exact: with an equality key, rrf_k=True would reuse the instances validated for rrf_k=1
        # and {"n": True} the filter of {"n": 1}; a hit stands for the very same values, validated before.
        try:
            key: Any = ((stages, "arguments", values_key) if values_key is not None
                        else (stages, "values", cache_key(dict(values))))
        except UnkeyableError:
            key = None
        if key is not None and key in self._instances:
            cached: dict[str, Stage] = self._instances[key]
            return cached
        made = _resolved_instances(self, values, stages)
        if key is not None:
            if len(self._instances) >= 64:  # a sweep's worth; drop the oldest
                self._instances.pop(next(iter(self._instances)))
            self._instances[key] = made
        return made

    # -- rendering (text, offline) -------------------------------------------

    def to_mermaid(self) -> str:
        """The DAG as a Mermaid flowchart."""
        lines = ["flowchart LR", f"    {QUERY_NODE}([query])"]
        for name in self.order:
            lines.append(f"    {_node_id(name)}[\"{name}<br/>{self.classes[name].kind}\"]")
        for source, target, data in self.graph.edges(data=True):
            label = ",".join(data["ports"])
            lines.append(f"    {_node_id(source)} -->|{label}| {_node_id(target)}")
        return "\n".join(lines) + "\n"

    def to_dot(self) -> str:
        """The DAG in Graphviz DOT."""
        lines = ["digraph recipe {", "    rankdir=LR;", f"    \"{QUERY_NODE}\" [shape=oval];"]
        for name in self.order:
            lines.append(f"    \"{name}\" [shape=box, label=\"{name}\\n{self.classes[name].kind}\"];")
        for source, target, data in self.graph.edges(data=True):
            lines.append(f"    \"{source}\" -> \"{target}\" [label=\"{','.join(data['ports'])}\"];")
        lines.append("}")
        return "\n".join(lines) + "\n"


def _node_id(name: str) -> str:
    return name.replace("-", "_")


def _resolved_instances(pipeline: Pipeline, values: Mapping[str, Any], stages: Iterable[str]) -> dict[str, Stage]:
    """Stage objects for a run's parameter values, with parameter and scale checks.

    Raises one RecipeError naming every stage whose resolved parameters are
    invalid or whose inputs' scales it cannot take.
    """
    recipe = pipeline.recipe
    src = recipe.source
    names = set(recipe.params) | set(recipe.derived)
    stages = tuple(stages)
    problems: list[str] = []
    made: dict[str, Stage] = {}
    for name in stages:
        cls = pipeline.classes[name]
        spec = recipe.stages[name]
        values_, via = stage_values(spec, values, names, stage_params(cls))
        instance, bad = instantiate(cls, values_, via, stage_label(src, name, cls.kind))
        problems.extend(bad)
        if instance is not None:
            made[name] = instance
    if problems:
        raise RecipeError(problems, source=src)
    scales: dict[str, frozenset[Scale] | None] = {}
    wanted = set(stages)
    for name in pipeline.order:
        if name not in wanted:
            scales[name] = None
            continue
        ups = upstreams(pipeline.bindings[name], pipeline.classes, scales)
        scales[name] = made[name].output_scales(ups)
        label = stage_label(src, name, pipeline.classes[name].kind)
        problems.extend(f"{label}: {message}" for message in made[name].check(ups))
    if problems:
        raise RecipeError(problems, source=src)
    return made
