"""Atomic, checksummed generation directories: how a corpus directory changes without ever being half-written.

A corpus directory holds one or more *generations* (``gen-000001/``, ...) and
a ``CURRENT`` file naming the live one.  A writer builds a new generation in a
temporary directory, fsyncs every file and the directory, renames it into
place and only then swaps ``CURRENT`` with ``os.replace`` — the one atomic
step.  A process killed at any point leaves ``CURRENT`` naming a complete,
verified generation (or, on a first build, no ``CURRENT`` at all).

Each generation's ``manifest.json`` lists its files with byte sizes and
checksums (CRC-32; blake2b in corpora of earlier releases, still verified);
``CURRENT`` also carries the manifest's own blake2b checksum, so every byte
a reader relies on is covered.  This module knows nothing about
corpora: :mod:`irflow.store.persist` decides which files a corpus has.

Readers and writers at the same time.  A writer removes the generations it
superseded, and a reader may be in the middle of opening one of them.  So a
reader opens a generation under a *shared* ``flock`` on the generation's
directory, from reading its manifest until its arrays are mapped and its JSON
parsed; a writer removes a superseded generation only if it gets an
*exclusive* lock on it without waiting — otherwise it leaves it, and a later
writer removes it.  Writers never wait for readers, and readers never read a
half-removed generation.  One window is left: between reading ``CURRENT`` and
locking the directory it names, a writer may commit and remove that
generation; the reader then finds it gone, sees that ``CURRENT`` moved, and
starts again from the new ``CURRENT`` (:data:`READ_ATTEMPTS` times at most,
with a short pause; the window is microseconds against a commit's
milliseconds).  Once a reader is done, its memory maps stay valid even when
the generation is removed (POSIX keeps an unlinked file's pages while they are
mapped).  Why locks rather than keeping the previous generation for a while:
a kept generation doubles the disk a rebuild needs and still fails a reader
slower than the grace period (a 1M-row corpus takes seconds to open), while
retries alone never finish when commits come faster than an open.  Without
``fcntl`` (Windows), or on a file system without ``flock``, the retry alone
remains.  A sharded corpus uses the same pieces for many directories at
once: its writer writes each shard's generation without making it live
(``write_generation(commit=False)``) and commits them all with one manifest
of its own; its readers hold the generations that manifest names
(:func:`holding`), not ``CURRENT``'s (:mod:`irflow.shard.disk`).

Nothing irflow did not write is ever deleted.  Clean-up considers only names
irflow makes (``gen-NNNNNN``, ``.tmp-gen-NNNNNN-xxxxxxxx``,
``.tmp-CURRENT-xxxxxxxx``), and only with proof: a generation or temporary
directory holds the marker file ``.irflow-generation`` (written first), and
only the files its manifest lists (or, for a killed writer's temporary
directory, its regular files) are removed; anything else stays, with a
warning.  A folder that is neither empty nor an irflow corpus is refused.

Every small file irflow reads from a corpus (``CURRENT``, ``manifest.json``,
the JSON files) is read with a size limit and only if it is a regular file,
so a FIFO cannot hang a reader and a link to ``/dev/zero`` cannot fill memory.

>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp()) / "c"
>>> with locked(root):
...     gen = write_generation(root, {"a.bin": b"hello"}, {"format": "demo"})
>>> read_current(root).name
'gen-000001'
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import stat
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: readers rely on the retry alone
    fcntl = None  # type: ignore[assignment]

from irflow.errors import CorpusError
from irflow.util.corpusmarks import CURRENT_FILE, CURRENT_LIMIT, GEN_RE, MARKER_FILE, MARKER_TEXT, POINTER_RE, TMP_GEN_RE, SHARDS_FILE
from irflow.util.unicode import json_text
from irflow.store.genfiles import (
    FILE_NAME_RE,
    GEN_PREFIX,
    LOCK_FILE,
    MANIFEST_FILE,
    MANIFEST_LIMIT,
    TMP_PREFIX,
    Generation,
    Payload,
    StreamedArray,
    FILE_CHECKSUM,
    buffer_digest,
    bytes_checksum,
    checksum,
    damaged,
    entry_checksum,
    flock,
    file_digest,
    remove_corpus,
    remove_superseded,
    fsync_dir,
    is_ours,
    kind_of,
    link_or_copy,
    lstat_mode,
    open_directory,
    parse_manifest,
    read_small_file,
    write_file,
)

__all__ = [
    "CURRENT_FILE",
    "FILE_CHECKSUM",
    "MANIFEST_FILE",
    "MARKER_FILE",
    "PAUSE_ENV",
    "READ_ATTEMPTS",
    "Generation",
    "Payload",
    "StreamedArray",
    "buffer_digest",
    "check_writable_root",
    "damaged",
    "checksum",
    "entry_checksum",
    "has_current",
    "holding",
    "locked",
    "mismatch",
    "pause_point",
    "point_current",
    "read_current",
    "read_small_file",
    "reading",
    "remove_corpus",
    "remove_superseded",
    "verify_files",
    "write_generation",
]

#: Test hook: ``"<point>@<marker path>"`` makes a writer touch the marker and
#: sleep when it reaches <point> (``after:<file>``, ``before-rename``,
#: ``before-current``; a sharding adds its own, see :mod:`irflow.shard.disk`),
#: so a test can SIGKILL it at a known moment; ``"<point>#<n>@<marker>"``
#: pauses at the n-th time the process reaches <point> (the second shard's).
PAUSE_ENV = "IRFLOW_TEST_PAUSE_WRITE"
#: What marks a sharded corpus's directory (the names irflow.shard.manifest gives them), for a clearer error.
SHARDED_MANIFEST = SHARDS_FILE
SHARD_DIR_RE = re.compile(r"^shard-\d{3,}\Z")
#: How often a reader starts over when writers keep replacing the generation it is about to open.
READ_ATTEMPTS = 50

logger = logging.getLogger(__name__)


def _read_pointer(root: Path) -> tuple[str, str]:
    """``(generation name, manifest checksum)`` from ``CURRENT``."""
    try:
        raw = read_small_file(root / CURRENT_FILE, CURRENT_LIMIT, root=root)
    except FileNotFoundError:
        if _looks_sharded(root):
            raise CorpusError(
                f"{root} is a sharded corpus (shard directories; see irflow.shard), not a single corpus: open it with "
                f"irflow.open_corpus({str(root)!r}), which serves its shards (or says what to do when its sharding "
                "was interrupted), and pass that corpus"
            ) from None
        raise CorpusError(
            f"{root} is not an irflow corpus: it has no {CURRENT_FILE} file (not a corpus, or its first build was "
            f"interrupted); build it with irflow.build(..., path={str(root)!r})"
        ) from None
    except OSError as exc:
        raise damaged(root, f"{CURRENT_FILE} cannot be read ({exc})") from None
    match = POINTER_RE.match(raw.decode("ascii", "replace"))
    if match is None:
        raise damaged(root, f"{CURRENT_FILE} does not hold '<generation> <manifest checksum>' (content {raw[:60]!r})")
    return match.group(1), match.group(2)


def _looks_sharded(root: Path) -> bool:
    """A sharded corpus's directory (its manifest, or shard directories): irflow.shard's, which the store does not import."""
    try:
        return (root / SHARDED_MANIFEST).is_file() or any(SHARD_DIR_RE.match(p.name) for p in root.iterdir())
    except OSError:
        return False


def has_current(root: Path) -> bool:
    """True when *root* holds an irflow ``CURRENT`` pointer (a corpus that finished at least one write).

    A ``CURRENT`` that is not irflow's (LevelDB directories have one too) does not count.
    """
    try:
        _read_pointer(root)
    except (CorpusError, OSError):
        return False
    return True


class _Vanished(Exception):
    """The generation a reader was opening is gone (a concurrent writer removed it)."""


def _check_root(root: Path) -> None:
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise CorpusError(f"no corpus at {root}: the path {what}; build one with irflow.build(..., path=...)")


def _read_manifest(root: Path, name: str, digest: str, recorded_in: str = CURRENT_FILE) -> Generation:
    """The generation *name*, its manifest checked against *digest*; _Vanished when its manifest is gone."""
    try:
        raw = read_small_file(root / name / MANIFEST_FILE, MANIFEST_LIMIT, root=root)
    except FileNotFoundError:
        raise _Vanished(name) from None
    except NotADirectoryError:
        raise damaged(root, f"{recorded_in} names {name}, which is not a directory") from None
    except OSError as exc:
        raise damaged(root, f"{name}/{MANIFEST_FILE} cannot be read ({exc})") from None
    if bytes_checksum(raw) != digest:
        raise damaged(root, f"{name}/{MANIFEST_FILE} does not match the checksum recorded in {recorded_in} (altered or truncated)")
    return Generation(root=root, name=name, manifest=parse_manifest(root, name, raw))


def read_current(root: Path) -> Generation:
    """The live generation of *root*: reads ``CURRENT`` and the manifest, checking the manifest's checksum.

    No reader lock: for writers holding :func:`locked` (the only ones who
    remove generations) and quick looks.  Readers that go on to read the
    generation's files use :func:`reading`.  Files are not verified here
    (see :func:`verify_files`), so a caller can verify only what it reads.
    """
    _check_root(root)
    name, digest = _read_pointer(root)
    try:
        return _read_manifest(root, name, digest)
    except _Vanished:
        raise damaged(root, f"{CURRENT_FILE} names {name}, but {name}/{MANIFEST_FILE} is missing") from None


@contextlib.contextmanager
def reading(root: Path) -> Iterator[Generation]:
    """The live generation of *root*, held under a shared lock for the ``with`` body (see the module doc).

    While the body runs no writer removes the generation, so its files can be
    verified, parsed and mapped.  A generation replaced and removed before it
    could be locked is skipped for the new one; CorpusError when ``CURRENT``
    names a generation that is gone while ``CURRENT`` stays put (damage), or
    when writers replace it :data:`READ_ATTEMPTS` times in a row.
    """
    _check_root(root)
    for attempt in range(READ_ATTEMPTS):
        if attempt:
            time.sleep(min(0.001 * attempt, 0.02))  # let a writer in mid-commit finish
        name, digest = _read_pointer(root)
        fd = open_directory(root / name)
        if fd is None:
            if _read_pointer(root)[0] != name:
                continue
            raise damaged(root, f"{CURRENT_FILE} names {name}, but that generation directory is missing")
        try:
            flock(fd, fcntl.LOCK_SH if fcntl is not None else 0)
            try:
                generation = _read_manifest(root, name, digest)
            except _Vanished:
                if _read_pointer(root)[0] != name:
                    continue  # removed by a writer before we held it: read the newer one
                raise damaged(root, f"{CURRENT_FILE} names {name}, but {name}/{MANIFEST_FILE} is missing") from None
            yield generation
            return
        finally:
            os.close(fd)  # closing releases the shared lock
    raise CorpusError(
        f"corpus at {root}: writers replaced its live generation {READ_ATTEMPTS} times while it was being opened; "
        "try again when the writes slow down"
    )


@contextlib.contextmanager
def holding(root: Path, name: str, digest: str, *, recorded_in: str) -> Iterator[Generation]:
    """The generation *name* of *root* — not CURRENT's: one a reader was told to open — held like :func:`reading`.

    For a sharded corpus, whose manifest (*recorded_in*) names each shard's
    generation and its manifest's checksum *digest*.  No retry here: when
    the generation is gone, CorpusError, and the caller, who knows where the
    name came from, decides whether its pointer moved meanwhile.
    """
    _check_root(root)
    if not GEN_RE.match(name):
        raise damaged(root, f"{recorded_in} names {name[:80]!r}, which is not a generation name")
    try:
        fd = open_directory(root / name)
    except OSError as exc:
        raise damaged(root, f"{recorded_in} names {name}, which cannot be opened as a directory ({exc})") from None
    if fd is None:
        raise damaged(root, f"{recorded_in} names {name}, but that generation directory is missing")
    try:
        flock(fd, fcntl.LOCK_SH if fcntl is not None else 0)
        try:
            generation = _read_manifest(root, name, digest, recorded_in)
        except _Vanished:
            raise damaged(root, f"{recorded_in} names {name}, but {name}/{MANIFEST_FILE} is missing") from None
        yield generation
    finally:
        os.close(fd)  # closing releases the shared lock


def moved(root: Path, name: str) -> bool:
    """True when ``CURRENT`` of *root* no longer names *name* (a writer committed since)."""
    try:
        return _read_pointer(root)[0] != name
    except CorpusError:
        return True


def verify_files(generation: Generation, names: Iterable[str] | None = None, *, checksums: bool = True) -> None:
    """Check that each listed file (all when *names* is None) is a regular file of its exact size and, if asked, checksum.

    Sizes are always checked (cheap, and they catch truncation); checksums
    catch altered bytes.  Raises CorpusError naming the file and the fix.
    """
    wanted = list(generation.files) if names is None else list(names)
    for file in wanted:
        path = generation.path(file)
        entry = generation.files[file]
        try:
            info = path.stat()
        except FileNotFoundError:
            raise damaged(generation.root, f"{generation.name}/{file} is missing") from None
        except OSError as exc:
            raise damaged(generation.root, f"{generation.name}/{file} cannot be read ({exc})") from None
        if not stat.S_ISREG(info.st_mode):
            raise damaged(generation.root, f"{generation.name}/{file} is {kind_of(info.st_mode)}, not a regular file")
        if info.st_size != entry["bytes"]:
            raise damaged(
                generation.root,
                f"{generation.name}/{file} has {info.st_size} bytes, the manifest says {entry['bytes']} (truncated or overwritten)",
            )
        if checksums:
            algorithm, digest = entry_checksum(entry)
            if file_digest(path, algorithm) != digest:
                raise damaged(generation.root, mismatch(generation, file))


def mismatch(generation: Generation, file: str) -> str:
    """What a file whose bytes do not match its checksum is told."""
    return f"{generation.name}/{file} does not match its checksum in the manifest (altered bytes)"


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """Hold the directory's writer lock (creating *root*): writers of one corpus run one at a time.

    An advisory ``flock`` on ``<root>/.lock``; the kernel drops it when the
    holder dies, so a killed writer never blocks the next one.
    """
    root.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
                     0o644)
    except OSError as exc:
        raise CorpusError(f"cannot lock the corpus at {root}: {root / LOCK_FILE} cannot be opened for writing "
                          f"({exc.strerror or exc}); it must be a regular file irflow may write") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CorpusError(f"cannot lock the corpus at {root}: {root / LOCK_FILE} is not a regular file; remove it")
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


# -- what irflow wrote ---------------------------------------------------------------------------------


def check_writable_root(root: Path) -> None:
    """Refuse to write a corpus into an existing directory that holds anything irflow did not write.

    Writing is safe over an irflow corpus (a new generation replaces it) or
    into an empty directory, or one holding only what an interrupted first
    build left; anything else might be the user's data.
    """
    if not root.exists():
        return
    if not root.is_dir():
        raise CorpusError(f"cannot write a corpus to {root}: it exists and is not a directory; choose another path")
    if has_current(root):
        return
    entries = list(root.iterdir())
    foreign = sorted(p.name for p in entries if not is_ours(p))
    if foreign == [CURRENT_FILE] and len(entries) > 1 and not stat.S_ISDIR(lstat_mode(root / CURRENT_FILE)):
        # everything else is irflow's: a damaged corpus (CURRENT garbled, or replaced by a link or a FIFO,
        # which os.replace swaps out without writing through); a rebuild is what repairs it
        return
    if foreign:
        shown = ", ".join(repr(n) for n in foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise CorpusError(
            f"cannot write a corpus to {root}: the directory is not an irflow corpus and is not empty (it holds "
            f"{shown}); irflow writes only into a new or empty directory or over an irflow corpus, and never deletes "
            "what it did not write — choose a new or empty directory, or move those files away"
        )


# -- writing -------------------------------------------------------------------------------------------


_REACHED: collections.Counter[str] = collections.Counter()


def pause_point(point: str) -> None:
    """The kill-mid-write test hook (see PAUSE_ENV); a no-op unless the variable names this point."""
    spec = os.environ.get(PAUSE_ENV)
    if not spec:
        return
    wanted, _, marker = spec.partition("@")
    wanted, _, nth = wanted.partition("#")
    if wanted != point:
        return
    _REACHED[point] += 1
    if _REACHED[point] != int(nth or 1):
        return
    Path(marker).write_text(point, encoding="utf-8")
    time.sleep(600)  # wait here to be killed


def _next_number(root: Path) -> int:
    numbers = [int(m.group(1)) for p in root.iterdir() if (m := GEN_RE.match(p.name) or TMP_GEN_RE.match(p.name))]
    return max(numbers, default=0) + 1


def point_current(root: Path, name: str, digest: str) -> None:
    """Make the complete generation *name* (its manifest's checksum *digest*) the live one: the one atomic step."""
    pointer_tmp = root / f"{TMP_PREFIX}{CURRENT_FILE}-{uuid.uuid4().hex[:8]}"
    write_file(pointer_tmp, f"{name} {digest}\n".encode("ascii"))
    os.replace(pointer_tmp, root / CURRENT_FILE)  # the commit point
    fsync_dir(root)


def write_generation(
    root: Path,
    files: Mapping[str, Payload],
    manifest: Mapping[str, Any],
    *,
    reuse_from: Generation | None = None,
    reuse: Iterable[str] = (),
    commit: bool = True,
) -> Generation:
    """Write a new generation of *root* and make it live atomically; call it while holding :func:`locked`.

    *files* are written fresh; *reuse* names files taken unchanged from
    *reuse_from* (hard-linked, their manifest entries copied).  *manifest* is
    extended with the ``files`` table.  Old generations are removed afterwards
    (those no reader holds; see the module doc).  ``commit=False`` stops once
    the generation is complete in place: ``CURRENT`` is not moved and nothing
    is removed (a sharded corpus commits all its shards' new generations in
    one step of its own, :mod:`irflow.shard.disk`).
    """
    check_writable_root(root)
    root.mkdir(parents=True, exist_ok=True)
    number = _next_number(root)
    name = f"{GEN_PREFIX}{number:06d}"
    tmp = root / f"{TMP_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    write_file(tmp / MARKER_FILE, MARKER_TEXT)  # first: the proof that irflow may clean this directory up
    table: dict[str, dict[str, Any]] = {}
    for file in reuse:
        if reuse_from is None:
            raise ValueError("reuse needs reuse_from")
        link_or_copy(reuse_from.path(file), tmp / file)
        table[file] = dict(reuse_from.files[file])
    for file, payload in files.items():
        if not FILE_NAME_RE.match(file) or file in (MANIFEST_FILE, MARKER_FILE, CURRENT_FILE):
            raise ValueError(f"invalid generation file name {file!r}")
        write_file(tmp / file, payload)
        # Hash what is on disk (not what we meant to write), after fsync.
        table[file] = {"bytes": (tmp / file).stat().st_size, FILE_CHECKSUM: file_digest(tmp / file, FILE_CHECKSUM)}
        pause_point(f"after:{file}")
    full = dict(manifest)
    full["files"] = dict(sorted(table.items()))
    raw = json_text(full, indent=1, sort_keys=True).encode("utf-8")  # a path's undecodable bytes as \\uXXXX
    write_file(tmp / MANIFEST_FILE, raw)
    fsync_dir(tmp)
    pause_point("before-rename")
    os.rename(tmp, root / name)
    fsync_dir(root)
    if not commit:
        return Generation(root=root, name=name, manifest=full)
    pause_point("before-current")
    point_current(root, name, bytes_checksum(raw))
    logger.info("committed %s: generation %s (%d files)", root, name, len(table))
    remove_superseded(root, keep=[name])
    return Generation(root=root, name=name, manifest=full)
