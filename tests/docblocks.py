"""The code of README.md and of every page under docs/: found, classified and run.

Every fenced block runs (tests/test_docs.py, one test per page): a ``python`` block is
executed, a ``sh`` block's lines are run (``irflow ...`` through click's CliRunner, ``python -m
...`` in a fresh interpreter, a benchmark command checked for its form), a ``toml`` or ``yaml``
block is loaded as a recipe, a ``jsonl`` block is read line by line; inline code that starts
with a command runs too. A page runs in a fresh folder, in document order, after the files it
shows are written there.

What a page says about a block, in an HTML comment on the line before it (invisible on the site):

- ``<!-- file: NAME -->``: the block is a file the page's commands read (a block whose first
  line is ``# NAME.py`` / ``# NAME.toml`` is one too);
- ``<!-- fragment: WHY -->``: a TOML or YAML piece, not a whole recipe (parsed; its page's own
  test uses it);
- ``<!-- not-run: WHY -->``: the block cannot run offline (an install, a download, a cluster);
  such blocks are few and each says why (test_docs checks both).

- ``<!-- needs-data: NAME -->``: the block reads a test collection: ``sample`` (run when this
  irflow has the packaged sample) or a BEIR folder ``NAME`` linked in from ``$IRFLOW_DATA``
  (default ``../shared/data``; skipped, and said, when absent). A command with
  ``--dataset sample`` needs no marker.

And about the page, anywhere in it: ``<!-- needs: tools -->``: its commands use the small
``tools`` corpus Getting started builds (``irflow index records.jsonl --out tools``, from that
page's ``records.jsonl``); the page says so in words too.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

#: The datasets the pages name that a test run may lack: the packaged sample collection.
SAMPLE = "--dataset sample"

_MARKER = re.compile(r"<!--\s*([\w-]+)\s*(?::\s*(.*?))?\s*-->")
_PIECES = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$|`([^`]+)`", flags=re.S | re.M)
_FILE_LINE = re.compile(r"# (\S+\.(?:py|toml|yaml))\n")


def pages() -> list[Path]:
    """README.md and every Markdown page of the site, README first."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@dataclass
class Piece:
    """A fenced block (``lang`` set, maybe ``""``) or an inline command (``lang`` None)."""

    page: Path
    line: int
    lang: str | None
    body: str
    markers: dict[str, str] = field(default_factory=dict)

    @property
    def file_name(self) -> str | None:
        if "file" in self.markers:
            return self.markers["file"]
        match = _FILE_LINE.match(self.body) if self.lang in ("python", "toml", "yaml") else None
        return match.group(1) if match else None

    def where(self) -> str:
        return f"{page_id(self.page)}:{self.line}"


def _markers_before(text: str, start: int) -> dict[str, str]:
    """The marker comments on the lines just above ``start`` (blank lines between them allowed)."""
    found: dict[str, str] = {}
    for line in reversed(text[:start].splitlines()):
        if not line.strip():
            continue
        match = _MARKER.fullmatch(line.strip())
        if not match:
            break
        found.setdefault(match.group(1), match.group(2) or "")
    return found


def pieces(page: Path) -> list[Piece]:
    """Every fenced block of ``page`` and every inline code span, in order."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _PIECES.finditer(text):
        lang, body, inline = match.groups()
        line = text.count("\n", 0, match.start()) + 1
        if inline is not None:
            found.append(Piece(page, line, None, " ".join(inline.split())))
        else:
            found.append(Piece(page, line, lang, body, _markers_before(text, match.start())))
    return found


def blocks(page: Path, lang: str) -> list[str]:
    """The bodies of ``page``'s fenced blocks in ``lang``."""
    return [p.body for p in pieces(page) if p.lang == lang]


def page_markers(page: Path) -> dict[str, str]:
    return {m.group(1): m.group(2) or "" for m in _MARKER.finditer(page.read_text(encoding="utf-8"))}


# -- what a command is, and how it runs ------------------------------------------------------------------------------

COMMAND = re.compile(r"(irflow|python|bash) \S")


def commands(piece: Piece) -> list[str]:
    """The commands ``piece`` shows: a sh block's non-comment lines (continuations joined), or the
    inline code itself when it starts with a command."""
    if piece.lang is None:
        return [piece.body] if COMMAND.match(piece.body) else []
    if piece.lang != "sh":
        return []
    lines = piece.body.replace("\\\n", " ").splitlines()
    return [" ".join(line.split()) for line in lines if line.strip() and not line.strip().startswith("#")]


def run_irflow(line: str) -> str:
    """Run one ``irflow ...`` command line in-process; its output (a failure names the line)."""
    from irflow.cli import main

    # the Ray commands run here without --ray (the shards in-process, the same answer): a cluster
    # costs 10-15 s to start, and the Ray tests share one per session (tests/test_sharded_ray.py)
    line = re.sub(r" --ray \S+", "", line)
    args = shlex.split(line)[1:]
    result = CliRunner().invoke(main, args)
    assert "Traceback" not in result.output, (line, result.output)
    assert result.exit_code == 0, (line, result.output, result.exception)
    return result.output


def _names_a_command(words: list[str]) -> bool:
    """Whether ``irflow WORDS`` is only a command's name (``trace show``), to be checked, not run."""
    import click

    from irflow.cli import main

    command: click.Command = main
    for word in words:
        if not isinstance(command, click.Group) or word not in command.commands:
            return False
        command = command.commands[word]
    return bool(words)


def check_benchmark_command(line: str) -> None:
    """A benchmark command is checked for its form (the smoke tests run the scripts): its file and its parts."""
    words = shlex.split(line)
    script = ROOT / words[1]
    assert script.is_file(), line
    if script.name == "measure.sh":
        parts = set(re.findall(r"^(\w+)\)", script.read_text(encoding="utf-8"), flags=re.M))
        assert set(words[2:]) <= parts, (line, parts)


def run_command(line: str, cwd: Path) -> None:
    """Run one command a page shows, in ``cwd``; an unknown form fails (a page shows only what runs)."""
    first, _, rest = line.partition(" ")
    if first == "irflow" and _names_a_command(rest.split()):
        return  # a command named in prose, e.g. `irflow eval`, `irflow trace show`
    if first == "irflow":
        run_irflow(line)
    elif line.startswith("python -m irflow "):  # the module form, in a fresh interpreter
        done = subprocess.run([sys.executable, *shlex.split(line)[1:]], cwd=cwd, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (line, done.stderr[-2000:])
    elif line.startswith("python -m pytest"):
        done = subprocess.run([sys.executable, *shlex.split(line)[1:], "-p", "no:cacheprovider"],
                              cwd=cwd, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-2000:])
    elif line.startswith(("python benchmarks/", "bash benchmarks/", "python docs/")):
        check_benchmark_command(line)
    else:
        raise AssertionError(f"a page shows a command the docs tests do not know how to run: {line!r}")


def check_recipe_block(piece: Piece) -> None:
    """A whole recipe loads; a fragment parses."""
    import tomllib

    import yaml

    from irflow.engine.recipe import Recipe

    if "fragment" in piece.markers:
        parsed = tomllib.loads(piece.body) if piece.lang == "toml" else yaml.safe_load(piece.body)
        assert parsed, piece.where()
        return
    recipe = Recipe.from_toml(piece.body) if piece.lang == "toml" else Recipe.from_yaml(piece.body)
    assert recipe.name, piece.where()


def write_files(page_pieces: list[Piece], folder: Path) -> list[str]:
    """Write the files a page shows into ``folder``; their names."""
    names = []
    for piece in page_pieces:
        name = piece.file_name
        if piece.lang is not None and name is not None and "not-run" not in piece.markers:
            (folder / name).write_text(piece.body, encoding="utf-8")
            names.append(name)
    return names


def runnable(page_pieces: list[Piece]) -> Iterator[Piece]:
    """The pieces that run: not marked not-run."""
    return (p for p in page_pieces if "not-run" not in p.markers)


def check_jsonl(piece: Piece) -> None:
    for number, line in enumerate(piece.body.splitlines(), 1):
        assert isinstance(json.loads(line), dict), (piece.where(), number)
