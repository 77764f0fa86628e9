"""Parameter sweeps: the settings of a grid, and the labels that name them.

A sweep maps recipe parameter names to the values to try; its settings are
the cartesian product, in the order the names and values were given, so
results come out in a predictable order.  Each setting is labelled
``"<recipe>[name=value,...]"``, e.g. ``"hybrid[rrf_k=10,alpha=0.3]"``: a
label with no spaces reads well in a table, as a JSON key and as part of a
run file's name.

>>> [setting_label("hybrid", s) for s in expand_sweep({"rrf_k": [10, 60], "fusion": ["rrf"]})]
['hybrid[rrf_k=10,fusion=rrf]', 'hybrid[rrf_k=60,fusion=rrf]']
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any


from irflow.util.cachekey import cache_key
from irflow.errors import IrflowError
from irflow.evaluation.metrics import EvaluationError

__all__ = ["expand_sweep", "setting_label", "format_param", "run_signature"]


def _values(name: str, values: Any) -> tuple[Any, ...]:
    # a string is one value, not a sequence of characters to sweep over
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise EvaluationError(f"sweep parameter {name!r} needs a list of values to try, e.g. "
                              f"{{{name!r}: [10, 30, 60]}}; got {values!r}")
    if not values:
        raise EvaluationError(f"sweep parameter {name!r} has no values; give at least one")
    return tuple(values)


def expand_sweep(sweep: Mapping[str, Sequence[Any]] | None) -> list[dict[str, Any]]:
    """Every setting of the grid (cartesian product), first name varying slowest.

    No sweep (None or empty) is a single empty setting: the recipe as it is.

    >>> expand_sweep({"rrf_k": [10, 30], "alpha": [0.5]})
    [{'rrf_k': 10, 'alpha': 0.5}, {'rrf_k': 30, 'alpha': 0.5}]
    >>> expand_sweep(None)
    [{}]
    """
    if not sweep:
        return [{}]
    if not isinstance(sweep, Mapping):
        raise EvaluationError(f"a sweep maps parameter names to lists of values, e.g. {{'rrf_k': [10, 60]}}; "
                              f"got {type(sweep).__name__}")
    names = list(sweep)
    grids = [_values(name, sweep[name]) for name in names]
    return [dict(zip(names, combo)) for combo in itertools.product(*grids)]


def format_param(value: Any) -> str:
    """A parameter value as it appears in a label: strings bare, the rest as JSON.

    >>> format_param("blend"), format_param(0.5), format_param(True), format_param(None)
    ('blend', '0.5', 'true', 'null')
    """
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):  # a Python object (a reranker): its repr is the best name there is
        return repr(value)


def setting_label(base: str, setting: Mapping[str, Any]) -> str:
    """``base`` for the empty setting, else ``"base[name=value,...]"``.

    >>> setting_label("hybrid", {"rrf_k": 10})
    'hybrid[rrf_k=10]'
    """
    if not setting:
        return base
    return f"{base}[{','.join(f'{k}={format_param(v)}' for k, v in setting.items())}]"


def _when_matches(value: Any, allowed: Sequence[Any]) -> bool:
    return any(value == a and isinstance(value, bool) == isinstance(a, bool) for a in allowed)


def run_signature(recipe: Any, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """What a run of ``recipe`` with ``params`` computes, as a comparable value.

    Per stage that can be active (its ``when`` holds and its required inputs
    are active, as the executor decides): its name, kind, active inputs and
    the parameters that can change its output (:meth:`irflow.engine.stage.Stage.unused_params`
    leaves out, e.g., ``rrf_k`` under a blend fusion, or every fusion
    parameter when one channel is off).  Two settings with equal signatures
    give identical results, so a sweep evaluates them once.  None when the
    parameters are invalid (the run itself will say why).
    """
    try:
        pipeline = recipe.pipeline()
        values = recipe.resolve_params(params)
        needed = pipeline.needed(recipe.output)
        instances = pipeline.instances(values, needed)
    except (IrflowError, ValueError, TypeError, KeyError):
        return None
    active: dict[str, bool] = {}
    parts: list[tuple[Any, ...]] = []
    for name in needed:
        cls = pipeline.classes[name]
        bound = pipeline.bindings[name]
        on = all(_when_matches(values.get(param), allowed) for param, allowed in recipe.stages[name].when.items())
        live: dict[str, tuple[str, ...]] = {}
        for port in cls.inputs:
            sources = tuple(bound.get(port.name) or ())
            if not sources:
                continue
            live[port.name] = tuple(s for s in sources if active.get(s, True))  # the query node is always on
            if port.variadic and len(live[port.name]) < port.minimum:
                on = False
            if not port.variadic and not live[port.name] and port.required:
                on = False
        active[name] = on
        if not on:
            continue
        stage = instances[name]
        unused = stage.unused_params(live)
        kept = tuple(sorted((k, cache_key(v)) for k, v in stage.params().items() if k not in unused))
        parts.append((name, cls.kind, tuple(sorted(live.items())), kept))
    return tuple(parts)
