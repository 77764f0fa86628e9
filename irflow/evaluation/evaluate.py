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
so they see exactly what the exported TREC run files show.  Each batch's
rankings are measured as soon as they are made; the runs themselves are
kept, as columns of 12 bytes per entry, only when asked (``keep_runs``,
``irflow eval --runs``), so the memory of an evaluation follows what its
outputs need (see :mod:`irflow.evaluation.runs`).

>>> ev = evaluate(["lexical", "hybrid"], "../shared/data/scifact")   # doctest: +SKIP
>>> print(ev.table())                                                 # doctest: +SKIP
>>> print(ev.compare("lexical").table())                              # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from irflow.engine.executor import StageCache
from irflow.evaluation.datasets import Collection, DatasetError
from irflow.evaluation.metrics import EvaluationError, Metric, Qrels, Run, parse_metrics, per_query
from irflow.evaluation.on_ray import evaluate_batches_on_ray
from irflow.evaluation.plans import Plan
from irflow.evaluation.plans import plan as plan_systems
from irflow.evaluation.results import Comparisons, Evaluation, SystemResult
from irflow.evaluation.runs import LARGE_RUNS_BYTES, BatchOutcome, BatchScorer, ColumnarRun, DocIds, RankedBatch, \
    RunProfile, profile_of, run_batch, run_bytes
from irflow.evaluation.source import evaluation_corpus, load_dataset
from irflow.kernels.embedders import AUTO
from irflow.shard.ray_backend import connect as connect_to_ray
from irflow.util.progress import bar
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
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise EvaluationError(f"seed must be a non-negative integer, got {seed!r}")
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


def _system(label: str, recipe: str, params: Mapping[str, Any], qids: Sequence[str], metrics: tuple[Metric, ...],
            values: np.ndarray, run: Run | None, seconds: float, profile: RunProfile | None = None) -> SystemResult:
    """A SystemResult from the per-query values (queries x metrics, in ``qids`` order)."""
    table = {str(m): dict(zip(qids, values[:, j].tolist())) for j, m in enumerate(metrics)}
    means = {name: math.fsum(column.values()) / len(column) for name, column in table.items()}
    return SystemResult(label, recipe, dict(params), means, table, run, seconds, profile)


class _Measured:
    """What one system's runs leave: per batch its per-query values, its rankings when kept, its profile; seconds."""

    def __init__(self) -> None:
        self.values: list[np.ndarray] = []
        self.ranked: list[RankedBatch] = []
        self.outcomes: list[BatchOutcome] = []
        self.seconds = 0.0

    def add(self, outcome: BatchOutcome) -> None:
        self.values.append(outcome.values)
        if outcome.ranked is not None:
            self.ranked.append(outcome.ranked)
        # the rest of the outcome is a digest and a depth per query: kept without its rankings
        self.outcomes.append(attrs.evolve(outcome, ranked=None, values=outcome.values[:0]))
        self.seconds += outcome.seconds

    def table(self, n_metrics: int) -> np.ndarray:
        return np.concatenate(self.values) if self.values else np.zeros((0, n_metrics))


def _fusion_named(plan: Plan, profile: RunProfile) -> RunProfile:
    """``profile`` with a "mixed" scale named by the fusion the system runs.

    A batch is "mixed" when a fusion passed one channel through for some
    queries (BM25 found nothing for them): the system still ranks by its
    fusion, which is what the table should name.
    """
    parts = (profile.scale or "").split("+")
    if "mixed" not in parts:
        return profile
    fusion = plan.recipe.fusion(plan.params)
    values = plan.recipe.resolve_params(plan.params)
    if fusion is None or any(values.get(key) not in allowed for key, allowed in fusion["when"].items()):
        return profile
    named = list(dict.fromkeys(fusion["method"] if part == "mixed" else part for part in parts))
    return attrs.evolve(profile, scale="+".join(named))


def _progress(title: str | None, total: int) -> Any:
    """The progress of the query batches (a bar on a terminal, a line every few seconds in a log), or None."""
    return None if title is None else bar(True, title, total=total, unit="query")


def _measure_plans(plans: Sequence[Plan], corpus: Any, queries: Mapping[str, str], qrels: Qrels,
                   scorer: BatchScorer, *, batch_size: int, stage_cache: StageCache, keep_runs: bool,
                   progress: str | None) -> list[_Measured]:
    """Each plan run over ``queries`` (id -> text) and measured batch by batch; ``progress``: a bar's title, or None.

    Batch-major: every system on one batch before the next, so the stage cache holds one batch's outputs;
    a batch's rankings are dropped once measured unless ``keep_runs``.
    """
    measured = [_Measured() for _ in plans]
    bar = _progress(progress, len(queries) * len(plans))
    try:
        for batch in _batches(list(queries), batch_size):
            texts = [queries[q] for q in batch]
            done = run_batch(plans, corpus, texts, batch, [qrels[q] for q in batch], scorer, stage_cache,
                             keep_runs)
            for into, outcome in zip(measured, done):
                into.add(outcome)
            if bar is not None:
                bar.update(len(batch) * len(plans))
    finally:
        if bar is not None:
            bar.close()
    return measured


def _measure_plans_on_ray(address: str, plans: Sequence[Plan], source: Any, embedder: Any,
                          queries: Mapping[str, str], qrels: Qrels, metrics: tuple[Metric, ...], *, batch_size: int,
                          cache_size: int | None, keep_runs: bool, plugins: Sequence[str],
                          progress: str | None) -> list[_Measured]:
    """:func:`_measure_plans` with the same batches mapped over Ray actors, gathered back in query order."""
    batches = [([queries[q] for q in batch], list(batch), [dict(qrels[q]) for q in batch])
               for batch in _batches(list(queries), batch_size)]
    bar = _progress(progress, len(queries) * len(plans))

    def advance(n_queries: int) -> None:
        if bar is not None:
            bar.update(n_queries * len(plans))

    try:
        done = evaluate_batches_on_ray(address, source, embedder, plans, batches, metrics, keep_runs=keep_runs,
                                       plugins=plugins, cache_size=cache_size, on_batch=advance)
    finally:
        if bar is not None:
            bar.close()
    measured = [_Measured() for _ in plans]
    for per_system in done:
        for into, outcome in zip(measured, per_system):
            into.add(outcome)
    return measured


def _say_run_size(n_queries: int, depth: int, ids: DocIds, qids: Sequence[str], n_systems: int) -> None:
    """A warning before runs are kept whose memory or run files would be large (nothing is refused)."""
    deep = min(depth, len(ids))  # no ranking holds more documents than the corpus
    memory = run_bytes(n_queries, deep, len(ids), n_systems)
    # a TREC line: "qid Q0 doc rank score tag\n": ~18 characters of score, a short tag, 8 separators
    mean_id = sum(len(q) for q in qids[:1000]) / max(1, min(len(qids), 1000))
    mean_doc = sum(len(str(n)) for n in ids.names[:1000]) / max(1, min(len(ids), 1000))
    disk = int(n_queries * deep * n_systems * (mean_id + mean_doc + len(str(deep)) + 30))
    if max(memory, disk) >= LARGE_RUNS_BYTES:
        warnings.warn(f"keeping the runs of {n_systems} system{'' if n_systems == 1 else 's'} over {n_queries:,} "
                      f"queries, up to {deep:,} documents each, takes up to {_size(memory)} of memory "
                      f"({_size(disk)} as TREC run files); without --runs (keep_runs=False) only the per-query "
                      "figures are kept", stacklevel=3)


def _size(n_bytes: float) -> str:
    for unit in ("bytes", "KB", "MB"):
        if n_bytes < 1000:
            return f"{n_bytes:.0f} {unit}" if unit == "bytes" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1000
    return f"{n_bytes:.1f} GB"


def evaluate(
    recipes: Any,
    dataset: str | os.PathLike[str] | Collection,
    *,
    split: str = "test",
    metrics: str | Iterable[str | Metric] = DEFAULT_METRICS,
    params: Mapping[str, Any] | None = None,
    sweep: Mapping[str, Sequence[Any]] | None = None,
    embedder: Any = AUTO,
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
    keep_runs: bool = True,
    corpus: Any = None,
) -> Evaluation:
    """Run recipes over a collection's judged queries and measure them.

    - ``recipes``: a built-in name, a recipe file, a :class:`~irflow.engine.recipe.Recipe`,
      a list of those, or a mapping ``{label: recipe}`` to name them.
    - ``dataset``: a BEIR-format directory (``qrels/<split>.tsv`` is read),
      ``"irds:NAME"`` (an ir_datasets collection: :mod:`irflow.evaluation.irds`)
      or a loaded :class:`~irflow.evaluation.datasets.Collection` (``split`` is then its own).
    - ``corpus``: evaluate on this built corpus (a Corpus, a ShardedCorpus, or
      a path) instead of building one from the collection's documents; the
      collection then needs only queries and judgements
      (:func:`irflow.evaluation.topics.collection_from_files`), and the
      corpus brings its own embedder and analyzer.
    - ``params``: recipe parameters for every recipe that has them (a name no
      recipe has is an error); ``sweep``: ``{name: [values]}``, every
      combination evaluated, each recipe sweeping only the names it has.
    - ``embedder`` / ``analyzer`` / ``title_mode``: how the corpus is built
      (cached on disk under ``cache_dir``, default ``$IRFLOW_HOME/cache/eval``;
      ``use_cache=False`` builds in memory). ``embedder`` defaults to
      ``"auto"``, the rule of every entry point (``irflow eval`` too): the
      model when the models extra is installed, else ``"hash"``, said once
      (:func:`irflow.kernels.embedders.default_embedder`) — and nothing at all
      when no system reads vectors (only lexical stages): a lexical-only
      corpus, nothing embedded.  ``embedder=None`` builds a lexical-only corpus.
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
    - ``keep_runs``: keep every system's run (``SystemResult.run``, for
      :meth:`Evaluation.write_runs`), 12 bytes per ranked document; with
      False only the per-query figures are kept, each batch's rankings
      dropped once measured (see :mod:`irflow.evaluation.runs`).  A warning
      says the size first when kept runs would be large.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise EvaluationError(f"batch_size must be a positive integer, got {batch_size!r}")
    parsed = parse_metrics(metrics)
    the_depth = ranking_depth(parsed, depth)
    collection = dataset if isinstance(dataset, Collection) else load_dataset(dataset, split)
    per_document = title_mode != "separate"
    merged: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []
    plans, base_label = plan_systems(recipes, dict(params or {}), sweep, baseline, the_depth, per_document, merged)
    chosen = _select_queries(collection, queries)
    qids = list(chosen)
    qrels = {q: dict(collection.qrels[q]) for q in qids}
    if ray is not None:  # on the cluster before the corpus is built: an address that does not answer fails at once
        connect_to_ray(ray)

    the_corpus, source, embedder = evaluation_corpus(
        collection, [p.recipe for p in plans], corpus=corpus, embedder=embedder, analyzer=analyzer,
        title_mode=title_mode, batch_size=batch_size, progress=progress, cache_dir=cache_dir, use_cache=use_cache)
    scorer = BatchScorer(DocIds(the_corpus.artifact_ids_of(np.arange(the_corpus.n_rows))), parsed)
    if keep_runs:
        _say_run_size(len(qids), the_depth, scorer.ids, qids, len(plans))
    if stage_cache is None:
        # LRU bound: every stage of every recipe once, so the first-stage outputs of the current batch
        # (touched by every setting) stay while older settings' and batches' outputs are dropped
        stage_cache = StageCache(maxsize=sum(len(p.recipe.stages) for p in plans) + len(plans))
    title = f"evaluating {collection.name}" if progress else None
    if ray is None:
        measured = _measure_plans(plans, the_corpus, chosen, qrels, scorer, batch_size=batch_size,
                                  stage_cache=stage_cache, keep_runs=keep_runs, progress=title)
    else:
        measured = _measure_plans_on_ray(ray, plans, source, embedder, chosen, qrels, parsed, batch_size=batch_size,
                                         cache_size=stage_cache.maxsize, keep_runs=keep_runs, plugins=plugins,
                                         progress=title)
    systems = []
    for plan, done in zip(plans, measured):
        run = ColumnarRun(qids, done.ranked, scorer.ids.names) if keep_runs else None
        systems.append(_system(plan.label, plan.recipe.name, plan.params, qids, parsed, done.table(len(parsed)),
                               run, done.seconds, _fusion_named(plan, profile_of(done.outcomes))))
    return Evaluation(collection.name, collection.split, tuple(str(m) for m in parsed), the_depth, qrels,
                      tuple(systems), base_label, source, stage_cache, merged=tuple(merged), settings=the_corpus.settings)


def _profile_of_run(run: Mapping[str, Mapping[str, float]], qids: Sequence[str]) -> RunProfile:
    """The profile of a run read from a file: per judged query its documents and scores (by document), its depth."""
    h = hashlib.blake2b(digest_size=16)
    for qid in qids:
        ranked = sorted((run.get(qid) or {}).items())
        h.update(json.dumps([qid, ranked]).encode("utf-8"))
    lengths = np.fromiter((len(run.get(q) or {}) for q in qids), dtype=np.int64, count=len(qids))
    return RunProfile(h.hexdigest(), lengths, None)


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
    qids = list(judged)
    systems = []
    for label, run in runs.items():
        plain = {q: {d: float(s) for d, s in scores.items()} for q, scores in run.items()}
        # missing="zero": a judged query without results scores 0, so systems stay paired query by query
        table = per_query(plain, judged, parsed, missing="zero")
        values = np.array([[table[str(m)][q] for m in parsed] for q in qids], dtype=np.float64).reshape(-1, len(parsed))
        systems.append(_system(label, "", {}, qids, parsed, values, plain, 0.0, _profile_of_run(plain, qids)))
    # the runs' own depth: the longest ranking they hold
    deepest = max((len(scores) for run in runs.values() for scores in run.values()), default=0)
    return Evaluation(dataset, split, tuple(str(m) for m in parsed), deepest, judged, tuple(systems), baseline)
