"""``irflow report``: a trace file, or the diff of two, as one self-contained HTML page.

    irflow report run.jsonl -o report.html [--queries 100:200] [--top 50] [--paths 10]
    irflow report --diff old.jsonl new.jsonl -o diff.html [--stage collapse]

The page needs no server and fetches nothing: open it in a browser.  An
evaluation's page is written by ``irflow eval ... --report eval.html``.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from irflow.engine.trace import Trace
from irflow.util.corpusmarks import refuse_inside_corpus

__all__ = ["report"]

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
_SLICE = re.compile(r"\s*(\d+)?\s*:\s*(\d+)?\s*\Z")


def _queries(value: str | None, n_queries: int) -> range | None:
    """``"100:200"`` (``"100:"``, ``":50"``, ``"7"``) as the query indexes it names, within the trace."""
    if value is None:
        return None
    if value.strip().isdigit():
        start = int(value)
        return range(start, start + 1)
    match = _SLICE.match(value)
    if match is None:
        raise click.BadParameter(f"{value!r} is not START:STOP (query indexes, e.g. --queries 100:200) or one index",
                                 param_hint="--queries")
    start = int(match.group(1) or 0)
    stop = min(int(match.group(2)) if match.group(2) is not None else n_queries, n_queries)
    if start >= max(stop, 1) or start >= n_queries:
        raise click.BadParameter(f"{value!r} holds no query of this trace (it has {n_queries}: 0..{n_queries - 1})",
                                 param_hint="--queries")
    return range(start, stop)


@click.command("report")
@click.argument("files", nargs=-1, required=True, type=_FILE, metavar="TRACE.jsonl [TRACE2.jsonl]")
@click.option("-o", "--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The HTML file to write (replaced atomically).")
@click.option("--diff", "as_diff", is_flag=True, help="Compare two trace files (the first is before, the second after).")
@click.option("--stage", default=None, help="With --diff: the stage to compare (default: the result's stage).")
@click.option("--queries", "queries", default=None, metavar="START:STOP",
              help="The queries the page holds, by index (default: the first 100; a page holds at most 100).")
@click.option("--top", type=click.IntRange(min=1, max=10_000), default=50, show_default=True,
              help="Candidates shown per stage and query (diff: records per section).")
@click.option("--paths", type=click.IntRange(min=1, max=1_000), default=10, show_default=True,
              help="Final hits per query whose path through every stage the page holds.")
def report(files: tuple[Path, ...], out: Path, as_diff: bool, stage: str | None, queries: str | None, top: int,
           paths: int) -> None:
    """Write a trace file (or, with --diff, what changed between two) as one self-contained HTML page."""
    if as_diff and len(files) != 2:
        raise click.UsageError("--diff compares two trace files: irflow report --diff OLD.jsonl NEW.jsonl -o diff.html")
    if not as_diff and len(files) != 1:
        raise click.UsageError("give one trace file (or two with --diff)")
    if stage is not None and not as_diff:
        raise click.UsageError("--stage names the stage a --diff compares; a trace's page shows every stage")
    refuse_inside_corpus(out, "report")  # said before the traces are read
    first = Trace.load(files[0])
    chosen = _queries(queries, first.n_queries)
    if as_diff:
        first.diff_html(Trace.load(files[1]), out, stage=stage, queries=chosen, top=top)
    else:
        first.to_html(out, queries=chosen, top=top, paths=paths)
    held = len(chosen) if chosen is not None else min(first.n_queries, 100)
    click.echo(f"report written to {out} ({held} of {first.n_queries} quer{'y' if first.n_queries == 1 else 'ies'}); "
               "open it in a browser", err=True)
