"""Recipes: a named DAG of stages, in TOML, YAML, a dict or Python — all equal.

A recipe names its stages, their parameters and their wiring, plus recipe
parameters that stages refer to as ``"$name"`` and that a run may override.
The canonical form is a plain dict; the TOML and YAML files have exactly its
structure, and the Python builder makes the same object::

    [recipe]
    name = "hybrid"
    description = "dense and BM25 fused by RRF, best surface per artifact"
    output = "collapse"                # the stage whose output is the result
    null_params = ["filter"]           # params whose default is None (TOML has no null)

    [params]                           # defaults, overridable: recipe.run(corpus, q, k=5)
    k = 10
    fetch_k = 50

    [choices]                          # optional: the values a param may take
    fusion = ["rrf", "blend"]

    [derived.fetch_k]                  # optional: a param computed by a closed engine rule
    rule = "over_fetch"
    k = "$k"
    if_any = ["$per_artifact"]

    [stages.candidates]
    kind = "filter"
    filter = "$filter"

    [stages.dense]
    kind = "dense"
    inputs = ["candidates"]            # or { mask = "candidates" }
    when = { mode = ["dense", "hybrid"] }
    fetch_k = "$fetch_k"

Rules worth knowing:

- ``None``.  A *stage* parameter that is None (or resolves to None at run
  time) is the same as leaving it out: the stage's default applies.  A
  *recipe* parameter may default to None: YAML and dicts write ``null``;
  TOML, which has no null, lists it in ``[recipe] null_params``.
- ``"$name"`` must be the whole value of a stage parameter (no
  interpolation inside strings, lists or tables, so filter operators such as
  ``"$in"`` inside a table are never taken for references).  A literal string
  starting with ``$`` is written ``"$$..."``.
- ``when = { param = [values] }``: the stage runs only when every listed
  recipe parameter has one of the listed values; otherwise its output is an
  inactive batch (a fuse ignores it, everything downstream of a required
  inactive input is inactive too).
- ``[derived.NAME]`` computes a parameter with a rule from a closed set
  (:data:`DERIVED_RULES`; no expressions, no code): ``over_fetch`` gives
  ``NAME`` if it is set (else its ``given`` argument, if set), else
  ``max(k * factor, minimum)`` when any value of ``if_any`` is truthy, else
  ``k``.  Arguments may be ``"$param"``, also inside the ``if_any`` list;
  they read the parameters as given, never another derived value.
- Strings never become code, except through the application's
  :mod:`irflow.registry`.  YAML is read with ``yaml.safe_load`` only.
"""

from __future__ import annotations

import difflib
import functools
import importlib.resources
import math
import os
import re
import sys
from pathlib import Path
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from irflow.errors import ParameterError, RecipeError
from irflow.util.fileio import MAX_NESTING, MAX_TEXT_BYTES, check_nesting, read_text, too_many_digits, write_atomic
from irflow.engine.stage import closest, non_negative_int, positive_int

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = [
    "Recipe",
    "StageSpec",
    "DerivedSpec",
    "RecipeBuilder",
    "FrozenMap",
    "OverFetch",
    "DERIVED_RULES",
    "RESERVED_PARAM_NAMES",
    "load_recipe",
    "builtin_recipes",
    "ref",
    "param_ref",
]

#: The implicit source node: the raw query batch.  No stage may take this name.
QUERY_NODE = "query"

#: Names a recipe parameter cannot take (they are keyword arguments of Recipe.run).
RESERVED_PARAM_NAMES: tuple[str, ...] = ("corpus", "query_or_queries", "trace", "overrides", "cache", "output",
                                          "self")

_REF = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)\Z")

_TOP_KEYS = ("recipe", "params", "choices", "derived", "stages")
_RECIPE_KEYS = ("name", "description", "output", "null_params")


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


#: The rules a ``[derived.NAME]`` table may name.  Engine code may add rules;
#: recipe files can only choose among them.
DERIVED_RULES: dict[str, type] = {"over_fetch": OverFetch}


def derived_rule_args(rule: str) -> tuple[str, ...]:
    """The argument names of a derived rule."""
    return tuple(f.name for f in attrs.fields(DERIVED_RULES[rule]))


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
    return freeze({k: v for k, v in dict(value or {}).items() if v is not None})


def _when(value: Any) -> FrozenMap:
    out = {}
    for key, allowed in dict(value or {}).items():
        out[key] = tuple(allowed) if isinstance(allowed, (list, tuple)) else (allowed,)
    return freeze(out)


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


def _choices(value: Any) -> FrozenMap:
    return freeze({k: tuple(v) for k, v in dict(value or {}).items()})


@attrs.frozen
class Recipe:
    """A recipe: equal to another when their structure is equal (not their source).

    Build one with :func:`load_recipe`, :meth:`from_dict`, :meth:`from_toml`,
    :meth:`from_yaml` or :class:`RecipeBuilder`; run it with :meth:`run`.
    ``source`` names where it came from (a file path, ``"<dict>"``,
    ``"<python>"``) so every validation message can say which file is wrong.
    """

    name: str
    output: str
    description: str = ""
    params: FrozenMap = attrs.field(factory=FrozenMap, converter=_frozen_map)
    stages: FrozenMap = attrs.field(factory=FrozenMap, converter=_specs)
    derived: FrozenMap = attrs.field(factory=FrozenMap, converter=_specs)
    choices: FrozenMap = attrs.field(factory=FrozenMap, converter=_choices)
    source: str = attrs.field(default="<python>", eq=False)
    parse_problems: tuple[str, ...] = attrs.field(default=(), eq=False, repr=False, converter=tuple)
    # (stage, field) pairs already reported while parsing, so validation adds no follow-on noise
    parse_flags: frozenset[tuple[str, str]] = attrs.field(default=frozenset(), eq=False, repr=False,
                                                          converter=frozenset)
    _cache: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False, init=False)

    # -- loading -------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<dict>", validate: bool = True) -> "Recipe":
        """A recipe from its canonical dict form (what :meth:`to_dict` returns).

        With ``validate`` (default) every problem — structural or semantic —
        is raised together in one :class:`RecipeError`.  Data nested deeper
        than :data:`irflow.util.fileio.MAX_NESTING` is refused before it is read.
        """
        check_nesting(data, source, error=_file_error(source))
        recipe = _parse(data, source)
        if validate:
            recipe.validate()
        elif recipe.parse_problems:
            raise RecipeError(list(recipe.parse_problems), source=source)
        return recipe

    @classmethod
    def from_toml(cls, text: str, *, source: str = "<toml>", validate: bool = True) -> "Recipe":
        """A recipe from TOML text."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise RecipeError(f"{source}: not valid TOML: {error}", source=source) from None
        except RecursionError:  # tomllib parses nested arrays and inline tables recursively
            raise RecipeError(f"{source}: not valid TOML: nested too deeply; the limit is {MAX_NESTING} levels "
                              "(flatten the value)", source=source) from None
        except ValueError:  # an integer beyond Python's digit limit
            raise RecipeError(f"{source}: not valid TOML: {too_many_digits()}", source=source) from None
        return cls.from_dict(data, source=source, validate=validate)

    @classmethod
    def from_yaml(cls, text: str, *, source: str = "<yaml>", validate: bool = True) -> "Recipe":
        """A recipe from YAML text (a safe loader: YAML can never build Python objects).

        Anchors and aliases (``&name`` / ``*name``) are refused: a recipe
        rarely needs them, and expanding them is how a 1 KB file becomes
        gigabytes ("billion laughs").  Nesting is limited to
        :data:`irflow.util.fileio.MAX_NESTING` levels.
        """
        import yaml

        loader = _recipe_yaml_loader()(text)
        loader.recipe_source = source
        try:
            data = loader.get_single_data()
        except RecipeError:  # an alias, an anchor, too deep: the loader's own words
            raise
        except yaml.YAMLError as error:
            raise RecipeError(f"{source}: not valid YAML: {error}", source=source) from None
        except RecursionError:
            raise RecipeError(f"{source}: not valid YAML: nested too deeply; the limit is {MAX_NESTING} levels "
                              "(flatten the value)", source=source) from None
        except ValueError as error:  # a constructor refused a scalar: an integer beyond Python's digit limit...
            reason = too_many_digits() if "digits" in str(error) else str(error)
            raise RecipeError(f"{source}: not valid YAML: {reason}", source=source) from None
        finally:
            loader.dispose()
        if not isinstance(data, Mapping):
            raise RecipeError(f"{source}: a recipe file must hold a mapping with the keys "
                              f"{', '.join(_TOP_KEYS)}; got {type(data).__name__}", source=source)
        return cls.from_dict(data, source=source, validate=validate)

    @staticmethod
    def builder(name: str, *, output: str | None = None, description: str = "") -> "RecipeBuilder":
        """A :class:`RecipeBuilder` (the Python form of a recipe)."""
        return RecipeBuilder(name, output=output, description=description)

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
        import yaml

        data = self.to_dict()
        _check_dumpable(self, data, "YAML", allow_none=True)
        return yaml.dump(data, Dumper=_yaml_dumper(), sort_keys=False, allow_unicode=True, width=100)

    def to_toml(self) -> str:
        """TOML text: [recipe], [params], [choices], [derived.*], [stages.*].

        None-default params go to ``[recipe] null_params``.  Python callables
        cannot be written (register them in :mod:`irflow.registry` and refer
        to them by name); a None nested inside a value cannot either (TOML
        has no null: use YAML).
        """
        data = self.to_dict()
        params = data.get("params", {})
        nulls = [name for name, value in params.items() if value is None]
        if nulls:
            data["recipe"]["null_params"] = nulls
            data["params"] = {k: v for k, v in params.items() if v is not None}
        _check_dumpable(self, data, "TOML", allow_none=False)
        lines: list[str] = []
        lines.append("[recipe]")
        lines.extend(_toml_pairs(data["recipe"]))
        for table in ("params", "choices"):
            if data.get(table):
                lines.extend(["", f"[{table}]"])
                lines.extend(_toml_pairs(data[table]))
        for group in ("derived", "stages"):
            for name, body in data.get(group, {}).items():
                lines.extend(["", f"[{group}.{_toml_key(name)}]"])
                lines.extend(_toml_pairs(body))
        return "\n".join(lines) + "\n"

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the recipe to ``path`` as TOML (``.toml``) or YAML (``.yaml`` / ``.yml``)."""
        path = Path(path)
        if path.suffix == ".toml":
            text = self.to_toml()
        elif path.suffix in (".yaml", ".yml"):
            text = self.to_yaml()
        else:
            raise ValueError(f"cannot tell the format of {path}: use a .toml, .yaml or .yml suffix")
        return write_atomic(path, text, "recipe file")  # never a half-written recipe over a good one

    # -- validation, graph, run ----------------------------------------------

    def problems(self) -> list[str]:
        """Every problem of this recipe (parse problems first), [] when valid."""
        from irflow.engine.validate import analyze

        return list(analyze(self).problems)

    def validate(self) -> "Recipe":
        """Raise one :class:`RecipeError` listing every problem; return self when valid."""
        self.pipeline()
        return self

    def pipeline(self) -> Any:
        """The validated :class:`irflow.engine.pipeline.Pipeline` (built once per recipe object)."""
        cached = self._cache.get("pipeline")
        if cached is None:
            from irflow.engine.pipeline import Pipeline

            cached = self._cache["pipeline"] = Pipeline.from_recipe(self)
        return cached

    def run(self, corpus: Any, query_or_queries: str | Sequence[str], *, trace: bool = False,
            overrides: Mapping[str, Any] | None = None, cache: Any = None, output: str | None = None,
            **params: Any) -> Any:
        """Run the recipe on ``corpus`` for one query (str) or a batch (list of str).

        ``params`` override recipe parameters (unknown names raise a
        RecipeError listing the recipe's parameters); ``overrides`` injects a
        precomputed output for a stage (that stage and what only it needs do
        not run); ``cache`` (a :class:`irflow.engine.executor.StageCache`) reuses
        stage outputs across runs; ``output`` runs only what that stage needs
        and makes it the result; ``trace=True`` records every stage.
        Returns a :class:`irflow.engine.result.Result`.
        """
        from irflow.engine.executor import run_recipe

        return run_recipe(self, corpus, query_or_queries, trace=trace, overrides=overrides, cache=cache,
                          output=output, params=params)

    def resolve_params(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Recipe parameters for a run: defaults, then ``overrides``, then derived ones.

        A bad override raises :class:`~irflow.errors.ParameterError` (a
        RecipeError) naming the caller's argument, not the recipe file: an
        unknown name (with the recipe's parameters and the closest one), a
        value outside ``[choices]``, or a value a stage or derived rule
        reading it refuses (with what it takes and a value that works).
        """
        from irflow.engine.validate import run_argument_problems

        overrides = dict(overrides or {})
        names = list(dict.fromkeys([*self.params, *self.derived]))
        bad: list[tuple[Any, ...]] = []
        for name, value in overrides.items():
            if name not in names:
                match = closest(str(name), names)
                bad.append((name, value, f"recipe {self.name!r} has no parameter {name!r}; its parameters are "
                                         f"{_listing(names)}", None if match is None else (match, value, "did you mean")))
        if bad:
            raise ParameterError(self.name, bad, source=self.source)
        values = {**dict(self.params), **overrides}
        problems = []
        for name, allowed in self.choices.items():
            value = values.get(name)
            if value is not None and not _among(value, allowed):
                if name in overrides:
                    match = closest(str(value), [str(a) for a in allowed]) if isinstance(value, str) else None
                    bad.append((name, value, f"must be one of {', '.join(map(repr, allowed))}",
                                (name, match, "did you mean") if match is not None else (name, allowed[0], "e.g.")))
                else:
                    problems.append(f"{self.source}: parameter {name!r} = {value!r} is not one of "
                                    f"{', '.join(map(repr, allowed))}{_did_you_mean(value, [str(a) for a in allowed]) if isinstance(value, str) else ''}")
        if bad:
            raise ParameterError(self.name, bad, source=self.source)
        if problems:
            raise RecipeError(problems, source=self.source)
        bad = run_argument_problems(self, overrides)
        if bad:
            raise ParameterError(self.name, bad, source=self.source)
        # derived parameters read the values as given (never each other's results), so the
        # order of the [derived] tables cannot matter
        given = dict(values)
        for name, spec in self.derived.items():
            values[name] = evaluate_derived(self, spec, given, given=given.get(name))
        return values

    # -- editing (each returns a new recipe) ---------------------------------

    def with_stage(self, name: str, kind: str, /, *, inputs: Any = None, when: Mapping[str, Any] | None = None,
                   **params: Any) -> "Recipe":
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

    def without_stage(self, name: str) -> "Recipe":
        """A copy without stage ``name`` (rewire its consumers yourself)."""
        if name not in self.stages:
            raise KeyError(f"recipe {self.name!r} has no stage {name!r}; stages: {_listing(self.stages)}")
        return attrs.evolve(self, stages=FrozenMap((k, v) for k, v in self.stages.items() if k != name),
                            **_EDITED)

    def with_params(self, **defaults: Any) -> "Recipe":
        """A copy with recipe parameter defaults added or changed."""
        params = FrozenMap({**dict(self.params), **{k: freeze(v) for k, v in defaults.items()}})
        return attrs.evolve(self, params=params, **_EDITED)

    def with_output(self, name: str) -> "Recipe":
        """A copy whose result is stage ``name``'s output."""
        return attrs.evolve(self, output=name, **_EDITED)


# an edited recipe is a Python recipe; problems found while parsing its file no longer apply to it
_EDITED: dict[str, Any] = {"source": "<python>", "parse_problems": (), "parse_flags": frozenset()}


def evaluate_derived(recipe: Recipe, spec: DerivedSpec, values: Mapping[str, Any], given: Any) -> Any:
    """Compute one derived parameter (args resolved against ``values``); RecipeError naming bad arguments."""
    from irflow.engine.validate import instantiate

    args: dict[str, Any] = {}
    via: dict[str, str] = {}
    for key, value in spec.args.items():
        if isinstance(value, tuple):
            args[key] = tuple(resolve_value(v, values) for v in value)
        else:
            args[key] = resolve_value(value, values)
            ref_name = param_ref(value)
            if ref_name is not None:
                via[key] = ref_name
    label = f"{recipe.source}: derived parameter {spec.name!r} (rule {spec.rule!r})"
    rule, problems = instantiate(DERIVED_RULES[spec.rule], args, via, label)
    if rule is None:
        raise RecipeError([p.replace(f"{label}: parameter ", f"{label}: argument ", 1) for p in problems],
                          source=recipe.source)
    return rule(given)


# --------------------------------------------------------------------------
# the Python form


class RecipeBuilder:
    """Builds a :class:`Recipe` in Python, step by step (the third equal form).

    >>> r = (RecipeBuilder("dense", output="collapse")
    ...      .param("k", 10)
    ...      .stage("candidates", "filter")
    ...      .stage("dense", "dense", inputs=["candidates"], fetch_k=50)
    ...      .stage("collapse", "collapse", inputs=["dense"], k=ref("k"))
    ...      .build(validate=False))
    >>> r.stages["collapse"].params["k"]
    '$k'
    """

    def __init__(self, name: str, *, output: str | None = None, description: str = "") -> None:
        self._name = name
        self._output = output
        self._description = description
        self._params: dict[str, Any] = {}
        self._choices: dict[str, tuple[Any, ...]] = {}
        self._derived: dict[str, DerivedSpec] = {}
        self._stages: dict[str, StageSpec] = {}

    def describe(self, description: str) -> "RecipeBuilder":
        self._description = description
        return self

    def param(self, name: str, default: Any = None, *, choices: Sequence[Any] | None = None) -> "RecipeBuilder":
        """Declare recipe parameter ``name`` with its default (None allowed)."""
        self._params[name] = default
        if choices is not None:
            self._choices[name] = tuple(choices)
        return self

    def params(self, **defaults: Any) -> "RecipeBuilder":
        """Declare several recipe parameters at once."""
        self._params.update(defaults)
        return self

    def derive(self, name: str, rule: str, /, **args: Any) -> "RecipeBuilder":
        """Declare a derived parameter (see :data:`DERIVED_RULES`)."""
        self._derived[name] = DerivedSpec(name, rule, args)
        return self

    def stage(self, name: str, kind: str, /, *, inputs: Any = (), when: Mapping[str, Any] | None = None,
              **params: Any) -> "RecipeBuilder":
        """Add stage ``name`` of ``kind`` with its inputs, condition and parameters."""
        self._stages[name] = StageSpec(name, kind, inputs, params, when or {})
        return self

    def output(self, name: str) -> "RecipeBuilder":
        """Make stage ``name``'s output the recipe's result."""
        self._output = name
        return self

    def build(self, *, validate: bool = True) -> Recipe:
        """The recipe (validated unless ``validate=False``)."""
        problems = []
        if not self._output:
            problems.append("<python>: the recipe has no output; call .output(\"<stage name>\") "
                            f"(stages: {_listing(self._stages)})")
        recipe = Recipe(name=self._name, output=self._output or "", description=self._description,
                        params=self._params, stages=self._stages, derived=self._derived,
                        choices=self._choices, source="<python>", parse_problems=problems,
                        parse_flags={("", "output")} if problems else ())
        if validate:
            recipe.validate()
        return recipe


# --------------------------------------------------------------------------
# parsing the dict form (structural problems are collected, not raised)


def _listing(names: Iterable[str]) -> str:
    names = list(names)
    return ", ".join(names) if names else "(none)"


def _did_you_mean(word: Any, options: Iterable[str]) -> str:
    match = difflib.get_close_matches(str(word), list(options), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _among(value: Any, allowed: Sequence[Any]) -> bool:
    return any(value == a and isinstance(value, bool) == isinstance(a, bool) for a in allowed)


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool))


def _parse(data: Any, source: str) -> Recipe:
    problems: list[str] = []
    flags: set[tuple[str, str]] = set()
    where = f"{source}:"
    if not isinstance(data, Mapping):
        raise RecipeError(f"{where} a recipe must be a mapping with the keys {', '.join(_TOP_KEYS)}; "
                          f"got {type(data).__name__}", source=source)
    for key in data:
        if key not in _TOP_KEYS:
            problems.append(f"{where} unknown top-level table {key!r}{_did_you_mean(key, _TOP_KEYS)}; "
                            f"a recipe has the tables {', '.join(_TOP_KEYS)}")

    def table(key: str) -> Mapping[str, Any]:
        value = data.get(key, {})
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            problems.append(f"{where} [{key}] must be a table, got {type(value).__name__}")
            return {}
        for name in value:
            if not isinstance(name, str):
                problems.append(f"{where} [{key}] has a non-string key {name!r} (in YAML, quote keys "
                                "such as yes/no/on/off/1)")
        return {k: v for k, v in value.items() if isinstance(k, str)}

    head = table("recipe")
    for key in head:
        if key not in _RECIPE_KEYS:
            problems.append(f"{where} unknown key {key!r} in [recipe]{_did_you_mean(key, _RECIPE_KEYS)}; "
                            f"valid keys: {', '.join(_RECIPE_KEYS)}")
    name = head.get("name", "")
    if not isinstance(name, str) or not name:
        problems.append(f"{where} [recipe] needs a name (a non-empty string), got {name!r}")
        name = "" if not isinstance(name, str) else name
    description = head.get("description", "")
    if not isinstance(description, str):
        problems.append(f"{where} [recipe] description must be a string, got {description!r}")
        description = ""

    stages_table = table("stages")
    output = head.get("output")
    if output is None:
        problems.append(f"{where} [recipe] has no output; add output = \"<stage>\" naming the stage whose "
                        f"output is the result (stages: {_listing(stages_table)})")
        flags.add(("", "output"))
        output = ""
    elif not isinstance(output, str):
        problems.append(f"{where} [recipe] output must be a stage name (a string), got {output!r}")
        flags.add(("", "output"))
        output = ""

    params = dict(table("params"))
    nulls = head.get("null_params", [])
    if not isinstance(nulls, (list, tuple)) or not all(isinstance(n, str) for n in nulls):
        problems.append(f"{where} [recipe] null_params must be a list of parameter names, got {nulls!r}")
        nulls = []
    for null in nulls:
        if params.get(null) is not None:
            problems.append(f"{where} parameter {null!r} is listed in null_params but has the default "
                            f"{params[null]!r} in [params]; keep one of the two")
        else:
            params[null] = None

    choices: dict[str, tuple[Any, ...]] = {}
    for key, allowed in table("choices").items():
        if not isinstance(allowed, (list, tuple)) or not allowed or not all(_scalar(a) for a in allowed):
            problems.append(f"{where} [choices] {key} must be a non-empty list of values, got {allowed!r}")
            continue
        choices[key] = tuple(allowed)

    derived: dict[str, DerivedSpec] = {}
    for key, body in table("derived").items():
        if not isinstance(body, Mapping):
            problems.append(f"{where} [derived.{key}] must be a table with a rule, got {type(body).__name__}")
            continue
        rule = body.get("rule")
        if not isinstance(rule, str):
            problems.append(f"{where} [derived.{key}] needs rule = \"...\" (one of {', '.join(DERIVED_RULES)}), "
                            f"got {rule!r}")
            rule = ""
            flags.add((key, "rule"))
        derived[key] = DerivedSpec(key, rule, {k: v for k, v in body.items() if k != "rule"})

    stages: dict[str, StageSpec] = {}
    if not stages_table:
        problems.append(f"{where} the recipe has no stages; add at least one [stages.NAME] table with a kind")
    for stage_name, body in stages_table.items():
        label = f"{where} stage {stage_name!r}"
        if not isinstance(body, Mapping):
            problems.append(f"{label} must be a table (kind = ..., inputs = ..., parameters), "
                            f"got {type(body).__name__}")
            flags.add((stage_name, "kind"))
            stages[stage_name] = StageSpec(stage_name, "")
            continue
        kind = body.get("kind")
        if not isinstance(kind, str) or not kind:
            problems.append(f"{label} has no kind; add kind = \"...\" (see irflow.engine.stage.stage_kinds())"
                            if kind is None else f"{label}: kind must be a string, got {kind!r}")
            flags.add((stage_name, "kind"))
            kind = ""
        inputs = body.get("inputs", ())
        if isinstance(inputs, str):
            inputs = (inputs,)
        if isinstance(inputs, Mapping):
            bad = [k for k, v in inputs.items() if not (isinstance(v, str) or (
                isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)))]
            if bad:
                problems.append(f"{label}: inputs.{bad[0]} must name a stage (or a list of stages), "
                                f"got {inputs[bad[0]]!r}")
                flags.add((stage_name, "inputs"))
                inputs = {k: v for k, v in inputs.items() if k not in bad}
        elif not isinstance(inputs, (list, tuple)) or not all(isinstance(i, str) for i in inputs):
            problems.append(f"{label}: inputs must be a list of stage names or a table port = \"stage\", "
                            f"got {inputs!r}")
            flags.add((stage_name, "inputs"))
            inputs = ()
        when = body.get("when", {})
        if not isinstance(when, Mapping):
            problems.append(f"{label}: when must be a table param = [values], got {when!r}")
            when = {}
        clean_when = {}
        for key, allowed in when.items():
            values = allowed if isinstance(allowed, (list, tuple)) else [allowed]
            if not values or not all(_scalar(v) for v in values):
                problems.append(f"{label}: when.{key} must be a value or a non-empty list of values "
                                f"(strings, numbers, booleans), got {allowed!r}")
                continue
            clean_when[key] = values
        params_ = {k: v for k, v in body.items() if k not in ("kind", "inputs", "when")}
        stages[stage_name] = StageSpec(stage_name, kind, inputs, params_, clean_when)

    return Recipe(name=name, output=output, description=description, params=params, stages=stages,
                  derived=derived, choices=choices, source=source, parse_problems=problems,
                  parse_flags=flags)


# --------------------------------------------------------------------------
# dumping helpers


def _check_dumpable(recipe: Recipe, data: Any, fmt: str, *, allow_none: bool) -> None:
    problems: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    problems.append(f"{recipe.source}: {path} has a non-string key {key!r}; {fmt} keys are strings")
                walk(item, f"{path}.{key}" if path else str(key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{path}[{i}]")
        elif value is None:
            if not allow_none:
                problems.append(f"{recipe.source}: {path} is None, which TOML cannot hold (it has no null); "
                                "leave the key out, or write the recipe as YAML")
        elif isinstance(value, (str, bool, int, float)):
            return
        elif callable(value):
            problems.append(f"{recipe.source}: {path} holds the Python object {value!r}, which a recipe file "
                            f"cannot name; register it with irflow.registry.register('<name>', obj) and use "
                            "the name instead")
        else:
            problems.append(f"{recipe.source}: {path} holds a {type(value).__name__}, which {fmt} cannot hold; "
                            "use strings, numbers, booleans, lists and tables")

    walk(data, "")
    if problems:
        raise RecipeError(problems, source=recipe.source)


def _yaml_dumper() -> type:
    """A SafeDumper writing tables as blocks and lists of scalars inline (``inputs: [a, b]``)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def represent_list(dumper: yaml.SafeDumper, data: list) -> Any:
        flow = all(not isinstance(v, (dict, list)) for v in data)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)

    def represent_dict(dumper: yaml.SafeDumper, data: dict) -> Any:
        return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=False)

    def represent_str(dumper: yaml.SafeDumper, data: str) -> Any:
        # NEL and the Unicode line/paragraph separators are line breaks to a YAML reader: escape them
        style = '"' if any(c in data for c in "\x85\u2028\u2029") else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    Dumper.add_representer(str, represent_str)
    Dumper.add_representer(list, represent_list)
    Dumper.add_representer(dict, represent_dict)
    return Dumper


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+\Z")


def _toml_key(key: str) -> str:
    if _BARE_KEY.match(key):
        return key
    import tomli_w

    return tomli_w.dumps({key: 0})[: -len(" = 0\n")]


def _toml_value(value: Any) -> str:
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    import tomli_w

    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return tomli_w.dumps({"x": value})[len("x = "):-1]


def _toml_pairs(table: Mapping[str, Any]) -> list[str]:
    return [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items()]


# --------------------------------------------------------------------------
# files and built-ins

_SUFFIXES = (".toml", ".yaml", ".yml")


def _recipes_dir() -> Any:
    from irflow.engine.stage import _source_subpackage

    return importlib.resources.files(_source_subpackage("recipes"))


def builtin_recipes() -> tuple[str, ...]:
    """Names of the recipes shipped in ``irflow.recipes`` (``recipes/`` in the repository)."""
    names = set()
    for entry in _recipes_dir().iterdir():
        stem, dot, suffix = entry.name.rpartition(".")
        if dot and f".{suffix}" in _SUFFIXES:
            names.add(stem)
    return tuple(sorted(names))


def load_recipe(path_or_name: str | os.PathLike[str] | Recipe, *, validate: bool = True) -> Recipe:
    """Load a recipe file (``.toml`` / ``.yaml`` / ``.yml``) or a built-in recipe by name.

    A name without a suffix that is not an existing file is looked up among
    the built-in recipes (``recipes/<name>.toml``, then ``.yaml``).  Problems
    are raised together in one RecipeError naming the file.

    >>> load_recipe("hybrid").output
    'collapse'
    """
    if isinstance(path_or_name, Recipe):
        return path_or_name.validate() if validate else path_or_name
    text_path = os.fspath(path_or_name)
    path = Path(text_path)
    # a bare name that is a folder here (./hybrid/) does not hide the built-in recipe of that name
    if path.suffix in _SUFFIXES or (path.exists() and not path.is_dir()) or os.sep in text_path or "/" in text_path:
        if not os.path.lexists(text_path):
            raise RecipeError(f"{text_path}: no such recipe file", source=text_path)
        text = read_text(path, "recipe file", max_bytes=MAX_TEXT_BYTES, error=_file_error(text_path))
        return _load_text(text, path.suffix, text_path, validate)
    folder = _recipes_dir()
    for suffix in _SUFFIXES:
        entry = folder / f"{text_path}{suffix}"
        if entry.is_file():
            return _load_text(entry.read_text(encoding="utf-8"), suffix, f"recipes/{text_path}{suffix}", validate)
    known = builtin_recipes()
    raise RecipeError(f"{text_path!r} is neither a recipe file nor a built-in recipe"
                      f"{_did_you_mean(text_path, known)}; built-in recipes: {_listing(known)} "
                      "(a file path needs a .toml, .yaml or .yml suffix)", source=text_path)


def _file_error(source: str) -> Any:
    """An error factory for :mod:`irflow.util.fileio`: its messages as a RecipeError about ``source``."""
    return lambda message: RecipeError(message, source=source)


@functools.lru_cache(maxsize=1)
def _recipe_yaml_loader() -> type:
    """PyYAML's safe loader, refusing anchors and aliases and limiting nesting (built once, lazily)."""
    import yaml

    class RecipeLoader(yaml.SafeLoader):
        recipe_source = "<yaml>"
        _depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            line = event.start_mark.line + 1 if event.start_mark is not None else "?"
            where = f"{self.recipe_source} line {line}"
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                mark = f"*{event.anchor}" if isinstance(event, yaml.AliasEvent) else f"&{event.anchor}"
                raise RecipeError(f"{where}: YAML anchors and aliases ({mark}) are not allowed in recipe files; "
                                  "write the value out where it is used (a recipe rarely repeats one, and "
                                  "expanding aliases is how a small file becomes gigabytes)",
                                  source=self.recipe_source)
            self._depth += 1
            try:
                if self._depth > MAX_NESTING:
                    raise RecipeError(f"{where}: nested more than {MAX_NESTING} levels deep, the limit "
                                      "(flatten the value)", source=self.recipe_source)
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    return RecipeLoader


def _load_text(text: str, suffix: str, source: str, validate: bool) -> Recipe:
    if suffix == ".toml":
        return Recipe.from_toml(text, source=source, validate=validate)
    if suffix in (".yaml", ".yml"):
        return Recipe.from_yaml(text, source=source, validate=validate)
    # an existing file without a known suffix: try TOML, then YAML
    try:
        return Recipe.from_toml(text, source=source, validate=validate)
    except RecipeError as error:
        if "not valid TOML" not in str(error):
            raise
    return Recipe.from_yaml(text, source=source, validate=validate)
