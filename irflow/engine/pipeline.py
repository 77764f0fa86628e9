"""The DAG of a validated recipe, held in networkx.

Nodes are the recipe's stages plus the implicit source node ``"query"``
(the raw query batch); an edge ``a -> b`` means ``a``'s output feeds one of
``b``'s input ports (edge attribute ``ports``).  The pipeline answers the
executor's questions: which stages does an output need (its ancestors — and
none behind an injected override), and in which order (a topological order,
ties broken by declaration order so runs and traces are reproducible).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import networkx as nx

from irflow.util.cachekey import UnkeyableError, cache_key
from irflow.engine.ports import Port
from irflow.engine.recipe import QUERY_NODE, FrozenMap, StageSpec

if TYPE_CHECKING:
    from irflow.engine.recipe import Recipe
    from irflow.engine.stage import Stage

__all__ = ["Pipeline", "bind_inputs", "build_graph", "QUERY_NODE"]


def _did_you_mean(word: str, options: Iterable[str]) -> str:
    import difflib

    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _ports_listing(ports: Iterable[Port]) -> str:
    listing = ", ".join(p.describe() for p in ports)
    return listing or "(none: this kind takes no inputs)"


def bind_inputs(spec: StageSpec, ports: tuple[Port, ...]) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """Map a stage's ``inputs`` onto its kind's ports.

    A list fills the ports in declared order with query ports last (a port
    taking any number takes all remaining names); a table maps ports by
    name.  Query ports left unwired get the raw query batch (``"query"``).
    Returns ``(port -> upstream names, problems)``; problems are phrased
    without the file/stage prefix.  Unconnected ports are not reported here
    (validation does, with the stages that could feed them).
    """
    bound: dict[str, tuple[str, ...]] = {}
    problems: list[str] = []
    by_name = {p.name: p for p in ports}
    if isinstance(spec.inputs, Mapping):
        for port_name, value in spec.inputs.items():
            port = by_name.get(port_name)
            names = value if isinstance(value, tuple) else (value,)
            if port is None:
                problems.append(f"has no input port {port_name!r}{_did_you_mean(port_name, by_name)}; "
                                f"its ports: {_ports_listing(ports)}")
                continue
            if not port.variadic and len(names) != 1:
                problems.append(f"input port {port.describe()} takes exactly one stage, got {list(names)}; "
                                f"write inputs = {{ {port.name} = \"<stage>\" }}")
                continue
            bound[port_name] = tuple(names)
    else:
        names = list(spec.inputs)
        order = [p for p in ports if not p.is_query] + [p for p in ports if p.is_query]
        for port in order:
            if not names:
                break
            if port.variadic:
                bound[port.name] = tuple(names)
                names = []
            else:
                bound[port.name] = (names.pop(0),)
        if names:
            problems.append(f"takes the inputs {_ports_listing(ports)} but {len(spec.inputs)} were given "
                            f"({', '.join(spec.inputs)}); remove {', '.join(map(repr, names))}")
    for port in ports:
        if port.name not in bound and port.is_query:
            bound[port.name] = (QUERY_NODE,)
    return bound, problems


def build_graph(stage_names: Iterable[str], bindings: Mapping[str, Mapping[str, tuple[str, ...]]]) -> nx.DiGraph:
    """The DiGraph of stages (plus ``"query"``) with ``ports`` on each edge.

    Upstream names that are not stages are left out (validation reports them).
    """
    graph = nx.DiGraph()
    graph.add_node(QUERY_NODE, index=-1)
    names = list(stage_names)
    for index, name in enumerate(names):
        graph.add_node(name, index=index)
    for name, ports in bindings.items():
        for port, sources in ports.items():
            for source in sources:
                if source not in graph:
                    continue
                if graph.has_edge(source, name):
                    graph.edges[source, name]["ports"].append(port)
                else:
                    graph.add_edge(source, name, ports=[port])
    return graph


@attrs.frozen(eq=False)
class Pipeline:
    """A validated recipe as a DAG, ready to run.

    ``classes[stage]`` is the stage's kind class, ``bindings[stage]`` maps its
    ports to upstream names, ``order`` is the whole recipe in execution order.
    """

    recipe: "Recipe"
    graph: nx.DiGraph
    classes: Mapping[str, type["Stage"]]
    bindings: Mapping[str, Mapping[str, tuple[str, ...]]]
    order: tuple[str, ...]
    _instances: dict[Any, Any] = attrs.field(factory=dict, init=False, repr=False)

    @classmethod
    def from_recipe(cls, recipe: "Recipe") -> "Pipeline":
        """Validate ``recipe`` (one RecipeError with every problem) and build its pipeline."""
        from irflow.errors import RecipeError
        from irflow.engine.validate import analyze

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
        self._known(output)
        stop = set(overrides)
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
                           f"{_did_you_mean(stage, self.classes)}; stages: {', '.join(self.order)}")

    def spec(self, stage: str) -> StageSpec:
        return self.recipe.stages[stage]

    def instances(self, values: Mapping[str, Any], stages: Iterable[str]) -> dict[str, "Stage"]:
        """Stage objects for these recipe-parameter values (validated; cached per values).

        Raises one RecipeError naming every stage whose resolved parameters
        are invalid (e.g. ``run(..., k="ten")``).
        """
        from irflow.engine.validate import resolved_instances

        stages = tuple(stages)
        # Type-exact: with an equality key, rrf_k=True would reuse the instances validated for rrf_k=1
        # and {"n": True} the filter of {"n": 1}; a hit stands for the very same values, validated before.
        try:
            key: Any = (stages, cache_key(dict(values)))
        except UnkeyableError:
            key = None
        if key is not None and key in self._instances:
            return self._instances[key]
        made = resolved_instances(self, values, stages)
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
