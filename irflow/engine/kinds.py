"""The registry of stage kinds: a kind name -> its Stage class.

The built-in kinds (package ``irflow.stages``) and third-party kinds
advertised under the entry-point group ``"irflow.stages"`` load lazily, once,
at the first lookup; an application can also call :func:`register_stage`
directly.  Registration checks the class (an attrs class, typed ports, a
``run``), so a broken kind fails where it is declared, not in a recipe.

A kind declares its input ports once, in ``inputs``; ``run()`` takes them as
keyword parameters of the same names (the executor calls
``run(ctx, **{port: value})``).  Registration cross-checks the two, so a port
``run()`` cannot take, or a ``run()`` parameter no port fills, is a
:class:`~irflow.errors.StagePortError` naming the kind, both lists and the
signature that fits — not a ``TypeError`` in the middle of a recipe run.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import importlib.util
import re
import sys
import threading
import warnings
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs

from irflow.engine.ports import Port, PortType
from irflow.engine.stage import RESERVED_SPEC_KEYS, Stage
from irflow.errors import StagePortError

__all__ = [
    "StagePortError",
    "ENTRY_POINT_GROUP",
    "register_stage",
    "unregister_stage",
    "get_stage_class",
    "stage_kinds",
    "module_from_file",
]

#: Entry-point group third-party packages use to ship stage kinds.
ENTRY_POINT_GROUP = "irflow.stages"

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")

#: The checkout's top folder (irflow/engine/kinds.py -> two levels up from irflow/): stages/, recipes/.
_CHECKOUT = Path(__file__).resolve().parents[2]

_KINDS: dict[str, type[Stage]] = {}
_LOCK = threading.RLock()
_STATE = {"builtins": "todo", "entry_points": "todo"}


def _entry_points() -> Iterable[importlib.metadata.EntryPoint]:
    """The advertised third-party stage kinds (a seam tests replace)."""
    return importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)


def _source_subpackage(name: str) -> ModuleType:
    """Import ``irflow.<name>`` even from a source checkout without an install.

    ``irflow.stages`` and ``irflow.recipes`` live in the top-level folders
    ``stages/`` and ``recipes/``; an install (editable or not) maps them into
    the package.  Without one, load the folder next to the ``irflow`` package
    under the same dotted name, so the repository works straight from a clone.
    """
    dotted = f"irflow.{name}"
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError as error:
        if error.name != dotted:
            raise
    folder = _CHECKOUT / name
    init = folder / "__init__.py"
    if not init.exists():
        raise ModuleNotFoundError(f"cannot find {dotted}: not installed and no {init}", name=dotted)
    module = module_from_file(dotted, init, search_locations=[str(folder)])
    # the parent package is imported (this module is inside it): bind the subpackage as an import would
    setattr(sys.modules["irflow"], name, module)
    return module


def module_from_file(name: str, path: Path, *, search_locations: list[str] | None = None) -> ModuleType:
    """Import the Python file ``path`` as module ``name`` (in ``sys.modules`` unless it fails)."""
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=search_locations)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _ensure_loaded() -> None:
    """Load the built-in kinds, then the entry-point kinds, once each."""
    with _LOCK:
        if _STATE["builtins"] == "todo":
            _STATE["builtins"] = "loading"
            try:
                _source_subpackage("stages")
            finally:
                _STATE["builtins"] = "done"
        if _STATE["entry_points"] == "todo" and _STATE["builtins"] == "done":
            _STATE["entry_points"] = "loading"
            try:
                for entry_point in _entry_points():
                    _load_entry_point(entry_point)
            finally:
                _STATE["entry_points"] = "done"


def _load_entry_point(entry_point: importlib.metadata.EntryPoint) -> None:
    try:
        loaded = entry_point.load()
    except Exception as error:  # a broken plugin must not break every recipe
        warnings.warn(f"irflow: cannot load stage kind {entry_point.name!r} from entry point "
                      f"{entry_point.value!r} (group {ENTRY_POINT_GROUP!r}): {error}", stacklevel=3)
        return
    if isinstance(loaded, type) and issubclass(loaded, Stage):
        if _KINDS.get(entry_point.name) is loaded:
            return
        if loaded.kind and loaded.kind != entry_point.name:
            warnings.warn(f"irflow: entry point {entry_point.name!r} names a stage of kind {loaded.kind!r}; "
                          f"registering it as {entry_point.name!r}", stacklevel=3)
        try:
            register_stage(loaded, kind=entry_point.name)
        except (TypeError, ValueError) as error:
            warnings.warn(f"irflow: entry point {entry_point.name!r} ({entry_point.value}): {error}", stacklevel=3)
    elif not isinstance(loaded, ModuleType):
        warnings.warn(f"irflow: entry point {entry_point.name!r} ({entry_point.value}) is neither a Stage "
                      "subclass nor a module that registers one; ignored", stacklevel=3)


def register_stage(cls: type[Stage] | None = None, *, kind: str | None = None,
                   replace: bool = False) -> Any:
    """Register a stage class under its kind name; usable as a decorator.

    ``kind`` overrides the class's ``kind``; registering a second class under
    a taken kind raises ``ValueError`` unless ``replace=True``.

    >>> from irflow.engine.ports import CANDIDATES
    >>> @register_stage
    ... @attrs.frozen
    ... class Noop(Stage):
    ...     kind = "noop_doc"
    ...     inputs = (Port("candidates", CANDIDATES),)
    ...     def run(self, ctx, candidates):
    ...         return candidates
    >>> "noop_doc" in stage_kinds()
    True
    >>> unregister_stage("noop_doc")
    """
    def decorate(stage_cls: type[Stage]) -> type[Stage]:
        name: str = kind if kind else getattr(stage_cls, "kind", "")
        _check_stage_class(stage_cls, name)
        with _LOCK:
            if _STATE["builtins"] == "todo":
                _ensure_loaded()  # built-ins first, so a third party cannot shadow them by accident
            existing = _KINDS.get(name)
            if existing is not None and existing is not stage_cls and not replace:
                raise ValueError(f"stage kind {name!r} is already registered ({existing.__module__}."
                                 f"{existing.__qualname__}); pass replace=True to replace it")
            if stage_cls.kind != name:
                stage_cls.kind = name  # ClassVar: the class answers to the name it is registered under
            _KINDS[name] = stage_cls
        return stage_cls

    return decorate if cls is None else decorate(cls)


def unregister_stage(kind: str) -> None:
    """Remove a kind (tests, plugin reloads).  Unknown kinds are ignored."""
    with _LOCK:
        _KINDS.pop(kind, None)


def _check_stage_class(cls: Any, kind: str) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Stage)):
        raise TypeError(f"register_stage needs a subclass of irflow.engine.stage.Stage, got {cls!r}")
    if "__attrs_attrs__" not in cls.__dict__:  # inherited attrs metadata does not make a subclass attrs
        raise TypeError(f"{cls.__qualname__} must be an attrs class (decorate it with @attrs.frozen)")
    if not isinstance(kind, str) or not _NAME.match(kind):
        raise ValueError(f"stage kind must be an identifier-like name, got {kind!r}")
    if not isinstance(cls.output, PortType):
        raise TypeError(f"{cls.__qualname__}.output must be a PortType, got {cls.output!r}")
    ports = tuple(cls.inputs)
    if not all(isinstance(p, Port) for p in ports):
        raise TypeError(f"{cls.__qualname__}.inputs must be a tuple of irflow.engine.ports.Port")
    names = [p.name for p in ports]
    if len(set(names)) != len(names):
        raise ValueError(f"{cls.__qualname__} declares duplicate input port names: {names}")
    if sum(p.variadic for p in ports) > 1:
        raise ValueError(f"{cls.__qualname__} declares more than one variadic port")
    reserved = sorted(set(RESERVED_SPEC_KEYS) & {f.name for f in attrs.fields(cls)})
    if reserved:
        raise ValueError(f"{cls.__qualname__} has parameters named {reserved}; "
                         f"{', '.join(RESERVED_SPEC_KEYS)} are reserved recipe keys")
    if cls.run is Stage.run:
        raise TypeError(f"{cls.__qualname__} must implement run(self, ctx, **inputs)")
    _check_run_takes_the_ports(cls, kind, ports)


def _check_run_takes_the_ports(cls: type[Stage], kind: str, ports: tuple[Port, ...]) -> None:
    """Refuse a kind whose ``run()`` could not be called with its declared ports (a ``StagePortError``)."""
    problems = run_port_problems(cls.run, ports, bound="run" in _plain_methods(cls))
    if not problems:
        return
    try:
        shown = str(inspect.signature(cls.run))
    except (TypeError, ValueError):
        shown = "(?)"
    declared = ", ".join(p.describe() for p in ports) or "(none)"
    fit = ", ".join(["self", "ctx", *(p.name if p.required or p.is_query else f"{p.name}=None" for p in ports)])
    raise StagePortError(
        f"stage kind {kind!r} ({cls.__module__}.{cls.__qualname__}): run() does not match its declared input "
        f"ports: {'; '.join(problems)}. Declared ports (inputs): {declared}; run{shown}. The engine calls "
        f"run(ctx, **{{port: value}}): name run()'s parameters after the ports, def run({fit}), "
        "or declare the ports run() takes in `inputs`")


def _plain_methods(cls: type) -> set[str]:
    """Names whose class attribute is a plain function (``cls.run`` then still expects ``self``)."""
    return {name for name in ("run",) if inspect.isfunction(inspect.getattr_static(cls, name))}


def run_port_problems(run: Any, ports: tuple[Port, ...], *, bound: bool = True) -> list[str]:
    """What keeps ``run(ctx, **{port: value})`` from taking exactly the declared ``ports``.

    ``bound``: ``run`` is a plain function that still expects ``self`` first.
    Every port must be a keyword parameter of ``run()`` (or land in its
    ``**kwargs``); a port that may be left unwired (``required=False``, not a
    query port) needs a default, since the engine then passes nothing; and
    every named parameter after the context must be a port, or the engine
    would never fill it.

    >>> from irflow.engine.ports import CANDIDATES, MASK
    >>> run_port_problems(lambda self, ctx, candidates: None, (Port("candidates", CANDIDATES),))
    []
    >>> run_port_problems(lambda self, ctx, candidate: None, (Port("candidates", CANDIDATES),))
    ["port 'candidates' is not a parameter of run()", "run() parameter 'candidate' is no declared port"]
    """
    try:
        parameters = list(inspect.signature(run).parameters.values())
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read, nothing to check
        return []
    if bound and parameters and parameters[0].kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                      inspect.Parameter.POSITIONAL_OR_KEYWORD):
        parameters = parameters[1:]
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                  inspect.Parameter.VAR_POSITIONAL)
    if not parameters or parameters[0].kind not in positional:
        return ["run() must take the stage context as its first positional parameter (after self)"]
    context, rest = parameters[0], parameters[1:]
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in rest)
    by_keyword = {p.name: p for p in rest
                  if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    problems: list[str] = []
    for port in ports:
        param = by_keyword.get(port.name)
        if context.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and port.name == context.name:
            problems.append(f"port {port.name!r} has the name of run()'s context parameter; rename one of them")
        elif param is None and not takes_any:
            problems.append(f"port {port.name!r} is not a parameter of run()")
        elif (param is not None and param.default is inspect.Parameter.empty
              and not port.required and not port.is_query):
            problems.append(f"port {port.name!r} is optional (required=False) but run()'s parameter "
                            f"{port.name!r} has no default; give it one (e.g. {port.name}=None)")
    names = {p.name for p in ports}
    for param in rest:
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            problems.append(f"run() parameter {param.name!r} is positional-only; ports are passed by keyword")
        elif param.name in by_keyword and param.name not in names:
            problems.append(f"run() parameter {param.name!r} is no declared port")
    return problems


def stage_kinds() -> tuple[str, ...]:
    """Every registered kind name, sorted (built-ins and third parties)."""
    _ensure_loaded()
    return tuple(sorted(_KINDS))


def get_stage_class(kind: str) -> type[Stage] | None:
    """The class registered under ``kind``, or None."""
    _ensure_loaded()
    return _KINDS.get(kind)


def _reset_entry_points() -> None:
    """Forget that entry points were loaded, so the next lookup loads them again (tests)."""
    with _LOCK:
        _STATE["entry_points"] = "todo"
