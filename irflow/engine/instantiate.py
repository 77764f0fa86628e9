"""Build objects from a recipe's values: stage objects and derived parameters, every bad value reported.

A stage kind's attrs fields are its parameters, so building a stage from a
recipe runs the same converters and validators the Python API does.  Each
field is tried on its own first, so that several bad parameters are all
reported, each naming the recipe parameter it came from and what the field
takes; then the whole object is built (cross-field checks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from irflow.engine.model import DERIVED_RULES, DERIVED_WHEN, DerivedSpec, RecipeSpec, StageSpec, literal, param_ref, \
    resolve_value, thaw, when_holds
from irflow.engine.stage import stage_params
from irflow.errors import RecipeError

__all__ = ["instantiate", "field_problem", "stage_values", "evaluate_derived", "derived_when"]


def instantiate(cls: type[Any], values: Mapping[str, Any], via: Mapping[str, str],
                label: str) -> tuple[Any, list[str]]:
    """Build ``cls(**values)`` through its attrs converters and validators, reporting every bad value.

    ``via[key]`` names the recipe parameter a value came from (for messages).
    Each field is checked on its own first so that several bad parameters
    are all reported; then the whole object is built (cross-field checks).
    """
    infos = stage_params(cls)
    fields = {f.name: f for f in attrs.fields(cls) if f.init}
    problems: list[str] = []
    for key, value in values.items():
        where = f" (from recipe parameter ${via[key]})" if key in via else ""
        phrase = field_problem(fields[key], value)
        if phrase is not None:
            problems.append(f"{label}: parameter {key} = {value!r}{where}: {phrase}; "
                            f"valid: {infos[key].describe()}{_doc(infos[key].doc)}")
    for key, info in infos.items():
        if info.required and key not in values:
            problems.append(f"{label}: missing required parameter {key} ({info.describe()}{_doc(info.doc)}); "
                            f"add {key} = ... to the stage")
    if problems:
        return None, problems
    try:
        return cls(**values), []
    except (TypeError, ValueError) as error:
        return None, [f"{label}: invalid parameters {dict(values)!r}: {error}"]


def field_error(field: "attrs.Attribute[Any]", value: Any) -> TypeError | ValueError | None:
    """The error one attrs field (its converter and validator alone) raises for ``value``, or None."""
    try:
        converted = value
        if field.converter is not None and not isinstance(field.converter, attrs.Converter):
            converted = field.converter(value)
        if field.validator is not None:
            field.validator(None, field, converted)
    except (TypeError, ValueError) as error:
        return error
    except Exception:  # a validator that needs the instance: left to the constructor
        return None
    return None


def field_problem(field: "attrs.Attribute[Any]", value: Any) -> str | None:
    """What is wrong with ``value`` for one attrs field (its converter and validator alone), or None."""
    error = field_error(field, value)
    return None if error is None else _phrase(error)


def _phrase(error: Exception) -> str:
    text = str(error).rstrip(".")
    return text if text.startswith(("must", "is ", "should")) else f"invalid ({text})"


def _doc(doc: str) -> str:
    return f" — {doc}" if doc else ""


def stage_values(spec: StageSpec, params: Mapping[str, Any], valid_refs: set[str],
                 fields: Iterable[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Literal and resolved ``"$param"`` values of a stage's known parameters (None dropped)."""
    values: dict[str, Any] = {}
    via: dict[str, str] = {}
    known = set(fields)
    for key, raw in spec.params.items():
        if key not in known:
            continue
        name = param_ref(raw)
        if name is None:
            values[key] = thaw(literal(raw))
        elif name in valid_refs:
            value = params.get(name)
            if value is not None:  # None: the stage default applies
                values[key] = thaw(value)
                via[key] = name
    return values, via


def derived_when(spec: DerivedSpec) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """A derived parameter's ``when`` condition as ``(parameter, allowed values)`` pairs (none: always)."""
    when = spec.args.get(DERIVED_WHEN)
    if not isinstance(when, Mapping):
        return ()
    return tuple((str(k), v if isinstance(v, tuple) else (v,)) for k, v in when.items())


def evaluate_derived(recipe: RecipeSpec, spec: DerivedSpec, values: Mapping[str, Any], given: Any) -> Any:
    """Compute one derived parameter (args resolved against ``values``); RecipeError naming bad arguments.

    A ``when`` that does not hold leaves the rule out: the parameter is ``given`` (None unless the
    caller set it).
    """
    if given is None and not when_holds(derived_when(spec), values):
        return None
    args: dict[str, Any] = {}
    via: dict[str, str] = {}
    for key, value in spec.args.items():
        if key == DERIVED_WHEN:
            continue
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
