"""A recipe's DAG as SVG: the networkx graph laid out in Python (layers left to right), drawn as boxes and arrows.

A stage's layer is the length of the longest path to it from the query (so
every arrow points right); within a layer stages keep their execution order.
Each box says the stage's name and kind and, on a trace page, what it did:
in -> out candidates (for the query shown: the page's script updates the line
with class ``io``), score scale and time; a stage switched off is drawn
dashed, one that passed its input through dotted.  A box is a ``g`` with
``data-i`` (the stage's index on the page), which the script makes clickable;
its ``title`` lists the parameters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import networkx as nx

from irflow.engine.graph import QUERY_NODE, build_graph
from irflow.engine.model import RecipeSpec
from irflow.engine.pipeline import Pipeline
from irflow.errors import IrflowError
from irflow.util.html import Markup, el, number

__all__ = ["Box", "trace_graph", "recipe_graph", "dag_svg"]

_W, _H, _GAP_X, _GAP_Y, _PAD = 176, 70, 54, 18, 10
_CHARS = 25  # what fits on a line of a box


@attrs.frozen
class Box:
    """What one stage's box says: its lines, its class (``ran``, ``off``, ``passed``), its tooltip, its index."""

    lines: tuple[str, ...]
    state: str = "ran"
    tooltip: str = ""
    index: int | None = None
    io: str = ""  # the line the page's script rewrites per query


def trace_graph(names: Sequence[str], ports: Sequence[Mapping[str, Sequence[str]]]) -> nx.DiGraph:
    """The DAG of a trace's stages from each event's ports (what fed it), with the query node."""
    return build_graph(names, {name: {port: tuple(sources) for port, sources in bound.items()}
                               for name, bound in zip(names, ports)})


def recipe_graph(recipe: RecipeSpec) -> nx.DiGraph:
    """A recipe's DAG: the validated pipeline's when it validates, else its stages wired as written."""
    try:
        graph: nx.DiGraph = Pipeline.of(recipe).graph
        return graph
    except IrflowError:  # a recipe with problems still shows what it says
        return build_graph(list(recipe.stages), {name: {"inputs": spec.upstream_names()}
                                                 for name, spec in recipe.stages.items()})


def _layers(graph: nx.DiGraph) -> dict[Any, tuple[int, int]]:
    """Node -> (layer, slot): the longest path from a source, then execution order within the layer."""
    try:
        order = list(nx.topological_sort(graph))
    except nx.NetworkXUnfeasible:  # a cycle (a recipe that does not validate): one layer per node
        return {node: (i, 0) for i, node in enumerate(graph.nodes)}
    layer: dict[Any, int] = {}
    for node in order:
        layer[node] = max((layer[p] + 1 for p in graph.predecessors(node)), default=0)
    index = {node: i for i, node in enumerate(graph.nodes)}
    slots: dict[int, int] = {}
    placed = {}
    for node in sorted(graph.nodes, key=lambda n: (layer[n], index[n])):
        placed[node] = (layer[node], slots.get(layer[node], 0))
        slots[layer[node]] = slots.get(layer[node], 0) + 1
    return placed


def _short(text: str) -> str:
    return text if len(text) <= _CHARS else text[: _CHARS - 1] + "…"


def _box(node: Any, box: Box, x: float, y: float) -> Markup:
    texts = []
    for i, line in enumerate(box.lines[:4]):
        io = i > 0 and bool(box.io) and line == box.io and box.index is not None
        texts.append(el("text", {"class": "name" if i == 0 else "io" if io else "meta",
                                 "data-io": str(box.index) if io else None,
                                 "x": number(x + 10), "y": number(y + 18 + 15 * i)}, _short(line)))
    attributes = {"class": f"node {box.state}", "data-i": None if box.index is None else str(box.index),
                  "tabindex": None if box.index is None else "0", "role": None if box.index is None else "button"}
    return el("g", attributes, el("title", {}, box.tooltip or box.lines[0] if box.lines else ""),
              el("rect", {"x": number(x), "y": number(y), "width": str(_W), "height": str(_H),
                          "rx": "14" if node == QUERY_NODE else "6"}), texts)


def dag_svg(graph: nx.DiGraph, boxes: Mapping[Any, Box], *, label: str = "the recipe's DAG") -> Markup:
    """The graph drawn left to right: a box per node (``boxes`` says what each holds), an arrow per edge."""
    placed = _layers(graph)
    n_layers = max((p[0] for p in placed.values()), default=0) + 1
    n_slots = max((p[1] for p in placed.values()), default=0) + 1
    width = _PAD * 2 + n_layers * _W + (n_layers - 1) * _GAP_X
    height = _PAD * 2 + n_slots * _H + (n_slots - 1) * _GAP_Y

    def corner(node: Any) -> tuple[float, float]:
        layer, slot = placed[node]
        return _PAD + layer * (_W + _GAP_X), _PAD + slot * (_H + _GAP_Y)

    edges = []
    for source, target in graph.edges:
        (x1, y1), (x2, y2) = corner(source), corner(target)
        x1, y1, y2 = x1 + _W, y1 + _H / 2, y2 + _H / 2
        middle = (x1 + x2) / 2
        edges.append(el("path", {"class": "edge", "d": f"M{number(x1)},{number(y1)} C{number(middle)},{number(y1)} "
                                                       f"{number(middle)},{number(y2)} {number(x2 - 4)},{number(y2)}"}))
        edges.append(el("path", {"class": "arrow", "d": f"M{number(x2 - 9)},{number(y2 - 4)} L{number(x2)},"
                                                        f"{number(y2)} L{number(x2 - 9)},{number(y2 + 4)} Z"}))
    nodes = [_box(node, boxes.get(node, Box((str(node),))), *corner(node)) for node in graph.nodes]
    return el("svg", {"class": "dag", "viewBox": f"0 0 {width} {height}", "width": str(width),
                      "height": str(height), "role": "img", "aria-label": label}, edges, nodes)
