"""A segment of a corpus, and one tombstone state of it: the corpus protocol over one set of rows.

A corpus is an ordered sequence of immutable *segments* (see
:mod:`irflow.store.corpus`).  A :class:`Segment` is what a whole corpus was
before corpora could change: a record store with the ledger of its own
records, BM25 postings and vectors (or none) over its local rows ``0 ..
n - 1``, plus what is derived from them once and kept (the metadata columns
filters read, the text digests updates look texts up by).  A fresh
``build()`` makes one segment.

A :class:`SegmentView` is a segment with one tombstone state — which of its
rows are deleted, which of those are off the ledger too — and answers the
corpus protocol over its rows exactly as a corpus of those records alone
would, caching what depends on the tombstones (candidate masks, a filter's
gathered vectors).  Updates never change a view: a delete makes a new view
of the same segment (its postings, columns and statistics caches shared).
A corpus of one segment *is* its view (every call delegates straight to
it); a corpus of several combines its views' answers
(:mod:`irflow.store.segments`).

What every state of one corpus shares lives in its :class:`CorpusContext`:
the name, the analyzer, the query embedder, the warnings already given.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from irflow.errors import EmbedderError
from irflow.kernels import bm25 as _bm25
from irflow.kernels import dense as _dense
from irflow.kernels import dense_kernel as _dense_kernel
from irflow.kernels import dense_parts as _dense_parts
from irflow.kernels.columns import MetadataColumns
from irflow.kernels.embedders import LazyEmbedder, check_digest, check_dimension
from irflow.kernels.filters import CompiledFilter
from irflow.kernels.postings import Postings
from irflow.kernels.text import Analyzer
from irflow.kernels.topk import TopK
from irflow.store.artifact_facts import artifact_digests, distinct_live
from irflow.store.gathered import GatheredVectors
from irflow.store.masks import CandidateMasks, Warned
from irflow.store.persist import EmbedderInfo
from irflow.store.protocol import CorpusSettings, Siblings
from irflow.store.record_store import CorpusStore
from irflow.store.records import Record, SearchHit
from irflow.store.vectors import VectorCheck

__all__ = ["CorpusContext", "Segment", "SegmentView"]


def _readonly(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.setflags(write=False)
    return view


class CorpusContext:
    """What every state of one corpus shares: its name, analyzer, query embedder, vectors' origin, warnings given.

    ``name`` may be set (a shard worker names its corpus after the sharded
    one); messages and hits read it at the time.
    """

    def __init__(self, *, name: str | None, analyzer: Analyzer, embedder: Any = None,
                 embedder_info: EmbedderInfo | None = None, path: Path | None = None) -> None:
        self.name = name
        self.analyzer = analyzer
        # What to resolve on first use: an Embedder, a spec string, a user callable/object, or None.
        self.query_embedder = LazyEmbedder(embedder)
        self.embedder_info = embedder_info
        self.path = path
        self.warned = Warned()  # ("field" | "surface", name): each warning once per corpus

    def with_embedder(self, embedder: Any) -> "CorpusContext":
        """The same context with another query embedder (and warnings of its own)."""
        return CorpusContext(name=self.name, analyzer=self.analyzer, embedder=embedder,
                             embedder_info=self.embedder_info, path=self.path)

    def label(self) -> str:
        return f"corpus {self.name!r}" if self.name else "this corpus"

    @property
    def embedder_spec(self) -> str | None:
        spec = self.query_embedder.spec
        if spec is not None:
            return spec
        return None if self.embedder_info is None else self.embedder_info.spec

    def embedder_label(self, has_vectors: bool) -> str:
        # Never resolves the embedder: repr must not load a model.
        if not has_vectors:
            return "none (lexical-only)"
        spec = self.embedder_spec
        if spec is not None:
            return spec
        if self.query_embedder.source is not None:
            return "custom"
        if self.embedder_info is not None and self.embedder_info.source == "embedded":
            return "custom (pass embedder= to open_corpus)"
        return "none (precomputed vectors)"

    def settings(self, has_vectors: bool) -> CorpusSettings:
        """The embedder and analyzer the corpus ranks with, by name (loads no model)."""
        return CorpusSettings(self.embedder_label(True) if has_vectors else "none", self.analyzer.name)

    def lexical_only_error(self) -> EmbedderError:
        return EmbedderError(
            f"{self.label()} is lexical-only (built with embedder=None): it has no vectors, so dense search "
            "is unavailable; use lexical search, or rebuild with an embedder (irflow.build(records) embeds with "
            "the model when the models extra is installed, else 'hash')"
        )

    def no_embedder_message(self) -> str:
        info = self.embedder_info
        if info is not None and info.source == "embedded":
            return (
                f"{self.label()} was built with a custom embedder (a callable or object, not a named spec), which "
                "cannot be restored from disk; pass it again: open_corpus(..., embedder=...)"
            )
        return (
            f"{self.label()} holds precomputed document vectors but has no query embedder; pass the embedder that "
            "made them: open_corpus(..., embedder=...), or corpus.with_embedder(...) for an in-memory corpus"
        )

    def embed_queries(self, texts: Sequence[str] | str, dim: int | None) -> np.ndarray:
        """Query vectors, float32 (q, dim) normalized, by the query embedder (checked against ``dim``)."""
        if dim is None:
            raise self.lexical_only_error()
        embedder = self.query_embedder.get()
        if embedder is None:
            raise EmbedderError(self.no_embedder_message())
        check_digest(embedder, None if self.embedder_info is None else self.embedder_info.digest, self.label())
        vectors = embedder.embed_queries([texts] if isinstance(texts, str) else list(texts))
        check_dimension(embedder.describe(), int(vectors.shape[1]), dim)
        return vectors

    def check_queries(self, query_vectors: np.ndarray, dim: int | None) -> np.ndarray:
        """Query vectors as the dense kernel takes them: float32 (q, dim), finite (EmbedderError naming the first bad one)."""
        queries = np.asarray(query_vectors, dtype=np.float32)
        if queries.ndim == 1:
            queries = queries[None, :]
        if queries.ndim != 2:
            raise EmbedderError(f"query vectors must be a (q, dim) array, got shape {queries.shape}")
        check_dimension("the query vectors", int(queries.shape[1]), dim)
        bad = np.flatnonzero(~np.isfinite(queries).all(axis=1))
        if bad.size:  # NaN scores every row -inf: the "top" rows would be arbitrary
            raise EmbedderError(f"query vector {int(bad[0])} holds NaN or infinite values ({bad.size} of "
                                f"{len(queries)} vectors); a query vector must be finite — check the embedder "
                                f"({self.embedder_label(True)}) or the vectors passed in")
        return queries


class Segment:
    """One immutable part of a corpus: records with their own ledger, postings and vectors over local rows.

    ``store`` holds no tombstones (a :class:`SegmentView` adds them);
    ``vectors`` read from disk are checked on first use (``vectors_check``).
    ``id`` names the segment (its files on disk start with it); ``source``
    says where its files are (None in memory).
    """

    def __init__(self, *, store: CorpusStore, postings: Postings, vectors: np.ndarray | None,
                 vectors_check: VectorCheck | None = None, id: str = "", source: Any = None) -> None:
        self.id = id
        self.store = store
        self.postings = postings
        self._vectors = None if vectors is None else _readonly(vectors)
        self.vectors_check = vectors_check
        self.source = source
        self._columns: MetadataColumns | None = None
        self._lock = threading.Lock()
        self.derived: dict[str, Any] = {}  # what updates derive once (text digests and their order), by name
        self.index = _dense_kernel.IndexSlot()  # the vectors' int8 codes, built on first use, for every view

    @property
    def n_rows(self) -> int:
        return self.store.n_rows

    @property
    def vectors(self) -> np.ndarray | None:
        """float32 (n_rows, dim), L2-normalized, read-only; checked on first use when read from disk."""
        if self._vectors is not None and self.vectors_check is not None:
            self.vectors_check(self._vectors)
        return self._vectors

    @property
    def raw_vectors(self) -> np.ndarray | None:
        """The vectors without their first-use check (their shape, for what does not read them)."""
        return self._vectors

    @property
    def dim(self) -> int | None:
        return None if self._vectors is None else int(self._vectors.shape[1])

    def columns(self) -> MetadataColumns:
        """The metadata columns filters read: built on first use, kept for every tombstone state."""
        if self._columns is None:
            with self._lock:
                if self._columns is None:
                    self._columns = MetadataColumns(self.store.metadata)
        return self._columns

    def __repr__(self) -> str:
        return f"Segment(id={self.id!r}, rows={self.n_rows})"


class SegmentView:
    """A segment with one tombstone state: the corpus protocol over its rows, as a corpus of them alone answers.

    ``deleted`` (local rows, ascending) are not live; ``unlisted`` (deleted
    too) are off the ledger.  ``version`` is the corpus version this view
    answers for when it is a whole corpus's view.
    """

    def __init__(self, segment: Segment, context: CorpusContext, *, deleted: np.ndarray | Sequence[int] = (),
                 unlisted: np.ndarray | Sequence[int] = (), version: int = 0,
                 store: CorpusStore | None = None) -> None:
        self.segment = segment
        self.context = context
        self.store = store if store is not None else segment.store.with_tombstones(deleted, unlisted)
        self.postings = segment.postings
        self.version = version
        self._gathered = GatheredVectors()
        self._masks = CandidateMasks(self.store, context.label, remember=segment.postings.remember_mask,
                                     forget=self._gathered.discard, columns=segment.columns,
                                     kinds=lambda: self.kinds, warned=context.warned)
        self._kinds: tuple[tuple[str, ...], np.ndarray | None] | None = None
        self._unique: bool | None = None

    # -- what the view is ----------------------------------------------------------------

    @property
    def name(self) -> str | None:
        return self.context.name

    @property
    def n_rows(self) -> int:
        return self.store.n_rows

    def __len__(self) -> int:
        return len(self.store)

    @property
    def n_live(self) -> int:
        """Live rows (counted once per view)."""
        return self._masks.live_facts()[0]

    @property
    def vectors(self) -> np.ndarray | None:
        return self.segment.vectors

    @property
    def dim(self) -> int | None:
        return self.segment.dim

    @property
    def columns(self) -> MetadataColumns:
        """Columnar metadata for filters (the segment's, built on first use)."""
        return self._masks.columns

    def _kind_map(self) -> tuple[tuple[str, ...], np.ndarray | None]:
        """The live records' kinds in order of first appearance, and the map from the store's codes (None: the same)."""
        if self._kinds is None:
            store = self.store
            kinds = store.kinds
            code_map = None
            if self.n_live != store.n_rows:
                live_codes = store.kind_codes[store.live]
                first = [int(np.argmax(live_codes == code)) if bool((live_codes == code).any()) else -1
                         for code in range(len(kinds))]
                order = sorted((f, code) for code, f in enumerate(first) if f >= 0)
                code_map = np.full(len(kinds), -1, dtype=np.int32)
                code_map[[code for _, code in order]] = np.arange(len(order), dtype=np.int32)
                if len(order) == len(kinds) and bool((code_map == np.arange(len(kinds))).all()):
                    code_map = None
                else:
                    kinds = tuple(kinds[code] for _, code in order)
            self._kinds = (kinds, code_map)
        return self._kinds

    @property
    def kinds(self) -> tuple[str, ...]:
        """Surface kinds of the live records in order of first appearance (a fresh build of them has these)."""
        return self._kind_map()[0]

    @property
    def kind_codes(self) -> np.ndarray:
        """Surface kind code per row, indexing :attr:`kinds` (-1: a deleted row of a kind no live record has)."""
        code_map = self._kind_map()[1]
        codes = self.store.kind_codes
        return codes if code_map is None else _readonly(code_map[codes])

    # -- rows ------------------------------------------------------------------------------

    def record_ids_of(self, rows: Any) -> np.ndarray:
        return self.store.record_ids_of(rows)

    def artifact_ids_of(self, rows: Any) -> np.ndarray:
        return self.store.artifact_ids_of(rows)

    def kind_codes_of(self, rows: Any) -> np.ndarray:
        codes = self.store.kind_codes_of(rows)
        code_map = self._kind_map()[1]
        return codes if code_map is None else code_map[codes]

    def surface_indices_of(self, rows: Any) -> np.ndarray:
        return self.store.surface_indices_of(rows)

    def records(self, rows: Any) -> list[Record]:
        return self.store.records(rows)

    def record(self, row: int) -> Record:
        return self.store.record(row)

    def row_of(self, record_id: str) -> int:
        return self.store.row_of(record_id)

    def hits(self, rows: Any, scores: Any) -> list[SearchHit]:
        """One SearchHit per row with its score (a Python float); ``source`` is the corpus name."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        if rows.size != scores.size:
            raise ValueError(f"hits needs one score per row, got {rows.size} rows and {scores.size} scores")
        if scores.size and np.isnan(scores).any():
            raise ValueError("a hit score must not be NaN")
        name, kinds = self.context.name, self.store.kinds
        artifact_ids, record_ids, codes, surface_indices, texts, metadata = self.store.hit_columns(rows)
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
        """The dotted field paths of the live records' metadata, sorted (a misspelled field's warning lists them)."""
        return self._masks.field_paths()

    def candidate_mask(self, filter: "Mapping[str, Any] | CompiledFilter | None" = None,
                       surfaces: Iterable[str] | str | None = None, *, checked: bool = True) -> np.ndarray:
        """Live rows passing *filter* whose kind is in *surfaces* (see :meth:`irflow.store.corpus.Corpus.candidate_mask`).

        ``checked=False``: the names are not checked here (a segment of a
        corpus of several: the corpus checks them over all its live records).
        """
        return self._masks.mask(filter, surfaces, checked=checked)

    def live_mask(self) -> np.ndarray | None:
        """The live rows, or None while none is deleted (known to the kernels: digested once)."""
        return self._masks.live_facts()[1]

    def one_record_per_artifact(self) -> bool:
        """Whether no two live records share an artifact (once per view; :mod:`irflow.store.artifact_facts`)."""
        if self._unique is None:
            self._unique = distinct_live([(artifact_digests(self.segment), self.live_mask())])
        return self._unique

    def is_live_mask(self, mask: np.ndarray | None) -> bool:
        """Whether *mask* (an :meth:`effective_mask`) is this view's live rows themselves: one every query without
        a filter shares, which the BM25 kernel takes as NaN norms at the deleted rows (made once)."""
        return mask is not None and mask is self._masks.live_facts()[1]

    def effective_mask(self, mask: np.ndarray | None) -> np.ndarray | None:
        """*mask* restricted to live rows (None while nothing is deleted: the kernels' fast path).

        A mask of ``candidate_mask`` that keeps every live row (no filter, or
        one every record passes) becomes None too, so ``search(mode="lexical")``
        without a filter takes the unmasked kernels; its masks are live-only
        already, so they are not ANDed again.  Both are known by identity:
        no pass over the rows per query.
        """
        _, live = self._masks.live_facts()
        if mask is None:
            return live
        known, all_live = self._masks.known(mask)
        if all_live:
            return live
        if known:
            return mask
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (self.n_rows,):
            raise ValueError(f"a candidate mask must be a bool array of shape ({self.n_rows},), got {mask.shape}")
        return mask if live is None else mask & live

    # -- queries ---------------------------------------------------------------------------

    def tokenize_queries(self, texts: Sequence[str] | str) -> list[list[str]]:
        """Query tokens, cut by the corpus analyzer (the one its postings were built with)."""
        return self.context.analyzer.tokenize_many([texts] if isinstance(texts, str) else texts)

    def embed_queries(self, texts: Sequence[str] | str) -> np.ndarray:
        """Query vectors, float32 (q, dim) normalized; EmbedderError when the corpus has no query embedder."""
        self.require_vectors()
        return self.context.embed_queries(texts, self.dim)

    def require_vectors(self) -> np.ndarray:
        vectors = self.segment.vectors  # checked once, on first use, when read from disk
        if vectors is None:
            raise self.context.lexical_only_error()
        return vectors

    def dense_topk(self, query_vectors: np.ndarray, mask: np.ndarray | None, fetch_k: int) -> TopK:
        """Exact cosine top *fetch_k* over the candidates (live rows only), for a batch of query vectors.

        A query's scores are the same to the bit in any batch, plan, thread
        count or BLAS kernel (see :mod:`irflow.kernels.dense`); the vectors are
        read-only, so their norm bound is computed once, on the first query,
        and so are their int8 codes where the compiled scan ranks (kept in
        memory, a quarter of the vectors' bytes: :mod:`irflow.kernels.dense_index`).
        """
        vectors = self.require_vectors()
        queries = self.context.check_queries(query_vectors, self.dim)
        return self.dense_checked(vectors, queries, mask, fetch_k)

    def dense_checked(self, vectors: np.ndarray, queries: np.ndarray, mask: np.ndarray | None,
                      fetch_k: int, *, corpus_rows: int | None = None, least: np.ndarray | None = None) -> TopK:
        """:meth:`dense_topk` of checked query vectors (a corpus of several segments checks them once).

        ``corpus_rows``: the corpus's size, which decides whether the int8
        scan ranks (a segment is one part of the rows scanned); ``least``:
        each query's k-th score in the segments before (see
        :func:`irflow.kernels.dense.dense_topk`).
        """
        mask = self.effective_mask(mask)
        return _dense.dense_topk(vectors, queries, mask, fetch_k, gathered=self._gathered_rows(mask, vectors),
                                 index=self.segment.index.get(vectors, corpus_rows), least=least)

    def dense_part(self, mask: np.ndarray | None, first: int, corpus_rows: int) -> _dense_parts.DensePart | None:
        """This segment as one part of its corpus's carried scan (:mod:`irflow.kernels.dense_parts`).

        None when a selective filter's rows are gathered here: the segment
        is then ranked alone (:meth:`dense_checked`), from them.
        """
        vectors = self.require_vectors()
        mask = self.effective_mask(mask)
        if self._gathered_rows(mask, vectors) is not None:
            return None
        n_live, live = self._masks.live_facts()
        return _dense_parts.DensePart(vectors, self.segment.index.get(vectors, corpus_rows), mask, first,
                                      n_live if mask is live else None)

    def _gathered_rows(self, mask: np.ndarray | None, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """A selective filter's rows and their vectors, kept from its first dense query (None: not kept).

        Only for masks this view made and still knows (read-only, and a
        delete makes new ones; see :mod:`irflow.store.gathered`).
        """
        if mask is None:
            return None
        known, all_live = self._masks.known(mask)
        if not known or all_live:
            return None
        return self._gathered.get(mask, vectors, max_fraction=_dense.GATHER_FRACTION_SINGLE)

    def bm25_topk(
        self,
        query_tokens: Sequence[Sequence[str]],
        mask: np.ndarray | None,
        fetch_k: int,
        params: "_bm25.BM25Params | Mapping[str, Any] | None" = None,
        stats: "_bm25.BM25Stats | None" = None,
        *,
        stats_key: Any = None,
        corpus_rows: int | None = None,
        floor: np.ndarray | None = None,
    ) -> TopK:
        """BM25 top *fetch_k* over the candidates (live rows only); corpus statistics leave deleted rows out.

        ``stats``: collection statistics supplied from outside (a shard of a
        larger corpus, or a segment of one, scoring with the global ones, see
        :func:`irflow.kernels.bm25.combine_stats`); they replace ``params.stats``.
        ``stats_key``, ``corpus_rows`` and ``floor``: see :func:`irflow.kernels.bm25.bm25_topk`.
        """
        if not isinstance(params, _bm25.BM25Params):
            params = _bm25.BM25Params.from_mapping(params)
        _, live = self._masks.live_facts()
        effective = self.effective_mask(mask)
        return _bm25.bm25_topk(self.postings, query_tokens, effective, fetch_k, params,
                               corpus_mask=live, stats=stats, stats_key=stats_key, corpus_rows=corpus_rows,
                               floor=floor, lasting=self.is_live_mask(effective))

    def stats_rows(self, mask: np.ndarray | None, mode: str) -> np.ndarray | None:
        """The rows BM25's statistics run over here: every live row (``"corpus"``) or the live candidates."""
        return self.live_mask() if mode == "corpus" else self.effective_mask(mask)

    def __repr__(self) -> str:
        live = len(self)
        rows = f"{self.n_rows}" if live == self.n_rows else f"{self.n_rows} ({live} live)"
        return (f"Corpus(name={self.name!r}, rows={rows}, kinds={self.kinds}, "
                f"embedder={self.context.embedder_label(self.dim is not None)!r}, "
                f"analyzer={self.context.analyzer.name!r})")

