"""Progress of long phases (reading, tokenizing, embedding, writing, evaluating): a bar, plain lines, or nothing.

When progress is asked for (``progress=True``; the command line asks unless
``-q`` or ``--no-progress``), a phase shows it on stderr in the form that
suits where stderr goes:

- a terminal (or a Jupyter notebook): a tqdm bar per phase, labelled, drawn
  from the phase's start, so a user never watches seconds of silence;
- anything else (a log file, CI, a pipe): plain lines, never a bar's
  carriage returns — nothing for a phase quicker than :data:`DELAY`
  seconds, then a line every :data:`INTERVAL` seconds at most
  (``embedding: 1,234/5,000 records (25%), 41 records/s, ETA 1m32s``) and
  one when it ends (``embedding: 5,000/5,000 records (100%) in 2m02s, 41
  records/s``).

Otherwise every call here is a no-op, and tqdm is not even imported.  The
stream and the clock are parameters so that tests can drive both forms.

>>> with bar(False, "tokenizing", total=3) as b:
...     b.update(3)
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import IO, Any, TypeVar

__all__ = ["bar", "phase", "tracked", "DELAY", "INTERVAL"]

#: A phase quicker than this (seconds) writes no line in a log.
DELAY = 2.0
#: The least time (seconds) between two lines of one phase in a log.
INTERVAL = 5.0

Clock = Callable[[], float]
T = TypeVar("T")


class _Silent:
    """What :func:`bar` returns when progress is off: accepts the calls, shows nothing."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> "_Silent":
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _plural(unit: str) -> str:
    return unit[:-1] + "ies" if unit.endswith("y") else unit if unit.endswith("s") else unit + "s"


def _bytes(n: float) -> str:
    for scale, name in ((1 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "kB")):
        if n >= scale:
            return f"{n / scale:.1f} {name}"
    return f"{n:.0f} B"


def _duration(seconds: float) -> str:
    """``8.5s``, ``42s``, ``1m32s``, ``2h05m``."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


class _Lines:
    """Plain progress lines for a stream that is not a terminal (see the module docstring)."""

    def __init__(self, desc: str, total: int | None, unit: str, stream: IO[str], clock: Clock,
                 counted: bool = True) -> None:
        self.desc, self.total, self.unit, self.stream, self.clock = desc, total, unit, stream, clock
        self.counted = counted
        self.n = 0
        self.start = clock()
        self.last: float | None = None  # when the last line was written
        self.closed = False

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        finished = self.total is not None and self.n >= self.total  # its closing line says it
        if not finished and now - self.start >= DELAY and (self.last is None or now - self.last >= INTERVAL):
            self._say(self._line(now, ending=False))
            self.last = now

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        now = self.clock()
        if self.last is not None or now - self.start >= DELAY:
            self._say(self._line(now, ending=True))

    def __enter__(self) -> "_Lines":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _line(self, now: float, *, ending: bool) -> str:
        elapsed = now - self.start
        if not self.counted:
            return f"{self.desc}: done in {_duration(elapsed)}"
        rate = self.n / elapsed if elapsed > 0 else 0.0
        if self.unit == "B":
            done = _bytes(self.n) if not self.total else f"{_bytes(self.n)}/{_bytes(self.total)}"
            speed = f"{_bytes(rate)}/s"
        else:
            units = _plural(self.unit)
            done = f"{self.n:,} {units}" if not self.total else f"{self.n:,}/{self.total:,} {units}"
            speed = f"{rate:,.0f} {units}/s" if rate >= 10 else f"{rate:.1f} {units}/s"
        if self.total:
            done += f" ({100 * self.n / self.total:.0f}%)"
        if ending:
            return f"{self.desc}: {done} in {_duration(elapsed)}, {speed}"
        eta = ""
        if self.total and rate > 0 and self.n < self.total:
            eta = f", ETA {_duration((self.total - self.n) / rate)}"
        return f"{self.desc}: {done}, {speed}{eta}"

    def _say(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _draws_bars(stream: Any) -> bool:
    """A terminal, or a Jupyter kernel's output stream (not a terminal, but tqdm.auto draws a widget there)."""
    return _is_terminal(stream) or ("ipykernel" in sys.modules
                                    and type(stream).__module__.startswith("ipykernel."))


def bar(enabled: bool, desc: str, *, total: int | None = None, unit: str = "it", unit_scale: bool = False,
        stream: IO[str] | None = None, clock: Clock = time.monotonic) -> Any:
    """A progress display labelled ``desc`` (a context manager with ``update(n)``), or a silent stand-in.

    ``stream`` (default ``sys.stderr``, as it is now): a tqdm bar when it is
    a terminal or a notebook's, plain lines otherwise.
    """
    if not enabled:
        return _Silent()
    out = sys.stderr if stream is None else stream
    if not _draws_bars(out):
        return _Lines(desc, total, unit, out, clock)
    from tqdm.auto import tqdm  # only where bars are drawn: they are for people watching

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, leave=True, dynamic_ncols=True, file=out)


@contextlib.contextmanager
def phase(enabled: bool, desc: str, *, stream: IO[str] | None = None, clock: Clock = time.monotonic) -> Iterator[None]:
    """A phase that cannot count its work: a one-step bar on a terminal, ``desc: done in 12s`` in a log."""
    out = sys.stderr if stream is None else stream
    if enabled and not _draws_bars(out):
        with _Lines(desc, None, "step", out, clock, counted=False):
            yield
        return
    with bar(enabled, desc, total=1, unit="step", stream=out) as shown:
        yield
        shown.update(1)


def tracked(enabled: bool, desc: str, items: Iterable[T], *, unit: str = "it", step: int = 1024,
            stream: IO[str] | None = None, clock: Clock = time.monotonic) -> Iterator[T]:
    """``items`` as they come, counted on a :func:`bar` as the caller takes them (every ``step`` items).

    >>> list(tracked(False, "checking records", ["a", "b"]))
    ['a', 'b']
    """
    if not enabled:
        yield from items
        return
    total = len(items) if isinstance(items, Sized) else None
    with bar(True, desc, total=total, unit=unit, unit_scale=True, stream=stream, clock=clock) as shown:
        pending = 0
        for item in items:
            yield item
            pending += 1
            if pending == step:
                shown.update(pending)
                pending = 0
        shown.update(pending)
