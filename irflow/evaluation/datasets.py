"""Test collections: BEIR-format directories, and TREC qrels and run files.

A BEIR collection is a directory with ``corpus.jsonl`` (``_id``, ``title``,
``text``, optional ``metadata``), ``queries.jsonl`` (``_id``, ``text``) and
``qrels/<split>.tsv`` (a header line ``query-id corpus-id score``, then one
tab-separated judgement per line).  :func:`load_beir` reads one into a frozen
:class:`Collection`; :meth:`Collection.records` turns its documents into irflow
records for building a corpus.  All queries stay accessible, but only those
judged in the split are evaluated (:attr:`Collection.eval_queries`).

Malformed input raises :class:`DatasetError` naming the file and the line, so
a broken collection is fixed in one look rather than debugged.

Example::

    >>> collection = load_beir("../shared/data/scifact", split="test")  # doctest: +SKIP
    >>> len(collection.documents), len(collection.eval_queries)          # doctest: +SKIP
    (5183, 300)
"""

from __future__ import annotations

import decimal
import hashlib
import json
import logging
import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Mapping

import attrs

from irflow.errors import DatasetError, RecordError
from irflow.util.fileio import decode_utf8, loads_json, open_regular, read_lines, shown
from irflow.util.unicode import check_text
from irflow.store.recordcheck import json_metadata
from irflow.store.records import Record

__all__ = [
    "DatasetError",
    "Document",
    "FileStamp",
    "Collection",
    "TITLE_MODES",
    "load_beir",
    "read_beir_qrels",
    "read_beir_queries_file",
    "read_beir_qrels_file",
    "file_digest",
    "check_title_mode",
    "document_records",
    "parse_document",
]

log = logging.getLogger(__name__)

#: How :meth:`Collection.records` treats document titles.
TITLE_MODES: tuple[str, ...] = ("prepend", "separate", "ignore")

_CHUNK = 1 << 20  # bytes read at a time when hashing a file


def where(path: Path, line: int | None = None) -> str:
    return f"{path}" if line is None else f"{path} line {line}"


@attrs.frozen
class Document:
    """One document of a collection: its id, title, text and optional metadata.

    >>> Document("d1", "A title", "Some text.").title
    'A title'
    """

    id: str
    title: str
    text: str
    metadata: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class FileStamp:
    """What was read from one file: its content digest and, to spot later edits, size and mtime.

    The digest alone identifies the content (copies of a file share it);
    size and mtime only let :meth:`Collection.is_stale` notice an edit
    without re-reading.
    """

    path: Path
    digest: str
    size: int
    mtime_ns: int


@attrs.frozen
class Collection:
    """A loaded test collection: documents, all queries, and the qrels of one split.

    ``documents`` and ``queries`` keep the files' order (dicts by id);
    ``qrels`` maps query id -> document id -> integer grade.

    >>> c = Collection("toy", None, {"d1": Document("d1", "T", "x")}, {"q1": "x?", "q2": "y?"}, {"q1": {"d1": 1}})
    >>> list(c.eval_queries)
    ['q1']
    """

    name: str
    path: Path | None
    documents: dict[str, Document]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    split: str = "test"
    stamps: tuple[FileStamp, ...] = attrs.field(default=(), repr=False)

    @property
    def eval_queries(self) -> dict[str, str]:
        """The queries judged in this split (query id -> text), in queries-file order."""
        return {qid: text for qid, text in self.queries.items() if qid in self.qrels}

    def records(self, title_mode: Literal["prepend", "separate", "ignore"] = "prepend") -> list[Record]:
        """The documents as irflow records, artifact id = document id.

        - ``"prepend"`` (default): one ``"document"`` record per document with
          text ``title + "\\n" + text`` (just the text when the title is empty).
          This is BEIR's choice of indexing title and body together, which the
          published BM25 and dense figures use; the newline keeps the title
          its own line for display and reranking and tokenizes like a space.
        - ``"separate"``: a ``"title"`` record (skipped when the title is
          empty) then a ``"text"`` record, for per-surface weighting; collapse
          the hits per artifact to evaluate.
        - ``"ignore"``: one ``"document"`` record with the text only.

        Metadata is the document's own metadata plus ``{"title": title}``.

        >>> doc = Document("d1", "Title", "Body.")
        >>> Collection("toy", None, {"d1": doc}, {}, {}).records()[0].text
        'Title\\nBody.'
        """
        check_title_mode(title_mode)
        out: list[Record] = []
        for doc in self.documents.values():
            out.extend(document_records(doc, title_mode))
        return out

    def fingerprint(self) -> str:
        """A digest of the content of every file loaded (corpus, queries, qrels split).

        Computed from the exact bytes parsed, so it is stable across copies
        and machines and changes whenever a file's content changes; use it
        to key caches of anything derived from the whole collection.
        """
        return _combine(self.stamps)

    def corpus_fingerprint(self) -> str:
        """A digest of ``corpus.jsonl`` alone: the key for a cached corpus build.

        Editing the queries or the qrels must not rebuild the corpus.
        """
        return _combine(s for s in self.stamps if s.path.name == "corpus.jsonl")

    def is_stale(self) -> bool:
        """Whether a loaded file has changed on disk since (its size or mtime differs)."""
        for stamp in self.stamps:
            try:
                st = stamp.path.stat()
            except OSError:
                return True
            if (st.st_size, st.st_mtime_ns) != (stamp.size, stamp.mtime_ns):
                return True
        return False


def check_title_mode(title_mode: str) -> None:
    """DatasetError unless ``title_mode`` is one of :data:`TITLE_MODES`."""
    if title_mode not in TITLE_MODES:
        raise DatasetError(f"unknown title_mode {title_mode!r}; valid modes are {list(TITLE_MODES)}")


def document_records(doc: Document, title_mode: str = "prepend") -> list[Record]:
    """One document's irflow records, per :meth:`Collection.records` (artifact id = document id).

    Shared by evaluation corpora and ``irflow index`` of a BEIR ``corpus.jsonl``,
    so both index a document the same way.

    >>> [r.text for r in document_records(Document("d1", "Title", "Body."))]
    ['Title\\nBody.']
    """
    metadata = {**doc.metadata, "title": doc.title}
    if title_mode == "separate":
        surfaces = ([("title", doc.title)] if doc.title else []) + [("text", doc.text)]
    elif title_mode == "prepend" and doc.title:
        surfaces = [("document", f"{doc.title}\n{doc.text}")]
    else:
        surfaces = [("document", doc.text)]
    return [Record(doc.id, kind, text, metadata=metadata, surface_index=index)
            for index, (kind, text) in enumerate(surfaces)]


def parse_document(obj: Mapping[str, Any], where: str = "") -> Document:
    """A :class:`Document` from one parsed ``corpus.jsonl`` object (``_id``, ``title``, ``text``, ``metadata``).

    DatasetError names what is wrong, prefixed by ``where`` (a file and line) when given.

    >>> parse_document({"_id": 7, "title": "T", "text": "x"}).id
    '7'
    """
    metadata = obj.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise DatasetError(f"{_at(where)}'metadata' must be a JSON object, got {type(metadata).__name__}")
    try:
        metadata = json_metadata(metadata)  # what a corpus stores: no lone surrogate, NaN or infinity
    except RecordError as error:
        raise DatasetError(f"{_at(where)}{error}") from None
    return Document(_id_field(where, obj), _str_field(where, obj, "title", required=False),
                    _str_field(where, obj, "text", required=True), metadata)


def _at(where: str) -> str:
    return f"{where}: " if where else ""


def _combine(stamps: Iterable[FileStamp]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for stamp in stamps:
        h.update(f"{stamp.path.name}\0{stamp.digest}\n".encode())
    return h.hexdigest()


# ---------------------------------------------------------------- file reading

class HashingLines:
    """Lines of a file (1-based numbers, decoded) while hashing every byte read.

    Parsing and digesting in one pass: the digest is of exactly the bytes
    parsed, at no extra I/O.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.hash = hashlib.blake2b(digest_size=16)
        if not os.path.lexists(path):
            raise DatasetError(f"{path} does not exist")
        # a regular file (not a directory, a FIFO, a device), readable: DatasetError naming it otherwise
        self.handle = open_regular(path, "collection file", error=DatasetError)
        st = os.fstat(self.handle.fileno())
        self.size, self.mtime_ns = st.st_size, st.st_mtime_ns

    def __iter__(self) -> Iterator[tuple[int, str]]:
        with self.handle as handle:
            for number, raw in read_lines(handle, str(self.path), "collection file", error=DatasetError):
                self.hash.update(raw)
                # utf-8-sig on the first line: a byte-order mark is not part of the data
                yield number, decode_utf8(raw, where(self.path, number), "file", error=DatasetError,
                                          bom=number == 1)

    def stamp(self) -> FileStamp:
        return FileStamp(self.path, self.hash.hexdigest(), self.size, self.mtime_ns)


_DIGEST_MEMO: dict[tuple[str, int, int], str] = {}


def file_digest(path: str | os.PathLike[str]) -> str:
    """The content digest of a file (blake2b-128, streamed), as :meth:`Collection.fingerprint` uses.

    Memoized per (path, size, mtime): re-checking an unchanged file in the
    same process costs a ``stat``, not a read.  Lets a caller test a cache key
    without loading the collection.
    """
    path = Path(path).resolve()
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _DIGEST_MEMO:
        h = hashlib.blake2b(digest_size=16)
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                h.update(chunk)
        _DIGEST_MEMO[key] = h.hexdigest()
    return _DIGEST_MEMO[key]


def _json_object(path: Path, number: int, line: str, what: str) -> dict[str, Any]:
    try:
        value = loads_json(line, where(path, number), error=DatasetError)  # bounded nesting and digits
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where(path, number)}: not valid JSON ({exc.msg} at column {exc.colno}); each line must be one {what} object") from None
    if not isinstance(value, dict):
        raise DatasetError(f"{where(path, number)}: expected a JSON object ({what}), got {type(value).__name__}")
    return value


def _id_field(where: str, obj: Mapping[str, Any]) -> str:
    value = obj.get("_id")
    # BEIR ids are strings; integers are accepted because some converters write them
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise DatasetError(f"{_at(where)}'_id' must be a non-empty string, got {shown(value)}")
    check_text(value, f"{_at(where)}'_id'", error=DatasetError)
    return value


def _str_field(where: str, obj: Mapping[str, Any], key: str, required: bool) -> str:
    value = obj.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise DatasetError(f"{_at(where)}'{key}' must be a string, got {shown(value)}")
    check_text(value, f"{_at(where)}'{key}'", error=DatasetError)
    return value


def _read_corpus(path: Path) -> tuple[dict[str, Document], FileStamp]:
    lines = HashingLines(path)
    documents: dict[str, Document] = {}
    first_line: dict[str, int] = {}
    for number, line in lines:
        if not line.strip():
            continue
        obj = _json_object(path, number, line, "document {_id, title, text}")
        doc_id = _id_field(where(path, number), obj)
        if doc_id in documents:
            raise DatasetError(f"{where(path, number)}: duplicate document id {doc_id!r} (first on line {first_line[doc_id]})")
        documents[doc_id] = parse_document(obj, where(path, number))
        first_line[doc_id] = number
    return documents, lines.stamp()


def read_beir_queries_file(path: str | os.PathLike[str]) -> tuple[dict[str, str], FileStamp]:
    """Queries from a BEIR ``queries.jsonl`` (``_id``, ``text``), and what was read (its stamp)."""
    return _read_queries(Path(path))


def _read_queries(path: Path) -> tuple[dict[str, str], FileStamp]:
    lines = HashingLines(path)
    queries: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for number, line in lines:
        if not line.strip():
            continue
        obj = _json_object(path, number, line, "query {_id, text}")
        qid = _id_field(where(path, number), obj)
        if qid in queries:
            raise DatasetError(f"{where(path, number)}: duplicate query id {qid!r} (first on line {first_line[qid]})")
        queries[qid] = _str_field(where(path, number), obj, "text", required=True)
        first_line[qid] = number
    return queries, lines.stamp()


#: Relevance grades are integers of this range (trec_eval and pytrec_eval read them as a C ``long``).
GRADE_MIN, GRADE_MAX = -(2**63), 2**63 - 1
# a plain decimal number: digits, an optional fraction and exponent (no "nan", "inf", "0x1", "1_000")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def parse_grade(path: Path, number: int, text: str) -> int:
    """An integer grade, read exactly; ``"1.0"`` and ``"2e0"`` are accepted (some converters write floats).

    ``"0.5"``, ``"nan"``, ``"inf"`` and ``"true"`` are refused, and so is a
    grade beyond :data:`GRADE_MAX` (``10**30`` would end in an overflow deep
    in the metrics); the text is read as a decimal, not a float, so no digit
    of a large grade is rounded away.
    """
    value = None
    if _NUMBER.fullmatch(text):
        exact = decimal.Decimal(text)
        # compared before int(): "1e999999999" must not become a billion-digit integer
        if exact == exact.to_integral_value() and GRADE_MIN <= exact <= GRADE_MAX:
            value = int(exact)
        elif exact == exact.to_integral_value():
            raise DatasetError(f"{where(path, number)}: relevance grade {shown(text)} is out of range; a grade is an "
                               f"integer from {GRADE_MIN} to {GRADE_MAX} (usually 0, 1, 2 or 3)")
    if value is None:
        raise DatasetError(f"{where(path, number)}: relevance grade {shown(text)} is not an integer; write whole "
                           "numbers such as 0, 1, 2")
    return value


def add_judgement(
    qrels: dict[str, dict[str, int]], lines_of: dict[tuple[str, str], int], path: Path, number: int, qid: str, doc_id: str, grade: int
) -> None:
    # trec_eval refuses duplicate judgements too: two grades for one pair are ambiguous
    if (qid, doc_id) in lines_of:
        raise DatasetError(f"{where(path, number)}: duplicate judgement for query {qid!r}, document {doc_id!r} (first on line {lines_of[qid, doc_id]})")
    lines_of[qid, doc_id] = number
    qrels.setdefault(qid, {})[doc_id] = grade


def _read_beir_qrels(path: Path) -> tuple[dict[str, dict[str, int]], dict[tuple[str, str], int], FileStamp]:
    lines = HashingLines(path)
    qrels: dict[str, dict[str, int]] = {}
    lines_of: dict[tuple[str, str], int] = {}
    for number, line in lines:
        if not line.strip():
            continue
        fields = line.rstrip("\r\n").split("\t")
        if len(fields) != 3:
            fields = line.split()  # tolerate spaces instead of tabs
        if len(fields) != 3:
            raise DatasetError(f"{where(path, number)}: expected 3 tab-separated fields 'query-id corpus-id score', got {len(fields)}")
        qid, doc_id, score = (f.strip() for f in fields)
        if number == 1 and not _is_number(score):
            continue  # the header line (BEIR writes one; a file without it is read all the same)
        add_judgement(qrels, lines_of, path, number, qid, doc_id, parse_grade(path, number, score))
    return qrels, lines_of, lines.stamp()


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_beir_qrels_file(path: str | os.PathLike[str]
                         ) -> tuple[dict[str, dict[str, int]], dict[tuple[str, str], int], FileStamp]:
    """A BEIR qrels file's judgements, the line of each, and what was read (its stamp)."""
    return _read_beir_qrels(Path(path))


def read_beir_qrels(path: str | os.PathLike[str]) -> dict[str, dict[str, int]]:
    """Qrels from a BEIR ``qrels/<split>.tsv`` file: query id -> document id -> grade.

    >>> read_beir_qrels("../shared/data/cisi/qrels/test.tsv")["1"]["28"]  # doctest: +SKIP
    1
    """
    return _read_beir_qrels(Path(path))[0]


def load_beir(path: str | os.PathLike[str], split: str = "test", *, name: str | None = None) -> Collection:
    """Load a BEIR-format collection directory; ``split`` names ``qrels/<split>.tsv``.

    Every judged query must have a text in ``queries.jsonl`` (it could not be
    run otherwise); judged documents missing from the corpus are kept in the
    qrels, as BEIR does (they still count as relevant), and logged.

    >>> load_beir("../shared/data/cranfield").name  # doctest: +SKIP
    'cranfield'
    """
    root = Path(path)
    if not root.is_dir():
        raise DatasetError(f"{root} is not a directory; a BEIR collection is a directory with corpus.jsonl, queries.jsonl and qrels/<split>.tsv")
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not os.path.lexists(qrels_path):  # present but not a file: the reader names what it is
        available = sorted(p.stem for p in (root / "qrels").glob("*.tsv"))
        raise DatasetError(f"{qrels_path} does not exist; splits available in {root / 'qrels'}: {available or 'none'}")
    documents, corpus_stamp = _read_corpus(root / "corpus.jsonl")
    queries, queries_stamp = _read_queries(root / "queries.jsonl")
    qrels, lines_of, qrels_stamp = _read_beir_qrels(qrels_path)
    for (qid, _doc), number in lines_of.items():
        if qid not in queries:
            raise DatasetError(f"{where(qrels_path, number)}: query {qid!r} is judged but not in {root / 'queries.jsonl'}")
    unknown = sum(1 for (_q, doc_id) in lines_of if doc_id not in documents)
    if unknown:
        log.warning("%s: %d judgements name documents absent from corpus.jsonl; they are kept (they count as relevant but cannot be retrieved)", qrels_path, unknown)
    return Collection(
        name=name or root.resolve().name,
        path=root,
        documents=documents,
        queries=queries,
        qrels=qrels,
        split=split,
        stamps=(corpus_stamp, queries_stamp, qrels_stamp),
    )


# ---------------------------------------------------------------- TREC formats
