"""Two corpora, A and B, and the answers of each: what a sharded corpus between them must give, bit for bit.

The crash and concurrency tests of sharded corpora (``test_sharded_commit.py``,
``hostile_shard.py``) shard A into a directory, reshard B over it while
killing the writer or reading, and then ask whether the directory answers
exactly as the unsharded A or the unsharded B (``search()`` hits and scores
to the bit, lexical, dense and hybrid, the hits' ``source`` included).  A's
records are grouped by artifact (contiguous shards), B's interleaved (its
shards keep their global rows in a file), so a sharding of either is told
apart from the other and from any mixture.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import engine_fakes  # noqa: F401  (maps irflow.stages / irflow.recipes in a bare checkout)
import irflow
from irflow.store.corpus import build
from irflow.store.generations import PAUSE_ENV
from shard_corpus import records

REPO = Path(__file__).resolve().parents[1]
QUERIES = ("fast python parser", "graph network tool", "sql schema query")
MODES = ("lexical", "dense", "hybrid")


def build_sources(where: Path) -> tuple[Path, Path]:
    """The plain corpora A (24 artifacts, grouped) and B (30 artifacts, interleaved) under *where*."""
    a, b = where / "A", where / "B"
    build(records(24, seed=3), embedder="hash", path=a)
    build(records(30, seed=11, interleave=True), embedder="hash", path=b)
    return a, b


def answers(corpus: Any) -> dict[tuple[str, str], list[tuple[Any, ...]]]:
    """Every hit of every query and mode, its score as hex: equal only when equal to the bit."""
    out = {}
    for query in QUERIES:
        for mode in MODES:
            hits = irflow.search(corpus, query, mode=mode, k=10)
            out[query, mode] = [(h.record_id, h.score.hex(), h.artifact_id, h.surface_kind, h.text, h.metadata,
                                 h.source, h.surface_index) for h in hits]
    return out


def answers_of(path: Path) -> dict[tuple[str, str], list[tuple[Any, ...]]]:
    """The answers of the (sharded or plain) corpus at *path*, opened afresh and closed."""
    corpus = irflow.open_corpus(path)
    try:
        return answers(corpus)
    finally:
        close = getattr(corpus, "close", None)
        if close is not None:
            close()


def spawn_shard(source: Path, n: int, out: Path, *, pause: str | None = None, marker: Path | None = None
                ) -> subprocess.Popen:
    """``irflow shard SOURCE --shards N --out OUT`` in a child process, paused at *pause* if given (PAUSE_ENV)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop(PAUSE_ENV, None)
    if pause is not None:
        env[PAUSE_ENV] = f"{pause}@{marker}"
    return subprocess.Popen([sys.executable, "-m", "irflow", "shard", str(source), "--shards", str(n), "--out",
                             str(out)], env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def layout(root: Path) -> dict[str, list[str]]:
    """What a sharded corpus directory holds: its entries, and each shard directory's."""
    out = {".": sorted(p.name for p in root.iterdir())}
    for path in sorted(root.iterdir()):
        if path.is_dir():
            out[path.name] = sorted(p.name for p in path.iterdir())
    return out


def assert_clean(root: Path, n: int) -> None:
    """Exactly a committed sharding of n shards: no leftover of an older or interrupted one."""
    shards = [f"shard-{s:03d}" for s in range(n)]
    found = layout(root)
    assert found["."] == sorted([".lock", "shards.json", *shards]), found
    for name in shards:
        entries = found[name]
        assert entries[:2] == [".lock", "CURRENT"] and len(entries) == 3 and entries[2].startswith("gen-"), found
