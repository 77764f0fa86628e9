"""Options the commands share: ``--set`` and ``--sweep`` values, ``--embedder``, JSON output.

``--set NAME=VALUE`` and ``--sweep NAME=V1,V2`` values are JSON when they
parse (within irflow's nesting and number limits), else strings; a mistake
is a usage error naming the option as the user wrote it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from irflow.engine.trace import jsonable
from irflow.errors import InputError
from irflow.kernels.embedders import AUTO
from irflow.util.fileio import loads_json
from irflow.util.unicode import json_text

__all__ = ["parse_sets", "parse_sweeps", "set_label", "json_value", "json_option", "dumps", "embedder_option"]


def parse_sets(ctx: click.Context | None, param: click.Parameter | None, values: Sequence[str]) -> dict[str, Any]:
    """``["k=5", "mode=hybrid", 'filter={"owner":"x"}']`` -> ``{"k": 5, "mode": "hybrid", "filter": {...}}``.

    A value is parsed as JSON when it parses (numbers, true/false/null,
    lists, objects), else kept as the string.
    """
    out: dict[str, Any] = {}
    for item in values:
        name, eq, raw = item.partition("=")
        name = name.strip()
        if not eq or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE (e.g. --set k=5 --set mode=hybrid)",
                                     ctx=ctx, param=param)
        try:
            out[name] = json_value(raw, f"--set {name}")
        except json.JSONDecodeError as error:
            if raw.lstrip().startswith(("{", "[")):  # meant as JSON: say it did not parse, not "must be a table"
                raise click.BadParameter(
                    f"{item!r}: the value looks like JSON but does not parse ({error.msg} at column "
                    f"{error.colno}); write JSON with double quotes and quote it for the shell, e.g. "
                    f"--set '{name}={_JSON_EXAMPLE[raw.lstrip()[0]]}' (a plain string starting with "
                    f"{raw.lstrip()[0]!r} is written as a JSON string: --set '{name}=\"...\"')",
                    ctx=ctx, param=param) from None
            out[name] = raw
    return out


_JSON_EXAMPLE = {"{": '{"field": "value"}', "[": '["a", "b"]'}


def set_label(name: str, value: Any) -> str:
    """A run argument as the user wrote it on the command line: ``--set k=5``."""
    return f"--set {name}={value if isinstance(value, str) else json.dumps(value)}"


def json_value(raw: str, where: str) -> Any:
    """``raw`` parsed as JSON within irflow's nesting and number limits (a clear usage error beyond them)."""
    try:
        return loads_json(raw, where, unique_keys=True)  # written by hand: a key named twice is a mistake
    except InputError as error:
        raise click.BadParameter(str(error)) from None


def json_option(value: str | None, what: str) -> Any:
    if value is None:
        return None
    try:
        return json_value(value, what)
    except json.JSONDecodeError as error:
        raise click.BadParameter(f"{what} must be JSON, e.g. '{{\"owner\": \"me\"}}' ({error.msg})") from None


def dumps(data: Any) -> str:
    return json_text(jsonable(data), indent=2)  # a path's undecodable bytes as \\uXXXX: the JSON stays UTF-8


def parse_sweeps(ctx: click.Context | None, param: click.Parameter | None,
                 values: Sequence[str]) -> dict[str, list[Any]]:
    """``["rrf_k=10,30,60", "fusion=rrf,blend"]`` -> ``{"rrf_k": [10, 30, 60], "fusion": ["rrf", "blend"]}``.

    Each comma-separated value is parsed as JSON when it parses, else kept as
    the string (like ``--set``); a name given twice is a mistake, not a merge.
    """
    out: dict[str, list[Any]] = {}
    for item in values:
        name, eq, raw = item.partition("=")
        name = name.strip()
        pieces = [p.strip() for p in raw.split(",")]
        if not eq or not name or not all(pieces):
            raise click.BadParameter(f"{item!r} is not NAME=V1,V2,... (e.g. --sweep rrf_k=10,30,60)",
                                     ctx=ctx, param=param)
        if name in out:
            raise click.BadParameter(f"{name!r} is swept twice; list all its values in one --sweep {name}=V1,V2,...",
                                     ctx=ctx, param=param)
        parsed = []
        for piece in pieces:
            try:
                parsed.append(json_value(piece, f"--sweep {name}"))
            except json.JSONDecodeError:
                parsed.append(piece)
        out[name] = parsed
    return out


def embedder_option(embedder: str | None) -> str | None:
    """The spec an --embedder option names: "none" -> None (lexical-only); not given -> "auto".

    "auto" is the default of every entry point, Python's too
    (:func:`irflow.kernels.embedders.default_embedder`: $IRFLOW_EMBEDDER, the installed
    model, else "hash", the fallback said once as a warning line on stderr).
    """
    if embedder is None:
        return AUTO
    return None if embedder.lower() == "none" else embedder
