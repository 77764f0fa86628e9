"""The corpus protocol: everything a stage, the executor, a result or a trace may ask of a corpus.

Retrieval code never reaches into a corpus's arrays: it asks for what it
needs, for the rows it holds.  That is the seam that lets an in-memory
corpus, an on-disk (memory-mapped) corpus and a sharded corpus (each shard a
corpus of its own, possibly on another machine) be interchangeable under
every recipe.  :class:`~irflow.store.corpus.Corpus` implements it;
``tests/test_corpus_protocol.py`` runs every built-in recipe against a
wrapper that forwards only these members and checks the results equal the
corpus's own.

The row space.  A corpus numbers its records ``0 .. n_rows - 1`` (deleted
rows keep their numbers).  A sharded corpus presents one *global* row space
(e.g. shard offsets), and every row below is a global row.

The shape of the protocol, and why:

- Per-row-batch lookups (``record_ids_of(rows)``, ``artifact_ids_of(rows)``,
  ``kind_codes_of(rows)``, ``surface_indices_of(rows)``, ``records(rows)``,
  ``hits(rows, scores)``): a stage asks about the candidates it holds
  (tens to thousands of rows), never for a whole-corpus array of Python
  objects, which a sharded corpus would have to gather.  Vectorized: one
  call per batch, numpy in and out.
- Candidate masks are the one whole-corpus value: a bool array over the
  global row space (one byte per row), what a filter stage outputs and the
  top-k calls take.
- Query analysis (``tokenize_queries``, ``embed_queries``) belongs to the
  corpus, because the corpus knows the analyzer its postings were built with
  and the embedder of its vectors.
- The top-k calls are exact and tie-break by row (see ``irflow.kernels``);
  ``bm25_topk`` takes collection statistics from outside (``stats``), what a
  sharded corpus exchanges so that every shard scores as the whole would.
- ``sibling_rows`` is the ledger, by artifact: what expansion and
  artifact-level rerank texts need.
- ``version`` changes whenever a query's answer could (a delete), so stage
  caches keyed by it never serve stale outputs.

Anything else a corpus offers (``Corpus.store``, ``Corpus.vectors``,
``Corpus.store.delete_record``...) is for building, inspecting and maintaining corpora,
not for retrieval code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs
import numpy as np

from irflow.kernels.bm25 import BM25Params, BM25Stats
from irflow.kernels.topk import TopK
from irflow.store.records import Record, SearchHit

__all__ = ["CorpusProtocol", "CorpusSettings", "Siblings", "PROTOCOL_MEMBERS"]


def _int64(value: Any) -> np.ndarray:
    array = np.asarray(value, dtype=np.int64).reshape(-1)
    array.setflags(write=False)
    return array


def _bools(value: Any) -> np.ndarray:
    array = np.asarray(value, dtype=bool).reshape(-1)
    array.setflags(write=False)
    return array


def _pairs(value: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple(value)


@attrs.frozen
class Siblings:
    """The live rows of several artifacts, in plan order (by ``surface_index``), laid out as CSR.

    Artifact ``i`` of the request has the rows ``rows[offsets[i]:offsets[i + 1]]``;
    ``listed[i]`` is False when the ledger has no entry for it (its group is
    then empty).  ``stale`` names ``(artifact, record id)`` pairs the ledger
    lists but the corpus does not hold (an interrupted build, a torn copy) —
    deleted records are left out silently, they are not stale.

    >>> s = Siblings([0, 2, 2], [7, 3], [True, False])
    >>> s.rows_of(0).tolist(), s.rows_of(1).tolist()
    ([7, 3], [])
    """

    offsets: np.ndarray = attrs.field(converter=_int64)
    rows: np.ndarray = attrs.field(converter=_int64)
    listed: np.ndarray = attrs.field(converter=_bools)
    stale: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)

    def __attrs_post_init__(self) -> None:
        if self.offsets.size != self.listed.size + 1 or (self.offsets.size and self.offsets[-1] != self.rows.size):
            raise ValueError(f"Siblings: {self.listed.size} artifacts need {self.listed.size + 1} offsets ending "
                             f"at {self.rows.size}, got {self.offsets.tolist()}")

    def __len__(self) -> int:
        """Number of artifacts asked about."""
        return int(self.listed.size)

    @property
    def lengths(self) -> np.ndarray:
        """Rows per artifact."""
        return np.diff(self.offsets)

    def rows_of(self, index: int) -> np.ndarray:
        """The rows of artifact ``index`` of the request."""
        return self.rows[self.offsets[index]:self.offsets[index + 1]]


@attrs.frozen
class CorpusSettings:
    """How a corpus turns text into what it ranks: its embedder and its analyzer, by name.

    What every result, evaluation and trace says it used, so two figures
    made with different models are never mistaken for one another.
    ``embedder`` is the spec (``"onnx:all-MiniLM-L6-v2"``, ``"hash:256"``),
    ``"none"`` for a lexical-only corpus, or another plain phrase when no
    spec names it (``"custom"``: a Python callable); ``analyzer`` is the
    analyzer's name.

    >>> str(CorpusSettings("hash:256", "english"))
    'embedder hash:256, analyzer english'
    """

    embedder: str
    analyzer: str

    def to_dict(self) -> dict[str, str]:
        return {"embedder": self.embedder, "analyzer": self.analyzer}

    def __str__(self) -> str:
        return f"embedder {self.embedder}, analyzer {self.analyzer}"


@runtime_checkable
class CorpusProtocol(Protocol):
    """What retrieval code may ask of a corpus.  See the module docstring for the why of each group.

    ``rows`` arguments are integer arrays (any shape is flattened) of rows in
    ``0 .. n_rows - 1``; results are aligned with them.  ``texts`` are query
    strings (a single string is a batch of one).
    """

    # -- what the corpus is ------------------------------------------------------------------

    @property
    def name(self) -> str | None:
        """The corpus name (``SearchHit.source`` of its hits), or None."""

    @property
    def n_rows(self) -> int:
        """Size of the row space, deleted rows included (row numbers are stable)."""

    @property
    def kinds(self) -> tuple[str, ...]:
        """The surface kinds of the corpus; ``kind_codes_of`` indexes into this tuple."""

    @property
    def version(self) -> int:
        """A number that changes whenever the answer to a query could change (a delete)."""

    @property
    def settings(self) -> CorpusSettings:
        """The embedder and analyzer the corpus ranks with, by name (never loads a model)."""

    # -- rows -----------------------------------------------------------------------------------

    def record_ids_of(self, rows: Any) -> np.ndarray:
        """Record id of each row (object array of str)."""

    def artifact_ids_of(self, rows: Any) -> np.ndarray:
        """Artifact id of each row (object array of str)."""

    def kind_codes_of(self, rows: Any) -> np.ndarray:
        """Surface kind of each row as an index into :attr:`kinds` (int32)."""

    def surface_indices_of(self, rows: Any) -> np.ndarray:
        """Plan position of each row within its artifact (``surface_index``, int64)."""

    def records(self, rows: Any) -> list[Record]:
        """The records of these rows (no vectors), in order."""

    def hits(self, rows: Any, scores: Any) -> list[SearchHit]:
        """One SearchHit per row with its score; ``source`` is the corpus name."""

    # -- candidates and queries -------------------------------------------------------------

    def candidate_mask(self, filter: Mapping[str, Any] | None = None,
                       surfaces: Sequence[str] | str | None = None) -> np.ndarray:
        """Live rows passing the metadata ``filter`` whose kind is in ``surfaces``: read-only bool (n_rows,)."""

    def tokenize_queries(self, texts: Sequence[str] | str) -> list[list[str]]:
        """Query tokens, cut by the analyzer the corpus's postings were built with."""

    def embed_queries(self, texts: Sequence[str] | str) -> np.ndarray:
        """Query vectors for dense search: float32 (len(texts), dim), L2-normalized."""

    # -- exact top-k ------------------------------------------------------------------------------

    def bm25_topk(self, query_tokens: Sequence[Sequence[str]], mask: np.ndarray | None, fetch_k: int,
                  params: BM25Params | Mapping[str, Any] | None = None, stats: BM25Stats | None = None) -> TopK:
        """BM25 top ``fetch_k`` per query among the live rows of ``mask`` (None: every live row).

        ``params`` picks the variant, its constants and where statistics come
        from (``stats="candidates"``: the mask's rows, the seed's default;
        ``"corpus"``: every live row); ``stats`` supplies them from outside
        instead (a shard scoring with the whole corpus's statistics).
        """

    def dense_topk(self, query_vectors: np.ndarray, mask: np.ndarray | None, fetch_k: int) -> TopK:
        """Exact cosine top ``fetch_k`` per query vector among the live rows of ``mask`` (None: every live row)."""

    # -- the ledger -------------------------------------------------------------------------------

    def sibling_rows(self, artifact_ids: Sequence[str]) -> Siblings:
        """The live rows of each artifact in plan order, through the ledger (never re-derived)."""


#: The members of :class:`CorpusProtocol`, for tests and wrappers.
PROTOCOL_MEMBERS: tuple[str, ...] = (
    "name", "n_rows", "kinds", "version", "settings",
    "record_ids_of", "artifact_ids_of", "kind_codes_of", "surface_indices_of", "records", "hits",
    "candidate_mask", "tokenize_queries", "embed_queries", "bm25_topk", "dense_topk", "sibling_rows",
)
