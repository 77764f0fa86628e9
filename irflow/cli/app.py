"""The ``irflow`` command line: index, add, delete, compact, shard, run, eval, validate, graph, trace, report, demo.

Readable output by default, ``--json`` for machines.  A user mistake — a bad
recipe, a missing corpus, a malformed ``--set``, any :class:`IrflowError`, a
missing file — prints a short error on stderr and exits non-zero (2 for usage
errors, 1 for recipe / validation / corpus errors), never a traceback; an
unexpected exception is a bug and keeps its traceback.

    irflow index records.jsonl --out ./corpus
    irflow add ./corpus more.jsonl --upsert
    irflow delete ./corpus --artifact unbox
    irflow shard ./corpus --shards 4 --out ./corpus.sharded
    irflow run hybrid --corpus ./corpus.sharded --ray auto --query "sql parser"
    irflow run hybrid --corpus ./corpus --query "sql parser" --set k=5 --trace run.jsonl
    irflow trace show run.jsonl --stage fuse
    irflow trace diff run.jsonl --stages dense fuse
    irflow report run.jsonl -o report.html
    irflow eval lexical hybrid --dataset sample --sweep rrf_k=10,60 --baseline lexical
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
from irflow.cli.options import dumps, embedder_option, json_option, parse_sets, parse_sweeps, set_label
from irflow.cli.globals import configure, global_options, note, show_progress
from irflow.cli.output import echo_json, machine_readable
from irflow.cli.index import RECORD_FORMAT, bad_lines_report, read_record_file, skipped_report
from irflow.cli.plugins import PLUGINS_META, plugin_option
from irflow.cli.shard import ray_option, shard_command
from irflow.cli.update import add_command, compact_command, delete_command
from irflow.cli.text import PATH_TEXT, paths_print_as_given, utf8_parameters
from irflow.engine.recipe import builtin_recipes, load_recipe
from irflow.errors import IrflowError, ParameterError, RecipeError
from irflow.cli.queryfiles import check_run_options, eval_collection, run_queries
from irflow.evaluation.evaluate import evaluate, holdout_split
from irflow.evaluation.runfiles import RUN_FORMATS, write_run
from irflow.evaluation.topics import TOPIC_FIELDS
from irflow.shard import open_corpus  # plain and sharded corpora alike
from irflow.store.corpus import build
from irflow.util.corpusmarks import CORPUS, refuse_inside_corpus
from irflow.util.fileio import explain_os_error
from irflow.util.table import render_table
from irflow.util.unicode import escape_controls

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
    corpus = build(records, embedder=embedder_option(embedder), analyzer=analyzer, path=out, name=name, progress=show)
    summary: dict[str, Any] = {"path": str(out), "name": corpus.name, "records": len(corpus),
               "artifacts": len({r.artifact_id for r in records}), "kinds": list(corpus.kinds),
               "embedder": corpus.embedder_spec, "dim": corpus.dim, "analyzer": corpus.analyzer.name,
               "format": found.format, "skipped_lines": [b.number for b in found.bad]}
    if as_json:
        echo_json(dumps(summary))
    else:
        source = "BEIR documents" if found.format == "beir" else "records"
        click.echo(f"indexed {summary['records']} records ({summary['artifacts']} artifacts; kinds "
                   f"{', '.join(summary['kinds'])}) from {source} into {out} (embedder {summary['embedder'] or 'none'}, analyzer "
                   f"{summary['analyzer']})")


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
@click.option("--query", "-q", "queries", multiple=True, help="A query; repeat for a batch.")
@click.option("--queries", "queries_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              metavar="FILE", help="Run every query of FILE (TREC topics, qid<TAB>text lines or queries.jsonl) "
                                   "in batches and write the hits to -o as a run file.")
@click.option("--out", "-o", "out_path", type=click.Path(dir_okay=False, path_type=Path), metavar="OUT",
              help="The run file --queries writes (replaced atomically).")
@click.option("--format", "run_format", type=click.Choice(RUN_FORMATS), default="trec", show_default=True,
              help="The run file's format: TREC ('qid Q0 docid rank score tag', docid = artifact id) or JSON Lines.")
@click.option("--tag", default=None, help="The run tag of a TREC run file (default: the recipe's name).")
@click.option("--topic-field", type=click.Choice(TOPIC_FIELDS), default="title", show_default=True,
              help="Which field of a TREC topic is the query.")
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True,
              help="Queries of --queries run per recipe call.")
@click.option("--set", "settings", multiple=True, callback=parse_sets, metavar="NAME=VALUE",
              help="Override a recipe parameter (JSON value, else a string); repeatable. --set k=1000 for a "
                   "run file as deep as trec_eval's usual depth.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the run's trace (JSON Lines) to this file.")
@click.option("--json", "as_json", is_flag=True, help="Print hits (and explanations) as JSON.")
@click.option("--explain", "explain_n", type=click.IntRange(min=0), default=0, metavar="N",
              help="Explain the top N hits of each query, stage by stage.")
@ray_option
@machine_readable
def run(recipe: str, corpus_path: str, queries: tuple[str, ...], queries_file: Path | None, out_path: Path | None,
        run_format: str, tag: str | None, topic_field: str, batch_size: int, settings: dict[str, Any],
        trace_path: Path | None, as_json: bool, explain_n: int, ray: str | None) -> None:
    """Run RECIPE (a file or a built-in name) on a corpus (plain or sharded) and print the hits.

    With --queries FILE -o OUT, run every query of the file and write a TREC run (or JSON Lines) instead.
    """
    check_run_options(queries, queries_file, out_path, trace_path, explain_n)
    if trace_path is not None:
        refuse_inside_corpus(trace_path, "trace")  # said before the run, not after it
    the_recipe = load_recipe(recipe)
    if queries_file is not None and out_path is not None:
        _run_file(the_recipe, corpus_path, queries_file, out_path, run_format, tag, topic_field, batch_size,
                  settings, as_json, ray)
        return
    corpus = open_corpus(corpus_path, ray=ray)
    try:
        # explanations are complete only from a trace, and tracing a CLI run costs little
        result = the_recipe.run(corpus, list(queries), trace=bool(trace_path or explain_n), **settings)
    except ParameterError as error:  # the user's --set, written as they wrote it
        raise UserError(error.message(set_label)) from None
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
        data = {"recipe": the_recipe.name, "corpus": corpus.name, **corpus.settings.to_dict(), "params": result.params,
                "trace": None if trace_path is None else str(trace_path),
                "queries": [{"query": text, "query_index": q,
                             "hits": [{"rank": i, **h.to_dict()} for i, h in enumerate(per_query[q], start=1)],
                             "short": short[q].to_dict() if q in short else None,
                             **({"explanations": [e.to_dict() for e in explanations[q]]} if explain_n else {})}
                            for q, text in enumerate(queries)]}
        echo_json(dumps(data))
        return
    for q, text in enumerate(queries):
        hits = per_query[q]
        if q:
            click.echo("")
        click.echo(escape_controls(f"query {q}: {text!r} — {len(hits)} hit{'' if len(hits) == 1 else 's'} "
                                   f"(recipe {the_recipe.name}, corpus {corpus.name}; {corpus.settings})"))  # names shown, never obeyed
        if hits:
            click.echo(_hits_table(hits))
        for explanation in explanations[q]:
            click.echo("")
            click.echo(explanation.table())


def _run_file(recipe: Any, corpus_path: str, queries_file: Path, out_path: Path, run_format: str, tag: str | None,
              topic_field: str, batch_size: int, settings: dict[str, Any], as_json: bool, ray: str | None) -> None:
    """``irflow run --queries FILE -o OUT``: every query of the file, in batches, into a run file."""
    queries = run_queries(queries_file, topic_field)  # the file is read (and checked) before the corpus opens
    corpus = open_corpus(corpus_path, ray=ray)
    try:
        done = write_run(recipe, corpus, queries, out_path, format=run_format, tag=tag, batch_size=batch_size,
                         params=settings)
    except ParameterError as error:  # the user's --set, written as they wrote it
        raise UserError(error.message(set_label)) from None
    summary = {"recipe": recipe.name, "corpus": corpus.name, **corpus.settings.to_dict(), "path": str(done.path),
               "format": done.format, "queries": done.queries, "hits": done.hits, "queries_without_hits": done.empty}
    if as_json:
        echo_json(dumps(summary))
        return
    click.echo(f"{done.queries} quer{'y' if done.queries == 1 else 'ies'} of {queries_file} run (recipe "
               f"{recipe.name}, corpus {corpus.name}; {corpus.settings}): {done.hits} hits written to {done.path} "
               f"({done.format}{f'; {done.empty} queries without a hit' if done.empty else ''})")


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
        echo_json(dumps({"recipe": recipe, "source": source, "ok": not problems, "problems": problems}))
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
@click.option("--json", "as_json", is_flag=True,
              help='Print [{"name": ..., "description": ..., "fusion": {...} or null}, ...].')
@machine_readable
def recipes(as_json: bool) -> None:
    """List the built-in recipes, and how each hybrid fuses its channels."""
    found = [(name, load_recipe(name)) for name in builtin_recipes()]
    if as_json:
        echo_json(dumps([{"name": name, "description": recipe.description, "fusion": recipe.fusion()}
                          for name, recipe in found]))
        return
    for name, recipe in found:
        click.echo(f"{name}: {recipe.description}")
        fusion = recipe.fusion()
        if fusion is not None:
            click.echo(f"    {_fusion_line(fusion)}")


def _fusion_line(fusion: dict[str, Any]) -> str:
    """``fusion: blend (alpha=0.5, bm25_sat_k=16.0: cosine plus saturated BM25); --set fusion=rrf for RRF``."""
    method = fusion["method"]
    settings = ", ".join(f"{k}={v}" for k, v in fusion.items() if k not in ("stage", "method", "choices", "when"))
    when = " and ".join(f"{k}={'|'.join(map(str, v))}" for k, v in fusion["when"].items())
    switch = "".join(f"; --set fusion={c} for {_FUSION_NAMES.get(c, (c, ''))[0]}"
                     for c in fusion["choices"] if c != method)
    name, how = _FUSION_NAMES.get(method, (method, ""))
    return f"fusion{f' when {when}' if when else ''}: {name} ({settings}{how}){switch}"


#: How ``irflow recipes`` names a fusion method, and what it adds up.
_FUSION_NAMES = {"rrf": ("RRF", ": reciprocal ranks"), "blend": ("blend", ": cosine plus saturated BM25")}


# --------------------------------------------------------------------------
# eval


@main.command("eval")
@click.argument("recipes", nargs=-1, required=True, type=PATH_TEXT, metavar="RECIPE [RECIPE ...]")
@plugin_option
@click.option("--dataset", default=None, type=PATH_TEXT, metavar="DIR|sample|irds:NAME",
              help="A BEIR-format collection (corpus.jsonl, queries.jsonl, qrels/<split>.tsv); sample, the small "
                   "collection shipped with irflow (a folder named sample is ./sample); or irds:NAME, an "
                   "ir_datasets collection (the irds extra). Its documents are built into a corpus (cached).")
@click.option("--corpus", "corpus_path", default=None, type=PATH_TEXT,
              help="Evaluate this corpus, built before (a directory or a name under $IRFLOW_HOME/corpora; plain or "
                   "sharded), on --queries and --qrels, instead of a --dataset.")
@click.option("--queries", "queries_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, metavar="FILE", help="With --corpus: the queries (TREC topics, qid<TAB>text lines or "
                                                 "queries.jsonl).")
@click.option("--qrels", "qrels_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              metavar="FILE", help="With --corpus: the judgements (TREC 'qid iteration docid grade', or BEIR tsv).")
@click.option("--topic-field", type=click.Choice(TOPIC_FIELDS), default="title", show_default=True,
              help="Which field of a TREC topic is the query.")
@click.option("--split", default=None, help="Which qrels/<split>.tsv of a --dataset to evaluate on [default: test].")
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
@click.option("--title-mode", type=click.Choice(["prepend", "separate", "ignore"]), default=None,
              help="How document titles become records [default: prepend].")
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
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the evaluation as one self-contained HTML page: metrics, significance, per-query "
                   "differences, the worst and best queries with their hits, the settings.")
@click.option("--cache/--no-cache", default=True, show_default=True,
              help="Reuse the corpus built for this collection and settings ($IRFLOW_HOME/cache/eval).")
@click.option("--progress/--no-progress", default=None, help="Progress (default: unless irflow -q).")
@click.option("--json", "as_json", is_flag=True,
              help="Print only JSON: dataset, split, queries, depth, {system: {metric: value}} and parameters.")
@ray_option
@machine_readable
def eval_command(recipes: tuple[str, ...], dataset: str | None, corpus_path: str | None, queries_file: Path | None,
                 qrels_file: Path | None, topic_field: str, split: str | None, metrics: str, settings: dict[str, Any],
                 sweeps: dict[str, list[Any]], embedder: str | None, analyzer: str | None, title_mode: str | None,
                 depth: int, batch_size: int, holdout: str | None, holdout_seed: int, baseline: str | None,
                 runs_dir: Path | None, report_path: Path | None, cache: bool, progress: bool | None, as_json: bool, ray: str | None) -> None:
    """Evaluate RECIPEs (files or built-in names) on a test collection and print the metrics.

    The collection is a --dataset (its documents built into a corpus), or --queries and --qrels files
    over a --corpus built before (irflow index).
    """
    if runs_dir is not None:
        refuse_inside_corpus(runs_dir, "run folder")  # said before the evaluation, not after it
    if report_path is not None:
        refuse_inside_corpus(report_path, "report")
    show = show_progress(progress)
    collection = eval_collection(dataset, split, corpus_path, queries_file, qrels_file, topic_field,
                                 {"embedder": embedder, "analyzer": analyzer, "title_mode": title_mode})
    queries = None
    if holdout is not None:
        tune, test = holdout_split(collection.eval_queries, seed=holdout_seed)
        queries = tune if holdout == "tune" else test
    try:
        result = evaluate(list(recipes), collection, metrics=metrics, params=settings, sweep=sweeps or None,
                          embedder=embedder_option(embedder), analyzer=analyzer, corpus=corpus_path,
                          title_mode=title_mode or "prepend", batch_size=batch_size, depth=depth, queries=queries, progress=show,
                          use_cache=cache, baseline=baseline, ray=ray, keep_runs=runs_dir is not None or report_path is not None,
                          plugins=click.get_current_context().meta.get(PLUGINS_META, ()))
    except ParameterError as error:  # a --set or --sweep value, written as on the command line
        raise UserError(error.message(lambda name, value: set_label(name, value)[len("--set "):])) from None
    if runs_dir is not None:
        try:
            written = result.write_runs(runs_dir)
        except IrflowError:  # an OutputError names the run file and the fix
            raise
        except OSError as error:  # the folder could not be made
            raise UserError(f"cannot write the runs: {explain_os_error(error)}") from None
        note(f"{len(written)} run file{'' if len(written) == 1 else 's'} written to {runs_dir}")
    if report_path is not None:
        result.to_html(report_path, collection=collection)  # atomic; an OutputError names the file and the fix
        note(f"report written to {report_path}; open it in a browser")
    if as_json:
        echo_json(json.dumps(result.summary(), indent=2))
        return
    source = result.corpus
    where = "" if source is None or source.path is None else f"; corpus {source.status}: {source.path}"
    subset = "" if holdout is None else f", {holdout} half (seed {holdout_seed})"
    split_said = f"qrels {result.split}" if corpus_path is not None else f"{result.split} split"
    click.echo(f"{result.dataset} ({split_said}{subset}, {result.n_queries} queries, depth {result.depth}"
               f"{where})")
    click.echo(result.table())
    if result.baseline is not None and len(result) > 1:
        click.echo("")
        click.echo(result.compare().table())


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
    given = {"filter": json_option(filter_json, "--filter"), "mode": mode,
             "trace_path": None if trace_path is None else str(trace_path), "k": k, "embedder": embedder}
    # only what the user gave: run_demo keeps its own defaults for the rest
    quickstart.run_demo(list(queries), **{key: value for key, value in given.items() if value is not None},
                        echo=click.echo, cache=True, progress=show_progress())


# --------------------------------------------------------------------------

from irflow.cli.report import report  # noqa: E402  (the "report" command lives in its own module)
from irflow.cli.trace import trace  # noqa: E402  (the "trace" group lives in its own module)

main.add_command(trace)
main.add_command(report)
main.add_command(shard_command)
main.add_command(add_command)
main.add_command(delete_command)
main.add_command(compact_command)
utf8_parameters(main)  # every plain string parameter is UTF-8 text (paths are declared PATH_TEXT)

if __name__ == "__main__":  # pragma: no cover
    main()
