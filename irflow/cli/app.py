"""The ``irflow`` command line: index, shard, run, eval, validate, graph, trace, demo.

Readable output by default, ``--json`` for machines.  A user mistake — a bad
recipe, a missing corpus, a malformed ``--set``, any :class:`IrflowError`, a
missing file — prints a short error on stderr and exits non-zero (2 for usage
errors, 1 for recipe / validation / corpus errors), never a traceback; an
unexpected exception is a bug and keeps its traceback.

    irflow index records.jsonl --out ./corpus
    irflow shard ./corpus --shards 4 --out ./corpus.sharded
    irflow run hybrid --corpus ./corpus.sharded --ray auto --query "sql parser"
    irflow run hybrid --corpus ./corpus --query "sql parser" --set k=5 --trace run.jsonl
    irflow trace show run.jsonl --stage fuse
    irflow trace diff run.jsonl --stages dense fuse
    irflow eval lexical hybrid --dataset ../shared/data/scifact --sweep rrf_k=10,60 --baseline lexical
    irflow run my.toml --plugin my_stages --corpus ./corpus -q "sql parser"   # my_stages registers a kind

``python -m irflow`` is the same command (:mod:`irflow.__main__`).
"""

from __future__ import annotations

import contextlib
import json
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import click

from irflow import __version__
from irflow.cli import quickstart
from irflow.cli.options import configure, global_options, note, show_progress
from irflow.cli.output import echo_json, machine_readable
from irflow.cli.index import RECORD_FORMAT, bad_lines_report, read_record_file, skipped_report
from irflow.cli.plugins import PLUGINS_META, plugin_option
from irflow.cli.shard import ray_option, shard_command
from irflow.cli.text import PATH_TEXT, paths_print_as_given, utf8_parameters
from irflow.engine.recipe import builtin_recipes, load_recipe
from irflow.engine.trace import jsonable
from irflow.errors import InputError, IrflowError, ParameterError, RecipeError
from irflow.evaluation.datasets import load_beir
from irflow.evaluation.evaluate import evaluate, holdout_split
from irflow.kernels.embedders import cli_default_embedder
from irflow.shard import open_corpus  # plain and sharded corpora alike
from irflow.store.corpus import build
from irflow.util.corpusmarks import CORPUS, refuse_inside_corpus
from irflow.util.fileio import explain_os_error, loads_json
from irflow.util.table import render_table
from irflow.util.unicode import json_text

__all__ = ["main", "UserError", "parse_sets", "parse_sweeps"]


class UserError(click.ClickException):
    """A user mistake: printed as ``Error: ...`` on stderr, exit status 1."""

    exit_code = 1


def _message(error: BaseException) -> str:
    # the notes say where it happened, e.g. "while running stage 'dense' (dense)"
    notes = [str(n) for n in getattr(error, "__notes__", ())]
    text = str(error) or type(error).__name__
    if isinstance(error, OSError) and not isinstance(error, IrflowError) and error.strerror:
        # a raw OS error (a file that vanished, a read-only folder): the path, what went wrong, the fix
        text = explain_os_error(error)
        if error.filename2 is not None:
            text += f" (and {error.filename2})"
    return "; ".join([text] + notes)


class IrflowGroup(click.Group):
    """A click group that turns user mistakes into one paragraph on stderr: exit status 1, no traceback.

    User mistakes are every :class:`IrflowError` and every ``OSError`` (a
    file missing, unreadable, a directory, on a full or read-only disk).
    Anything else is a bug in irflow and keeps its traceback.
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (IrflowError, OSError) as error:
            raise UserError(_message(error)) from None


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
            out[name] = _json_value(raw, f"--set {name}")
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


def _set_label(name: str, value: Any) -> str:
    """A run argument as the user wrote it on the command line: ``--set k=5``."""
    return f"--set {name}={value if isinstance(value, str) else json.dumps(value)}"


def _json_value(raw: str, where: str) -> Any:
    """``raw`` parsed as JSON within irflow's nesting and number limits (a clear usage error beyond them)."""
    try:
        return loads_json(raw, where, unique_keys=True)  # written by hand: a key named twice is a mistake
    except InputError as error:
        raise click.BadParameter(str(error)) from None


def _json_option(value: str | None, what: str) -> Any:
    if value is None:
        return None
    try:
        return _json_value(value, what)
    except json.JSONDecodeError as error:
        raise click.BadParameter(f"{what} must be JSON, e.g. '{{\"owner\": \"me\"}}' ({error.msg})") from None


def _dumps(data: Any) -> str:
    return json_text(jsonable(data), indent=2)  # a path's undecodable bytes as \\uXXXX: the JSON stays UTF-8


@click.group(cls=IrflowGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="irflow", message="%(prog)s %(version)s")
@global_options
def main(verbose: int, be_quiet: bool, log_level: str | None, threads: int | None) -> None:
    """irflow: document retrieval as an explicit DAG of small typed stages."""
    ctx = click.get_current_context()
    configure(ctx, verbose=verbose, be_quiet=be_quiet, log_level=log_level, threads=threads)
    # warnings (a misspelled filter field, a missing extra) print as one line each, for this command only
    ctx.with_resource(_one_line_warnings())
    ctx.with_resource(paths_print_as_given())


@contextlib.contextmanager
def _one_line_warnings() -> Iterator[None]:
    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        note(f"Warning: {' '.join(str(message).split())}")  # -q: errors only

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


# --------------------------------------------------------------------------
# index


@main.command(epilog=f"Record format: {RECORD_FORMAT}")
@click.argument("input_path", metavar="INPUT.jsonl", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write the corpus to (a rebuild when it holds one).")
@click.option("--embedder", default=None, type=PATH_TEXT,  # a spec may hold a model path
              help='Embedder spec ("onnx:all-MiniLM-L6-v2", "hash", "hash:512", "st:<model>"), or "none" for a '
                   'lexical-only corpus; default: all-MiniLM-L6-v2 when the models extra is installed, else "hash".')
@click.option("--analyzer", default=None, help="Analyzer name (plain, identifier, english); default english.")
@click.option("--name", default=None, help="Corpus name (default: the directory name).")
@click.option("--title-mode", type=click.Choice(["prepend", "separate", "ignore"]), default="prepend",
              show_default=True, help="BEIR documents: how titles become records (as irflow eval).")
@click.option("--skip-bad", is_flag=True,
              help="Index the good lines and report the bad ones (default: refuse the file, listing every bad line).")
@click.option("--progress/--no-progress", default=None,
              help="Progress of every phase: bars on a terminal, a line every few seconds in a log (default: unless "
                   "irflow -q).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@machine_readable
def index(input_path: Path, out: Path, embedder: str | None, analyzer: str | None, name: str | None, title_mode: str,
          skip_bad: bool, progress: bool | None, as_json: bool) -> None:
    """Build a corpus from INPUT.jsonl (one record or BEIR document per line) into --out."""
    refuse_inside_corpus(out, "corpus", replacing=CORPUS)  # said before the records are read
    show = show_progress(progress)
    found = read_record_file(input_path, title_mode=title_mode, progress=show)
    if found.bad and not skip_bad:
        raise UserError(bad_lines_report(found))
    if found.bad:
        note(skipped_report(found))
    if not found.records:
        raise UserError(f"{input_path}: no records to index ({found.lines} non-blank lines"
                        f"{', all bad' if found.bad else ''}); write one JSON object per line, e.g. "
                        '{"artifact_id": "unbox", "surface_kind": "description", "text": "Unpack any archive."}')
    records = found.records
    spec = _embedder_option(embedder)
    corpus = build(records, embedder=spec, analyzer=analyzer, path=out, name=name, progress=show)
    summary: dict[str, Any] = {"path": str(out), "name": corpus.name, "records": len(corpus),
               "artifacts": len({r.artifact_id for r in records}), "kinds": list(corpus.kinds),
               "embedder": corpus.embedder_spec, "dim": corpus.dim, "analyzer": corpus.analyzer.name,
               "format": found.format, "skipped_lines": [b.number for b in found.bad]}
    if as_json:
        echo_json(_dumps(summary))
    else:
        source = "BEIR documents" if found.format == "beir" else "records"
        click.echo(f"indexed {summary['records']} records ({summary['artifacts']} artifacts; kinds "
                   f"{', '.join(summary['kinds'])}) from {source} into {out} (embedder {spec or 'none'}, analyzer "
                   f"{summary['analyzer']})")


def _embedder_option(embedder: str | None, *, needed: bool = True) -> str | None:
    """The spec an --embedder option names: "none" -> None; not given -> $IRFLOW_EMBEDDER, the installed model, else "hash".

    The fallback to "hash" is said once on stderr, with the command that installs the model;
    when no vectors are ``needed`` (no dense stage) nothing is embedded and nothing is said.
    """
    if embedder is not None:
        return None if embedder.lower() == "none" else embedder
    if not needed:
        return None
    spec, fallback = cli_default_embedder()
    if fallback:
        note(fallback)
    return None if spec.lower() == "none" else spec


# --------------------------------------------------------------------------
# run


def _hits_table(hits: Sequence[Any]) -> str:
    rows = [[i, h.score, h.artifact_id, h.surface_kind, h.text] for i, h in enumerate(hits, start=1)]
    return render_table(["rank", "score", "artifact", "surface", "text"], rows, max_width=60)


@main.command()
@click.argument("recipe", type=PATH_TEXT)
@plugin_option
@click.option("--corpus", "corpus_path", required=True, type=PATH_TEXT,
              help="Corpus directory (or name under $IRFLOW_HOME/corpora).")
@click.option("--query", "-q", "queries", multiple=True, required=True, help="A query; repeat for a batch.")
@click.option("--set", "settings", multiple=True, callback=parse_sets, metavar="NAME=VALUE",
              help="Override a recipe parameter (JSON value, else a string); repeatable.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the run's trace (JSON Lines) to this file.")
@click.option("--json", "as_json", is_flag=True, help="Print hits (and explanations) as JSON.")
@click.option("--explain", "explain_n", type=click.IntRange(min=0), default=0, metavar="N",
              help="Explain the top N hits of each query, stage by stage.")
@ray_option
@machine_readable
def run(recipe: str, corpus_path: str, queries: tuple[str, ...], settings: dict[str, Any], trace_path: Path | None,
        as_json: bool, explain_n: int, ray: str | None) -> None:
    """Run RECIPE (a file or a built-in name) on a corpus (plain or sharded) and print the hits."""
    if trace_path is not None:
        refuse_inside_corpus(trace_path, "trace")  # said before the run, not after it
    the_recipe = load_recipe(recipe)
    corpus = open_corpus(corpus_path, ray=ray)
    try:
        # explanations are complete only from a trace, and tracing a CLI run costs little
        result = the_recipe.run(corpus, list(queries), trace=bool(trace_path or explain_n), **settings)
    except ParameterError as error:  # the user's --set, written as they wrote it
        raise UserError(error.message(_set_label)) from None
    per_query = result.hits
    if trace_path is not None and result.trace is not None:  # traced: trace=True above
        result.trace.dump(trace_path)  # atomic; an OutputError names the file and the fix
        note(f"trace written to {trace_path} ({len(result.trace)} stages, {len(queries)} "
             f"quer{'y' if len(queries) == 1 else 'ies'})")
    explanations = [[result.explain(hit, query=q) for hit in hits[:explain_n]] for q, hits in enumerate(per_query)]
    short = {note.query_index: note for note in result.short}
    for shortfall in result.short:  # fewer than k hits while more match: said, on stderr, one line each
        note(f"note: {shortfall.message()}")
    if as_json:
        data = {"recipe": the_recipe.name, "corpus": corpus.name, "params": result.params,
                "trace": None if trace_path is None else str(trace_path),
                "queries": [{"query": text, "query_index": q,
                             "hits": [{"rank": i, **h.to_dict()} for i, h in enumerate(per_query[q], start=1)],
                             "short": short[q].to_dict() if q in short else None,
                             **({"explanations": [e.to_dict() for e in explanations[q]]} if explain_n else {})}
                            for q, text in enumerate(queries)]}
        echo_json(_dumps(data))
        return
    for q, text in enumerate(queries):
        hits = per_query[q]
        if q:
            click.echo("")
        click.echo(f"query {q}: {text!r} — {len(hits)} hit{'' if len(hits) == 1 else 's'} "
                   f"(recipe {the_recipe.name}, corpus {corpus.name})")
        if hits:
            click.echo(_hits_table(hits))
        for explanation in explanations[q]:
            click.echo("")
            click.echo(explanation.table())


# --------------------------------------------------------------------------
# validate, graph, recipes


@main.command()
@click.argument("recipe", type=PATH_TEXT)
@plugin_option
@click.option("--json", "as_json", is_flag=True, help='Print {"ok": ..., "problems": [...]}.')
@machine_readable
def validate(recipe: str, as_json: bool) -> None:
    """Check RECIPE and list every problem (exit status 1 when there are any)."""
    try:
        loaded = load_recipe(recipe, validate=False)
        problems = loaded.problems()
        source = loaded.source
    except RecipeError as error:  # unreadable file, bad TOML/YAML, unknown built-in
        problems, source, loaded = list(error.problems), error.source or recipe, None
    if as_json:
        echo_json(_dumps({"recipe": recipe, "source": source, "ok": not problems, "problems": problems}))
    elif problems:
        click.echo(f"{source}: {len(problems)} problem{'' if len(problems) == 1 else 's'}")
        for problem in problems:
            click.echo(f"  - {problem}")
    elif loaded is not None:  # no problem: it loaded
        click.echo(f"OK: {source}: recipe {loaded.name!r}, {len(loaded.stages)} stages, output {loaded.output!r}")
    if problems:
        sys.exit(1)


@main.command()
@click.argument("recipe", type=PATH_TEXT)
@plugin_option
@click.option("--format", "fmt", type=click.Choice(["mermaid", "dot"]), default="mermaid", show_default=True)
def graph(recipe: str, fmt: str) -> None:
    """Print RECIPE's DAG as Mermaid or Graphviz DOT text (offline)."""
    pipeline = load_recipe(recipe).pipeline()
    click.echo(pipeline.to_mermaid() if fmt == "mermaid" else pipeline.to_dot(), nl=False)


@main.command()
@click.option("--json", "as_json", is_flag=True, help='Print [{"name": ..., "description": ...}, ...].')
@machine_readable
def recipes(as_json: bool) -> None:
    """List the built-in recipes."""
    found = [(name, load_recipe(name, validate=False).description) for name in builtin_recipes()]
    if as_json:
        echo_json(_dumps([{"name": name, "description": text} for name, text in found]))
        return
    for name, text in found:
        click.echo(f"{name}: {text}")


# --------------------------------------------------------------------------
# eval


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
                parsed.append(_json_value(piece, f"--sweep {name}"))
            except json.JSONDecodeError:
                parsed.append(piece)
        out[name] = parsed
    return out


@main.command("eval")
@click.argument("recipes", nargs=-1, required=True, type=PATH_TEXT, metavar="RECIPE [RECIPE ...]")
@plugin_option
@click.option("--dataset", required=True, type=PATH_TEXT, metavar="DIR",
              help="A BEIR-format collection: corpus.jsonl, queries.jsonl, qrels/<split>.tsv.")
@click.option("--split", default="test", show_default=True, help="Which qrels/<split>.tsv to evaluate on.")
@click.option("--metrics", default="ndcg@10,recall@100,mrr@10,map,p@10", show_default=True,
              help="Comma-separated metrics: ndcg@K, recall@K, mrr@K, p@K, map.")
@click.option("--set", "settings", multiple=True, callback=parse_sets, metavar="NAME=VALUE",
              help="Set a recipe parameter for every recipe that has it (JSON value, else a string); repeatable.")
@click.option("--sweep", "sweeps", multiple=True, callback=parse_sweeps, metavar="NAME=V1,V2,...",
              help="Evaluate each value (every combination across --sweep options); repeatable.")
@click.option("--embedder", default=None, type=PATH_TEXT,  # a spec may hold a model path
              help='Embedder spec ("onnx:all-MiniLM-L6-v2", "hash", "hash:512", "st:all-MiniLM-L6-v2"), or "none" for '
                   'lexical only; default: all-MiniLM-L6-v2 when the models extra is installed, else "hash" (none '
                   'when no recipe has a dense stage).')
@click.option("--analyzer", default=None,
              help="Analyzer name (plain, identifier, english); default: irflow.kernels.text.DEFAULT_ANALYZER.")
@click.option("--title-mode", type=click.Choice(["prepend", "separate", "ignore"]), default="prepend",
              show_default=True, help="How document titles become records.")
@click.option("--depth", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Documents ranked per query, whatever the metrics (a metric's cutoff may not exceed it).")
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True,
              help="Queries run per recipe call.")
@click.option("--holdout", type=click.Choice(["tune", "test"]), default=None,
              help="Evaluate only a fixed seeded half of the judged queries: 'tune' to choose settings on, "
                   "'test' to report on (for collections without training qrels).")
@click.option("--holdout-seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the --holdout split (a non-negative integer).")
@click.option("--baseline", default=None, type=PATH_TEXT, metavar="RECIPE",
              help="Compare every system with this one (a label or another recipe): paired tests, Holm-corrected.")
@click.option("--runs", "runs_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write each system's ranking as a TREC run file into this directory.")
@click.option("--cache/--no-cache", default=True, show_default=True,
              help="Reuse the corpus built for this collection and settings ($IRFLOW_HOME/cache/eval).")
@click.option("--progress/--no-progress", default=None, help="Progress (default: unless irflow -q).")
@click.option("--json", "as_json", is_flag=True,
              help="Print only JSON: dataset, split, queries, depth, {system: {metric: value}} and parameters.")
@ray_option
@machine_readable
def eval_command(recipes: tuple[str, ...], dataset: str, split: str, metrics: str, settings: dict[str, Any],
                 sweeps: dict[str, list[Any]], embedder: str | None, analyzer: str | None, title_mode: str,
                 depth: int, batch_size: int, holdout: str | None, holdout_seed: int, baseline: str | None,
                 runs_dir: Path | None, cache: bool, progress: bool | None, as_json: bool, ray: str | None) -> None:
    """Evaluate RECIPEs (files or built-in names) on a test collection and print the metrics."""
    if runs_dir is not None:
        refuse_inside_corpus(runs_dir, "run folder")  # said before the evaluation, not after it
    show = show_progress(progress)
    collection = load_beir(dataset, split)
    queries = None
    if holdout is not None:
        tune, test = holdout_split(collection.eval_queries, seed=holdout_seed)
        queries = tune if holdout == "tune" else test
    spec = _embedder_option(embedder, needed=_needs_vectors(recipes, baseline))
    try:
        result = evaluate(list(recipes), collection, metrics=metrics, params=settings, sweep=sweeps or None,
                          embedder=spec, analyzer=analyzer,
                          title_mode=title_mode, batch_size=batch_size, depth=depth, queries=queries, progress=show,
                          use_cache=cache, baseline=baseline, ray=ray, keep_runs=runs_dir is not None,
                          plugins=click.get_current_context().meta.get(PLUGINS_META, ()))
    except ParameterError as error:  # a --set or --sweep value, written as on the command line
        raise UserError(error.message(lambda name, value: _set_label(name, value)[len("--set "):])) from None
    if runs_dir is not None:
        try:
            written = result.write_runs(runs_dir)
        except IrflowError:  # an OutputError names the run file and the fix
            raise
        except OSError as error:  # the folder could not be made
            raise UserError(f"cannot write the runs: {explain_os_error(error)}") from None
        note(f"{len(written)} run file{'' if len(written) == 1 else 's'} written to {runs_dir}")
    if as_json:
        echo_json(json.dumps(result.summary(), indent=2))
        return
    source = result.corpus
    where = "" if source is None or source.path is None else f"; corpus {source.status}: {source.path}"
    subset = "" if holdout is None else f", {holdout} half (seed {holdout_seed})"
    click.echo(f"{result.dataset} ({result.split} split{subset}, {result.n_queries} queries, depth {result.depth}"
               f"{where})")
    click.echo(result.table())
    if result.baseline is not None and len(result) > 1:
        click.echo("")
        click.echo(result.compare().table())


def _needs_vectors(recipes: Sequence[str], baseline: str | None) -> bool:
    """Whether any recipe (or a baseline that is a recipe) has a dense stage, so the corpus needs vectors.

    A recipe that cannot be loaded counts as needing them (evaluate() reports on it); a baseline
    that is not a recipe is a label of one of ``recipes``, which decide.
    """
    for name, required in [*((r, True) for r in recipes), *([(baseline, False)] if baseline else [])]:
        try:
            stages = load_recipe(name, validate=False).stages.values()
        except IrflowError:
            if required:
                return True
            continue
        if any(stage.kind == "dense" for stage in stages):
            return True
    return False


# --------------------------------------------------------------------------
# demo


@main.command()
@click.argument("queries", nargs=-1)
@click.option("--filter", "filter_json", default=None, help='Metadata filter as JSON, e.g. \'{"owner": "me"}\'.')
@click.option("--mode", default=None, help="Retrieval mode (dense, lexical, hybrid).")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the demo run's trace to this file.")
@click.option("--k", type=click.IntRange(min=1), default=None, help="Hits per query.")
@click.option("--embedder", default=None, type=PATH_TEXT,  # a spec may hold a model path
              help='Embedder spec ("onnx:all-MiniLM-L6-v2", "hash", ...); default: all-MiniLM-L6-v2 when the models '
                   'extra is installed, else "hash".')
def demo(queries: tuple[str, ...], filter_json: str | None, mode: str | None, trace_path: Path | None,
         k: int | None, embedder: str | None) -> None:
    """Search a small corpus of the Python packages installed here (no setup needed)."""
    given = {"filter": _json_option(filter_json, "--filter"), "mode": mode,
             "trace_path": None if trace_path is None else str(trace_path), "k": k, "embedder": embedder}
    # only what the user gave: run_demo keeps its own defaults for the rest
    quickstart.run_demo(list(queries), **{key: value for key, value in given.items() if value is not None},
                        echo=click.echo, cache=True, progress=show_progress())


# --------------------------------------------------------------------------

from irflow.cli.trace import trace  # noqa: E402  (the "trace" group lives in its own module)

main.add_command(trace)
main.add_command(shard_command)
utf8_parameters(main)  # every plain string parameter is UTF-8 text (paths are declared PATH_TEXT)

if __name__ == "__main__":  # pragma: no cover
    main()
