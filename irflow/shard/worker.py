"""One shard's side of a sharded corpus: open it memory-mapped, answer the driver's calls in plain data.

A :class:`ShardWorker` lives wherever its shard is served — in the driver's
process (the in-process backend) or in a Ray actor — and is the same code
in both.  It holds one ordinary :class:`~irflow.store.corpus.Corpus` opened from
the shard's directory and checked against the shard manifest.  Its answers
are numpy arrays, lists and tuples in *local* rows (the driver adds the
shard's global rows), never objects that hold the corpus, so they cross a
process boundary as they are.

Candidate masks travel as references: ``("spec", filter, surfaces)`` — the
shard computes (and caches) its part of the mask from the filter itself, so
a query batch ships a few bytes instead of a row-sized array — or
``("rows", local_mask)`` for a mask the driver did not make from a filter.

Every call goes through :meth:`ShardWorker.call`, which collects the
warnings the call raised so the driver can raise them in the caller's
process (a warning in a Ray actor would otherwise only reach its log).
"""

from __future__ import annotations

import collections
import hashlib
import math
import os
import struct
import time
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from irflow.kernels.bm25 import BM25Params, BM25Stats, partial_stats
from irflow.store.corpus import Corpus, open_corpus
from irflow.errors import CorpusError, FilterError, NoLedgerEntry
from irflow.store.generations import MANIFEST_FILE as GENERATION_MANIFEST
from irflow.store.generations import checksum, read_current
from irflow.store.ledger import records_for_artifact
from irflow.shard.manifest import MANIFEST_FILE, ShardEntry, in_shard

__all__ = ["ShardWorker", "math_fingerprint", "MaskRef"]

#: ``None`` (every live row), ``("spec", filter, surfaces)`` or ``("rows", local bool mask)``.
MaskRef = Any
#: Distinct filter masks a shard keeps (each costs its rows in bytes).
MASK_CACHE_SIZE = 64


def math_fingerprint() -> str:
    """A digest of this process's ``math.log`` on a fixed set of arguments.

    BM25's idf is ``math.log`` of document counts: C libraries may differ in
    the last bit of a logarithm, and shards that disagree could rank a tie
    differently.  Shards compare their fingerprints when a sharded corpus
    opens (see :class:`irflow.shard.ShardedCorpus`).
    """
    values = [math.log(x + 0.5) for x in range(1, 4097)]
    values += [math.log(1 + 1 / x) for x in range(1, 4097)]
    values += [math.log(float(1 << 40) / x) for x in range(1, 4097, 7)]
    return hashlib.blake2b(struct.pack(f"<{len(values)}d", *values), digest_size=8).hexdigest()


class ShardWorker:
    """A shard opened for serving: the driver's calls in local rows.

    ``root``: the sharded corpus directory; ``entry``: the shard's manifest
    entry; ``name``: the sharded corpus's name (hits and messages use it,
    as on one machine); ``analyzer`` / ``embedder``: what the manifest says
    every shard was built with.  Opening reads the generation the manifest
    names (a version-1 manifest: the shard's live one, checked against the
    build it recorded), verifies its files (checksums unless
    ``verify=False``); a CorpusError names the shard and the file.
    """

    def __init__(self, root: str | os.PathLike[str], entry: ShardEntry | Mapping[str, Any], name: str,
                 analyzer: Mapping[str, Any], embedder: Mapping[str, Any] | None, verify: bool = True) -> None:
        self.entry = entry if isinstance(entry, ShardEntry) else ShardEntry(**entry)
        self.dir = Path(root) / self.entry.dir
        label = f"shard {self.entry.index} ({self.dir})"
        if not self.dir.is_dir():
            raise CorpusError(f"{label} is missing from disk; the sharded corpus is incomplete — restore the shard "
                              "or shard the corpus again")
        if self.entry.generation is not None:  # the generation the manifest names, held while it is opened
            named = (self.entry.generation, self.entry.manifest_checksum, str(Path(root) / MANIFEST_FILE))
            try:
                self.corpus: Corpus = open_corpus(self.dir, verify=verify, generation=named)
            except CorpusError as error:
                raise self._damaged(error) from None
        else:  # a version-1 manifest: the shard's CURRENT, checked against the build the manifest recorded
            try:
                before = self._identity()
                self.corpus = open_corpus(self.dir, verify=verify)
                after = self._identity()
            except CorpusError as error:
                raise self._damaged(error) from None
            if before != (self.entry.build_id, self.entry.manifest_checksum) or after != before:
                raise CorpusError(f"{label} is not the shard the manifest lists (build {after[0]!r}, the manifest "
                                  f"recorded {self.entry.build_id!r}): it was rebuilt or modified after sharding (a "
                                  "delete, a rebuild); shard the corpus again")
        corpus = self.corpus
        problems = []
        if corpus.n_rows != self.entry.n_rows:
            problems.append(f"{corpus.n_rows} rows, the manifest says {self.entry.n_rows}")
        if tuple(corpus.kinds) != tuple(self.entry.kinds):
            problems.append(f"surface kinds {list(corpus.kinds)}, the manifest says {list(self.entry.kinds)}")
        if corpus.analyzer.to_dict() != dict(analyzer):
            problems.append(f"analyzer {corpus.analyzer.to_dict()}, the other shards use {dict(analyzer)}")
        info = corpus.embedder_info
        mine = None if info is None else info.to_dict()
        if mine != (None if embedder is None else dict(embedder)):
            problems.append(f"embedder {mine}, the other shards use {embedder}")
        if problems:
            raise CorpusError(f"{label} disagrees with the shard manifest: {'; '.join(problems)}; shard the corpus again")
        # hits, ledger messages and the like name the sharded corpus, as one machine would
        self.name = name
        corpus.name = name
        corpus.store.name = name
        self._masks: collections.OrderedDict[Any, np.ndarray] = collections.OrderedDict()
        self._pause: tuple[str, float, str] | None = None

    def _identity(self) -> tuple[str, str]:
        """(build id, checksum of the manifest) of the shard's current generation."""
        generation = read_current(self.dir)
        return str(generation.manifest.get("build_id")), checksum(generation.dir / GENERATION_MANIFEST)

    # -- dispatch -------------------------------------------------------------------------

    def call(self, method: str, *args: Any) -> tuple[Any, list[tuple[type, str]]]:
        """Run ``method(*args)``; return its result and the warnings it raised, as (category, message)."""
        if method.startswith("_") or method in ("call",):
            raise AttributeError(f"ShardWorker has no callable {method!r}")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self._maybe_pause(method)
            try:
                result = getattr(self, method)(*args)
            except CorpusError as error:  # a file checked on first use (the vectors) is damaged
                raise self._damaged(error) from None
        return result, [(w.category, str(w.message)) for w in caught]

    def _damaged(self, error: CorpusError) -> CorpusError:
        """The shard's own CorpusError, naming the shard first (its files are one shard of a sharded corpus)."""
        return in_shard(self.entry.index, self.dir, error)

    def arm_pause(self, method: str, seconds: float, marker: str) -> int:
        """Fault-injection hook for tests: the next ``method`` call writes ``marker`` (holding this pid), then sleeps.

        A test kills the process while it sleeps (a shard dying mid-batch);
        the restarted worker starts unarmed.  Returns the pid.
        """
        self._pause = (method, float(seconds), marker)
        return os.getpid()

    def _maybe_pause(self, method: str) -> None:
        if self._pause is not None and self._pause[0] == method:
            _, seconds, marker = self._pause
            self._pause = None
            Path(marker).write_text(str(os.getpid()))
            time.sleep(seconds)

    # -- identity ---------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """What the driver checks and reports: rows, live rows, kinds, pid, math fingerprint."""
        return {"index": self.entry.index, "n_rows": self.corpus.n_rows, "live": len(self.corpus),
                "kinds": list(self.corpus.kinds), "pid": os.getpid(), "math": math_fingerprint()}

    def one_record_per_artifact(self) -> bool:
        """Whether no two live records of the shard share an artifact (its corpus decides, once per state)."""
        return bool(self.corpus.one_record_per_artifact())

    def ping(self) -> None:
        """Nothing: a round trip (health checks, and the benchmark's cost of a round)."""
        return None

    # -- candidates -------------------------------------------------------------------------

    def _mask(self, ref: MaskRef) -> np.ndarray | None:
        if ref is None:
            return None
        what, *rest = ref
        if what == "rows":
            return np.asarray(rest[0], dtype=bool)
        filter_spec, surfaces = rest
        key = (repr(filter_spec), None if surfaces is None else repr(sorted(map(repr, surfaces))))
        cached = self._masks.get(key)
        if cached is not None:
            self._masks.move_to_end(key)
            return cached
        mask = self._filter_mask(filter_spec, surfaces)
        self._masks[key] = mask
        while len(self._masks) > MASK_CACHE_SIZE:
            self._masks.popitem(last=False)
        return mask

    def _filter_mask(self, filter_spec: Any, surfaces: Sequence[Any] | None) -> np.ndarray:
        # The driver checked the filter and the surfaces against the whole corpus (and warned): a kind
        # or a field only some shards hold is no mistake here.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return self.corpus.candidate_mask(filter=filter_spec, surfaces=surfaces)
            except FilterError:
                if surfaces is None:
                    raise
                return np.zeros(self.corpus.n_rows, dtype=bool)  # none of the kinds is held here

    def mask(self, ref: MaskRef) -> np.ndarray:
        """The shard's part of a candidate mask (live rows only)."""
        mask = self._mask(ref)
        return self.corpus.live.copy() if mask is None else np.asarray(mask, dtype=bool)

    def partial_stats(self, ref: MaskRef, tokens: Sequence[str], mode: str, vocabulary: bool) -> tuple:
        """BM25 phase one: (rows, total length, df per token, vocabulary or None) over the statistics rows.

        The statistics rows are the candidates (``mode="candidates"``) or
        every live row (``"corpus"``), as :meth:`Corpus.bm25_topk` takes them.
        """
        view = self.corpus.snapshot()
        segments = getattr(view, "parts", None) or [view]  # a shard updated in place has several segments
        mask = None if mode == "corpus" else self._mask(ref)
        masks = [None] * len(segments) if mask is None else self._split(view, segments, mask)
        shares = [partial_stats(part.postings, part.stats_rows(m, mode), tokens, vocabulary=vocabulary)
                  for part, m in zip(segments, masks)]
        df: dict[str, int] = {}
        vocab: dict[str, int] | None = {} if vocabulary else None
        for share in shares:
            for token, count in share.df.items():
                df[token] = df.get(token, 0) + count
            if vocab is not None and share.vocabulary is not None:
                for token, count in share.vocabulary.items():
                    vocab[token] = vocab.get(token, 0) + count
        return (sum(p.n_docs for p in shares), sum(p.total_length for p in shares), df, vocab)

    @staticmethod
    def _split(view: Any, segments: Sequence[Any], mask: np.ndarray) -> list[np.ndarray]:
        """A shard-wide mask's part on each of its segments."""
        if len(segments) == 1:
            return [mask]
        split: list[np.ndarray] = view.rowmap.split(mask)
        return split

    def bm25(self, ref: MaskRef, tokens: Sequence[Sequence[str]], fetch_k: int, params: Mapping[str, Any],
             stats: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """BM25 phase two: this shard's top ``fetch_k`` scored with the global statistics."""
        n_docs, total_length, df, mean = stats
        supplied = BM25Stats(n_docs=n_docs, total_length=total_length, df=df, mean_okapi_idf=mean)
        top = self.corpus.bm25_topk(tokens, self._mask(ref), fetch_k, BM25Params(**params), stats=supplied)
        return top.query_index, top.row, top.score

    def dense(self, ref: MaskRef, vectors: np.ndarray, fetch_k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This shard's exact cosine top ``fetch_k`` (scores independent of the row range: see irflow.kernels.dense)."""
        top = self.corpus.dense_topk(vectors, self._mask(ref), fetch_k)
        return top.query_index, top.row, top.score

    # -- rows -------------------------------------------------------------------------------

    def columns(self, rows: np.ndarray, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Per-row columns at local ``rows`` (``None``: every row): record_id, artifact_id, kind_code, surface_index, live."""
        corpus = self.corpus
        if rows is None:
            rows = np.arange(corpus.n_rows, dtype=np.int64)
        # the corpus's own lookups: a shard of several segments numbers its kinds as its live records have them
        source = {"record_id": corpus.record_ids_of, "artifact_id": corpus.artifact_ids_of,
                  "kind_code": corpus.kind_codes_of, "surface_index": corpus.surface_indices_of,
                  "live": lambda r: corpus.live[r]}
        return {name: np.asarray(source[name](rows)) for name in names}

    def records(self, rows: Sequence[int]) -> list[Any]:
        """The records at local ``rows`` (no vectors)."""
        record = self.corpus.record
        return [record(int(r)) for r in rows]

    def row_of(self, record_ids: Sequence[str]) -> list[int]:
        """Local row of each live record id, -1 when this shard does not hold it live."""
        store = self.corpus.store
        return [store.row_of(rid) if rid in store else -1 for rid in record_ids]

    def sibling_rows(self, artifact_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
        """The ledger's live rows of each artifact (local rows, CSR), whether this shard lists it, stale entries."""
        siblings = self.corpus.sibling_rows(artifact_ids)
        return (np.asarray(siblings.offsets), np.asarray(siblings.rows), np.asarray(siblings.listed),
                [list(pair) for pair in siblings.stale])

    def records_for_artifact(self, artifact_id: str, surface_kind: str | None) -> tuple[str, Any]:
        """``("records", [...])``, ``("none", None)`` when this shard has no ledger entry, ``("stale", message)``."""
        try:
            return "records", records_for_artifact(self.corpus, artifact_id, surface_kind=surface_kind)
        except NoLedgerEntry:
            return "none", None
        except KeyError as error:
            return "stale", error.args[0] if error.args else str(error)

    # -- metadata fields (the driver's misspelled-field warning) ----------------------------

    def fields_present(self, paths: Sequence[str]) -> list[bool]:
        """Whether any live row of this shard has each field path (many paths: one walk indexing every field)."""
        columns, live = self.corpus.columns, self.corpus.live
        columns.prepare(paths)
        return [columns.column(path).present_in(live) for path in paths]

    def field_paths(self) -> list[str]:
        """Every dotted field path of the live records' metadata, sorted (one walk, kept until a delete)."""
        return self.corpus.field_paths()
