"""Columns of strings, of JSON values and the ledger as flat arrays: stored, mapped, decoded on demand.

A corpus of a million records cannot afford a Python object per record when
it opens (a ``json.loads`` of every id, text and metadata mapping took
seconds).  A :class:`StringColumn` is the column's UTF-8 bytes end to end
(``uint8``) and ``n + 1`` int64 offsets: both ``np.save``d, mapped back
read-only, and an item is decoded only when asked for — a batch of hits
decodes its own rows, and a whole column (``to_array``) is decoded once, by
one C call over the blob when it is ASCII.  A :class:`JsonColumn` holds one
JSON text per row, joined by commas, so ``"[" + blob + "]"`` is one JSON
array: a filter that needs every row's metadata decodes them in a single
``json.loads``, a hit decodes its own row.  A :class:`LedgerTable` is the
ledger as rows in plan order per artifact (CSR arrays).

>>> ids = StringColumn.of(["r1", "ré2", ""])
>>> ids[1], ids.take([2, 0]).tolist(), ids.to_array().tolist()
('ré2', ['', 'r1'], ['r1', 'ré2', ''])
>>> meta = JsonColumn.of([{"a": 1}, {}])
>>> meta[0], list(meta)
({'a': 1}, [{'a': 1}, {}])
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Callable, overload

import numpy as np

from irflow.errors import CorpusError
from irflow.kernels.digests import KeyIndex

__all__ = ["StringColumn", "JsonColumn", "LedgerTable", "check_offsets", "utf8_chunks", "utf8_offsets"]

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set by its __init__, untyped
#: Strings encoded at once when a column is written (a few MB of text at a time).
_ENCODE_ROWS = 8192


def utf8_offsets(values: Sequence[str]) -> np.ndarray:
    """The n + 1 byte offsets of these strings encoded end to end, without encoding them all at once.

    A chunk of ``_ENCODE_ROWS`` strings that is ASCII (one ``join`` and one
    ``isascii``, in C) has its character counts as byte counts; only other
    chunks are encoded here.  With :func:`utf8_chunks` a column is written
    in two passes and no temporary of its whole size.
    """
    n = len(values)
    lengths = np.empty(n, dtype=np.int64)
    for lo in range(0, n, _ENCODE_ROWS):
        chunk = values[lo:lo + _ENCODE_ROWS]
        ascii_chunk = "".join(chunk).isascii()
        lengths[lo:lo + len(chunk)] = np.fromiter(
            map(len, chunk) if ascii_chunk else (len(v.encode("utf-8")) for v in chunk),
            dtype=np.int64, count=len(chunk))
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def utf8_chunks(values: Sequence[str]) -> Iterator[bytes]:
    """The strings' UTF-8 bytes end to end, ``_ENCODE_ROWS`` strings at a time."""
    for lo in range(0, len(values), _ENCODE_ROWS):
        yield "".join(values[lo:lo + _ENCODE_ROWS]).encode("utf-8")


def check_offsets(offsets: np.ndarray, n: int, size: int, where: str) -> None:
    """CorpusError naming *where* unless *offsets* are n + 1 int64 rising from 0 to *size* (a blob's byte count)."""
    if offsets.ndim != 1 or offsets.dtype != np.int64 or offsets.size != n + 1:
        raise CorpusError(f"{where} holds {offsets.dtype} {offsets.shape}, expected int64 ({n + 1},); the corpus is "
                          "damaged — rebuild it")
    if offsets[0] != 0 or offsets[-1] != size or bool((np.diff(offsets) < 0).any()):
        raise CorpusError(f"{where} are not offsets rising from 0 to the {size} bytes of their blob; the corpus is "
                          "damaged — rebuild it")


class StringColumn(Sequence[str]):
    """n strings as UTF-8 bytes (``blob``, uint8) and int64 ``offsets`` (n + 1): item i is ``blob[o[i]:o[i+1]]``.

    ``where`` names the file in a decoding error (a blob that is not UTF-8 is
    damage, found on the first read of the bad item).
    """

    def __init__(self, blob: np.ndarray, offsets: np.ndarray, where: str = "a string column") -> None:
        self.blob = blob
        self.offsets = offsets
        self.where = where
        self._view = blob.data  # slicing a memoryview is cheap; str(view, "utf-8") decodes it
        self._array: np.ndarray | None = None
        self._lock = threading.Lock()

    @classmethod
    def of(cls, values: Sequence[str] | np.ndarray) -> "StringColumn":
        """The column of these strings, encoded chunk by chunk into one preallocated blob (see :func:`utf8_offsets`)."""
        if isinstance(values, StringColumn):
            return values
        values = values.tolist() if isinstance(values, np.ndarray) else values
        offsets = utf8_offsets(values)
        blob = np.empty(int(offsets[-1]), dtype=np.uint8)
        at = 0
        for data in utf8_chunks(values):
            blob[at:at + len(data)] = np.frombuffer(data, dtype=np.uint8)
            at += len(data)
        return cls(blob, offsets)

    def __len__(self) -> int:
        return int(self.offsets.size) - 1

    def _decode(self, start: int, end: int) -> str:
        try:
            return str(self._view[start:end], "utf-8")
        except UnicodeDecodeError as exc:
            raise CorpusError(f"{self.where} is not UTF-8 ({exc}); the corpus is damaged — rebuild it") from None

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            taken: list[str] = self.take(np.arange(len(self))[index]).tolist()
            return taken
        if self._array is not None:
            found: str = self._array[index]
            return found
        i = range(len(self))[index]  # IndexError and negative indices as a list
        return self._decode(int(self.offsets[i]), int(self.offsets[i + 1]))

    def take(self, rows: Any) -> np.ndarray:
        """The strings at *rows* (an object array): decoded one by one, or taken from the decoded column.

        Built for a batch of hits (a few rows per call, many calls): the
        bounds are checked over the Python list, not with numpy reductions,
        whose fixed cost per call outweighs ten rows' decoding.
        """
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if self._array is not None:
            found: np.ndarray = self._array[rows]
            return found
        out = np.empty(rows.size, dtype=object)
        out[:] = self.take_list(rows)
        return out

    def take_list(self, rows: np.ndarray) -> list[str]:
        """The strings at *rows* (int64 array) as a list."""
        if self._array is not None:
            taken: list[str] = self._array[rows].tolist()
            return taken
        n = len(self)
        index = rows.tolist()
        if index and (min(index) < 0 or max(index) >= n):
            if min(index) < -n or max(index) >= n:
                raise IndexError(f"row out of range 0..{n - 1}")
            index = [r + n if r < 0 else r for r in index]
        view, bound = self._view, self.offsets.item
        try:  # one comprehension over a few rows (the hits of a search): item() beats two gathers there
            return [view[bound(r):bound(r + 1)].tobytes().decode() for r in index]
        except UnicodeDecodeError as exc:
            raise CorpusError(f"{self.where} is not UTF-8 ({exc}); the corpus is damaged — rebuild it") from None

    def reader(self) -> Callable[[int], str]:
        """A function giving the string at one row (0 <= row < len: the caller's bound), for rows read one by one.

        What a search's hits spread over several segments read: a few rows of
        each column, where :meth:`take_list`'s set-up per call (a list, its
        bounds) cost more than the rows' decoding.
        """
        if self._array is not None:
            return self._array.item
        decode, bound = self._decode, self.offsets.item
        return lambda row: decode(bound(row), bound(row + 1))

    def to_array(self) -> np.ndarray:
        """Every string, as a read-only object array decoded once and kept (later reads index it)."""
        if self._array is None:
            with self._lock:
                if self._array is None:
                    self._array = self._decode_all()
        return self._array

    def _decode_all(self) -> np.ndarray:
        bounds = self.offsets.tolist()
        text = self._decode(0, len(self.blob))
        if len(text) == len(self.blob):  # ASCII: byte offsets are character offsets, slice the one string
            values: list[str] = [text[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        else:
            del text
            decode = self._decode
            values = [decode(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
        array = np.empty(len(values), dtype=object)
        array[:] = values
        array.setflags(write=False)
        return array

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_array().tolist())

    def __repr__(self) -> str:
        return f"StringColumn({len(self)} strings, {self.blob.size} bytes)"


class JsonColumn(Sequence[Any]):
    """n JSON values, each row's text followed by a comma, as a :class:`StringColumn`: decoded per row or all at once.

    The trailing commas make ``"[" + blob[:-1] + "]"`` one JSON array, so
    iterating (what a filter's columnar view does) decodes every row with a
    single ``json.loads`` and keeps the list, while a row read alone is
    decoded alone.  ``check`` validates each decoded value (a mapping, for
    metadata): a failure is damage, named after the file.
    """

    def __init__(self, strings: StringColumn, check: Callable[[Any], bool] | None = None,
                 what: str = "a JSON value") -> None:
        self.strings = strings
        self.check = check
        self.what = what
        self._values: list[Any] | None = None
        self._lock = threading.Lock()

    @classmethod
    def of(cls, values: Sequence[Any], *, name: Callable[[int], str] | None = None) -> "JsonColumn":
        """The column of these JSON-able values; CorpusError naming the row (``name(row)``) that cannot be written."""
        encode = _ENCODER.encode
        texts: list[str] = []
        for row, value in enumerate(values):
            try:
                texts.append("{}," if type(value) is dict and not value else encode(value) + ",")
            except (TypeError, ValueError) as exc:
                what = name(row) if name is not None else f"row {row}"
                raise CorpusError(f"cannot write {what} as JSON ({exc}); on-disk corpora store metadata as JSON — "
                                  "use str, numbers, bools, None, lists and dicts") from exc
        return cls(StringColumn.of(texts))

    def validate(self) -> None:
        """CorpusError naming the file unless every row is at least one byte and ends with its comma (vectorized)."""
        offsets, blob = self.strings.offsets, self.strings.blob
        if len(self) and (bool((np.diff(offsets) < 1).any()) or bool((blob[offsets[1:] - 1] != ord(",")).any())):
            raise CorpusError(f"{self.strings.where} does not hold one comma-terminated JSON text per row; the "
                              "corpus is damaged — rebuild it")

    def __len__(self) -> int:
        return len(self.strings)

    def _checked(self, value: Any, row: int) -> Any:
        if self.check is not None and not self.check(value):
            raise CorpusError(f"{self.strings.where}: row {row} holds a {type(value).__name__}, expected "
                              f"{self.what}; the corpus is damaged — rebuild it")
        return value

    def _loads(self, text: str) -> Any:
        try:
            return json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise CorpusError(f"{self.strings.where} is not valid JSON ({exc}); the corpus is damaged — "
                              "rebuild it") from None

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        if self._values is not None:
            return self._values[index]
        i = range(len(self))[index]
        strings = self.strings
        start, end = int(strings.offsets[i]), int(strings.offsets[i + 1])
        return self._checked(self._loads(strings._decode(start, end - 1)), i)

    def take(self, rows: np.ndarray) -> list[Any]:
        """The values at *rows* (int64 array), each decoded alone (or read from the decoded column).

        Alone: each row must hold exactly one value ending at its own comma,
        so damage cannot hide across rows (one scan of the rows joined was
        measured no faster once each row's bounds were checked).
        """
        if self._values is not None:
            values = self._values
            return [values[r] for r in rows.tolist()]
        value_of = self._value_of
        return [value_of(text, row) for text, row in zip(self.strings.take_list(rows), rows.tolist())]

    def reader(self) -> Callable[[int], Any]:
        """A function giving the value at one row (0 <= row < len: the caller's bound); see :meth:`StringColumn.reader`."""
        if self._values is not None:
            return self._values.__getitem__
        text_at, value_of = self.strings.reader(), self._value_of
        return lambda row: value_of(text_at(row), row)

    def _value_of(self, text: str, row: int) -> Any:
        """Row *row*'s value from its text (with its comma): exactly one JSON value, checked."""
        try:  # the C scanner json.loads runs, without its two regex passes per call
            value, end = _SCAN(text, 0)
        except (StopIteration, json.JSONDecodeError, RecursionError):
            value, end = self._loads(text[:-1]), len(text) - 1  # raises, naming the file
        if end != len(text) - 1:
            self._loads(text[:-1])  # trailing bytes: the full parser's error, naming the file
        return self._checked(value, row)

    def to_list(self) -> list[Any]:
        """Every row's value, decoded by one ``json.loads`` of the whole blob and kept (treat as read-only)."""
        if self._values is None:
            with self._lock:
                if self._values is None:
                    size = len(self.strings.blob)
                    values = self._loads("[" + self.strings._decode(0, size - 1) + "]") if size else []
                    if not isinstance(values, list) or len(values) != len(self):
                        raise CorpusError(f"{self.strings.where} does not hold {len(self)} JSON texts; the corpus "
                                          "is damaged — rebuild it")
                    if self.check is not None and not all(map(self.check, values)):
                        bad = next(i for i, v in enumerate(values) if not self.check(v))
                        self._checked(values[bad], bad)
                    self._values = values
        return self._values

    def __iter__(self) -> Iterator[Any]:
        return iter(self.to_list())

    def __repr__(self) -> str:
        return f"JsonColumn({len(self)} values, {self.strings.blob.size} bytes)"


class LedgerTable(Mapping[str, tuple[str, ...]]):
    """The ledger as arrays: artifacts in ledger order, each one's listed rows in plan order (CSR), -1 for an id not held.

    ``rows[offsets[i]:offsets[i + 1]]`` are the rows artifact ``artifacts[i]``
    lists; a listed id the store does not hold (a stale ledger) is row -1, its
    id kept in ``missing`` (in the order of the -1 entries).  As a mapping it
    is the ledger as written: artifact -> record ids; the artifact -> index
    dict it needs is built on first lookup, not on open.
    """

    def __init__(self, artifacts: Sequence[str], offsets: np.ndarray, rows: np.ndarray, missing: Sequence[str],
                 record_ids_of: Callable[[np.ndarray], np.ndarray], *, where: str = "the ledger") -> None:
        self.artifacts = artifacts
        self.offsets = offsets
        self.rows = rows
        self.missing = list(missing)
        self.where = where  # how messages name it: its file, for a stored corpus
        self._record_ids_of = record_ids_of
        self._index: dict[str, int] | None = None
        self._keys: KeyIndex | None = None
        self._missing_at: dict[int, str] | None = None

    @classmethod
    def of(cls, ledger: Mapping[str, Sequence[str]], row_of: Mapping[str, int],
           record_ids_of: Callable[[np.ndarray], np.ndarray]) -> "LedgerTable":
        """The table of a mapping artifact -> record ids, resolved through *row_of* (ids it lacks become -1)."""
        artifacts = list(ledger)
        lengths = np.fromiter((len(ids) for ids in ledger.values()), dtype=np.int64, count=len(artifacts))
        offsets = np.zeros(len(artifacts) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        get = row_of.get
        rows = np.fromiter((get(rid, -1) for ids in ledger.values() for rid in ids), dtype=np.int64,
                           count=int(offsets[-1]))
        missing = [rid for ids in ledger.values() for rid in ids if rid not in row_of] if (rows < 0).any() else []
        return cls(artifacts, offsets, rows, missing, record_ids_of)

    def positions(self, artifacts: Sequence[str], *, digests: np.ndarray | None = None) -> np.ndarray:
        """The position of each artifact in the ledger, -1 for one it does not list.

        Stored artifacts are found by digest (:class:`irflow.kernels.digests.KeyIndex`,
        built once: no decoding of every name; ``digests``: the artifacts'
        digests when the caller has them); others through a dict built once.
        """
        names = self.artifacts
        if isinstance(names, StringColumn):
            if self._keys is None:
                self._keys = KeyIndex(names.blob, names.offsets)
            return self._keys.find(list(artifacts), digests=digests)
        if self._index is None:
            held = list(names)
            self._index = dict(zip(held, range(len(held))))
        get = self._index.get
        return np.fromiter((get(a, -1) for a in artifacts), dtype=np.int64, count=len(artifacts))

    def index(self, artifact: str) -> int | None:
        """The position of *artifact* in the ledger, or None."""
        found = int(self.positions([artifact])[0])
        return None if found < 0 else found

    def entry(self, artifact: str) -> tuple[np.ndarray, list[str]] | None:
        """(listed rows in plan order, -1 where the id is not held; the ids of those -1 entries), or None if unlisted."""
        return self.entries([artifact])[0]

    def entries(self, artifacts: Sequence[str], *,
                digests: np.ndarray | None = None) -> list[tuple[np.ndarray, list[str]] | None]:
        """:meth:`entry` of each artifact, found at once (``digests``: see :meth:`positions`)."""
        out: list[tuple[np.ndarray, list[str]] | None] = []
        for i in self.positions(artifacts, digests=digests).tolist():
            if i < 0:
                out.append(None)
                continue
            start, end = int(self.offsets[i]), int(self.offsets[i + 1])
            rows = self.rows[start:end]
            gone = np.flatnonzero(rows < 0)
            if not gone.size:
                out.append((rows, []))
                continue
            if self._missing_at is None:
                self._missing_at = dict(zip(np.flatnonzero(self.rows < 0).tolist(), self.missing))
            out.append((rows, [self._missing_at[start + int(g)] for g in gone]))
        return out

    def __getitem__(self, artifact: str) -> tuple[str, ...]:
        found = self.entry(artifact)
        if found is None:
            raise KeyError(artifact)
        rows, missing = found
        ids = self._record_ids_of(np.maximum(rows, 0)).tolist()
        for position, record_id in zip(np.flatnonzero(rows < 0).tolist(), missing):
            ids[position] = record_id
        return tuple(ids)

    def __contains__(self, artifact: object) -> bool:
        return isinstance(artifact, str) and self.index(artifact) is not None

    def __len__(self) -> int:
        return int(self.offsets.size) - 1

    def __iter__(self) -> Iterator[str]:
        return iter(self.artifacts)
