"""The stage model: frozen attrs classes registered under a kind name.

A stage kind is a small frozen attrs class.  Its attrs fields *are* its
parameters (names, defaults, validators, one-line docs in field metadata);
its class variables declare its typed input ports and its output type; its
``run`` maps one batch of inputs to one output.  Because parameters are
attrs fields, a recipe's parameters are checked by the same validators the
Python API uses, and the list of valid parameters in an error message comes
from the class itself.

Kinds are looked up by name in one registry.  The built-in kinds (package
``irflow.stages``) and third-party kinds advertised under the entry-point
group ``"irflow.stages"`` load lazily, once, at the first lookup; an
application can also call :func:`register_stage` directly.

A minimal third-party kind::

    @register_stage
    @attrs.frozen
    class Floor(Stage):
        "Drop candidates scoring below ``minimum``."
        kind = "floor"
        inputs = (Port("candidates", CANDIDATES),)
        output = CANDIDATES
        minimum: float = param(0.0, validator=finite_number, doc="lowest score kept")

        def run(self, ctx, candidates):
            return candidates.select(candidates.score >= self.minimum)
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import importlib.util
import math
import re
import sys
import threading
import warnings
from pathlib import Path
from types import ModuleType
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from irflow.engine.batches import QueryBatch, Scale
from irflow.engine.ports import CANDIDATES, Port, PortType

__all__ = [
    "Stage",
    "StageContext",
    "Upstream",
    "ParamInfo",
    "param",
    "register_stage",
    "unregister_stage",
    "get_stage_class",
    "stage_kinds",
    "stage_params",
    "describe_params",
    "closest",
    "ENTRY_POINT_GROUP",
    "RESERVED_SPEC_KEYS",
    # validators
    "positive_int",
    "non_negative_int",
    "finite_number",
    "non_negative_number",
    "positive_number",
    "boolean",
    "one_of",
    "optional_mapping",
    "optional_str_list",
    "str_tuple",
    "number_mapping",
]

#: Entry-point group third-party packages use to ship stage kinds.
ENTRY_POINT_GROUP = "irflow.stages"

#: Keys of a recipe's stage table that are not parameters.
RESERVED_SPEC_KEYS: tuple[str, ...] = ("kind", "inputs", "when")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


# --------------------------------------------------------------------------
# stage base


@attrs.frozen
class StageContext:
    """What a running stage may use besides its inputs.

    ``name`` is the stage's name in the recipe — the prefix of the provenance
    columns it writes (``"<name>.score"``); ``queries`` is the raw query batch
    of the run; ``corpus`` the corpus the recipe runs on.
    """

    corpus: Any
    name: str
    queries: QueryBatch


@attrs.frozen
class Upstream:
    """What validation knows about one stage feeding an input port.

    ``scales`` is the set of score scales that stage may produce (``None``:
    unknown, e.g. a third-party kind that does not say) — a stage's
    :meth:`Stage.check` uses it to refuse inputs it cannot interpret.
    """

    name: str
    kind: str
    type: PortType
    scales: frozenset[Scale] | None = None


@attrs.frozen
class Stage:
    """Base class of every stage kind.

    Subclasses are ``@attrs.frozen`` and set the class variables ``kind``,
    ``inputs`` (a tuple of :class:`~irflow.engine.ports.Port`) and ``output`` (a
    :class:`~irflow.engine.ports.PortType`); their attrs fields are their
    parameters.  ``run`` receives the inputs as keyword arguments named after
    the ports (a variadic port receives ``{upstream stage name: value}``) and
    must not mutate them.
    """

    kind: ClassVar[str] = ""
    inputs: ClassVar[tuple[Port, ...]] = ()
    output: ClassVar[PortType] = CANDIDATES

    def run(self, ctx: StageContext, **inputs: Any) -> Any:
        """Compute this stage's output for the whole query batch."""
        raise NotImplementedError(f"stage kind {self.kind!r} does not implement run()")

    def output_scales(self, inputs: Mapping[str, tuple[Upstream, ...]]) -> frozenset[Scale] | None:
        """The score scales this stage may output, known before any data (None: unknown)."""
        return None

    def check(self, inputs: Mapping[str, tuple[Upstream, ...]]) -> list[str]:
        """Build-time problems of this stage with these parameters and upstreams.

        Each message says what is wrong and how to fix it, without naming the
        stage (validation prefixes file and stage).  Default: none.
        """
        return []

    def params(self) -> dict[str, Any]:
        """The stage's parameters (every field, defaults included), shallow."""
        return {f.name: getattr(self, f.name) for f in attrs.fields(type(self))}

    def unused_params(self, inputs: Mapping[str, tuple[str, ...]]) -> frozenset[str]:
        """Parameters that cannot change this stage's output, given the others and its active inputs.

        ``inputs`` maps each port to the upstream stages that are active in
        this run.  A sweep uses it to evaluate once the settings that cannot
        differ (``rrf_k`` under a blend fusion).  Default: every parameter counts.
        """
        return frozenset()


# --------------------------------------------------------------------------
# parameters


def param(default: Any = attrs.NOTHING, *, validator: Any = None, converter: Any = None, doc: str = "",
          choices: Sequence[Any] | None = None) -> Any:
    """An attrs field declaring a stage parameter, with a one-line ``doc``.

    ``choices`` (optional) lists the valid values; it is shown in messages
    and checked.  The doc appears in error messages and ``irflow`` help.
    """
    validators = []
    if choices is not None:
        validators.append(one_of(*choices))
    if validator is not None:
        validators.append(validator)
    metadata = {"doc": doc}
    if choices is not None:
        metadata["choices"] = tuple(choices)
    return attrs.field(default=default, validator=validators or None, converter=converter, metadata=metadata)


@attrs.frozen
class ParamInfo:
    """One parameter of a stage kind, read from its attrs field."""

    name: str
    type: str
    default: Any
    doc: str
    choices: tuple[Any, ...] | None = None

    @property
    def required(self) -> bool:
        return self.default is attrs.NOTHING

    def describe(self) -> str:
        """``fetch_k: int = 50`` (or ``name: type, required``) for messages."""
        if self.required:
            return f"{self.name}: {self.type} (required)"
        return f"{self.name}: {self.type} = {self.default!r}"


def _type_name(annotation: Any) -> str:
    if annotation is None:
        return "any"
    if isinstance(annotation, str):
        return annotation
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def stage_params(cls: type[Stage]) -> dict[str, ParamInfo]:
    """The parameters of a stage kind, in declaration order."""
    infos: dict[str, ParamInfo] = {}
    for field in attrs.fields(cls):
        if not field.init:
            continue
        default = field.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            default = default.factory() if not default.takes_self else attrs.NOTHING
        infos[field.name] = ParamInfo(field.name, _type_name(field.type), default,
                                      field.metadata.get("doc", ""), field.metadata.get("choices"))
    return infos


def describe_params(cls: type[Stage]) -> str:
    """``fetch_k: int = 50, bm25: mapping | None = None`` — or ``(none)``."""
    infos = stage_params(cls)
    return ", ".join(info.describe() for info in infos.values()) or "(none)"


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The closest match of ``word`` among ``candidates`` (difflib), or None."""
    matches = difflib.get_close_matches(str(word), list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


# --------------------------------------------------------------------------
# validators (attrs signature; messages say what is expected and what was given)


def _got(value: Any) -> str:
    return f"got {value!r} ({type(value).__name__})"


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def is_finite(value: Any) -> bool:
    """A finite number a float can hold: False for NaN, inf and ints like 10**400 (where math.isfinite raises)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def positive_int(instance: Any, attribute: Any, value: Any) -> None:
    """An integer >= 1."""
    if not _is_int(value) or value < 1:
        raise ValueError(f"must be a positive integer, {_got(value)}")


def non_negative_int(instance: Any, attribute: Any, value: Any) -> None:
    """An integer >= 0."""
    if not _is_int(value) or value < 0:
        raise ValueError(f"must be an integer >= 0, {_got(value)}")


def finite_number(instance: Any, attribute: Any, value: Any) -> None:
    """A finite int or float."""
    if not _is_number(value) or not is_finite(value):
        raise ValueError(f"must be a finite number, {_got(value)}")


def non_negative_number(instance: Any, attribute: Any, value: Any) -> None:
    """A finite number >= 0."""
    if not _is_number(value) or not is_finite(value) or value < 0:
        raise ValueError(f"must be a finite number >= 0, {_got(value)}")


def positive_number(instance: Any, attribute: Any, value: Any) -> None:
    """A finite number > 0."""
    if not _is_number(value) or not is_finite(value) or value <= 0:
        raise ValueError(f"must be a finite number > 0, {_got(value)}")


def boolean(instance: Any, attribute: Any, value: Any) -> None:
    """True or False (not 0/1, not "true")."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"must be true or false, {_got(value)}")


def one_of(*choices: Any) -> Callable[[Any, Any, Any], None]:
    """A validator accepting exactly the listed values (True is not 1)."""
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if not any(value == c and isinstance(value, bool) == isinstance(c, bool) for c in choices):
            hint = closest(value, [str(c) for c in choices]) if isinstance(value, str) else None
            did = f" (did you mean {hint!r}?)" if hint else ""
            raise ValueError(f"must be one of {', '.join(map(repr, choices))}; got {value!r}{did}")
    return check


def optional_mapping(instance: Any, attribute: Any, value: Any) -> None:
    """None or a mapping with string keys."""
    if value is None:
        return
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"must be a table (mapping with string keys) or left out, {_got(value)}")


def str_tuple(value: Any) -> Any:
    """Converter: a list or tuple of strings becomes a tuple; anything else passes through
    unchanged so that :func:`optional_str_list` can name it in its error."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return value


def optional_str_list(instance: Any, attribute: Any, value: Any) -> None:
    """None or a tuple of strings (use with the :func:`str_tuple` converter)."""
    if value is not None and not (isinstance(value, tuple) and all(isinstance(v, str) for v in value)):
        raise ValueError(f"must be a list of strings (e.g. [\"name\", \"description\"]) or left out, {_got(value)}")


def number_mapping(instance: Any, attribute: Any, value: Any) -> None:
    """None or a mapping of str -> finite non-negative number."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise ValueError(f"must be a table of name = number, {_got(value)}")
    for key, number in value.items():
        if not isinstance(key, str):
            raise ValueError(f"keys must be strings, got {key!r}")
        if not _is_number(number) or not is_finite(number) or number < 0:
            raise ValueError(f"values must be finite numbers >= 0; {key!r} is {number!r}")


# --------------------------------------------------------------------------
# the kind registry

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
    import irflow

    folder = Path(irflow.__file__).resolve().parent.parent / name
    init = folder / "__init__.py"
    if not init.exists():
        raise ModuleNotFoundError(f"cannot find {dotted}: not installed and no {init}", name=dotted)
    module = module_from_file(dotted, init, search_locations=[str(folder)])
    setattr(irflow, name, module)
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
        name = kind or getattr(stage_cls, "kind", "")
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
