"""A public name is what its package says it is, however its submodules were imported.

Python sets a submodule as an attribute of its package when it is imported,
so a package that exports a function named like one of its submodules
(``irflow.shard`` the function beside ``irflow/shard/``, ``irflow.engine.diff``
beside ``engine/diff.py``) must bind the function after that import; then
``import pkg.sub.mod as m`` cannot work (it looks ``sub`` up on ``pkg`` and
finds the function), so irflow's own code and tests never write it.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
import types
from pathlib import Path

import irflow

ROOT = Path(__file__).resolve().parents[1]


def _fresh(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_irflow_shard_is_the_function_in_a_fresh_interpreter():
    # the submodules imported by path first, in every form that works, then the package's name looked at
    code = ("import irflow.shard.driver, irflow.shard.split\n"
            "from irflow.shard import worker\n"
            "from irflow.shard.manifest import ShardManifest\n"
            "import inspect, pydoc, irflow\n"
            "assert inspect.isfunction(irflow.shard), irflow.shard\n"
            "from irflow import shard\n"
            "assert shard is irflow.shard and shard.__module__ == 'irflow.shard'\n"
            "print(pydoc.render_doc(irflow.shard, renderer=pydoc.plaintext))\n")
    done = _fresh(code)
    assert done.returncode == 0, done.stderr
    assert "function shard in module irflow.shard" in done.stdout
    assert "Split a corpus" in done.stdout and "n: 'int'" in done.stdout


def _packages() -> list[types.ModuleType]:
    """Every irflow package, each of its submodules imported (so the import has set its attribute)."""
    packages, todo = [], [irflow]
    while todo:  # by each package's own path: irflow.stages and irflow.recipes live outside irflow/
        package = todo.pop()
        packages.append(package)
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(info.name)
            if info.ispkg:
                todo.append(module)
    return packages


def _shadowed() -> dict[str, object]:
    """``pkg.sub`` -> what ``pkg.sub`` is, for each submodule a package's attribute of that name is not."""
    out = {}
    for package in _packages():
        for sub in pkgutil.iter_modules(package.__path__):
            value = getattr(package, sub.name, None)
            if not isinstance(value, types.ModuleType):
                out[f"{package.__name__}.{sub.name}"] = value
    return out


def test_an_exported_name_beats_a_submodule_of_that_name():
    shadowed = _shadowed()
    assert shadowed == {"irflow.shard": irflow.shard, "irflow.engine.diff": irflow.engine.diff}
    for path, value in shadowed.items():
        package, _, name = path.rpartition(".")
        assert name in sys.modules[package].__all__ and callable(value), path
    assert irflow.engine.diff is irflow.diff


def test_no_code_imports_a_shadowed_package_path_as_a_name():
    shadowed = tuple(_shadowed())
    offenders = []
    for folder in ("irflow", "stages", "recipes", "tests", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    offenders += [f"{path.relative_to(ROOT)}:{node.lineno}: import {alias.name} as {alias.asname}"
                                  for alias in node.names if alias.asname
                                  and any(alias.name.startswith(f"{s}.") for s in shadowed)]
    assert offenders == [], "write `from irflow.shard import driver` instead:\n" + "\n".join(offenders)
