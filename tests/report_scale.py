"""A large synthetic trace for the report's size and time bounds (not collected: imported by tests and benchmarks).

``big_trace(queries, stages, candidates)`` is a loaded-style trace (no corpus: identities and text excerpts
from tables, as a trace file gives them) of ``queries`` queries through a chain of ``stages`` stages of
``candidates`` candidates each: a lexical first stage over a corpus of ``50 * candidates`` rows, then
stages that rescore and re-sort what they receive (a fuse, weights, a rerank, a boost...), the last a
collapse.  Each stage writes provenance columns as irflow's own do.
"""

from __future__ import annotations

import numpy as np

from irflow.engine.batches import Candidates, QueryBatch
from irflow.engine.events import StageEvent
from irflow.engine.trace import Trace

KINDS = ["lexical", "fuse", "weight", "rerank", "boost", "rerank", "weight", "boost", "rerank", "collapse"]


def big_trace(queries: int = 1000, stages: int = 10, candidates: int = 1000, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    n_rows = 50 * candidates
    batch = QueryBatch.of([f"query {i} about topic {i % 37}" for i in range(queries)])
    query_index = np.repeat(np.arange(queries, dtype=np.int32), candidates)
    # distinct rows per query: one random sample, shifted per query (cheap for a thousand queries)
    sample = rng.choice(n_rows, size=candidates, replace=False)
    rows = ((sample[None, :] + 7919 * np.arange(queries)[:, None]) % n_rows).ravel()
    score = np.sort(rng.gamma(2.0, 3.0, size=(queries, candidates)), axis=1)[:, ::-1].ravel().copy()
    first = Candidates(batch, query_index, rows, score, "bm25", {"s0.score": score})
    events = [StageEvent("s0", "lexical", {"fetch_k": candidates}, {"query": batch}, {"query": ("query",)},
                         first, 12.5)]
    previous = first
    offsets = (np.arange(queries) * candidates)[:, None]
    for i in range(1, stages):
        name, kind = f"s{i}", KINDS[i % len(KINDS)]
        new_score = previous.score + rng.normal(0.0, 0.5, size=len(previous))
        # re-sorted within each query's block (every query holds the same number of candidates)
        order = (np.argsort(-new_score.reshape(queries, candidates), axis=1, kind="stable") + offsets).ravel()
        out = Candidates(batch, previous.query_index[order], previous.row[order], new_score[order], "custom",
                         {f"{name}.score": new_score[order], f"{name}.input_rank": previous.rank[order]})
        events.append(StageEvent(name, kind, {"param": i}, {f"s{i - 1}": previous}, {"candidates": (f"s{i - 1}",)},
                                 out, 3.25 * i))
        previous = out
    identities = {r: (f"rec{r:08d}", f"artifact{r // 3}", ("name", "description", "readme")[r % 3])
                  for r in range(n_rows)}
    excerpts = {r: f"text of record {r}: " + "lorem ipsum dolor sit amet " * 5 for r in range(n_rows)}
    trace = Trace(None, batch, {"k": candidates}, None, rows=identities, excerpts=excerpts,
                  header={"recipe": "synthetic", "corpus": "synthetic", "queries": list(batch.originals)})
    trace.extend(events)
    return trace
