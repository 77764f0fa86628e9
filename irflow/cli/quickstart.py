"""The quickstart: search the Python packages installed here, hybrid, traced.

It is what README's first command runs (``irflow demo``): a corpus built from
real data every Python machine has (see :mod:`irflow.cli.installed`), the
default embedder of every entry point (all-MiniLM-L6-v2 on onnxruntime when the
``models`` extra is installed, else the offline ``"hash"`` sketch, said so
once), the built-in ``search`` recipe in hybrid mode, a readable results
table and a trace file to look into with ``irflow trace show``.

>>> run_demo(["progress bar"], k=3, trace_path=None, echo=lambda line: None)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from irflow.store.corpus import Corpus, build, open_corpus
from irflow.kernels.embedders import AUTO, resolve_embedder
from irflow.errors import CorpusError
from irflow.cli.installed import distribution_records
from irflow.store.paths import irflow_home
from irflow.store.persist import FORMAT_VERSION
from irflow.engine.recipe import load_recipe
from irflow.util.corpusmarks import CORPUS, refuse_inside_corpus
from irflow.util.table import render_table
from irflow.util.unicode import check_text
from irflow.kernels.text import get_analyzer

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


def installed_corpus(*, embedder: Any = AUTO, cache: bool = False, progress: bool = False) -> Corpus:
    """A corpus of the installed distributions (named ``installed``): in memory, or cached.

    With ``cache`` it is built once into ``$IRFLOW_HOME/cache/demo/<key>/installed``
    and reopened afterwards — a model takes tens of seconds to embed a few
    hundred README chunks — keyed by the records themselves, the embedder's
    identity (model digests included), the analyzer and the corpus format,
    so installing a package or another model makes a new entry.  A user
    callable as embedder cannot be keyed: it is built in memory.
    """
    records = distribution_records()
    the_embedder = resolve_embedder(embedder)
    identity = None if the_embedder is None else the_embedder.identity()
    if not cache or (the_embedder is not None and identity is None):
        return build(records, embedder=the_embedder, name="installed", progress=progress)
    parts = {"records": [r.to_dict() for r in records], "embedder": identity,
             "analyzer": get_analyzer(None).to_dict(), "format_version": FORMAT_VERSION}
    key = hashlib.blake2b(json.dumps(parts, sort_keys=True, default=str).encode("utf-8"), digest_size=16).hexdigest()
    path = irflow_home() / "cache" / "demo" / key[:20] / "installed"
    if path.exists():
        try:
            return open_corpus(path, embedder=the_embedder)
        except CorpusError as error:  # an interrupted or foreign entry: rebuild rather than fail
            logger.warning("the cached demo corpus %s cannot be opened (%s); rebuilding it", path, error)
    refuse_inside_corpus(path, "demo corpus", replacing=CORPUS)  # before its folders are made
    path.parent.mkdir(parents=True, exist_ok=True)
    return build(records, embedder=the_embedder, path=path, progress=progress)


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
    embedder: Any = AUTO,
    cache: bool = False,
    progress: bool = False,
) -> list:
    """Run the ``search`` recipe over the installed-packages corpus and show the hits.

    Returns the hit lists (one per query).  With *trace_path* the run is
    traced and the trace written there as JSON Lines.  ``embedder`` defaults
    to the model when installed, else "hash" (:func:`irflow.kernels.embedders.default_embedder`);
    ``cache`` keeps the embedded corpus for the next run (see :func:`installed_corpus`).
    """
    if trace_path is not None:
        refuse_inside_corpus(trace_path, "trace")  # said before the corpus is built, not after the run
    queries = list(queries) or list(EXAMPLE_QUERIES)
    for i, query in enumerate(queries):  # refused before the corpus is built (the run would refuse it after)
        if isinstance(query, str):
            check_text(query, f"query {i}")
    corpus = installed_corpus(embedder=embedder, cache=cache, progress=progress)
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
