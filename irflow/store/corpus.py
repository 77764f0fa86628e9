"""The corpus: records plus everything retrieval needs, built in memory or opened from disk.

A :class:`Corpus` bundles a :class:`~irflow.store.record_store.CorpusStore` (records, ledger,
tombstones) with the row-aligned indexes the stages read: the normalized
float32 vector matrix (absent for lexical-only corpora), BM25 postings, and a
lazily built columnar view of the metadata.  :func:`build` makes one from
records; :func:`open_corpus` reopens a built one by path or by name, with its
arrays memory-mapped and its embedder restored from the recorded spec — lazily,
so lexical search and record lookups never load a model.

>>> corpus = build([{"artifact_id": "unbox", "surface_kind": "name", "text": "unbox"}])
>>> corpus.n_rows, corpus.kinds
(1, ('name',))
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from irflow.errors import CorpusError, EmbedderError
from irflow.kernels import bm25 as _bm25
from irflow.kernels import dense as _dense
from irflow.kernels import dense_kernel as _dense_kernel
from irflow.kernels.columns import MetadataColumns
from irflow.kernels.embedders import AUTO, Embedder, LazyEmbedder, check_digest, check_dimension, resolve_embedder
from irflow.kernels.filters import CompiledFilter
from irflow.kernels.postings import Postings
from irflow.kernels.text import Analyzer, get_analyzer
from irflow.kernels.topk import TopK
from irflow.store.gathered import GatheredVectors
from irflow.store.generations import check_writable_root
from irflow.store.masks import CandidateMasks
from irflow.store.paths import HOME_ENV, is_corpus_name, resolve_corpus_path
from irflow.store.persist import VECTORS_FILE, EmbedderInfo, load_corpus, save_corpus
from irflow.store.protocol import CorpusSettings, Siblings
from irflow.store.record_store import CorpusStore, prepare_records
from irflow.store.records import Record, SearchHit
from irflow.store.vectors import VectorCheck, document_vectors
from irflow.util.corpusmarks import CORPUS, refuse_inside_corpus
from irflow.util.progress import bar, phase, tracked
from irflow.util.unicode import check_text

__all__ = ["Corpus", "build", "open_corpus"]


def _readonly(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.setflags(write=False)
    return view


class Corpus:
    """Records and their indexes, row-aligned; what every retrieval stage reads, through the corpus protocol.

    Implements :class:`irflow.store.protocol.CorpusProtocol` (the members
    retrieval code may use) and offers more for building, inspecting and
    maintaining a corpus (``store``, ``vectors``, ``columns``, ``record_ids``...).

    Made by :func:`build` or :func:`open_corpus`, not by hand.  Rows are the
    records in build order; deleted rows stay (ids keep their rows) but no
    candidate mask ever includes them.
    """

    def __init__(
        self,
        *,
        store: CorpusStore,
        postings: Postings,
        analyzer: Analyzer,
        vectors: np.ndarray | None,
        embedder: Any = None,
        embedder_info: EmbedderInfo | None = None,
        name: str | None = None,
        path: Path | None = None,
        vectors_check: VectorCheck | None = None,
    ) -> None:
        self.store = store
        self.postings = postings
        self.analyzer = analyzer
        self.name = name
        self.path = path
        self._vectors = None if vectors is None else _readonly(vectors)
        # vectors read from disk are checked on first use (None: made here, already checked)
        self._vectors_check = vectors_check
        self._embedder_info = embedder_info
        # What to resolve on first use: an Embedder, a spec string, a user callable/object, or None.
        self._query_embedder = LazyEmbedder(embedder)
        self._gathered = GatheredVectors()
        self._masks = CandidateMasks(store, self._label(), remember=postings.remember_mask,
                                     forget=self._gathered.discard)
        self._lock = threading.Lock()
        self._index = _dense_kernel.IndexSlot()  # the vectors' int8 codes, built on first use

    # -- row-aligned columns ------------------------------------------------------------

    @property
    def n_rows(self) -> int:
        """Rows, deleted ones included (row ids are stable)."""
        return self.store.n_rows

    def __len__(self) -> int:
        """Live records."""
        return len(self.store)

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
        """Surface kinds in order of first appearance; ``kind_codes`` index into it."""
        return self.store.kinds

    @property
    def kind_codes(self) -> np.ndarray:
        """Surface kind code per row (int32)."""
        return self.store.kind_codes

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
        if self._vectors is not None and self._vectors_check is not None:
            self._vectors_check(self._vectors)
        return self._vectors

    @property
    def dim(self) -> int | None:
        """Vector dimension, or None for a lexical-only corpus."""
        return None if self._vectors is None else int(self._vectors.shape[1])

    @property
    def tokenizer(self) -> Analyzer:
        """The callable BM25 uses, ``str -> list[str]``: the corpus analyzer, applied to queries too."""
        return self.analyzer

    @property
    def columns(self) -> MetadataColumns:
        """Columnar metadata for filters, built on first use (a lexical-only lookup never pays for it)."""
        return self._masks.columns

    def field_paths(self) -> list[str]:
        """The dotted field paths of the live records' metadata, sorted (one walk, kept until a delete)."""
        return self._masks.field_paths()

    @property
    def embedder_spec(self) -> str | None:
        """The recorded embedder spec ("hash:256", "st:..."), None for a custom callable or no embedder."""
        spec = self._query_embedder.spec
        if spec is not None:
            return spec
        return None if self._embedder_info is None else self._embedder_info.spec

    @property
    def embedder_info(self) -> EmbedderInfo | None:
        """What the manifest records about the vectors (spec, dim, where they came from); None when lexical-only."""
        return self._embedder_info

    @property
    def embedder(self) -> Embedder | None:
        """The query embedder, resolved on first access (None when there is none to restore)."""
        return self._query_embedder.get()

    def with_embedder(self, embedder: Any) -> "Corpus":
        """The same corpus (shared store and arrays) with another query embedder.

        For in-memory corpora built from precomputed vectors with
        ``embedder=None``; its dimension is checked on first use.
        """
        other = Corpus(
            store=self.store, postings=self.postings, analyzer=self.analyzer, vectors=self._vectors,
            embedder=embedder, embedder_info=self._embedder_info, name=self.name, path=self.path,
            vectors_check=self._vectors_check,
        )
        other._index = self._index  # the same vectors: their int8 codes too, built once for both
        return other

    @property
    def version(self) -> int:
        """Bumped by every delete: stage caches keyed by it never serve an answer from before."""
        return self.store.version

    # -- the corpus protocol's row lookups (irflow.store.protocol) --------------------------

    def record_ids_of(self, rows: Any) -> np.ndarray:
        """Record id of each row (object array)."""
        return self.store.record_ids_of(rows)

    def artifact_ids_of(self, rows: Any) -> np.ndarray:
        """Artifact id of each row (object array)."""
        return self.store.artifact_ids_of(rows)

    def kind_codes_of(self, rows: Any) -> np.ndarray:
        """Surface kind code of each row (int32), indexing :attr:`kinds`."""
        return self.store.kind_codes_of(rows)

    def surface_indices_of(self, rows: Any) -> np.ndarray:
        """Plan-global surface index of each row (int64)."""
        return self.store.surface_indices_of(rows)

    def records(self, rows: Any) -> list[Record]:
        """The records of these rows (no vectors), in order."""
        return self.store.records(rows)

    def hits(self, rows: Any, scores: Any) -> list[SearchHit]:
        """One SearchHit per row with its score (a Python float); ``source`` is the corpus name."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        if rows.size != scores.size:
            raise ValueError(f"hits needs one score per row, got {rows.size} rows and {scores.size} scores")
        if scores.size and np.isnan(scores).any():
            raise ValueError("a hit score must not be NaN")
        name, kinds = self.name, self.store.kinds
        artifact_ids, record_ids, codes, surface_indices, texts, metadata = self.store.hit_columns(rows)
        make = SearchHit._stored
        return [make(artifact_ids[i], kinds[codes[i]], score, texts[i], metadata[i], name, surface_indices[i],
                     record_ids[i])
                for i, score in enumerate(scores.tolist())]

    def sibling_rows(self, artifact_ids: Sequence[str]) -> Siblings:
        """Each artifact's live rows in plan order, through the ledger (:meth:`CorpusStore.sibling_rows`)."""
        return self.store.sibling_rows(artifact_ids)

    # -- records --------------------------------------------------------------------------

    def record(self, row: int) -> Record:
        """The record at *row*."""
        return self.store.record(row)

    def row_of(self, record_id: str) -> int:
        """The row of a live record (KeyError naming the id otherwise)."""
        return self.store.row_of(record_id)

    def hit(self, row: int, score: float) -> SearchHit:
        """A SearchHit for *row* with *score*; ``source`` is the corpus name."""
        return self.hits([row], [score])[0]

    # -- candidates ------------------------------------------------------------------------

    def candidate_mask(self, filter: "Mapping[str, Any] | CompiledFilter | None" = None,
                       surfaces: Iterable[str] | str | None = None) -> np.ndarray:
        """Rows passing *filter* whose kind is in *surfaces* (None: any), live rows only; read-only bool (n_rows,).

        ``surfaces`` naming no kind the corpus holds raises FilterError (the
        answer could only be empty: a typo); a stray unknown kind next to held
        ones matches nothing and warns (:class:`~irflow.errors.UnknownSurfaceWarning`).
        A filter path no live record has warns too
        (:class:`~irflow.errors.UnknownFieldWarning`, naming the closest
        field), once per (corpus, path).  Masks are cached per canonical
        (filter, surfaces); a delete invalidates the cache (see :mod:`irflow.store.masks`).
        """
        return self._masks.mask(filter, surfaces)

    def _effective_mask(self, mask: np.ndarray | None) -> np.ndarray | None:
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
        return self.analyzer.tokenize_many([texts] if isinstance(texts, str) else texts)

    def embed_queries(self, texts: Sequence[str] | str) -> np.ndarray:
        """Query vectors, float32 (q, dim) normalized; EmbedderError when the corpus has no query embedder."""
        self._require_vectors()
        embedder = self.embedder
        if embedder is None:
            raise EmbedderError(self._no_embedder_message())
        check_digest(embedder, None if self._embedder_info is None else self._embedder_info.digest, self._label())
        vectors = embedder.embed_queries([texts] if isinstance(texts, str) else list(texts))
        check_dimension(embedder.describe(), int(vectors.shape[1]), self.dim)
        return vectors

    def dense_topk(self, query_vectors: np.ndarray, mask: np.ndarray | None, fetch_k: int) -> TopK:
        """Exact cosine top *fetch_k* over the candidates (live rows only), for a batch of query vectors.

        A query's scores are the same to the bit in any batch, plan, thread
        count or BLAS kernel (see :mod:`irflow.kernels.dense`); the vectors are
        read-only, so their norm bound is computed once, on the first query,
        and so are their int8 codes where the compiled scan ranks (kept in
        memory, a quarter of the vectors' bytes: :mod:`irflow.kernels.dense_index`).
        """
        vectors = self._require_vectors()
        queries = np.asarray(query_vectors, dtype=np.float32)
        if queries.ndim == 1:
            queries = queries[None, :]
        if queries.ndim != 2:
            raise EmbedderError(f"query vectors must be a (q, dim) array, got shape {queries.shape}")
        check_dimension("the query vectors", int(queries.shape[1]), self.dim)
        bad = np.flatnonzero(~np.isfinite(queries).all(axis=1))
        if bad.size:  # NaN scores every row -inf: the "top" rows would be arbitrary
            raise EmbedderError(f"query vector {int(bad[0])} holds NaN or infinite values ({bad.size} of "
                                f"{len(queries)} vectors); a query vector must be finite — check the embedder "
                                f"({self._embedder_label()}) or the vectors passed in")
        mask = self._effective_mask(mask)
        return _dense.dense_topk(vectors, queries, mask, fetch_k, gathered=self._gathered_rows(mask, vectors),
                                 index=self._index.get(vectors))

    def _gathered_rows(self, mask: np.ndarray | None, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """A selective filter's rows and their vectors, kept from its first dense query (None: not kept).

        Only for masks this corpus made and still knows (read-only, and a
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
    ) -> TopK:
        """BM25 top *fetch_k* over the candidates (live rows only); corpus statistics leave deleted rows out.

        ``stats``: collection statistics supplied from outside (a shard of a
        larger corpus scoring with the global ones, see
        :func:`irflow.kernels.bm25.combine_stats`); they replace ``params.stats``.
        """
        if not isinstance(params, _bm25.BM25Params):
            params = _bm25.BM25Params.from_mapping(params)
        _, live = self._masks.live_facts()
        return _bm25.bm25_topk(self.postings, query_tokens, self._effective_mask(mask), fetch_k, params,
                               corpus_mask=live, stats=stats)

    def _require_vectors(self) -> np.ndarray:
        vectors = self.vectors  # checked once, on first use, when read from disk
        if vectors is None:
            raise EmbedderError(
                f"{self._label()} is lexical-only (built with embedder=None): it has no vectors, so dense search "
                "is unavailable; use lexical search, or rebuild with an embedder (irflow.build(records) embeds with "
                "the model when the models extra is installed, else 'hash')"
            )
        return vectors

    def _no_embedder_message(self) -> str:
        info = self._embedder_info
        if info is not None and info.source == "embedded":
            return (
                f"{self._label()} was built with a custom embedder (a callable or object, not a named spec), which "
                "cannot be restored from disk; pass it again: open_corpus(..., embedder=...)"
            )
        return (
            f"{self._label()} holds precomputed document vectors but has no query embedder; pass the embedder that "
            "made them: open_corpus(..., embedder=...), or corpus.with_embedder(...) for an in-memory corpus"
        )

    def _label(self) -> str:
        return f"corpus {self.name!r}" if self.name else "this corpus"

    @property
    def settings(self) -> CorpusSettings:
        """The embedder and analyzer this corpus ranks with, by name (the corpus protocol; loads no model)."""
        return CorpusSettings("none" if self._vectors is None else self._embedder_label(), self.analyzer.name)

    def _embedder_label(self) -> str:
        # Never resolves the embedder: repr must not load a model.
        if self._vectors is None:
            return "none (lexical-only)"
        spec = self.embedder_spec
        if spec is not None:
            return spec
        if self._query_embedder.source is not None:
            return "custom"
        if self._embedder_info is not None and self._embedder_info.source == "embedded":
            return "custom (pass embedder= to open_corpus)"
        return "none (precomputed vectors)"

    def __repr__(self) -> str:
        live = len(self)
        rows = f"{self.n_rows}" if live == self.n_rows else f"{self.n_rows} ({live} live)"
        return (
            f"Corpus(name={self.name!r}, rows={rows}, kinds={self.kinds}, "
            f"embedder={self._embedder_label()!r}, analyzer={self.analyzer.name!r})"
        )


# -- building ---------------------------------------------------------------------------------


def _tokenize(analyzer: Analyzer, texts: Sequence[str], progress: bool, chunk: int = 1024) -> Iterator[list[str]]:
    """The tokens of every text, streamed chunk by chunk (the same tokens as one call).

    A generator, so the postings builder holds one chunk of token lists at a
    time, never the whole collection's (several GB of Python lists at 1M
    records); the chunks also let a progress bar follow.
    """
    with bar(progress, "tokenizing", total=len(texts), unit="record", unit_scale=True) as shown:
        for start in range(0, len(texts), chunk):
            yield from analyzer.tokenize_many(texts[start:start + chunk])
            shown.update(min(chunk, len(texts) - start))


def build(
    records: Iterable[Record | Mapping[str, Any]],
    *,
    embedder: Any = AUTO,
    analyzer: Analyzer | str | Mapping[str, Any] | None = None,
    path: str | os.PathLike[str] | None = None,
    name: str | None = None,
    progress: bool = False,
    batch_size: int = 512,
) -> Corpus:
    """Build a corpus from records (Record objects or dicts with the same keys).

    ``embedder``: by default ``"auto"`` — all-MiniLM-L6-v2 when the models
    extra is installed, else the ``"hash"`` stand-in, said once (the rule of
    every entry point: :func:`irflow.kernels.embedders.default_embedder`) —;
    a spec ("onnx:all-MiniLM-L6-v2", "hash", "hash:512", "st:<model>"), a
    callable ``texts -> (n, d)``, an object with ``embed(texts, kind)``, or
    None for a lexical-only corpus.  Records may instead all carry
    precomputed vectors.
    ``analyzer`` defaults to :data:`irflow.kernels.text.DEFAULT_ANALYZER`.
    ``progress=True`` shows the progress of each phase (checking records,
    tokenizing, postings, embedding, writing; see :mod:`irflow.util.progress`).  With
    ``path`` the corpus is written there (atomically; over an existing corpus
    it is a rebuild) and named after the directory unless ``name`` is given;
    a path inside another corpus is refused (OutputError).

    >>> build([Record("unbox", "name", "unbox")], embedder=None).vectors is None
    True
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if isinstance(name, str):
        check_text(name, "build(): name")  # hits carry it (their source): UTF-8 text, as every name
    prepared = prepare_records(tracked(progress, "checking records", records, unit="record"))
    if not prepared:
        raise CorpusError("build() got no records; a corpus needs at least one record")
    root = None if path is None else Path(path).expanduser()
    if root is not None:  # refuse early, before tokenizing and embedding
        refuse_inside_corpus(root, "corpus", replacing=CORPUS)  # a rebuild, never a corpus inside another
        check_writable_root(root)
    corpus_name = name if name is not None else (root.name if root is not None else None)
    the_analyzer = get_analyzer(analyzer)
    the_embedder = resolve_embedder(embedder)
    store = CorpusStore.from_records(prepared, name=corpus_name)
    postings = Postings.build(_tokenize(the_analyzer, store.texts, progress),
                              second_phase=lambda: phase(progress, "postings"))
    vectors, info = document_vectors(prepared, store.texts, the_embedder, batch_size=batch_size, progress=progress)
    if root is not None:
        with phase(progress, "writing"):
            save_corpus(root, store=store, postings=postings, vectors=vectors, analyzer=the_analyzer.to_dict(),
                        embedder=info)
    return Corpus(
        store=store, postings=postings, analyzer=the_analyzer, vectors=vectors,
        embedder=the_embedder, embedder_info=info, name=corpus_name, path=root,
    )


def open_corpus(path_or_name: str | os.PathLike[str], *, embedder: Any = None, verify: bool = True,
                generation: tuple[str, str, str] | None = None) -> Corpus:
    """Open a built corpus by path, or by name under ``$IRFLOW_HOME/corpora``.

    Files are verified (sizes always, checksums unless ``verify=False``) and
    arrays memory-mapped.  The embedder recorded by spec is restored lazily;
    a corpus built with a custom callable needs ``embedder=`` for dense search
    (lexical search and records work without).  A passed embedder's dimension
    is checked against the corpus on first use.  ``generation`` opens a named
    generation instead of the live one (see :func:`~irflow.store.persist.load_corpus`).
    """
    root = resolve_corpus_path(path_or_name)
    if not root.exists() and is_corpus_name(path_or_name):
        raise CorpusError(
            f"no corpus named {str(path_or_name)!r}: {root} does not exist (names resolve under ${HOME_ENV}/corpora); "
            "build it with irflow.build(..., path=...) or pass a path"
        )
    stored = load_corpus(root, verify=verify, name=root.name, generation=generation)
    info = stored.embedder
    source = embedder if embedder is not None else (None if info is None else info.spec)
    check = None
    if stored.vectors is not None:
        check = VectorCheck(str(stored.generation.dir / VECTORS_FILE), stored.store.id_column, stored.verify_vectors)
    return Corpus(
        store=stored.store,
        postings=stored.postings,
        analyzer=Analyzer.from_dict(stored.analyzer),
        vectors=stored.vectors,
        embedder=source,
        embedder_info=info,
        name=root.name,
        path=root,
        vectors_check=check,
    )
