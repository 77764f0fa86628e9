"""Reading report pages back in tests (not collected): their elements, tables, data block and terminal twins.

``Page(html)`` parses a page with Python's HTML parser into a small tree:
``page.find(id=...)``, ``page.table_rows(node)`` (each row's cell texts),
``page.data`` (the JSON data block), ``page.scripts`` and every element's tag
and attributes, so a test can say what a page holds without a browser.
``terminal_rows(text)`` reads a plain-text table of ``render_table`` back into
its cells (by the column widths its rule line shows).
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from typing import Any

VOID = {"br", "hr", "img", "input", "meta", "link", "col", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: "Node | None") -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list["Node | str"] = []

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def walk(self):
        yield self
        for child in self.children:
            if isinstance(child, Node):
                yield from child.walk()

    def find_all(self, tag: str | None = None, **attrs: str) -> list["Node"]:
        """Elements of ``tag`` (any when None) with these attributes (``class_``: one of its classes)."""
        def has(node: Node, key: str, value: str) -> bool:
            name = key.rstrip("_").replace("_", "-")
            found = node.attrs.get(name)
            return found is not None and (value in found.split() if name == "class" else found == value)

        return [node for node in self.walk()
                if (tag is None or node.tag == tag) and all(has(node, k, v) for k, v in attrs.items())]

    def find(self, tag: str | None = None, **attrs: str) -> "Node":
        found = self.find_all(tag, **attrs)
        assert found, f"no <{tag or '*'} {attrs}>"
        return found[0]


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.at = self.root
        self.comments: list[str] = []

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs), self.at)
        self.at.children.append(node)
        if tag not in VOID:
            self.at = node

    def handle_startendtag(self, tag, attrs):
        self.at.children.append(Node(tag, dict(attrs), self.at))

    def handle_endtag(self, tag):
        node = self.at
        while node is not None and node.tag != tag:
            node = node.parent
        assert node is not None and node.parent is not None, f"</{tag}> closes nothing open"
        self.at = node.parent

    def handle_data(self, data):
        self.at.children.append(data)

    def handle_comment(self, data):
        self.comments.append(data)


class Page:
    """A parsed report page (or notebook fragment)."""

    def __init__(self, html: str) -> None:
        builder = _Builder()
        builder.feed(html)
        builder.close()
        self.html = html
        self.root = builder.root
        self.comments = builder.comments

    def find(self, tag: str | None = None, **attrs: str) -> Node:
        return self.root.find(tag, **attrs)

    def find_all(self, tag: str | None = None, **attrs: str) -> list[Node]:
        return self.root.find_all(tag, **attrs)

    @property
    def scripts(self) -> list[Node]:
        return self.find_all("script")

    @property
    def data(self) -> Any:
        return json.loads(self.find("script", id="irflow-data").text())

    def elements(self) -> list[Node]:
        return [n for n in self.root.walk() if n.tag != "#root"]


def table_rows(node: Node) -> list[list[str]]:
    """Each body row's cell texts (``tbody`` when there is one)."""
    body = node.find_all("tbody")
    rows = (body[0] if body else node).find_all("tr")
    return [[cell.text() for cell in row.children if isinstance(cell, Node) and cell.tag in ("td", "th")]
            for row in rows]


def terminal_rows(text: str) -> tuple[list[str], list[list[str]]]:
    """A ``render_table`` table's headers and rows, cut by the widths of its rule line."""
    lines = text.splitlines()
    rule_at = next(i for i, line in enumerate(lines) if line.strip() and set(line.strip()) <= {"-", " "})
    rule = lines[rule_at]
    spans, start = [], None
    for i, ch in enumerate(rule + " "):
        if ch == "-" and start is None:
            start = i
        elif ch != "-" and start is not None:
            spans.append((start, i))
            start = None

    def cells(line: str) -> list[str]:
        return [line[a:(spans[k + 1][0] if k + 1 < len(spans) else None)].strip() for k, (a, _) in enumerate(spans)]

    body = []
    for line in lines[rule_at + 1:]:
        if not line.strip() or line.startswith(("...", "==")):
            break
        body.append(cells(line))
    return cells(lines[rule_at - 1]), body


def cut(text: str, width: int) -> str:
    """What ``render_table`` makes of a cell's text at ``width``."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
