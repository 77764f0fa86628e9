"""What an installed irflow carries for its users: the ``py.typed`` marker, its data files, its types.

The package is built as a wheel builds it (setuptools' ``build_py`` from a
copy of the checkout: the packages, the mapped ``stages/`` and ``recipes/``
folders and the package data pyproject.toml declares) into a folder that a
user's type checker then reads as installed code: without ``py.typed`` mypy
refuses to read it at all ("missing library stubs or py.typed marker").
Nothing is downloaded (no build isolation).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _built(tmp_path: Path) -> Path:
    """The files a wheel of this checkout holds under site-packages (setuptools' build_py output)."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for folder in ("irflow", "stages", "recipes"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path / "site"
    done = subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py",
                           "--build-lib", str(out)], cwd=source, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return _built(tmp_path_factory.mktemp("wheel"))


def test_the_built_package_holds_the_typed_marker_and_its_data(built):
    assert (built / "irflow" / "py.typed").is_file()
    assert (built / "irflow" / "__init__.py").is_file()
    # the folders pyproject.toml maps into the package, and the recipe files beside their builders
    assert (built / "irflow" / "stages" / "__init__.py").is_file()
    assert {"search.toml", "search.yaml", "hybrid.toml"} <= {p.name for p in (built / "irflow" / "recipes").iterdir()}
    assert (ROOT / "irflow" / "py.typed").is_file()  # what the editable install serves


USER_CODE = """\
    import irflow

    corpus = irflow.build([irflow.Record("unbox", "name", "unbox")])
    hits: list[irflow.SearchHit] = irflow.search(corpus, "unbox")
    first: str = hits[0].artifact_id

    from irflow.shard import driver

    def split(path: str) -> driver.ShardedCorpus:
        return irflow.shard(corpus, 2, path)  # the function, though its subpackage was imported
"""

WRONG = """\
    import irflow

    count: int = irflow.search(irflow.build([irflow.Record("unbox", "name", "unbox")]), "unbox")
"""


@pytest.mark.slow
def test_a_users_code_is_type_checked_against_irflow(built, tmp_path):
    pytest.importorskip("mypy")
    (tmp_path / "good.py").write_text(textwrap.dedent(USER_CODE), encoding="utf-8")
    (tmp_path / "wrong.py").write_text(textwrap.dedent(WRONG), encoding="utf-8")
    # irflow as an installed package: on the interpreter's path, read by mypy as site-packages are
    env = {**os.environ, "PYTHONPATH": str(built)}
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
                           "--no-error-summary", "good.py", "wrong.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=280)
    # the good file passes; irflow's types are read, not taken as Any: the wrong use is found, in irflow's words
    assert done.stdout.splitlines() == ['wrong.py:3: error: Incompatible types in assignment (expression has type '
                                        '"list[SearchHit]", variable has type "int")  [assignment]'], done.stdout
