"""The ``irflow`` group's own options: how much a command says on stderr, and the threads it computes on.

``-v`` (INFO), ``-vv`` (DEBUG), ``-q`` (errors only: no progress, no
warnings, no notes) and ``--log-level LEVEL`` set the level of the
``irflow`` logger for one command, and a plain handler writes its records
on stderr (``INFO irflow.evaluation.cache: building the corpus ...``).  The
library itself never configures logging (``irflow/__init__.py`` gives the
``irflow`` logger a NullHandler): only the command line does, here, once per
command, and undoes it when the command ends.  ``--threads N`` runs the
command under :func:`irflow.util.threads.limit_threads`.

Commands read what was chosen with :func:`quiet`, :func:`show_progress` and
write their stderr notes with :func:`note`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click

from irflow.util.threads import limit_threads

__all__ = ["global_options", "configure", "quiet", "show_progress", "note", "LEVELS"]

#: The levels ``--log-level`` takes (any case).
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

#: Where ``ctx.meta`` keeps ``-q``.
QUIET = "irflow.quiet"

F = TypeVar("F", bound=Callable[..., Any])


class StderrHandler(logging.Handler):
    """Writes each record as one line on the ``sys.stderr`` of the moment (a test runner may swap it)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            click.echo(self.format(record), err=True)
        except Exception:  # noqa: BLE001 — logging's rule: a failing handler reports, never raises
            self.handleError(record)


def global_options(group: F) -> F:
    """Add ``-v``, ``-q``, ``--log-level`` and ``--threads`` to the ``irflow`` group."""
    options = [
        click.option("-v", "--verbose", count=True,
                     help="Say more on stderr: -v what irflow is doing (INFO), -vv the details (DEBUG)."),
        click.option("-q", "--quiet", "be_quiet", is_flag=True,
                     help="Errors only: no progress, no warnings, no notes on stderr."),
        click.option("--log-level", type=click.Choice(LEVELS, case_sensitive=False), default=None,
                     help="The level of irflow's loggers (default WARNING); instead of -v / -q."),
        click.option("--threads", type=click.IntRange(min=1), default=None, metavar="N",
                     help="Threads of the ONNX embedder and of BLAS (default: every CPU this process may use; "
                          "$IRFLOW_ONNX_THREADS sets the embedder's when not given), and of a batch of BM25 "
                          "queries (default 1). Answers are the same at any count."),
    ]
    return functools.reduce(lambda command, option: option(command), reversed(options), group)


def _level(verbose: int, be_quiet: bool, log_level: str | None) -> int:
    given = [name for name, on in (("-v", verbose), ("-q", be_quiet), ("--log-level", log_level)) if on]
    if len(given) > 1:
        raise click.UsageError(f"{' and '.join(given)} both set how much irflow says; give one of them")
    if log_level is not None:
        return int(getattr(logging, log_level.upper()))
    if be_quiet:
        return logging.ERROR
    return {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)


@contextlib.contextmanager
def _logging_to_stderr(level: int) -> Iterator[None]:
    """The ``irflow`` logger at ``level`` with one stderr handler, for the block; as before afterwards."""
    logger = logging.getLogger("irflow")
    handler = StderrHandler()
    before = logger.level
    logger.setLevel(level)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)


def configure(ctx: click.Context, *, verbose: int, be_quiet: bool, log_level: str | None,
              threads: int | None) -> None:
    """Apply the group's options for the command ``ctx`` runs (undone when it ends)."""
    level = _level(verbose, be_quiet, log_level)
    ctx.meta[QUIET] = be_quiet
    ctx.with_resource(_logging_to_stderr(level))
    if threads is not None:
        ctx.with_resource(limit_threads(threads))


def quiet() -> bool:
    """Whether ``-q`` was given (False outside a command)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(QUIET, False))


def show_progress(choice: bool | None = None) -> bool:
    """A command's ``--progress/--no-progress`` (``choice``), else progress unless ``-q``."""
    return not quiet() if choice is None else choice


def note(text: str) -> None:
    """A line for the user on stderr (what was written where, a fallback taken), unless ``-q``."""
    if not quiet():
        click.echo(text, err=True)
