"""``irflow trace``: show, diff and explain a trace file written by ``irflow run --trace``.

Everything here reads the JSON Lines file alone (no corpus, nothing re-run):

    irflow trace show run.jsonl [--stage fuse] [--query 1 | --query all]
    irflow trace diff run.jsonl --stages dense fuse
    irflow trace diff old.jsonl new.jsonl --stage collapse
    irflow trace explain run.jsonl RECORD_OR_ARTIFACT [--query 1]
"""

from __future__ import annotations

from pathlib import Path

import click

from irflow.cli.output import echo_json, machine_readable
from irflow.engine.trace import Trace, diff as diff_stages, jsonable
from irflow.util.jsontext import outline
from irflow.util.unicode import escape_surrogates

__all__ = ["trace"]

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


def _echo_json(data: object) -> None:
    # the outer levels (stages, candidates) one item a line, each candidate's fields compact: what a trace
    # file holds comes back at a few times its size however it nests (indent=2 on every level would not);
    # a lone surrogate (a corpus named by a non-UTF-8 folder) as its JSON escape, which UTF-8 can print
    echo_json(escape_surrogates(outline(jsonable(data), levels=4)))


@click.group()
def trace() -> None:
    """Read a trace file (irflow run --trace FILE): show, diff, explain."""


class _QueryChoice(click.ParamType):
    """A query index (0, 1, ...) or ``all``."""

    name = "INDEX|all"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int | None:
        if value is None or isinstance(value, int) or (isinstance(value, str) and value.lower() == "all"):
            return None if isinstance(value, str) else value
        try:
            return int(str(value))
        except ValueError:
            self.fail(f"{value!r} is neither a query index (0, 1, ...) nor 'all'", param, ctx)


@trace.command()
@click.argument("file", type=_FILE)
@click.option("--stage", default=None, help="Only this stage (its parameters and top candidates).")
@click.option("--query", "query", type=_QueryChoice(), default=0, show_default=True,
              help="Query index in the run, or 'all' for every query.")
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True, help="Candidates per stage.")
@click.option("--json", "as_json", is_flag=True, help="Print the trace lines for this query (and stage) as JSON.")
@machine_readable
def show(file: Path, stage: str | None, query: int | None, limit: int, as_json: bool) -> None:
    """Print the stages of a trace: summary table and top candidates.

    A stage switched off, or one that passed its input through unchanged, is one line.
    """
    loaded = Trace.load(file)
    queries = range(loaded.n_queries) if query is None else [loaded.check_query(query)]
    if as_json:
        if stage is not None:
            loaded.event(stage)  # an unknown stage is an error listing the stages
        wanted = set(queries)
        lines = [r for r in loaded.records()[1:]
                 if r["query_index"] in wanted and (stage is None or r["stage"] == stage)]
        _echo_json({"header": loaded.records()[0], "stages": lines})
        return
    click.echo("\n\n".join(loaded.table(stage=stage, query=q, limit=limit) for q in queries))


@trace.command()
@click.argument("files", nargs=-1, required=True, type=_FILE)
@click.option("--stages", nargs=2, default=None, metavar="A B", help="Compare stage A with stage B.")
@click.option("--stage", default=None, help="Compare this stage across two trace files.")
@click.option("--query", "query", type=int, default=0, show_default=True, help="Query index in the run.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Rows per section.")
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@machine_readable
def diff(files: tuple[Path, ...], stages: tuple[str, str] | None, stage: str | None, query: int,
         limit: int | None, as_json: bool) -> None:
    """What entered, left and moved: two stages of FILE, or one stage of two FILEs."""
    if len(files) > 2:
        raise click.UsageError("give one trace file (with --stages A B) or two (with --stage NAME)")
    if stages is not None and stage is not None:
        raise click.UsageError("use either --stages A B or --stage NAME, not both")
    first = Trace.load(files[0])
    second = Trace.load(files[1]) if len(files) == 2 else first
    if stages is not None:
        before, after = first.stage(stages[0]), second.stage(stages[1])
    elif stage is not None and len(files) == 2:
        before, after = first.stage(stage), second.stage(stage)
    elif stage is not None:
        raise click.UsageError("--stage NAME compares one stage across two trace files; for two stages of one "
                               "file use --stages A B")
    else:
        raise click.UsageError("say what to compare: --stages A B (two stages), or --stage NAME with two files")
    result = diff_stages(before, after, query=query)
    if as_json:
        _echo_json(result.to_dict())
    else:
        click.echo(result.table(limit=limit))


@trace.command()
@click.argument("file", type=_FILE)
@click.argument("record")
@click.option("--query", "query", type=int, default=0, show_default=True, help="Query index in the run.")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
@machine_readable
def explain(file: Path, record: str, query: int, as_json: bool) -> None:
    """Why RECORD (a record id or artifact id) ranks where it does, stage by stage."""
    explanation = Trace.load(file).explain(record, query=query)
    if as_json:
        _echo_json(explanation.to_dict())
    else:
        click.echo(explanation.table())
