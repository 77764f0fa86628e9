"""What an evaluation returns: per-system means, per-query values and runs; tables, significance, run files.

:class:`Evaluation` is the value :func:`irflow.evaluation.evaluate.evaluate`
and :func:`~irflow.evaluation.evaluate.evaluate_runs` return: a table with the
best value per metric marked, paired significance tests against a baseline
(:meth:`Evaluation.compare`), and the runs as TREC run files.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from irflow.engine.executor import StageCache
from irflow.evaluation.cache import CorpusSource
from irflow.evaluation.trec import write_trec_run
from irflow.evaluation.metrics import EvaluationError, Run, parse_metrics
from irflow.evaluation.report import evaluation_page, evaluation_view
from irflow.evaluation.runs import RunProfile
from irflow.evaluation.significance import CORRECTIONS, DEFAULT_PERMUTATIONS, Comparison, compare_many
from irflow.store.protocol import CorpusSettings
from irflow.util.corpusmarks import refuse_inside_corpus
from irflow.util.fileio import write_atomic
from irflow.util.table import render_table

__all__ = ["SystemResult", "Evaluation", "Comparisons"]

_FILE_UNSAFE = re.compile(r"[^A-Za-z0-9._=,-]+")
#: How the table names the scale of a fusion.
_FUSIONS = {"rrf": "RRF fusion", "blend": "blend fusion"}


@attrs.frozen(eq=False)
class SystemResult:
    """One evaluated system: a recipe with one setting of its parameters.

    ``params`` are the recipe parameters the runs used beyond the recipe's
    defaults (the evaluation's depth, ``params`` and the sweep setting);
    ``means`` maps metric -> mean over the evaluated queries; ``per_query``
    maps metric -> query id -> value; ``run`` maps query id -> document id
    -> score (a read-only mapping held as columns, see
    :class:`irflow.evaluation.runs.ColumnarRun`; ``dict(run)`` is a plain
    dict), or is None when the evaluation did not keep the runs
    (``keep_runs=False``); ``seconds`` is the wall time of its recipe runs
    (a sweep's first setting pays for the stages the later ones reuse);
    ``profile`` what its run was like whether or not it was kept (a digest,
    the documents ranked per query, the scale of its scores:
    :class:`irflow.evaluation.runs.RunProfile`).
    """

    label: str
    recipe: str
    params: dict[str, Any]
    means: dict[str, float]
    per_query: dict[str, dict[str, float]]
    run: Run | None = attrs.field(repr=False)
    seconds: float = 0.0
    profile: RunProfile | None = attrs.field(default=None, repr=False)


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
        headers, rows = self.rows()
        return self.title + "\n" + render_table(headers, rows, max_width=60, right=headers[2:8])

    @property
    def title(self) -> str:
        """The line above the table: the baseline, the tests, the correction, what ``sig`` means."""
        return (f"vs baseline {self.baseline}: paired t-test and randomization test "
                f"({self.correction} correction across systems per metric; sig: both p < {self.alpha})")

    def rows(self) -> tuple[list[str], list[list[str]]]:
        """The table's headers and rows, as text (what :meth:`table` prints and a report shows)."""
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
        return headers, rows

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


def _write_json(path: Path, data: Any, what: str) -> None:
    # atomic like the run files (a reader never sees half a manifest), and never inside a corpus
    write_atomic(path, json.dumps(data, indent=2) + "\n", what)


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
    says how often each stage (by name) actually ran.  ``settings`` names the
    embedder and analyzer of the corpus the systems ran on (None for runs
    read from files).  Besides the figures, it says what it compared:
    systems whose runs are identical (:meth:`identical`), what each
    system's scores are (:meth:`scales`: the fusion of a hybrid) and how
    deep its rankings really are (:meth:`real_depth`).
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
    settings: CorpusSettings | None = None

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
    def runs(self) -> dict[str, Run]:
        """``{label: run}``; an EvaluationError when the runs were not kept (``keep_runs=False``)."""
        return {s.label: self._run_of(s) for s in self.systems}

    def _run_of(self, system: SystemResult) -> Run:
        if system.run is None:
            raise EvaluationError("the runs of this evaluation were not kept, only its per-query figures: evaluate "
                                  "with keep_runs=True (irflow eval --runs DIR) to write or read them")
        return system.run

    def to_dict(self) -> dict[str, dict[str, float]]:
        """``{label: {metric: mean}}``."""
        return {s.label: dict(s.means) for s in self.systems}

    # -- what was compared -----------------------------------------------------

    def identical(self) -> dict[str, str]:
        """``{label: earlier label}`` for each system whose run equals an earlier system's, document for
        document and score for score on every query (``search`` = ``dense`` in its default mode).

        Their figures are equal by construction: one system evaluated twice, not two that tie.
        """
        first: dict[str, str] = {}
        same: dict[str, str] = {}
        for system in self.systems:
            if system.profile is None:
                continue
            digest = system.profile.digest
            if digest in first:
                same[system.label] = first[digest]
            else:
                first[digest] = system.label
        return same

    def scales(self) -> dict[str, str | None]:
        """``{label: what its final scores are}``: ``"cosine"``, ``"bm25"``, a fusion (``"rrf"``, ``"blend"``),
        ``"rerank"``...; None when unknown (runs read from files)."""
        return {s.label: None if s.profile is None else s.profile.scale for s in self.systems}

    def real_depth(self) -> dict[str, dict[str, int | None]]:
        """``{label: {min, max, below_depth, most_below_depth}}``: the documents each system ranked per query.

        ``below_depth`` counts the queries that got fewer than :attr:`depth`
        documents (BM25 ranks only the documents sharing a term with the
        query), ``most_below_depth`` is the deepest of those rankings.
        """
        out: dict[str, dict[str, int | None]] = {}
        for system in self.systems:
            lengths = None if system.profile is None else system.profile.lengths
            if lengths is None or not lengths.size:
                continue
            below, most = system.profile.below(self.depth)  # type: ignore[union-attr]
            out[system.label] = {"min": int(lengths.min()), "max": int(lengths.max()), "below_depth": below,
                                 "most_below_depth": most}
        return out

    def summary(self) -> dict[str, Any]:
        """What ``irflow eval --json`` prints: the setting (dataset, split, queries, depth) and the means.

        ``systems`` is ``to_dict()``; ``params`` the recipe parameters each
        system ran with beyond its defaults (the depth's ``k`` and
        ``fetch_k`` among them), so the figures can be reproduced;
        ``embedder`` and ``analyzer`` what the corpus was built with;
        ``identical``, ``scores`` and ``real_depth`` what :meth:`identical`,
        :meth:`scales` and :meth:`real_depth` say.
        """
        return {
            "dataset": self.dataset,
            "split": self.split,
            "queries": self.n_queries,
            "depth": self.depth,
            "metrics": list(self.metrics),
            "embedder": None if self.settings is None else self.settings.embedder,
            "analyzer": None if self.settings is None else self.settings.analyzer,
            "systems": self.to_dict(),
            "params": {s.label: _jsonable(s.params) for s in self.systems},
            "identical": self.identical(),
            "scores": self.scales(),
            "real_depth": self.real_depth(),
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
        headers, rows, notes = self.rows(digits=digits, mark_best=mark_best)
        lines = [render_table(headers, rows, max_width=60, right=list(self.metrics)), *notes]
        if self.settings is not None:
            lines.append(f"corpus: {self.settings}")
        return "\n".join(lines)

    def rows(self, *, digits: int = 4, mark_best: bool = True) -> tuple[list[str], list[list[str]], list[str]]:
        """The table's headers, rows (as text) and the lines under it: what :meth:`table` prints and a report shows."""
        mark = mark_best and len(self.systems) > 1
        best = {m: set(self.best(m)) for m in self.metrics} if mark else {}
        scales, notes = self._scale_column(), self._notes()
        rows = []
        for system in self.systems:
            row: list[str] = [system.label]
            for metric in self.metrics:
                star = "*" if system.label in best.get(metric, ()) else " " if mark else ""
                row.append(f"{system.means[metric]:.{digits}f}{star}")
            if scales:
                row.append(scales.get(system.label) or "")
            if notes:
                row.append(notes.get(system.label, ""))
            rows.append(row)
        headers = ["system", *self.metrics, *(["scores"] if scales else []), *(["notes"] if notes else [])]
        lines = []
        if mark:
            lines.append("* the highest mean in its column (ties: each marked); not a significance test — "
                         "compare against a baseline (irflow eval --baseline) for paired tests")
        if scales:
            lines.append("scores: what each system ranks by (a hybrid's fusion: the blend keeps cosine's magnitude "
                         "and adds saturated BM25, RRF adds reciprocal ranks)")
        if any(note.startswith("=") for note in notes.values()):
            lines.append("= X: the same run as system X (the same documents and scores for every query), "
                         "so the same figures — not two systems that tie")
        for kept, labels, unused in self.merged:
            lines.append(f"{kept} stands for {', '.join(labels)}: {', '.join(unused)} cannot change the result "
                         f"there, so they were evaluated once")
        return headers, rows, lines

    def _scale_column(self) -> dict[str, str]:
        """What each system ranks by, when that tells systems apart: they differ, or one is a fusion."""
        scales = {label: scale for label, scale in self.scales().items() if scale is not None}
        fused = any(part in _FUSIONS for scale in scales.values() for part in scale.split("+"))
        if not scales or (len(set(scales.values())) < 2 and not fused):
            return {}
        return {label: " + ".join(_FUSIONS.get(part, part) for part in scale.split("+"))
                for label, scale in scales.items()}

    def _notes(self) -> dict[str, str]:
        """Per system: "= X" when its run is system X's, else its real depth when some queries got fewer documents."""
        notes = {label: f"= {other}" for label, other in self.identical().items()}
        for label, depth in self.real_depth().items():
            if label in notes or not depth["below_depth"]:
                continue
            queries = (f"all {self.n_queries} queries" if depth["below_depth"] == self.n_queries
                       else f"{depth['below_depth']} quer{'y' if depth['below_depth'] == 1 else 'ies'}")
            notes[label] = f"depth {self.depth} (≤ {depth['most_below_depth']} for {queries})"
        return notes

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
        A folder that is or lies inside an irflow corpus is refused
        (:class:`~irflow.errors.OutputError`) before anything is written.
        """
        runs = self.runs  # before anything is written: an error if the runs were not kept
        root = Path(directory)
        refuse_inside_corpus(root, "run folder")  # before the folder is made: nothing inside a corpus changes
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
            write_trec_run(path, runs[system.label], tag=tag or candidate)
            written[system.label] = path
        manifest = {**self.summary(), "files": {label: path.name for label, path in written.items()}}
        _write_json(root / "runs.json", manifest, "runs manifest")
        return written

    def to_html(self, path: str | os.PathLike[str] | None = None, *, collection: Any = None) -> str:
        """This evaluation as one self-contained HTML page (returned; written atomically to ``path`` when given).

        The metric table with the best marked and, against the baseline, the
        significance tests as :meth:`table` and :meth:`compare` print them; the
        per-query differences between systems as sorted charts; the worst and
        best queries with their hits; the settings (dataset, depth, embedder,
        analyzer).  ``collection`` (the :class:`~irflow.evaluation.datasets.Collection`
        evaluated) adds the query texts and document titles.
        """
        html = evaluation_page(self, collection=collection)
        if path is not None:
            write_atomic(path, html, "report")
        return html

    def _repr_html_(self) -> str:
        """A notebook's view: the metric table and, against the baseline, the significance table."""
        return evaluation_view(self)

    def __str__(self) -> str:
        return self.table()


# --------------------------------------------------------------------------
# planning: which recipes, with which parameters
