"""A tiny in-memory corpus implementing the corpus protocol (irflow.store.protocol), with numpy.

The engine tests (validation, recipes, executor mechanics, stage semantics)
run against this fake so they do not depend on the corpus/kernels modules;
``tests/test_stages_e2e.py`` runs the same recipes on a real corpus.
Counters (``embed_calls``, ``dense_calls``, ...) let tests check that each
stage runs once per batch.
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Sequence

import attrs
import numpy as np
from rank_bm25 import BM25Okapi

from irflow.engine.batches import Candidates, QueryBatch, Scale
from irflow.engine.ports import CANDIDATES, Port
from irflow.store.protocol import CorpusSettings, Siblings
from irflow.store.records import Record, SearchHit
from irflow.kernels.bm25 import BM25Params
from irflow.engine import finite_number, param, Stage
from irflow.engine.kinds import _source_subpackage

# irflow.stages / irflow.recipes live in the top-level stages/ and recipes/ folders; an install maps
# them into the package, a bare checkout needs them loaded under their package names first
_source_subpackage("stages")
_source_subpackage("recipes")


@attrs.frozen
class FakeTopK:
    query_index: np.ndarray
    row: np.ndarray
    score: np.ndarray
    n_queries: int


def tokens(text: str) -> list[str]:
    return text.lower().split()


def embed(texts: Sequence[str], dim: int = 32) -> np.ndarray:
    """Deterministic bag-of-words hash embedding, L2-normalized float32."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for i, text in enumerate(texts):
        for token in tokens(text):
            seed = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
            out[i] += np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms == 0, 1, norms)


def _topk(per_query: list[tuple[np.ndarray, np.ndarray]], fetch_k: int) -> FakeTopK:
    qi, rows, scores = [], [], []
    for i, (r, s) in enumerate(per_query):
        order = np.lexsort((r, -s))[:fetch_k]
        qi.append(np.full(order.size, i, dtype=np.int32))
        rows.append(r[order])
        scores.append(s[order])
    if not per_query:
        return FakeTopK(np.empty(0, np.int32), np.empty(0, np.int64), np.empty(0), 0)
    return FakeTopK(np.concatenate(qi), np.concatenate(rows).astype(np.int64),
                    np.concatenate(scores).astype(np.float64), len(per_query))


class FakeCorpus:
    """Records as dicts with artifact_id, surface_kind, text and optional metadata."""

    def __init__(self, records: Sequence[Mapping[str, Any]], name: str | None = "fake") -> None:
        self.name = name
        self._records = [dict(r) for r in records]
        self.n_rows = len(records)
        self.artifact_ids = np.array([r["artifact_id"] for r in records], dtype=object)
        self.record_ids = np.array([f"r{i}" for i in range(self.n_rows)], dtype=object)
        self.kinds = tuple(sorted({r["surface_kind"] for r in records}))
        self.kind_codes = np.array([self.kinds.index(r["surface_kind"]) for r in records], dtype=np.int32)
        self.live = np.ones(self.n_rows, dtype=bool)
        self.vectors = embed([r["text"] for r in records])
        self.row_tokens = [tokens(r["text"]) for r in records]
        self.calls: dict[str, int] = {"mask": 0, "embed": 0, "dense": 0, "tokenize": 0, "bm25": 0}
        self.embedded: list[list[str]] = []
        self.version = 0
        self.settings = CorpusSettings("fake-embed", "fake-tokens")

    def __len__(self) -> int:
        return int(self.live.sum())

    def candidate_mask(self, filter: Mapping[str, Any] | None = None, surfaces: Sequence[str] | None = None) -> np.ndarray:
        self.calls["mask"] += 1
        mask = self.live.copy()
        for key, value in (filter or {}).items():
            mask &= np.array([r.get("metadata", {}).get(key) == value for r in self._records], dtype=bool)
        if surfaces is not None:
            mask &= np.isin(np.array([r["surface_kind"] for r in self._records]), list(surfaces))
        return mask

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.calls["embed"] += 1
        self.embedded.append(list(texts))
        return embed(texts)

    def tokenize_queries(self, texts: Sequence[str]) -> list[list[str]]:
        self.calls["tokenize"] += 1
        return [tokens(t) for t in texts]

    def dense_topk(self, queries: np.ndarray, mask: np.ndarray | None, fetch_k: int) -> FakeTopK:
        self.calls["dense"] += 1
        rows = np.flatnonzero(mask) if mask is not None else np.arange(self.n_rows)
        scores = queries @ self.vectors[rows].T
        return _topk([(rows, scores[i].astype(np.float64)) for i in range(len(queries))], fetch_k)

    def bm25_topk(self, query_tokens: Sequence[Sequence[str]], mask: np.ndarray | None, fetch_k: int,
                  params: BM25Params | Mapping[str, Any] | None = None) -> FakeTopK:
        self.calls["bm25"] += 1
        rows = np.flatnonzero(mask) if mask is not None else np.arange(self.n_rows)
        docs = [self.row_tokens[r] for r in rows]
        # the protocol passes BM25Params (the lexical stage resolves its mapping once) or a mapping
        p = BM25Params.from_mapping(params)
        bm = BM25Okapi(docs, k1=p.k1, b=p.b, epsilon=p.epsilon)
        per_query = []
        for toks in query_tokens:
            scores = np.asarray(bm.get_scores(list(toks)), dtype=np.float64)
            has = np.array([any(t in set(doc) for t in toks) for doc in docs], dtype=bool)
            per_query.append((rows[has], scores[has]))
        return _topk(per_query, fetch_k)

    def record_ids_of(self, rows: Any) -> np.ndarray:
        return self.record_ids[np.asarray(rows, dtype=np.int64)]

    def artifact_ids_of(self, rows: Any) -> np.ndarray:
        return self.artifact_ids[np.asarray(rows, dtype=np.int64)]

    def kind_codes_of(self, rows: Any) -> np.ndarray:
        return self.kind_codes[np.asarray(rows, dtype=np.int64)]

    def surface_indices_of(self, rows: Any) -> np.ndarray:
        return np.zeros(np.asarray(rows).size, dtype=np.int64)

    def records(self, rows: Any) -> list[Record]:
        return [self.record(row) for row in np.asarray(rows, dtype=np.int64).tolist()]

    def hits(self, rows: Any, scores: Any) -> list[SearchHit]:
        return [self.hit(row, score) for row, score in zip(np.asarray(rows).tolist(), np.asarray(scores).tolist())]

    def sibling_rows(self, artifact_ids: Sequence[str]) -> Siblings:
        groups = [np.flatnonzero(self.artifact_ids == artifact) for artifact in artifact_ids]
        offsets = np.concatenate(([0], np.cumsum([g.size for g in groups])))
        return Siblings(offsets, np.concatenate(groups) if groups else [], [True] * len(groups))

    def record(self, row: int) -> Record:
        r = self._records[row]
        return Record(r["artifact_id"], r["surface_kind"], r["text"], r.get("metadata", {}), surface_index=0)

    def hit(self, row: int, score: float) -> SearchHit:
        r = self._records[int(row)]
        return SearchHit(r["artifact_id"], r["surface_kind"], score, r["text"], r.get("metadata", {}),
                         source=self.name, surface_index=0, record_id=self.record_ids[int(row)])


RECORDS = [
    {"artifact_id": "sqlparse", "surface_kind": "name", "text": "sqlparse", "metadata": {"owner": "andi"}},
    {"artifact_id": "sqlparse", "surface_kind": "description", "text": "a non validating sql parser",
     "metadata": {"owner": "andi"}},
    {"artifact_id": "httpx", "surface_kind": "name", "text": "httpx", "metadata": {"owner": "encode"}},
    {"artifact_id": "httpx", "surface_kind": "description", "text": "a next generation http client",
     "metadata": {"owner": "encode"}},
    {"artifact_id": "requests", "surface_kind": "name", "text": "requests", "metadata": {"owner": "psf"}},
    {"artifact_id": "requests", "surface_kind": "description", "text": "python http for humans client library",
     "metadata": {"owner": "psf"}},
    {"artifact_id": "lark", "surface_kind": "name", "text": "lark", "metadata": {"owner": "erez"}},
    {"artifact_id": "lark", "surface_kind": "description", "text": "a parsing toolkit parser for python",
     "metadata": {"owner": "erez"}},
    {"artifact_id": "networkx", "surface_kind": "name", "text": "networkx", "metadata": {"owner": "nx"}},
    {"artifact_id": "networkx", "surface_kind": "description", "text": "graph library for python networks",
     "metadata": {"owner": "nx"}},
]


def fake_corpus() -> FakeCorpus:
    return FakeCorpus(RECORDS)


def cands(queries: Sequence[str] | QueryBatch, per_query: Sequence[Sequence[tuple[int, float]]],
          scale: str = "cosine", name: str | None = None) -> Candidates:
    """Candidates from [[(row, score), ...] per query] in ranked order."""
    batch = queries if isinstance(queries, QueryBatch) else QueryBatch.of(queries)
    qi = [i for i, hits in enumerate(per_query) for _ in hits]
    rows = [r for hits in per_query for r, _ in hits]
    scores = [s for hits in per_query for _, s in hits]
    c = Candidates(batch, qi, rows, scores, scale)
    if name:
        c = c.with_provenance({f"{name}.score": c.score, f"{name}.rank": c.rank})
    return c


@attrs.frozen
class ShiftStage(Stage):
    """A third-party kind for registration tests: adds ``by`` to every score."""

    kind = "shift"
    inputs = (Port("candidates", CANDIDATES),)
    output = CANDIDATES
    by: float = param(0.0, validator=finite_number, doc="added to every score")

    def run(self, ctx: Any, candidates: Candidates) -> Candidates:
        return candidates.with_scores(candidates.score + self.by, Scale.CUSTOM)


@attrs.frozen
class EntryPointStage(ShiftStage):
    """Advertised through a (fake) entry point in the registration tests."""

    kind = "ep_shift"


@attrs.frozen
class BrokenStage(ShiftStage):
    """Returns the wrong type, for the executor's output check."""

    kind = "broken"

    def run(self, ctx: Any, candidates: Candidates) -> Any:
        return [1, 2, 3]


@attrs.frozen
class RaisingStage(ShiftStage):
    """Fails inside run, for the executor's error note."""

    kind = "raising"

    def run(self, ctx: Any, candidates: Candidates) -> Any:
        raise ZeroDivisionError("boom")


MODES_RECIPE = """
[recipe]
name = "modes"
output = "collapse"

[params]
k = 3
mode = "hybrid"

[choices]
mode = ["dense", "lexical", "hybrid"]

[stages.candidates]
kind = "filter"

[stages.dense]
kind = "dense"
inputs = ["candidates"]
when = { mode = ["dense", "hybrid"] }

[stages.lexical]
kind = "lexical"
inputs = ["candidates"]
when = { mode = ["lexical", "hybrid"] }

[stages.fuse]
kind = "fuse"
inputs = ["dense", "lexical"]

[stages.collapse]
kind = "collapse"
inputs = ["fuse"]
k = "$k"
"""
