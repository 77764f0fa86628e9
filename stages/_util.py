"""Helpers shared by the built-in first-stage kinds (not public API)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from irflow.engine import Candidates, QueryBatch, Scale


def unique_texts(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Distinct texts in first-seen order and, per text, the index of its distinct text.

    Embedding / tokenizing each distinct text once matters when a formulated
    batch repeats the original query.  A loop over the queries of a batch
    (not over candidates): small, and dict-based dedup keeps first-seen order.
    """
    if len(texts) == 1:  # one query (every search())
        return [texts[0]], np.zeros(1, dtype=np.int64)
    index: dict[str, int] = {}
    inverse = np.fromiter((index.setdefault(t, len(index)) for t in texts), dtype=np.int64, count=len(texts))
    return list(index), inverse


def spread(topk: Any, inverse: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(query_index, row, score)`` for the whole batch from a TopK over its distinct texts.

    Query ``i`` of the batch gets the hits of distinct text ``inverse[i]``:
    one gather with an index built from per-query offsets, no Python loop.
    Grouped by query and ranked, as the TopK is.
    """
    qi, rows, scores = topk.query_index, topk.row, topk.score
    n_unique = int(topk.n_queries)
    if inverse.size == n_unique and (n_unique == 1 or np.array_equal(inverse, np.arange(n_unique))):
        return qi, rows, scores
    counts = np.bincount(qi, minlength=n_unique)
    offsets = np.concatenate(([0], np.cumsum(counts)))
    lengths = counts[inverse]
    starts = offsets[inverse]
    total = int(lengths.sum())
    # position j of query i maps to starts[i] + j: repeat the per-query shift, add a running index
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    index = shift + np.arange(total)
    return np.repeat(np.arange(inverse.size), lengths), rows[index], scores[index]


def channel(queries: QueryBatch, topk: Any, inverse: np.ndarray, scale: Scale, name: str) -> Candidates:
    """A first-stage channel's Candidates from its kernel's TopK over the distinct texts (see :func:`spread`),
    with the ``<name>.score`` / ``<name>.rank`` provenance."""
    return Candidates.already_ranked(queries, *spread(topk, inverse), scale).with_channel_columns(name)


def empty_channel(queries: QueryBatch, scale: Scale, name: str) -> Candidates:
    """An empty channel output that still has the channel's provenance columns."""
    return Candidates.empty(queries, scale).with_channel_columns(name)


def several_texts(queries: QueryBatch) -> np.ndarray:
    """Per text of the batch: True when its original query was formulated into several texts.

    Those texts are the seed's sub-searches: each runs the whole path on its
    own (its own fetch depth, its own cut to ``k``) before their union merges
    back into the original query.  ``bool (len(queries),)``.
    """
    if len(queries) == 1:  # one text (every search() without formulate) is one original's only text
        return np.zeros(1, dtype=bool)
    counts = np.bincount(queries.origin, minlength=queries.n_original)
    return counts[queries.origin] > 1


def cut_per_text(candidates: Candidates, fetch_k: int, subquery_fetch_k: int | None) -> Candidates:
    """Each text's first ``fetch_k`` candidates — ``subquery_fetch_k`` for sub-query texts when given."""
    if subquery_fetch_k is None or len(candidates.queries) == 1:  # one text is no sub-query
        return candidates.cut(fetch_k)
    several = several_texts(candidates.queries)
    if not several.any():
        return candidates.cut(fetch_k)
    limit = np.where(several, subquery_fetch_k, fetch_k)[candidates.query_index]
    keep = candidates.rank <= limit
    return candidates if bool(keep.all()) else candidates.select(keep)


def fetch_depth(queries: QueryBatch, fetch_k: int, subquery_fetch_k: int | None) -> int:
    """How deep a channel must fetch so that :func:`cut_per_text` can give every text its depth."""
    if subquery_fetch_k is None or len(queries) == 1 or not several_texts(queries).any():
        return fetch_k
    return max(fetch_k, subquery_fetch_k)


def fetch_depths(queries: QueryBatch, fetch_k: int, subquery_fetch_k: int | None) -> np.ndarray:
    """Each query's depth in a first ranking: ``fetch_k``, or ``subquery_fetch_k`` for a query of several texts."""
    depths = np.full(len(queries), fetch_k, dtype=np.int64)
    if subquery_fetch_k is not None:
        depths[several_texts(queries)] = subquery_fetch_k
    return depths


def first_depths(corpus: Any, fetch_k: int, subquery_fetch_k: int | None, deepen_to: int | None,
                 lean: bool) -> tuple[int, int | None]:
    """The depths a first stage fetches: (a query's one text, each text of a query formulated into several).

    ``(fetch_k, subquery_fetch_k)``, except with ``lean`` (nothing after the
    stage reads its depth: no reranker, weights or boost) and ``deepen_to``
    set (a per-artifact search over this one channel): on a corpus whose
    live records are each an artifact of their own
    (``corpus.one_record_per_artifact()``, where the corpus has it) the
    first ``deepen_to`` rows of a ranking already are ``deepen_to``
    artifacts, all the collapse keeps of any deeper fetch, so a query's one
    text fetches ``deepen_to``: the same hits, with up to 5x fewer rows
    ranked and carried.  Texts of a query formulated into several keep their
    depth: their union is merged before the cut, so each one's depth counts.
    """
    if not lean or deepen_to is None or deepen_to >= fetch_k:
        return fetch_k, subquery_fetch_k
    ask = getattr(corpus, "one_record_per_artifact", None)
    if ask is None or not ask():
        return fetch_k, subquery_fetch_k
    return deepen_to, fetch_k if subquery_fetch_k is None else subquery_fetch_k


def held_artifacts(corpus: Any, candidates: Candidates, texts: np.ndarray, within: int | None = None) -> np.ndarray:
    """Per text of the batch, how many distinct artifacts its first ``within`` candidates hold (None: all).

    0 outside ``texts`` (a bool mask).  One sort of (text, artifact code) keys for a batch; a set
    for one text.
    """
    keep = texts[candidates.query_index]
    if within is not None:
        keep &= candidates.rank <= within
    entries = np.flatnonzero(keep)
    if not entries.size:
        return np.zeros(candidates.n_queries, dtype=np.int64)
    if candidates.n_queries == 1:  # one text (every search()): a set of its artifact ids
        return np.array([len(set(corpus.artifact_ids_of(candidates.row[entries]).tolist()))], dtype=np.int64)
    codes = row_artifact_codes(corpus, candidates.row[entries])
    base = int(codes.max()) + 1
    keys = candidates.query_index[entries].astype(np.int64) * base + codes
    keys.sort()
    distinct = np.ones(keys.size, dtype=bool)  # the first of each distinct (text, artifact)
    distinct[1:] = keys[1:] != keys[:-1]
    return np.bincount(keys[distinct] // base, minlength=candidates.n_queries)


def short_texts(corpus: Any, candidates: Candidates, texts: np.ndarray, artifacts: int) -> np.ndarray:
    """Which of ``texts`` hold fewer than ``artifacts`` distinct artifacts among their candidates.

    The first ``2 * artifacts`` candidates of a text usually hold them already (they are short only
    when its artifacts repeat more than that), so those are counted first, and the whole list only
    for the texts they do not settle: a batch ranked 5 000 deep for ``k = 1000`` counts 2 000 per text.
    """
    settled = held_artifacts(corpus, candidates, texts, within=2 * artifacts) >= artifacts
    open_ = texts & ~settled
    if not open_.any():
        return open_
    return open_ & (held_artifacts(corpus, candidates, open_) < artifacts)


def deepen(corpus: Any, found: Candidates, inverse: np.ndarray, fetch: Callable[[np.ndarray, int], Any],
           fetch_k: int, artifacts: int, name: str) -> Candidates:
    """``found`` with every text that holds fewer than ``artifacts`` artifacts fetched deeper.

    A text whose ``fetch_k`` candidates came back full but hold fewer than
    ``artifacts`` distinct artifacts asks the kernel again — its distinct
    text alone, ``fetch(texts, depth)`` giving the TopK of those distinct
    texts — at twice the depth, until its candidates hold them or the
    kernel returns fewer than asked (nothing more matches).  The kernels'
    rankings are exact and a deeper one starts with the shallower one, and
    an artifact first appears in the ranking at its best surface, so the
    collapse over the deepened candidates is the exact per-artifact top
    ``artifacts`` of the channel; a text that got fewer than ``fetch_k``
    holds every match already.  Texts of a query formulated into several
    (the seed's sub-searches, which keep records, not artifacts) are left as
    they are.  A loop over the deepened texts only, never over candidates.
    """
    counts = found.counts()
    eligible = counts >= fetch_k
    if not eligible.any():  # every text holds every match: nothing deeper to find (a small corpus)
        return found
    eligible &= ~several_texts(found.queries)
    short = short_texts(corpus, found, eligible, artifacts)
    if not short.any():  # the common case: fetch_k candidates hold k artifacts
        return found
    deeper: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    pending, depth = np.unique(inverse[short]), fetch_k
    while pending.size:
        depth *= 2
        topk = fetch(pending, depth)
        starts = np.searchsorted(topk.query_index, np.arange(pending.size + 1))  # the TopK is grouped by text
        still = []
        for j, text in enumerate(pending.tolist()):
            rows, scores = topk.row[starts[j]:starts[j + 1]], topk.score[starts[j]:starts[j + 1]]
            deeper[text] = (rows, scores)
            if rows.size == depth and len(set(corpus.artifact_ids_of(rows).tolist())) < artifacts:
                still.append(text)
        pending = np.asarray(still, dtype=np.int64)
    # the other texts keep their entries; each deepened text takes its distinct text's deeper ranking
    kept = ~short[found.query_index]
    parts = [(found.query_index[kept], found.row[kept], found.score[kept])]
    for i in np.flatnonzero(short).tolist():
        rows, scores = deeper[int(inverse[i])]
        parts.append((np.full(rows.size, i, dtype=np.int32), rows, scores))
    qi, rows, scores = (np.concatenate(column) for column in zip(*parts))
    order = np.argsort(qi, kind="stable")  # texts in order, each text's entries in their ranked order
    return Candidates.already_ranked(found.queries, qi[order], rows[order], scores[order],
                                     found.scale).with_channel_columns(name)


def artifact_codes(artifacts: np.ndarray, hash_of: Callable[[object], int] = hash) -> np.ndarray:
    """Group codes of ids (an object array): equal ids get equal codes, different ids different ones.

    Grouped by each id's hash — Python keeps it in every str, and int64 keys sort fast where
    an object array compares ids pair by pair (``np.unique`` over a batch's 12,800 artifact
    ids: ~12 ms, this ~3.5 ms) — then checked exactly: if two different ids share a hash, the
    ids themselves are grouped.  Codes mean nothing across calls.

    >>> codes = artifact_codes(np.array(["b", "a", "b"], dtype=object))
    >>> bool(codes[0] == codes[2] != codes[1])
    True
    """
    hashes = np.fromiter(map(hash_of, artifacts.tolist()), dtype=np.int64, count=artifacts.size)
    _, codes = np.unique(hashes, return_inverse=True)
    codes = codes.reshape(-1).astype(np.int64)
    order = np.argsort(codes, kind="stable")
    grouped, ids = codes[order], artifacts[order]
    same_code = grouped[1:] == grouped[:-1]
    if not bool((ids[1:][same_code] == ids[:-1][same_code]).all()):  # a hash two ids share: group the ids
        _, codes = np.unique(artifacts, return_inverse=True)
        codes = codes.reshape(-1).astype(np.int64)
    return codes


def row_artifact_codes(corpus: Any, rows: np.ndarray) -> np.ndarray:
    """Group codes of the artifacts of ``rows``: rows of one artifact get one code, of different ones different.

    A batch's candidates repeat rows (queries share answers), so the
    artifact ids are read and grouped once per distinct row; when every
    distinct row is an artifact of its own (a corpus of one record per
    artifact, or candidates that hold one surface of each) the distinct rows
    are the groups, and no id is hashed twice or compared.  Codes mean
    nothing across calls.
    """
    distinct, inverse = _distinct_rows(rows)
    ids = corpus.artifact_ids_of(distinct)
    if len(set(ids.tolist())) == distinct.size:
        return inverse
    codes: np.ndarray = artifact_codes(ids)[inverse]
    return codes


def _distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(rows, return_inverse=True)``, by a table up to the largest row when it is small (no sort)."""
    n_rows = int(rows.max()) + 1 if rows.size else 0
    if rows.size * 8 < n_rows or not rows.size:
        distinct, inverse = np.unique(rows, return_inverse=True)
        return distinct, inverse.reshape(-1).astype(np.int64)
    seen = np.zeros(n_rows, dtype=bool)
    seen[rows] = True
    distinct = np.flatnonzero(seen)
    position = np.empty(n_rows, dtype=np.int64)
    position[distinct] = np.arange(distinct.size)
    return distinct, position[rows]


def distinct_pairs(origin: np.ndarray, codes: np.ndarray) -> bool:
    """Whether every (origin, code) pair occurs once (no two candidates of a query share a group)."""
    if origin.size < 2:
        return True
    keys = origin.astype(np.int64) * (int(codes.max()) + 1) + codes
    keys.sort()
    return not bool((keys[1:] == keys[:-1]).any())


def callable_or_name(instance: Any, attribute: Any, value: Any) -> None:
    """attrs validator: None, a callable, or the name of an :mod:`irflow.registry` entry.

    Names are resolved when the stage runs (the application may register
    them after the recipe is loaded); a recipe file can only hold names.
    """
    if value is None or callable(value) or (isinstance(value, str) and value):
        return
    raise ValueError(f"must be a callable or the name of an irflow.registry entry (a non-empty string), "
                     f"got {value!r} ({type(value).__name__})")
