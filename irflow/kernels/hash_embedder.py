"""The ``"hash"`` embedder: a deterministic lexical-overlap sketch, offline and dependency-free.

What :func:`irflow.kernels.embedders.resolve_embedder` builds for ``"hash"``
and ``"hash:<dim>"`` (the default of :func:`irflow.build`).  See
:class:`HashEmbedder` for what it is and what it is not.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Sequence
from itertools import chain
from typing import Any

import attrs
import numpy as np

from irflow.errors import EmbedderError
from irflow.kernels.vectors import normalize_rows

__all__ = ["HashEmbedder", "DEFAULT_HASH_DIM", "HASH_EMBEDDER_VERSION"]

#: Dimension of ``"hash"`` when none is given.
DEFAULT_HASH_DIM = 256
#: Bumped when the hash embedder maps a text to other vectors: part of its
#: identity (:meth:`Embedder.identity`), so cached corpora rebuild.
HASH_EMBEDDER_VERSION = 1
_MAX_HASH_DIM = 1 << 20
_WORD = re.compile(r"\w+")  # the "plain" analyzer (irflow.kernels.text), inlined for speed


class _IntBuffer:
    """An int64 array that grows by doubling: the hash embedder's feature table."""

    def __init__(self, capacity: int = 1024) -> None:
        self.data = np.empty(capacity, dtype=np.int64)
        self.size = 0

    def extend(self, values: Sequence[int]) -> None:
        end = self.size + len(values)
        if end > self.data.shape[0]:
            grown = np.empty(max(end, 2 * self.data.shape[0]), dtype=np.int64)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size : end] = values
        self.size = end

    def view(self) -> np.ndarray:
        return self.data[: self.size]


class _FeatureTable:
    """Per-embedder caches: feature string -> signed bucket, word -> id -> its features.

    A *signed bucket* packs the bucket index and the sign as ``bucket * 2 +
    sign_bit`` in one int.  Words are the unit of caching (one dict lookup per
    word occurrence instead of one per n-gram); their n-gram keys sit in one
    flat array indexed by word id (CSR), so a batch gathers them with numpy.
    """

    def __init__(self) -> None:
        self.features: dict[str, int] = {}  # "g:" + n-gram -> signed bucket
        self.word_ids: dict[str, int] = {}
        self.unigram = _IntBuffer()  # word id -> signed bucket of the word itself
        self.ngram_offsets = _IntBuffer()  # word id -> start of its n-grams; one extra end entry
        self.ngram_offsets.extend([0])
        self.ngram_keys = _IntBuffer()


@attrs.frozen(eq=False)
class HashEmbedder:
    """A lexical-overlap sketch: dense search that runs offline and deterministically.

    What it is: each text becomes a bag of features — its words (the "plain"
    analyzer's lowercase ``\\w+`` tokens) and the character 3-, 4- and 5-grams
    of each word with boundary markers (``<rank>`` gives ``<ra``, ``ran``,
    ``ank``, ``nk>``, ``<ran``, ...) — hashed with a signed hash into ``dim``
    buckets, weighted by sublinear term frequency (1 + log tf per bucket), the
    word block and the n-gram block normalized and added with equal weight,
    then L2-normalized.  Texts sharing words and word pieces come out similar
    (``rank_bm25`` is near ``bm25 ranking``; ``tokenizer`` near
    ``tokenizers``).  No dependencies, no download, and the same bytes on every
    machine and process: the hash is blake2b of the feature string, never
    Python's randomized ``hash()``.

    What it is not: semantic.  Synonyms and paraphrases ("car" / "automobile")
    share no features and do not match; collisions make unrelated texts
    slightly similar (more with a small ``dim``).  For meaning, use an
    ``"st:<model>"`` embedder.  It embeds queries and documents alike.

    >>> h = HashEmbedder(dim=64)
    >>> v = h(["rank_bm25 ranking library", "bm25 ranking", "chocolate cake recipe"], "document")
    >>> bool(v[0] @ v[1] > v[0] @ v[2])
    True
    """

    dim: int = attrs.field(default=DEFAULT_HASH_DIM)
    _table: _FeatureTable = attrs.field(factory=_FeatureTable, init=False, repr=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    #: Cache bound (~300 bytes a word plus its n-grams).  A full table stops
    #: growing: vocabularies are Zipfian, so the words seen first include the
    #: frequent ones, and rarer words are hashed afresh at each call.
    max_words: int = attrs.field(default=1 << 18, repr=False, kw_only=True)

    @dim.validator
    def _check_dim(self, attribute: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= _MAX_HASH_DIM:
            raise EmbedderError(f"the hash embedder's dimension must be an integer in 1..{_MAX_HASH_DIM}, got {value!r}")

    @property
    def spec(self) -> str:
        return f"hash:{self.dim}"

    def identity(self) -> dict[str, Any]:
        return {"kind": "hash", "version": HASH_EMBEDDER_VERSION}

    def __call__(self, texts: Sequence[str], kind: str = "document") -> np.ndarray:
        """Float32 (n, dim) unit rows (zero rows for texts without a word character)."""
        texts = list(texts)
        dim = int(self.dim)
        # Chunks bound the memory of the flat arrays and of the (m, dim, 2) counts.
        step = max(1, min(2048, (1 << 22) // (2 * dim)))
        out = np.zeros((len(texts), dim), dtype=np.float32)
        with self._lock:  # the feature tables are shared mutable state
            for start in range(0, len(texts), step):
                out[start : start + step] = self._embed_chunk(texts[start : start + step], dim)
        return out

    def _add_words(self, words: list[str], dim: int) -> None:
        """Append the features of words seen for the first time to the table, in id order."""
        table = self._table
        features = table.features
        grams = [
            [marked[i : i + n] for n in (3, 4, 5) for i in range(len(marked) - n + 1)]
            for marked in ("<" + word + ">" for word in words)
        ]
        flat = list(chain.from_iterable(grams))
        keys = list(map(features.get, flat))
        if None in keys:
            missing = list({gram for gram, key in zip(flat, keys) if key is None})
            hashed = dict(zip(missing, _signed_buckets(missing, b"g:", dim)))
            if len(features) < 4 * self.max_words:
                features.update(hashed)
            keys = [hashed[gram] if key is None else key for gram, key in zip(flat, keys)]
        table.unigram.extend(_signed_buckets(words, b"w:", dim))
        table.ngram_keys.extend(keys)  # type: ignore[arg-type]
        ends = table.ngram_offsets.view()[-1] + np.cumsum([len(g) for g in grams], dtype=np.int64)
        table.ngram_offsets.extend(ends)

    def _embed_chunk(self, texts: Sequence[str], dim: int) -> np.ndarray:
        table = self._table
        word_ids = table.word_ids
        base = len(word_ids)
        sizes = (table.unigram.size, table.ngram_offsets.size, table.ngram_keys.size)
        new_words: dict[str, int] = {}  # first seen in this chunk -> id (base, base + 1, ...)
        occurrences: list[int] = []
        counts: list[int] = []
        for text in texts:
            words = _WORD.findall(text.lower())
            ids = list(map(word_ids.get, words))
            if None in ids:
                for i, word in enumerate(words):
                    if ids[i] is None:
                        word_id = new_words.get(word)
                        if word_id is None:
                            word_id = new_words[word] = base + len(new_words)
                        ids[i] = word_id
            occurrences.extend(ids)  # type: ignore[arg-type]
            counts.append(len(ids))
        if new_words:
            self._add_words(list(new_words), dim)

        m = len(texts)
        occ_word = np.asarray(occurrences, dtype=np.int64)
        occ_doc = np.repeat(np.arange(m, dtype=np.int64), counts)
        # Word block: one signed bucket per word occurrence.
        words_block = self._weigh(occ_doc, table.unigram.view()[occ_word], m, dim)
        # N-gram block: gather each occurrence's slice of the flat n-gram array.
        offsets = table.ngram_offsets.view()
        starts = offsets[occ_word]
        lengths = offsets[occ_word + 1] - starts
        total = int(lengths.sum())
        shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
        positions = np.arange(total, dtype=np.int64) + shift
        grams_block = self._weigh(np.repeat(occ_doc, lengths), table.ngram_keys.view()[positions], m, dim)

        if new_words:
            if base < self.max_words:
                word_ids.update(new_words)
            else:
                # A full table keeps its words: the new ones served this chunk only.
                table.unigram.size, table.ngram_offsets.size, table.ngram_keys.size = sizes
        return normalize_rows(_unit(words_block) + _unit(grams_block))

    @staticmethod
    def _weigh(doc: np.ndarray, signed: np.ndarray, m: int, dim: int) -> np.ndarray:
        """(m, dim) float64 sums of sign * (1 + log tf) per (doc, bucket, sign)."""
        counts = np.bincount(doc * (2 * dim) + signed, minlength=m * 2 * dim)
        # tf values are small integers: a lookup table beats log over every bucket.
        table = np.log(np.arange(int(counts.max(initial=0)) + 1, dtype=np.float64)[1:]) + 1.0
        weights = np.concatenate(([0.0], table))[counts].reshape(m, dim, 2)
        return weights[:, :, 0] - weights[:, :, 1]


def _signed_buckets(strings: list[str], namespace: bytes, dim: int) -> list[int]:
    """``bucket * 2 + sign_bit`` of each string, from blake2b: stable on every machine.

    ``namespace`` keeps word and n-gram features apart (the word "cat" and the
    trigram "cat" are different features).
    """
    blake2b, from_bytes = hashlib.blake2b, int.from_bytes
    hashes = [
        from_bytes(blake2b(namespace + s.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
        for s in strings
    ]
    return [((h >> 1) % dim) * 2 + (h & 1) for h in hashes]


def _unit(block: np.ndarray) -> np.ndarray:
    norms = np.sqrt(np.einsum("ij,ij->i", block, block))
    norms[norms == 0.0] = 1.0
    unit: np.ndarray = block / norms[:, None]
    return unit
