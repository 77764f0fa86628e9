"""Atomic, checksummed generation directories: how a corpus directory changes without ever being half-written.

A corpus directory holds one or more *generations* (``gen-000001/``, ...) and
a ``CURRENT`` file naming the live one.  A writer builds a new generation in a
temporary directory, fsyncs every file and the directory, renames it into
place and only then swaps ``CURRENT`` with ``os.replace`` — the one atomic
step.  A process killed at any point leaves ``CURRENT`` naming a complete,
verified generation (or, on a first build, no ``CURRENT`` at all).

Each generation's ``manifest.json`` lists its files with byte sizes and
blake2b checksums; ``CURRENT`` also carries the manifest's own checksum, so
every byte a reader relies on is covered.  This module knows nothing about
corpora: :mod:`irflow.persist` decides which files a corpus has.

>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp()) / "c"
>>> with locked(root):
...     gen = write_generation(root, {"a.bin": b"hello"}, {"format": "demo"})
>>> read_current(root).name
'gen-000001'
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Union

import attrs
import numpy as np

from irflow.errors import CorpusError

try:  # POSIX advisory locks; on other platforms writers are simply not serialized
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "CURRENT_FILE",
    "MANIFEST_FILE",
    "PAUSE_ENV",
    "Generation",
    "checksum",
    "has_current",
    "locked",
    "read_current",
    "verify_files",
    "write_generation",
]

CURRENT_FILE = "CURRENT"
MANIFEST_FILE = "manifest.json"
LOCK_FILE = ".lock"
GEN_PREFIX = "gen-"
TMP_PREFIX = ".tmp-"
#: Test hook: ``"<point>@<marker path>"`` makes a writer touch the marker and
#: sleep when it reaches <point> (``after:<file>``, ``before-rename``,
#: ``before-current``), so a test can SIGKILL it at a known moment.
PAUSE_ENV = "IRFLOW_TEST_PAUSE_WRITE"

logger = logging.getLogger(__name__)

_GEN_RE = re.compile(r"^(?:\.tmp-)?gen-(\d{6,})")
_CHUNK = 1 << 20

#: What a generation file can be made from: raw bytes or an array for ``np.save``.
Payload = Union[bytes, np.ndarray]


def checksum(path: Path) -> str:
    """The blake2b (128-bit) hex digest of a file, read in 1 MiB chunks so huge arrays never load whole."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _bytes_checksum(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@attrs.frozen
class Generation:
    """One complete generation of a directory: its name and its parsed manifest.

    ``manifest["files"]`` maps each file name to ``{"bytes": int, "blake2b": str}``.
    """

    root: Path
    name: str
    manifest: Mapping[str, Any] = attrs.field(repr=False)

    @property
    def dir(self) -> Path:
        """The generation's directory."""
        return self.root / self.name

    @property
    def files(self) -> Mapping[str, Mapping[str, Any]]:
        """File name -> ``{"bytes", "blake2b"}`` as listed in the manifest."""
        return self.manifest["files"]

    def path(self, file: str) -> Path:
        """The path of one listed file (CorpusError when the manifest does not list it)."""
        if file not in self.files:
            raise CorpusError(
                f"{self.dir}: the manifest does not list {file!r}, which this corpus needs; "
                "the corpus is incomplete — rebuild it with irflow.build(..., path=...)"
            )
        return self.dir / file


def has_current(root: Path) -> bool:
    """True when *root* holds a ``CURRENT`` pointer (a corpus that finished at least one write)."""
    return (root / CURRENT_FILE).is_file()


def _damaged(root: Path, what: str) -> CorpusError:
    return CorpusError(f"corpus at {root}: {what}; the corpus is damaged — rebuild it with irflow.build(..., path={str(root)!r})")


def read_current(root: Path) -> Generation:
    """The live generation of *root*: reads ``CURRENT`` and the manifest, checking the manifest's checksum.

    Files are not verified here (see :func:`verify_files`), so a caller can
    verify only what it is about to read.
    """
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise CorpusError(f"no corpus at {root}: the path {what}; build one with irflow.build(..., path=...)")
    pointer = root / CURRENT_FILE
    try:
        text = pointer.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CorpusError(
            f"{root} is not an irflow corpus: it has no {CURRENT_FILE} file (not a corpus, or its first build was "
            f"interrupted); build it with irflow.build(..., path={str(root)!r})"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _damaged(root, f"{CURRENT_FILE} cannot be read ({exc})") from None
    parts = text.split()
    if len(parts) != 2 or not _GEN_RE.match(parts[0]) or parts[0].startswith(TMP_PREFIX):
        raise _damaged(root, f"{CURRENT_FILE} does not hold '<generation> <manifest checksum>' (content {text[:60]!r})")
    name = parts[0]
    manifest_path = root / name / MANIFEST_FILE
    try:
        raw = manifest_path.read_bytes()
    except FileNotFoundError:
        raise _damaged(root, f"{CURRENT_FILE} names {name}, but {name}/{MANIFEST_FILE} is missing") from None
    if _bytes_checksum(raw) != parts[1]:
        raise _damaged(root, f"{name}/{MANIFEST_FILE} does not match the checksum recorded in {CURRENT_FILE} (altered or truncated)")
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _damaged(root, f"{name}/{MANIFEST_FILE} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise _damaged(root, f"{name}/{MANIFEST_FILE} has no 'files' table")
    return Generation(root=root, name=name, manifest=manifest)


def verify_files(generation: Generation, names: Iterable[str] | None = None, *, checksums: bool = True) -> None:
    """Check that each listed file (all when *names* is None) exists with its exact size and, if asked, checksum.

    Sizes are always checked (cheap, and they catch truncation); checksums
    catch altered bytes.  Raises CorpusError naming the file and the fix.
    """
    wanted = list(generation.files) if names is None else list(names)
    for file in wanted:
        path = generation.path(file)
        entry = generation.files[file]
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise _damaged(generation.root, f"{generation.name}/{file} is missing") from None
        if size != entry["bytes"]:
            raise _damaged(
                generation.root,
                f"{generation.name}/{file} has {size} bytes, the manifest says {entry['bytes']} (truncated or overwritten)",
            )
        if checksums and checksum(path) != entry["blake2b"]:
            raise _damaged(generation.root, f"{generation.name}/{file} does not match its checksum in the manifest (altered bytes)")


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """Hold the directory's writer lock (creating *root*): writers of one corpus run one at a time.

    An advisory ``flock`` on ``<root>/.lock``; the kernel drops it when the
    holder dies, so a killed writer never blocks the next one.
    """
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _is_ours(name: str) -> bool:
    return name == LOCK_FILE or bool(_GEN_RE.match(name)) or name.startswith(TMP_PREFIX)


def check_writable_root(root: Path) -> None:
    """Refuse to write a corpus into an existing directory that holds something else.

    Writing is safe over an irflow corpus (a new generation replaces it) or
    into an empty directory; anything else might be the user's data, which a
    generation clean-up must never touch.
    """
    if not root.exists():
        return
    if not root.is_dir():
        raise CorpusError(f"cannot write a corpus to {root}: it exists and is not a directory; choose another path")
    if has_current(root):
        return
    foreign = [p.name for p in root.iterdir() if not _is_ours(p.name)]
    if foreign:
        raise CorpusError(
            f"cannot write a corpus to {root}: the directory is not an irflow corpus and is not empty "
            f"(holds {sorted(foreign)[:5]}); choose a new or empty directory"
        )


def _fsync_dir(path: Path) -> None:
    # Directory fsync makes a rename/creation durable; not every OS/filesystem supports it.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _pause_point(point: str) -> None:
    """The kill-mid-write test hook (see PAUSE_ENV); a no-op unless the variable names this point."""
    spec = os.environ.get(PAUSE_ENV)
    if not spec:
        return
    wanted, _, marker = spec.partition("@")
    if wanted != point:
        return
    Path(marker).write_text(point, encoding="utf-8")
    time.sleep(600)  # wait here to be killed


def _write_file(path: Path, payload: Payload) -> None:
    with open(path, "wb") as fh:
        if isinstance(payload, np.ndarray):
            np.save(fh, payload, allow_pickle=False)
        elif isinstance(payload, (bytes, bytearray, memoryview)):
            fh.write(payload)
        else:
            raise TypeError(f"a generation file is bytes or a numpy array, got {type(payload).__name__} for {path.name}")
        fh.flush()
        os.fsync(fh.fileno())


def _link_or_copy(source: Path, target: Path) -> None:
    # A hard link shares the bytes of an unchanged file at no cost; copy where links are not allowed.
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
        with open(target, "rb+") as fh:
            os.fsync(fh.fileno())


def _next_number(root: Path) -> int:
    numbers = [int(m.group(1)) for p in root.iterdir() if (m := _GEN_RE.match(p.name))]
    return max(numbers, default=0) + 1


def _remove_stale(root: Path, keep: str) -> None:
    """Remove superseded generations and leftovers of killed writers (best effort, under the lock)."""
    for entry in root.iterdir():
        if entry.name == keep:
            continue
        if _GEN_RE.match(entry.name) or entry.name.startswith(TMP_PREFIX):
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()


def write_generation(
    root: Path,
    files: Mapping[str, Payload],
    manifest: Mapping[str, Any],
    *,
    reuse_from: Generation | None = None,
    reuse: Iterable[str] = (),
) -> Generation:
    """Write a new generation of *root* and make it live atomically; call it while holding :func:`locked`.

    *files* are written fresh; *reuse* names files taken unchanged from
    *reuse_from* (hard-linked, their manifest entries copied).  *manifest* is
    extended with the ``files`` table.  Old generations are removed afterwards.
    """
    check_writable_root(root)
    root.mkdir(parents=True, exist_ok=True)
    number = _next_number(root)
    name = f"{GEN_PREFIX}{number:06d}"
    tmp = root / f"{TMP_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    table: dict[str, dict[str, Any]] = {}
    for file in reuse:
        if reuse_from is None:
            raise ValueError("reuse needs reuse_from")
        _link_or_copy(reuse_from.path(file), tmp / file)
        table[file] = dict(reuse_from.files[file])
    for file, payload in files.items():
        if file in (MANIFEST_FILE, CURRENT_FILE) or "/" in file:
            raise ValueError(f"invalid generation file name {file!r}")
        _write_file(tmp / file, payload)
        # Hash what is on disk (not what we meant to write), after fsync.
        table[file] = {"bytes": (tmp / file).stat().st_size, "blake2b": checksum(tmp / file)}
        _pause_point(f"after:{file}")
    full = dict(manifest)
    full["files"] = dict(sorted(table.items()))
    raw = json.dumps(full, indent=1, sort_keys=True, ensure_ascii=False).encode("utf-8")
    _write_file(tmp / MANIFEST_FILE, raw)
    _fsync_dir(tmp)
    _pause_point("before-rename")
    os.rename(tmp, root / name)
    _fsync_dir(root)
    _pause_point("before-current")
    pointer_tmp = root / f"{TMP_PREFIX}{CURRENT_FILE}-{uuid.uuid4().hex[:8]}"
    _write_file(pointer_tmp, f"{name} {_bytes_checksum(raw)}\n".encode("ascii"))
    os.replace(pointer_tmp, root / CURRENT_FILE)  # the commit point
    _fsync_dir(root)
    logger.debug("corpus %s now at %s (%d files)", root, name, len(table))
    _remove_stale(root, keep=name)
    return Generation(root=root, name=name, manifest=full)
