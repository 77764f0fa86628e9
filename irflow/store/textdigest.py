"""Finding a text among a corpus's rows by a digest, so an update embeds only texts the corpus lacks.

An update of a corpus built with an embedder embeds its new records' texts —
except a text some row of the corpus already holds (a name repeated, a
record put back): its vector is that row's, the same bits the embedder
gives (a fresh build embeds each distinct text once, too).  Each segment
keeps one 64-bit digest per row (of the text's UTF-8 bytes,
:mod:`irflow.kernels.digests`; written with the segment, computed on first
need for a segment of an older format)
and their order (an argsort, made on first need, kept with the segment):
a text is looked up by a binary search per segment, and a digest that
matches is only a candidate — the row's text must be equal byte for byte.

>>> digests = text_digests(["a", "b", "a"])
>>> bool(digests[0] == digests[2]), bool(digests[0] == digests[1])
(True, False)
>>> text_index(["a", "b"], digests[:2]).find(["b", "c"]).tolist()
[1, -1]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from irflow.kernels.digests import KeyIndex, string_digests
from irflow.store.columnar import StringColumn

__all__ = ["text_digests", "text_index"]


def _column(texts: StringColumn | Sequence[str]) -> StringColumn:
    return texts if isinstance(texts, StringColumn) else StringColumn.of(list(texts))


def text_digests(texts: StringColumn | Sequence[str]) -> np.ndarray:
    """One digest per text (uint64), from its UTF-8 bytes (:func:`irflow.kernels.digests.string_digests`)."""
    column = _column(texts)
    return string_digests(column.blob, column.offsets)


def text_index(texts: StringColumn | Sequence[str], digests: np.ndarray | None = None) -> KeyIndex:
    """The rows of *texts* by digest (the stored digests when given)."""
    column = _column(texts)
    return KeyIndex(column.blob, column.offsets, digests)
