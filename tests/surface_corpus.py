"""A small real corpus with several surfaces per artifact, and a fake reranker — for expand and recipe tests.

Records are given in a shuffled order with explicit ``surface_index`` so that
row order differs from plan order; one artifact has a gap in its plan
(pkg4: indices 0, 1, 2, 5, 6) so that windows measured in plan positions can be
told apart from positions in the sibling list.  Expectations in the tests
are computed from :func:`records` (plain Python), never through irflow.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from irflow.store.corpus import Corpus, build
from irflow.store.records import Record
from irflow.store.record_store import CorpusStore

WORDS = ["parser", "http", "client", "graph", "sql", "async", "python", "fast", "json", "tool", "network", "cli",
         "server", "cache", "query"]


def records() -> list[Record]:
    """39 records: 8 artifacts of 4 to 6 surfaces (name, description, readme chunks, deps); pkg4's plan has a gap."""
    rng = np.random.default_rng(11)
    out: list[Record] = []
    for a in range(8):
        artifact = f"pkg{a}"
        kinds = ["name", "description"] + ["readme_chunk"] * (1 + a % 3) + ["deps"]
        indices = list(range(len(kinds)))
        if a == 4:  # a gap in the plan: surfaces 3 and 4 never existed
            indices = [0, 1, 2, 5, 6][: len(kinds)]
        for kind, index in zip(kinds, indices):
            words = " ".join(rng.choice(WORDS, size=5))
            out.append(Record(artifact, kind, f"{artifact} {kind} {index} {words}",
                              {"owner": "team" if a % 2 else f"user{a}"}, surface_index=index))
    order = rng.permutation(len(out))
    return [out[i] for i in order]


def build_corpus(name: str = "surfaces") -> Corpus:
    return build(records(), embedder="hash", name=name)


def plan(records_: Sequence[Record]) -> dict[str, list[Record]]:
    """artifact -> its records sorted by surface_index (the independent sibling sets)."""
    by_artifact: dict[str, list[Record]] = {}
    for record in records_:
        by_artifact.setdefault(record.artifact_id, []).append(record)
    return {a: sorted(rs, key=lambda r: r.surface_index) for a, rs in by_artifact.items()}


def with_ledger(corpus: Corpus, ledger: Mapping[str, Sequence[str]]) -> Corpus:
    """The same corpus with another ledger (a stale or partial one), everything else shared."""
    s = corpus.store
    store = CorpusStore(record_ids=list(s.record_ids), artifact_ids=list(s.artifact_ids),
                        surface_kinds=[s.kinds[c] for c in s.kind_codes], surface_indices=s.surface_indices,
                        texts=list(s.texts), metadata=list(s.metadata), ledger=ledger, name=s.name)
    return Corpus(store=store, postings=corpus.postings, analyzer=corpus.analyzer, vectors=corpus.vectors,
                  embedder=corpus.embedder, name=corpus.name)


def fake_score(query: str, segment: Mapping[str, Any]) -> float:
    """Query words found in the segment text, plus a deterministic per-id tie breaker below 0.001."""
    words = set(query.lower().split())
    found = sum(1 for w in segment["text"].lower().split() if w in words)
    tie = int.from_bytes(hashlib.blake2b(segment["id"].encode(), digest_size=4).digest(), "little") / 2**32
    return found + tie * 1e-3


class FakeReranker:
    """A deterministic Reranker that records every call as (query, [segment ids])."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(self, query: str, segments: Sequence[Mapping[str, Any]]) -> list[float]:
        self.calls.append((query, [s["id"] for s in segments]))
        return [fake_score(query, s) for s in segments]


def reference_expansion(by_artifact: Mapping[str, list[Record]], hits: Sequence[Record], window: int | None,
                        kinds: Sequence[str] | None = None, skip: frozenset[str] = frozenset()
                        ) -> list[tuple[str, str, int]]:
    """The expansion of one query's ranked hits, by hand: (record id, id of the hit it is attributed to, offset).

    Artifacts in the order of their best hit; surfaces in plan order; a surface
    that is a hit is its own; else the best-ranked hit whose window covers it.
    ``skip``: record ids that must not appear (tombstoned / stale).
    """
    out: list[tuple[str, str, int]] = []
    seen: list[str] = []
    for hit in hits:
        if hit.artifact_id not in seen:
            seen.append(hit.artifact_id)
    for artifact in seen:
        own = [h for h in hits if h.artifact_id == artifact]
        hit_ids = {h.id for h in own}
        for record in by_artifact[artifact]:
            if record.id in skip or (kinds is not None and record.surface_kind not in kinds):
                continue
            if record.id in hit_ids:
                out.append((record.id, record.id, 0))
                continue
            covering = [h for h in own if window is None or abs(record.surface_index - h.surface_index) <= window]
            if covering:
                out.append((record.id, covering[0].id, record.surface_index - covering[0].surface_index))
    return out
