"""What validation learns about a recipe, each fact worked out once, on first use.

The checks of :mod:`irflow.engine.validate` read these facts (the stage
classes, the derived defaults, the stage objects, the port bindings, the
graph, its cycles, the score scales); none of them reports a problem itself.
The pipeline reuses what they found.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import networkx as nx

from irflow.engine.batches import Scale
from irflow.engine.graph import bind_inputs, build_graph
from irflow.engine.instantiate import evaluate_derived, instantiate, stage_values
from irflow.engine.kinds import get_stage_class, stage_kinds
from irflow.engine.model import DERIVED_RULES, DERIVED_WHEN, QUERY_NODE, RESERVED_PARAM_NAMES, RecipeSpec, \
    derived_rule_args, param_ref, thaw
from irflow.engine.ports import QUERY, PortType, fits
from irflow.engine.stage import Stage, Upstream, stage_params
from irflow.engine.validators import did_you_mean, listing
from irflow.errors import RecipeError

__all__ = ["Facts", "stage_label", "upstreams", "is_ident", "kinds_producing", "MAX_CYCLES"]

#: Cycles reported before "more cycles exist".
MAX_CYCLES = 5


def stage_label(source: str, name: str, kind: str) -> str:
    """``file: stage 'name' (kind)``, how every stage problem starts."""
    return f"{source}: stage {name!r} ({kind})" if kind else f"{source}: stage {name!r}"


def is_ident(name: Any) -> bool:
    return isinstance(name, str) and name.isidentifier()


def kinds_producing(dst: PortType, taking: PortType | None = None) -> list[str]:
    """Kinds whose output fits ``dst`` (and, given ``taking``, with an input port that takes it)."""
    kinds = []
    for kind in stage_kinds():
        cls = get_stage_class(kind)
        if cls is None or not fits(cls.output, dst):
            continue
        if taking is not None and not any(fits(taking, port.type) for port in cls.inputs):
            continue
        kinds.append(kind)
    return kinds


def upstreams(bound: Mapping[str, tuple[str, ...]], classes: Mapping[str, type[Stage]],
              scales: Mapping[str, frozenset[Scale] | None]) -> dict[str, tuple[Upstream, ...]]:
    """What a stage's ``check`` and ``output_scales`` know about the stages feeding each of its ports."""
    out: dict[str, tuple[Upstream, ...]] = {}
    for port, sources in bound.items():
        infos = []
        for source in sources:
            if source == QUERY_NODE:
                infos.append(Upstream(QUERY_NODE, QUERY_NODE, QUERY, None))
            elif source in classes:
                cls = classes[source]
                infos.append(Upstream(source, cls.kind, cls.output, scales.get(source)))
        out[port] = tuple(infos)
    return out


class Facts:
    """What validation learns about one recipe, each fact computed on first use.

    The checks read these; none of them reports a problem itself (the checks do).
    """

    def __init__(self, recipe: RecipeSpec) -> None:
        self.recipe = recipe
        self.src = recipe.source
        self.flags = recipe.parse_flags
        self.param_names = set(recipe.params) | set(recipe.derived)
        self.stage_names = list(recipe.stages)

    @functools.cached_property
    def derived(self) -> dict[str, tuple[Any, list[str]]]:
        """Per derived parameter: its default value (None when it cannot be computed) and its problems."""
        return {name: _derive(self, name, spec.rule, spec.args) for name, spec in self.recipe.derived.items()}

    @functools.cached_property
    def defaults(self) -> dict[str, Any]:
        """Every recipe parameter's default, derived ones included."""
        return {**dict(self.recipe.params), **{name: value for name, (value, _) in self.derived.items()}}

    @functools.cached_property
    def classes(self) -> dict[str, type[Stage]]:
        """The kind class of every stage whose kind is known."""
        found = {}
        for name, spec in self.recipe.stages.items():
            cls = get_stage_class(spec.kind) if spec.kind else None
            if cls is not None:
                found[name] = cls
        return found

    @functools.cached_property
    def built(self) -> dict[str, tuple[Stage | None, list[str]]]:
        """Per stage of a known kind: its object built from the defaults (None when it cannot be), its problems."""
        out = {}
        for name, cls in self.classes.items():
            spec = self.recipe.stages[name]
            values, via = stage_values(spec, self.defaults, self.param_names, stage_params(cls))
            out[name] = instantiate(cls, values, via, stage_label(self.src, name, cls.kind))
        return out

    @functools.cached_property
    def instances(self) -> dict[str, Stage]:
        return {name: instance for name, (instance, _) in self.built.items() if instance is not None}

    @functools.cached_property
    def bound(self) -> dict[str, tuple[dict[str, tuple[str, ...]], list[str]]]:
        """Per stage of a known kind: its ports bound to upstream names, and the binding problems."""
        return {name: bind_inputs(self.recipe.stages[name], cls.inputs) for name, cls in self.classes.items()}

    @functools.cached_property
    def bindings(self) -> dict[str, dict[str, tuple[str, ...]]]:
        return {name: bound for name, (bound, _) in self.bound.items()}

    @functools.cached_property
    def graph(self) -> nx.DiGraph:
        return build_graph(self.stage_names, self.bindings)

    @functools.cached_property
    def cycles(self) -> list[list[str]]:
        """The first cycles of the graph (one more than are reported, to say that more exist)."""
        found = []
        for cycle in nx.simple_cycles(self.graph):
            found.append(cycle)
            if len(found) > MAX_CYCLES:
                break
        return found

    @functools.cached_property
    def scaled(self) -> tuple[dict[str, frozenset[Scale] | None], list[str]]:
        """Each stage's possible output scales, in graph order, and what the stages' ``check`` hooks said."""
        scales: dict[str, frozenset[Scale] | None] = {}
        problems: list[str] = []
        for name in (n for n in nx.topological_sort(self.acyclic_part()) if n != QUERY_NODE):
            cls, instance = self.classes.get(name), self.instances.get(name)
            if cls is None or instance is None:
                scales[name] = None
                continue
            ups = upstreams(self.bindings[name], self.classes, scales)
            scales[name] = instance.output_scales(ups)
            label = stage_label(self.src, name, cls.kind)
            problems.extend(f"{label}: {message}" for message in instance.check(ups))
        return scales, problems

    def acyclic_part(self) -> nx.DiGraph:
        """The graph without the stages on or behind a cycle (already reported; their scales are unknown)."""
        graph = self.graph
        if not self.cycles:
            return graph
        tangled: set[str] = set()
        for component in nx.strongly_connected_components(graph):
            if len(component) > 1 or any(graph.has_edge(n, n) for n in component):
                tangled |= component
        for node in list(tangled):
            tangled |= nx.descendants(graph, node)
        return graph.subgraph(n for n in graph if n not in tangled)

    def label(self, name: str) -> str:
        """The label of a stage of a known kind."""
        return stage_label(self.src, name, self.classes[name].kind)


def _derive(facts: Facts, name: str, rule: str, args: Mapping[str, Any]) -> tuple[Any, list[str]]:
    """One derived parameter's default and the problems of its table."""
    recipe, problems = facts.recipe, []
    label = f"{facts.src}: derived parameter {name!r}"
    if not is_ident(name) or name in RESERVED_PARAM_NAMES:
        problems.append(f"{label}: the name must be an identifier not in {', '.join(RESERVED_PARAM_NAMES)}")
    if rule not in DERIVED_RULES:
        if (name, "rule") not in facts.flags:
            problems.append(f"{label}: unknown rule {rule!r}{did_you_mean(rule, DERIVED_RULES)}; "
                            f"rules: {listing(DERIVED_RULES)}")
        return None, problems
    valid_args = derived_rule_args(rule)
    bad = False
    for key, value in args.items():
        if key not in valid_args:
            problems.append(f"{label}: rule {rule!r} has no argument {key!r}{did_you_mean(key, valid_args)}; "
                            f"its arguments: {listing(valid_args)}")
            bad = True
        for item in (value if isinstance(value, tuple) else (value,)):
            ref = param_ref(item)
            if ref is not None and ref not in recipe.params:
                problems.append(f"{label}: argument {key} refers to {item!r}, which is not a recipe "
                                f"parameter{did_you_mean(ref, recipe.params)}; recipe parameters: "
                                f"{listing(recipe.params)}")
                bad = True
    if DERIVED_WHEN in args:
        when = _derived_when_problems(recipe, label, args[DERIVED_WHEN])
        problems.extend(when)
        bad = bad or bool(when)
    if bad:
        return None, problems
    try:
        return evaluate_derived(recipe, recipe.derived[name], recipe.params, given=recipe.params.get(name)), problems
    except RecipeError as error:
        return None, problems + list(error.problems)


def _derived_when_problems(recipe: RecipeSpec, label: str, when: Any) -> list[str]:
    """What is wrong with a derived parameter's ``when = { param = [values] }`` (recipe parameters only:
    derived parameters read the parameters as given, never another derived value)."""
    if not isinstance(when, Mapping):
        return [f"{label}: when must be a table param = [values], got {thaw(when)!r}"]
    problems = []
    for key, allowed in when.items():
        values = allowed if isinstance(allowed, tuple) else (allowed,)
        if key not in recipe.params:
            problems.append(f"{label}: when refers to {key!r}, which is not a recipe parameter"
                            f"{did_you_mean(key, recipe.params)}; recipe parameters: {listing(recipe.params)}")
        elif not values or not all(v is None or isinstance(v, (str, int, float, bool)) for v in values):
            problems.append(f"{label}: when.{key} must be a value or a non-empty list of values "
                            f"(strings, numbers, booleans), got {thaw(allowed)!r}")
        elif key in recipe.choices:
            problems.extend(f"{label}: when.{key} lists {v!r}, which is not one of the choices of {key} "
                            f"({', '.join(map(repr, recipe.choices[key]))})"
                            f"{did_you_mean(v, map(str, recipe.choices[key]))}"
                            for v in values if v not in recipe.choices[key])
    return problems
