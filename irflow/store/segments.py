"""The corpus protocol over several segments: exactly what one segment of the same live records answers.

A corpus updated in place is an ordered sequence of segments (see
:mod:`irflow.store.segment`); its rows are the segments' rows one after the
other (deleted rows keep their place until a merge), which is the order a
fresh build of its live records would give them.  A :class:`SegmentsView`
answers every call by asking each segment's view and combining, as a
sharded corpus does over its shards (:mod:`irflow.shard.driver`, whose
exactness the same arguments prove):

- **candidate masks**: each segment computes its part (its metadata columns
  are kept by the segment, so a delete does not rebuild them); the filter and
  the surfaces are checked once, against the live records of every segment,
  with one corpus's errors and warnings; the parts are joined;
- **BM25**: the collection statistics are the live records' (``"corpus"``)
  or the candidates' (``"candidates"``): each segment's share
  (``partial_stats``: row count, total length, each query token's df over
  its statistics rows, cached with them) is added up (integers: exact);
  Okapi's mean idf, when a negative idf needs it, comes from the segments'
  document frequencies added term by term over one vocabulary (the
  histogram of one segment of them), cached per row set; each segment
  then scores with those statistics — a row's score is the bits one
  segment gives it — and the tops merge by (score desc, global row asc);
- **dense**: one int8 scan over every segment's codes, its floor carried
  from segment to segment, and the candidates scored exactly and ranked
  once (:mod:`irflow.kernels.dense_parts`); where that does not apply (no
  compiled scan, a large batch, a zero query, a selective filter's gathered
  rows), each segment's exact top ``k``, merged the same way;
- **rows**: lookups split by segment (:class:`~irflow.store.chained_store.SegmentedStore`);
- **kinds**: the live records' kinds in order of first appearance over the
  segments in order; a segment's codes map onto them.

A segment whose rows are all deleted is still a segment (its rows keep
their place) and answers nothing.
"""

from __future__ import annotations

import collections
import hashlib
import threading
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from irflow.kernels import bm25 as _bm25
from irflow.kernels.bm25.parts import PartsScorer
from irflow.kernels.columns import MetadataColumns
from irflow.kernels.dense_parts import parts_topk
from irflow.kernels.filters import CompiledFilter, compile_filter
from irflow.kernels.rowmap import RowMap, merge_topk
from irflow.kernels.topk import TopK
from irflow.store.artifact_facts import artifact_digests, distinct_live
from irflow.store.chained_store import SegmentedStore
from irflow.store.masks import MASK_CACHE_SIZE, _surface_kinds, check_surfaces, warn_unknown_field
from irflow.store.protocol import CorpusSettings, Siblings
from irflow.store.records import Record, SearchHit
from irflow.store.segment import CorpusContext, SegmentView
from irflow.util.cachekey import UnkeyableError, cache_key

__all__ = ["SegmentsView"]


def _readonly(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.setflags(write=False)
    return view


class _Statistics:
    """One row set's BM25 statistics in one state: counts, each token's df as first asked, the Okapi mean.

    What a segment is handed is a :class:`~irflow.kernels.bm25.BM25Stats`
    over a read-only view of the growing df table and a key that stays the
    same while its numbers do (a new one once the mean is known): the
    segments keep their scorers for it, and a token is looked up once.
    """

    def __init__(self, n_docs: int, total_length: int) -> None:
        self.n_docs, self.total_length = n_docs, total_length
        self.df: dict[str, int] = {}
        self.view = MappingProxyType(self.df)
        self.mean: float | None = None
        self.plain = _bm25.BM25Stats(n_docs=n_docs, total_length=total_length, df=self.view)
        self.key: Any = object()  # by identity: alive as long as the scorers keyed by it
        self._lock = threading.Lock()

    def learn(self, df: Mapping[str, int]) -> None:
        with self._lock:
            self.df.update(df)

    def set_mean(self, mean: float) -> None:
        with self._lock:
            if self.mean is None:
                self.mean = mean
                self.plain = _bm25.BM25Stats(n_docs=self.n_docs, total_length=self.total_length, df=self.view,
                                             mean_okapi_idf=mean)
                self.key = object()

    def current(self) -> tuple[_bm25.BM25Stats, Any]:
        with self._lock:
            return self.plain, self.key


def _k_best(best: np.ndarray, top: TopK, k: int) -> np.ndarray:
    """Each query's ``k`` best of ``best`` (n, k, descending) and of a segment's ``top``, descending."""
    found = np.full_like(best, -np.inf)
    rank = np.arange(top.query_index.size) - np.searchsorted(top.query_index, top.query_index)
    found[top.query_index, rank] = top.score
    both = np.concatenate([best, found], axis=1)
    both.sort(axis=1)
    out: np.ndarray = both[:, :-k - 1:-1]
    return out


class SegmentsView:
    """The corpus protocol over several segments' views (see the module docstring); never changes."""

    def __init__(self, parts: Sequence[SegmentView], context: CorpusContext, version: int) -> None:
        self.parts = tuple(parts)
        self.context = context
        self.version = version
        self.rowmap = RowMap.of_sizes([p.n_rows for p in self.parts])
        self._store: SegmentedStore | None = None
        self._kinds: tuple[tuple[str, ...], list[np.ndarray]] | None = None
        self._columns: MetadataColumns | None = None
        self._codes: np.ndarray | None = None
        # (filter, surfaces) key -> the joined mask; id(mask) -> (mask, each segment's part, its statistics key)
        self._masks: collections.OrderedDict[Any, np.ndarray] = collections.OrderedDict()
        self._mask_parts: dict[int, tuple[np.ndarray, list[np.ndarray], Any]] = {}
        self._statistics: collections.OrderedDict[Any, _Statistics] = collections.OrderedDict()
        self._scorer_lists: collections.OrderedDict[Any, tuple[tuple[Any, ...], PartsScorer]] = \
            collections.OrderedDict()
        self._unique: bool | None = None
        self._lock = threading.Lock()

    # -- what the corpus is ----------------------------------------------------------------

    @property
    def name(self) -> str | None:
        return self.context.name

    @property
    def n_rows(self) -> int:
        return self.rowmap.n_rows

    def __len__(self) -> int:
        return sum(p.n_live for p in self.parts)

    def one_record_per_artifact(self) -> bool:
        """Whether no two live records of any segments share an artifact (once per view; see artifact_facts)."""
        if self._unique is None:
            self._unique = distinct_live([(artifact_digests(p.segment), p.live_mask()) for p in self.parts])
        return self._unique

    @property
    def store(self) -> SegmentedStore:
        """The records of every segment as one store (global rows)."""
        if self._store is None:
            self._store = SegmentedStore([p.store for p in self.parts], name=self.context.name)
        return self._store

    @property
    def dim(self) -> int | None:
        return self.parts[0].dim

    @property
    def vectors(self) -> np.ndarray | None:
        """Every row's vector (a copy: the segments' matrices one after the other); None when lexical-only."""
        if self.dim is None:
            return None
        return _readonly(np.concatenate([p.require_vectors() for p in self.parts]))

    @property
    def columns(self) -> MetadataColumns:
        """Columnar metadata of every row (made on first use over the segments' metadata)."""
        if self._columns is None:
            self._columns = MetadataColumns(self.store.metadata)
        return self._columns

    def _kind_map(self) -> tuple[tuple[str, ...], list[np.ndarray]]:
        """The live kinds in order of first appearance, and each segment's code -> global code (-1 stays -1)."""
        if self._kinds is None:
            kinds = tuple(dict.fromkeys(k for p in self.parts for k in p.kinds))
            index = {kind: code for code, kind in enumerate(kinds)}
            # a trailing -1: a segment's code -1 (a deleted row of a vanished kind) indexes it
            maps = [np.array([index[k] for k in p.kinds] + [-1], dtype=np.int32) for p in self.parts]
            self._kinds = (kinds, maps)
        return self._kinds

    @property
    def kinds(self) -> tuple[str, ...]:
        """Surface kinds of the live records in order of first appearance (a fresh build of them has these)."""
        return self._kind_map()[0]

    @property
    def kind_codes(self) -> np.ndarray:
        """Each row's kind code, indexing :attr:`kinds` (made once per state: every search reads its candidates')."""
        if self._codes is None:
            _, maps = self._kind_map()
            self._codes = _readonly(np.concatenate([maps[i][p.kind_codes] for i, p in enumerate(self.parts)]))
        return self._codes

    # -- rows ------------------------------------------------------------------------------

    def _groups(self, rows: Any) -> tuple[np.ndarray, list[tuple[int, np.ndarray, np.ndarray]]]:
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        return rows, self.store._groups(rows)

    def record_ids_of(self, rows: Any) -> np.ndarray:
        return self.store.record_ids_of(rows)

    def artifact_ids_of(self, rows: Any) -> np.ndarray:
        return self.store.artifact_ids_of(rows)

    def kind_codes_of(self, rows: Any) -> np.ndarray:
        found: np.ndarray = self.kind_codes[np.asarray(rows, dtype=np.int64).reshape(-1)]
        return found

    def surface_indices_of(self, rows: Any) -> np.ndarray:
        return self.store.surface_indices_of(rows)

    def records(self, rows: Any) -> list[Record]:
        return self.store.records(rows)

    def record(self, row: int) -> Record:
        return self.store.record(row)

    def row_of(self, record_id: str) -> int:
        return self.store.row_of(record_id)

    def hits(self, rows: Any, scores: Any) -> list[SearchHit]:
        """One SearchHit per row with its score; each segment's rows looked up at once."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        if rows.size != scores.size:
            raise ValueError(f"hits needs one score per row, got {rows.size} rows and {scores.size} scores")
        if scores.size and np.isnan(scores).any():
            raise ValueError("a hit score must not be NaN")
        name, store = self.context.name, self.store
        kinds = store.kinds
        artifact_ids, record_ids, codes, surface_indices, texts, metadata = store.hit_columns(rows)
        make = SearchHit._stored
        return [make(artifact_ids[i], kinds[codes[i]], score, texts[i], metadata[i], name, surface_indices[i],
                     record_ids[i])
                for i, score in enumerate(scores.tolist())]

    def sibling_rows(self, artifact_ids: Sequence[str]) -> Siblings:
        return self.store.sibling_rows(artifact_ids)

    # -- candidates ------------------------------------------------------------------------

    @property
    def settings(self) -> CorpusSettings:
        """The embedder and analyzer this corpus ranks with, by name (the corpus protocol; loads no model)."""
        return self.context.settings(self.dim is not None)

    def field_paths(self) -> list[str]:
        """The dotted field paths of every segment's live records' metadata, sorted."""
        return sorted(set().union(*(p.field_paths() for p in self.parts)))

    def candidate_mask(self, filter: "Mapping[str, Any] | CompiledFilter | None" = None,
                       surfaces: Iterable[str] | str | None = None) -> np.ndarray:
        """Live rows passing *filter* whose kind is in *surfaces*: each segment's part, joined (one corpus's checks)."""
        kinds = _surface_kinds(surfaces)
        compiled = compile_filter(filter)
        try:
            key: Any = (compiled.canonical, None if kinds is None else frozenset(cache_key(k) for k in kinds))
        except UnkeyableError:
            key = None
        with self._lock:
            cached = None if key is None else self._masks.get(key)
            if cached is not None:
                self._masks.move_to_end(key)
                return cached
        if kinds is not None:  # the same rule and words as one segment
            check_surfaces(self.kinds, self.context.label(), tuple(dict.fromkeys(kinds)), self.context.warned)
        if compiled.fields:
            self._check_fields(compiled.fields)
        parts = [p.candidate_mask(compiled, kinds, checked=False) for p in self.parts]
        mask = _readonly(np.concatenate(parts))
        with self._lock:
            if key is not None:
                self._masks[key] = mask
                self._mask_parts[id(mask)] = (mask, parts, ("filter", key))
                while len(self._masks) > MASK_CACHE_SIZE:
                    _, old = self._masks.popitem(last=False)
                    self._mask_parts.pop(id(old), None)
        return mask

    def _check_fields(self, paths: Sequence[str]) -> None:
        """Warn, once per path, about a filter path no live record of any segment has (as one segment does)."""
        warned = self.context.warned
        todo = [path for path in paths if ("field", path) not in warned]
        for part in self.parts:  # many paths: one walk of each segment's metadata indexes every field
            part._masks.columns.prepare(todo)
        for path in todo:
            if any(p._masks.has_field(path) for p in self.parts):
                continue
            if warned.first("field", path):
                known = self.field_paths()
                warn_unknown_field(self.context.label(), path, known, stacklevel=5)

    def _parts_of(self, mask: np.ndarray | None) -> tuple[list[np.ndarray | None], Any]:
        """Each segment's part of *mask* (its own cached mask when made here), and the row set's key."""
        if mask is None:
            return [None] * len(self.parts), ("all",)
        known = self._mask_parts.get(id(mask))
        if known is not None and known[0] is mask:
            return list(known[1]), known[2]
        array = np.asarray(mask)
        if array.dtype != np.bool_ or array.shape != (self.n_rows,):
            raise ValueError(f"a candidate mask must be a bool array of shape ({self.n_rows},), got "
                             f"{array.dtype} {array.shape}")
        key = ("rows", hashlib.blake2b(np.packbits(array).tobytes(), digest_size=16).hexdigest())
        return list(self.rowmap.split(array)), key

    # -- queries ---------------------------------------------------------------------------

    def tokenize_queries(self, texts: Sequence[str] | str) -> list[list[str]]:
        return self.context.analyzer.tokenize_many([texts] if isinstance(texts, str) else texts)

    def embed_queries(self, texts: Sequence[str] | str) -> np.ndarray:
        return self.context.embed_queries(texts, self.dim)

    def dense_topk(self, query_vectors: np.ndarray, mask: np.ndarray | None, fetch_k: int) -> TopK:
        """Exact cosine top *fetch_k*: each segment's top, merged by (score desc, global row asc)."""
        if self.dim is None:
            raise self.context.lexical_only_error()
        queries = self.context.check_queries(query_vectors, self.dim)
        masks, _ = self._parts_of(mask)
        n, k = queries.shape[0], int(fetch_k)
        scanned = self._dense_scanned(queries, masks, k)
        if scanned is not None:
            return scanned
        best = np.full((n, max(k, 1)), -np.inf)  # each query's k best scores so far: the next segment's floor
        tops = []
        for part, m in zip(self.parts, masks):
            top = part.dense_checked(part.require_vectors(), queries, m, k, corpus_rows=self.n_rows,
                                     least=best[:, -1])
            tops.append((top.query_index, top.row, top.score))
            if top.row.size and k > 0:
                best = _k_best(best, top, k)
        return merge_topk(tops, self.rowmap, n, k)

    def _dense_scanned(self, queries: np.ndarray, masks: Sequence[np.ndarray | None], k: int) -> TopK | None:
        """Every segment in one int8 scan carried from segment to segment (None: not here; part by part then)."""
        if k <= 0 or not queries.shape[0]:
            return None
        parts = []
        for part, m, first in zip(self.parts, masks, self.rowmap.first.tolist()):
            one = part.dense_part(m, first, self.n_rows)
            if one is None:
                return None
            parts.append(one)
        return parts_topk(parts, queries, k)

    def bm25_topk(self, query_tokens: Sequence[Sequence[str]], mask: np.ndarray | None, fetch_k: int,
                  params: "_bm25.BM25Params | Mapping[str, Any] | None" = None,
                  stats: "_bm25.BM25Stats | None" = None) -> TopK:
        """BM25 top *fetch_k* with the live records' (or the candidates') statistics, each segment's top merged."""
        if not isinstance(params, _bm25.BM25Params):
            params = _bm25.BM25Params.from_mapping(params)
        tokens = [[str(t) for t in query] for query in query_tokens]
        masks, key = self._parts_of(mask)
        stats_key = None
        if stats is None:
            stats, stats_key = self.bm25_stats(tokens, masks, params, ("all",) if params.stats == "corpus" else key)
        return self._ranked(tokens, masks, int(fetch_k), params, stats, stats_key)

    def _ranked(self, tokens: list[list[str]], masks: Sequence[np.ndarray | None], k: int,
                params: _bm25.BM25Params, stats: _bm25.BM25Stats, stats_key: Any) -> TopK:
        """Each query's top ``k`` over every segment at once (:class:`irflow.kernels.bm25.parts.PartsScorer`)."""
        n = len(tokens)
        if k <= 0 or not n:
            return TopK.empty(n)
        scorer = self._scorer(masks, params, stats, stats_key)
        batched = scorer.top_many(tokens, k, self.n_rows) if n > 1 and scorer.parts else None
        if batched is not None:  # the compiled kernel: the batch part by part (chunks on --threads threads)
            rows, scores, counts = batched
            offsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
            return TopK._trusted(np.repeat(np.arange(n, dtype=np.int32), counts), rows, scores, n, offsets)
        if n == 1:  # one query (each search's): its columns as they are
            rows, scores = scorer.top(tokens[0], k, self.n_rows)
            return TopK._trusted(np.zeros(rows.size, dtype=np.int32), rows, scores, 1,
                                 np.array([0, rows.size], dtype=np.int64))
        found = [scorer.top(query, k, self.n_rows) for query in tokens]
        return TopK.from_parts([r for r, _ in found], [s for _, s in found])

    def _scorer(self, masks: Sequence[np.ndarray | None], params: _bm25.BM25Params, stats: _bm25.BM25Stats,
                stats_key: Any) -> PartsScorer:
        """The segments' scorers for these statistics and candidates, as one.

        Kept per key when every part of the candidate mask is one its segment
        made (held here, so their identities stay theirs): a query then asks
        for one object, not one scorer per segment.
        """
        keep = stats_key is not None and all(m is None or part._masks.known(m)[0] for part, m in zip(self.parts, masks))
        key = (stats_key, params, tuple(id(m) for m in masks)) if keep else None
        with self._lock:
            found = None if key is None else self._scorer_lists.get(key)
        if found is not None and all(a is b for a, b in zip(found[0], masks)):
            return found[1]
        scorers = []
        for part, m in zip(self.parts, masks):
            effective = part.effective_mask(m)
            one = _bm25.bm25_scorer(part.postings, effective, params, stats, stats_key,
                                    lasting=part.is_live_mask(effective))
            scorers.append(one if one.usable else None)
        combined = PartsScorer(scorers, self.rowmap.first.tolist())
        if key is not None:
            with self._lock:
                self._scorer_lists[key] = (tuple(masks), combined)
                while len(self._scorer_lists) > MASK_CACHE_SIZE:
                    self._scorer_lists.popitem(last=False)
        return combined

    def bm25_stats(self, tokens: Sequence[Sequence[str]], masks: Sequence[np.ndarray | None],
                   params: _bm25.BM25Params, key: Any) -> tuple[_bm25.BM25Stats, Any]:
        """The statistics of the row set *key* (each segment's statistics rows), and the key they never change under.

        Kept per row set for this state: the counts once, each token's
        document frequency the first time a query holds it, Okapi's mean
        idf the first time a negative idf needs it.
        """
        with self._lock:
            kept = self._statistics.get(key)
            if kept is not None:
                self._statistics.move_to_end(key)
        if kept is not None and all(t in kept.df for query in tokens for t in query) and (
                kept.mean is not None or not any(kept.plain.needs_vocabulary(params, query) for query in tokens)):
            return kept.current()  # the common case: every token known, nothing to compute
        rows = [p.stats_rows(m, params.stats) for p, m in zip(self.parts, masks)]
        if kept is None:
            counts = [_bm25.partial_stats(p.postings, r, []) for p, r in zip(self.parts, rows)]
            kept = _Statistics(sum(c.n_docs for c in counts), sum(c.total_length for c in counts))
            with self._lock:
                self._statistics[key] = kept
                while len(self._statistics) > MASK_CACHE_SIZE:
                    self._statistics.popitem(last=False)
        new = sorted({t for query in tokens for t in query} - kept.df.keys())
        if new:
            parts = [_bm25.partial_stats(p.postings, r, new) for p, r in zip(self.parts, rows)]
            kept.learn(_bm25.combine_stats(parts).df)
        if kept.mean is None and any(kept.plain.needs_vocabulary(params, query) for query in tokens):
            parts = [_bm25.partial_stats(p.postings, r, [], vocabulary=True) for p, r in zip(self.parts, rows)]
            kept.set_mean(float(_bm25.combine_stats(parts).mean_okapi_idf or 0.0))
        return kept.current()

    def __repr__(self) -> str:
        live = len(self)
        rows = f"{self.n_rows}" if live == self.n_rows else f"{self.n_rows} ({live} live)"
        return (f"Corpus(name={self.name!r}, rows={rows}, segments={len(self.parts)}, kinds={self.kinds}, "
                f"embedder={self.context.embedder_label(self.dim is not None)!r}, "
                f"analyzer={self.context.analyzer.name!r})")
