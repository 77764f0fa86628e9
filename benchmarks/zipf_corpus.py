"""The synthetic corpus of issue 12's independent check: Zipf words, 20-200 tokens, two query mixes.

A vocabulary of ``vocab`` (50,000) words whose frequencies follow Zipf's law
(exponent 1.0: the word of rank r has probability proportional to 1 / r);
documents of 20-200 tokens, mean 60 (20 plus a gamma-distributed remainder
of mean 40, cut at 200); queries of 2-5 tokens in two mixes:

- ``corpus``: tokens drawn at corpus frequency, so most queries hold some of
  the most common words (the stopwords of a real language) — the hard case
  for a kernel whose cost follows the postings it reads;
- ``content``: tokens drawn at corpus frequency among the words of rank
  >= ``content_rank`` (100) only, as a query without stopwords would be.

Words are ``w<rank>`` (lowercase letters and digits), so irflow's ``plain``
analyzer cuts a document's text back into exactly its tokens: every system
gets the same token lists, and ``irflow.build`` the same text.

Deterministic: the same arguments give the same corpus and queries on any
machine (numpy's PCG64 with a fixed seed).  Documents come in chunks, so a
caller can stream 1M records without holding one Python list per token.

    >>> docs = zipf_docs(3, seed=1)
    >>> len(docs), all(20 <= len(d) <= 200 for d in docs)
    (3, True)
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

VOCAB = 50_000
EXPONENT = 1.0
MIN_LENGTH, MEAN_LENGTH, MAX_LENGTH = 20, 60, 200
CONTENT_RANK = 100
MIXES = ("corpus", "content")
_CHUNK = 100_000


def word(rank: int) -> str:
    """The word of rank ``rank`` (0 = the most common)."""
    return f"w{rank}"


def law(vocab: int = VOCAB, exponent: float = EXPONENT) -> np.ndarray:
    """Zipf probabilities of the ranks 0..vocab-1 (they sum to 1)."""
    p = 1.0 / np.arange(1, vocab + 1, dtype=np.float64) ** exponent
    return p / p.sum()


def _lengths(rng: np.random.Generator, n: int) -> np.ndarray:
    extra = rng.gamma(2.0, (MEAN_LENGTH - MIN_LENGTH) / 2.0, size=n)
    return np.minimum(MIN_LENGTH + np.rint(extra).astype(np.int64), MAX_LENGTH)


def zipf_ranks(n_docs: int, *, vocab: int = VOCAB, exponent: float = EXPONENT,
               seed: int = 0) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(lengths, ranks)`` per chunk of documents: the corpus as integer arrays (what it is made of)."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(law(vocab, exponent))
    cdf[-1] = 1.0
    for start in range(0, n_docs, _CHUNK):
        lengths = _lengths(rng, min(_CHUNK, n_docs - start))
        ranks = np.searchsorted(cdf, rng.random(int(lengths.sum())), side="right")
        yield lengths, np.minimum(ranks, vocab - 1)


def zipf_docs(n_docs: int, *, vocab: int = VOCAB, exponent: float = EXPONENT, seed: int = 0) -> list[list[str]]:
    """``n_docs`` token lists (1M documents: about 60M tokens, some 5 GB of Python lists)."""
    words = [word(r) for r in range(vocab)]
    docs: list[list[str]] = []
    for lengths, ranks in zipf_ranks(n_docs, vocab=vocab, exponent=exponent, seed=seed):
        flat = [words[r] for r in ranks.tolist()]
        bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        docs.extend(flat[bounds[i]:bounds[i + 1]] for i in range(lengths.size))
    return docs


def zipf_texts(n_docs: int, *, vocab: int = VOCAB, exponent: float = EXPONENT, seed: int = 0) -> Iterator[str]:
    """The documents as texts (tokens joined by spaces), one at a time: what ``irflow.build`` reads."""
    words = [word(r) for r in range(vocab)]
    for lengths, ranks in zipf_ranks(n_docs, vocab=vocab, exponent=exponent, seed=seed):
        flat = [words[r] for r in ranks.tolist()]
        bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        for i in range(lengths.size):
            yield " ".join(flat[bounds[i]:bounds[i + 1]])


def zipf_queries(n_queries: int, mix: str = "corpus", *, vocab: int = VOCAB, exponent: float = EXPONENT,
                 content_rank: int = CONTENT_RANK, seed: int = 0) -> list[list[str]]:
    """``n_queries`` queries of 2-5 tokens, drawn at corpus frequency (``mix="corpus"``) or among content words.

    >>> zipf_queries(2, "content", seed=3)[0][0] >= "w"
    True
    """
    if mix not in MIXES:
        raise ValueError(f"mix must be one of {', '.join(MIXES)}, got {mix!r}")
    rng = np.random.default_rng([seed, 1 + MIXES.index(mix)])
    p = law(vocab, exponent)
    low = content_rank if mix == "content" else 0
    p = p[low:] / p[low:].sum()
    return [[word(low + int(r)) for r in rng.choice(p.size, size=int(rng.integers(2, 6)), p=p)]
            for _ in range(n_queries)]
