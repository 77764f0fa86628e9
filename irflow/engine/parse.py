"""Parse a recipe's plain-data form (a dict, as TOML and YAML files hold it) into a :class:`RecipeSpec`.

Parsing is structural and never stops at the first problem: each section
(``[recipe]``, ``[params]``, ``[choices]``, ``[derived.*]``, ``[stages.*]``)
is read by its own step, which records what is malformed and keeps going
with a neutral value, so that validation can report everything at once.
The problems travel with the parsed recipe (``parse_problems``), and
``parse_flags`` marks the (stage, field) pairs already reported so that
validation adds no follow-on noise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from irflow.engine.formats import TOP_KEYS
from irflow.engine.model import DERIVED_RULES, DerivedSpec, RecipeSpec, StageSpec
from irflow.engine.stage import RESERVED_SPEC_KEYS
from irflow.engine.validators import did_you_mean, listing
from irflow.errors import RecipeError

__all__ = ["parse_recipe", "RECIPE_KEYS"]

#: The keys of the ``[recipe]`` table.
RECIPE_KEYS = ("name", "description", "output", "null_params")

_R = TypeVar("_R", bound=RecipeSpec)


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool))


class _Parser:
    """One parse of one recipe: the data, where it came from, and what was found wrong so far."""

    def __init__(self, data: Mapping[str, Any], source: str) -> None:
        self.data = data
        self.source = source
        self.where = f"{source}:"
        self.problems: list[str] = []
        self.flags: set[tuple[str, str]] = set()

    def table(self, key: str) -> Mapping[str, Any]:
        """The top-level table ``key`` with its string keys ({} when absent or not a table)."""
        value = self.data.get(key, {})
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.problems.append(f"{self.where} [{key}] must be a table, got {type(value).__name__}")
            return {}
        for name in value:
            if not isinstance(name, str):
                self.problems.append(f"{self.where} [{key}] has a non-string key {name!r} (in YAML, quote keys "
                                     "such as yes/no/on/off/1)")
        return {k: v for k, v in value.items() if isinstance(k, str)}

    # -- sections ------------------------------------------------------------

    def top_level(self) -> None:
        for key in self.data:
            if key not in TOP_KEYS:
                self.problems.append(f"{self.where} unknown top-level table {key!r}{did_you_mean(key, TOP_KEYS)}; "
                                     f"a recipe has the tables {', '.join(TOP_KEYS)}")

    def head(self) -> tuple[Mapping[str, Any], str, str]:
        """The ``[recipe]`` table, its name and its description."""
        head = self.table("recipe")
        for key in head:
            if key not in RECIPE_KEYS:
                self.problems.append(f"{self.where} unknown key {key!r} in [recipe]{did_you_mean(key, RECIPE_KEYS)}; "
                                     f"valid keys: {', '.join(RECIPE_KEYS)}")
        name = head.get("name", "")
        if not isinstance(name, str) or not name:
            self.problems.append(f"{self.where} [recipe] needs a name (a non-empty string), got {name!r}")
            name = "" if not isinstance(name, str) else name
        description = head.get("description", "")
        if not isinstance(description, str):
            self.problems.append(f"{self.where} [recipe] description must be a string, got {description!r}")
            description = ""
        return head, name, description

    def output(self, head: Mapping[str, Any], stages_table: Mapping[str, Any]) -> str:
        output = head.get("output")
        if output is None:
            self.problems.append(f"{self.where} [recipe] has no output; add output = \"<stage>\" naming the stage "
                                 f"whose output is the result (stages: {listing(stages_table)})")
            self.flags.add(("", "output"))
            return ""
        if not isinstance(output, str):
            self.problems.append(f"{self.where} [recipe] output must be a stage name (a string), got {output!r}")
            self.flags.add(("", "output"))
            return ""
        return output

    def params(self, head: Mapping[str, Any]) -> dict[str, Any]:
        """``[params]``, with the ``null_params`` of ``[recipe]`` added as None (TOML has no null)."""
        params = dict(self.table("params"))
        nulls = head.get("null_params", [])
        if not isinstance(nulls, (list, tuple)) or not all(isinstance(n, str) for n in nulls):
            self.problems.append(f"{self.where} [recipe] null_params must be a list of parameter names, "
                                 f"got {nulls!r}")
            nulls = []
        for null in nulls:
            if params.get(null) is not None:
                self.problems.append(f"{self.where} parameter {null!r} is listed in null_params but has the default "
                                     f"{params[null]!r} in [params]; keep one of the two")
            else:
                params[null] = None
        return params

    def choices(self) -> dict[str, tuple[Any, ...]]:
        choices: dict[str, tuple[Any, ...]] = {}
        for key, allowed in self.table("choices").items():
            if not isinstance(allowed, (list, tuple)) or not allowed or not all(_scalar(a) for a in allowed):
                self.problems.append(f"{self.where} [choices] {key} must be a non-empty list of values, "
                                     f"got {allowed!r}")
                continue
            choices[key] = tuple(allowed)
        return choices

    def derived(self) -> dict[str, DerivedSpec]:
        derived: dict[str, DerivedSpec] = {}
        for key, body in self.table("derived").items():
            if not isinstance(body, Mapping):
                self.problems.append(f"{self.where} [derived.{key}] must be a table with a rule, "
                                     f"got {type(body).__name__}")
                continue
            rule = body.get("rule")
            if not isinstance(rule, str):
                self.problems.append(f"{self.where} [derived.{key}] needs rule = \"...\" (one of "
                                     f"{', '.join(DERIVED_RULES)}), got {rule!r}")
                rule = ""
                self.flags.add((key, "rule"))
            derived[key] = DerivedSpec(key, rule, {k: v for k, v in body.items() if k != "rule"})
        return derived

    def stages(self, stages_table: Mapping[str, Any]) -> dict[str, StageSpec]:
        if not stages_table:
            self.problems.append(f"{self.where} the recipe has no stages; add at least one [stages.NAME] table "
                                 "with a kind")
        return {name: self.stage(name, body) for name, body in stages_table.items()}

    # -- one stage -------------------------------------------------------------

    def stage(self, name: str, body: Any) -> StageSpec:
        label = f"{self.where} stage {name!r}"
        if not isinstance(body, Mapping):
            self.problems.append(f"{label} must be a table (kind = ..., inputs = ..., parameters), "
                                 f"got {type(body).__name__}")
            self.flags.add((name, "kind"))
            return StageSpec(name, "")
        kind = body.get("kind")
        if not isinstance(kind, str) or not kind:
            self.problems.append(f"{label} has no kind; add kind = \"...\" (see irflow.stage_kinds())"
                                 if kind is None else f"{label}: kind must be a string, got {kind!r}")
            self.flags.add((name, "kind"))
            kind = ""
        inputs = self.stage_inputs(name, label, body.get("inputs", ()))
        when = self.stage_when(label, body.get("when", {}))
        params = {k: v for k, v in body.items() if k not in RESERVED_SPEC_KEYS}
        return StageSpec(name, kind, inputs, params, when)

    def stage_inputs(self, name: str, label: str, inputs: Any) -> Any:
        """A list of stage names or a table ``port = stage | [stages]``; malformed entries dropped and reported."""
        if isinstance(inputs, str):
            inputs = (inputs,)
        if isinstance(inputs, Mapping):
            bad = [k for k, v in inputs.items() if not (isinstance(v, str) or (
                isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)))]
            if bad:
                self.problems.append(f"{label}: inputs.{bad[0]} must name a stage (or a list of stages), "
                                     f"got {inputs[bad[0]]!r}")
                self.flags.add((name, "inputs"))
                inputs = {k: v for k, v in inputs.items() if k not in bad}
        elif not isinstance(inputs, (list, tuple)) or not all(isinstance(i, str) for i in inputs):
            self.problems.append(f"{label}: inputs must be a list of stage names or a table port = \"stage\", "
                                 f"got {inputs!r}")
            self.flags.add((name, "inputs"))
            inputs = ()
        return inputs

    def stage_when(self, label: str, when: Any) -> dict[str, Any]:
        """``when = { param = [values] }`` with every malformed condition dropped and reported."""
        if not isinstance(when, Mapping):
            self.problems.append(f"{label}: when must be a table param = [values], got {when!r}")
            when = {}
        clean = {}
        for key, allowed in when.items():
            values = allowed if isinstance(allowed, (list, tuple)) else [allowed]
            if not values or not all(_scalar(v) for v in values):
                self.problems.append(f"{label}: when.{key} must be a value or a non-empty list of values "
                                     f"(strings, numbers, booleans), got {allowed!r}")
                continue
            clean[key] = values
        return clean


def parse_recipe(data: Any, source: str, recipe_class: type[_R]) -> _R:
    """``data`` (a recipe's dict form) as a ``recipe_class``, with its structural problems in ``parse_problems``.

    Only data that is not a mapping at all is refused here (a RecipeError);
    everything else is reported by validation, together with the semantic problems.
    """
    if not isinstance(data, Mapping):
        raise RecipeError(f"{source}: a recipe must be a mapping with the keys {', '.join(TOP_KEYS)}; "
                          f"got {type(data).__name__}", source=source)
    parser = _Parser(data, source)
    parser.top_level()
    head, name, description = parser.head()
    stages_table = parser.table("stages")
    output = parser.output(head, stages_table)
    params = parser.params(head)
    choices = parser.choices()
    derived = parser.derived()
    stages = parser.stages(stages_table)
    return recipe_class(name=name, output=output, description=description, params=params, stages=stages,
                        derived=derived, choices=choices, source=source, parse_problems=parser.problems,
                        parse_flags=parser.flags)
