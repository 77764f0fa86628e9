"""A sharded corpus on disk: one atomic commit for all its shards, readers that hold what they open, clean-up after.

Why one commit point.  A sharded corpus is several corpus directories and
a manifest; switching them one by one (each shard's ``CURRENT``, then the
manifest) leaves moments when they disagree, and a writer killed in one of
them leaves a corpus that opens to neither sharding.  So the shards'
``CURRENT`` files decide nothing for a sharded corpus: ``shards.json``
names the generation of every shard (and seals itself with its checksum,
:mod:`irflow.shard.manifest`), and the one ``os.replace`` of that file
switches every shard at once.  The same step will commit an add, update or
delete across shards: it writes new generations of the shards it changes
and a manifest naming them.

Writing (a sharding, or a reshard over an existing one), under the
writers' lock ``<sharded>/.lock``:

1. each shard is written as a new generation of ``shard-NNN/`` that is
   *not* made live (``write_generation(commit=False)``: ``CURRENT`` is not
   moved, nothing is removed); a sharding into more shards creates the
   directories it needs;
2. the manifest naming those generations replaces ``shards.json`` — the
   commit;
3. each shard directory's ``CURRENT`` is pointed at its new generation, so
   a shard still opens alone as a plain corpus (nothing a sharded reader
   relies on);
4. what the new sharding does not use is removed: other generations of the
   shard directories, shard directories it does not list, the rows files of
   version 1, a killed writer's temporary files — only what irflow
   provably wrote, and a generation a reader holds stays (the next writer
   removes it).

Killed before step 2, the previous sharding is untouched (its manifest names
its generations, which are all still there) and the next sharding removes
the new generations; killed after it, the new sharding is complete.  A
first sharding killed before step 2 leaves shard directories and no
``shards.json``: opening says that an interrupted sharding is there, and
running ``irflow shard`` again replaces it.

Reading: the manifest is read (and its seal checked), then every generation
it names is held under a shared ``flock`` (the plain corpus's protocol,
:func:`irflow.store.generations.holding`) from before its files are read
until they are mapped; a writer removes a generation only when it gets the
exclusive lock without waiting.  If a writer removed one between the
reader's reading the manifest and its locking, the manifest has moved: the
reader starts again from the new one (:data:`READ_ATTEMPTS` times at most).
A reader thus always opens one committed sharding, whole.
"""

from __future__ import annotations

import contextlib
import logging
import re
import stat
import time
from pathlib import Path
from typing import Callable, TypeVar

import numpy as np

from irflow.errors import CorpusError
from irflow.store import generations as gens
from irflow.store.genfiles import LOCK_FILE, lstat_mode
from irflow.util.fileio import write_atomic
from irflow.util import npyfiles
from irflow.shard.manifest import (MANIFEST_FILE, ROWS_FILE, ROWS_FILE_V1_RE, SHARD_DIR_RE, ShardEntry, ShardManifest,
                                   check_layout, check_rows, in_shard, is_sharded, read_manifest,
                                   read_rows_v1)

__all__ = ["READ_ATTEMPTS", "prepare_root", "is_interrupted", "open_manifest", "moved", "commit", "hold",
           "open_committed"]

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: How often a reader starts over when writers keep committing while it opens.
READ_ATTEMPTS = gens.READ_ATTEMPTS
#: The temporary files write_atomic makes for shards.json (a writer killed mid-write leaves one).
_MANIFEST_TMP_RE = re.compile(r"^\.shards\.json\.\d+\.[0-9a-f]{8}\.tmp\Z")


# -- what irflow wrote ---------------------------------------------------------------------------------


def _is_leftover(path: Path) -> bool:
    """An entry of a sharded corpus's directory that irflow wrote (what an interrupted sharding may leave)."""
    mode = lstat_mode(path)
    if path.name == LOCK_FILE or _MANIFEST_TMP_RE.match(path.name) or ROWS_FILE_V1_RE.match(path.name):
        return stat.S_ISREG(mode)
    if not (SHARD_DIR_RE.match(path.name) and stat.S_ISDIR(mode)):
        return False
    try:
        gens.check_writable_root(path)  # a corpus, or only what an interrupted write of one left
    except CorpusError:
        return False
    return True


def is_interrupted(root: Path) -> bool:
    """True when *root* holds what a first sharding killed before its commit left (and nothing else)."""
    if not root.is_dir() or is_sharded(root):
        return False
    entries = list(root.iterdir())
    return any(SHARD_DIR_RE.match(p.name) for p in entries) and all(_is_leftover(p) for p in entries)


def _interrupted_error(root: Path) -> CorpusError:
    return CorpusError(
        f"{root} holds an interrupted sharding: irflow shard stopped before it finished (shard directories, but no "
        f"{MANIFEST_FILE} yet), so there is no corpus to open; run the irflow shard command again (irflow shard "
        f"CORPUS --shards N --out {root}, or irflow.shard(corpus, n, path)): it replaces what was left")


def prepare_root(root: Path) -> None:
    """Refuse a target that is not absent, empty, a sharded corpus or an interrupted sharding; create it."""
    if root.exists() and not root.is_dir():
        raise CorpusError(f"cannot shard into {root}: it is a file; choose a directory")
    if root.is_dir() and not is_sharded(root):
        foreign = sorted(p.name for p in root.iterdir() if not _is_leftover(p))
        if foreign:
            shown = ", ".join(repr(n) for n in foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise CorpusError(f"cannot shard into {root}: it is not empty and not a sharded corpus (no {MANIFEST_FILE}; "
                              f"it holds {shown}); choose a new or empty directory")
    root.mkdir(parents=True, exist_ok=True)


# -- writing -------------------------------------------------------------------------------------------


def commit(root: Path, manifest: ShardManifest) -> None:
    """Steps 2 to 4 of a sharding (see the module doc); the shards' generations are written, uncommitted."""
    gens.pause_point("shard:before-commit")
    write_atomic(root / MANIFEST_FILE, manifest.to_bytes(), "shard manifest", corpus_file=True)  # the commit point
    gens.pause_point("shard:after-commit")
    for entry in manifest.shards:
        if entry.generation is None:
            raise ValueError(f"shard {entry.index} names no generation: a sharding writes the current version")
        with gens.locked(root / entry.dir):
            gens.point_current(root / entry.dir, entry.generation, entry.manifest_checksum)
    logger.info("committed %s: %d shards (%s)", root, len(manifest.shards), MANIFEST_FILE)
    gens.pause_point("shard:before-cleanup")
    _clean(root, manifest)


def _clean(root: Path, manifest: ShardManifest) -> None:
    """Step 4: remove what the committed *manifest* does not use and irflow provably wrote (holding the lock)."""
    used = {entry.dir: entry.generation for entry in manifest.shards}
    for path in sorted(root.iterdir()):
        try:
            if SHARD_DIR_RE.match(path.name) and _is_leftover(path):
                with gens.locked(path):
                    if path.name in used:
                        gens.remove_superseded(path, keep=[str(used[path.name])])
                    else:
                        gens.remove_corpus(path)
            elif (_MANIFEST_TMP_RE.match(path.name) or ROWS_FILE_V1_RE.match(path.name)) and _is_leftover(path):
                path.unlink()
        except OSError as exc:  # best effort: a leftover costs disk space, never correctness
            logger.warning("could not remove %s (%s)", path, exc)


# -- reading -------------------------------------------------------------------------------------------


def open_manifest(root: Path) -> ShardManifest:
    """The committed manifest of *root* (an interrupted first sharding is said as such)."""
    if is_interrupted(root):
        raise _interrupted_error(root)
    return read_manifest(root)


def moved(root: Path, manifest: ShardManifest) -> bool:
    """True when ``shards.json`` is no longer *manifest* (a writer committed since it was read)."""
    try:
        return read_manifest(root).digest != manifest.digest
    except CorpusError:
        return True


def _rows(generation: gens.Generation, entry: ShardEntry) -> np.ndarray:
    """The global rows of a shard held as *generation*: a range, or its rows file (checksummed)."""
    if entry.rows_file is None:
        return np.arange(entry.first_row, entry.first_row + entry.n_rows, dtype=np.int64)
    gens.verify_files(generation, [ROWS_FILE])
    path = generation.path(ROWS_FILE)
    try:
        rows = npyfiles.load(path)  # threads: one header at a time
    except (OSError, ValueError) as exc:
        raise CorpusError(f"{path} is unreadable ({exc})") from None
    return check_rows(path, entry, rows)


def hold(root: Path, manifest: ShardManifest, stack: contextlib.ExitStack) -> list[np.ndarray]:
    """Hold every generation *manifest* names (shared locks, released when *stack* closes); their global rows.

    A version-1 manifest names no generation: nothing is held, and its rows
    files are read from beside the shards.
    """
    rows = []
    for entry in manifest.shards:
        shard_dir = root / entry.dir
        if not shard_dir.is_dir():
            raise CorpusError(f"shard {entry.index} is missing from disk: {shard_dir} does not exist; the sharded "
                              "corpus is incomplete — restore the shard or shard the corpus again")
        if entry.generation is None:
            rows.append(read_rows_v1(root, entry))
            continue
        try:
            generation = stack.enter_context(gens.holding(shard_dir, entry.generation, entry.manifest_checksum,
                                                          recorded_in=str(root / MANIFEST_FILE)))
            rows.append(_rows(generation, entry))
        except CorpusError as error:
            raise in_shard(entry.index, shard_dir, error) from None
    return rows


def open_committed(root: Path, make: Callable[[ShardManifest, list[np.ndarray], contextlib.ExitStack], T]) -> T:
    """``make(manifest, global rows, held)`` on the sharding committed at *root*, its shards' generations held.

    The generations stay held while ``make`` runs and are released when it
    returns, unless it keeps them (``held.pop_all()``).  A CorpusError while
    a writer commits another sharding is no damage: ``make`` runs again on
    the new one (:data:`READ_ATTEMPTS` times at most).
    """
    for attempt in range(READ_ATTEMPTS):
        if attempt:
            time.sleep(min(0.001 * attempt, 0.02))  # let a writer in mid-commit finish
        manifest = open_manifest(root)
        try:
            with contextlib.ExitStack() as held:
                rows = hold(root, manifest, held)
                check_layout(root, manifest, rows)
                return make(manifest, rows, held)
        except CorpusError:
            if moved(root, manifest):
                continue  # a writer committed another sharding meanwhile: open that one
            raise
    raise CorpusError(f"sharded corpus at {root}: writers replaced its {MANIFEST_FILE} {READ_ATTEMPTS} times while it "
                      "was being opened; try again when the writes slow down")
