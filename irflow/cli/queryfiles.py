"""The command line's query and judgement files: what ``irflow run --queries`` and ``irflow eval --corpus`` take.

``irflow run RECIPE --corpus C --queries FILE -o OUT`` runs every query of a
TREC topics file, ``qid<TAB>text`` lines or a ``queries.jsonl`` and writes a
TREC run (or JSON Lines); ``irflow eval RECIPE --corpus C --queries FILE
--qrels FILE`` evaluates a corpus built before against TREC (or BEIR) qrels,
instead of a ``--dataset`` whose documents are built into a corpus.  Which
options go together is checked here, before anything runs, each mistake a
usage error saying what to give instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from irflow.evaluation.datasets import Collection
from irflow.evaluation.source import load_dataset
from irflow.evaluation.topics import collection_from_files, read_queries
from irflow.util.corpusmarks import refuse_inside_corpus

__all__ = ["check_run_options", "run_queries", "eval_collection"]


def check_run_options(queries: tuple[str, ...], queries_file: Path | None, out: Path | None,
                      trace_path: Path | None, explain_n: int) -> None:
    """``-q`` or ``--queries FILE`` (with ``-o``), not both; a trace and explanations are for ``-q`` queries."""
    if queries and queries_file is not None:
        raise click.UsageError("give queries with -q QUERY (repeatable) or --queries FILE, not both")
    if not queries and queries_file is None:
        raise click.UsageError("give a query with -q QUERY (repeatable), or a query file with --queries FILE -o OUT")
    if queries_file is None:
        if out is not None:
            raise click.UsageError("-o/--out writes the run of a query file: add --queries FILE (or drop -o)")
        return
    if out is None:
        raise click.UsageError("--queries FILE runs every query of the file into a run file: name it with -o OUT")
    if trace_path is not None or explain_n:
        raise click.UsageError("--trace and --explain are for -q queries; a run over a query file writes its "
                               "hits with -o (trace a few of its queries with -q)")
    refuse_inside_corpus(out, "run file")  # said before the queries run


def run_queries(queries_file: Path, topic_field: str) -> dict[str, str]:
    """The queries of a query file (TREC topics, ``qid<TAB>text`` or ``queries.jsonl``)."""
    return read_queries(queries_file, topic_field)


def eval_collection(dataset: str | None, split: str | None, corpus: str | None, queries: Path | None,
                    qrels: Path | None, topic_field: str, build_options: dict[str, Any]) -> Collection:
    """The collection ``irflow eval`` evaluates: a ``--dataset`` (BEIR or irds:NAME), or ``--queries`` and
    ``--qrels`` files over a ``--corpus`` built before (then ``build_options``, which would not apply, must be unset).
    """
    if (dataset is None) == (corpus is None):
        raise click.UsageError("evaluate a --dataset (a BEIR folder or irds:NAME), or a --corpus built before with "
                               "its --queries and --qrels files: one of the two")
    if dataset is not None:
        if queries is not None or qrels is not None:
            raise click.UsageError("--queries and --qrels go with --corpus; a --dataset brings its own (choose its "
                                   "qrels with --split)")
        return load_dataset(dataset, split or "test")
    if queries is None or qrels is None:
        raise click.UsageError("--corpus needs the queries and judgements to evaluate: --queries FILE (TREC topics, "
                               "qid<TAB>text or queries.jsonl) and --qrels FILE (TREC or BEIR qrels)")
    given = [f"--{name.replace('_', '-')}" for name, value in build_options.items() if value is not None]
    if split is not None:
        given.append("--split")
    if given:
        raise click.UsageError(f"{', '.join(given)}: the --corpus was built already (its embedder, analyzer and "
                               "titles are its own); drop them, or evaluate a --dataset")
    return collection_from_files(queries, qrels, name=Path(corpus or "corpus").name, field=topic_field)
