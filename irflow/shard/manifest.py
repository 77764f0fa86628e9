"""The shard manifest: which generation of which shard makes the sharded corpus, sealed by its own checksum.

A sharded corpus is a directory of shard directories plus one
``shards.json``::

    <sharded>/
      shards.json        this manifest: the one commit point (see irflow.shard.disk)
      .lock              the writers' lock (flock)
      shard-000/         a corpus directory (irflow.open_corpus opens it alone)
        CURRENT          "gen-000002 <checksum>": the generation shards.json names, once committed
        gen-000002/      the shard's records, postings, vectors, tombstones, and
                         global_rows.npy when its rows are not one contiguous run
      shard-001/

Global row = the shard's global rows at the local row: ``first_row + local``
for a contiguous shard (the usual case: records grouped by artifact), or
``global_rows.npy[local]`` when an artifact's records were interleaved with
others' in the source order.  The manifest records, per shard, its counts,
its first row, its surface kinds, the *generation* that holds it, that
generation's build id and the blake2b checksum of its ``manifest.json``
(which lists every file's checksum, the rows file included); and, once, the
embedder and analyzer every shard was built with.

Every byte of ``shards.json`` is covered: its last member is
``"checksum": "<blake2b>"``, the digest of the whole file with those 32
digits written as zeros (so the file holds its own seal, and the commit is
the one ``os.replace`` of one file).  A reader checks the seal first, then
every field; anything off is a CorpusError naming ``shards.json``.  So a
reader trusts nothing unchecked: the seal covers the manifest, the manifest
the generations' manifests, and those every file.

Version 1 (earlier releases) named no generation — a shard was whatever
its ``CURRENT`` said, checked against the recorded build id and manifest
checksum — kept its interleaved rows in ``shard-NNN.rows.npy`` beside the
shards, and carried no seal.  It is still read, with those weaker checks;
sharding again (over it) writes version 2.

>>> # read_manifest(Path("corpus.sharded")).shards[0].generation  -> 'gen-000002'
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
from irflow.util.corpusmarks import GEN_RE, SHARDED_FORMAT
from irflow.util.unicode import escape_surrogates
from irflow.util import npyfiles
from irflow.store.generations import SHARD_DIR_RE as STORE_SHARD_DIR_RE
from irflow.store.generations import SHARDED_MANIFEST, checksum, read_small_file
from irflow.store.genfiles import bytes_checksum

__all__ = ["MANIFEST_FILE", "FORMAT_NAME", "FORMAT_VERSION", "READ_VERSIONS", "ROWS_FILE", "ShardEntry",
           "ShardManifest", "read_manifest", "is_sharded", "shard_dir_name", "SHARD_DIR_RE", "ROWS_FILE_V1_RE",
           "check_layout", "read_rows_v1", "check_rows", "in_shard"]

MANIFEST_FILE = SHARDED_MANIFEST
FORMAT_NAME = SHARDED_FORMAT
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
#: The file of a shard's generation that lists its global rows (only when they are not contiguous).
ROWS_FILE = "global_rows.npy"
#: The names irflow gives shard directories (and the only ones it ever removes); the store knows them too.
SHARD_DIR_RE = STORE_SHARD_DIR_RE
#: Version 1's rows files, beside the shard directories.
ROWS_FILE_V1_RE = re.compile(r"^shard-(\d{3,})\.rows\.npy\Z")
#: A manifest lists a few numbers per shard: it stays small.
MANIFEST_LIMIT = 16 << 20
_DIGEST_RE = re.compile(r"^[0-9a-f]{32}\Z")
_ZEROS = "0" * 32
#: The seal: the file's last member, then the closing brace (json.dumps(..., indent=1) + "\n").
_SEAL_RE = re.compile(rb'"checksum": "([0-9a-f]{32})"\n\}\n\Z')
_KEYS_V2 = {"format", "version", "build_id", "created", "name", "counts", "kinds", "analyzer", "embedder", "shards",
            "checksum"}


def shard_dir_name(index: int) -> str:
    """``shard-007`` for shard 7 (``shard-000``, :data:`~irflow.util.corpusmarks.FIRST_SHARD`, for shard 0)."""
    return f"shard-{index:03d}"


def _count(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name} must be an integer >= 0, got {value!r}")


def _text(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, str):
        raise ValueError(f"{attribute.name} must be a string, got {value!r}")


def _digest(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not (isinstance(value, str) and _DIGEST_RE.match(value)):
        raise ValueError(f"{attribute.name} must be 32 hex digits, got {value!r}")


def _generation(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not (isinstance(value, str) and GEN_RE.match(value)):
        raise ValueError(f"{attribute.name} must name a generation (gen-NNNNNN), got {value!r}")


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    values = tuple(values)
    if not all(isinstance(v, str) for v in values):
        raise ValueError(f"expected a list of strings, got {list(values)!r}")
    return values


def _entries(values: Iterable[ShardEntry]) -> tuple[ShardEntry, ...]:
    return tuple(values)


@attrs.frozen
class ShardEntry:
    """One shard as the manifest lists it.

    ``first_row``: the global row of its local row 0; ``generation``: the
    generation of the shard directory ``dir`` that holds the shard (None in
    a version-1 manifest: the shard's ``CURRENT``); ``build_id`` and
    ``manifest_checksum``: that generation's build id and the checksum of
    its manifest (which holds the checksum of every file of the shard);
    ``rows_file``: the file holding its global rows when they are not
    ``first_row .. first_row + n_rows - 1`` (None for a contiguous shard) —
    :data:`ROWS_FILE` in the generation, or (version 1) a file beside the
    shard directories with its ``rows_checksum``.
    """

    index: int = attrs.field(validator=_count)
    dir: str = attrs.field(validator=_text)
    n_rows: int = attrs.field(validator=_count)
    live: int = attrs.field(validator=_count)
    artifacts: int = attrs.field(validator=_count)
    first_row: int = attrs.field(validator=_count)
    build_id: str = attrs.field(validator=_text)
    manifest_checksum: str = attrs.field(validator=_digest)
    kinds: tuple[str, ...] = attrs.field(converter=_strings)
    generation: str | None = attrs.field(default=None, validator=_generation)
    rows_file: str | None = attrs.field(default=None, validator=attrs.validators.optional(_text))
    rows_checksum: str | None = attrs.field(default=None, validator=_digest)

    @property
    def contiguous(self) -> bool:
        return self.rows_file is None

    def to_dict(self) -> dict[str, Any]:
        """The entry as version 2 writes it (no ``rows_checksum``: the generation's manifest has it)."""
        data = attrs.asdict(self)
        data.pop("rows_checksum")
        data["kinds"] = list(self.kinds)
        return data


@attrs.frozen
class ShardManifest:
    """The whole sharded corpus: its name, total counts, global kinds, embedder, analyzer and shards.

    ``version``: the format it was read in (written: always the current);
    ``digest``: the checksum of the file as read (its seal; for version 1,
    the blake2b of its bytes), by which a reader tells that a writer
    committed since it read the manifest.
    """

    name: str = attrs.field(validator=_text)
    n_rows: int = attrs.field(validator=_count)
    live: int = attrs.field(validator=_count)
    kinds: tuple[str, ...] = attrs.field(converter=_strings)
    analyzer: Mapping[str, Any] = attrs.field(validator=attrs.validators.instance_of(dict))
    embedder: Mapping[str, Any] | None = attrs.field(validator=attrs.validators.optional(
        attrs.validators.instance_of(dict)))
    shards: tuple[ShardEntry, ...] = attrs.field(converter=_entries)
    build_id: str = attrs.field(factory=lambda: uuid.uuid4().hex, validator=_text)
    created: str = attrs.field(factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                               validator=_text)
    version: int = FORMAT_VERSION
    digest: str | None = attrs.field(default=None, eq=False)

    def to_bytes(self) -> bytes:
        """The manifest as written (always the current version), sealed by its own checksum (see the module doc)."""
        data = {
            "format": FORMAT_NAME, "version": FORMAT_VERSION, "build_id": self.build_id, "created": self.created,
            "name": self.name, "counts": {"rows": self.n_rows, "live": self.live, "shards": len(self.shards)},
            "kinds": list(self.kinds), "analyzer": dict(self.analyzer),
            "embedder": None if self.embedder is None else dict(self.embedder),
            "shards": [entry.to_dict() for entry in self.shards],
        }
        # a lone surrogate (a corpus named by a non-UTF-8 folder) as its JSON escape, which UTF-8 holds
        head = escape_surrogates(json.dumps(data, ensure_ascii=False, indent=1))[:-2]  # without the closing "\n}"

        def sealed(digest: str) -> bytes:
            return f'{head},\n "checksum": "{digest}"\n}}\n'.encode("utf-8")
        return sealed(bytes_checksum(sealed(_ZEROS)))


def is_sharded(root: str | Path) -> bool:
    """True when *root* is a directory holding a shard manifest."""
    return (Path(root) / MANIFEST_FILE).is_file()


def _bad(path: Path, what: str) -> CorpusError:
    return CorpusError(f"{path}: {what}; the sharded corpus is damaged — shard it again (irflow shard CORPUS "
                       f"--shards N --out {path.parent})")


def _read_bytes(root: Path) -> bytes:
    path = root / MANIFEST_FILE
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise CorpusError(f"no sharded corpus at {root}: the path {what}; make one with irflow shard CORPUS "
                          f"--shards N --out {root} (or irflow.shard(corpus, n, path))")
    try:
        return read_small_file(path, MANIFEST_LIMIT, root=root)
    except FileNotFoundError:
        raise CorpusError(f"{root} is not a sharded corpus: it has no {MANIFEST_FILE} (not sharded, or sharding "
                          "was interrupted before it finished); shard it again with irflow shard") from None
    except CorpusError:  # a FIFO, a device, a directory, or too large: irflow never writes one
        raise _bad(path, f"is not a regular file of at most {MANIFEST_LIMIT} bytes") from None
    except OSError as exc:
        raise _bad(path, f"cannot be read ({exc})") from None


def _unsealed(path: Path, raw: bytes) -> tuple[dict[str, Any], str]:
    """The manifest's JSON and its digest: the seal checked (version 2), or the bytes' digest (version 1)."""
    seal = _SEAL_RE.search(raw)
    if seal is not None:
        zeroed = raw[:seal.start(1)] + _ZEROS.encode("ascii") + raw[seal.end(1):]
        digest = seal.group(1).decode("ascii")
        if bytes_checksum(zeroed) != digest:
            raise _bad(path, "does not match its checksum (altered or truncated bytes)")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise _bad(path, f"is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise _bad(path, f"is not an irflow shard manifest (format {data.get('format') if isinstance(data, dict) else None!r})")
    version = data.get("version")
    if version not in READ_VERSIONS or type(version) is not int:
        raise CorpusError(f"{path}: shard manifest version {version!r}, this irflow reads versions "
                          f"{', '.join(map(str, READ_VERSIONS))}; shard the corpus again with this irflow, or "
                          "upgrade irflow")
    if version == 1:
        return data, bytes_checksum(raw)
    if seal is None:
        raise _bad(path, 'does not end with its "checksum" (truncated or altered)')
    if set(data) != _KEYS_V2 or data["checksum"] != digest:
        raise _bad(path, f"holds the members {sorted(data)}, expected {sorted(_KEYS_V2)}")
    return data, digest


def read_manifest(root: Path) -> ShardManifest:
    """The manifest of the sharded corpus at *root*, sealed and consistent (CorpusError naming the file)."""
    path = root / MANIFEST_FILE
    data, digest = _unsealed(path, _read_bytes(root))
    version = data["version"]
    try:
        counts = data["counts"]
        entries = data["shards"]
        if not isinstance(counts, dict) or not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise TypeError("'counts' must be a table and 'shards' a list of tables")
        if version == 2 and (set(counts) != {"rows", "live", "shards"} or counts["shards"] != len(entries)):
            raise ValueError(f"'counts' {counts} must hold rows, live and shards (the number of entries)")
        shards = tuple(ShardEntry(**entry) for entry in entries)
        manifest = ShardManifest(
            name=data["name"], n_rows=counts["rows"], live=counts["live"], kinds=data["kinds"],
            analyzer=data["analyzer"], embedder=data["embedder"], shards=shards, build_id=data["build_id"],
            created=data["created"], version=version, digest=digest)
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad(path, f"is missing or has an ill-formed entry ({type(exc).__name__}: {exc})") from None
    _check(path, manifest)
    return manifest


def _check_entry(path: Path, version: int, i: int, entry: ShardEntry) -> None:
    if entry.index != i or entry.dir != shard_dir_name(i):
        raise _bad(path, f"entry {i} names shard {entry.index} in {entry.dir!r}, expected {shard_dir_name(i)!r}")
    if version == 2:
        if entry.generation is None or entry.rows_checksum is not None or entry.rows_file not in (None, ROWS_FILE):
            raise _bad(path, f"shard {i} must name its generation, and its rows file {ROWS_FILE!r} (or none)")
    elif entry.generation is not None or (entry.rows_file is not None and (
            not ROWS_FILE_V1_RE.match(entry.rows_file) or entry.rows_checksum is None)):
        raise _bad(path, f"shard {i} names the rows file {entry.rows_file!r} (expected shard-NNN.rows.npy "
                         "with a checksum) or a generation (version 1 names none)")
    if (entry.n_rows == 0 and version == 1) or entry.live > entry.n_rows:  # (version 2: emptied by compaction)
        raise _bad(path, f"shard {i} has {entry.n_rows} rows ({entry.live} live)")


def _check(path: Path, manifest: ShardManifest) -> None:
    """Counts that add up, shards numbered 0..n-1 in their own directories, kinds in global order."""
    shards = manifest.shards
    if not shards:
        raise _bad(path, "lists no shard")
    for i, entry in enumerate(shards):
        _check_entry(path, manifest.version, i, entry)
    if sum(e.n_rows for e in shards) != manifest.n_rows or sum(e.live for e in shards) != manifest.live:
        raise _bad(path, "the shards' row counts do not add up to the corpus's")
    kinds: dict[str, None] = {}
    for entry in shards:
        kinds.update(dict.fromkeys(entry.kinds))
    if set(kinds) != set(manifest.kinds):
        raise _bad(path, f"the shards' kinds {sorted(kinds)} differ from the corpus's {list(manifest.kinds)}")


#: What a single corpus's damage is told to do (rebuild it alone); in a sharded corpus that would not repair it.
_SINGLE_FIX_RE = re.compile(r"; the corpus is damaged — rebuild it(?: with irflow\.build\(\.\.\., path=(?:'[^']*'|\"[^\"]*\")\))?")


def in_shard(index: int, shard_dir: Path, error: CorpusError) -> CorpusError:
    """A shard's own CorpusError, naming the shard first, with the fix of a sharded corpus instead of a single one's."""
    return CorpusError(f"shard {index} ({shard_dir}): {_SINGLE_FIX_RE.sub('', str(error))}; the sharded corpus is "
                       "damaged — restore the shard's files or shard the corpus again (a shard rebuilt or changed on its "
                       f"own no longer matches {MANIFEST_FILE})")


def check_rows(where: Path, entry: ShardEntry, rows: np.ndarray) -> np.ndarray:
    """*rows* if they are the entry's ``n_rows`` ascending int64 global rows from ``first_row`` (else CorpusError)."""
    if rows.dtype != np.int64 or rows.shape != (entry.n_rows,) or (rows.size and rows[0] != entry.first_row) \
            or np.any(np.diff(rows) <= 0):
        raise CorpusError(f"shard {entry.index}: {where} does not hold {entry.n_rows} ascending int64 global rows "
                          f"from {entry.first_row}; shard the corpus again")
    return rows


def read_rows_v1(root: Path, entry: ShardEntry) -> np.ndarray:
    """A version-1 shard's global rows: a range, or its rows file checked against the manifest."""
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
        rows = npyfiles.load(path)  # threads: one header at a time
    except (OSError, ValueError) as exc:
        raise CorpusError(f"shard {entry.index}: {path} is unreadable ({exc}); shard the corpus again") from None
    return check_rows(path, entry, rows)


def check_layout(root: Path, manifest: ShardManifest, rows: Sequence[np.ndarray]) -> None:
    """The shards' rows partition 0..n_rows-1.

    Shard directories the manifest does not list are not an error: they
    are what a sharding into fewer shards leaves while a reader still holds
    them, or what an interrupted one left; the next sharding removes them.
    """
    seen = np.zeros(manifest.n_rows, dtype=bool)
    for entry, part in zip(manifest.shards, rows):
        if part.size and (part[-1] >= manifest.n_rows or seen[part].any()):
            raise _bad(root / MANIFEST_FILE, f"shard {entry.index}'s global rows overlap another shard's or pass "
                                             f"the corpus's {manifest.n_rows} rows")
        seen[part] = True
    if not seen.all():
        raise _bad(root / MANIFEST_FILE, f"global row {int(np.argmin(seen))} belongs to no shard")
