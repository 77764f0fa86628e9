"""Query files: TREC topics (``<top>`` format), ``qid<TAB>text`` lines, and BEIR ``queries.jsonl``.

What TREC collections ship beside their qrels, read so a built corpus can be
evaluated (``irflow eval --corpus C --queries topics.txt --qrels qrels.txt``)
and a whole query file run (``irflow run RECIPE --corpus C --queries FILE``).
:func:`read_queries` tells the three forms apart by their first non-blank
line: ``<top>`` opens a TREC topic, ``{`` a JSON object per line, anything
else is ``qid<TAB>text``.  The classic TREC form::

    <top>
    <num> Number: 301
    <title> International Organized Crime
    <desc> Description:
    Identify organizations that participate in international criminal activity.
    <narr> Narrative:
    A relevant document must as a minimum identify the organization ...
    </top>

A field runs from its tag to the next tag (closing tags such as
``</title>`` are allowed and skipped; ``Number:``, ``Description:`` and
``Narrative:`` are labels, not text); the query is the title by default, or
``desc``, ``narr`` or ``title+desc``.  Files are read line by line within the
bounds of :mod:`irflow.util.fileio`, and every mistake is a
:class:`~irflow.errors.DatasetError` naming the file and the line.

>>> read_queries("topics.301-350.txt")  # doctest: +SKIP
{'301': 'International Organized Crime', ...}
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import attrs

from irflow.errors import DatasetError
from irflow.evaluation.datasets import Collection, FileStamp, HashingLines, read_beir_queries_file, where
from irflow.evaluation.trec import read_qrels_file
from irflow.util.fileio import shown

__all__ = ["TOPIC_FIELDS", "read_queries", "read_trec_topics", "read_tsv_queries", "collection_from_files"]

#: The topic fields a query can be made of (``--topic-field``).
TOPIC_FIELDS: tuple[str, ...] = ("title", "desc", "narr", "title+desc")

_TAG = re.compile(r"<(/?)([A-Za-z]+)>")
_LABEL = re.compile(r"^\s*(?:Number|Topic|Description|Narrative)\s*:\s*", re.IGNORECASE)
_SYNONYMS = {"description": "desc", "narrative": "narr"}


@attrs.define
class _Topic:
    line: int
    fields: dict[str, list[str]] = attrs.Factory(dict)
    current: str | None = None

    def add(self, text: str) -> None:
        if self.current is None:
            return
        if not self.fields.get(self.current):  # "Number:", "Description:" open a field: labels, not text
            text = _LABEL.sub("", text, count=1)
        if text.strip():
            self.fields.setdefault(self.current, []).append(text.strip())

    def text(self, field: str) -> str:
        return " ".join(" ".join(self.fields.get(field, ())).split())


def _query_text(topic: _Topic, field: str, path: Path, qid: str) -> str:
    parts = ["title", "desc"] if field == "title+desc" else [field]
    text = " ".join(t for t in (topic.text(p) for p in parts) if t)
    if not text:
        held = [f for f in ("title", "desc", "narr") if topic.text(f)]
        raise DatasetError(f"{where(path, topic.line)}: topic {qid!r} has no {' or '.join(f'<{p}>' for p in parts)} "
                           f"text; it has {', '.join(f'<{f}>' for f in held) or 'no text at all'}: choose another "
                           f"field (--topic-field {held[0] if held else 'title'})")
    return text


def _close(topic: _Topic, path: Path, field: str, queries: dict[str, str], first: dict[str, int]) -> None:
    qid = topic.text("num")
    if not qid:
        raise DatasetError(f"{where(path, topic.line)}: the topic opened here has no <num>; each <top> needs "
                           "'<num> Number: 301' (its query id)")
    if len(qid.split()) != 1:
        raise DatasetError(f"{where(path, topic.line)}: topic number {shown(qid)} is not one word; a query id "
                           "has no spaces")
    if qid in queries:
        raise DatasetError(f"{where(path, topic.line)}: duplicate topic {qid!r} (first on line {first[qid]})")
    queries[qid] = _query_text(topic, field, path, qid)
    first[qid] = topic.line


def read_trec_topics(path: str | os.PathLike[str], field: str = "title") -> dict[str, str]:
    """Queries from a TREC topics file (``<top>`` ... ``</top>``): number -> the ``field`` text."""
    return _read_topics(Path(path), field)[0]


def _read_topics(path: Path, field: str) -> tuple[dict[str, str], FileStamp]:
    if field not in TOPIC_FIELDS:
        raise DatasetError(f"unknown topic field {field!r}; valid fields: {', '.join(TOPIC_FIELDS)}")
    lines = HashingLines(path)
    queries: dict[str, str] = {}
    first: dict[str, int] = {}
    topic: _Topic | None = None
    for number, line in lines:
        at = 0
        for match in _TAG.finditer(line):
            closing, tag = match.group(1) == "/", _SYNONYMS.get(match.group(2).lower(), match.group(2).lower())
            if topic is not None:
                topic.add(line[at:match.start()])
            elif line[at:match.start()].strip():
                raise DatasetError(f"{where(path, number)}: text outside a topic ({shown(line.strip())}); "
                                   "topics are <top> ... </top>")
            at = match.end()
            if tag == "top" and not closing:
                if topic is not None:
                    raise DatasetError(f"{where(path, number)}: <top> inside the topic opened on line {topic.line}; "
                                       "close it first with </top>")
                topic = _Topic(number)
            elif tag == "top":
                if topic is None:
                    raise DatasetError(f"{where(path, number)}: </top> without a <top> before it")
                _close(topic, path, field, queries, first)
                topic = None
            elif topic is None:
                raise DatasetError(f"{where(path, number)}: <{match.group(2)}> outside a topic; fields go "
                                   "between <top> and </top>")
            else:  # a field starts (a closing field tag just ends the one before)
                topic.current = None if closing else tag
                if not closing and tag in topic.fields:
                    raise DatasetError(f"{where(path, number)}: a second <{match.group(2)}> in the topic opened on "
                                       f"line {topic.line}")
        rest = line[at:]
        if topic is not None:
            topic.add(rest)
        elif rest.strip():
            raise DatasetError(f"{where(path, number)}: text outside a topic ({shown(rest.strip())}); "
                               "topics are <top> ... </top>")
    if topic is not None:
        raise DatasetError(f"{where(path, topic.line)}: the topic opened here has no </top> (the file ends first)")
    if not queries:
        raise DatasetError(f"{path}: no topic in the file")
    return queries, lines.stamp()


def read_tsv_queries(path: str | os.PathLike[str]) -> dict[str, str]:
    """Queries from ``qid<TAB>text`` lines (blank lines skipped)."""
    return _read_tsv(Path(path))[0]


def _read_tsv(path: Path) -> tuple[dict[str, str], FileStamp]:
    lines = HashingLines(path)
    queries: dict[str, str] = {}
    first: dict[str, int] = {}
    for number, line in lines:
        if not line.strip():
            continue
        qid, tab, text = line.rstrip("\r\n").partition("\t")
        qid, text = qid.strip(), " ".join(text.split())
        if not tab or not qid or not text:
            raise DatasetError(f"{where(path, number)}: expected 'qid<TAB>text', got {shown(line.strip())}")
        if len(qid.split()) != 1:
            raise DatasetError(f"{where(path, number)}: query id {shown(qid)} has spaces; a line is 'qid<TAB>text'")
        if qid in queries:
            raise DatasetError(f"{where(path, number)}: duplicate query id {qid!r} (first on line {first[qid]})")
        queries[qid], first[qid] = text, number
    if not queries:
        raise DatasetError(f"{path}: no query in the file")
    return queries, lines.stamp()


def _first_text(path: Path) -> str:
    for _, line in HashingLines(path):
        if line.strip():
            return line.lstrip()
    return ""


def _read(path: Path, field: str) -> tuple[dict[str, str], FileStamp]:
    first = _first_text(path)
    if first.startswith("<"):
        return _read_topics(path, field)
    if first.startswith("{"):
        return read_beir_queries_file(path)
    return _read_tsv(path)


def read_queries(path: str | os.PathLike[str], field: str = "title") -> dict[str, str]:
    """Queries (id -> text, in file order) from a TREC topics file, ``qid<TAB>text`` lines or ``queries.jsonl``.

    ``field`` picks the topic field of a TREC topics file (:data:`TOPIC_FIELDS`).
    """
    return _read(Path(path), field)[0]


def collection_from_files(queries: str | os.PathLike[str], qrels: str | os.PathLike[str], *, name: str | None = None,
                          field: str = "title") -> Collection:
    """A :class:`Collection` of the queries and judgements in these files, without documents (a built corpus has them).

    ``qrels`` is a TREC qrels file (``qid iteration docid grade``) or a BEIR
    ``qrels/<split>.tsv``; every judged query must be in ``queries``.
    """
    queries_path, qrels_path = Path(queries), Path(qrels)
    found, queries_stamp = _read(queries_path, field)
    judged, lines_of, qrels_stamp = read_qrels_file(qrels_path)
    for (qid, _doc), number in lines_of.items():
        if qid not in found:
            raise DatasetError(f"{where(qrels_path, number)}: query {qid!r} is judged but not in {queries_path}")
    return Collection(name=name or qrels_path.name, path=None, documents={}, queries=found, qrels=judged,
                      split=qrels_path.name, stamps=(queries_stamp, qrels_stamp))
