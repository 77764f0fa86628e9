"""Reading a corpus: every member answers from the state current when it is called.

:class:`CorpusReader` is the read half of :class:`irflow.store.corpus.Corpus`
(the corpus protocol, and what inspection reads: records, columns, vectors);
the corpus adds building, updating and persistence.  Each call reads the
corpus's current state once (see :mod:`irflow.store.state`) and asks its
view: a corpus of one segment delegates straight to that segment's view,
one of several to their combination.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from irflow.errors import CorpusError
from irflow.kernels import bm25 as _bm25
from irflow.kernels.columns import MetadataColumns
from irflow.kernels.embedders import Embedder
from irflow.kernels.filters import CompiledFilter
from irflow.kernels.postings import Postings
from irflow.kernels.text import Analyzer
from irflow.kernels.topk import TopK
from irflow.store.persist import EmbedderInfo
from irflow.store.protocol import CorpusSettings, Siblings
from irflow.store.record_store import CorpusStore
from irflow.store.records import Record, SearchHit
from irflow.store.segment import CorpusContext
from irflow.store.state import CorpusState

__all__ = ["CorpusReader"]


class CorpusReader:
    """The read members of a corpus (see :class:`irflow.store.corpus.Corpus`), answered by its current state."""

    _context: CorpusContext
    _state: CorpusState

    def snapshot(self) -> Any:
        """The current state's view: the corpus protocol over one committed state, never changed by later updates."""
        return self._state.view

    def one_record_per_artifact(self) -> bool:
        """Whether no two live records share an artifact (the collapse per artifact then changes nothing).

        Not a protocol member: the first stages ask it, where a corpus has it,
        to fetch ``k`` rows instead of over-fetching for the collapse (see
        :mod:`irflow.store.artifact_facts`).
        """
        unique: bool = self._state.view.one_record_per_artifact()
        return unique

    # -- what the corpus is ----------------------------------------------------------------

    @property
    def name(self) -> str | None:
        """The corpus name (``SearchHit.source`` of its hits)."""
        return self._context.name

    @name.setter
    def name(self, value: str | None) -> None:
        self._context.name = value
        self.store.name = value

    @property
    def path(self) -> Path | None:
        """Where the corpus lives on disk (None: in memory)."""
        return self._context.path

    @property
    def analyzer(self) -> Analyzer:
        """The analyzer its postings were built with (applied to queries too)."""
        return self._context.analyzer

    @property
    def store(self) -> CorpusStore:
        """The records of the current state (ids, columns, the ledger, tombstones), as a :class:`CorpusStore`."""
        store: CorpusStore = self._state.view.store
        return store

    @property
    def n_rows(self) -> int:
        """Rows, deleted ones included (row ids are stable)."""
        n: int = self._state.view.n_rows
        return n

    def __len__(self) -> int:
        """Live records."""
        return len(self._state.view)

    def __iter__(self) -> Iterator[Record]:
        """The live records in row order (no vectors): what a fresh build of this corpus would be given."""
        return iter(self._state.view.store)

    @property
    def record_ids(self) -> np.ndarray:
        """Record id per row (object array)."""
        return self.store.record_ids

    @property
    def artifact_ids(self) -> np.ndarray:
        """Artifact id per row (object array)."""
        return self.store.artifact_ids

    @property
    def kinds(self) -> tuple[str, ...]:
        """Surface kinds of the live records in order of first appearance; ``kind_codes`` index into it."""
        kinds: tuple[str, ...] = self._state.view.kinds
        return kinds

    @property
    def kind_codes(self) -> np.ndarray:
        """Surface kind code per row (int32), indexing :attr:`kinds` (-1: a deleted row of a kind no live record has)."""
        codes: np.ndarray = self._state.view.kind_codes
        return codes

    @property
    def surface_indices(self) -> np.ndarray:
        """Plan-global surface index per row (int64)."""
        return self.store.surface_indices

    @property
    def live(self) -> np.ndarray:
        """False for deleted rows (bool)."""
        return self.store.live

    @property
    def vectors(self) -> np.ndarray | None:
        """float32 (n_rows, dim), L2-normalized, read-only (memory-mapped when opened); None when lexical-only."""
        vectors: np.ndarray | None = self._state.view.vectors
        return vectors

    @property
    def dim(self) -> int | None:
        """Vector dimension, or None for a lexical-only corpus."""
        dim: int | None = self._state.view.dim
        return dim

    @property
    def postings(self) -> Postings:
        """The BM25 postings of a corpus of one segment (a corpus of several has one per segment: ``compact()`` first)."""
        parts = self._state.parts
        if len(parts) != 1:
            raise CorpusError(f"{self._context.label()} has {len(parts)} segments, each with its own postings; "
                              "corpus.compact() merges them into one")
        return parts[0].postings

    @property
    def tokenizer(self) -> Analyzer:
        """The callable BM25 uses, ``str -> list[str]``: the corpus analyzer, applied to queries too."""
        return self._context.analyzer

    @property
    def columns(self) -> MetadataColumns:
        """Columnar metadata for filters, built on first use (a lexical-only lookup never pays for it)."""
        columns: MetadataColumns = self._state.view.columns
        return columns

    def field_paths(self) -> list[str]:
        """The dotted field paths of the live records' metadata, sorted (one walk, kept until the corpus changes)."""
        paths: list[str] = self._state.view.field_paths()
        return paths

    @property
    def settings(self) -> CorpusSettings:
        """The embedder and analyzer this corpus ranks with, by name (the corpus protocol; loads no model)."""
        settings: CorpusSettings = self._state.view.settings
        return settings

    @property
    def embedder_spec(self) -> str | None:
        """The recorded embedder spec ("hash:256", "st:..."), None for a custom callable or no embedder."""
        return self._context.embedder_spec

    @property
    def embedder_info(self) -> EmbedderInfo | None:
        """What the manifest records about the vectors (spec, dim, where they came from); None when lexical-only."""
        return self._context.embedder_info

    @property
    def embedder(self) -> Embedder | None:
        """The query embedder, resolved on first access (None when there is none to restore)."""
        return self._context.query_embedder.get()

    @property
    def version(self) -> int:
        """Changed by every update: stage caches keyed by it never serve an answer from before."""
        version: int = self._state.view.version
        return version

    @property
    def _masks(self) -> Any:
        """The candidate masks of a corpus of one segment (tests look at their warnings and caches)."""
        return self._state.view._masks

    @property
    def _gathered(self) -> Any:
        return self._state.view._gathered

    # -- the corpus protocol (irflow.store.protocol), answered by the current state --------

    def record_ids_of(self, rows: Any) -> np.ndarray:
        """Record id of each row (object array)."""
        found: np.ndarray = self._state.view.record_ids_of(rows)
        return found

    def artifact_ids_of(self, rows: Any) -> np.ndarray:
        """Artifact id of each row (object array)."""
        found: np.ndarray = self._state.view.artifact_ids_of(rows)
        return found

    def kind_codes_of(self, rows: Any) -> np.ndarray:
        """Surface kind code of each row (int32), indexing :attr:`kinds`."""
        found: np.ndarray = self._state.view.kind_codes_of(rows)
        return found

    def surface_indices_of(self, rows: Any) -> np.ndarray:
        """Plan-global surface index of each row (int64)."""
        found: np.ndarray = self._state.view.surface_indices_of(rows)
        return found

    def records(self, rows: Any) -> list[Record]:
        """The records of these rows (no vectors), in order."""
        found: list[Record] = self._state.view.records(rows)
        return found

    def hits(self, rows: Any, scores: Any) -> list[SearchHit]:
        """One SearchHit per row with its score (a Python float); ``source`` is the corpus name."""
        found: list[SearchHit] = self._state.view.hits(rows, scores)
        return found

    def sibling_rows(self, artifact_ids: Sequence[str]) -> Siblings:
        """Each artifact's live rows in plan order, through the ledger (:meth:`CorpusStore.sibling_rows`)."""
        found: Siblings = self._state.view.sibling_rows(artifact_ids)
        return found

    def record(self, row: int) -> Record:
        """The record at *row*."""
        found: Record = self._state.view.record(row)
        return found

    def row_of(self, record_id: str) -> int:
        """The row of a live record (KeyError naming the id otherwise)."""
        row: int = self._state.view.row_of(record_id)
        return row

    def hit(self, row: int, score: float) -> SearchHit:
        """A SearchHit for *row* with *score*; ``source`` is the corpus name."""
        return self.hits([row], [score])[0]

    def candidate_mask(self, filter: "Mapping[str, Any] | CompiledFilter | None" = None,
                       surfaces: Iterable[str] | str | None = None) -> np.ndarray:
        """Rows passing *filter* whose kind is in *surfaces* (None: any), live rows only; read-only bool (n_rows,).

        ``surfaces`` naming no kind the corpus holds raises FilterError (the
        answer could only be empty: a typo); a stray unknown kind next to held
        ones matches nothing and warns (:class:`~irflow.errors.UnknownSurfaceWarning`).
        A filter path no live record has warns too
        (:class:`~irflow.errors.UnknownFieldWarning`, naming the closest
        field), once per (corpus, path).  Masks are cached per canonical
        (filter, surfaces) and state; an update makes new ones (see :mod:`irflow.store.masks`).
        """
        mask: np.ndarray = self._state.view.candidate_mask(filter, surfaces)
        return mask

    def tokenize_queries(self, texts: Sequence[str] | str) -> list[list[str]]:
        """Query tokens, cut by the corpus analyzer (the one its postings were built with)."""
        return self._context.analyzer.tokenize_many([texts] if isinstance(texts, str) else texts)

    def embed_queries(self, texts: Sequence[str] | str) -> np.ndarray:
        """Query vectors, float32 (q, dim) normalized; EmbedderError when the corpus has no query embedder."""
        vectors: np.ndarray = self._state.view.embed_queries(texts)
        return vectors

    def dense_topk(self, query_vectors: np.ndarray, mask: np.ndarray | None, fetch_k: int) -> TopK:
        """Exact cosine top *fetch_k* over the candidates (live rows only), for a batch of query vectors.

        A query's scores are the same to the bit in any batch, plan, thread
        count, BLAS kernel or segment layout (see :mod:`irflow.kernels.dense`).
        """
        top: TopK = self._state.view.dense_topk(query_vectors, mask, fetch_k)
        return top

    def bm25_topk(
        self,
        query_tokens: Sequence[Sequence[str]],
        mask: np.ndarray | None,
        fetch_k: int,
        params: "_bm25.BM25Params | Mapping[str, Any] | None" = None,
        stats: "_bm25.BM25Stats | None" = None,
    ) -> TopK:
        """BM25 top *fetch_k* over the candidates (live rows only); corpus statistics leave deleted rows out.

        ``stats``: collection statistics supplied from outside (a shard of a
        larger corpus scoring with the global ones, see
        :func:`irflow.kernels.bm25.combine_stats`); they replace ``params.stats``.
        """
        top: TopK = self._state.view.bm25_topk(query_tokens, mask, fetch_k, params, stats)
        return top
