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

import json
import math
import os
import re
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from irflow.util.cachekey import cache_key
from irflow.evaluation.datasets import Collection, load_beir, write_trec_run
from irflow.evaluation.cache import CorpusSource, corpus_for
from irflow.engine.batches import Candidates
from irflow.engine.executor import StageCache
from irflow.evaluation.metrics import EvaluationError, Metric, Qrels, Run, parse_metrics, per_query
from irflow.engine.recipe import Recipe, load_recipe
from irflow.evaluation.significance import CORRECTIONS, DEFAULT_PERMUTATIONS, Comparison, compare_many
from irflow.evaluation.sweep import expand_sweep, run_signature, setting_label
from irflow.util.table import render_table

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

_FILE_UNSAFE = re.compile(r"[^A-Za-z0-9._=,-]+")


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


@attrs.frozen(eq=False)
class SystemResult:
    """One evaluated system: a recipe with one setting of its parameters.

    ``params`` are the recipe parameters the runs used beyond the recipe's
    defaults (the evaluation's depth, ``params`` and the sweep setting);
    ``means`` maps metric -> mean over the evaluated queries; ``per_query``
    maps metric -> query id -> value; ``run`` maps query id -> document id
    -> score; ``seconds`` is the wall time of its recipe runs (a sweep's first
    setting pays for the stages the later ones reuse).
    """

    label: str
    recipe: str
    params: dict[str, Any]
    means: dict[str, float]
    per_query: dict[str, dict[str, float]]
    run: dict[str, dict[str, float]] = attrs.field(repr=False)
    seconds: float = 0.0


@attrs.frozen(eq=False)
class Comparisons:
    """Every system against one baseline, per metric: paired t-test and randomization test.

    ``results[label][metric]`` is an :class:`irflow.evaluation.significance.Comparison`
    (mean difference, raw and adjusted p-values, per-query wins / losses /
    ties).  The family corrected for multiple comparisons (``correction``,
    Holm by default) is the systems compared on one metric.
    """

    baseline: str
    metrics: tuple[str, ...]
    results: dict[str, dict[str, Comparison]]
    correction: str
    alpha: float = 0.05

    def table(self) -> str:
        """One row per (system, metric): means, difference, adjusted p-values, wins/losses/ties.

        ``sig`` is ``"better"`` / ``"worse"`` when both adjusted p-values are
        below ``alpha`` (a significant gain / loss), blank otherwise.
        """
        rows = []
        for label, per_metric in self.results.items():
            for metric in self.metrics:
                c = per_metric[metric]
                significant = max(_nan_to_one(c.t_p_adjusted), _nan_to_one(c.rand_p_adjusted)) < self.alpha
                sign = ("better" if c.mean_diff > 0 else "worse") if significant else ""
                rows.append([label, metric, f"{c.baseline_mean:.4f}", f"{c.other_mean:.4f}", f"{c.mean_diff:+.4f}",
                             _p(c.t_p_adjusted), _p(c.rand_p_adjusted), f"{c.wins}/{c.losses}/{c.ties}", sign])
        headers = ["system", "metric", "baseline", "system mean", "diff", f"p t ({self.correction})",
                   f"p rand ({self.correction})", "W/L/T", "sig"]
        title = (f"vs baseline {self.baseline}: paired t-test and randomization test "
                 f"({self.correction} correction across systems per metric; sig: both p < {self.alpha})")
        return title + "\n" + render_table(headers, rows, max_width=60,
                                           right=headers[2:8])

    def to_dict(self) -> dict[str, Any]:
        """``{label: {metric: {mean_diff, t_p, rand_p, t_p_adjusted, rand_p_adjusted, wins, losses, ties, n}}}``."""
        fields = ("baseline_mean", "other_mean", "mean_diff", "t_statistic", "t_p", "rand_p", "t_p_adjusted",
                  "rand_p_adjusted", "wins", "losses", "ties", "n")
        return {label: {metric: {f: getattr(c, f) for f in fields} for metric, c in per_metric.items()}
                for label, per_metric in self.results.items()}

    def __str__(self) -> str:
        return self.table()


def _jsonable(value: Any) -> Any:
    """``value`` with anything JSON cannot hold shown as its repr (parameters are mostly plain)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def _write_json(path: Path, data: Any) -> None:
    # write then rename, like the run files, so a reader never sees half a manifest
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _nan_to_one(p: float | None) -> float:
    return 1.0 if p is None or math.isnan(p) else p


def _p(p: float | None) -> str:
    if p is None or math.isnan(p):
        return "-"
    return f"{p:.2e}" if p < 1e-3 else f"{p:.4f}"


@attrs.frozen(eq=False)
class Evaluation:
    """The outcome of :func:`evaluate`: one :class:`SystemResult` per recipe and setting.

    ``systems`` keeps the order of evaluation (the baseline first when it was
    added); index by label (``evaluation["hybrid[rrf_k=10]"]``).
    ``stage_cache`` is the cache the runs shared; its ``executions`` counter
    says how often each stage (by name) actually ran.
    """

    dataset: str
    split: str
    metrics: tuple[str, ...]
    depth: int
    qrels: dict[str, dict[str, int]] = attrs.field(repr=False)
    systems: tuple[SystemResult, ...]
    baseline: str | None = None
    corpus: CorpusSource | None = None
    stage_cache: StageCache | None = attrs.field(default=None, repr=False)
    #: sweep settings that cannot differ, evaluated once: (label kept, labels merged, parameters without effect)
    merged: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = ()

    # -- access --------------------------------------------------------------

    @property
    def labels(self) -> list[str]:
        """The systems' labels, in evaluation order."""
        return [s.label for s in self.systems]

    def __getitem__(self, label: str) -> SystemResult:
        for system in self.systems:
            if system.label == label:
                return system
        raise KeyError(f"no system labelled {label!r}; labels: {', '.join(self.labels)}")

    def __iter__(self) -> Iterator[SystemResult]:
        return iter(self.systems)

    def __len__(self) -> int:
        return len(self.systems)

    @property
    def n_queries(self) -> int:
        """Number of queries evaluated (every judged query of the split, or the chosen subset)."""
        return len(self.qrels)

    @property
    def runs(self) -> dict[str, dict[str, dict[str, float]]]:
        """``{label: run}``."""
        return {s.label: s.run for s in self.systems}

    def to_dict(self) -> dict[str, dict[str, float]]:
        """``{label: {metric: mean}}``."""
        return {s.label: dict(s.means) for s in self.systems}

    def summary(self) -> dict[str, Any]:
        """What ``irflow eval --json`` prints: the setting (dataset, split, queries, depth) and the means.

        ``systems`` is ``to_dict()``; ``params`` the recipe parameters each
        system ran with beyond its defaults (the depth's ``k`` and
        ``fetch_k`` among them), so the figures can be reproduced.
        """
        return {
            "dataset": self.dataset,
            "split": self.split,
            "queries": self.n_queries,
            "depth": self.depth,
            "metrics": list(self.metrics),
            "systems": self.to_dict(),
            "params": {s.label: _jsonable(s.params) for s in self.systems},
        }

    # -- reports -------------------------------------------------------------

    def best(self, metric: str) -> list[str]:
        """The label(s) with the highest mean of ``metric`` (all of them on a tie)."""
        metric = str(parse_metrics(metric)[0])
        if metric not in self.metrics:
            raise EvaluationError(f"metric {metric!r} was not evaluated; metrics: {', '.join(self.metrics)}")
        top = max(s.means[metric] for s in self.systems)
        # means of equal per-query values summed by fsum are exactly equal; a tolerance marks float ties too
        return [s.label for s in self.systems if s.means[metric] >= top - 1e-12]

    def table(self, *, digits: int = 4, mark_best: bool = True) -> str:
        """The systems side by side, one column per metric, the best of each column marked ``*``.

        A legend under the table says what ``*`` means (the highest mean,
        not a significant difference); a lone system is not marked.  Sweep
        settings merged because they cannot differ are listed below it.
        """
        mark = mark_best and len(self.systems) > 1
        best = {m: set(self.best(m)) for m in self.metrics} if mark else {}
        rows = []
        for system in self.systems:
            row: list[Any] = [system.label]
            for metric in self.metrics:
                star = "*" if system.label in best.get(metric, ()) else " " if mark else ""
                row.append(f"{system.means[metric]:.{digits}f}{star}")
            rows.append(row)
        headers = ["system", *self.metrics]
        lines = [render_table(headers, rows, max_width=60, right=list(self.metrics))]
        if mark:
            lines.append("* the highest mean in its column (ties: each marked); not a significance test — "
                         "compare against a baseline (irflow eval --baseline) for paired tests")
        for kept, labels, unused in self.merged:
            lines.append(f"{kept} stands for {', '.join(labels)}: {', '.join(unused)} cannot change the result "
                         f"there, so they were evaluated once")
        return "\n".join(lines)

    def compare(
        self,
        baseline: str | None = None,
        *,
        metrics: Sequence[str] | None = None,
        correction: str = "holm",
        n_permutations: int = DEFAULT_PERMUTATIONS,
        seed: int = 0,
        alpha: float = 0.05,
    ) -> Comparisons:
        """Every other system against ``baseline`` (a label; default: the evaluation's baseline).

        Paired over the evaluated queries (a query a system found nothing for
        scores 0, so every system covers the same queries); the p-values of
        each test are corrected across the systems compared, per metric.
        """
        base_label = baseline if baseline is not None else self.baseline
        if base_label is None:
            raise EvaluationError(f"compare() needs a baseline: one of the labels {', '.join(self.labels)} "
                                  "(or evaluate(..., baseline=...))")
        base = self[base_label]
        if correction not in CORRECTIONS:
            raise EvaluationError(f"unknown correction {correction!r}; valid corrections are {list(CORRECTIONS)}")
        chosen = [str(m) for m in parse_metrics(metrics)] if metrics is not None else list(self.metrics)
        missing = [m for m in chosen if m not in self.metrics]
        if missing:
            raise EvaluationError(f"metrics {missing} were not evaluated; metrics: {', '.join(self.metrics)}")
        others = [s for s in self.systems if s.label != base_label]
        results: dict[str, dict[str, Comparison]] = {s.label: {} for s in others}
        for metric in chosen:
            found = compare_many(base.per_query[metric], {s.label: s.per_query[metric] for s in others},
                                 correction=correction, n_permutations=n_permutations, seed=seed)  # type: ignore[arg-type]
            for label, comparison in found.items():
                results[label][metric] = comparison
        return Comparisons(base_label, tuple(chosen), results, correction, alpha)

    def write_runs(self, directory: str | os.PathLike[str], *, tag: str | None = None) -> dict[str, Path]:
        """Write each system's run as a TREC run file ``<directory>/<label>.run``; returns {label: path}.

        Characters other than letters, digits and ``._=,-`` in a label become
        ``_`` in the file name and the run tag (``hybrid[rrf_k=10]`` ->
        ``hybrid_rrf_k=10_.run``); the tag is the label unless ``tag`` is given.
        ``runs.json`` beside them records how they were made: ``summary()``
        plus each label's file (a TREC run file has no room for a header).
        """
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        written: dict[str, Path] = {}
        used: set[str] = set()
        for system in self.systems:
            stem = _FILE_UNSAFE.sub("_", system.label) or "run"
            candidate, n = stem, 1
            while candidate in used:  # two labels that differ only in unsafe characters
                n += 1
                candidate = f"{stem}-{n}"
            used.add(candidate)
            path = root / f"{candidate}.run"
            write_trec_run(path, system.run, tag=tag or candidate)
            written[system.label] = path
        manifest = {**self.summary(), "files": {label: path.name for label, path in written.items()}}
        _write_json(root / "runs.json", manifest)
        return written

    def __str__(self) -> str:
        return self.table()


# --------------------------------------------------------------------------
# planning: which recipes, with which parameters


@attrs.frozen
class _Plan:
    label: str
    recipe: Recipe
    params: dict[str, Any]


def _recipe_params(recipe: Recipe) -> set[str]:
    return set(recipe.params) | set(recipe.derived)


def _named_recipes(recipes: Any) -> list[tuple[str | None, Recipe]]:
    """``[(label or None, Recipe)]`` from one recipe, a sequence, or a mapping label -> recipe."""
    if isinstance(recipes, Mapping):
        return [(str(label), load_recipe(r)) for label, r in recipes.items()]
    if isinstance(recipes, (str, os.PathLike, Recipe)):
        recipes = [recipes]
    out = [(None, load_recipe(r)) for r in recipes]
    if not out:
        raise EvaluationError("no recipe to evaluate; name at least one (a built-in name such as 'lexical', or a file)")
    return out


def _unique(label: str, taken: set[str]) -> str:
    if label not in taken:
        return label
    n = 2
    while f"{label}#{n}" in taken:
        n += 1
    return f"{label}#{n}"


def _check_known(what: str, names: Iterable[str], recipes: Sequence[Recipe]) -> None:
    unknown = [n for n in names if not any(n in _recipe_params(r) for r in recipes)]
    if unknown:
        listing = "; ".join(f"{r.name}: {', '.join(sorted(_recipe_params(r)))}" for r in recipes)
        raise EvaluationError(f"{what} {unknown} {'is' if len(unknown) == 1 else 'are'} not a parameter of any "
                              f"recipe evaluated ({listing})")


def _depth_params(recipe: Recipe, given: Mapping[str, Any], depth: int, per_document: bool) -> dict[str, Any]:
    """The depth-related parameters a run needs unless the caller set them (see the module docstring)."""
    known = _recipe_params(recipe)
    out: dict[str, Any] = {}
    if "k" in known and "k" not in given:
        out["k"] = depth
    if per_document and "fetch_k" in known and "fetch_k" not in given:
        out["fetch_k"] = given.get("k", depth)
    return out


def _system_plans(label: str, recipe: Recipe, params: Mapping[str, Any], settings: list[dict[str, Any]],
                  depth: int, per_document: bool,
                  merged: list[tuple[str, tuple[str, ...], tuple[str, ...]]] | None = None) -> list[_Plan]:
    """One plan per distinct setting of the parameters this recipe has.

    Settings whose runs compute the same thing (:func:`irflow.evaluation.sweep.run_signature`:
    ``rrf_k`` under a blend fusion, a fusion when one channel is off) are
    evaluated once, labelled by the parameters that matter; ``merged``
    receives ``(label kept, labels merged, parameters without effect)``.
    """
    known = _recipe_params(recipe)
    given = {k: v for k, v in params.items() if k in known}
    if isinstance(given.get("k"), int) and given["k"] < depth:
        warnings.warn(f"{label}: k={given['k']} ranks fewer documents than the metrics need ({depth}); "
                      "metrics with a larger cutoff see a truncated ranking", stacklevel=4)
    seen: set[Any] = set()
    groups: list[list[dict[str, Any]]] = []
    runs: list[dict[str, Any]] = []
    signatures: list[Any] = []
    for setting in settings:
        # a recipe sweeps only the parameters it has; the others would repeat one system
        mine = {k: v for k, v in setting.items() if k in known}
        # type-exact: a setting {"x": 1} must not hide {"x": True}, which validation may refuse
        if cache_key(mine) in seen:
            continue
        seen.add(cache_key(mine))
        run_params = {**given, **mine}
        full = {**_depth_params(recipe, run_params, depth, per_document), **run_params}
        signature = run_signature(recipe, full) if len(settings) > 1 else None
        if signature is not None and signature in signatures:
            groups[signatures.index(signature)].append(mine)
            continue
        signatures.append(signature)
        groups.append([mine])
        runs.append(full)
    plans: list[_Plan] = []
    for group, full in zip(groups, runs):
        if len(group) == 1:
            plans.append(_Plan(setting_label(label, group[0]), recipe, full))
            continue
        unused = tuple(k for k in group[0] if any(g.get(k) != group[0][k] for g in group[1:]))
        kept = setting_label(label, {k: v for k, v in group[0].items() if k not in unused})
        plans.append(_Plan(kept, recipe, full))
        if merged is not None:
            merged.append((kept, tuple(setting_label(label, g) for g in group), unused))
    return plans


def _plan(recipes: Any, params: Mapping[str, Any], sweep: Mapping[str, Sequence[Any]] | None,
          baseline: Any, depth: int, per_document: bool,
          merged: list[tuple[str, tuple[str, ...], tuple[str, ...]]] | None = None) -> tuple[list[_Plan], str | None]:
    """The systems to evaluate, in order (an added baseline first), and the baseline's label."""
    named = _named_recipes(recipes)
    settings = expand_sweep(sweep)
    plans: list[_Plan] = []
    taken: set[str] = set()
    for label, recipe in named:
        label = _unique(label or recipe.name, taken)
        taken.add(label)
        plans.extend(_system_plans(label, recipe, params, settings, depth, per_document, merged))
    everything = [r for _, r in named]
    base_label: str | None = None
    if baseline is not None:
        labels = [p.label for p in plans]
        if isinstance(baseline, str) and baseline in labels:
            base_label = baseline
        else:
            # another recipe (or one evaluated here only in sweep settings): run it once with its defaults
            base_recipe = load_recipe(baseline)
            base_label = _unique(base_recipe.name, set(labels))
            everything.append(base_recipe)
            plans.insert(0, _system_plans(base_label, base_recipe, params, [{}], depth, per_document)[0])
    _check_known("parameter", params, everything)
    _check_known("swept parameter", list(sweep or {}), everything)
    return plans, base_label


# --------------------------------------------------------------------------
# running


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
    return chosen


def _system(label: str, recipe: str, params: Mapping[str, Any], run: dict[str, dict[str, float]], qrels: Qrels,
            metrics: tuple[Metric, ...], seconds: float) -> SystemResult:
    # missing="zero": a judged query without results scores 0, so systems stay paired query by query
    table = per_query(run, qrels, metrics, missing="zero")
    means = {name: math.fsum(values.values()) / len(values) for name, values in table.items()}
    return SystemResult(label, recipe, dict(params), means, table, run, seconds)


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
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise EvaluationError(f"batch_size must be a positive integer, got {batch_size!r}")
    parsed = parse_metrics(metrics)
    the_depth = ranking_depth(parsed, depth)
    collection = dataset if isinstance(dataset, Collection) else load_beir(dataset, split)
    per_document = title_mode != "separate"
    merged: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []
    plans, base_label = _plan(recipes, dict(params or {}), sweep, baseline, the_depth, per_document, merged)
    chosen = _select_queries(collection, queries)
    qids = list(chosen)
    qrels = {q: dict(collection.qrels[q]) for q in qids}

    corpus, source = corpus_for(collection, embedder=embedder, analyzer=analyzer, title_mode=title_mode,
                                batch_size=batch_size, progress=progress, cache_dir=cache_dir, use_cache=use_cache)
    if stage_cache is None:
        # LRU bound: every stage of every recipe once, so the first-stage outputs of the current batch
        # (touched by every setting) stay while older settings' and batches' outputs are dropped
        stage_cache = StageCache(maxsize=sum(len(p.recipe.stages) for p in plans) + len(plans))
    builder = _RunBuilder(corpus)
    runs: list[dict[str, dict[str, float]]] = [{} for _ in plans]
    seconds = [0.0] * len(plans)

    bar = None
    if progress:
        from tqdm.auto import tqdm  # only when asked: a bar is for interactive use

        bar = tqdm(total=len(qids) * len(plans), desc=f"evaluating {collection.name}", unit="query")
    try:
        # batch-major: all systems on one batch before the next, so the cache only holds one batch
        for batch in _batches(qids, batch_size):
            texts = [chosen[q] for q in batch]
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

    systems = tuple(_system(plan.label, plan.recipe.name, plan.params, runs[i], qrels, parsed, seconds[i])
                    for i, plan in enumerate(plans))
    return Evaluation(collection.name, collection.split, tuple(str(m) for m in parsed), the_depth, qrels, systems,
                      base_label, source, stage_cache, merged=tuple(merged))


def evaluate_runs(
    runs: Mapping[str, Run],
    qrels: Qrels,
    *,
    metrics: str | Iterable[str | Metric] = DEFAULT_METRICS,
    dataset: str = "runs",
    split: str = "test",
    baseline: str | None = None,
) -> Evaluation:
    """Measure existing runs (e.g. read with :func:`irflow.evaluation.datasets.read_trec_run`) against qrels.

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
