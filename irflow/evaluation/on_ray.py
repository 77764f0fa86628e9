"""Batch evaluation on a Ray cluster: an evaluation's query batches mapped over actors, with the same figures.

``evaluate(..., ray="auto")`` (``irflow eval --ray auto``) runs every batch
of queries through every system on a pool of Ray actors — one per CPU of
the cluster — instead of one after the other in this process.  Each actor
opens the evaluation's corpus from the on-disk cache (memory-mapped: the
actors of a machine share its pages) and runs the recipes with its own
stage cache, and measures its batch's rankings itself; this process
gathers the per-query figures (and the rankings, when the runs are kept)
batch by batch, in query order.  The figures are the same: a query's
ranking does not depend on its batch or its process (the kernels are
exact), and the metrics are the same computation on the same rankings.

What a recipe names must exist in the actors too: the ``irflow.engine.registry``
entries of this process are sent along (entries Ray cannot serialize are
left out, and a recipe needing one fails naming it), and ``plugins``
(``--plugin``: modules registering stage kinds or entries) are imported in
every actor first.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from irflow.engine import registry
from irflow.engine.executor import StageCache
from irflow.engine.kinds import module_from_file
from irflow.evaluation.cache import CorpusSource
from irflow.evaluation.metrics import EvaluationError, Metric
from irflow.evaluation.runs import BatchOutcome, BatchScorer, DocIds, run_batch
from irflow.shard import open_corpus  # a plain or a sharded corpus (one given to the evaluation may be either)
from irflow.shard.ray_backend import connect, map_on_actors

__all__ = ["evaluate_batches_on_ray"]

log = logging.getLogger(__name__)


def _import_plugin(name: str, cwd: str) -> None:
    """A plugin as the CLI imports it: a ``.py`` path, or a module name (also looked up in the driver's cwd)."""
    if name.endswith(".py") or os.sep in name:
        path = Path(name) if os.path.isabs(name) else Path(cwd) / name
        if path.stem not in sys.modules:
            module_from_file(path.stem, path)
        return
    if cwd not in sys.path:
        sys.path.append(cwd)
    importlib.import_module(name)


class _EvalServer:
    """One actor of the pool: the corpus opened once, the systems run on each batch sent and measured here."""

    def __init__(self, corpus_path: str, embedder: Any, plans: Sequence[Any], entries: dict[str, bytes],
                 plugins: Sequence[str], cwd: str, cache_size: int | None, metrics: Sequence[Metric],
                 keep_runs: bool) -> None:
        import ray  # an optional heavy dependency: imported lazily, and always there in an actor

        for plugin in plugins:
            _import_plugin(plugin, cwd)
        # each entry alone: one the actor cannot load (its module exists only where the driver imported it)
        # is left out, and only a recipe naming it fails (naming it), not the whole pool
        for name, payload in entries.items():
            try:
                obj = ray.cloudpickle.loads(payload)
            except Exception as exc:  # whatever unpickling an arbitrary object raises
                log.warning("irflow.engine.registry entry %r cannot be loaded in a Ray actor (%s); recipes naming "
                            "it fail there", name, exc)
                continue
            registry.register(name, obj, replace=True)
        self.corpus = open_corpus(corpus_path, embedder=embedder)
        self.plans = plans
        # every row's document id through the protocol: a sharded corpus has no whole column to hand over
        self.scorer = BatchScorer(DocIds(self.corpus.artifact_ids_of(np.arange(self.corpus.n_rows))), metrics)
        self.keep_runs = keep_runs
        self.cache = StageCache(maxsize=cache_size)

    def run(self, texts: list[str], qids: list[str], judgements: list[dict[str, int]]) -> list[BatchOutcome]:
        """Every system on one batch: its values, rankings if kept, seconds and run profile, per system."""
        return run_batch(self.plans, self.corpus, texts, qids, judgements, self.scorer, self.cache, self.keep_runs)


def _registry_entries(serialize: Callable[[Any], bytes | None]) -> dict[str, bytes]:
    """The registry's entries, each serialized alone (None from ``serialize``: it cannot be sent)."""
    entries = {}
    for name in registry.names():
        payload = serialize(registry.lookup(name))
        if payload is not None:
            entries[name] = payload
        else:
            log.info("irflow.engine.registry entry %r cannot be sent to Ray actors; recipes naming it fail there", name)
    return entries


def evaluate_batches_on_ray(address: str, source: CorpusSource, embedder: Any, plans: Sequence[Any],
                            batches: Sequence[tuple[list[str], list[str], list[dict[str, int]]]],
                            metrics: Sequence[Metric], *, keep_runs: bool = False, plugins: Sequence[str] = (),
                            cache_size: int | None = 64, on_batch: Callable[[int], None] | None = None,
                            ) -> list[list[BatchOutcome]]:
    """Run and measure ``plans`` on every ``(texts, qids, judgements)`` batch on a pool of actors.

    Per batch, per system: a :class:`~irflow.evaluation.runs.BatchOutcome`
    (per-query values of ``metrics``, the rankings when ``keep_runs`` else
    None, seconds, the run's digest and depths) — only what the evaluation
    keeps comes back.  ``source`` must be an on-disk corpus (the actors open it by
    path); ``on_batch(n_queries)`` is called as each batch finishes.
    """
    if source.path is None:
        raise EvaluationError("evaluating on Ray needs the corpus on disk, where the actors open it, but this one was "
                              "built in memory (the cache is off, or the embedder is a callable): evaluate with the "
                              "cache on (drop --no-cache / use_cache=False) and a named embedder")
    ray = connect(address)  # Ray is an extra, imported only now

    def serialize(obj: Any) -> bytes | None:
        try:
            payload: bytes = ray.cloudpickle.dumps(obj)
        except Exception:  # anything Ray's serializer refuses
            return None
        return payload

    spec = embedder if isinstance(embedder, str) or embedder is None else getattr(embedder, "spec", None)
    init = (str(source.path), spec, list(plans), _registry_entries(serialize), list(plugins), os.getcwd(),
            cache_size, tuple(metrics), keep_runs)
    done = None if on_batch is None else (lambda i, _: on_batch(len(batches[i][1])))
    return map_on_actors(_EvalServer, init, "run", batches, address=address, on_done=done)
