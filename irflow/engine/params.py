"""A run's recipe parameters: defaults, then the caller's arguments, then the derived ones — checked.

A bad argument is the caller's fault, not the recipe's: it raises
:class:`~irflow.errors.ParameterError` naming the argument, what it takes and
a value that works (an unknown name with the closest one, a value outside
``[choices]``, a value a stage or derived rule reading it refuses).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import attrs

from irflow.engine.instantiate import evaluate_derived, field_error, field_problem
from irflow.engine.kinds import get_stage_class
from irflow.engine.model import DERIVED_RULES, RecipeSpec, param_ref, thaw
from irflow.engine.stage import stage_params
from irflow.engine.validators import closest, did_you_mean, listing
from irflow.errors import FilterError, FilterParameterError, ParameterError, RecipeError
from irflow.util.cachekey import UnkeyableError, cache_key

__all__ = ["resolve_params", "resolve_params_keyed", "run_argument_problems"]


def _among(value: Any, allowed: Sequence[Any]) -> bool:
    return any(value == a and isinstance(value, bool) == isinstance(a, bool) for a in allowed)


#: Resolved parameter sets kept per recipe object (a sweep's worth), keyed type-exactly by the arguments.
RESOLVED_CACHE_SIZE = 64


def resolve_params(recipe: RecipeSpec, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Recipe parameters for a run: defaults, then ``overrides``, then derived ones.

    A bad override raises :class:`~irflow.errors.ParameterError` (a
    RecipeError) naming the caller's argument, not the recipe file: an
    unknown name (with the recipe's parameters and the closest one), a
    value outside ``[choices]``, or a value a stage or derived rule
    reading it refuses (with what it takes and a value that works).

    Checking and deriving cost a few hundred µs, a fixed cost of every
    ``search()``: a valid set of arguments is resolved once per recipe
    object and type-exact key (``rrf_k=True`` never reuses ``rrf_k=1``'s
    result); arguments with no key (callables held by identity aside) are
    resolved every time.  A hit returns a new dict holding the caller's
    own objects, never the ones of an earlier call (plain scalars — None,
    bool, int, float, str — are immutable: an equal one of the same type
    stands in for the caller's).
    """
    return resolve_params_keyed(recipe, overrides)[0]


def resolve_params_keyed(recipe: RecipeSpec,
                         overrides: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], "ArgumentsKey | None"]:
    """:func:`resolve_params` and the key of the arguments the values follow from (None: unkeyable).

    The key stands for a type-exact key of the arguments (:class:`ArgumentsKey`):
    equal arguments of the same types, hence equal values, get the same key
    object while the recipe remembers them; the executor keys the stage
    objects and the run's plan by it alone (no key over every value of
    every run, and no tuple of 17 arguments hashed again per cache).
    """
    overrides = dict(overrides or {})
    memo: dict[Any, tuple[dict[str, Any], ArgumentsKey]] = recipe.memo("resolved params", dict)
    key, plain = _arguments_key(overrides)
    found = None if key is None else memo.get(key)
    if found is not None:
        remembered, token = found
        if plain:  # plain scalars: the remembered values are the caller's, equal and immutable
            return dict(remembered), token
        # derived values are recomputed only when a given value changes them (they are ints of
        # the rules in DERIVED_RULES); the given values are this call's objects
        return {**remembered, **{n: v for n, v in overrides.items() if n not in recipe.derived}}, token
    values = _resolve_params(recipe, overrides)
    if key is None:
        return values, None
    if len(memo) >= RESOLVED_CACHE_SIZE:
        memo.pop(next(iter(memo)))
    token = ArgumentsKey(key)
    memo[key] = (dict(values), token)
    return values, token


class ArgumentsKey:
    """A run's arguments key (:func:`_arguments_key`), hashed once: what keys the stage objects and plans.

    The key is a tuple of the 17 arguments of a ``search()``; Python does not
    keep a tuple's hash, and each cache a run consults would hash it again.
    Equal arguments get this very object from the recipe's memo, so the
    caches downstream compare it by identity; arguments remembered again
    after being dropped get a new one (those caches then miss once).
    """

    __slots__ = ("key",)

    def __init__(self, key: Hashable) -> None:
        self.key = key

    def __repr__(self) -> str:
        return f"ArgumentsKey({self.key!r})"


#: Argument types a flat key spells by (type, value): exact types, none of them holds anything.
_FLAT = frozenset({type(None), bool, int, str})


def _arguments_key(overrides: Mapping[str, Any]) -> tuple[Hashable | None, bool]:
    """A type-exact key of a run's arguments (None: one has no key), and whether all are plain scalars.

    One tuple in argument order (another order is another key: a miss, never a wrong hit);
    plain scalars spelled by (type, value) — floats by bit pattern, as
    :func:`~irflow.util.cachekey.cache_key` spells them (``-0.0`` is not ``0.0``) — and only the
    other values walked by ``cache_key``: a ``search()`` passes 17 arguments, most of them None.
    """
    parts: list[tuple[Any, ...]] = []
    plain = True
    for name, value in overrides.items():
        cls = type(value)
        if cls is float:
            parts.append((name, cls, value.hex()))
        elif cls in _FLAT:
            parts.append((name, cls, value))
        else:
            plain = False
            try:
                parts.append((name, "key", cache_key(value)))
            except UnkeyableError:
                return None, False
    return ("arguments", tuple(parts)), plain


def _resolve_params(recipe: RecipeSpec, overrides: dict[str, Any]) -> dict[str, Any]:
    names = list(dict.fromkeys([*recipe.params, *recipe.derived]))
    bad: list[tuple[Any, ...]] = []
    for name, value in overrides.items():
        if name not in names:
            match = closest(str(name), names)
            bad.append((name, value, f"recipe {recipe.name!r} has no parameter {name!r}; its parameters are "
                                     f"{listing(names)}", None if match is None else (match, value, "did you mean")))
    if bad:
        raise ParameterError(recipe.name, bad, source=recipe.source)
    values = {**dict(recipe.params), **overrides}
    problems = []
    for name, allowed in recipe.choices.items():
        value = values.get(name)
        if value is not None and not _among(value, allowed):
            if name in overrides:
                match = closest(str(value), [str(a) for a in allowed]) if isinstance(value, str) else None
                bad.append((name, value, f"must be one of {', '.join(map(repr, allowed))}",
                            (name, match, "did you mean") if match is not None else (name, allowed[0], "e.g.")))
            else:
                problems.append(f"{recipe.source}: parameter {name!r} = {value!r} is not one of "
                                f"{', '.join(map(repr, allowed))}{did_you_mean(value, [str(a) for a in allowed]) if isinstance(value, str) else ''}")
    if bad:
        raise ParameterError(recipe.name, bad, source=recipe.source)
    if problems:
        raise RecipeError(problems, source=recipe.source)
    bad = run_argument_problems(recipe, overrides)
    if bad:
        readers = _readers(recipe)
        filters = any(isinstance(field_error(field, thaw(value)), FilterError)
                      for name, value, *_ in bad for _, field, _ in readers.get(name, ()))
        raise (FilterParameterError if filters else ParameterError)(recipe.name, bad, source=recipe.source)
    # derived parameters read the values as given (never each other's results), so the
    # order of the [derived] tables cannot matter
    given = dict(values)
    for name, spec in recipe.derived.items():
        values[name] = evaluate_derived(recipe, spec, given, given=given.get(name))
    return values


def _readers(recipe: RecipeSpec) -> dict[str, list[tuple[str, "attrs.Attribute[Any]", Any]]]:
    """Per recipe parameter, who reads it: (who, attrs field, ParamInfo or None); built once per recipe."""
    return recipe.memo("readers", lambda: _find_readers(recipe))


def _find_readers(recipe: RecipeSpec) -> dict[str, list[tuple[str, "attrs.Attribute[Any]", Any]]]:
    found: dict[str, list[tuple[str, attrs.Attribute[Any], Any]]] = {}
    for stage_name, spec in recipe.stages.items():
        cls = get_stage_class(spec.kind)
        if cls is None:
            continue
        fields, infos = attrs.fields_dict(cls), stage_params(cls)
        for key, raw in spec.params.items():
            name = param_ref(raw)
            if name is not None and key in fields and fields[key].init:
                found.setdefault(name, []).append((f"stage {stage_name}", fields[key], infos.get(key)))
    for derived_name, spec in recipe.derived.items():
        cls = DERIVED_RULES.get(spec.rule)
        if cls is None:
            continue
        fields = attrs.fields_dict(cls)
        for key, raw in spec.args.items():
            name = None if isinstance(raw, tuple) else param_ref(raw)
            if name is not None and key in fields:
                found.setdefault(name, []).append((f"derived {derived_name}", fields[key], None))
    return found


def run_argument_problems(recipe: RecipeSpec, given: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """The caller's run arguments that a stage or derived rule reading them refuses.

    One entry per bad argument, ``(name, value, reason, fix)`` as
    :class:`~irflow.errors.ParameterError` takes it: the reason says what
    is wrong (each distinct complaint once), who reads the value and what
    it takes; the fix is the recipe's default when that one is accepted.
    ``None`` values are skipped (a stage's own default applies).  Each value
    goes through the readers' own converters and validators only, so a
    valid call pays a few attribute checks.
    """
    readers = _readers(recipe)
    out: list[tuple[Any, ...]] = []
    for name, value in given.items():
        uses = readers.get(name)
        if value is None or not uses:
            continue
        default = recipe.params.get(name)
        if type(value) is type(default) and isinstance(value, (str, int, float)) and value == default:
            continue  # the recipe's own default, checked when the recipe was validated (search() passes them all)
        complaints: dict[str, list[str]] = {}
        valid = ""
        for who, field, info in uses:
            phrase = field_problem(field, thaw(value))
            if phrase is None:
                continue
            complaints.setdefault(phrase, [])
            if who not in complaints[phrase]:
                complaints[phrase].append(who)
            if not valid and info is not None and info.doc:  # the first documented reader says what it takes
                valid = f"; valid: {info.type} — {info.doc}"
        if not complaints:
            continue
        reason = "; ".join(f"{phrase} (read by {', '.join(whos)})" for phrase, whos in complaints.items())
        fix = None
        if default is not None and all(field_problem(field, thaw(default)) is None for _, field, _ in uses):
            fix = (name, thaw(default), "e.g.")
        out.append((name, value, reason + valid, fix))
    return out
