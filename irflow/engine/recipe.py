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
  ``k``; ``deepen`` gives ``NAME`` if it is set, else ``k`` when its
  ``given`` argument is None and every value of ``if_all`` is truthy, else
  None (the ``deepen_to`` of a channel: fetch deeper until ``k`` artifacts).
  Arguments may be ``"$param"``, also inside the ``if_any`` / ``if_all``
  lists; they read the parameters as given, never another derived value.
  Every rule also takes ``when = { param = [values] }``, a stage's
  condition: when it does not hold the rule is left out and ``NAME`` is
  None (unless the caller set it).
- Strings never become code, except through the application's
  :mod:`irflow.registry`.  YAML is read with ``yaml.safe_load`` only.
"""

from __future__ import annotations

import importlib.resources
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from irflow.engine.report.reprs import recipe_view
from irflow.engine.executor import StageCache, run_recipe
from irflow.engine.formats import file_error, read_toml, read_yaml
from irflow.engine.kinds import _source_subpackage, get_stage_class
from irflow.engine.model import (
    DERIVED_RULES,
    QUERY_NODE,
    RESERVED_PARAM_NAMES,
    DerivedSpec,
    FrozenMap,
    OverFetch,
    RecipeSpec,
    StageSpec,
    param_ref,
    ref,
)
from irflow.engine.params import resolve_params
from irflow.engine.parse import parse_recipe
from irflow.engine.pipeline import Pipeline
from irflow.engine.result import Result
from irflow.engine.validate import analyze
from irflow.engine.validators import did_you_mean, listing
from irflow.errors import RecipeError
from irflow.util.fileio import MAX_TEXT_BYTES, check_nesting, read_text

__all__ = [
    "Recipe",
    "RecipeSpec",
    "StageSpec",
    "DerivedSpec",
    "RecipeBuilder",
    "FrozenMap",
    "OverFetch",
    "DERIVED_RULES",
    "QUERY_NODE",
    "RESERVED_PARAM_NAMES",
    "load_recipe",
    "builtin_recipes",
    "ref",
    "param_ref",
]


@attrs.frozen
class Recipe(RecipeSpec):
    """A recipe: equal to another when their structure is equal (not their source).

    Build one with :func:`load_recipe`, :meth:`from_dict`, :meth:`from_toml`,
    :meth:`from_yaml` or :class:`RecipeBuilder`; run it with :meth:`run`.
    ``source`` names where it came from (a file path, ``"<dict>"``,
    ``"<python>"``) so every validation message can say which file is wrong.
    Its data and editing (``with_stage``, ``to_toml``...) are those of
    :class:`~irflow.engine.model.RecipeSpec`; this class adds loading,
    validation and running.
    """

    # -- loading -------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<dict>", validate: bool = True) -> "Recipe":
        """A recipe from its canonical dict form (what :meth:`to_dict` returns).

        With ``validate`` (default) every problem — structural or semantic —
        is raised together in one :class:`RecipeError`.  Data nested deeper
        than :data:`irflow.util.fileio.MAX_NESTING` is refused before it is read.
        """
        check_nesting(data, source, error=file_error(source))
        recipe = parse_recipe(data, source, cls)
        if validate:
            recipe.validate()
        elif recipe.parse_problems:
            raise RecipeError(list(recipe.parse_problems), source=source)
        return recipe

    @classmethod
    def from_toml(cls, text: str, *, source: str = "<toml>", validate: bool = True) -> "Recipe":
        """A recipe from TOML text."""
        return cls.from_dict(read_toml(text, source), source=source, validate=validate)

    @classmethod
    def from_yaml(cls, text: str, *, source: str = "<yaml>", validate: bool = True) -> "Recipe":
        """A recipe from YAML text (a safe loader: YAML can never build Python objects).

        Anchors and aliases (``&name`` / ``*name``) are refused: a recipe
        rarely needs them, and expanding them is how a 1 KB file becomes
        gigabytes ("billion laughs").  Nesting is limited to
        :data:`irflow.util.fileio.MAX_NESTING` levels.
        """
        return cls.from_dict(read_yaml(text, source), source=source, validate=validate)

    @staticmethod
    def builder(name: str, *, output: str | None = None, description: str = "") -> "RecipeBuilder":
        """A :class:`RecipeBuilder` (the Python form of a recipe)."""
        return RecipeBuilder(name, output=output, description=description)

    # -- validation, graph, run ----------------------------------------------

    def problems(self) -> list[str]:
        """Every problem of this recipe (parse problems first), [] when valid."""
        return list(analyze(self).problems)

    def validate(self) -> "Recipe":
        """Raise one :class:`RecipeError` listing every problem; return self when valid."""
        self.pipeline()
        return self

    def pipeline(self) -> Pipeline:
        """The validated :class:`irflow.engine.pipeline.Pipeline` (built once per recipe object)."""
        return Pipeline.of(self)

    def _repr_html_(self) -> str:
        """A notebook's view: the DAG and one row per stage."""
        return recipe_view(self)

    def run(self, corpus: Any, query_or_queries: str | Sequence[str], *, trace: bool = False,
            overrides: Mapping[str, Any] | None = None, cache: StageCache | None = None, output: str | None = None,
            **params: Any) -> Result:
        """Run the recipe on ``corpus`` for one query (str) or a batch (list of str).

        ``params`` override recipe parameters (unknown names raise a
        RecipeError listing the recipe's parameters); ``overrides`` injects a
        precomputed output for a stage (that stage and what only it needs do
        not run); ``cache`` (a :class:`irflow.engine.executor.StageCache`) reuses
        stage outputs across runs; ``output`` runs only what that stage needs
        and makes it the result; ``trace=True`` records every stage.
        ``corpus`` is anything with the corpus protocol
        (:class:`~irflow.store.protocol.CorpusProtocol`): a Corpus, a sharded corpus.
        Returns a :class:`irflow.engine.result.Result`.
        """
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
        return resolve_params(self, overrides)

    def fusion(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """How the recipe fuses its channels in a run with ``overrides``: its first fuse stage, resolved.

        ``{"stage", "method", <the method's parameters>, "choices", "when"}``:
        ``choices`` are the methods the recipe lets a run pick (``--set
        fusion=...``), ``when`` the recipe parameters the fusion's channels
        depend on (``{"mode": ["hybrid"]}`` for ``search``: only hybrid mode
        fuses).  None for a recipe without a fuse stage.  What ``irflow
        recipes`` shows, and what descriptions are checked against.

        >>> load_recipe("hybrid").fusion()["method"], load_recipe("search").fusion()["method"]
        ('blend', 'rrf')
        """
        fuses = [spec for spec in self.stages.values() if spec.kind == "fuse"]
        if not fuses:
            return None
        stage = fuses[0]
        values = self.resolve_params(overrides)
        kind = get_stage_class(stage.kind)  # registered: the recipe validated
        defaults = {} if kind is None else {field.name: field.default for field in attrs.fields(kind)}

        def value(name: str) -> Any:
            given = stage.params.get(name)
            referred = param_ref(given)
            found = values.get(referred) if referred is not None else given
            return defaults.get(name) if found is None else found  # None: the stage's default

        method = value("method")
        named = param_ref(stage.params.get("method"))
        keys = ("rrf_k",) if method == "rrf" else ("alpha", "bm25_sat_k")
        inputs = stage.inputs.values() if isinstance(stage.inputs, Mapping) else stage.inputs
        when: dict[str, list[Any]] = {}  # every channel active at once: the values all of them run for
        for up in inputs:
            for key, allowed in (self.stages[up].when.items() if up in self.stages else ()):
                when[key] = [v for v in when.get(key, allowed) if v in allowed]
        return {"stage": stage.name, "method": method, **{k: value(k) for k in keys},
                "choices": list(self.choices.get(named, ())) if named else [], "when": when}


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
                            f"(stages: {listing(self._stages)})")
        recipe = Recipe(name=self._name, output=self._output or "", description=self._description,
                        params=self._params, stages=self._stages, derived=self._derived,
                        choices=self._choices, source="<python>", parse_problems=problems,
                        parse_flags={("", "output")} if problems else ())
        if validate:
            recipe.validate()
        return recipe


_SUFFIXES = (".toml", ".yaml", ".yml")


def _recipes_dir() -> Any:
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
        text = read_text(path, "recipe file", max_bytes=MAX_TEXT_BYTES, error=file_error(text_path))
        return _load_text(text, path.suffix, text_path, validate)
    folder = _recipes_dir()
    for suffix in _SUFFIXES:
        entry = folder / f"{text_path}{suffix}"
        if entry.is_file():
            return _load_text(entry.read_text(encoding="utf-8"), suffix, f"recipes/{text_path}{suffix}", validate)
    known = builtin_recipes()
    raise RecipeError(f"{text_path!r} is neither a recipe file nor a built-in recipe"
                      f"{did_you_mean(text_path, known)}; built-in recipes: {listing(known)} "
                      "(a file path needs a .toml, .yaml or .yml suffix)", source=text_path)


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
