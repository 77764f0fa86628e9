"""The recipe as data: stages, parameters, derived parameters and choices — no I/O, no validation, no running.

A :class:`RecipeSpec` is a value (equal by structure, hashable, immutable):
what every form of a recipe (a TOML or YAML file, a dict, a Python builder)
parses to, and what validation, the graph and the executor read.  The
user-facing :class:`irflow.engine.recipe.Recipe` adds loading, validation and
running on top of it.  Also here: parameter references (``"$k"``) and the
closed set of derived-parameter rules.
"""

from __future__ import annotations

import re
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs

from irflow.engine import formats
from irflow.engine.validators import non_negative_int, positive_int

__all__ = [
    "RecipeSpec",
    "StageSpec",
    "DerivedSpec",
    "FrozenMap",
    "OverFetch",
    "Deepen",
    "DERIVED_RULES",
    "DERIVED_WHEN",
    "when_holds",
    "QUERY_NODE",
    "RESERVED_PARAM_NAMES",
    "freeze",
    "thaw",
    "ref",
    "param_ref",
    "literal",
    "resolve_value",
    "derived_rule_args",
]

#: The implicit source node: the raw query batch.  No stage may take this name.
QUERY_NODE = "query"

#: Names a recipe parameter cannot take (they are keyword arguments of Recipe.run).
RESERVED_PARAM_NAMES: tuple[str, ...] = ("corpus", "query_or_queries", "trace", "overrides", "cache", "output",
                                          "self")

#: An edited copy is of the class of the original (a Recipe stays a Recipe).
_Spec = TypeVar("_Spec", bound="RecipeSpec")
_Made = TypeVar("_Made")

_REF = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)\Z")


# --------------------------------------------------------------------------
# frozen containers


class FrozenMap(Mapping[str, Any]):
    """An immutable, hashable mapping that compares equal to any equal mapping.

    Recipes hold their tables in these so that a recipe is a value: equal by
    structure, hashable, and safe to share.
    """

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()) -> None:
        self._data = dict(data)
        self._hash: int | None = None

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    # the dict's own lookups (Mapping's mixins go through __getitem__ and an exception): a run reads
    # its recipe's tables dozens of times
    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            try:
                self._hash = hash(frozenset(self._data.items()))
            except TypeError:  # an unhashable value (rare: a Python object as a param)
                self._hash = hash(frozenset(self._data))
        return self._hash

    def __repr__(self) -> str:
        return repr(self._data)


def freeze(value: Any) -> Any:
    """Deep-freeze plain data: mappings -> FrozenMap, lists/tuples -> tuple."""
    if isinstance(value, Mapping):
        return FrozenMap((k, freeze(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """The inverse of :func:`freeze`: plain dicts and lists (for dumping)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


# --------------------------------------------------------------------------
# parameter references


def ref(name: str) -> str:
    """``"$name"``: a reference to the recipe parameter ``name`` (for Python builders)."""
    return f"${name}"


def param_ref(value: Any) -> str | None:
    """The parameter a value refers to (``"$k"`` -> ``"k"``), or None for a literal.

    ``"$$x"`` is the literal ``"$x"``.  A string starting with a single ``$``
    that is not a valid name is returned as is (validation reports it).
    """
    if isinstance(value, str) and value.startswith("$") and not value.startswith("$$"):
        match = _REF.match(value)
        return match.group(1) if match else value
    return None


def literal(value: Any) -> Any:
    """A literal value with the ``$$`` escape removed."""
    if isinstance(value, str) and value.startswith("$$"):
        return value[1:]
    return value


def resolve_value(value: Any, params: Mapping[str, Any]) -> Any:
    """``value`` with a whole-value ``"$name"`` replaced by ``params[name]``."""
    name = param_ref(value)
    if name is None:
        return literal(value)
    return params[name]


# --------------------------------------------------------------------------
# derived-parameter rules (a closed set: recipe files choose, never define)


def _truthy_values(value: Any) -> tuple[Any, ...]:
    if isinstance(value, (list, tuple)):
        return tuple(value)
    raise ValueError(f"must be a list, got {value!r}")


@attrs.frozen
class OverFetch:
    """``given`` if set, else ``max(k * factor, minimum)`` when any ``if_any`` value is truthy, else ``k``.

    The seed's fetch depth: a search that collapses per artifact, reranks,
    weighs surfaces or boosts must look deeper than ``k``.  The value given
    is the derived parameter's own run-time value or, when that is None, the
    ``given`` argument — so a second depth can follow the same user setting
    (``given = "$fetch_k"``) with other ``if_any`` conditions.

    >>> OverFetch(k=10, if_any=(True, None))(None), OverFetch(k=10)(None), OverFetch(k=10)(7)
    (50, 10, 7)
    >>> OverFetch(k=10, given=30)(None)
    30
    """

    k: int = attrs.field(validator=positive_int)
    if_any: tuple[Any, ...] = attrs.field(default=(), converter=_truthy_values)
    factor: int = attrs.field(default=5, validator=positive_int)
    minimum: int = attrs.field(default=50, validator=non_negative_int)
    given: Any = None

    def __call__(self, given: Any) -> Any:
        if given is None:
            given = self.given
        if given is not None:
            return given
        if any(bool(v) for v in self.if_any):
            return max(self.k * self.factor, self.minimum)
        return self.k


@attrs.frozen
class Deepen:
    """``k`` when no depth is ``given`` and every ``if_all`` value is truthy, else None.

    How many results a first stage must hold per query text: a per-artifact
    search over one channel whose ``fetch_k`` the caller did not set fetches
    deeper until its candidates hold ``k`` artifacts (or no more match), so
    it never returns fewer than ``k`` hits while more artifacts match.  A
    ``fetch_k`` the caller sets is the depth, kept as given (None: no
    deepening).  The derived parameter's own run-time value, when set, wins.

    >>> Deepen(k=5, if_all=(True,))(None), Deepen(k=5, given=20)(None), Deepen(k=5, if_all=(False,))(None)
    (5, None, None)
    """

    k: int = attrs.field(validator=positive_int)
    if_all: tuple[Any, ...] = attrs.field(default=(), converter=_truthy_values)
    given: Any = None

    def __call__(self, given: Any) -> Any:
        if given is not None:
            return given
        if self.given is not None or not all(bool(v) for v in self.if_all):
            return None
        return self.k


@attrs.frozen
class NoneSet:
    """True when no ``of`` value is set (each None or false), else False.

    Whether anything after a first stage reads its fetch depth (a reranker,
    surface weights, a boost): when nothing does, a per-artifact search on a
    corpus of one record per artifact may fetch ``k`` (the stages' ``lean``).
    The derived parameter's own run-time value, when set, wins.

    >>> NoneSet(of=(None, None))(None), NoneSet(of=(None, "cross-encoder"))(None), NoneSet(of=())(False)
    (True, False, False)
    """

    of: tuple[Any, ...] = attrs.field(default=(), converter=_truthy_values)

    def __call__(self, given: Any) -> Any:
        if given is not None:
            return given
        return not any(bool(v) for v in self.of)


#: The rules a ``[derived.NAME]`` table may name.  Engine code may add rules;
#: recipe files can only choose among them.
DERIVED_RULES: dict[str, type] = {"over_fetch": OverFetch, "deepen": Deepen, "none_set": NoneSet}

#: An argument every derived rule takes: ``when = { param = [values] }``, the same condition as a
#: stage's — when it does not hold, the rule is not applied and the parameter is None (unless the
#: caller set it).
DERIVED_WHEN = "when"


def derived_rule_args(rule: str) -> tuple[str, ...]:
    """The argument names of a derived rule (``when`` included: every rule takes it)."""
    return (*(f.name for f in attrs.fields(DERIVED_RULES[rule])), DERIVED_WHEN)


def when_holds(when: Iterable[tuple[str, Iterable[Any]]], values: Mapping[str, Any]) -> bool:
    """True when every ``(parameter, allowed values)`` pair holds (``True`` is not ``1``)."""
    return all(any(values.get(param) == v and isinstance(values.get(param), bool) == isinstance(v, bool)
                   for v in allowed) for param, allowed in when)


# --------------------------------------------------------------------------
# the data model


def _frozen_map(value: Any) -> FrozenMap:
    return value if isinstance(value, FrozenMap) else freeze(dict(value or {}))


def _inputs(value: Any) -> Any:
    if isinstance(value, Mapping):
        return freeze(value)
    if isinstance(value, str):
        return (value,)
    return tuple(value or ())


def _stage_params(value: Any) -> FrozenMap:
    # a stage parameter set to None is the same as leaving it out (the stage default applies)
    frozen: FrozenMap = freeze({k: v for k, v in dict(value or {}).items() if v is not None})
    return frozen


def _when(value: Any) -> FrozenMap:
    out = {}
    for key, allowed in dict(value or {}).items():
        out[key] = tuple(allowed) if isinstance(allowed, (list, tuple)) else (allowed,)
    frozen: FrozenMap = freeze(out)
    return frozen


@attrs.frozen
class StageSpec:
    """One stage of a recipe as written: kind, wiring, condition, parameters.

    ``inputs`` is a tuple of upstream stage names (they fill the kind's ports
    in declared order, query ports last) or a mapping ``port -> stage`` (or
    ``port -> [stages]`` for a port taking any number).
    """

    name: str
    kind: str
    inputs: tuple[str, ...] | FrozenMap = attrs.field(default=(), converter=_inputs)
    params: FrozenMap = attrs.field(factory=FrozenMap, converter=_stage_params)
    when: FrozenMap = attrs.field(factory=FrozenMap, converter=_when)

    def upstream_names(self) -> tuple[str, ...]:
        """Every upstream stage named in ``inputs``, in order."""
        if isinstance(self.inputs, Mapping):
            names: list[str] = []
            for value in self.inputs.values():
                names.extend(value if isinstance(value, tuple) else (value,))
            return tuple(names)
        return tuple(self.inputs)

    def to_dict(self) -> dict[str, Any]:
        """The stage's table: kind, inputs (if any), when (if any), then its parameters."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.inputs:
            out["inputs"] = thaw(self.inputs)
        if self.when:
            out["when"] = thaw(self.when)
        out.update(thaw(self.params))
        return out


@attrs.frozen
class DerivedSpec:
    """A derived parameter: ``name`` computed by ``rule`` from ``args`` (which may be ``"$param"``)."""

    name: str
    rule: str
    args: FrozenMap = attrs.field(factory=FrozenMap, converter=_frozen_map)

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, **thaw(self.args)}


def _specs(value: Any) -> FrozenMap:
    if isinstance(value, FrozenMap):
        return value
    if isinstance(value, Mapping):
        return FrozenMap(value)
    return FrozenMap((spec.name, spec) for spec in value or ())


def _problems(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _flags(value: Iterable[tuple[str, str]]) -> frozenset[tuple[str, str]]:
    return frozenset(value)


def _choices(value: Any) -> FrozenMap:
    frozen: FrozenMap = freeze({k: tuple(v) for k, v in dict(value or {}).items()})
    return frozen


@attrs.frozen
class RecipeSpec:
    """A recipe as data: equal to another when their structure is equal (not their source).

    ``source`` names where it came from (a file path, ``"<dict>"``,
    ``"<python>"``) so every validation message can say which file is wrong;
    ``parse_problems`` are the structural problems found while parsing it,
    reported with the others when it is validated.
    """

    name: str
    output: str
    description: str = ""
    params: FrozenMap = attrs.field(factory=FrozenMap, converter=_frozen_map)
    stages: FrozenMap = attrs.field(factory=FrozenMap, converter=_specs)
    derived: FrozenMap = attrs.field(factory=FrozenMap, converter=_specs)
    choices: FrozenMap = attrs.field(factory=FrozenMap, converter=_choices)
    source: str = attrs.field(default="<python>", eq=False)
    parse_problems: tuple[str, ...] = attrs.field(default=(), eq=False, repr=False, converter=_problems)
    # (stage, field) pairs already reported while parsing, so validation adds no follow-on noise
    parse_flags: frozenset[tuple[str, str]] = attrs.field(default=frozenset(), eq=False, repr=False,
                                                          converter=_flags)
    _memo: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False, init=False)

    def memo(self, key: str, make: Callable[[], _Made]) -> _Made:
        """``make()``, computed once per recipe object and kept under ``key`` (the pipeline, parameter readers).

        A recipe is immutable, so what is derived from it alone never goes stale;
        kept per object, not per value, because equal recipes may differ in ``source``.
        """
        if key not in self._memo:
            self._memo[key] = make()
        made: _Made = self._memo[key]
        return made

    # -- dumping -------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The canonical form: plain dicts and lists, None kept for None-default params."""
        head: dict[str, Any] = {"name": self.name, "description": self.description, "output": self.output}
        out: dict[str, Any] = {"recipe": head}
        if self.params:
            out["params"] = thaw(self.params)
        if self.choices:
            out["choices"] = thaw(self.choices)
        if self.derived:
            out["derived"] = {name: spec.to_dict() for name, spec in self.derived.items()}
        out["stages"] = {name: spec.to_dict() for name, spec in self.stages.items()}
        return out

    def to_yaml(self) -> str:
        """YAML text with the structure of :meth:`to_dict` (``yaml.safe_dump``)."""
        return formats.dump_yaml(self.to_dict(), self.source)

    def to_toml(self) -> str:
        """TOML text: [recipe], [params], [choices], [derived.*], [stages.*].

        None-default params go to ``[recipe] null_params``.  Python callables
        cannot be written (register them in :mod:`irflow.registry` and refer
        to them by name); a None nested inside a value cannot either (TOML
        has no null: use YAML).
        """
        return formats.dump_toml(self.to_dict(), self.source)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the recipe to ``path`` as TOML (``.toml``) or YAML (``.yaml`` / ``.yml``)."""
        path = Path(path)
        if path.suffix == ".toml":
            text = self.to_toml()
        elif path.suffix in (".yaml", ".yml"):
            text = self.to_yaml()
        else:
            raise ValueError(f"cannot tell the format of {path}: use a .toml, .yaml or .yml suffix")
        return formats.write_recipe_file(path, text)  # never a half-written recipe over a good one

    # -- editing (each returns a new recipe) ---------------------------------

    def with_stage(self: _Spec, name: str, kind: str, /, *, inputs: Any = None, when: Mapping[str, Any] | None = None,
                   **params: Any) -> _Spec:
        """A copy with stage ``name`` added or replaced (its inputs kept unless given).

        The swap of one stage for another: ``recipe.with_stage("dense", "lexical")``.
        """
        old = self.stages.get(name)
        if inputs is None:
            inputs = old.inputs if old is not None else ()
        if when is None:
            when = old.when if old is not None else {}
        stages = dict(self.stages)
        stages[name] = StageSpec(name, kind, inputs, params, when)
        return attrs.evolve(self, stages=FrozenMap(stages), **_EDITED)

    def without_stage(self: _Spec, name: str) -> _Spec:
        """A copy without stage ``name`` (rewire its consumers yourself)."""
        if name not in self.stages:
            raise KeyError(f"recipe {self.name!r} has no stage {name!r}; stages: {', '.join(self.stages) or '(none)'}")
        return attrs.evolve(self, stages=FrozenMap((k, v) for k, v in self.stages.items() if k != name),
                            **_EDITED)

    def with_params(self: _Spec, **defaults: Any) -> _Spec:
        """A copy with recipe parameter defaults added or changed."""
        params = FrozenMap({**dict(self.params), **{k: freeze(v) for k, v in defaults.items()}})
        return attrs.evolve(self, params=params, **_EDITED)

    def with_output(self: _Spec, name: str) -> _Spec:
        """A copy whose result is stage ``name``'s output."""
        return attrs.evolve(self, output=name, **_EDITED)


# an edited recipe is a Python recipe; problems found while parsing its file no longer apply to it
_EDITED: dict[str, Any] = {"source": "<python>", "parse_problems": (), "parse_flags": frozenset()}
