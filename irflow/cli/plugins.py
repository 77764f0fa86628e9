"""``--plugin MODULE``: import the user's code that registers stage kinds, named on the command line.

Recipe files never name code; a command line may, because the user typed it.
``irflow run my.toml --plugin my_stages`` imports ``my_stages`` (a module on
``sys.path`` or in the current directory, or a path to a ``.py`` file) before
the recipe loads, so the kinds it registers with
:func:`irflow.register_stage` are known.  A module that cannot be imported is
a clear usage error naming it, never a traceback.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import click

from irflow.cli.text import PATH_TEXT
from irflow.engine.kinds import module_from_file

__all__ = ["plugin_option", "load_plugin", "PLUGINS_META"]

#: Where the plugins a command imported are listed, in ``click.Context.meta``.
PLUGINS_META = "irflow.plugins"


def _from_file(path: Path) -> ModuleType:
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == path.resolve():
        return loaded  # imported already (a kind registers once)
    return module_from_file(name, path)


def load_plugin(name: str) -> ModuleType:
    """Import plugin ``name``: a module name (also looked up in the current directory) or a ``.py`` path."""
    path = Path(name)
    if name.endswith(".py") or os.sep in name or (os.altsep and os.altsep in name):
        if not path.is_file():
            raise ImportError(f"no such file: {path}")
        return _from_file(path)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        cwd = os.getcwd()
        if error.name != name.partition(".")[0] or cwd in sys.path or "" in sys.path:
            raise
    # the `irflow` script does not put the current directory on sys.path (python -m does): the user
    # named the module, so look where they are
    sys.path.insert(0, cwd)
    return importlib.import_module(name)


def _load(ctx: click.Context, param: click.Parameter, values: Sequence[str]) -> tuple[str, ...]:
    for name in values:
        try:
            # what a plugin prints while it is imported is not the command's output (--json): stderr
            with contextlib.redirect_stdout(sys.stderr):
                load_plugin(name)
        except ModuleNotFoundError as error:
            raise click.BadParameter(
                f"cannot import {name!r}: no module named {error.name!r} (looked on sys.path and in the current "
                f"directory {os.getcwd()}); pass an importable module name (--plugin my_stages for ./my_stages.py) "
                "or a path to a .py file", ctx=ctx, param=param) from None
        except Exception as error:  # the plugin's own code failed: say where, without a traceback
            where = ""
            if isinstance(error, SyntaxError) and error.filename:
                where = f" ({error.filename}, line {error.lineno})"
            raise click.BadParameter(f"cannot import {name!r}: {type(error).__name__}: {error}{where}",
                                     ctx=ctx, param=param) from None
    ctx.meta.setdefault(PLUGINS_META, []).extend(values)  # for processes that must import them too (eval --ray)
    return tuple(values)


#: The ``--plugin MODULE`` option of the commands that load recipes (run, validate, graph, eval).
plugin_option: Any = click.option(
    "--plugin", "plugins", multiple=True, type=PATH_TEXT, metavar="MODULE", callback=_load, expose_value=False, is_eager=True,
    help="Import MODULE first (a module name, or a .py path) so the stage kinds it registers can be used; "
         "repeatable. Recipe files never name code: you do, here.")
