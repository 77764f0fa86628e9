"""One exception hierarchy: every IrflowError and IrflowWarning lives in irflow/errors.py and the docs' errors page lists it."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import irflow
import irflow.errors as errors
from irflow.errors import IrflowError, IrflowWarning, RecipeError

ERRORS_PAGE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "errors.md"


def _subclasses(base: type) -> set[type]:
    found, todo = set(), [base]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


@pytest.fixture(scope="module")
def every_module() -> list[str]:
    """Import every module of irflow (the stages and recipes included), so every class is defined."""
    names = []
    # irflow.stages and irflow.recipes live in their own folders (package-dir): walk them too
    for package in ("irflow", "irflow.stages", "irflow.recipes"):
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}."):
            if info.name.endswith("__main__") or info.name in names:
                continue
            importlib.import_module(info.name)
            names.append(info.name)
    return names


def _errors_table() -> dict[str, list[str]]:
    text = ERRORS_PAGE.read_text(encoding="utf-8")
    section = text.split("\n## Every error and warning\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"^\| `(\w+)` \|(.*)\|$", line)
        if match:
            rows[match.group(1)] = [cell.strip() for cell in match.group(2).split("|")]
    return rows


def test_every_error_and_warning_is_defined_in_errors_py(every_module: list[str]) -> None:
    assert "irflow.stages.weight" in every_module and "irflow.kernels.bm25" in every_module
    ours = {cls for cls in _subclasses(IrflowError) | _subclasses(IrflowWarning)
            if cls.__module__.startswith("irflow")}
    elsewhere = sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in ours if cls.__module__ != "irflow.errors")
    assert elsewhere == []
    assert len(ours) >= 30


def test_the_errors_page_lists_every_error_with_its_parents(every_module: list[str]) -> None:
    table = _errors_table()
    defined = {name: cls for name, cls in vars(errors).items()
               if isinstance(cls, type) and issubclass(cls, (IrflowError, IrflowWarning)) and not name.startswith("_")}
    assert set(table) == set(defined)
    for name, (also, raised_by, carries) in table.items():
        cls = defined[name]
        # "also a": the parents besides the irflow base the row's first column already implies
        parents = {base.__name__ for base in cls.__bases__} - {"IrflowError"}
        if cls in (IrflowError, IrflowWarning):
            parents = {base.__name__ for base in cls.__bases__}
        listed = set(re.findall(r"`(\w+)`", also))
        assert listed == parents, (name, listed, parents)
        assert raised_by and carries, name


def test_the_public_names_still_import_from_where_they_are_raised() -> None:
    from irflow.api.retrieve import SearchError
    from irflow.engine.trace import NotInTrace, TraceError
    from irflow.evaluation.metrics import EvaluationError
    from irflow.kernels.bm25 import BM25ParamError
    from irflow.stages.weight import WeightError

    assert SearchError is irflow.SearchError is errors.SearchError
    assert (TraceError, NotInTrace, EvaluationError, BM25ParamError, WeightError) == (
        errors.TraceError, errors.NotInTrace, errors.EvaluationError, errors.BM25ParamError, errors.WeightError)


def test_a_recipe_error_names_its_source_once() -> None:
    one = RecipeError(["recipes/x.toml: stage 'dense': unknown kind 'dens'"], source="recipes/x.toml")
    assert str(one) == "invalid recipe in recipes/x.toml: stage 'dense': unknown kind 'dens'"
    assert one.problems == ("recipes/x.toml: stage 'dense': unknown kind 'dens'",)
    two = RecipeError(["a.toml: first", "a.toml: second"], source="a.toml")
    assert str(two) == "invalid recipe in a.toml: 2 problems\n  - first\n  - second"
    assert str(two).count("a.toml") == 1
    elsewhere = RecipeError(["<python>: no output"], source="a.toml")  # a problem naming another source keeps it
    assert str(elsewhere) == "invalid recipe in a.toml: <python>: no output"
