"""Finding strings among many by a 64-bit digest: sorted digests, a binary search, the bytes compared.

Looking a few keys up among a million strings (a corpus's record ids, its
artifacts, its texts) must not build a Python dict of them: decoding and
hashing a million strings one by one takes seconds.  A :class:`KeyIndex`
digests every string at once from its UTF-8 bytes (``blob`` end to end,
``offsets`` their n + 1 bounds): a polynomial hash mod 2^64 summed per
string by ``np.add.reduceat``, then mixed — vectorized, about 0.1 s per
20 MB of strings —, sorts the digests once, and finds a key by a binary
search; a digest that matches is a candidate only: the bytes must equal the
key's.  Digests are plain integer arithmetic, the same in every process and
on every machine, so they can be stored (a corpus segment's ``text_hash``).

>>> blob, offsets = encode(["r1", "r2", "ré"])
>>> index = KeyIndex(blob, offsets)
>>> index.find(["ré", "nope", "r1"]).tolist(), index.find_one("r2")
([2, -1, 0], 1)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["KeyIndex", "string_digests", "encode", "digests_of"]

_P = np.uint64(0x100000001B3)  # odd: every power is a unit mod 2^64
_MIX1 = np.uint64(0xFF51AFD7ED558CCD)
_MIX2 = np.uint64(0xC4CEB9FE1A85EC53)
_LENGTH = np.uint64(0x9E3779B97F4A7C15)
_CHUNK_BYTES = 1 << 21
#: Slots of the table duplicates are first looked for in (4 M: 32 MB of counts).
_SLOTS = 1 << 22
_powers = np.ones(1, dtype=np.uint64)


def _power_table(size: int) -> np.ndarray:
    """P^0 .. P^(size-1) mod 2^64 (grown on demand, kept)."""
    global _powers
    if _powers.size < size:
        table = np.full(max(size, 2 * _powers.size), _P, dtype=np.uint64)
        table[0] = 1
        with np.errstate(over="ignore"):
            _powers = np.cumprod(table, dtype=np.uint64)
    return _powers


def _finish(h: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = h ^ (lengths.astype(np.uint64) * _LENGTH)
        h ^= h >> np.uint64(33)
        h *= _MIX1
        h ^= h >> np.uint64(33)
        h *= _MIX2
        h ^= h >> np.uint64(33)
    return h


def string_digests(blob: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """One uint64 digest per string (``blob``: the strings' UTF-8 bytes end to end; ``offsets``: n + 1 bounds)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    n = int(offsets.size) - 1
    out = np.zeros(n, dtype=np.uint64)
    lengths = np.diff(offsets)
    if n and int(lengths.min()) == int(lengths.max()) > 0:  # one length (ids): Horner's rule, column by column
        width = int(lengths[0])
        rows = np.asarray(blob[int(offsets[0]):int(offsets[-1])]).reshape(n, width)
        with np.errstate(over="ignore"):
            for j in range(width - 1, -1, -1):  # sum of b[j] * P^j, the same digest as the general way
                out *= _P
                out += rows[:, j]
        return _finish(out, lengths)
    lo = 0
    while lo < n:  # a chunk of ~2 MB of bytes at a time: its temporaries stay small
        hi = int(np.searchsorted(offsets, offsets[lo] + _CHUNK_BYTES, side="right")) - 1
        hi = min(max(hi, lo + 1), n)
        start, end = int(offsets[lo]), int(offsets[hi])
        size = lengths[lo:hi]
        filled = np.flatnonzero(size > 0)
        if filled.size:
            at = offsets[lo:hi] - start
            position = np.arange(end - start, dtype=np.int64) - np.repeat(at, size)
            powers = _power_table(int(size.max()))
            with np.errstate(over="ignore"):
                terms = np.asarray(blob[start:end]).astype(np.uint64) * powers[position]
                out[lo + filled] = np.add.reduceat(terms, at[filled])
        lo = hi
    return _finish(out, lengths)


def encode(keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The UTF-8 bytes of *keys* end to end (uint8) and their n + 1 offsets."""
    parts = [k.encode("utf-8") for k in keys]
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)), out=offsets[1:])
    return np.frombuffer(b"".join(parts), dtype=np.uint8), offsets


def digests_of(keys: Sequence[str]) -> np.ndarray:
    """The digests of strings (what :func:`string_digests` gives for their bytes)."""
    return string_digests(*encode(keys))


class KeyIndex:
    """The positions of strings by digest (see the module docstring); built once, read-only.

    The digests are computed when it is made; their sorted order only after
    a few lookups: until then a lookup of a batch of keys is one pass over
    the digests (a binary search of each among the batch's few, sorted),
    which costs less than sorting a million digests for one commit's worth
    of keys.
    """

    #: Lookups answered by a pass over the digests before they are sorted once for all.
    SCANS_BEFORE_SORTING = 4

    def __init__(self, blob: np.ndarray, offsets: np.ndarray, digests: np.ndarray | None = None) -> None:
        self.blob = blob
        self.offsets = offsets
        self.digests = string_digests(blob, offsets) if digests is None else np.asarray(digests, dtype=np.uint64)
        self._order: np.ndarray | None = None
        self._sorted: np.ndarray | None = None
        self._scans = 0

    def _bytes(self, position: int) -> bytes:
        return bytes(self.blob[int(self.offsets[position]):int(self.offsets[position + 1])])

    def _sort(self) -> tuple[np.ndarray, np.ndarray]:
        if self._order is None or self._sorted is None:
            order = np.argsort(self.digests, kind="stable")
            self._sorted, self._order = self.digests[order], order
        return self._order, self._sorted

    def _candidates(self, wanted: np.ndarray) -> list[np.ndarray]:
        """For each wanted digest, the positions holding it, ascending."""
        if self._order is None and self._scans < self.SCANS_BEFORE_SORTING:
            self._scans += 1
            keys = np.unique(wanted)
            at = np.minimum(np.searchsorted(keys, self.digests), keys.size - 1)
            hit = np.flatnonzero(keys[at] == self.digests)  # positions whose digest is wanted, ascending
            which = at[hit]
            return [hit[which == np.searchsorted(keys, w)] for w in wanted.tolist()]
        order, ordered = self._sort()
        lo = np.searchsorted(ordered, wanted, side="left")
        hi = np.searchsorted(ordered, wanted, side="right")
        return [np.sort(order[a:b]) for a, b in zip(lo.tolist(), hi.tolist())]

    def find(self, keys: Sequence[str], *, twice: list[str] | None = None,
             digests: np.ndarray | None = None) -> np.ndarray:
        """The position of each key (its first, should several hold it), -1 for a key absent.

        ``twice``: a list that receives each key found at more than one position.
        ``digests``: the keys' :func:`digests_of`, when the caller has them
        (the same keys looked up in several indexes are digested once).
        """
        keys = list(keys)
        found = np.full(len(keys), -1, dtype=np.int64)
        if not keys or not self.digests.size:
            return found
        for i, positions in enumerate(self._candidates(digests_of(keys) if digests is None else digests)):
            if not positions.size:
                continue
            encoded = keys[i].encode("utf-8")
            for position in positions.tolist():
                if self._bytes(position) != encoded:  # a digest match is a candidate only
                    continue
                if found[i] < 0:
                    found[i] = position
                    if twice is None:
                        break
                elif twice is not None:
                    twice.append(keys[i])
                    break
        return found

    def find_one(self, key: str) -> int | None:
        position = int(self.find([key])[0])
        return None if position < 0 else position

    def duplicate(self) -> str | None:
        """A string held at two positions, or None.

        Without sorting every digest: their low bits counted in a table of
        ``_SLOTS`` (a bincount), only the digests sharing a slot are sorted
        and compared — a few percent of them at a million strings.
        """
        digests = self.digests
        slots = (digests & np.uint64(_SLOTS - 1)).astype(np.int64)
        shared = np.flatnonzero(np.bincount(slots, minlength=_SLOTS)[slots] > 1)
        if not shared.size:
            return None
        order = shared[np.argsort(digests[shared], kind="stable")]
        ordered = digests[order]
        for i in np.flatnonzero(ordered[1:] == ordered[:-1]).tolist():
            first, second = order[i:i + 2].tolist()
            if self._bytes(first) == self._bytes(second):
                return self._bytes(first).decode("utf-8", "replace")
        return None
