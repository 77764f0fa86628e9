"""Machine-readable output: with ``--json``, a command's stdout carries its JSON and nothing else.

Libraries write to stdout on their own: Ray's driver prints what it hears
from the cluster (``(raylet) A worker died ...``), a plugin or a model
library may ``print()``.  One such line before or after the JSON and
``irflow eval --json | jq`` fails, though the figures were right.  So
while a ``--json`` command runs (:func:`machine_readable`), ``sys.stdout``
is stderr — whatever anything writes there goes to the terminal or the
log, not into the JSON — and the command writes its JSON to the real
stdout (:func:`echo_json`).  A Ray connection the command opened is closed
before stdout is given back, so what Ray prints while it shuts down goes
to stderr too (irflow's Ray backend routes Ray's driver messages to stderr
as well, whatever the command: :func:`irflow.shard.ray_backend.require_ray`).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click

from irflow.shard.ray_backend import shutdown as shutdown_ray

__all__ = ["machine_readable", "echo_json", "json_stdout"]

#: Where ``ctx.meta`` keeps the real stdout while a --json command runs.
REAL_STDOUT = "irflow.real_stdout"

F = TypeVar("F", bound=Callable[..., Any])


def _ray_connected() -> bool:
    ray = sys.modules.get("ray")  # never imported here: Ray is an extra, loaded only by a --ray command
    return ray is not None and bool(ray.is_initialized())


@contextlib.contextmanager
def json_stdout() -> Iterator[None]:
    """For the block, ``sys.stdout`` is stderr; :func:`echo_json` writes to the stdout of before."""
    ctx = click.get_current_context()
    real = sys.stdout
    ray_before = _ray_connected()
    ctx.meta[REAL_STDOUT] = real
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        try:
            if not ray_before and _ray_connected():
                shutdown_ray()  # its last messages (deduplicated worker lines) print now, to stderr
        finally:
            sys.stdout = real
            ctx.meta.pop(REAL_STDOUT, None)


def machine_readable(command: F) -> F:
    """Decorate a command with an ``as_json`` flag: when it is set, the command runs under :func:`json_stdout`."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("as_json"):
            return command(*args, **kwargs)
        with json_stdout():
            return command(*args, **kwargs)

    run.machine_readable = True  # type: ignore[attr-defined]  # tests find every --json command guarded
    return run  # type: ignore[return-value]


def echo_json(text: str) -> None:
    """Write a --json command's output to the real stdout (see the module docstring)."""
    click.echo(text, file=click.get_current_context().meta.get(REAL_STDOUT))
