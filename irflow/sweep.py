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

from irflow.metrics import EvaluationError

__all__ = ["expand_sweep", "setting_label", "format_param"]


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
