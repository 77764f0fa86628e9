"""Evaluate recipes on a test collection: metrics, side-by-side tables, significance, sweeps.

:func:`evaluate` loads a BEIR-format collection, builds (or reopens from the
cache, see :mod:`irflow.evaluation.cache`) its corpus, runs every recipe — and every
setting of a parameter sweep — over the judged queries in batches, and
scores the rankings with :mod:`irflow.evaluation.metrics` (trec_eval's semantics).
It returns an :class:`Evaluation`: means, per-query values and the runs of
each system, a table with the best value per metric marked, paired
significance tests against a baseline, and TREC run files.

How deep each ranking is.  Every ranking is ``depth`` documents deep
(default 1000, trec_eval's usual depth; ``depth=`` / ``irflow eval
--depth N``), whatever the metrics: a metric never changes because another
one was asked for.  (Deriving the depth from the largest cutoff did that:
the depth feeds ``fetch_k``, so fusion saw deeper channels when recall@100
or map was requested, and nDCG@10 moved.)  A metric whose cutoff exceeds
the depth is refused.  The depth is passed to every recipe that has a ``k``
parameter (unless ``params`` sets ``k``), printed with the results, and
recorded in ``Evaluation.summary()`` (``--json``) and beside the run files
(``runs.json``).  When each document is one record (title mode
``"prepend"`` or ``"ignore"``), collapsing per artifact cannot drop
anything, so a recipe's ``fetch_k`` (the depth of each first-stage channel)
defaults to ``depth`` too instead of the seed's over-fetch ``max(5k, 50)``:
the same ranking at a fifth of the work.

Sweeps reuse work.  One :class:`~irflow.engine.executor.StageCache` serves the whole
evaluation, and the loop is batch-major (for each query batch, every recipe
and setting), so a stage whose parameters and inputs a setting does not
change — the dense and lexical channels of a fusion sweep — runs once per
batch and is reused by every setting.  The cache is bounded (least recently
used entries go first) to about one batch's outputs.

Runs.  A run maps query id -> document id -> score, the document id being
the record's artifact id (the BEIR document id); when an artifact appears
several times in a ranking (surfaces not collapsed) its best-ranked entry
counts.  Metrics re-rank by score as trec_eval does (ties by document id),
so they see exactly what the exported TREC run files show.

>>> ev = evaluate(["lexical", "hybrid"], "../shared/data/scifact")   # doctest: +SKIP
>>> print(ev.table())                                                 # doctest: +SKIP
>>> print(ev.compare("lexical").table())                              # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from irflow.engine.batches import Candidates
from irflow.engine.executor import StageCache
from irflow.evaluation.cache import corpus_for
from irflow.evaluation.datasets import Collection, DatasetError, load_beir
from irflow.evaluation.metrics import EvaluationError, Metric, Qrels, Run, parse_metrics, per_query
from irflow.evaluation.on_ray import evaluate_batches_on_ray
from irflow.evaluation.plans import Plan
from irflow.evaluation.plans import plan as plan_systems
from irflow.evaluation.results import Comparisons, Evaluation, SystemResult
from irflow.shard.ray_backend import connect as connect_to_ray
from irflow.util.unicode import check_text

__all__ = [
    "DEFAULT_METRICS",
    "DEFAULT_DEPTH",
    "SystemResult",
    "Evaluation",
    "Comparisons",
    "evaluate",
    "evaluate_runs",
    "ranking_depth",
    "holdout_split",
]

#: The metrics :func:`evaluate` reports unless told otherwise.
DEFAULT_METRICS: tuple[str, ...] = ("ndcg@10", "recall@100", "mrr@10", "map", "p@10")
#: Documents ranked per query unless told otherwise (trec_eval's customary 1000).
DEFAULT_DEPTH = 1000


def ranking_depth(metrics: Iterable[Metric], depth: int | None = None) -> int:
    """How deep every ranking is: ``depth`` if given, else :data:`DEFAULT_DEPTH`.

    Never derived from the metrics (see the module docstring); a metric
    whose cutoff is deeper than the depth is an error.

    >>> ranking_depth(parse_metrics("ndcg@10,recall@100")), ranking_depth(parse_metrics("map"), 50)
    (1000, 50)
    """
    if depth is None:
        depth = DEFAULT_DEPTH
    elif isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise EvaluationError(f"depth must be a positive integer (documents ranked per query), got {depth!r}")
    deeper = [str(m) for m in metrics if m.k is not None and m.k > depth]
    if deeper:
        raise EvaluationError(f"metric(s) {', '.join(deeper)} need a ranking deeper than the depth {depth}; "
                              f"raise it (depth= / --depth N) or lower the cutoff")
    return depth


class _RunBuilder:
    """Turns recipe outputs into runs: artifact ids, best-ranked occurrence per (query, document)."""

    def __init__(self, corpus: Any) -> None:
        self.ids = np.asarray(corpus.artifact_ids, dtype=object)
        # integer codes per artifact, so duplicates are found with numpy instead of per-candidate dict probes
        self.names, self.codes = np.unique(self.ids.astype(str), return_inverse=True)

    def add(self, result: Any, qids: Sequence[str], run: dict[str, dict[str, float]]) -> None:
        output = result.output()
        if not isinstance(output, Candidates):  # a Hits output: already SearchHits per query
            for qid, hits in zip(qids, result.hits):
                scores = run.setdefault(qid, {})
                for hit in hits:
                    scores.setdefault(hit.artifact_id, float(hit.score))
            return
        for qid in qids:
            run.setdefault(qid, {})
        if not len(output):
            return
        origin = output.origin_index.astype(np.int64)
        code = self.codes[output.row]
        # candidates are grouped by query and ranked: the first occurrence of a key is its best rank
        _, first = np.unique(origin * len(self.names) + code, return_index=True)
        keep = np.sort(first)
        keep = keep[np.argsort(origin[keep], kind="stable")]
        q_of = origin[keep]
        bounds = np.searchsorted(q_of, np.arange(len(qids) + 1))
        doc_ids = self.names[code[keep]].tolist()
        scores = output.score[keep].tolist()
        for i, qid in enumerate(qids):
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            run[qid].update(zip(doc_ids[lo:hi], scores[lo:hi]))


def _batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def holdout_split(query_ids: Iterable[str], *, seed: int = 0, fraction: float = 0.5) -> tuple[list[str], list[str]]:
    """A fixed split of query ids into (tune, test): choose settings on one, report on the other.

    For collections that ship only test qrels (Cranfield, CISI).  The ids are
    sorted before a seeded shuffle, so the split depends on the ids and the
    seed only, not on file order; ``round(n * fraction)`` ids go to ``tune``.
    Each part keeps the given order.

    >>> holdout_split(["q1", "q2", "q3", "q4"], seed=0)
    (['q1', 'q3'], ['q2', 'q4'])
    """
    ids = list(dict.fromkeys(query_ids))
    if not 0.0 < fraction < 1.0:
        raise EvaluationError(f"fraction must lie strictly between 0 and 1, got {fraction!r}")
    order = np.random.default_rng(seed).permutation(len(ids))
    tune = {sorted(ids)[i] for i in order[: round(len(ids) * fraction)]}
    return [q for q in ids if q in tune], [q for q in ids if q not in tune]


def _select_queries(collection: Collection, queries: Iterable[str] | None) -> dict[str, str]:
    judged = collection.eval_queries
    if queries is None:
        chosen = judged
    else:
        wanted = list(dict.fromkeys(str(q) for q in queries))
        missing = [q for q in wanted if q not in judged]
        if missing:
            raise EvaluationError(f"queries {missing[:5]} are not judged in the {collection.split!r} split of "
                                  f"{collection.name} (or have no text); choose among its {len(judged)} judged queries")
        chosen = {q: judged[q] for q in wanted}
    if not chosen:
        raise EvaluationError(f"{collection.name}: no judged query to evaluate in the {collection.split!r} split")
    for qid, text in chosen.items():  # a Collection made in Python: what load_beir checks per line
        check_text(qid, f"{collection.name}: a query id", error=DatasetError)
        check_text(text, f"{collection.name}: the text of query {qid!r}", error=DatasetError)
    return chosen


def _system(label: str, recipe: str, params: Mapping[str, Any], run: dict[str, dict[str, float]], qrels: Qrels,
            metrics: tuple[Metric, ...], seconds: float) -> SystemResult:
    # missing="zero": a judged query without results scores 0, so systems stay paired query by query
    table = per_query(run, qrels, metrics, missing="zero")
    means = {name: math.fsum(values.values()) / len(values) for name, values in table.items()}
    return SystemResult(label, recipe, dict(params), means, table, run, seconds)


def _run_plans(plans: Sequence[Plan], corpus: Any, queries: Mapping[str, str], *, batch_size: int,
               stage_cache: StageCache, progress: str | None) -> tuple[list[dict[str, dict[str, float]]], list[float]]:
    """Each plan's run over ``queries`` (id -> text) and its seconds; ``progress``: a bar's title, or None.

    Batch-major: every system on one batch before the next, so the stage cache holds one batch's outputs.
    """
    builder = _RunBuilder(corpus)
    runs: list[dict[str, dict[str, float]]] = [{} for _ in plans]
    seconds = [0.0] * len(plans)
    bar = None
    if progress is not None:
        from tqdm.auto import tqdm  # lazily: only when asked, a bar is for interactive use

        bar = tqdm(total=len(queries) * len(plans), desc=progress, unit="query")
    try:
        for batch in _batches(list(queries), batch_size):
            texts = [queries[q] for q in batch]
            for i, plan in enumerate(plans):
                start = time.perf_counter()
                result = plan.recipe.run(corpus, texts, cache=stage_cache, **plan.params)
                builder.add(result, batch, runs[i])
                seconds[i] += time.perf_counter() - start
                if bar is not None:
                    bar.update(len(batch))
    finally:
        if bar is not None:
            bar.close()
    return runs, seconds


def _run_plans_on_ray(address: str, plans: Sequence[Plan], source: Any, embedder: Any, queries: Mapping[str, str],
                      *, batch_size: int, cache_size: int | None, plugins: Sequence[str],
                      progress: str | None) -> tuple[list[dict[str, dict[str, float]]], list[float]]:
    """:func:`_run_plans` with the same batches mapped over Ray actors, gathered back in query order."""
    batches = [([queries[q] for q in batch], list(batch)) for batch in _batches(list(queries), batch_size)]
    runs: list[dict[str, dict[str, float]]] = [{} for _ in plans]
    seconds = [0.0] * len(plans)
    bar = None
    if progress is not None:
        from tqdm.auto import tqdm  # lazily: only when asked, a bar is for interactive use

        bar = tqdm(total=len(queries) * len(plans), desc=progress, unit="query")

    def advance(n_queries: int) -> None:
        if bar is not None:
            bar.update(n_queries * len(plans))

    try:
        done = evaluate_batches_on_ray(address, source, embedder, plans, batches, _RunBuilder, plugins=plugins,
                                       cache_size=cache_size, on_batch=advance)
    finally:
        if bar is not None:
            bar.close()
    for per_system in done:
        for i, (run, spent) in enumerate(per_system):
            runs[i].update(run)
            seconds[i] += spent
    return runs, seconds


def evaluate(
    recipes: Any,
    dataset: str | os.PathLike[str] | Collection,
    *,
    split: str = "test",
    metrics: str | Iterable[str | Metric] = DEFAULT_METRICS,
    params: Mapping[str, Any] | None = None,
    sweep: Mapping[str, Sequence[Any]] | None = None,
    embedder: Any = "hash",
    analyzer: Any = None,
    title_mode: str = "prepend",
    batch_size: int = 256,
    depth: int | None = None,
    queries: Iterable[str] | None = None,
    progress: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    use_cache: bool = True,
    baseline: Any = None,
    stage_cache: StageCache | None = None,
    ray: str | None = None,
    plugins: Sequence[str] = (),
) -> Evaluation:
    """Run recipes over a collection's judged queries and measure them.

    - ``recipes``: a built-in name, a recipe file, a :class:`~irflow.engine.recipe.Recipe`,
      a list of those, or a mapping ``{label: recipe}`` to name them.
    - ``dataset``: a BEIR-format directory (``qrels/<split>.tsv`` is read) or a
      loaded :class:`~irflow.evaluation.datasets.Collection` (``split`` is then its own).
    - ``params``: recipe parameters for every recipe that has them (a name no
      recipe has is an error); ``sweep``: ``{name: [values]}``, every
      combination evaluated, each recipe sweeping only the names it has.
    - ``embedder`` / ``analyzer`` / ``title_mode``: how the corpus is built
      (cached on disk under ``cache_dir``, default ``$IRFLOW_HOME/cache/eval``;
      ``use_cache=False`` builds in memory). ``embedder=None`` builds a
      lexical-only corpus.
    - ``depth``: documents ranked per query, default 1000 whatever the
      metrics (see the module docstring).
    - ``queries``: evaluate only these judged query ids (a held-aside half).
    - ``baseline``: a label among the systems, or a recipe to add first; it
      becomes the default of :meth:`Evaluation.compare`.
    - ``stage_cache``: share a StageCache (default: a new one, bounded to
      about one batch of stage outputs).
    - ``ray``: run the query batches on a pool of Ray actors (``"auto"``: a
      local cluster, or an address), with the same figures; ``plugins`` are
      imported in every actor first (see :mod:`irflow.evaluation.on_ray`).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise EvaluationError(f"batch_size must be a positive integer, got {batch_size!r}")
    parsed = parse_metrics(metrics)
    the_depth = ranking_depth(parsed, depth)
    collection = dataset if isinstance(dataset, Collection) else load_beir(dataset, split)
    per_document = title_mode != "separate"
    merged: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []
    plans, base_label = plan_systems(recipes, dict(params or {}), sweep, baseline, the_depth, per_document, merged)
    chosen = _select_queries(collection, queries)
    qids = list(chosen)
    qrels = {q: dict(collection.qrels[q]) for q in qids}
    if ray is not None:  # on the cluster before the corpus is built: an address that does not answer fails at once
        connect_to_ray(ray)

    corpus, source = corpus_for(collection, embedder=embedder, analyzer=analyzer, title_mode=title_mode,
                                batch_size=batch_size, progress=progress, cache_dir=cache_dir, use_cache=use_cache)
    if stage_cache is None:
        # LRU bound: every stage of every recipe once, so the first-stage outputs of the current batch
        # (touched by every setting) stay while older settings' and batches' outputs are dropped
        stage_cache = StageCache(maxsize=sum(len(p.recipe.stages) for p in plans) + len(plans))
    title = f"evaluating {collection.name}" if progress else None
    if ray is None:
        runs, seconds = _run_plans(plans, corpus, chosen, batch_size=batch_size, stage_cache=stage_cache,
                                   progress=title)
    else:
        runs, seconds = _run_plans_on_ray(ray, plans, source, embedder, chosen, batch_size=batch_size,
                                          cache_size=stage_cache.maxsize, plugins=plugins, progress=title)
    systems = tuple(_system(plan.label, plan.recipe.name, plan.params, runs[i], qrels, parsed, seconds[i])
                    for i, plan in enumerate(plans))
    return Evaluation(collection.name, collection.split, tuple(str(m) for m in parsed), the_depth, qrels, systems,
                      base_label, source, stage_cache, merged=tuple(merged), settings=_settings(corpus, title_mode))


def _settings(corpus: Any, title_mode: str) -> dict[str, Any]:
    """How the corpus was built, as a report says it (the embedder's spec, the analyzer's name, the title mode)."""
    analyzer = getattr(corpus, "analyzer", None)
    return {"embedder": getattr(corpus, "embedder_spec", None) or "none",
            "analyzer": getattr(analyzer, "name", None), "title_mode": title_mode}


def evaluate_runs(
    runs: Mapping[str, Run],
    qrels: Qrels,
    *,
    metrics: str | Iterable[str | Metric] = DEFAULT_METRICS,
    dataset: str = "runs",
    split: str = "test",
    baseline: str | None = None,
) -> Evaluation:
    """Measure existing runs (e.g. read with :func:`irflow.evaluation.trec.read_trec_run`) against qrels.

    Every judged query is evaluated; one a run lacks scores 0.  Gives the
    same :class:`Evaluation` (tables, comparisons) as :func:`evaluate`.

    >>> ev = evaluate_runs({"a": {"q1": {"d1": 1.0}}}, {"q1": {"d1": 1}}, metrics="p@1")
    >>> ev.to_dict()
    {'a': {'p@1': 1.0}}
    """
    parsed = parse_metrics(metrics)
    if not qrels:
        raise EvaluationError("no judged query in the qrels; nothing to evaluate")
    if baseline is not None and baseline not in runs:
        raise EvaluationError(f"baseline {baseline!r} is not one of the runs: {', '.join(runs)}")
    judged = {q: dict(j) for q, j in qrels.items()}
    systems = []
    for label, run in runs.items():
        plain = {q: {d: float(s) for d, s in scores.items()} for q, scores in run.items()}
        systems.append(_system(label, "", {}, plain, judged, parsed, 0.0))
    # the runs' own depth: the longest ranking they hold
    deepest = max((len(scores) for run in runs.values() for scores in run.values()), default=0)
    return Evaluation(dataset, split, tuple(str(m) for m in parsed), deepest, judged, tuple(systems), baseline)
