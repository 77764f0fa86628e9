"""Progress bars for long phases (reading, tokenizing, indexing, embedding, writing), or nothing.

A bar is shown only when asked (``progress=True``: the CLI asks when stderr
is a terminal); otherwise every call here is a no-op, and tqdm is not even
imported.  Each phase of a long job gets its own labelled bar as soon as it
starts, so a user never watches seconds of silence.

>>> with bar(False, "tokenizing", total=3) as b:
...     b.update(3)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["bar", "phase"]


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


def bar(enabled: bool, desc: str, *, total: int | None = None, unit: str = "it", unit_scale: bool = False) -> Any:
    """A tqdm bar labelled ``desc`` (a context manager with ``update(n)``), or a silent stand-in."""
    if not enabled:
        return _Silent()
    from tqdm.auto import tqdm  # only when asked: bars are for interactive use

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, leave=True, dynamic_ncols=True)


@contextlib.contextmanager
def phase(enabled: bool, desc: str) -> Iterator[None]:
    """A one-step bar for a phase that cannot count its work (it shows the phase and its time)."""
    with bar(enabled, desc, total=1, unit="step") as shown:
        yield
        shown.update(1)
