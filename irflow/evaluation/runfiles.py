"""A recipe over a whole query file, written as a TREC run or as JSON Lines (``irflow run --queries FILE``).

The queries run in batches (each stage once per batch), and each batch's
hits are written as soon as they are made, so the memory of a run over
thousands of queries is one batch's.  The file is replaced atomically
(:func:`irflow.util.fileio.atomic_writer`: a failed or interrupted run
leaves the previous file whole) and never lands inside a corpus.

- ``trec``: ``qid Q0 docid rank score tag`` per hit, the document id being
  the hit's artifact id (its best-ranked surface when surfaces are not
  collapsed), what :func:`irflow.evaluation.trec.read_trec_run`, trec_eval and
  ``irflow.evaluate_runs`` read;
- ``jsonl``: one object per query, ``{"qid", "query", "hits": [{"rank", ...SearchHit}]}``.

>>> write_run("hybrid", corpus, {"q1": "sql parser"}, "hybrid.run")  # doctest: +SKIP
RunFile(path=PosixPath('hybrid.run'), format='trec', queries=1, hits=10, empty=0)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import attrs
import numpy as np

from irflow.engine.recipe import Recipe, load_recipe
from irflow.engine.values import jsonable
from irflow.evaluation.metrics import EvaluationError
from irflow.evaluation.runs import DocIds, RankedBatch, ranked_batch
from irflow.evaluation.trec import check_token, trec_run_lines
from irflow.util.corpusmarks import refuse_inside_corpus
from irflow.util.fileio import atomic_writer
from irflow.util.unicode import json_text

__all__ = ["RUN_FORMATS", "RunFile", "write_run"]

#: The formats :func:`write_run` writes.
RUN_FORMATS: tuple[str, ...] = ("trec", "jsonl")


@attrs.frozen
class RunFile:
    """What :func:`write_run` wrote: the file, its format, the queries run, the hits written, queries without a hit."""

    path: Path
    format: str
    queries: int
    hits: int
    empty: int


def _trec(out: IO[bytes], qids: Sequence[str], ranked: RankedBatch, ids: DocIds, tag: str) -> list[int]:
    """A batch's rankings as TREC lines; the documents written per query.

    Read as columns from the recipe's output (no SearchHit per line: a run
    1000 deep over thousands of queries is millions of lines), one entry
    per artifact, its best-ranked surface, as an evaluation counts it.
    """
    names, counts = ids.names, np.diff(ranked.offsets)
    for i, qid in enumerate(qids):
        lo, hi = int(ranked.offsets[i]), int(ranked.offsets[i + 1])
        out.write(trec_run_lines(qid, names[ranked.docs[lo:hi]].tolist(), ranked.scores[lo:hi].tolist(), tag,
                                 checked=True).encode("utf-8"))
    return [int(c) for c in counts]


def _jsonl(out: IO[bytes], qid: str, text: str, hits: Sequence[Any]) -> int:
    record = {"qid": qid, "query": text, "hits": [{"rank": rank, **hit.to_dict()} for rank, hit in
                                                   enumerate(hits, start=1)]}
    out.write((json_text(jsonable(record)) + "\n").encode("utf-8"))
    return len(hits)


def write_run(recipe: Any, corpus: Any, queries: Mapping[str, str], path: str | os.PathLike[str], *,
              format: str = "trec", tag: str | None = None, batch_size: int = 256,
              params: Mapping[str, Any] | None = None) -> RunFile:
    """Run ``recipe`` (a name, a file or a Recipe) over ``queries`` (id -> text) on ``corpus``; write ``path``.

    ``params`` are the recipe's run parameters (``k``: hits per query);
    ``tag`` names the run in a TREC file (default: the recipe's name).
    """
    if format not in RUN_FORMATS:
        raise EvaluationError(f"unknown run format {format!r}; valid formats: {', '.join(RUN_FORMATS)}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise EvaluationError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not queries:
        raise EvaluationError("no query to run")
    the_recipe = recipe if isinstance(recipe, Recipe) else load_recipe(recipe)
    target = Path(path)
    refuse_inside_corpus(target, "run file")  # said before the queries run, not after
    the_tag = check_token(tag or the_recipe.name, "tag")  # refused before the queries run, not after
    ids = DocIds(corpus.artifact_ids_of(np.arange(corpus.n_rows))) if format == "trec" else None
    for name in ids.names.tolist() if ids is not None else ():
        check_token(name, "document id")  # every distinct id once, not once per line
    qids = list(queries)
    counts: list[int] = []
    with atomic_writer(target, "run file") as out:
        for start in range(0, len(qids), batch_size):
            batch = qids[start:start + batch_size]
            texts = [queries[q] for q in batch]
            result = the_recipe.run(corpus, texts, **dict(params or {}))
            if ids is not None:
                counts += _trec(out, batch, ranked_batch(result, ids, len(batch)), ids, the_tag)
            else:
                counts += [_jsonl(out, qid, text, hits) for qid, text, hits in zip(batch, texts, result.hits)]
    return RunFile(target, format, len(qids), sum(counts), counts.count(0))
