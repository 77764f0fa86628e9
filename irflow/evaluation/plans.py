"""What an evaluation runs: each recipe, under each setting of a sweep, with the ranking depth as its ``k``.

A plan is one system of the evaluation (a label, a recipe, its parameters).
Settings of a sweep that cannot differ (``rrf_k`` under a blend fusion) are
merged into one plan, and the merge is reported.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from irflow.engine.recipe import Recipe, load_recipe
from irflow.evaluation.metrics import EvaluationError
from irflow.evaluation.sweep import expand_sweep, run_signature, setting_label
from irflow.util.cachekey import cache_key
from irflow.util.unicode import check_text

__all__ = ["Plan", "plan"]


@attrs.frozen
class Plan:
    label: str
    recipe: Recipe
    params: dict[str, Any]


def _recipe_params(recipe: Recipe) -> set[str]:
    return set(recipe.params) | set(recipe.derived)


def _named_recipes(recipes: Any) -> list[tuple[str | None, Recipe]]:
    """``[(label or None, Recipe)]`` from one recipe, a sequence, or a mapping label -> recipe."""
    if isinstance(recipes, Mapping):
        for label in recipes:  # a label names a run file and a run tag: UTF-8 text, as every name
            check_text(str(label), "a system label", error=EvaluationError)
        return [(str(label), load_recipe(r)) for label, r in recipes.items()]
    if isinstance(recipes, (str, os.PathLike, Recipe)):
        recipes = [recipes]
    out: list[tuple[str | None, Recipe]] = [(None, load_recipe(r)) for r in recipes]
    if not out:
        raise EvaluationError("no recipe to evaluate; name at least one (a built-in name such as 'lexical', or a file)")
    return out


def _unique(label: str, taken: set[str]) -> str:
    if label not in taken:
        return label
    n = 2
    while f"{label}#{n}" in taken:
        n += 1
    return f"{label}#{n}"


def _check_known(what: str, names: Iterable[str], recipes: Sequence[Recipe]) -> None:
    unknown = [n for n in names if not any(n in _recipe_params(r) for r in recipes)]
    if unknown:
        listing = "; ".join(f"{r.name}: {', '.join(sorted(_recipe_params(r)))}" for r in recipes)
        raise EvaluationError(f"{what} {unknown} {'is' if len(unknown) == 1 else 'are'} not a parameter of any "
                              f"recipe evaluated ({listing})")


def _depth_params(recipe: Recipe, given: Mapping[str, Any], depth: int, per_document: bool) -> dict[str, Any]:
    """The depth-related parameters a run needs unless the caller set them (see the module docstring)."""
    known = _recipe_params(recipe)
    out: dict[str, Any] = {}
    if "k" in known and "k" not in given:
        out["k"] = depth
    if per_document and "fetch_k" in known and "fetch_k" not in given:
        out["fetch_k"] = given.get("k", depth)
    return out


def _system_plans(label: str, recipe: Recipe, params: Mapping[str, Any], settings: list[dict[str, Any]],
                  depth: int, per_document: bool,
                  merged: list[tuple[str, tuple[str, ...], tuple[str, ...]]] | None = None) -> list[Plan]:
    """One plan per distinct setting of the parameters this recipe has.

    Settings whose runs compute the same thing (:func:`irflow.evaluation.sweep.run_signature`:
    ``rrf_k`` under a blend fusion, a fusion when one channel is off) are
    evaluated once, labelled by the parameters that matter; ``merged``
    receives ``(label kept, labels merged, parameters without effect)``.
    """
    known = _recipe_params(recipe)
    given = {k: v for k, v in params.items() if k in known}
    if isinstance(given.get("k"), int) and given["k"] < depth:
        warnings.warn(f"{label}: k={given['k']} ranks fewer documents than the metrics need ({depth}); "
                      "metrics with a larger cutoff see a truncated ranking", stacklevel=4)
    seen: set[Any] = set()
    groups: list[list[dict[str, Any]]] = []
    runs: list[dict[str, Any]] = []
    signatures: list[Any] = []
    for setting in settings:
        # a recipe sweeps only the parameters it has; the others would repeat one system
        mine = {k: v for k, v in setting.items() if k in known}
        # type-exact: a setting {"x": 1} must not hide {"x": True}, which validation may refuse
        if cache_key(mine) in seen:
            continue
        seen.add(cache_key(mine))
        run_params = {**given, **mine}
        full = {**_depth_params(recipe, run_params, depth, per_document), **run_params}
        signature = run_signature(recipe, full) if len(settings) > 1 else None
        if signature is not None and signature in signatures:
            groups[signatures.index(signature)].append(mine)
            continue
        signatures.append(signature)
        groups.append([mine])
        runs.append(full)
    plans: list[Plan] = []
    for group, full in zip(groups, runs):
        if len(group) == 1:
            plans.append(Plan(setting_label(label, group[0]), recipe, full))
            continue
        unused = tuple(k for k in group[0] if any(g.get(k) != group[0][k] for g in group[1:]))
        kept = setting_label(label, {k: v for k, v in group[0].items() if k not in unused})
        plans.append(Plan(kept, recipe, full))
        if merged is not None:
            merged.append((kept, tuple(setting_label(label, g) for g in group), unused))
    return plans


def plan(recipes: Any, params: Mapping[str, Any], sweep: Mapping[str, Sequence[Any]] | None,
          baseline: Any, depth: int, per_document: bool,
          merged: list[tuple[str, tuple[str, ...], tuple[str, ...]]] | None = None) -> tuple[list[Plan], str | None]:
    """The systems to evaluate, in order (an added baseline first), and the baseline's label."""
    named = _named_recipes(recipes)
    settings = expand_sweep(sweep)
    plans: list[Plan] = []
    taken: set[str] = set()
    for label, recipe in named:
        label = _unique(label or recipe.name, taken)
        taken.add(label)
        plans.extend(_system_plans(label, recipe, params, settings, depth, per_document, merged))
    everything = [r for _, r in named]
    base_label: str | None = None
    if baseline is not None:
        labels = [p.label for p in plans]
        if isinstance(baseline, str) and baseline in labels:
            base_label = baseline
        else:
            # another recipe (or one evaluated here only in sweep settings): run it once with its defaults
            base_recipe = load_recipe(baseline)
            base_label = _unique(base_recipe.name, set(labels))
            everything.append(base_recipe)
            plans.insert(0, _system_plans(base_label, base_recipe, params, [{}], depth, per_document)[0])
    _check_known("parameter", params, everything)
    _check_known("swept parameter", list(sweep or {}), everything)
    return plans, base_label


# --------------------------------------------------------------------------
# running
