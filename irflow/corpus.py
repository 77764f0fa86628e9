"""The corpus: records plus everything retrieval needs, built in memory or opened from disk.

A :class:`Corpus` bundles a :class:`~irflow.store.CorpusStore` (records, ledger,
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

import collections
import difflib
import os
import threading
import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from irflow import bm25 as _bm25
from irflow import dense as _dense
from irflow.cachekey import UnkeyableError, cache_key
from irflow.columns import MetadataColumns
from irflow.embedders import Embedder, check_dimension, normalize_rows, resolve_embedder
from irflow.errors import CorpusError, EmbedderError, FilterError, UnknownFieldWarning, UnknownSurfaceWarning
from irflow.filters import CompiledFilter, compile_filter
from irflow.generations import check_writable_root
from irflow.paths import HOME_ENV, is_corpus_name, resolve_corpus_path
from irflow.persist import VECTORS_FILE, EmbedderInfo, load_corpus, save_corpus
from irflow.postings import Postings
from irflow.progress import bar, phase
from irflow.records import Record, SearchHit
from irflow.store import CorpusStore, prepare_records
from irflow.text import Analyzer, get_analyzer
from irflow.topk import TopK

__all__ = ["Corpus", "build", "open_corpus"]

#: Distinct (filter, surfaces) masks kept per corpus; each costs n_rows bytes.
MASK_CACHE_SIZE = 64


def _readonly(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.setflags(write=False)
    return view


def _surface_kinds(surfaces: Iterable[str] | str | None) -> tuple[Any, ...] | None:
    if surfaces is None:
        return None
    if isinstance(surfaces, str):  # a bare kind name, not its characters
        return (surfaces,)
    return tuple(surfaces)


#: Largest deviation of a stored row's squared norm from 1 (float32 sums over thousands of dims stay ~1e-4 off).
UNIT_NORM_TOLERANCE = 1e-3


class _VectorCheck:
    """The once-per-corpus check of a matrix read from disk: finite, unit (or zero) rows.

    Done on first use, not on open: it reads the whole matrix (about 0.1 s per
    GB here), which opening a memory-mapped corpus otherwise never does.  A
    failure is raised on every use; a success is remembered.
    """

    def __init__(self, file: str, record_ids: np.ndarray) -> None:
        self.file = file
        self.record_ids = record_ids
        self.done = False
        self.lock = threading.Lock()

    def __call__(self, vectors: np.ndarray) -> None:
        if self.done:
            return
        with self.lock:
            if not self.done:
                check_unit_rows(vectors, self.file, self.record_ids)
                self.done = True


def check_unit_rows(vectors: np.ndarray, file: str, record_ids: np.ndarray | None = None) -> None:
    """Raise CorpusError naming *file* and the first bad row unless every row is finite and of unit (or zero) norm.

    One pass in blocks of ~16 MiB (no copy of the matrix): a NaN or inf makes
    a squared norm non-finite, a tampered value moves it away from 1.
    """
    step = max(1, (1 << 24) // max(1, vectors.shape[1] * vectors.itemsize))
    for start in range(0, vectors.shape[0], step):
        block = vectors[start:start + step]
        squared = np.einsum("ij,ij->i", block, block)
        good = (np.abs(squared - 1) <= UNIT_NORM_TOLERANCE) | (squared == 0)
        if not good.all():
            row = start + int(np.argmin(good))
            value = float(squared[row - start])
            what = "NaN or inf" if not np.isfinite(value) else f"squared norm {value:.6g}, not 1"
            record = f" (record {record_ids[row]!r})" if record_ids is not None else ""
            raise CorpusError(f"{file}: row {row}{record} holds an invalid vector ({what}); dense scores would be "
                              "wrong — the corpus is damaged, rebuild it with irflow.build(..., path=...)")


def _closest_hint(word: str, options: Iterable[str]) -> str:
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _field_paths(metadata: Iterable[Mapping[str, Any]], depth: int = 3) -> list[str]:
    """Every dotted field path of these metadata mappings (nested mappings, also inside lists), sorted."""
    found: set[str] = set()

    def walk(value: Any, prefix: str, level: int) -> None:
        if isinstance(value, Mapping):
            for key, inner in value.items():
                path = f"{prefix}{key}"
                found.add(path)
                if level < depth:
                    walk(inner, f"{path}.", level + 1)
        elif isinstance(value, (list, tuple)) and level > 0:
            for item in value:
                walk(item, prefix, level)

    for record in metadata:
        walk(record, "", 0)
    return sorted(found)


class Corpus:
    """Records and their indexes, row-aligned; what every retrieval stage reads.

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
        vectors_check: "_VectorCheck | None" = None,
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
        self._embedder_source = embedder
        self._embedder: Embedder | None = embedder if isinstance(embedder, Embedder) else None
        self._embedder_resolved = embedder is None or isinstance(embedder, Embedder)
        self._columns: MetadataColumns | None = None
        self._masks: collections.OrderedDict[Any, np.ndarray] = collections.OrderedDict()
        self._masks_version = store.version
        # id(mask) -> (mask, store version, selects every live row) for the masks candidate_mask made:
        # identity (checked with ``is``) tells a query's mask in O(1), no pass over its rows
        self._mask_facts: dict[int, tuple[np.ndarray, int, bool]] = {}
        self._live_facts_cache: tuple[int, int, np.ndarray | None] | None = None
        self._warned: set[tuple[str, str]] = set()  # (name, "field" | "surface") already warned about
        self._lock = threading.Lock()

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
        if self._columns is None:
            with self._lock:
                if self._columns is None:
                    self._columns = MetadataColumns(self.store.metadata)
        return self._columns

    @property
    def embedder_spec(self) -> str | None:
        """The recorded embedder spec ("hash:256", "st:..."), None for a custom callable or no embedder."""
        if isinstance(self._embedder_source, str):
            return self._embedder_source
        if self._embedder is not None:
            return self._embedder.spec
        return None if self._embedder_info is None else self._embedder_info.spec

    @property
    def embedder(self) -> Embedder | None:
        """The query embedder, resolved on first access (None when there is none to restore)."""
        if not self._embedder_resolved:
            with self._lock:
                if not self._embedder_resolved:
                    self._embedder = resolve_embedder(self._embedder_source)
                    self._embedder_resolved = True
        return self._embedder

    def with_embedder(self, embedder: Any) -> "Corpus":
        """The same corpus (shared store and arrays) with another query embedder.

        For in-memory corpora built from precomputed vectors with
        ``embedder=None``; its dimension is checked on first use.
        """
        return Corpus(
            store=self.store, postings=self.postings, analyzer=self.analyzer, vectors=self._vectors,
            embedder=embedder, embedder_info=self._embedder_info, name=self.name, path=self.path,
            vectors_check=self._vectors_check,
        )

    # -- records --------------------------------------------------------------------------

    def record(self, row: int) -> Record:
        """The record at *row*."""
        return self.store.record(row)

    def row_of(self, record_id: str) -> int:
        """The row of a live record (KeyError naming the id otherwise)."""
        return self.store.row_of(record_id)

    def hit(self, row: int, score: float) -> SearchHit:
        """A SearchHit for *row* with *score*; ``source`` is the corpus name."""
        row = int(row)
        store = self.store
        return SearchHit(
            artifact_id=store.artifact_ids[row],
            surface_kind=store.kinds[store.kind_codes[row]],
            score=score,
            text=store.texts[row],
            metadata=store.metadata[row],
            source=self.name,
            surface_index=int(store.surface_indices[row]),
            record_id=store.record_ids[row],
        )

    # -- candidates ------------------------------------------------------------------------

    def candidate_mask(
        self,
        filter: "Mapping[str, Any] | CompiledFilter | None" = None,
        surfaces: Iterable[str] | str | None = None,
    ) -> np.ndarray:
        """Rows passing *filter* whose kind is in *surfaces* (None: any), live rows only; read-only bool (n_rows,).

        ``surfaces`` naming no kind the corpus holds raises FilterError (the
        answer could only be empty: a typo); a stray unknown kind next to held
        ones matches nothing and warns (:class:`~irflow.errors.UnknownSurfaceWarning`).
        A filter path no live record has warns too
        (:class:`~irflow.errors.UnknownFieldWarning`, naming the closest
        field), once per (corpus, path).  Masks are cached per canonical
        (filter, surfaces); a delete invalidates the cache.
        """
        kinds = _surface_kinds(surfaces)
        compiled = compile_filter(filter)  # validated on every call; compiled once per canonical form
        # canonical JSON tells true from 1 from 1.0; the kinds by a type-exact key, order and repeats ignored
        try:
            key: Any = (compiled.canonical, None if kinds is None else frozenset(cache_key(k) for k in kinds))
        except UnkeyableError:
            key = None
        with self._lock:
            version = self.store.version  # read before the live rows: a mask is never older than its label
            if self._masks_version != version:
                self._masks.clear()
                self._masks_version = version
            cached = None if key is None else self._masks.get(key)
            if cached is not None:
                self._masks.move_to_end(key)
                return cached
        # a misspelled name must not silently return nothing (checked once per mask built)
        if kinds is not None:
            self._check_surfaces(tuple(dict.fromkeys(kinds)))
        if compiled.fields:
            self._check_fields(compiled.fields)
        mask = self.store.live.copy()
        if not compiled.matches_all:
            mask &= np.asarray(compiled.mask(self.columns), dtype=bool)
        if kinds is not None:
            codes = [code for code, kind in enumerate(self.kinds) if kind in kinds]
            mask &= np.isin(self.store.kind_codes, np.array(codes, dtype=np.int32))
        mask = _readonly(mask)
        n_live, _ = self._live_facts()
        all_live = int(np.count_nonzero(mask)) == n_live  # once per mask made, not per query
        with self._lock:
            if key is None or self._masks_version != version:  # a delete came in meanwhile: do not keep it
                return mask
            self._masks[key] = mask
            self._mask_facts[id(mask)] = (mask, version, all_live)
            while len(self._masks) > MASK_CACHE_SIZE:
                _, evicted = self._masks.popitem(last=False)
                self._mask_facts.pop(id(evicted), None)
        if not all_live:  # the kernels key their per-candidate-set caches by its digest: made once
            self.postings.remember_mask(mask)
        return mask

    def _check_surfaces(self, wanted: tuple[str, ...]) -> None:
        """FilterError when ``surfaces`` selects no kind this corpus holds; a warning for a stray kind.

        A restriction to kinds the corpus lacks can only return nothing: almost
        always a typo (``"nam"``), so it is refused, naming the kinds held and
        the closest.  A kind missing next to kinds that are held may be meant
        (one list of kinds for several corpora), so it only warns, once per
        (corpus, kind).
        """
        held = self.kinds
        unknown = [kind for kind in wanted if kind not in held]
        if wanted and not unknown:
            return
        hints = "".join(_closest_hint(kind, held) for kind in unknown)
        if len(unknown) == len(wanted):
            what = (f"{self._label()} holds no surface kind {', '.join(repr(k) for k in wanted)}{hints}" if wanted
                    else "an empty list selects no surface kind")
            raise FilterError(f"surfaces: {what}; its kinds are {', '.join(held) or '(none)'} — pass some of "
                              "them, or surfaces=None for every kind")
        for kind in unknown:
            if self._first_warning("surface", kind):
                warnings.warn(UnknownSurfaceWarning(
                    f"surfaces: {self._label()} holds no surface kind {kind!r}{_closest_hint(kind, held)}; it "
                    f"matches nothing (its kinds are {', '.join(held)})"), stacklevel=4)

    def _check_fields(self, paths: Iterable[str]) -> None:
        """Warn, once per (corpus, path), about a filter path no live record has (a misspelled field)."""
        live = self.store.live
        for path in paths:
            if (path, "field") in self._warned or (self.columns.column(path).present & live).any():
                continue
            if self._first_warning("field", path):
                known = _field_paths(self.store.metadata[i] for i in np.flatnonzero(live))
                listing = ", ".join(known[:20]) + (f", ... ({len(known)} fields)" if len(known) > 20 else "")
                warnings.warn(UnknownFieldWarning(
                    f"filter: no record of {self._label()} has the field {path!r}{_closest_hint(path, known)}, "
                    f"so conditions on it see a missing field (equality matches nothing); its fields are "
                    f"{listing or '(none)'}"), stacklevel=4)

    def _first_warning(self, what: str, name: str) -> bool:
        with self._lock:
            if (name, what) in self._warned:
                return False
            self._warned.add((name, what))
            return True

    def _live_facts(self) -> tuple[int, np.ndarray | None]:
        """(number of live rows, the live mask or None while nothing is deleted), recounted only after a delete."""
        version = self.store.version  # read first: facts are never newer than their label
        facts = self._live_facts_cache
        if facts is None or facts[0] != version:
            live = self.store.live
            n_live = int(np.count_nonzero(live))
            facts = (version, n_live, None if n_live == self.n_rows else live)
            if facts[2] is not None:
                self.postings.remember_mask(facts[2])
            self._live_facts_cache = facts
        return facts[1], facts[2]

    def _known_mask(self, mask: Any) -> tuple[bool, bool]:
        """(made by candidate_mask since the last delete, selects every live row) — by identity, O(1)."""
        facts = self._mask_facts.get(id(mask))
        if facts is None or facts[0] is not mask or facts[1] != self.store.version:
            return False, False
        return True, facts[2]

    def _effective_mask(self, mask: np.ndarray | None) -> np.ndarray | None:
        """*mask* restricted to live rows (None while nothing is deleted: the kernels' fast path).

        A mask of ``candidate_mask`` that keeps every live row (no filter, or
        one every record passes) becomes None too, so ``search(mode="lexical")``
        without a filter takes the unmasked kernels; its masks are live-only
        already, so they are not ANDed again.  Both are known by identity:
        no pass over the rows per query.
        """
        _, live = self._live_facts()
        if mask is None:
            return live
        known, all_live = self._known_mask(mask)
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
        vectors = embedder.embed_queries([texts] if isinstance(texts, str) else list(texts))
        check_dimension(embedder.describe(), int(vectors.shape[1]), self.dim)
        return vectors

    def dense_topk(self, query_vectors: np.ndarray, mask: np.ndarray | None, fetch_k: int) -> TopK:
        """Exact cosine top *fetch_k* over the candidates (live rows only), for a batch of query vectors.

        A query's scores are the same to the bit in any batch, plan, thread
        count or BLAS kernel (see :mod:`irflow.dense`); the vectors are
        read-only, so their norm bound is computed once, on the first query.
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
        return _dense.dense_topk(vectors, queries, self._effective_mask(mask), fetch_k)

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
        :func:`irflow.bm25.combine_stats`); they replace ``params.stats``.
        """
        if not isinstance(params, _bm25.BM25Params):
            params = _bm25.BM25Params.from_mapping(params)
        _, live = self._live_facts()
        return _bm25.bm25_topk(self.postings, query_tokens, self._effective_mask(mask), fetch_k, params,
                               corpus_mask=live, stats=stats)

    def _require_vectors(self) -> np.ndarray:
        vectors = self.vectors  # checked once, on first use, when read from disk
        if vectors is None:
            raise EmbedderError(
                f"{self._label()} is lexical-only (built with embedder=None): it has no vectors, so dense search "
                "is unavailable; use lexical search, or rebuild with an embedder (irflow.build(..., embedder='hash'))"
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

    def _embedder_label(self) -> str:
        # Never resolves the embedder: repr must not load a model.
        if self._vectors is None:
            return "none (lexical-only)"
        spec = self.embedder_spec
        if spec is not None:
            return spec
        if self._embedder_source is not None:
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


def _precomputed_vectors(records: Sequence[Record], embedder: Embedder | None) -> tuple[np.ndarray, EmbedderInfo]:
    dims = {int(r.vector.shape[0]) for r in records}  # type: ignore[union-attr]
    if len(dims) != 1:
        raise CorpusError(
            f"records carry vectors of different dimensions {sorted(dims)}; every precomputed vector must have one dimension"
        )
    matrix = np.stack([r.vector for r in records]).astype(np.float32, copy=False)  # type: ignore[misc]
    bad = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
    if bad.size:
        raise CorpusError(f"record {records[int(bad[0])].id!r} carries a vector with NaN or inf; fix or drop it")
    dim = matrix.shape[1]
    if embedder is not None and embedder.dim is not None:
        check_dimension(embedder.describe(), int(embedder.dim), dim)
    info = EmbedderInfo(
        spec=None if embedder is None else embedder.spec,
        dim=dim,
        description="precomputed" if embedder is None else embedder.describe(),
        source="precomputed",
    )
    return normalize_rows(matrix), info


def _embedded_vectors(
    texts: Sequence[str], embedder: Embedder, *, batch_size: int, progress: bool
) -> tuple[np.ndarray, EmbedderInfo]:
    # each distinct text is embedded once (surfaces repeat: names, boilerplate), then scattered back
    first: dict[str, int] = {}
    inverse = np.fromiter((first.setdefault(text, len(first)) for text in texts), dtype=np.int64, count=len(texts))
    distinct = list(first)
    matrix: np.ndarray | None = None
    # counted in records, so the bar shows records/s and an ETA
    with bar(progress, "embedding", total=len(distinct), unit="record", unit_scale=True) as shown:
        for start in range(0, len(distinct), batch_size):
            batch = np.asarray(embedder.embed_documents(distinct[start:start + batch_size]), dtype=np.float32)
            if matrix is None:
                matrix = np.empty((len(distinct), batch.shape[1]), dtype=np.float32)
            elif batch.shape[1] != matrix.shape[1]:
                check_dimension(embedder.describe(), int(batch.shape[1]), int(matrix.shape[1]))
            matrix[start:start + batch.shape[0]] = batch
            shown.update(batch.shape[0])
    if matrix is None:  # pragma: no cover - build() refuses an empty record list
        raise CorpusError("no texts to embed")
    if len(distinct) < len(texts):
        matrix = matrix[inverse]
    info = EmbedderInfo(spec=embedder.spec, dim=int(matrix.shape[1]), description=embedder.describe(), source="embedded")
    return matrix, info


def _document_vectors(
    records: Sequence[Record], texts: Sequence[str], embedder: Embedder | None, *, batch_size: int, progress: bool
) -> tuple[np.ndarray | None, EmbedderInfo | None]:
    """The row-aligned document vectors and their manifest entry: precomputed, embedded, or none."""
    carrying = sum(r.vector is not None for r in records)
    if carrying == len(records):
        return _precomputed_vectors(records, embedder)
    if carrying:
        first = next(r for r in records if r.vector is None)
        raise CorpusError(
            f"{carrying} of {len(records)} records carry precomputed vectors but record {first.id!r} does not; "
            "give every record a vector, or none (the embedder then embeds them all)"
        )
    if embedder is None:
        return None, None
    return _embedded_vectors(texts, embedder, batch_size=batch_size, progress=progress)


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
    embedder: Any = "hash",
    analyzer: Analyzer | str | Mapping[str, Any] | None = None,
    path: str | os.PathLike[str] | None = None,
    name: str | None = None,
    progress: bool = False,
    batch_size: int = 512,
) -> Corpus:
    """Build a corpus from records (Record objects or dicts with the same keys).

    ``embedder``: a spec ("hash", "hash:512", "st:<model>"), a callable
    ``texts -> (n, d)``, an object with ``embed(texts, kind)``, or None for a
    lexical-only corpus.  Records may instead all carry precomputed vectors.
    ``analyzer`` defaults to :data:`irflow.text.DEFAULT_ANALYZER`.
    ``progress=True`` shows a bar for each phase (tokenizing, postings,
    embedding, writing).  With
    ``path`` the corpus is written there (atomically; over an existing corpus
    it is a rebuild) and named after the directory unless ``name`` is given.

    >>> build([Record("unbox", "name", "unbox")], embedder=None).vectors is None
    True
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    prepared = prepare_records(records)
    if not prepared:
        raise CorpusError("build() got no records; a corpus needs at least one record")
    root = None if path is None else Path(path).expanduser()
    if root is not None:
        check_writable_root(root)  # refuse early, before tokenizing and embedding
    corpus_name = name if name is not None else (root.name if root is not None else None)
    the_analyzer = get_analyzer(analyzer)
    the_embedder = resolve_embedder(embedder)
    store = CorpusStore.from_records(prepared, name=corpus_name)
    postings = Postings.build(_tokenize(the_analyzer, store.texts, progress),
                              second_phase=lambda: phase(progress, "postings"))
    vectors, info = _document_vectors(prepared, store.texts, the_embedder, batch_size=batch_size, progress=progress)
    if root is not None:
        with phase(progress, "writing"):
            save_corpus(root, store=store, postings=postings, vectors=vectors, analyzer=the_analyzer.to_dict(),
                        embedder=info)
    return Corpus(
        store=store, postings=postings, analyzer=the_analyzer, vectors=vectors,
        embedder=the_embedder, embedder_info=info, name=corpus_name, path=root,
    )


def open_corpus(path_or_name: str | os.PathLike[str], *, embedder: Any = None, verify: bool = True) -> Corpus:
    """Open a built corpus by path, or by name under ``$IRFLOW_HOME/corpora``.

    Files are verified (sizes always, checksums unless ``verify=False``) and
    arrays memory-mapped.  The embedder recorded by spec is restored lazily;
    a corpus built with a custom callable needs ``embedder=`` for dense search
    (lexical search and records work without).  A passed embedder's dimension
    is checked against the corpus on first use.
    """
    root = resolve_corpus_path(path_or_name)
    if not root.exists() and is_corpus_name(path_or_name):
        raise CorpusError(
            f"no corpus named {str(path_or_name)!r}: {root} does not exist (names resolve under ${HOME_ENV}/corpora); "
            "build it with irflow.build(..., path=...) or pass a path"
        )
    stored = load_corpus(root, verify=verify, name=root.name)
    info = stored.embedder
    source = embedder if embedder is not None else (None if info is None else info.spec)
    check = None
    if stored.vectors is not None:
        check = _VectorCheck(str(stored.generation.dir / VECTORS_FILE), stored.store.record_ids)
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
