"""The shard manifest: which shards make a sharded corpus, and what they must agree on.

A sharded corpus is a directory of ordinary corpus directories plus one
``shards.json``::

    <sharded>/
      shards.json        this manifest (written last, atomically: no manifest, no corpus)
      shard-000/         an ordinary corpus directory (irflow.open_corpus opens it alone)
      shard-001/
      shard-001.rows.npy the global rows of shard 1, only when they are not one contiguous run

Global row = the shard's global rows at the local row: ``first_row + local``
for a contiguous shard (the usual case: records grouped by artifact), or
``rows[local]`` when an artifact's records were interleaved with others' in
the source order.  The manifest records, per shard, its counts, its global
rows, its surface kinds, the ``build_id`` of the generation it was
written as and the checksum of that generation's manifest (which lists
every file's checksum: a shard rebuilt or modified afterwards no longer
matches); and,
once, the embedder and analyzer every shard was built with.  Reading checks
all of it and names the file and the shard that is wrong.

>>> # read_manifest(Path("corpus.sharded")).shards[0].dir  -> 'shard-000'
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import attrs
import numpy as np

from irflow.errors import CorpusError
from irflow.util.corpusmarks import SHARDED_FORMAT, SHARDS_FILE
from irflow.util.fileio import write_atomic
from irflow.util.unicode import json_text
from irflow.store.generations import checksum

__all__ = ["MANIFEST_FILE", "FORMAT_NAME", "FORMAT_VERSION", "ShardEntry", "ShardManifest", "read_manifest",
           "write_manifest", "is_sharded", "shard_dir_name", "SHARD_DIR_RE"]

# the manifest's name and format (written first) mark a sharded corpus: irflow.util.corpusmarks holds them, where
# the writers of a user's files look for them
MANIFEST_FILE = SHARDS_FILE
FORMAT_NAME = SHARDED_FORMAT
FORMAT_VERSION = 1
#: The names irflow gives shard directories (and the only ones it ever removes).
SHARD_DIR_RE = re.compile(r"^shard-(\d{3,})\Z")
_ROWS_RE = re.compile(r"^shard-(\d{3,})\.rows\.npy\Z")
#: A manifest lists a few numbers per shard: it stays small.
MANIFEST_LIMIT = 16 << 20


def shard_dir_name(index: int) -> str:
    """``shard-007`` for shard 7 (``shard-000``, :data:`~irflow.util.corpusmarks.FIRST_SHARD`, for shard 0)."""
    return f"shard-{index:03d}"


def _count(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name} must be an integer >= 0, got {value!r}")



def _strings(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _entries(values: Iterable[ShardEntry]) -> tuple[ShardEntry, ...]:
    return tuple(values)

@attrs.frozen
class ShardEntry:
    """One shard as the manifest lists it.

    ``first_row``: the global row of its local row 0; ``rows_file``: the
    file holding its global rows when they are not ``first_row ..
    first_row + n_rows - 1`` (None for a contiguous shard), with its
    checksum; ``build_id`` and ``manifest_checksum``: the shard corpus
    generation written by sharding, and the checksum of its manifest (which
    holds the checksum of every file of the shard).
    """

    index: int = attrs.field(validator=_count)
    dir: str
    n_rows: int = attrs.field(validator=_count)
    live: int = attrs.field(validator=_count)
    artifacts: int = attrs.field(validator=_count)
    first_row: int = attrs.field(validator=_count)
    build_id: str
    manifest_checksum: str
    kinds: tuple[str, ...] = attrs.field(converter=_strings)
    rows_file: str | None = None
    rows_checksum: str | None = None

    @property
    def contiguous(self) -> bool:
        return self.rows_file is None


@attrs.frozen
class ShardManifest:
    """The whole sharded corpus: its name, total counts, global kinds, embedder, analyzer and shards."""

    name: str
    n_rows: int = attrs.field(validator=_count)
    live: int = attrs.field(validator=_count)
    kinds: tuple[str, ...] = attrs.field(converter=_strings)
    analyzer: Mapping[str, Any]
    embedder: Mapping[str, Any] | None
    shards: tuple[ShardEntry, ...] = attrs.field(converter=_entries)
    build_id: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    created: str = attrs.field(factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    def to_json(self) -> str:
        data = {
            "format": FORMAT_NAME, "version": FORMAT_VERSION, "build_id": self.build_id, "created": self.created,
            "name": self.name, "counts": {"rows": self.n_rows, "live": self.live, "shards": len(self.shards)},
            "kinds": list(self.kinds), "analyzer": dict(self.analyzer),
            "embedder": None if self.embedder is None else dict(self.embedder),
            "shards": [{**attrs.asdict(entry), "kinds": list(entry.kinds)} for entry in self.shards],
        }
        return json_text(data, indent=1) + "\n"


def is_sharded(root: str | Path) -> bool:
    """True when *root* is a directory holding a shard manifest."""
    return (Path(root) / MANIFEST_FILE).is_file()


def write_manifest(root: Path, manifest: ShardManifest) -> None:
    """Write the manifest atomically (the last step of sharding: before it, there is no sharded corpus)."""
    # the sharded corpus's own file, written over the old one on a reshard: the one write allowed inside it
    write_atomic(root / MANIFEST_FILE, manifest.to_json(), "shard manifest", corpus_file=True)


def _bad(path: Path, what: str) -> CorpusError:
    return CorpusError(f"{path}: {what}; the sharded corpus is damaged — shard it again (irflow shard CORPUS "
                       f"--shards N --out {path.parent})")


def read_manifest(root: Path) -> ShardManifest:
    """The manifest of the sharded corpus at *root*, checked for consistency (CorpusError naming the file)."""
    path = root / MANIFEST_FILE
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise CorpusError(f"no sharded corpus at {root}: the path {what}; make one with irflow shard CORPUS "
                          f"--shards N --out {root} (or irflow.shard(corpus, n, path))")
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MANIFEST_LIMIT + 1)
    except FileNotFoundError:
        raise CorpusError(f"{root} is not a sharded corpus: it has no {MANIFEST_FILE} (not sharded, or sharding "
                          "was interrupted before it finished); shard it again with irflow shard") from None
    except OSError as exc:
        raise _bad(path, f"cannot be read ({exc})") from None
    if len(raw) > MANIFEST_LIMIT:
        raise _bad(path, f"is larger than the {MANIFEST_LIMIT} bytes a shard manifest can be")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise _bad(path, f"is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise _bad(path, f"is not an irflow shard manifest (format {data.get('format') if isinstance(data, dict) else None!r})")
    if data.get("version") != FORMAT_VERSION:
        raise CorpusError(f"{path}: shard manifest version {data.get('version')!r}, this irflow reads version "
                          f"{FORMAT_VERSION}; shard the corpus again with this irflow")
    try:
        counts = data["counts"]
        shards = tuple(ShardEntry(**{**entry, "kinds": tuple(entry["kinds"])}) for entry in data["shards"])
        manifest = ShardManifest(
            name=str(data["name"]), n_rows=counts["rows"], live=counts["live"], kinds=tuple(data["kinds"]),
            analyzer=data["analyzer"], embedder=data["embedder"], shards=shards, build_id=data["build_id"],
            created=data["created"])
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad(path, f"is missing or has an ill-formed entry ({type(exc).__name__}: {exc})") from None
    _check(path, manifest)
    return manifest


def _check(path: Path, manifest: ShardManifest) -> None:
    """Counts that add up, shards numbered 0..n-1 in their own directories, kinds in global order."""
    shards = manifest.shards
    if not shards:
        raise _bad(path, "lists no shard")
    for i, entry in enumerate(shards):
        if entry.index != i or entry.dir != shard_dir_name(i):
            raise _bad(path, f"entry {i} names shard {entry.index} in {entry.dir!r}, expected {shard_dir_name(i)!r}")
        if entry.rows_file is not None and (not _ROWS_RE.match(entry.rows_file) or entry.rows_checksum is None):
            raise _bad(path, f"shard {i} names the rows file {entry.rows_file!r} (expected shard-NNN.rows.npy "
                             "with a checksum)")
        if entry.n_rows == 0 or entry.live > entry.n_rows:
            raise _bad(path, f"shard {i} has {entry.n_rows} rows ({entry.live} live)")
    if sum(e.n_rows for e in shards) != manifest.n_rows or sum(e.live for e in shards) != manifest.live:
        raise _bad(path, "the shards' row counts do not add up to the corpus's")
    kinds: dict[str, None] = {}
    for entry in shards:
        kinds.update(dict.fromkeys(entry.kinds))
    if set(kinds) != set(manifest.kinds):
        raise _bad(path, f"the shards' kinds {sorted(kinds)} differ from the corpus's {list(manifest.kinds)}")


def read_rows(root: Path, entry: ShardEntry) -> np.ndarray:
    """The global rows of *entry* (int64, ascending): a range, or its rows file checked against the manifest."""
    if entry.rows_file is None:
        return np.arange(entry.first_row, entry.first_row + entry.n_rows, dtype=np.int64)
    path = root / entry.rows_file
    try:
        found = checksum(path)
    except FileNotFoundError:
        raise CorpusError(f"shard {entry.index}: {path} is missing (it lists the shard's global rows); the sharded "
                          "corpus is incomplete — shard it again") from None
    if found != entry.rows_checksum:
        raise CorpusError(f"shard {entry.index}: {path} does not match the checksum in {root / MANIFEST_FILE} "
                          "(altered or truncated); the sharded corpus is damaged — shard it again")
    try:
        rows = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CorpusError(f"shard {entry.index}: {path} is unreadable ({exc}); shard the corpus again") from None
    if rows.dtype != np.int64 or rows.shape != (entry.n_rows,) or (rows.size and rows[0] != entry.first_row) \
            or np.any(np.diff(rows) <= 0):
        raise CorpusError(f"shard {entry.index}: {path} does not hold {entry.n_rows} ascending int64 global rows "
                          f"from {entry.first_row}; shard the corpus again")
    return rows


def check_layout(root: Path, manifest: ShardManifest, rows: Sequence[np.ndarray]) -> None:
    """Every shard directory on disk is listed and present, and the shards' rows partition 0..n_rows-1."""
    listed = {entry.dir for entry in manifest.shards}
    for entry in manifest.shards:
        if not (root / entry.dir).is_dir():
            raise CorpusError(f"shard {entry.index} is missing from disk: {root / entry.dir} does not exist; the "
                              f"sharded corpus is incomplete — restore the shard or shard the corpus again")
    strays = sorted(p.name for p in root.iterdir() if SHARD_DIR_RE.match(p.name) and p.name not in listed)
    if strays:
        raise CorpusError(f"{root} holds shard director{'y' if len(strays) == 1 else 'ies'} {', '.join(strays)} "
                          f"that {root / MANIFEST_FILE} does not list (the manifest lists {len(listed)} shards): "
                          "the manifest is out of date or a shard was copied in — shard the corpus again")
    seen = np.zeros(manifest.n_rows, dtype=bool)
    for entry, part in zip(manifest.shards, rows):
        if part.size and (part[-1] >= manifest.n_rows or seen[part].any()):
            raise _bad(root / MANIFEST_FILE, f"shard {entry.index}'s global rows overlap another shard's or pass "
                                             f"the corpus's {manifest.n_rows} rows")
        seen[part] = True
    if not seen.all():
        raise _bad(root / MANIFEST_FILE, f"global row {int(np.argmin(seen))} belongs to no shard")
