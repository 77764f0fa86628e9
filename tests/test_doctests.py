"""Every doctest of irflow runs: the examples in its docstrings are checked, module by module.

The modules are imported as the installed package (``irflow.*``, ``irflow.stages.*``,
``irflow.recipes.*``), not collected from the source folders: ``stages/`` is
``irflow.stages`` once installed, and collecting it twice registered every
stage kind twice.  ``python -m pytest -q`` (README's test command) runs them.
"""

from __future__ import annotations

import doctest
import importlib
import os
import pkgutil
from types import ModuleType

import pytest

import irflow

PACKAGES = ("irflow", "irflow.stages", "irflow.recipes")
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _modules() -> list[str]:
    names: list[str] = []
    for package in PACKAGES:
        names.append(package)
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}."):
            if not info.name.endswith("__main__") and info.name not in names:
                names.append(info.name)
    return names


MODULES = _modules()


def _tests(module: ModuleType) -> list[doctest.DocTest]:
    # every docstring of the module, its classes, functions and methods (objects it merely imports excluded)
    return [t for t in doctest.DocTestFinder(exclude_empty=True).find(module, module.__name__) if t.examples]


@pytest.mark.parametrize("name", MODULES)
def test_the_examples_of_every_module_hold(name: str, tmp_path, monkeypatch) -> None:
    module = importlib.import_module(name)
    monkeypatch.chdir(tmp_path)  # an example that writes a file writes it here
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    failures = []
    for test in _tests(module):
        runner.run(test, out=failures.append)
    assert not failures, "".join(failures)


def test_the_doctests_are_found() -> None:
    found = {name: len(_tests(importlib.import_module(name))) for name in MODULES}
    assert "irflow.stages.weight" in found and "irflow.engine.recipe" in found
    assert sum(found.values()) >= 100, found
    # the modules whose docstrings show an example (a sample; every module is run above)
    for name in ("irflow", "irflow.engine.ports", "irflow.store.protocol", "irflow.kernels.fusion"):
        assert found[name] > 0, name
    assert os.path.basename(irflow.__file__) == "__init__.py"
