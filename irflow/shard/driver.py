"""ShardedCorpus: one corpus to the engine, many shards underneath, and exactly one machine's answer.

The driver answers what stages ask of a corpus by asking every shard and
merging, so every recipe runs on it unchanged:

- **candidate masks**: the filter runs on every shard (each keeps its part
  cached, keyed by the filter); the driver checks the filter and the
  surfaces against the whole corpus first, with one machine's errors and
  warnings, and joins the parts into one global mask;
- **BM25** in two phases (Elasticsearch's dfs_query_then_fetch): each shard
  sends the rows, total length and df of the batch's distinct tokens over
  its statistics rows (the candidates, or every live row); the driver adds
  them up — and asks for the whole candidate df vector only when Okapi's
  negative-idf floor needs the mean idf, caching that per row set — and
  sends the global statistics back; each shard returns its top
  ``fetch_k`` scored with them, the same bits one machine computes;
- **dense**: each shard returns its exact top ``fetch_k``;
- both merge by (score desc, global row asc), one machine's order;
- **rows**: records, hits, ids and kinds are fetched only for the rows
  asked (candidates, hits), grouped by shard; an artifact's siblings (the
  ledger, for expansion) come from the one shard holding it (an artifact
  never spans shards), in global rows.

Query texts are tokenized and embedded here, once per batch, with the
analyzer and embedder every shard was built with (the manifest says which).
A shard that fails fails the call: no answer is ever merged from a subset
of the shards.

>>> # corpus = irflow.open_corpus("corpus.sharded")            # in-process shards
>>> # corpus = irflow.open_corpus("corpus.sharded", ray="auto") # one Ray actor per shard
>>> # irflow.search(corpus, "sql parser", mode="hybrid")       # the single-machine hits, bit for bit
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import threading
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import attrs
import numpy as np

from irflow.kernels.bm25 import BM25Params, BM25Stats, PartialStats, combine_stats
from irflow.util.cachekey import UnkeyableError, cache_key
from irflow.kernels.embedders import Embedder, LazyEmbedder, check_digest, check_dimension
from irflow.errors import CorpusError, EmbedderError, NoLedgerEntry
from irflow.kernels.filters import CompiledFilter, compile_filter
from irflow.store.masks import Warned, _surface_kinds, check_surfaces, warn_unknown_field
from irflow.store.generations import LOCK_TIMEOUT
from irflow.store.mergepolicy import MergePolicy
from irflow.store.paths import resolve_corpus_path
from irflow.store.protocol import CorpusSettings, Siblings
from irflow.store.records import Record, SearchHit
from irflow.shard.backend import Backend, Call
from irflow.kernels.rowmap import RowMap, merge_topk
from irflow.shard.disk import open_committed
from irflow.shard.living import ShardedUpdates
from irflow.shard.manifest import ShardManifest
from irflow.kernels.text import Analyzer
from irflow.kernels.topk import TopK

__all__ = ["ShardedCorpus"]

#: Distinct filter masks the driver keeps (each costs n_rows bytes), as a Corpus does.
MASK_CACHE_SIZE = 64
#: Records kept for repeated lookups of the same rows (hits, explain, traces).
RECORD_CACHE_SIZE = 4096


def _readonly(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.setflags(write=False)
    return view


class ShardedCorpus(ShardedUpdates):
    """A corpus split into shards, served in-process or by Ray actors; a drop-in for :class:`~irflow.store.corpus.Corpus`.

    Made by :meth:`open` (or :func:`irflow.open_corpus` on a sharded
    directory, or :func:`irflow.shard`), not by hand.  Shards are checked
    against the manifest when opened.  It takes a corpus's updates
    (``add``, ``upsert``, ``delete``, ``put_artifact``, ``delete_artifact``,
    ``batch``, ``compact``, ``refresh``: :mod:`irflow.shard.living`) and
    answers afterwards as the single corpus after the same operations.
    ``close()`` (or a ``with`` block) releases the shards (Ray actors are
    ended).
    """

    def __init__(self, root: Path, manifest: ShardManifest, backend: Backend, rows: RowMap, *,
                 embedder: Any = None) -> None:
        self.path = root
        self.manifest = manifest
        self.name = manifest.name
        self.backend = backend
        self.rows = rows
        self._held: contextlib.ExitStack | None = None  # the shards' generations, held against removal (Ray)
        self._options: dict[str, Any] = dict(ray=None, embedder=embedder, verify=True, ray_options={})
        self._version = 0  # one more per sharding served (updates, refresh)
        self._pinned = None  # the state snapshot() hands out (irflow.shard.living)
        self._unique: tuple[ShardManifest, bool] | None = None  # one_record_per_artifact of a manifest
        self._merge_policy = MergePolicy()
        self._lock_timeout: float | None = LOCK_TIMEOUT
        self._lock = threading.RLock()
        spec = None if manifest.embedder is None else manifest.embedder.get("spec")
        self._query_embedder = LazyEmbedder(embedder if embedder is not None else spec)
        self._analyzer = Analyzer.from_dict(manifest.analyzer)
        self._masks: collections.OrderedDict[Any, tuple[np.ndarray, Any]] = collections.OrderedDict()
        self._mask_refs: dict[int, tuple[np.ndarray, Any]] = {}
        self._means: collections.OrderedDict[Any, float] = collections.OrderedDict()
        self._records: collections.OrderedDict[int, Record] = collections.OrderedDict()
        self.warned = Warned()  # ("field" | "surface", name) already warned about, as one machine keeps them
        global_code = {kind: code for code, kind in enumerate(manifest.kinds)}
        # a trailing -1: a shard's code -1 (a deleted row of a kind no live record has) maps to -1
        self._code_maps = [np.array([global_code[k] for k in entry.kinds] + [-1], dtype=np.int32)
                           for entry in manifest.shards]
        self.shard_info = self._everywhere("info")
        prints = {info["math"] for info in self.shard_info}
        if len(prints) > 1:
            self.close()
            raise CorpusError(
                f"the shards of {self._label()} run with math libraries that compute logarithms differently "
                f"({len(prints)} variants): BM25's idf could differ in the last bit from shard to shard and ties "
                "would break inconsistently; serve every shard from machines with the same C library")

    # -- opening ----------------------------------------------------------------------------

    @classmethod
    def open(cls, path_or_name: str | os.PathLike[str], *, ray: Any = None, embedder: Any = None,
             verify: bool = True, **ray_options: Any) -> "ShardedCorpus":
        """Open the sharded corpus at a path (or by name under ``$IRFLOW_HOME/corpora``).

        ``ray``: None serves the shards in this process; ``"auto"`` puts each
        in an actor of a Ray cluster irflow starts locally (contained and
        offline, see :mod:`irflow.shard.ray_backend`) or of the one this
        process is already connected to; any other string is the address of
        an existing cluster to join, untouched.  Each shard is the
        generation ``shards.json`` names, held against removal while it
        opens (with Ray, until :meth:`close`: a restarted actor reopens it),
        verified (checksums unless ``verify=False``) and checked against the
        manifest; a missing, damaged or rebuilt shard refuses to open,
        naming the shard and the file.  A sharding committed while this
        opens is opened instead: always one whole sharding (see
        :mod:`irflow.shard.disk`).
        """
        root = resolve_corpus_path(path_or_name)
        if ray is None and ray_options:
            raise TypeError(f"unexpected options {sorted(ray_options)} without ray=")
        options = dict(ray=ray, embedder=embedder, verify=verify, ray_options=ray_options)
        return open_committed(root, lambda manifest, rows, held: cls._make(root, manifest, rows, held, options))

    def close(self) -> None:
        """Release the shards (end their Ray actors, let writers remove their files); the corpus cannot answer afterwards."""
        self.backend.close()
        if self._held is not None:
            self._held.close()
            self._held = None

    def __enter__(self) -> "ShardedCorpus":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls to the shards ----------------------------------------------------------------

    @property
    def n_shards(self) -> int:
        return len(self.manifest.shards)

    def _run(self, method: str, calls: Sequence[Call]) -> list[Any]:
        """One answer per call (all of them, or an error), re-raising the warnings the shards raised."""
        answers = self.backend.run(method, calls)
        seen: set[tuple[type, str]] = set()
        for _, raised in answers:
            for category, message in raised:
                if (category, message) not in seen:
                    seen.add((category, message))
                    warnings.warn(category(message), stacklevel=4)
        return [result for result, _ in answers]

    def _everywhere(self, method: str, *args: Any) -> list[Any]:
        return self._run(method, [(s, args) for s in range(self.n_shards)])

    # -- what the corpus is -----------------------------------------------------------------

    @property
    def n_rows(self) -> int:
        """Rows of every shard, deleted ones included (global rows are stable)."""
        return self.manifest.n_rows

    def __len__(self) -> int:
        """Live records."""
        return self.manifest.live

    def one_record_per_artifact(self) -> bool:
        """Whether no two live records share an artifact: asked of each shard once per sharding served.

        A shard holds whole artifacts, so the corpus holds each at most once
        when every shard does (see :mod:`irflow.store.artifact_facts`).
        """
        known = self._unique
        if known is None or known[0] is not self.manifest:
            known = (self.manifest, all(self._everywhere("one_record_per_artifact")))
            self._unique = known
        return bool(known[1])

    @property
    def version(self) -> int:
        """The number of shardings served so far before this one (0 as opened; one more per update or refresh)."""
        return self._version

    @property
    def kinds(self) -> tuple[str, ...]:
        """Surface kinds in order of first appearance in the global row order (as one machine has them)."""
        return tuple(self.manifest.kinds)

    @property
    def dim(self) -> int | None:
        return None if self.manifest.embedder is None else int(self.manifest.embedder["dim"])

    @property
    def analyzer(self) -> Analyzer:
        return self._analyzer

    @property
    def embedder_spec(self) -> str | None:
        return self._query_embedder.spec

    @property
    def embedder(self) -> Embedder | None:
        """The query embedder (the manifest's spec, or the one passed to open), resolved on first use."""
        return self._query_embedder.get()

    @property
    def settings(self) -> CorpusSettings:
        """The embedder and analyzer every shard ranks with, by name (the corpus protocol; loads no model)."""
        return CorpusSettings(self.embedder_spec or ("none" if self.dim is None else "custom"), self._analyzer.name)

    def _label(self) -> str:
        return f"corpus {self.name!r}" if self.name else "this corpus"

    def __repr__(self) -> str:
        live = len(self)
        rows = f"{self.n_rows}" if live == self.n_rows else f"{self.n_rows} ({live} live)"
        return (f"ShardedCorpus(name={self.name!r}, rows={rows}, shards={self.n_shards}, "
                f"backend={self.backend.description!r}, kinds={self.kinds}, "
                f"embedder={self.embedder_spec or ('none (lexical-only)' if self.dim is None else 'custom')!r}, "
                f"analyzer={self._analyzer.name!r})")

    # -- candidates -------------------------------------------------------------------------

    def candidate_mask(self, filter: "Mapping[str, Any] | CompiledFilter | None" = None,
                       surfaces: Iterable[str] | str | None = None) -> np.ndarray:
        """Rows passing *filter* whose kind is in *surfaces*, live only: read-only bool (n_rows,), as one machine's.

        The filter and the kinds are checked against the whole corpus here
        (one machine's errors and warnings); each shard computes its part.
        """
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
                return cached[0]
        if kinds is not None:  # the same rule and words as one machine
            check_surfaces(self.kinds, self._label(), tuple(dict.fromkeys(kinds)), self.warned)
        if compiled.fields:
            self._check_fields(compiled.fields)
        ref = ("spec", compiled.spec, None if kinds is None else list(kinds))
        mask = _readonly(self.rows.join(self._everywhere("mask", ref)))
        with self._lock:
            if key is not None:
                self._masks[key] = (mask, ref)
                self._mask_refs[id(mask)] = (mask, ref)
                while len(self._masks) > MASK_CACHE_SIZE:
                    old, _ = self._masks.popitem(last=False)[1]
                    self._mask_refs.pop(id(old), None)
        return mask

    def _check_fields(self, paths: Sequence[str]) -> None:
        """Warn, once per path, about a filter path no live record of any shard has (as one machine does)."""
        todo = [p for p in paths if ("field", p) not in self.warned]
        if not todo:
            return
        anywhere = np.asarray(np.array(self._everywhere("fields_present", todo), dtype=bool).any(axis=0))
        present: list[bool] = anywhere.tolist()
        known: list[str] | None = None  # the fields every shard has, asked once (not once per unknown path)
        for path, found in zip(todo, present):
            if found or not self.warned.first("field", path):
                continue
            if known is None:
                known = sorted(set().union(*self._everywhere("field_paths")))
            warn_unknown_field(self._label(), path, known, stacklevel=4)

    def _refs(self, mask: np.ndarray | None) -> list[Any]:
        """What each shard is sent for *mask*: nothing, its filter (a mask made here), or its rows."""
        if mask is None:
            return [None] * self.n_shards
        with self._lock:
            known = self._mask_refs.get(id(mask))
        if known is not None and known[0] is mask:
            return [known[1]] * self.n_shards
        array = np.asarray(mask)
        if array.dtype != np.bool_ or array.shape != (self.n_rows,):
            raise ValueError(f"a candidate mask must be a bool array of shape ({self.n_rows},), got "
                             f"{array.dtype} {array.shape}")
        return [("rows", part) for part in self.rows.split(array)]

    # -- queries ----------------------------------------------------------------------------

    def tokenize_queries(self, texts: Sequence[str] | str) -> list[list[str]]:
        """Query tokens, cut by the analyzer every shard was built with."""
        return self._analyzer.tokenize_many([texts] if isinstance(texts, str) else texts)

    def embed_queries(self, texts: Sequence[str] | str) -> np.ndarray:
        """Query vectors, float32 (q, dim) normalized, embedded here once per batch."""
        if self.dim is None:
            raise EmbedderError(
                f"{self._label()} is lexical-only (built with embedder=None): it has no vectors, so dense search "
                "is unavailable; use lexical search, or rebuild with an embedder (irflow.build(records) embeds with "
                "the model when the models extra is installed, else 'hash')")
        embedder = self.embedder
        if embedder is None:
            raise EmbedderError(
                f"{self._label()} was built with a custom embedder or precomputed vectors, which cannot be restored "
                "from disk; pass the embedder: irflow.open_corpus(path, embedder=...)")
        check_digest(embedder, None if self.manifest.embedder is None else self.manifest.embedder.get("digest"),
                     self._label())
        vectors = embedder.embed_queries([texts] if isinstance(texts, str) else list(texts))
        check_dimension(embedder.describe(), int(vectors.shape[1]), self.dim)
        return vectors

    def dense_topk(self, query_vectors: np.ndarray, mask: np.ndarray | None, fetch_k: int) -> TopK:
        """Exact cosine top *fetch_k*: each shard's top, merged (the vectors are checked by every shard)."""
        queries = np.asarray(query_vectors, dtype=np.float32)
        n_queries = 1 if queries.ndim == 1 else int(queries.shape[0])
        refs = self._refs(mask)
        parts = self._run("dense", [(s, (refs[s], queries, fetch_k)) for s in range(self.n_shards)])
        return merge_topk(parts, self.rows, n_queries, int(fetch_k))

    def bm25_topk(self, query_tokens: Sequence[Sequence[str]], mask: np.ndarray | None, fetch_k: int,
                  params: "BM25Params | Mapping[str, Any] | None" = None,
                  stats: BM25Stats | None = None) -> TopK:
        """BM25 top *fetch_k* with the whole corpus's statistics: two phases, then each shard's top, merged.

        ``stats`` supplied from outside skip phase one (as on a Corpus).
        """
        if not isinstance(params, BM25Params):
            params = BM25Params.from_mapping(params)
        tokens = [[str(t) for t in query] for query in query_tokens]
        refs = self._refs(mask)
        if stats is None:
            stats = self.bm25_stats(tokens, refs, params, mask)
        wire = (stats.n_docs, stats.total_length, dict(stats.df), stats.mean_okapi_idf)
        settings = attrs.asdict(params)
        parts = self._run("bm25", [(s, (refs[s], tokens, fetch_k, settings, wire)) for s in range(self.n_shards)])
        return merge_topk(parts, self.rows, len(tokens), int(fetch_k))

    def bm25_stats(self, tokens: Sequence[Sequence[str]], refs: Sequence[Any], params: BM25Params,
                   mask: np.ndarray | None = None) -> BM25Stats:
        """Phase one: the global statistics of the batch's distinct tokens (and Okapi's mean idf when needed)."""
        distinct = sorted({t for query in tokens for t in query})
        calls = [(s, (refs[s], distinct, params.stats, False)) for s in range(self.n_shards)]
        stats = combine_stats([PartialStats(*part) for part in self._run("partial_stats", calls)])
        if not any(stats.needs_vocabulary(params, query) for query in tokens):
            return stats
        key = self._stats_rows_key(refs, params, mask)
        with self._lock:
            mean = None if key is None else self._means.get(key)
        if mean is None:
            calls = [(s, (refs[s], [], params.stats, True)) for s in range(self.n_shards)]
            mean = combine_stats([PartialStats(*part) for part in self._run("partial_stats", calls)]).mean_okapi_idf
            if key is not None:
                with self._lock:
                    self._means[key] = mean  # type: ignore[assignment]
                    while len(self._means) > MASK_CACHE_SIZE:
                        self._means.popitem(last=False)
        return BM25Stats(n_docs=stats.n_docs, total_length=stats.total_length, df=stats.df, mean_okapi_idf=mean)

    def _stats_rows_key(self, refs: Sequence[Any], params: BM25Params, mask: np.ndarray | None) -> Any:
        """Which rows the statistics run over, as a cache key for the mean idf (the corpus is read-only)."""
        if params.stats == "corpus" or refs[0] is None:
            return ("all",)
        if refs[0][0] == "spec":
            try:
                return ("spec", cache_key(refs[0][1:]))
            except UnkeyableError:
                return None
        packed = np.packbits(np.asarray(mask, dtype=bool))
        return ("rows", hashlib.blake2b(packed.tobytes(), digest_size=16).hexdigest())

    # -- rows -------------------------------------------------------------------------------

    def _by_shard(self, rows: Any) -> tuple[np.ndarray, list[tuple[int, np.ndarray, np.ndarray]]]:
        """Global rows -> (rows, [(shard, positions, local rows)]) for the shards holding some."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        shard, local = self.rows.to_local(rows)
        groups = []
        for s in np.unique(shard).tolist():
            positions = np.flatnonzero(shard == s)
            groups.append((int(s), positions, local[positions]))
        return rows, groups

    def _gather(self, rows: Any, names: Sequence[str]) -> dict[str, np.ndarray]:
        rows, groups = self._by_shard(rows)
        out: dict[str, np.ndarray] = {}
        answers = self._run("columns", [(s, (local, list(names))) for s, _, local in groups])
        for (s, positions, _), answer in zip(groups, answers):
            for name in names:
                values = answer[name]
                if name == "kind_code":
                    values = self._code_maps[s][values]
                if name not in out:
                    out[name] = np.empty(rows.size, dtype=values.dtype)
                out[name][positions] = values
        for name in names:  # no rows asked: empty columns of the protocol's dtypes
            if name not in out:
                out[name] = np.empty(0, dtype=object if name.endswith("_id") else
                                     np.int32 if name == "kind_code" else np.int64)
        return out

    def artifact_ids_of(self, rows: Any) -> np.ndarray:
        """Artifact id of each global row (object array)."""
        return self._gather(rows, ["artifact_id"])["artifact_id"]

    def record_ids_of(self, rows: Any) -> np.ndarray:
        """Record id of each global row (object array)."""
        return self._gather(rows, ["record_id"])["record_id"]

    def kind_codes_of(self, rows: Any) -> np.ndarray:
        """Global surface kind code of each row (int32; an index into ``kinds``)."""
        return self._gather(rows, ["kind_code"])["kind_code"]

    def surface_indices_of(self, rows: Any) -> np.ndarray:
        """Plan position of each global row within its artifact (int64)."""
        return self._gather(rows, ["surface_index"])["surface_index"].astype(np.int64, copy=False)

    def records(self, rows: Any) -> list[Record]:
        """The records at global *rows*, in that order (fetched from their shards, cached)."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        with self._lock:
            found = {r: self._records.get(r) for r in dict.fromkeys(rows.tolist())}
        missing = np.array([r for r, rec in found.items() if rec is None], dtype=np.int64)
        if missing.size:
            _, groups = self._by_shard(missing)
            answers = self._run("records", [(s, (local.tolist(),)) for s, _, local in groups])
            with self._lock:
                for (_, positions, _), records in zip(groups, answers):
                    for row, record in zip(missing[positions].tolist(), records):
                        found[row] = record
                        self._records[row] = record
                while len(self._records) > RECORD_CACHE_SIZE:
                    self._records.popitem(last=False)
        return [found[r] for r in rows.tolist()]  # type: ignore[misc]

    def record(self, row: int) -> Record:
        """The record at global *row*."""
        return self.records([row])[0]

    def hits(self, rows: Any, scores: Any) -> list[SearchHit]:
        """SearchHits for global *rows* with *scores* (``source`` is the corpus name), one fetch per shard."""
        scores = np.asarray(scores, dtype=np.float64).reshape(-1).tolist()
        return [SearchHit(artifact_id=r.artifact_id, surface_kind=r.surface_kind, score=score, text=r.text,
                          metadata=r.metadata, source=self.name, surface_index=r.surface_index, record_id=r.id)
                for r, score in zip(self.records(rows), scores)]

    def hit(self, row: int, score: float) -> SearchHit:
        """A SearchHit for global *row* with *score*."""
        return self.hits([row], [score])[0]

    def row_of(self, record_id: str) -> int:
        """The global row of a live record (KeyError naming the id otherwise)."""
        for s, (local,) in enumerate(self._everywhere("row_of", [record_id])):
            if local >= 0:
                return int(self.rows.to_global(s, np.array([local]))[0])
        raise KeyError(f"record {record_id!r} is not in {self._label()}")

    # -- the ledger ---------------------------------------------------------------------------

    def records_for_artifact(self, artifact_id: str, *, surface_kind: str | None = None) -> list[Record]:
        """Every stored record of *artifact_id* in plan order (from the one shard holding it); see irflow.store.ledger."""
        for kind, value in self._everywhere("records_for_artifact", artifact_id, surface_kind):
            if kind == "records":
                return value
            if kind == "stale":
                raise KeyError(value)
        where = f" of corpus {self.name!r}" if self.name else ""
        raise NoLedgerEntry(f"the ledger{where} has no entry for artifact {artifact_id!r} (an unknown artifact, or "
                            "a corpus built without ledger bookkeeping)")

    def sibling_rows(self, artifact_ids: Sequence[str]) -> Siblings:
        """Each artifact's live rows in plan order, in global rows, from the shard holding it (see Siblings).

        An artifact lives in one shard: every shard is asked about every
        artifact (it does not know which holds it) and at most one lists it.
        """
        artifacts = [str(a) for a in artifact_ids]
        n = len(artifacts)
        groups: list[list[np.ndarray]] = [[] for _ in range(n)]
        listed = np.zeros(n, dtype=bool)
        stale: list[tuple[str, str]] = []
        for s, (offsets, rows, found, gone) in enumerate(self._everywhere("sibling_rows", artifacts)):
            rows = self.rows.to_global(s, np.asarray(rows, dtype=np.int64))
            for i in np.flatnonzero(found).tolist():
                groups[i].append(rows[offsets[i]:offsets[i + 1]])
            listed |= np.asarray(found, dtype=bool)
            stale.extend((str(a), str(r)) for a, r in gone)
        parts = [np.concatenate(g) if g else np.empty(0, np.int64) for g in groups]
        offsets = np.concatenate(([0], np.cumsum([p.size for p in parts], dtype=np.int64)))
        flat = np.concatenate(parts) if parts else np.empty(0, np.int64)
        return Siblings(offsets, flat, listed, stale)
