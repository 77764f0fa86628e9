"""A recipe's wiring as a graph: stage inputs bound to ports, and the DAG networkx holds.

Nodes are the recipe's stages plus the implicit source node ``"query"`` (the
raw query batch); an edge ``a -> b`` means ``a``'s output feeds one of
``b``'s input ports (edge attribute ``ports``).  Validation builds the graph
to find cycles and unreachable stages; the pipeline keeps it to answer the
executor's questions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import networkx as nx

from irflow.engine.model import QUERY_NODE, StageSpec
from irflow.engine.ports import Port
from irflow.engine.validators import did_you_mean

__all__ = ["bind_inputs", "build_graph", "QUERY_NODE"]


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
            given = value if isinstance(value, tuple) else (value,)
            if port is None:
                problems.append(f"has no input port {port_name!r}{did_you_mean(port_name, by_name)}; "
                                f"its ports: {_ports_listing(ports)}")
                continue
            if not port.variadic and len(given) != 1:
                problems.append(f"input port {port.describe()} takes exactly one stage, got {list(given)}; "
                                f"write inputs = {{ {port.name} = \"<stage>\" }}")
                continue
            bound[port_name] = tuple(given)
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
