"""A sharded corpus's updates, as a corpus has them: add, upsert, delete, put_artifact, delete_artifact, batch, compact.

Mixed into :class:`~irflow.shard.driver.ShardedCorpus`.  Every update is
made on disk by this process (:mod:`irflow.shard.updating`: one validation
over every shard, one commit of one new ``shards.json``), then the corpus
serves the sharding it committed — in this process, or in new Ray actors
(the previous ones are ended).  ``refresh()`` picks up what another
process committed.  A run that started before an update (it pinned
``snapshot()``) finishes on the sharding it started on, in this process.

>>> # sharded = irflow.open_corpus("corpus.sharded")
>>> # sharded.add([{"artifact_id": "graphy", "surface_kind": "name", "text": "graphy"}]).added
>>> # list(sharded) == list(single)        # the single corpus after the same operations
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from irflow.store.mergepolicy import MergePolicy
from irflow.store.records import Record
from irflow.store.update_methods import UpdateMethods
from irflow.store.updates import Operation, UpdateReport
from irflow.kernels.rowmap import RowMap
from irflow.shard.backend import Backend, InProcessBackend
from irflow.shard.manifest import ShardManifest
from irflow.shard.ray_backend import RayBackend  # imports Ray itself only when a RayBackend is made
from irflow.shard.worker import ShardWorker
from irflow.shard.disk import moved, open_committed
from irflow.shard.updating import update_sharded

__all__ = ["ShardedUpdates"]

#: Records fetched per round while iterating a sharded corpus.
ITER_CHUNK = 1024


class ShardedUpdates(UpdateMethods):
    """The update members of a sharded corpus (each one atomic commit of every shard it changes)."""

    # what ShardedCorpus holds (irflow.shard.driver)
    path: Path
    manifest: ShardManifest
    backend: Backend
    rows: RowMap
    _merge_policy: MergePolicy
    _lock_timeout: float | None
    _options: dict[str, Any]
    _held: contextlib.ExitStack | None
    _lock: Any
    _version: int
    _pinned: Any
    _everywhere: Any
    records: Any

    def _commit(self, operations: Sequence[Operation], progress: bool, batch_size: int) -> UpdateReport:
        """An update (see :class:`~irflow.store.update_methods.UpdateMethods`): new artifacts go to the last
        shard, everything else to the shard that holds its artifact."""
        return self._update(operations, progress, batch_size)

    def compact(self, *, progress: bool = False) -> UpdateReport:
        """Merge each shard's segments into one, without deleted rows (answers unchanged; global rows renumbered)."""
        return self._update([], progress, 512, compact=True)

    def refresh(self) -> bool:
        """Serve the sharding committed now (another process's update); True when it changed."""
        if not moved(self.path, self.manifest):
            return False
        self._reload()
        return True

    @property
    def lock_timeout(self) -> float | None:
        """How long an update waits for another process's commit to this sharded corpus (seconds; None: no limit)."""
        return self._lock_timeout

    @lock_timeout.setter
    def lock_timeout(self, seconds: float | None) -> None:
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0):
            raise ValueError(f"lock_timeout must be a number of seconds >= 0 or None, got {seconds!r}")
        self._lock_timeout = seconds

    def _update(self, operations: Sequence[Operation], progress: bool, batch_size: int, *,
                compact: bool = False) -> UpdateReport:
        report, committed = update_sharded(
            self.path, operations, embedder=self._options["embedder"], compact=compact,
            policy=self._merge_policy, lock_timeout=self._lock_timeout, progress=progress, batch_size=batch_size)
        if committed or moved(self.path, self.manifest):
            self._reload()
        return report

    @classmethod
    def _make(cls, root: Path, manifest: ShardManifest, rows: list[np.ndarray], held: contextlib.ExitStack,
              options: dict[str, Any], workers: Sequence[ShardWorker] = ()) -> Any:
        """The corpus of one committed sharding (its generations held while this runs); *workers* may be reused."""
        ray = options["ray"]
        backend: Backend | None = None
        try:
            if ray is None:
                backend = InProcessBackend(root, manifest, verify=options["verify"], reuse=workers)
            else:
                backend = RayBackend(root, manifest, address=ray, verify=options["verify"], **options["ray_options"])
            corpus = cls(root, manifest, backend, RowMap(rows), embedder=options["embedder"])  # type: ignore[call-arg]
        except BaseException:
            if backend is not None and ray is not None:
                backend.close()
            raise
        corpus._options = options
        if ray is not None:  # a Ray actor restarted later reopens its shard: keep it on disk until close()
            corpus._held = held.pop_all()
        return corpus  # (in this process: opened and mapped, and the maps outlive the files)

    def _reload(self) -> None:
        """Serve the sharding committed now (after an update, or another process's): one swap of the served state.

        A run that pinned the previous state (``snapshot()``) keeps reading
        it in this process; with Ray the previous actors are ended.
        """
        workers = self.backend.workers if isinstance(self.backend, InProcessBackend) else ()
        fresh = open_committed(self.path, lambda manifest, rows, held: type(self)._make(
            self.path, manifest, rows, held, self._options, workers))
        with self._lock:
            old_backend, old_held = self.backend, self._held
            version = self._version + 1
            state = {k: v for k, v in fresh.__dict__.items() if k not in ("_lock", "_merge_policy", "_lock_timeout")}
            self.__dict__.update(state)
            self._version = version
        if not isinstance(old_backend, InProcessBackend):  # in this process, a pinned state keeps its workers
            old_backend.close()
        if old_held is not None:
            old_held.close()

    # -- reading one state ------------------------------------------------------------------

    def snapshot(self) -> Any:
        """The sharding served now, as a corpus that never changes (a recipe run pins it when it starts)."""
        with self._lock:
            pinned = self._pinned
            if pinned is None or pinned.manifest is not self.manifest:
                pinned = copy.copy(self)
                pinned._pinned = pinned
                self._pinned = pinned
        return pinned

    def __iter__(self) -> Iterator[Record]:
        """The live records in global row order (one machine's ``list(corpus)``), from one state."""
        state = self.snapshot()
        parts = state._everywhere("columns", None, ["live"])
        rows = np.sort(np.concatenate([state.rows.to_global(s, np.flatnonzero(part["live"]))
                                       for s, part in enumerate(parts)]))
        for start in range(0, rows.size, ITER_CHUNK):
            yield from state.records(rows[start:start + ITER_CHUNK])
