"""``irflow shard``: split a corpus into shards that hold whole artifacts; the ``--ray`` option of run and eval.

    irflow shard ./corpus --shards 4 --out ./corpus.sharded
    irflow run hybrid --corpus ./corpus.sharded --ray auto --query "sql parser"
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from irflow.cli.globals import show_progress
from irflow.cli.text import PATH_TEXT
from irflow.cli.output import echo_json, machine_readable
from irflow.engine.trace import jsonable
from irflow.shard.split import shard_corpus
from irflow.store.corpus import open_corpus
from irflow.util.unicode import json_text

__all__ = ["ray_option", "shard_command"]

#: ``--ray auto|ADDRESS`` of the commands that can run on a Ray cluster (run, eval).
ray_option: Any = click.option(
    "--ray", "ray", default=None, metavar="auto|ADDRESS",
    help="Run on Ray (the ray extra): 'auto' starts a contained local cluster (loopback only, files under "
         "$IRFLOW_HOME/ray), an ADDRESS (host:port, as `ray start --head` prints it) joins that cluster and no "
         "other, or fails within seconds when none answers there. run: the corpus must be sharded "
         "(irflow shard); eval: query batches are mapped over actors, with the same figures.")


@click.command("shard")
@click.argument("corpus_path", type=PATH_TEXT, metavar="CORPUS")
@click.option("--shards", "n", required=True, type=click.IntRange(min=1), help="Number of shards.")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write the sharded corpus to (a reshard when it holds one).")
@click.option("--progress/--no-progress", default=None, help="Progress (default: unless irflow -q).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@machine_readable
def shard_command(corpus_path: str, n: int, out: Path, progress: bool | None, as_json: bool) -> None:
    """Split CORPUS (a directory or a name) into --shards N shards holding whole artifacts, into --out."""
    manifest = shard_corpus(open_corpus(corpus_path), n, out, progress=show_progress(progress))
    summary = {"path": str(out), "name": manifest.name, "records": manifest.live, "rows": manifest.n_rows,
               "shards": [{"dir": e.dir, "rows": e.n_rows, "artifacts": e.artifacts, "first_row": e.first_row,
                           "contiguous": e.contiguous} for e in manifest.shards]}
    if as_json:
        echo_json(json_text(jsonable(summary), indent=2))
        return
    sizes = ", ".join(f"{e.n_rows}" for e in manifest.shards)
    click.echo(f"sharded {manifest.live} records of corpus {manifest.name!r} into {len(manifest.shards)} shards "
               f"({sizes} rows) in {out}; run on it: irflow run RECIPE --corpus {out} --ray auto -q QUERY")
