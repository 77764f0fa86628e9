"""Small SVG charts as data: a score histogram, the bump chart of the final hits across stages, sorted bars.

A chart is a *spec*: nested lists ``[tag, {attribute: value}, child, ...]``
whose children are specs or text.  Python turns a spec into markup with
:func:`to_markup` (through :func:`irflow.util.html.el`: every value escaped);
a page's script turns the specs of another query into elements the same way
(``createElementNS``, ``setAttribute``, ``textContent``; tags and attributes on
an allow-list).  So a chart is laid out once, here, and drawn the same by both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from irflow.util.html import Markup, el, number

__all__ = ["Spec", "to_markup", "histogram", "bump", "sorted_bars", "SVG_TAGS", "SVG_ATTRIBUTES"]

#: A chart element: ``[tag, attributes, *children]`` (children: specs or text).
Spec = list[Any]

#: What a chart spec may hold (the page's script refuses anything else).
SVG_TAGS = ("svg", "g", "rect", "line", "polyline", "circle", "text", "title", "path")
SVG_ATTRIBUTES = ("class", "x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "width", "height", "points", "d",
                  "viewBox", "role", "aria-label", "text-anchor", "data-rec", "data-i", "focusable")


def to_markup(spec: Spec | str) -> Markup | str:
    """A spec as markup (text children escaped by :func:`el`)."""
    if isinstance(spec, str):
        return spec
    tag, attributes, *children = spec
    return el(tag, attributes, *[to_markup(child) for child in children])


def histogram(data: Sequence[Any] | None, *, width: int = 220, height: int = 56) -> Spec | None:
    """The bars of ``[low, high, count, ...]`` (from :mod:`~irflow.engine.report.extract`), low and high below."""
    if not data:
        return None
    low, high, *counts = data
    top = max(counts) or 1
    plot = height - 14
    bar = width / len(counts)
    wide = number(max(bar - 1, 0.5))
    bars: list[Spec] = []
    for i, count in enumerate(counts):  # a page draws a thousand of these: plain arithmetic, finite by construction
        if count:
            h = max(plot * count / top, 1.0)
            bars.append(["rect", {"class": "bar", "x": f"{i * bar + 0.5:.1f}", "y": f"{plot - h:.1f}", "width": wide,
                                  "height": f"{h:.1f}"}])
    return ["svg", {"class": "hist", "viewBox": f"0 0 {width} {height}", "width": str(width), "height": str(height),
                    "role": "img", "aria-label": f"scores from {low} to {high}: {', '.join(map(str, counts))}"},
            ["line", {"class": "axis", "x1": "0", "y1": number(plot + 0.5), "x2": str(width), "y2": number(plot + 0.5)}],
            *bars,
            ["text", {"class": "tick", "x": "0", "y": str(height - 2)}, str(low)],
            ["text", {"class": "tick", "x": str(width), "y": str(height - 2), "text-anchor": "end"}, str(high)]]


def bump(stages: Sequence[str], labels: Sequence[str], ranks: Sequence[Sequence[int | None]], *,
         deepest: int = 50, step: int = 96, height: int = 240) -> Spec | None:
    """How each final hit's rank moved across ``stages`` (columns): a line per hit, rank 1 on top.

    ``ranks[h][s]`` is hit ``h``'s rank at stage ``s`` (0: not among that
    stage's candidates; None: the stage has none); ranks below ``deepest``
    are drawn on the bottom line, marked ``> deepest``.
    """
    columns = [s for s in range(len(stages)) if any(r[s] is not None for r in ranks)] if ranks else []
    if not columns:
        return None
    # the scale reaches the deepest rank drawn (at most ``deepest``): ranks 1 to 3 are not squeezed into a corner
    deepest = max(2, min(deepest, max((r for line in ranks for r in line if r is not None), default=1)))
    left, right, top, bottom = 44, 160, 18, 22
    width = left + step * max(len(columns) - 1, 1) + right
    plot = height - top - bottom

    def y_of(rank: int) -> float:
        return top + plot * (min(rank, deepest + 1) - 1) / deepest

    body: list[Spec] = []
    for c, s in enumerate(columns):
        x = left + step * c
        body.append(["line", {"class": "grid", "x1": number(x), "y1": str(top), "x2": number(x), "y2": str(top + plot)}])
        body.append(["text", {"class": "tick", "x": number(x), "y": "11", "text-anchor": "middle"}, stages[s]])
    body.append(["text", {"class": "tick", "x": "0", "y": str(height - 4)}, f"rank 1 at the top; > {deepest} on the "
                 "bottom line; a gap: not among that stage's candidates"])
    for h, line in enumerate(ranks):
        label = labels[h] if h < len(labels) else ""
        group: Spec = ["g", {"class": f"hit h{h % 10}", "data-i": str(h)}, ["title", {}, label]]
        runs: list[list[tuple[float, float]]] = [[]]
        points = []
        for c, s in enumerate(columns):  # a stage without the hit breaks its line
            rank = line[s]
            if rank:
                points.append((left + step * c, y_of(rank)))
                runs[-1].append(points[-1])
            elif runs[-1]:
                runs.append([])
        for run in runs:
            if len(run) > 1:
                group.append(["polyline", {"points": " ".join(f"{number(x)},{number(y)}" for x, y in run)}])
        for x, y in points:
            group.append(["circle", {"cx": number(x), "cy": number(y), "r": "3"}])
        if points:
            x, y = points[-1]
            group.append(["text", {"class": "label", "x": number(x + 8), "y": number(y + 4)}, label])
        body.append(group)
    return ["svg", {"class": "bump", "viewBox": f"0 0 {width} {height}", "width": str(width), "height": str(height),
                    "role": "img", "aria-label": "ranks of the final hits at each stage"}, *body]


def sorted_bars(values: Sequence[tuple[str, float]], *, width: int = 640, height: int = 160,
                caption: str = "") -> Spec | None:
    """One bar per (label, value), sorted by value: above the axis for gains, below for losses."""
    if not values:
        return None
    ordered = sorted(values, key=lambda item: item[1])
    extent = max(abs(v) for _, v in ordered) or 1.0
    mid = height / 2
    bar = width / len(ordered)
    bars: list[Spec] = []
    for i, (label, value) in enumerate(ordered):
        h = (height / 2 - 6) * abs(value) / extent
        y = mid - h if value >= 0 else mid
        bars.append(["rect", {"class": "gain" if value > 0 else "loss" if value < 0 else "tie",
                              "x": number(i * bar), "y": number(y), "width": number(max(bar - 0.5, 0.3)),
                              "height": number(max(h, 0.5))}, ["title", {}, f"{label}: {value:+.4f}"]])
    return ["svg", {"class": "bars", "viewBox": f"0 0 {width} {height}", "width": str(width), "height": str(height),
                    "role": "img", "aria-label": caption or "per-query differences, sorted"},
            ["line", {"class": "axis", "x1": "0", "y1": number(mid), "x2": str(width), "y2": number(mid)}], *bars]
