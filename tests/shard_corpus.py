"""Records for the sharded-corpus tests, and the comparison of a sharded run with the single-machine run.

The records are made so that the hard cases happen: words drawn from a
Zipf-like law (a few words are in most records, so Okapi idfs go negative
under filters and the mean idf over the candidates' vocabulary is needed),
artifacts of 1 to 6 surfaces, metadata that lets a filter empty whole shards
(``group`` follows the artifact order, and shards are consecutive runs of
artifacts), and an optional shuffle that interleaves artifacts in the row
order (shards then hold non-contiguous rows).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import engine_fakes  # noqa: F401  (maps irflow.stages / irflow.recipes in a bare checkout)
from irflow.engine.batches import Candidates

WORDS = ["python", "data", "parser", "fast", "http", "client", "graph", "sql", "async", "json", "tool", "network",
         "cli", "server", "cache", "query", "schema", "stream", "image", "audio", "vector", "index", "search",
         "token", "model", "train", "plot", "table", "file", "archive"]
KINDS = ["name", "description", "readme_chunk", "deps"]


def records(n_artifacts: int = 30, *, seed: int = 7, interleave: bool = False) -> list[dict[str, Any]]:
    """Records of ``n_artifacts`` artifacts (1 to 6 surfaces each), in artifact order or shuffled."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(WORDS) + 1) ** 1.1
    weights /= weights.sum()
    out: list[dict[str, Any]] = []
    for a in range(n_artifacts):
        artifact = f"pkg{a:02d}"
        metadata = {"owner": ["ann", "bob", "cy"][a % 3], "group": a * 4 // n_artifacts, "stars": int(a * 37 % 50),
                    "tags": sorted({str(t) for t in rng.choice(["web", "ml", "db", "cli"], size=2)}),
                    "lang": "rs" if a % 4 == 0 else "py"}
        if a % 5 == 0:
            metadata["license"] = "mit"
        n_surfaces = 1 + a % 6
        for s in range(n_surfaces):
            kind = KINDS[0] if s == 0 else KINDS[1] if s == 1 else KINDS[3] if s == n_surfaces - 1 and s > 2 \
                else KINDS[2]
            words = " ".join(rng.choice(WORDS, size=int(rng.integers(2, 12)), p=weights))
            out.append({"artifact_id": artifact, "surface_kind": kind, "text": f"{artifact} {words}",
                        "metadata": metadata, "surface_index": s})
    if interleave:
        out = [out[i] for i in np.random.default_rng(seed + 1).permutation(len(out))]
    return out


def assert_same_result(single: Any, sharded: Any, *, explain: bool = True) -> None:
    """Hits (ids, order, scores to the bit), every stage's output (provenance columns included), explain()."""
    a, b = single.hits, sharded.hits
    if single.single:
        a, b = [a], [b]
    assert [[(h.record_id, h.score.hex()) for h in hits] for hits in a] == \
        [[(h.record_id, h.score.hex()) for h in hits] for hits in b]
    assert a == b
    assert set(single.outputs) == set(sharded.outputs)
    for name, value in single.outputs.items():
        other = sharded.outputs[name]
        if isinstance(value, Candidates):
            assert value == other, f"stage {name!r} differs"
        elif isinstance(value, np.ndarray):
            assert np.array_equal(value, other), f"stage {name!r} differs"
    if explain:
        for q, hits in enumerate(a):
            for hit in hits[:3]:
                assert single.explain(hit, query=q).to_dict() == sharded.explain(hit, query=q).to_dict()
