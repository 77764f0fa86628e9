"""The quickstart: search the Python packages installed here, hybrid, traced.

It is what README's first command runs (``irflow demo``): a corpus built from
real data every Python machine has (see :mod:`irflow.installed`), the default
offline embedder, the built-in ``search`` recipe in hybrid mode, a readable
results table and a trace file to look into with ``irflow trace show``.

>>> run_demo(["progress bar"], k=3, trace_path=None, echo=lambda line: None)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from irflow.corpus import Corpus, build
from irflow.installed import distribution_records
from irflow.recipe import load_recipe
from irflow.table import render_table

__all__ = ["EXAMPLE_QUERIES", "DEFAULT_TRACE", "installed_corpus", "run_demo", "scoring_stage"]

logger = logging.getLogger(__name__)

#: Queries that find something in any environment irflow itself is installed in.
EXAMPLE_QUERIES: tuple[str, ...] = (
    "progress bar for loops",
    "graph algorithms and networks",
    "parse YAML configuration",
    "rank_bm25 Okapi ranking",
)

#: Where the demo writes its trace unless told otherwise.
DEFAULT_TRACE = "irflow-demo-trace.jsonl"


def installed_corpus(*, embedder: Any = "hash") -> Corpus:
    """An in-memory corpus of the installed distributions (named ``installed``)."""
    return build(distribution_records(), embedder=embedder, name="installed")


def _snippet(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def run_demo(
    queries: Sequence[str] = (),
    *,
    filter: Mapping[str, Any] | None = None,
    mode: str = "hybrid",
    k: int = 5,
    trace_path: str | Path | None = DEFAULT_TRACE,
    echo: Callable[[str], None] = logger.info,
) -> list:
    """Run the ``search`` recipe over the installed-packages corpus and show the hits.

    Returns the hit lists (one per query).  With *trace_path* the run is
    traced and the trace written there as JSON Lines.
    """
    queries = list(queries) or list(EXAMPLE_QUERIES)
    corpus = installed_corpus()
    artifacts = len(corpus.store.ledger)
    echo(f"corpus: {artifacts} installed Python distributions, {corpus.n_rows} surfaces "
         f"({', '.join(corpus.kinds)}); embedder {corpus.embedder_spec}, analyzer {corpus.analyzer.name}")
    recipe = load_recipe("search")
    result = recipe.run(corpus, queries, trace=trace_path is not None, mode=mode, k=k, filter=filter)
    for query, hits in zip(queries, result.hits):
        echo("")
        echo(f"query: {query}   (recipe search, mode={mode}, k={k})")
        if not hits:
            echo("  no hits")
            continue
        rows = [
            [rank, hit.artifact_id, hit.metadata.get("version", ""), hit.surface_kind, f"{hit.score:.4f}", _snippet(hit.text)]
            for rank, hit in enumerate(hits, 1)
        ]
        echo(render_table(["#", "package", "version", "surface", "score", "text"], rows, indent="  ", right=["score"]))
    if trace_path is not None and result.trace is not None:
        result.trace.dump(trace_path)
        echo("")
        echo(f"trace written to {trace_path}: see every stage with `irflow trace show {trace_path}`, "
             f"or where the scores come from with `--stage {scoring_stage(result.trace)}`")
    return result.hits


def scoring_stage(trace: Any) -> str:
    """The stage that made the final scores: the first that ran and output the result's scale.

    ``fuse`` in hybrid mode, ``lexical`` or ``dense`` when one channel ran
    (the fuse stage then passes it through); the last stage when no scale
    is known.
    """
    stages = list(trace.stages)
    final = trace.stage(stages[-1]).scale
    for name in stages:
        if final is not None and trace.event(name).status == "ran" and trace.stage(name).scale == final:
            return name
    return stages[-1]
