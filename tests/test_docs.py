"""The documentation runs: every code block of README.md and docs/, the site's build, the command reference.

How a page's blocks run, and the markers a page puts before a block, are in tests/docblocks.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from docblocks import (
    DOCS,
    ROOT,
    SAMPLE,
    Piece,
    check_jsonl,
    check_recipe_block,
    commands,
    page_id,
    page_markers,
    pages,
    pieces,
    run_command,
    run_irflow,
    runnable,
    write_files,
)

GETTING_STARTED = DOCS / "getting-started.md"
RECIPES = DOCS / "guides" / "recipes.md"

#: At most this many blocks in all the pages may be marked not-run, and each says why in these words.
NOT_RUN_LIMIT = 6
NOT_RUN_REASONS = ("installs", "downloads", "needs a cluster")

#: Languages of blocks that are not code: outputs, file layouts, data files (a file marker writes them).
NOT_CODE = ("text", "")


def _data_dir() -> Path:
    """The test collections beside the repository (../shared/data), or $IRFLOW_DATA."""
    return Path(os.environ.get("IRFLOW_DATA") or ROOT.parent / "shared" / "data")


def _sample_available() -> bool:
    """Whether this irflow has the packaged sample collection (``--dataset sample``)."""
    from irflow.errors import IrflowError
    from irflow.evaluation.source import load_dataset

    try:
        load_dataset("sample")
    except (IrflowError, OSError):
        return False
    return True


def _build_tools(folder: Path) -> None:
    """The ``tools`` corpus of Getting started, from that page's records.jsonl, as its command builds it."""
    records = next(p for p in pieces(GETTING_STARTED) if p.file_name == "records.jsonl")
    (folder / "records.jsonl").write_text(records.body, encoding="utf-8")
    run_irflow("irflow -q index records.jsonl --out tools")


def _swapped_recipe(folder: Path) -> None:
    """my.toml of the recipes page: the hybrid file with its [stages.dense] swapped for the fragment, fused by RRF."""
    from irflow.engine.recipe import Recipe

    hybrid, swap = _recipes_page_toml()
    start, end = hybrid.index("[stages.dense]"), hybrid.index("[stages.lexical]")
    swapped = hybrid[:start] + swap + "\n" + hybrid[end:]
    swapped = swapped.replace('fusion = "blend"', 'fusion = "rrf"', 1)  # the page: "fuse the two by RRF"
    Recipe.from_toml(swapped)
    (folder / "my.toml").write_text(swapped, encoding="utf-8")


def _recipes_page_toml() -> tuple[str, str]:
    """The recipes page's hybrid TOML block and its swap fragment."""
    blocks = [p for p in pieces(RECIPES) if p.lang == "toml"]
    whole = next(p.body for p in blocks if "fragment" not in p.markers)
    fragment = next(p.body for p in blocks if "fragment" in p.markers)
    return whole, fragment


#: Files a page's commands read that are made from its blocks rather than shown whole.
PAGE_SETUP = {RECIPES: _swapped_recipe}


@pytest.fixture()
def page_dir(tmp_path, monkeypatch):
    """A fresh folder and $IRFLOW_HOME; the plugins and stage kinds a page registers are forgotten after."""
    from irflow.engine import unregister_stage
    from irflow.engine.kinds import stage_kinds

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    # the commands run as written; the default embedder is the quick stand-in (the model's own tests cover it)
    monkeypatch.setenv("IRFLOW_EMBEDDER", "hash")
    monkeypatch.setattr(sys, "path", list(sys.path))
    kinds, modules = set(stage_kinds()), set(sys.modules)
    yield tmp_path
    for kind in set(stage_kinds()) - kinds:
        unregister_stage(kind)
    for name in set(sys.modules) - modules:
        module_file = getattr(sys.modules[name], "__file__", None) or ""
        if module_file.startswith(str(tmp_path)):
            sys.modules.pop(name, None)


def _run_piece(piece: Piece, folder: Path, skipped: list[str]) -> None:
    if piece.lang == "python" and piece.file_name is None:
        if piece.markers.get("needs-data") == "sample" and not _sample_available():
            skipped.append(piece.where())
            return
        exec(compile(piece.body, piece.where(), "exec"), {"__name__": "docs"})
    elif piece.lang in ("toml", "yaml") and piece.file_name is None:
        check_recipe_block(piece)
    elif piece.lang == "jsonl":
        check_jsonl(piece)
    elif piece.lang in ("sh", None):
        data = piece.markers.get("needs-data")
        if data and data != "sample":
            source = _data_dir() / data
            if not source.is_dir():
                skipped.append(piece.where())
                return
            if not (folder / data).exists():
                (folder / data).symlink_to(source)
        for line in commands(piece):
            if SAMPLE in line and not _sample_available():
                skipped.append(f"{piece.where()}: {line}")
                continue
            run_command(line, folder)
    elif piece.lang not in NOT_CODE and piece.file_name is None:
        raise AssertionError(f"{piece.where()}: a ```{piece.lang} block the docs tests do not know how to check")


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_code_block_of_the_page_runs(page: Path, page_dir: Path) -> None:
    page_pieces = pieces(page)
    write_files(page_pieces, page_dir)
    if "tools" in page_markers(page).get("needs", ""):
        _build_tools(page_dir)
    if page in PAGE_SETUP:
        PAGE_SETUP[page](page_dir)
    skipped: list[str] = []
    for piece in runnable(page_pieces):
        _run_piece(piece, page_dir, skipped)
    if skipped:
        pytest.skip(f"ran all but what needs data this machine lacks: {skipped}")


def test_not_run_blocks_are_few_and_say_why() -> None:
    marked = [(page_id(p.page), p.line, p.markers["not-run"]) for page in pages() for p in pieces(page)
              if "not-run" in p.markers]
    assert len(marked) <= NOT_RUN_LIMIT, marked
    for where in marked:
        assert where[2].startswith(NOT_RUN_REASONS), where


def test_a_block_that_cannot_run_is_marked() -> None:
    """An install or a download shown in a block is marked not-run (the runner would refuse it anyway)."""
    for page in pages():
        for piece in pieces(page):
            if piece.lang == "sh" and re.search(r"pip install|ray start|wget|curl", piece.body):
                assert "not-run" in piece.markers, piece.where()


def test_the_walk_through_is_there() -> None:
    """The pages still show the commands a user starts with, so the runs above cover them."""
    def shown(page: Path) -> list[str]:
        return [line for piece in pieces(page) for line in commands(piece)]

    started = shown(GETTING_STARTED)
    assert "irflow index records.jsonl --out tools" in started
    assert any(line.startswith("irflow demo ") for line in started)
    stages = shown(DOCS / "guides" / "stages.md")
    assert any("--plugin score_floor" in line for line in stages) and any("test_score_floor.py" in line for line in stages)
    tour = shown(DOCS / "guides" / "command-line.md")
    assert any(line.startswith("irflow trace diff") for line in tour)
    assert "irflow -V" in tour and any(line.startswith("python -m irflow ") for line in tour)
    # the hybrid recipe runs as itself; mode= is the search recipe's parameter
    assert not any("mode=hybrid" in line and line.startswith("irflow run hybrid") for line in tour)


def test_the_recipes_page_shows_the_builtin_hybrid_in_every_form() -> None:
    from irflow.engine.recipe import Recipe, load_recipe, ref

    hybrid_toml, swap = _recipes_page_toml()
    yaml_block = next(p.body for p in pieces(RECIPES) if p.lang == "yaml")
    assert Recipe.from_toml(hybrid_toml) == load_recipe("hybrid")
    assert Recipe.from_yaml(yaml_block) == load_recipe("hybrid")
    # the swap: a second lexical channel instead of dense, fused by RRF, as the page says in Python
    start, end = hybrid_toml.index("[stages.dense]"), hybrid_toml.index("[stages.lexical]")
    swapped = Recipe.from_toml((hybrid_toml[:start] + swap + "\n" + hybrid_toml[end:]).replace(
        'fusion = "blend"', 'fusion = "rrf"'))
    assert swapped.stages["dense"].kind == "lexical" and swapped != load_recipe("hybrid")
    in_python = load_recipe("hybrid").with_stage(
        "dense", "lexical", inputs=["candidates"], fetch_k=ref("fetch_k"),
        bm25={"variant": "bm25plus", "k1": 1.2, "b": 0.5}).with_params(fusion="rrf")
    assert swapped == in_python


# -- the site ------------------------------------------------------------------------------------------------------


def test_the_command_reference_is_what_the_generator_writes() -> None:
    """docs/reference/cli.md is generated from the click commands (python docs/gen_cli.py): it never drifts."""
    sys.path.insert(0, str(DOCS))
    try:
        import gen_cli
    finally:
        sys.path.remove(str(DOCS))
    committed = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    assert committed == gen_cli.render(), "docs/reference/cli.md is stale: run python docs/gen_cli.py"
    from irflow.cli import main

    for name in main.commands:
        assert f"## `irflow {name}`" in committed, name


def test_readme_links_point_at_files_that_exist() -> None:
    """README's links into the repository (the site's pages among them) lead somewhere; mkdocs checks the site's."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert any(link.startswith("docs/") for link in local)
    for link in local:
        assert (ROOT / link).exists(), link
    site_pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert {link.removeprefix("docs/") for link in local if link.startswith("docs/")} <= site_pages


def test_readme_is_a_front_door() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert "(ARCHITECTURE.md)" in text and "(CHANGELOG.md)" in text
    # user documentation: no development history
    for page in pages():
        assert _history(page.read_text(encoding="utf-8")) == [], page_id(page)


def _history(body: str) -> list[str]:
    """What reads as development history: issue numbers, "passes" of work, commit hashes."""
    found = re.findall(r"\b[Ii]ssue \d+\b|\b(?:first|second|third) pass\b", body)
    # a commit hash: 7-12 hex digits with a letter and a digit, not a checksum written out whole in an example
    found += [h for h in re.findall(r"(?<![\w./-])[0-9a-f]{7,12}(?![\w…-])", body)
              if re.search(r"[a-f]", h) and re.search(r"\d", h)]
    return found


@pytest.mark.slow
def test_the_site_builds_with_no_broken_link(tmp_path) -> None:
    """mkdocs build --strict: a broken link, a missing anchor or a page left out of nav fails (CI runs it too)."""
    if shutil.which("mkdocs") is None and subprocess.run([sys.executable, "-c", "import mkdocs, material"],
                                                         capture_output=True).returncode != 0:
        pytest.skip("mkdocs and mkdocs-material are not installed (pip install -e '.[docs]')")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "on-disk-format" / "index.html").is_file()
