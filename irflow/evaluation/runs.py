"""Runs as columns: each batch's rankings measured as they come, kept only when asked, 12 bytes an entry.

An evaluation at trec_eval's depth of 1000 ranks 1000 documents per query:
20,000 queries make 20M (query, document) entries per system.  Held as a
dict per query (document id -> Python float) that was some 120 bytes an
entry — 2.4 GB per system — although the metrics need each ranking only
once.  So :func:`irflow.evaluation.evaluate.evaluate` measures every batch
of rankings as soon as the recipe returns it (:class:`BatchScorer`: the
per-query values, which is all the tables and tests need) and drops it,
unless the runs are wanted (``keep_runs``: ``irflow eval --runs``, the
Python API's default).  Kept runs are columns (:class:`ColumnarRun`): per
system the query offsets, a document code (int32) and a score (float64) per
entry, the document ids interned once for the corpus (:class:`DocIds`).

The measured values are exactly :func:`irflow.evaluation.metrics.per_query`'s:
a batch is put in trec_eval's order with numpy (per query: score as float32
descending, ties by document id descending — the codes follow the ids'
byte order) and every query's grades go through the same measure functions.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from irflow.engine.batches import Candidates
from irflow.evaluation.metrics import EvaluationError, Metric, judged_grades, measure_ranking

__all__ = ["DocIds", "RankedBatch", "ranked_batch", "BatchScorer", "BatchOutcome", "run_batch", "RunProfile",
           "profile_of", "ColumnarRun", "run_bytes", "ENTRY_BYTES", "LARGE_RUNS_BYTES"]

#: Bytes a kept run holds per (query, document) entry: an int32 document code and a float64 score.
ENTRY_BYTES = 4 + 8
#: Kept runs this large (in memory or as TREC run files) are announced by a warning before the evaluation.
LARGE_RUNS_BYTES = 1 << 30


class DocIds:
    """A corpus' document (artifact) ids interned once: the sorted distinct ids, and each row's code.

    Codes follow numpy's order of the ids, the order of their UTF-8 bytes,
    which is the order trec_eval breaks score ties by (``strcmp``).
    """

    def __init__(self, artifact_ids: Any) -> None:
        names, codes = np.unique(np.asarray(artifact_ids, dtype=object).astype(str), return_inverse=True)
        self.names: np.ndarray = names
        self.row_codes: np.ndarray = codes.astype(np.int32).ravel()

    def __len__(self) -> int:
        return len(self.names)

    def codes_of(self, ids: Sequence[str]) -> np.ndarray:
        """The code of each id (int64), -1 for an id the corpus does not hold."""
        if not len(ids) or not len(self.names):
            return np.full(len(ids), -1, dtype=np.int64)
        wanted = np.asarray(ids, dtype=object).astype(str)
        at = np.minimum(np.searchsorted(self.names, wanted), len(self.names) - 1)
        return np.where(self.names[at] == wanted, at, -1).astype(np.int64)


@attrs.frozen(eq=False)
class RankedBatch:
    """One system's rankings of a batch of queries: query ``i``'s entries are ``offsets[i]:offsets[i + 1]``.

    In the recipe's order, one entry per document (its best-ranked occurrence).
    """

    offsets: np.ndarray  # int64, queries + 1
    docs: np.ndarray  # int32 codes of DocIds
    scores: np.ndarray  # float64


def _first_per_document(query: np.ndarray, code: np.ndarray, score: np.ndarray, n_queries: int,
                        n_names: int) -> RankedBatch:
    """The best-ranked entry per (query, document), grouped by query in the given order."""
    # entries are grouped by (sub)query and ranked: the first occurrence of a key is its best rank
    _, first = np.unique(query * n_names + code, return_index=True)
    keep = np.sort(first)
    keep = keep[np.argsort(query[keep], kind="stable")]
    offsets = np.searchsorted(query[keep], np.arange(n_queries + 1)).astype(np.int64)
    return RankedBatch(offsets, code[keep].astype(np.int32), score[keep].astype(np.float64))


def ranked_batch(result: Any, ids: DocIds, n_queries: int) -> RankedBatch:
    """A recipe result's rankings of ``n_queries`` queries as a :class:`RankedBatch`."""
    output = result.output()
    if isinstance(output, Candidates):
        query = output.origin_index.astype(np.int64)
        code = ids.row_codes[output.row].astype(np.int64)
        score = output.score
    else:  # a Hits output: SearchHits per query, ranked
        hits = result.hits
        query = np.repeat(np.arange(len(hits), dtype=np.int64), [len(h) for h in hits])
        flat = [hit for per_query in hits for hit in per_query]
        code = ids.codes_of([hit.artifact_id for hit in flat])
        score = np.fromiter((float(hit.score) for hit in flat), dtype=np.float64, count=len(flat))
        if (code < 0).any():  # cannot happen with hits of this corpus; said rather than mis-coded
            raise EvaluationError("a recipe returned a hit whose artifact id is not in the evaluated corpus")
    return _first_per_document(query, code, np.asarray(score, dtype=np.float64), n_queries, len(ids))


def _trec_order(query: np.ndarray, score32: np.ndarray, docs: np.ndarray, n_names: int) -> np.ndarray:
    """The entries in trec_eval's order: by query, score (float32) descending, ties by document id descending.

    A recipe's rankings are by score already (float64, so float32 too):
    then only runs of equal scores need reordering, by code (the codes
    follow the ids), in one stable sort of nearly sorted keys; anything else
    gets the full three-key sort.
    """
    if len(query) < 2:
        return np.arange(len(query))
    same_query = query[1:] == query[:-1]
    if (same_query & (score32[1:] > score32[:-1])).any():  # not by score: sort it all
        return np.lexsort((-docs.astype(np.int64), -score32, query))
    # a group per (query, score) run (-0.0 == 0.0: one run, as they are one score for trec_eval)
    group = np.concatenate([[0], np.cumsum(~(same_query & (score32[1:] == score32[:-1])))])
    return np.argsort(group * n_names + (n_names - 1 - docs.astype(np.int64)), kind="stable")


class BatchScorer:
    """Measures batches of rankings: per query and metric, the value :func:`~irflow.evaluation.metrics.per_query` gives."""

    def __init__(self, ids: DocIds, metrics: Sequence[Metric]) -> None:
        self.ids = ids
        self.metrics = tuple(metrics)

    def measure(self, batch: RankedBatch, qids: Sequence[str], judgements: Sequence[Mapping[str, int]]) -> np.ndarray:
        """Values (queries x metrics, float64) of ``batch``, query ``i`` judged by ``judgements[i]``."""
        counts = np.diff(batch.offsets)
        query = np.repeat(np.arange(len(qids), dtype=np.int64), counts)
        with np.errstate(over="ignore"):  # beyond float32's range is +-inf, as in trec_eval
            score32 = batch.scores.astype(np.float32)
        if np.isnan(score32).any():
            at = int(np.flatnonzero(np.isnan(score32))[0])
            raise EvaluationError(f"document {str(self.ids.names[batch.docs[at]])!r} of query {qids[query[at]]!r} "
                                  "has a NaN score; a run's scores must be numbers")
        order = _trec_order(query, score32, batch.docs, len(self.ids))
        judged = [judged_grades(qid, j) for qid, j in zip(qids, judgements)]
        ranked = self._grades(batch, query, judgements, judged)[order]
        values = np.zeros((len(qids), len(self.metrics)), dtype=np.float64)
        for i, grades in enumerate(judged):
            lo, hi = int(batch.offsets[i]), int(batch.offsets[i + 1])
            values[i] = measure_ranking(ranked[lo:hi], grades, self.metrics)
        return values

    def _grades(self, batch: RankedBatch, query: np.ndarray, judgements: Sequence[Mapping[str, int]],
                judged: Sequence[np.ndarray]) -> np.ndarray:
        """The grade of every entry (int64; unjudged 0), looked up by (query, document code) in one search."""
        codes = self.ids.codes_of([doc for j in judgements for doc in j])
        known = codes >= 0  # a judged document absent from the corpus is never retrieved
        query_of = np.repeat(np.arange(len(judgements), dtype=np.int64), [len(j) for j in judgements])
        keys = (query_of * len(self.ids) + codes)[known]
        grades = (np.concatenate(judged) if judged else np.zeros(0, np.int64))[known]
        out = np.zeros(len(batch.docs), dtype=np.int64)
        if not len(keys):
            return out
        by_key = np.argsort(keys)
        keys, grades = keys[by_key], grades[by_key]
        wanted = query * len(self.ids) + batch.docs
        at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
        found = keys[at] == wanted
        out[found] = grades[at[found]]
        return out


@attrs.frozen(eq=False)
class BatchOutcome:
    """One system's run of one batch, as the evaluation keeps it.

    ``values``: per query and metric; ``ranked``: the rankings when the runs
    are kept, else None; ``seconds``: the recipe's run and the reading of its
    rankings.  Always kept, whatever ``keep_runs`` (a few bytes per query):
    ``digest``, of the rankings (documents and scores, per query), so systems
    whose runs are the same can be told; ``lengths``, documents ranked per
    query; ``scale``, what the output's scores are (``"rrf"``, ``"blend"``,
    ``"cosine"``...; None for a hit-list output).
    """

    values: np.ndarray
    ranked: RankedBatch | None
    seconds: float
    digest: bytes
    lengths: np.ndarray
    scale: str | None


def ranking_digest(ranked: RankedBatch) -> bytes:
    """A digest of a batch's rankings: per query its documents (codes) and scores, in order."""
    h = hashlib.blake2b(digest_size=16)
    for column in (np.diff(ranked.offsets).astype("<i8"), ranked.docs.astype("<i4"), ranked.scores.astype("<f8")):
        h.update(np.ascontiguousarray(column).tobytes())
    return h.digest()


def _scale(result: Any) -> str | None:
    output = result.output()
    return str(output.scale) if isinstance(output, Candidates) else None


def run_batch(plans: Sequence[Any], corpus: Any, texts: list[str], qids: Sequence[str],
              judgements: Sequence[Mapping[str, int]], scorer: BatchScorer, cache: Any,
              keep_runs: bool) -> list[BatchOutcome]:
    """Every plan on one batch: a :class:`BatchOutcome` per plan (the rankings only if ``keep_runs``).

    The one step of an evaluation, in this process or in a Ray actor
    (:mod:`irflow.evaluation.on_ray`); the seconds are the recipe's run and
    the reading of its rankings, not their measuring.
    """
    out: list[BatchOutcome] = []
    for plan in plans:
        start = time.perf_counter()
        result = plan.recipe.run(corpus, texts, cache=cache, **plan.params)
        ranked = ranked_batch(result, scorer.ids, len(qids))
        seconds = time.perf_counter() - start
        out.append(BatchOutcome(scorer.measure(ranked, qids, judgements), ranked if keep_runs else None, seconds,
                                ranking_digest(ranked), np.diff(ranked.offsets), _scale(result)))
    return out


@attrs.frozen(eq=False)
class RunProfile:
    """What a system's run was like, kept when its documents are not: what :class:`Evaluation` reports on it.

    ``digest`` (hex) is equal for two systems exactly when their rankings
    are (the same documents with the same scores for every query);
    ``lengths`` the documents ranked per query, in query order; ``scale``
    the score scale of the output (several, joined by ``+``, when batches
    differed), None when unknown.
    """

    digest: str
    lengths: np.ndarray = attrs.field(repr=False)
    scale: str | None = None

    def below(self, depth: int) -> tuple[int, int | None]:
        """(queries ranking fewer than ``depth`` documents, the most documents any of them ranks)."""
        short = self.lengths[self.lengths < depth]
        return int(short.size), (int(short.max()) if short.size else None)


def profile_of(outcomes: Sequence[BatchOutcome]) -> RunProfile:
    """A system's :class:`RunProfile` from its batches' outcomes, in query order."""
    h = hashlib.blake2b(digest_size=16)
    for outcome in outcomes:
        h.update(outcome.digest)
    lengths = np.concatenate([o.lengths for o in outcomes]).astype(np.int64) if outcomes else np.zeros(0, np.int64)
    # an empty batch (every query found nothing) has no scale to say
    scales = list(dict.fromkeys(o.scale for o in outcomes if o.scale is not None and o.scale != "none"))
    return RunProfile(h.hexdigest(), lengths, "+".join(scales) if scales else None)


class ColumnarRun(Mapping[str, Mapping[str, float]]):
    """A kept run: query id -> {document id: score}, held as columns (see the module docstring).

    Reads like the dict it replaces — ``run[qid]`` is a new dict in the
    recipe's order, ``dict(run)`` a plain dict of dicts (for pytrec_eval) —
    while holding :data:`ENTRY_BYTES` per entry: the batches as they were
    measured (``qids`` are their queries, in order), never copied into one
    array (that would hold every entry twice for a moment).
    """

    def __init__(self, qids: Sequence[str], batches: Sequence[RankedBatch], names: np.ndarray) -> None:
        self.qids = list(qids)
        self.batches = list(batches)
        self.names = names
        sizes = [len(b.offsets) - 1 for b in self.batches]
        if sum(sizes) != len(self.qids):
            raise ValueError(f"the batches hold {sum(sizes)} queries, but {len(self.qids)} query ids were given")
        self._starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)  # first query of each batch
        self._index = {qid: i for i, qid in enumerate(self.qids)}

    def _span(self, i: int) -> tuple[RankedBatch, int, int]:
        batch = int(np.searchsorted(self._starts, i, side="right")) - 1
        j = i - int(self._starts[batch])
        offsets = self.batches[batch].offsets
        return self.batches[batch], int(offsets[j]), int(offsets[j + 1])

    def __getitem__(self, qid: str) -> dict[str, float]:
        batch, lo, hi = self._span(self._index[qid])
        return dict(zip(self.names[batch.docs[lo:hi]].tolist(), batch.scores[lo:hi].tolist()))

    def __iter__(self) -> Iterator[str]:
        return iter(self.qids)

    def __len__(self) -> int:
        return len(self.qids)

    @property
    def entries(self) -> int:
        """(query, document) entries held."""
        return sum(len(b.docs) for b in self.batches)

    @property
    def nbytes(self) -> int:
        """Bytes of the columns (the interned ids are shared by every run of an evaluation)."""
        return sum(int(b.offsets.nbytes + b.docs.nbytes + b.scores.nbytes) for b in self.batches)

    def by_score(self) -> Iterator[tuple[str, list[str], list[float]]]:
        """Per query: (id, document ids, scores), by score descending, equal scores in the recipe's order."""
        for i, qid in enumerate(self.qids):
            batch, lo, hi = self._span(i)
            scores = batch.scores[lo:hi]
            picked = np.argsort(-scores, kind="stable")  # ties keep the recipe's order, like sorted()
            yield qid, self.names[batch.docs[lo:hi][picked]].tolist(), scores[picked].tolist()


def run_bytes(n_queries: int, depth: int, n_documents: int, n_systems: int) -> int:
    """Memory of the kept runs of an evaluation, at most (every ranking ``min(depth, n_documents)`` deep)."""
    return n_systems * (n_queries * min(depth, n_documents) * ENTRY_BYTES + (n_queries + 1) * 8)
