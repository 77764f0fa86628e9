"""Where shards are served: the backend protocol and the in-process backend.

A backend holds one :class:`~irflow.shard.worker.ShardWorker` per shard and
runs a method on some or all of them, returning one answer per shard in
shard order — all of them, or an error: never a subset.  The in-process
backend keeps the workers as plain objects in the caller's process (fast
tests, no Ray, a sharded corpus on one machine); the Ray backend
(:mod:`irflow.shard.ray_backend`) keeps each in a Ray actor.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Protocol, Sequence

from irflow.shard.manifest import ShardManifest
from irflow.shard.worker import ShardWorker

__all__ = ["Backend", "InProcessBackend", "Call"]

#: One call: the shard index and the method's arguments.
Call = tuple[int, tuple[Any, ...]]


class Backend(Protocol):
    """Runs worker methods on shards.  ``run`` returns (result, warnings) per call, in the calls' order."""

    n_shards: int
    description: str

    def run(self, method: str, calls: Sequence[Call]) -> list[tuple[Any, list[tuple[type, str]]]]:
        ...

    def close(self) -> None:
        ...


class InProcessBackend:
    """Every shard a plain :class:`ShardWorker` in this process, called one after the other.

    One call at a time (a lock): a worker's caches and its warning capture
    are not made for threads, and the shards run one after the other anyway.
    """

    description = "in-process"

    def __init__(self, root: Path, manifest: ShardManifest, *, verify: bool = True,
                 reuse: Sequence[ShardWorker] = ()) -> None:
        # a shard the manifest names as it was (same generation, same entry) keeps its worker: opened, caches and all
        known = {(worker.dir, worker.entry): worker for worker in reuse if worker.name == manifest.name}
        self.workers = [known.get((root / entry.dir, entry)) or
                        ShardWorker(root, entry, manifest.name, manifest.analyzer, manifest.embedder, verify=verify)
                        for entry in manifest.shards]
        self.n_shards = len(self.workers)
        self._lock = threading.Lock()

    def run(self, method: str, calls: Sequence[Call]) -> list[tuple[Any, list[tuple[type, str]]]]:
        with self._lock:
            return [self.workers[shard].call(method, *args) for shard, args in calls]

    def close(self) -> None:
        self.workers = []
