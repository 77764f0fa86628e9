"""Finding a text among a corpus's rows by a digest, so an update embeds only texts the corpus lacks.

An update of a corpus built with an embedder embeds its new records' texts —
except a text some row of the corpus already holds (a name repeated, a
record put back): its vector is that row's, the same bits the embedder
gives (a fresh build embeds each distinct text once, too).  Each segment
keeps one 64-bit digest per row (blake2b of the text's UTF-8 bytes, written
with the segment; computed on first need for a segment of an older format)
and their order (an argsort, made on first need, kept with the segment):
a text is looked up by a binary search per segment, and a digest that
matches is only a candidate — the row's text must be equal byte for byte.

>>> digests = text_digests(["a", "b", "a"])
>>> bool(digests[0] == digests[2]), bool(digests[0] == digests[1])
(True, False)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from irflow.store.columnar import StringColumn

__all__ = ["text_digests", "digest", "TextIndex"]


def digest(data: bytes | memoryview) -> int:
    """The 64-bit digest of a text's UTF-8 bytes (stable across processes and machines)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def text_digests(texts: StringColumn | Sequence[str]) -> np.ndarray:
    """One digest per text (uint64): a stored column is read from its bytes, never decoded."""
    n = len(texts)
    out = np.empty(n, dtype=np.uint64)
    if isinstance(texts, StringColumn):
        view, bounds = texts.blob.data, texts.offsets.tolist()
        for i in range(n):
            out[i] = digest(view[bounds[i]:bounds[i + 1]])
    else:
        for i, text in enumerate(texts):
            out[i] = digest(text.encode("utf-8"))
    return out


class TextIndex:
    """The rows of one segment by text digest: digests, their order, and the texts to confirm a match."""

    def __init__(self, digests: np.ndarray, texts: StringColumn | Sequence[str]) -> None:
        self.digests = digests
        self.order = np.argsort(digests, kind="stable")
        self.sorted = digests[self.order]
        self.texts = texts

    def find(self, wanted: np.ndarray, texts: Sequence[str]) -> np.ndarray:
        """For each wanted (digest, text), a row holding exactly that text, or -1."""
        found = np.full(wanted.size, -1, dtype=np.int64)
        if not wanted.size or not self.sorted.size:
            return found
        lo = np.searchsorted(self.sorted, wanted, side="left")
        hi = np.searchsorted(self.sorted, wanted, side="right")
        for i in np.flatnonzero(hi > lo).tolist():
            for row in self.order[lo[i]:hi[i]].tolist():
                if self._text(row) == texts[i]:  # a digest match is a candidate only
                    found[i] = row
                    break
        return found

    def _text(self, row: int) -> Any:
        texts = self.texts
        if isinstance(texts, StringColumn):
            return texts.take_list(np.array([row], dtype=np.int64))[0]
        return texts[row]
