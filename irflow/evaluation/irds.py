"""Test collections from ir_datasets: ``irds:NAME`` read as a :class:`~irflow.evaluation.datasets.Collection`.

ir_datasets catalogues hundreds of IR test collections behind one interface
(``irds:beir/scifact/test``, ``irds:cranfield``, ``irds:msmarco-passage/dev/small``);
``irflow eval RECIPE --dataset irds:NAME`` and ``evaluate(recipe, "irds:NAME")``
read any of them: each document (``doc_id``, its ``title`` when it has one,
its ``text`` — or its ``default_text()`` when it has no text field), each
query (``query_id``, its ``text`` or ``default_text()``: a TREC topic's
title) and each judgement (``query_id``, ``doc_id``, ``relevance``), checked
as a BEIR collection is (:class:`~irflow.errors.DatasetError` naming the
dataset and the record).  A collection of one's own registers with
ir_datasets in a plugin module (``--plugin``), and reads the same way.

ir_datasets is an optional extra (``pip install -e '.[irds]'``), imported
lazily here.  It opens no network connection when imported (checked: no
socket is opened), but it makes its home folder (``$IR_DATASETS_HOME``,
default ``~/.ir_datasets``) and a folder per collection family in it.  It
downloads a collection's files on first use; irflow never lets it: while
irflow reads, ir_datasets' download paths are switched off, so a collection
whose files are not on this machine fails with a DatasetError saying how to
fetch them with ir_datasets itself — nothing reaches the network at run time.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Iterator
from typing import Any

from irflow.errors import DatasetError, IrflowError
from irflow.evaluation.datasets import Collection, Document, parse_document
from irflow.util.extras import install_hint

__all__ = ["IRDS_PREFIX", "is_irds", "load_irds"]

#: How a dataset spec names an ir_datasets collection: ``irds:<its ir_datasets name>``.
IRDS_PREFIX = "irds:"

_GUARD = threading.Lock()  # one reader at a time switches ir_datasets' downloads off and on again


def is_irds(spec: Any) -> bool:
    """Whether ``spec`` names an ir_datasets collection (``"irds:NAME"``)."""
    return isinstance(spec, str) and spec.startswith(IRDS_PREFIX)


def _import() -> Any:
    try:
        return importlib.import_module("ir_datasets")  # an optional extra: imported only when asked for
    except ImportError as exc:
        raise DatasetError(f"irds: datasets need ir_datasets, which is not installed: {install_hint('irds')}") from exc


class _Refused(Exception):
    """A download ir_datasets tried while irflow read (never sent)."""


class _NoDownloads:
    """Stands in for ``requests`` inside ir_datasets while irflow reads: every request refused and remembered."""

    def __init__(self, real: Any) -> None:
        self._real = real  # its exception classes, which ir_datasets' except clauses name
        self.urls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def get(self, url: Any = None, *args: Any, **kwargs: Any) -> Any:
        self.urls.append(str(url if url is not None else kwargs.get("url")))
        raise _Refused(self.urls[-1])

    post = head = request = get

    def Session(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 — requests' name
        self.urls.append("a requests session")
        raise _Refused(self.urls[-1])


@contextlib.contextmanager
def _offline(irds: Any) -> Iterator[_NoDownloads]:
    """ir_datasets with its download paths switched off (HTTP through ``requests``, Google Cloud through gsutil)."""
    libs, download = irds.lazy_libs, importlib.import_module("ir_datasets.util.download")
    refusing = _NoDownloads(importlib.import_module("requests"))

    def no_bucket(self: Any) -> Any:
        refusing.urls.append(str(getattr(self, "uri", "a cloud bucket")))
        raise _Refused(refusing.urls[-1])

    with _GUARD:
        saved = libs.requests, download.GoogleCloudBucketStream.stream
        libs.requests = lambda: refusing
        download.GoogleCloudBucketStream.stream = no_bucket
        try:
            yield refusing
        finally:
            libs.requests, download.GoogleCloudBucketStream.stream = saved


def _text_of(record: Any, what: str) -> str:
    fields = getattr(record, "_fields", ())
    if "text" in fields and isinstance(record.text, str):
        return str(record.text)
    if callable(getattr(record, "default_text", None)):
        return str(record.default_text())
    raise DatasetError(f"{what} has no text field and no default_text(); fields: {', '.join(fields)}")


def _document(doc: Any, name: str, number: int) -> Document:
    what = f"{IRDS_PREFIX}{name}: document #{number}"
    fields = getattr(doc, "_fields", ())
    has_text = "text" in fields
    # without a text field, default_text() is the whole document (its title too): no separate title then
    title = doc.title if has_text and "title" in fields and isinstance(doc.title, str) else ""
    return parse_document({"_id": getattr(doc, "doc_id", None), "title": title, "text": _text_of(doc, what)}, what)


def _read(dataset: Any, name: str) -> tuple[dict[str, Document], dict[str, str], dict[str, dict[str, int]]]:
    documents: dict[str, Document] = {}
    for number, doc in enumerate(dataset.docs_iter(), start=1):
        document = _document(doc, name, number)
        if document.id in documents:
            raise DatasetError(f"{IRDS_PREFIX}{name}: document #{number}: duplicate document id {document.id!r}")
        documents[document.id] = document
    queries: dict[str, str] = {}
    for number, query in enumerate(dataset.queries_iter(), start=1):
        what = f"{IRDS_PREFIX}{name}: query #{number}"
        parsed = parse_document({"_id": getattr(query, "query_id", None), "text": _text_of(query, what)}, what)
        if parsed.id in queries:
            raise DatasetError(f"{what}: duplicate query id {parsed.id!r}")
        queries[parsed.id] = parsed.text
    qrels: dict[str, dict[str, int]] = {}
    for number, qrel in enumerate(dataset.qrels_iter(), start=1):
        what = f"{IRDS_PREFIX}{name}: judgement #{number}"
        qid, doc_id, grade = str(qrel.query_id), str(qrel.doc_id), qrel.relevance
        if isinstance(grade, bool) or not isinstance(grade, int):
            raise DatasetError(f"{what}: relevance {grade!r} is not an integer")
        if qid not in queries:
            raise DatasetError(f"{what}: query {qid!r} is judged but is not among the dataset's queries")
        if doc_id in qrels.get(qid, {}):
            raise DatasetError(f"{what}: duplicate judgement for query {qid!r}, document {doc_id!r}")
        qrels.setdefault(qid, {})[doc_id] = int(grade)
    return documents, queries, qrels


def load_irds(spec: str) -> Collection:
    """The ir_datasets collection ``spec`` names (``"irds:NAME"`` or ``"NAME"``), read without downloading."""
    name = spec[len(IRDS_PREFIX):] if is_irds(spec) else spec
    irds = _import()
    try:
        dataset = irds.load(name)
    except KeyError:
        raise DatasetError(f"{IRDS_PREFIX}{name}: ir_datasets has no dataset {name!r}; give a name from its "
                           "catalogue (e.g. irds:beir/scifact/test), or register your own in a plugin "
                           "(--plugin MODULE)") from None
    missing = [part for part in ("docs", "queries", "qrels") if not getattr(dataset, f"has_{part}")()]
    if missing:
        raise DatasetError(f"{IRDS_PREFIX}{name}: the dataset has no {' and no '.join(missing)}; an evaluation "
                           "needs documents, queries and judgements (a subset name such as .../test has them)")
    with _offline(irds) as refusing:
        try:
            documents, queries, qrels = _read(dataset, name)
        except IrflowError:
            raise
        except Exception as exc:  # whatever ir_datasets raises: its readers, a refused download
            if refusing.urls:
                raise DatasetError(
                    f"{IRDS_PREFIX}{name}: its files are not on this machine, and irflow never downloads (it would "
                    f"have fetched {refusing.urls[0]}); fetch them once with ir_datasets itself, e.g. "
                    f"python -c \"import ir_datasets; ds = ir_datasets.load('{name}'); "
                    f"[None for _ in ds.docs_iter()]\", then run this again") from None
            raise DatasetError(f"{IRDS_PREFIX}{name}: ir_datasets could not read it ({type(exc).__name__}: "
                               f"{exc})") from None
    if not qrels:
        raise DatasetError(f"{IRDS_PREFIX}{name}: the dataset judges no query")
    return Collection(name=f"{IRDS_PREFIX}{name}", path=None, documents=documents, queries=queries, qrels=qrels)
