"""Plain-text tables for traces, explanations and the command line.

One small renderer shared by :mod:`irflow.engine.trace`, :mod:`irflow.engine.explain` and
:mod:`irflow.cli.app`, so every table irflow prints looks the same: a header, a
rule, left-aligned text and right-aligned numbers, long cells cut with an
ellipsis.  No terminal library: the output is plain text a test can compare.

>>> print(render_table(["rank", "record"], [[1, "unbox"], [2, "tarfile-ng"]]))
rank  record
----  ----------
   1  unbox
   2  tarfile-ng
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from typing import Any

from irflow.util.unicode import escape_controls

__all__ = ["render_table", "format_value", "MISSING"]

#: What a cell with no value shows.
MISSING = "-"


def format_value(value: Any, *, digits: int = 4) -> str:
    """A cell's text: floats with ``digits`` significant figures, None/NaN as ``-``.

    >>> format_value(0.0325224), format_value(12.3456), format_value(None), format_value(True)
    ('0.03252', '12.35', '-', 'yes')
    """
    if type(value) is float:  # the common case (a column of scores), before the slower ABC checks
        return _format_float(value, digits)
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Integral):
        return str(int(value))
    if isinstance(value, Real):
        return _format_float(float(value), digits)
    return str(value)


def _format_float(number: float, digits: int) -> str:
    if math.isnan(number):
        return MISSING
    if number == 0:
        return "0"
    # a fixed number of significant figures keeps rrf (0.0325) and bm25 (12.35) both readable
    magnitude = math.floor(math.log10(abs(number))) if math.isfinite(number) else 0
    if math.isfinite(number) and -4 <= magnitude < 6:
        decimals = max(digits - 1 - magnitude, 0)
        return f"{number:.{decimals}f}"
    return f"{number:.{digits}g}"


def _is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _cut(text: str, width: int) -> str:
    # newlines and tabs would break the grid; control characters (a terminal's escape sequences) and
    # bidirectional overrides in a record's text would act on the terminal: shown as their escapes
    text = escape_controls(" ".join(text.split()))
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, max_width: int = 48,
                 indent: str = "", right: Sequence[str] = (), widths: Mapping[str, int] | None = None) -> str:
    """``rows`` under ``headers`` as aligned plain text (numbers right-aligned).

    Cells are formatted with :func:`format_value` and cut to ``max_width``
    characters (``widths`` sets another width for the columns it names);
    ``indent`` prefixes every line (for nested sections);
    columns named in ``right`` are right-aligned even when they hold text
    (counts like ``"40 rows"``, preformatted numbers).
    """
    cuts = [(widths or {}).get(h, max_width) for h in headers]
    cells = [[_cut(format_value(v), cuts[i]) for i, v in enumerate(row)] for row in rows]
    numeric = [h in right or (all(_is_number(row[i]) or row[i] is None for row in rows)
                              and any(_is_number(row[i]) for row in rows))
               for i, h in enumerate(headers)]
    sizes = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if numeric[i] else v.ljust(w) for i, (v, w) in enumerate(zip(values, sizes))]
        return (indent + "  ".join(parts)).rstrip()

    out = [line(list(headers)), (indent + "  ".join("-" * w for w in sizes)).rstrip()]
    out.extend(line(row) for row in cells)
    return "\n".join(out)
