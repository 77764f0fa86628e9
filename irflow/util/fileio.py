"""The user's files: read within limits, written atomically.

Everything irflow reads from a path a user named (recipe files, records,
test collections, trace files) and everything it writes outside a corpus
directory (traces, run files, saved recipes) goes through here, so that a
bad file gets one clear error naming the file, what is wrong and the limit —
never a traceback, an unbounded allocation, a hang on a FIFO, or a truncated
file left behind by a failed write.

- :func:`open_regular` refuses what is not a regular file (a directory, a
  FIFO, ``/dev/zero``) before reading a byte; :func:`read_text` reads a whole
  file up to a size limit and decodes it as UTF-8; :func:`read_lines` yields
  lines up to a length limit.
- :func:`loads_json` parses JSON within a nesting limit (checked on the text
  before parsing, so a million ``[`` cost a scan, not a RecursionError) and
  turns Python's integer-digit limit into a clear error;
  :func:`check_nesting` bounds already-parsed data (TOML, YAML, filters).
- :func:`atomic_writer` / :func:`write_atomic` write a temporary file in the
  target's directory, fsync it and ``os.replace`` it over the target: a
  reader sees the old file or the new one, never half of one, and a failed
  write leaves the old file as it was.  They refuse a path inside an irflow
  corpus (:mod:`irflow.util.corpusmarks`), and remove what writers of the
  same target that were killed mid-write left behind.

>>> loads_json('{"a": [1, 2]}', "--filter")
{'a': [1, 2]}
>>> check_nesting([[[1]]], "--set x", limit=2)
Traceback (most recent call last):
...
irflow.errors.InputError: --set x: nested more than 2 levels deep, the limit (flatten the value)
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import stat
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

from irflow.errors import InputError, OutputError
from irflow.util.corpusmarks import refuse_inside_corpus

__all__ = [
    "MAX_NESTING",
    "MAX_TEXT_BYTES",
    "MAX_LINE_BYTES",
    "open_regular",
    "read_text",
    "read_lines",
    "decode_utf8",
    "loads_json",
    "check_json_depth",
    "check_nesting",
    "too_many_digits",
    "shown",
    "atomic_writer",
    "write_atomic",
    "remove_stale_temps",
    "explain_os_error",
]

#: How deeply a recipe, a filter, a ``--set`` value or a JSON line may nest lists and tables.
MAX_NESTING = 64
#: The largest file read whole (a recipe file): 4 MiB, a thousand times a large recipe.
MAX_TEXT_BYTES = 4 << 20
#: The longest line of a JSON Lines file (one record, one document, one trace line): 256 MiB.
MAX_LINE_BYTES = 256 << 20


# --------------------------------------------------------------------------
# OS errors in words


def explain_os_error(error: OSError, path: str | os.PathLike[str] | None = None) -> str:
    """``error`` as one sentence naming the path, what went wrong and the fix.

    >>> explain_os_error(PermissionError(13, "Permission denied", "/x/run.jsonl"))
    "/x/run.jsonl: permission denied; check the file's and its folder's permissions, or choose another path"
    """
    where = os.fspath(path) if path is not None else error.filename
    prefix = f"{os.fsdecode(where)}: " if where is not None else ""
    code = error.errno
    if isinstance(error, FileNotFoundError) or code == errno.ENOENT:
        return f"{prefix}no such file or directory"
    if isinstance(error, PermissionError) or code in (errno.EACCES, errno.EPERM):
        return f"{prefix}permission denied; check the file's and its folder's permissions, or choose another path"
    if isinstance(error, IsADirectoryError) or code == errno.EISDIR:
        return f"{prefix}is a directory, where a file is expected"
    if isinstance(error, NotADirectoryError) or code == errno.ENOTDIR:
        return f"{prefix}a part of this path is a file, not a directory; choose a path whose folders are folders"
    if code == errno.ENOSPC:
        return f"{prefix}no space left on the device; free some space or choose another disk"
    if code == errno.EROFS:
        return f"{prefix}the file system is read-only; choose a writable location"
    if code == errno.ENAMETOOLONG:
        return f"{prefix}the name is too long for the file system; choose a shorter path"
    if code == errno.ELOOP:
        return f"{prefix}too many levels of symbolic links; fix the link"
    text = error.strerror or str(error) or type(error).__name__
    return f"{prefix}{text}"


def shown(value: Any, width: int = 60) -> str:
    """``repr(value)`` cut to about ``width`` characters, for messages that echo what the user gave.

    >>> shown("9" * 5000, 20)
    "'99999999999999… (5002 characters)"
    """
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's digit limit cannot even be repr'd
        return f"an integer of about {value.bit_length() * 30103 // 100000 + 1} digits"
    return text if len(text) <= width else f"{text[:width - 5]}… ({len(text)} characters)"


# --------------------------------------------------------------------------
# reading


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: str | os.PathLike[str], what: str, *, error: Callable[[str], Exception] = InputError) -> IO[bytes]:
    """``path`` opened for binary reading; ``error`` when it is missing, unreadable or not a regular file.

    Opened non-blocking, so a FIFO cannot hang the open; refused by its
    type before a byte is read, so ``/dev/zero`` cannot be read without end.
    """
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise error(f"cannot read the {what}: {explain_os_error(exc, name)}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"{name}: the {what} must be a regular file, but this is {_kind(mode)}; name a file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def decode_utf8(data: bytes, where: str, what: str, *, error: Callable[[str], Exception] = InputError,
                bom: bool = True) -> str:
    """``data`` decoded as UTF-8 (a leading byte-order mark dropped when ``bom``); ``error`` naming the bad byte."""
    try:
        return data.decode("utf-8-sig" if bom else "utf-8")
    except UnicodeDecodeError as exc:
        # a whole file: say the line; one line of a file: ``where`` already names it
        number = data.count(b"\n", 0, exc.start) + 1
        line = f"line {number}, " if b"\n" in data[:-1] else ""
        raise error(f"{where}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at {line}offset {exc.start}: "
                    f"{exc.reason}); the {what} must be UTF-8 text: save it as UTF-8") from None


def read_text(path: str | os.PathLike[str], what: str, *, max_bytes: int = MAX_TEXT_BYTES,
              error: Callable[[str], Exception] = InputError) -> str:
    """The whole of a UTF-8 text file, refused (``error``) beyond ``max_bytes`` or when not UTF-8."""
    name = os.fspath(path)
    with open_regular(name, what, error=error) as handle:
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise error(f"cannot read the {what}: {explain_os_error(exc, name)}") from None
    if len(data) > max_bytes:
        raise error(f"{name}: the {what} is larger than the limit of {max_bytes} bytes; is this the right file?")
    return decode_utf8(data, name, what, error=error)


def read_lines(handle: IO[bytes], name: str, what: str, *, max_line_bytes: int = MAX_LINE_BYTES,
               error: Callable[[str], Exception] = InputError) -> Iterator[tuple[int, bytes]]:
    """``(line number, raw line)`` of an open binary file; ``error`` for a line longer than ``max_line_bytes``."""
    number = 0
    while True:
        try:
            raw = handle.readline(max_line_bytes + 1)
        except OSError as exc:
            raise error(f"cannot read the {what}: {explain_os_error(exc, name)}") from None
        if not raw:
            return
        number += 1
        if len(raw) > max_line_bytes:
            raise error(f"{name} line {number}: longer than the limit of {max_line_bytes} bytes; "
                        f"each line of the {what} must be one JSON object")
        yield number, raw


# --------------------------------------------------------------------------
# nesting and JSON

# a JSON string: quotes around anything but a quote or a backslash, or an escape
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # unrolled: no alternation per character
_OPEN = np.frombuffer(b"[{", dtype=np.uint8)
_CLOSE = np.frombuffer(b"]}", dtype=np.uint8)


def _json_depth(text: str, limit: int) -> int:
    """The deepest nesting of ``[``/``{`` in JSON ``text`` (only counted exactly when it may exceed ``limit``)."""
    if text.count("[") + text.count("{") <= limit:
        return 0  # cannot exceed the limit: the common case costs two counts
    bare = _JSON_STRING.sub("", text).encode("utf-8", "surrogatepass")
    codes = np.frombuffer(bare, dtype=np.uint8)
    step = np.isin(codes, _OPEN).astype(np.int64) - np.isin(codes, _CLOSE).astype(np.int64)
    return int(np.cumsum(step).max(initial=0))


def check_json_depth(text: str, where: str, *, limit: int = MAX_NESTING,
                     error: Callable[[str], Exception] = InputError, fix: str = "flatten the value") -> None:
    """``error`` when JSON ``text`` nests lists/objects deeper than ``limit`` (checked before parsing)."""
    depth = _json_depth(text, limit)
    if depth > limit:
        raise error(f"{where}: nested {depth} levels deep; the limit is {limit} ({fix})")


def too_many_digits() -> str:
    """What an integer beyond Python's digit limit (``sys.get_int_max_str_digits``) is told."""
    limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else None
    return f"a number has more than {limit} digits, the limit Python reads; write a smaller number"


class _DuplicateKey(Exception):
    """A JSON object names a key twice (raised inside ``json.loads``; not a ValueError, so it is told apart)."""


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def loads_json(text: str, where: str, *, max_depth: int = MAX_NESTING, error: Callable[[str], Exception] = InputError,
               unique_keys: bool = False, fix: str = "flatten the value") -> Any:
    """``json.loads(text)`` within a nesting limit; ``error`` for too deep (saying ``fix``) or too long numbers.

    With ``unique_keys`` an object that names a key twice is refused too
    (``json.loads`` keeps the last without a word): for values a user writes
    by hand, such as ``--set`` and ``--filter``.  Syntax errors stay
    :class:`json.JSONDecodeError`, for the caller to word in its context (a
    line number, an option name).

    >>> loads_json('{"k": 1, "k": 2}', "--set filter", unique_keys=True)
    Traceback (most recent call last):
    ...
    irflow.errors.InputError: --set filter: the key 'k' appears twice in one object; JSON would keep only the last value — remove one
    """
    check_json_depth(text, where, limit=max_depth, error=error, fix=fix)
    try:
        return json.loads(text, object_pairs_hook=_unique_object if unique_keys else None)
    except _DuplicateKey as duplicate:
        raise error(f"{where}: the key {duplicate.args[0]!r} appears twice in one object; JSON would keep only the "
                    "last value — remove one") from None
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise error(f"{where}: nested too deeply; the limit is {max_depth} ({fix})") from None
    except ValueError:  # Python refuses integers longer than sys.get_int_max_str_digits()
        raise error(f"{where}: {too_many_digits()}") from None


def check_nesting(value: Any, where: str, *, limit: int = MAX_NESTING, error: Callable[[str], Exception] = InputError) -> None:
    """``error`` when parsed data nests mappings/lists/tuples deeper than ``limit`` (cycles included).

    Iterative, so a value nested a million deep (or one holding itself) is
    refused without touching the recursion limit.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        depth += 1
        if depth > limit:
            raise error(f"{where}: nested more than {limit} levels deep, the limit (flatten the value)")
        stack.extend((child, depth) for child in children)


# --------------------------------------------------------------------------
# writing


def _fsync_directory(directory: Path) -> None:
    # makes the rename durable; not every OS or file system can open a directory
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    with contextlib.suppress(OSError):
        os.fsync(fd)
    os.close(fd)


def _temp_name(target: Path) -> str:
    """The temporary file of a write of ``<name>``: ``.<name>.<pid>.<8 hex>.tmp`` (the writer's process id in it)."""
    return f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def _writer_gone(pid: int) -> bool:
    """True when no process ``pid`` runs on this machine (a live one, whoever owns it, keeps its file)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True
    except (OverflowError, ValueError):  # no process can have such a number
        return True
    except OSError:  # EPERM: it exists, another user's
        return False
    return False


def remove_stale_temps(target: Path) -> list[Path]:
    """Remove the temporary files that killed writers of ``target`` left beside it; returns them.

    Only names :func:`atomic_writer` makes for this very target
    (``.<name>.<pid>.<8 hex>.tmp``), only regular files (not a link, not a
    folder), and only when process ``<pid>`` is gone; a live writer's file
    stays.  Best effort: what cannot be listed or removed is left.  POSIX
    only — elsewhere asking after a process by its id could end it — and the
    process ids are this machine's (a writer on another machine sharing the
    folder is not seen).
    """
    if os.name != "posix":
        return []
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.(\d{{1,20}})\.[0-9a-f]{{8}}\.tmp\Z")
    prefix = f".{target.name}."
    removed: list[Path] = []
    try:
        with os.scandir(target.parent) as listing:
            entries = list(listing)
    except OSError:
        return []
    for entry in entries:
        match = pattern.match(entry.name) if entry.name.startswith(prefix) else None
        if match is None:
            continue
        with contextlib.suppress(OSError):
            if entry.is_file(follow_symlinks=False) and _writer_gone(int(match.group(1))):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str], what: str = "file", *, corpus_file: bool = False) -> Iterator[IO[bytes]]:
    """A binary handle whose content replaces ``path`` atomically when the block ends without error.

    The content goes to a new temporary file in ``path``'s directory, is
    fsynced, then renamed over ``path`` (``os.replace``): ``path`` holds the
    old content or the new, never a part.  On any error — the block's own,
    a full disk, a read-only target — the temporary file is removed and
    ``path`` is untouched; OS errors become :class:`OutputError` naming
    ``path`` and the fix.  A new file gets the usual permissions (umask);
    an existing file keeps its mode.

    A path inside an irflow corpus, or a sharded one, is refused
    (:class:`OutputError`, before anything is written): a user's output
    never lands in a corpus.  ``corpus_file=True`` lifts that for a
    corpus's own files only (the shard manifest and rows files).  Before
    writing, the temporary files of earlier writers of ``path`` that were
    killed are removed (:func:`remove_stale_temps`).

    >>> with atomic_writer("run.jsonl", "trace") as out:  # doctest: +SKIP
    ...     out.write(b"...")
    """
    target = Path(path)
    if not corpus_file:
        refuse_inside_corpus(target, what)
    directory = target.parent
    remove_stale_temps(target)
    tmp = directory / _temp_name(target)
    try:
        if target.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(target))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as exc:
        raise OutputError(f"cannot write the {what} {target}: {_output_reason(exc, target)}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(OSError):
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))  # an existing file keeps its mode
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise OutputError(f"cannot write the {what} {target}: {_output_reason(exc, target)}") from None
        raise
    _fsync_directory(directory)


def _output_reason(error: OSError, target: Path) -> str:
    # the temporary file's name would only confuse: speak of the target and its folder
    if isinstance(error, FileNotFoundError):
        return f"its folder {target.parent} does not exist; create it first or choose another path"
    if isinstance(error, NotADirectoryError):
        return f"a part of the folder {target.parent} is a file, not a directory; choose another path"
    if isinstance(error, PermissionError):
        return f"permission denied in {target.parent}; choose a writable location"
    text = explain_os_error(error, target)
    return text.split(": ", 1)[1] if ": " in text else text


def write_atomic(path: str | os.PathLike[str], data: str | bytes, what: str = "file", *,
                 corpus_file: bool = False) -> Path:
    """Write ``data`` (str as UTF-8) to ``path`` atomically (see :func:`atomic_writer`); returns the path."""
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    with atomic_writer(path, what, corpus_file=corpus_file) as handle:
        handle.write(payload)
    return Path(path)
