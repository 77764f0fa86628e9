"""What marks a directory as an irflow corpus, and the guard that keeps a user's outputs out of one.

A trace, a run file or a saved recipe written over ``CURRENT`` or into a
generation directory destroys the corpus (it no longer opens), and a folder
made inside one is a foreign entry its clean-up must then step around.  So
every file irflow writes for a user (:func:`irflow.util.fileio.atomic_writer`)
and every output folder (run files, a new corpus, a sharded corpus) is first
checked with :func:`refuse_inside_corpus`: the path is resolved (symbolic
links, ``..``), and if it is a corpus or lies inside one, at any depth, an
:class:`~irflow.errors.OutputError` names the path, the corpus and the fix.

The markers are the ones irflow itself writes, so a foreign folder is never
mistaken for a corpus (LevelDB also keeps a file named ``CURRENT``):

- a corpus directory holds ``CURRENT`` naming its live generation and the
  checksum of that generation's manifest (``gen-000001 <32 hex digits>``);
- each generation directory (``gen-NNNNNN``, or a writer's
  ``.tmp-gen-NNNNNN-xxxxxxxx``) holds the marker file ``.irflow-generation``
  with a fixed text (what still marks a corpus whose ``CURRENT`` is damaged);
- a sharded corpus directory holds ``shards.json`` whose ``format`` is
  ``irflow-sharded-corpus`` (written first), and ordinary corpora
  ``shard-000``, ``shard-001``, ...

The constants live here, at the bottom of the layers, because the writers of
:mod:`irflow.util.fileio` need them and util imports nothing above it;
:mod:`irflow.store.genfiles` and :mod:`irflow.shard.manifest` write them and
import them from here.  Checking a path costs a few small reads per folder
above it: nothing next to the fsync of the write it guards.

>>> corpus_kind(Path("/"))  # nothing of irflow's there
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import attrs

from irflow.errors import OutputError

__all__ = [
    "CORPUS",
    "SHARDED_CORPUS",
    "CURRENT_FILE",
    "CURRENT_LIMIT",
    "POINTER_RE",
    "MARKER_FILE",
    "MARKER_TEXT",
    "GEN_RE",
    "TMP_GEN_RE",
    "SHARDS_FILE",
    "SHARDED_FORMAT",
    "FIRST_SHARD",
    "CorpusAt",
    "corpus_kind",
    "enclosing_corpus",
    "refuse_inside_corpus",
]

#: The two kinds of corpus directory, as messages name them.
CORPUS = "corpus"
SHARDED_CORPUS = "sharded corpus"

#: A corpus's pointer to its live generation, and the most irflow reads of it.
CURRENT_FILE = "CURRENT"
CURRENT_LIMIT = 256
#: What ``CURRENT`` holds: the live generation and the blake2b checksum of its manifest.
POINTER_RE = re.compile(r"^(gen-\d{6,}) ([0-9a-f]{32})\n?\Z")
#: Written first into every directory irflow creates in a corpus: the proof that irflow may remove it.
MARKER_FILE = ".irflow-generation"
MARKER_TEXT = b"irflow generation: irflow may remove this directory's listed files\n"
#: The exact names of generation directories, live and being written.
GEN_RE = re.compile(r"^gen-(\d{6,})\Z")
TMP_GEN_RE = re.compile(r"^\.tmp-gen-(\d{6,})-[0-9a-f]{8}\Z")

#: A sharded corpus's manifest, the format it names, and the name of its first shard directory.
SHARDS_FILE = "shards.json"
SHARDED_FORMAT = "irflow-sharded-corpus"
FIRST_SHARD = "shard-000"
# the manifest opens with its format (ShardManifest.to_json writes it first); a head of 4 KiB is plenty
_SHARDED_HEAD = re.compile(rb'\A\s*\{\s*"format"\s*:\s*"' + SHARDED_FORMAT.encode("ascii") + rb'"')
_HEAD_BYTES = 4096


def _head(path: Path, limit: int) -> bytes | None:
    """The first ``limit`` bytes of a regular file (None when it is missing or not a regular file).

    Opened non-blocking and checked on the descriptor, so a FIFO named
    ``CURRENT`` cannot hang a check.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _has_pointer(directory: Path) -> bool:
    raw = _head(directory / CURRENT_FILE, CURRENT_LIMIT + 1)
    return raw is not None and len(raw) <= CURRENT_LIMIT and POINTER_RE.match(raw.decode("ascii", "replace")) is not None


def _is_marked_generation(directory: Path) -> bool:
    """A ``gen-NNNNNN`` or ``.tmp-gen-…`` directory holding irflow's marker file."""
    if not (GEN_RE.match(directory.name) or TMP_GEN_RE.match(directory.name)):
        return False
    return _head(directory / MARKER_FILE, len(MARKER_TEXT) + 1) == MARKER_TEXT


def corpus_kind(directory: Path) -> str | None:
    """:data:`CORPUS` or :data:`SHARDED_CORPUS` when ``directory`` is the root of one, else None.

    A corpus: ``CURRENT`` holds irflow's pointer.  A sharded corpus:
    ``shards.json`` opens with irflow's format, or its first shard is a corpus.
    """
    if _has_pointer(directory):
        return CORPUS
    head = _head(directory / SHARDS_FILE, _HEAD_BYTES)
    if head is not None and (_SHARDED_HEAD.match(head) or _has_pointer(directory / FIRST_SHARD)):
        return SHARDED_CORPUS
    return None


@attrs.frozen
class CorpusAt:
    """A corpus found around a path: its root directory and its kind (:data:`CORPUS`, :data:`SHARDED_CORPUS`)."""

    root: Path
    kind: str


def _resolved(path: Path) -> list[Path]:
    """Where ``path`` leads: the path with every link resolved, and its resolved folder plus its own name.

    The two differ when ``path`` itself is a link: writing replaces the link
    (the second), while the user named what it points to (the first).
    """
    full = Path(os.path.realpath(path))
    placed = Path(os.path.realpath(path.parent)) / path.name if path.name not in ("", ".", "..") else full
    return [full] if placed == full else [full, placed]


def enclosing_corpus(path: str | os.PathLike[str], *, itself: bool = True) -> CorpusAt | None:
    """The outermost corpus that ``path`` (resolved) lies inside, or is when ``itself``; None when none.

    Every folder from the root of the file system down to the path is looked
    at: a corpus root, or a marked generation directory (whose parent is
    then a corpus, even one whose ``CURRENT`` is damaged).
    """
    for target in _resolved(Path(path)):
        chain = [*reversed(target.parents), target] if itself else list(reversed(target.parents))
        for directory in chain:
            kind = corpus_kind(directory)
            if kind is not None:
                return CorpusAt(directory, kind)
            if _is_marked_generation(directory):
                return CorpusAt(directory.parent, CORPUS)
    return None


def refuse_inside_corpus(path: str | os.PathLike[str], what: str, *, replacing: str | None = None) -> None:
    """:class:`~irflow.errors.OutputError` when writing the ``what`` at ``path`` would write into a corpus.

    ``path`` may itself be a corpus of the kind ``replacing`` (a rebuild
    writes over a corpus, a reshard over a sharded corpus), never one inside
    another corpus.  The message names the path, where it resolves to, the
    corpus and the fix.
    """
    path = Path(path)
    found = enclosing_corpus(path, itself=True)
    if found is None:
        return
    full = Path(os.path.realpath(path))
    if replacing is not None and found.kind == replacing and found.root == full:
        return  # the outermost corpus is the path itself: nothing encloses it
    shown = f"{path} (which resolves to {full})" if full != Path(os.path.abspath(path)) else f"{path}"
    where = "is the irflow" if found.root == full else "is inside the irflow"
    raise OutputError(
        f"cannot write the {what} {shown}: the path {where} {found.kind} {found.root}, and writing there would "
        f"damage it; choose a path outside the corpus"
    )
