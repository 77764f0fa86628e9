"""The files of a generation directory: names, checksums, bounded reads, markers, fsync, removal.

The low-level half of :mod:`irflow.store.generations` (which holds the
protocol: who reads and writes a corpus directory when, atomically).  Every
small file is read with a size limit and only if it is a regular file; only
what irflow provably wrote (a marked ``gen-NNNNNN`` or temporary directory,
the files its manifest lists) is ever removed.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Union

import attrs
import numpy as np

from irflow.errors import CorpusError
from irflow.util.corpusmarks import CURRENT_FILE, CURRENT_LIMIT, GEN_RE, MARKER_FILE, MARKER_TEXT, POINTER_RE, TMP_GEN_RE

try:  # POSIX advisory locks; on other platforms writers are simply not serialized
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger("irflow.store.generations")  # one logger for the generation machinery

# The markers of a corpus directory (CURRENT and its pointer, the generation names, the marker file) are
# defined in irflow.util.corpusmarks, where the writers of a user's files look for them too.
MANIFEST_FILE = "manifest.json"
LOCK_FILE = ".lock"
GEN_PREFIX = "gen-"
TMP_PREFIX = ".tmp-"
#: Largest ``manifest.json`` irflow reads (far larger than any; ``CURRENT``'s is CURRENT_LIMIT).
MANIFEST_LIMIT = 1 << 20

# The exact names irflow makes (GEN_RE, TMP_GEN_RE and this); nothing else in a corpus directory is ever removed.
_TMP_CURRENT_RE = re.compile(r"^\.tmp-CURRENT-[0-9a-f]{8}\Z")
#: What a file listed in a manifest may be called: a plain name, no path, no leading dot.
FILE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}\Z")
_DIGEST_RE = re.compile(r"^[0-9a-f]{32}\Z")
#: The checksum a new generation records for each file: CRC-32 (zlib), measured about 3x faster
#: than blake2b here; what it guards against is damage (a torn write, a flipped bit, a truncated
#: copy), not an attacker — the manifest itself stays blake2b-sealed in CURRENT, and the arrays'
#: values are checked on load.  Corpora of earlier releases list blake2b digests: still verified,
#: with blake2b.
FILE_CHECKSUM = "crc32"
#: Checksum name -> the form of its digest in a manifest entry.
DIGEST_FORMS = {"crc32": re.compile(r"^[0-9a-f]{8}\Z"), "blake2b": _DIGEST_RE}
_HASH_CHUNK = 16 << 20
_CHUNK = 1 << 20

@attrs.frozen
class StreamedArray:
    """A 1-d array written as ``np.save`` would, from pieces: never whole in memory (a corpus's texts).

    ``chunks()`` yields the array's bytes in order (``length`` items of
    ``dtype`` in all, checked when written).
    """

    dtype: np.dtype[Any] = attrs.field(converter=np.dtype)
    length: int
    chunks: Callable[[], Iterable[bytes]]
    #: the array's shape when it is not 1-d (its items, ``length``, are all of them: a matrix row by row)
    shape: tuple[int, ...] | None = None


#: What a generation file can be made from: raw bytes, an array for ``np.save``, or one written in pieces.
Payload = Union[bytes, np.ndarray, StreamedArray]


def checksum(path: Path) -> str:
    """The blake2b (128-bit) hex digest of a file, read in 1 MiB chunks so huge arrays never load whole."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def bytes_checksum(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def buffer_digest(data: Any, algorithm: str) -> str:
    """The hex digest of a buffer (bytes, a memory map) by ``algorithm`` ("crc32" or "blake2b"), in 16 MiB steps.

    >>> buffer_digest(b"irflow", "crc32"), len(buffer_digest(b"irflow", "blake2b"))
    ('6eaf45f2', 32)
    """
    with memoryview(data) as view, view.cast("B") as flat:
        if algorithm == "crc32":
            crc = 0
            for lo in range(0, len(flat), _HASH_CHUNK):
                crc = zlib.crc32(flat[lo:lo + _HASH_CHUNK], crc)
            return f"{crc:08x}"
        digest = hashlib.blake2b(digest_size=16)
        for lo in range(0, len(flat), _HASH_CHUNK):
            digest.update(flat[lo:lo + _HASH_CHUNK])
        return digest.hexdigest()


def file_digest(path: Path, algorithm: str) -> str:
    """``buffer_digest`` of a file's bytes, read in 1 MiB steps into one reused buffer.

    Not through a memory map: the mapped pages of the file would count in
    the process's resident memory while it is hashed — a whole text or
    postings file at the end of a build, whose peak memory is a promise
    (issue 12) — where reading into a buffer holds one MiB.
    """
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    crc = 0
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb", buffering=0) as fh:
        while True:
            got = fh.readinto(buffer)
            if not got:
                break
            if algorithm == "crc32":
                crc = zlib.crc32(view[:got], crc)
            else:
                digest.update(view[:got])
    return f"{crc:08x}" if algorithm == "crc32" else digest.hexdigest()


def entry_checksum(entry: Mapping[str, Any]) -> tuple[str, str]:
    """``(algorithm, digest)`` of a manifest entry: crc32 (this release) or blake2b (earlier ones)."""
    for algorithm in DIGEST_FORMS:
        if algorithm in entry:
            return algorithm, entry[algorithm]
    raise KeyError("no checksum")  # parse_manifest refuses such an entry first


@attrs.frozen
class Generation:
    """One complete generation of a directory: its name and its parsed manifest.

    ``manifest["files"]`` maps each file name to ``{"bytes": int, "crc32": str}``
    (``"blake2b"`` instead of ``"crc32"`` in corpora of earlier releases).
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
        """File name -> ``{"bytes", "crc32" (or "blake2b")}`` as listed in the manifest."""
        files: Mapping[str, Mapping[str, Any]] = self.manifest["files"]
        return files

    def path(self, file: str) -> Path:
        """The path of one listed file (CorpusError when the manifest does not list it)."""
        if file not in self.files:
            raise CorpusError(
                f"{self.dir}: the manifest does not list {file!r}, which this corpus needs; "
                "the corpus is incomplete — rebuild it with irflow.build(..., path=...)"
            )
        return self.dir / file


def damaged(root: Path, what: str) -> CorpusError:
    return CorpusError(f"corpus at {root}: {what}; the corpus is damaged — rebuild it with irflow.build(..., path={str(root)!r})")


def kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_small_file(path: Path, limit: int, *, root: Path | None = None) -> bytes:
    """The bytes of *path*, refused unless it is a regular file of at most *limit* bytes.

    A FIFO, a device (or a link to one, such as ``/dev/zero``) or a directory
    raises CorpusError naming the file, without reading from it: opening is
    non-blocking and the type is checked on the opened file too.  A missing
    file raises FileNotFoundError (the caller knows what that means).
    """
    where = root if root is not None else path.parent

    def refuse(what: str) -> CorpusError:
        return damaged(where, f"{path.relative_to(where) if path.is_relative_to(where) else path} {what}")

    mode = os.stat(path).st_mode  # FileNotFoundError propagates
    if not stat.S_ISREG(mode):
        raise refuse(f"is {kind_of(mode)}, not a regular file (irflow never writes one)")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)  # non-blocking: a FIFO swapped in after the stat cannot hang the open
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise refuse(f"cannot be opened ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # replaced between the two looks
            raise refuse(f"is {kind_of(mode)}, not a regular file (irflow never writes one)")
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, _CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise refuse(f"is larger than the {limit} bytes irflow expects of it")
    return data


def parse_manifest(root: Path, name: str, raw: bytes) -> dict[str, Any]:
    """The manifest, with its ``files`` table checked: plain names, integer sizes, hex digests."""
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise damaged(root, f"{name}/{MANIFEST_FILE} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise damaged(root, f"{name}/{MANIFEST_FILE} has no 'files' table")
    for file, entry in manifest["files"].items():
        if not FILE_NAME_RE.match(file) or file in (MANIFEST_FILE, MARKER_FILE):
            raise damaged(root, f"{name}/{MANIFEST_FILE} lists a file named {file[:80]!r}, which irflow never writes")
        size = entry.get("bytes") if isinstance(entry, dict) else None
        digests = [(a, entry[a]) for a in DIGEST_FORMS if a in entry] if isinstance(entry, dict) else []
        if type(size) is not int or size < 0 or len(digests) != 1 or not isinstance(digests[0][1], str) \
                or not DIGEST_FORMS[digests[0][0]].match(digests[0][1]):
            raise damaged(root, f"{name}/{MANIFEST_FILE} has an ill-formed entry for {file!r} "
                                 f"(expected {{'bytes': <int >= 0>, 'crc32': <8 hex digits>}}, or 'blake2b': "
                                 "<32 hex digits> in corpora of earlier releases)")
    return manifest


def open_directory(path: Path) -> int | None:
    """A read-only descriptor of the directory *path* (None when it does not exist)."""
    try:
        return os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None


def flock(fd: int, operation: int) -> bool:
    """Apply a flock; False when this platform or file system has none (callers then rely on retries)."""
    if fcntl is None:  # pragma: no cover - Windows
        return False
    try:
        fcntl.flock(fd, operation)
    except BlockingIOError:
        raise
    except OSError as exc:  # e.g. a file system without flock
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise BlockingIOError(exc.errno, exc.strerror) from None
        logger.debug("flock unavailable (%s); relying on retries", exc)
        return False
    return True


def is_marked(path: Path) -> bool:
    try:
        info = os.lstat(path / MARKER_FILE)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size == len(MARKER_TEXT)


def listed_files(path: Path) -> list[str] | None:
    """The files a generation directory's manifest lists (None when it has no readable, well-formed manifest)."""
    try:
        manifest = parse_manifest(path.parent, path.name, read_small_file(path / MANIFEST_FILE, MANIFEST_LIMIT))
    except (CorpusError, OSError):
        return None
    return list(manifest["files"])


def is_generation(path: Path) -> bool:
    """An exact ``gen-NNNNNN`` directory (not a link) with irflow's marker, or a manifest (generations of older irflow)."""
    if not GEN_RE.match(path.name) or not stat.S_ISDIR(lstat_mode(path)):
        return False
    return is_marked(path) or listed_files(path) is not None


def _emptied_generation(path: Path) -> bool:
    """An exact ``gen-NNNNNN`` directory (not a link) with nothing in it: a removal killed before its ``rmdir``."""
    return bool(GEN_RE.match(path.name)) and stat.S_ISDIR(lstat_mode(path)) and not any(path.iterdir())


def is_temporary(path: Path) -> bool:
    """A killed writer's directory: exact ``.tmp-gen-NNNNNN-xxxxxxxx``, marked, still empty, or holding only a
    marker cut short (the writer was killed while writing it, its first file)."""
    if not TMP_GEN_RE.match(path.name) or not stat.S_ISDIR(lstat_mode(path)):
        return False
    return is_marked(path) or not any(path.iterdir()) or _only_marker(path, partial=True)


def _only_marker(path: Path, *, partial: bool) -> bool:
    """The directory holds nothing but irflow's marker file (``partial``: or the start of it)."""
    names = [p.name for p in path.iterdir()]
    if names != [MARKER_FILE] or not stat.S_ISREG(lstat_mode(path / MARKER_FILE)):
        return False
    with contextlib.suppress(OSError), open(path / MARKER_FILE, "rb") as fh:
        text = fh.read(len(MARKER_TEXT) + 1)
        return text == MARKER_TEXT or (partial and MARKER_TEXT.startswith(text))
    return False


def is_pointer_temp(path: Path) -> bool:
    """A killed writer's ``.tmp-CURRENT-xxxxxxxx``: a small regular file."""
    return bool(_TMP_CURRENT_RE.match(path.name)) and is_pointer_file(path)


def is_pointer_file(path: Path) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size <= CURRENT_LIMIT


def lstat_mode(path: Path) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def is_ours(path: Path) -> bool:
    if path.name == LOCK_FILE:
        return stat.S_ISREG(lstat_mode(path))
    return is_generation(path) or is_temporary(path) or is_pointer_temp(path)


def fsync_dir(path: Path) -> None:
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


def write_file(path: Path, payload: Payload) -> None:
    with open(path, "xb") as fh:  # "x": never write through a name that already exists
        if isinstance(payload, np.ndarray):
            np.save(fh, payload, allow_pickle=False)
        elif isinstance(payload, StreamedArray):
            _write_streamed(fh, payload, path)
        elif isinstance(payload, (bytes, bytearray, memoryview)):
            fh.write(payload)
        else:
            raise TypeError(f"a generation file is bytes or a numpy array, got {type(payload).__name__} for {path.name}")
        fh.flush()
        os.fsync(fh.fileno())


def _write_streamed(fh: Any, payload: StreamedArray, path: Path) -> None:
    # the header np.save writes for a C-ordered 1-d array (format 1.0, padded to 64 bytes), then the pieces
    shape = (payload.length,) if payload.shape is None else tuple(payload.shape)
    np.lib.format.write_array_header_1_0(fh, {"descr": np.lib.format.dtype_to_descr(payload.dtype),
                                              "fortran_order": False, "shape": shape})
    written = 0
    for chunk in payload.chunks():
        fh.write(chunk)
        written += len(chunk)
    if written != payload.length * payload.dtype.itemsize:
        raise ValueError(f"{path.name}: {written} bytes streamed for {payload.length} items of {payload.dtype}")


def link_or_copy(source: Path, target: Path) -> None:
    # A hard link shares the bytes of an unchanged file at no cost; copy where links are not allowed.
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
        with open(target, "rb+") as fh:
            os.fsync(fh.fileno())


def remove_files(directory: Path, names: Iterable[str] | None) -> None:
    """Unlink *names* (None: every regular file) in *directory*, then the directory if that emptied it.

    The marker file goes last: killed midway, the directory still carries
    the proof that irflow may remove it, and the next clean-up finishes.
    """
    if names is None:
        names = [p.name for p in directory.iterdir() if stat.S_ISREG(lstat_mode(p))]
    names = sorted(names, key=lambda name: name == MARKER_FILE)  # stable: the others keep their order
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / name)
    try:
        os.rmdir(directory)
    except OSError:
        logger.warning("left %s in place: it holds files irflow did not write (%s)", directory,
                       ", ".join(sorted(p.name for p in directory.iterdir())[:5]))


# -- removal ----------------------------------------------------------------------------------------


def _remove_generation(path: Path) -> None:
    """Remove an old generation's own files, unless a reader holds it (then a later writer does)."""
    fd = open_directory(path)
    if fd is None:
        return
    try:
        try:
            flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB if fcntl is not None else 0)
        except BlockingIOError:
            logger.debug("kept %s: a reader is opening it", path)
            return
        listed = listed_files(path)
        if listed is None and _only_marker(path, partial=False):
            listed = []  # a removal killed after the manifest went: only the marker is left
        if listed is None:
            logger.warning("left %s in place: it has no readable manifest saying which files irflow wrote", path)
            return
        remove_files(path, [*listed, MANIFEST_FILE, MARKER_FILE])
        logger.debug("removed %s: a newer generation replaced it", path)
    finally:
        os.close(fd)


def remove_superseded(root: Path, keep: Iterable[str]) -> None:
    """Remove generations not in *keep* and leftovers of killed writers — only what irflow provably wrote (under the lock).

    A generation a reader holds stays (a later writer removes it).
    """
    kept = set(keep)
    for entry in root.iterdir():
        if entry.name in kept:
            continue
        try:
            if is_generation(entry):
                _remove_generation(entry)
            elif _emptied_generation(entry):
                os.rmdir(entry)  # a removal killed after its last unlink, before this: nothing is in it to lose
            elif is_temporary(entry):
                remove_files(entry, None)
            elif is_pointer_temp(entry):
                entry.unlink()
        except OSError as exc:  # best effort: a leftover costs disk space, never correctness
            logger.warning("could not remove %s (%s)", entry, exc)


def remove_corpus(root: Path) -> None:
    """Remove a corpus directory irflow no longer uses: its pointer, then what :func:`remove_superseded` may remove.

    The directory goes only when that empties it: a generation a reader
    still holds, or a file irflow did not write, keeps it (call this holding
    :func:`irflow.store.generations.locked`: the lock file goes last).
    """
    try:
        pointer = read_small_file(root / CURRENT_FILE, CURRENT_LIMIT)
    except (OSError, CorpusError):
        pointer = b""
    if POINTER_RE.match(pointer.decode("ascii", "replace")):  # only irflow's: LevelDB directories have a CURRENT too
        os.unlink(root / CURRENT_FILE)
    remove_superseded(root, keep=())
    with contextlib.suppress(OSError):
        if stat.S_ISREG(lstat_mode(root / LOCK_FILE)):
            os.unlink(root / LOCK_FILE)
        os.rmdir(root)
