"""TREC files: qrels (``qid iteration docid grade``) and runs (``qid Q0 docid rank score tag``), read and written.

Read with the same checks as a BEIR collection (each bad line named, a
document twice for one query refused); written atomically, scores by
``repr`` so a run reads back equal.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from irflow.errors import DatasetError
from irflow.evaluation.datasets import FileStamp, HashingLines, add_judgement, parse_grade, read_beir_qrels_file, \
    where
from irflow.evaluation.runs import ColumnarRun
from irflow.util.fileio import atomic_writer, shown
from irflow.util.unicode import check_text

__all__ = ["read_trec_qrels", "read_qrels_file", "read_trec_run", "write_trec_run", "trec_run_lines", "check_token"]

_RANK = re.compile(r"[0-9]{1,18}")  # int64 holds every 18-digit number
_SCORE = re.compile(r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity)", re.IGNORECASE)


def read_trec_qrels(path: str | os.PathLike[str]) -> dict[str, dict[str, int]]:
    """Qrels from a TREC file (``qid iteration docid grade`` per line).

    >>> read_trec_qrels("qrels.txt")  # doctest: +SKIP
    {'301': {'FBIS3-10082': 1, ...}, ...}
    """
    return _read_trec_qrels(Path(path))[0]


def _read_trec_qrels(path: Path) -> tuple[dict[str, dict[str, int]], dict[tuple[str, str], int], FileStamp]:
    lines = HashingLines(path)
    qrels: dict[str, dict[str, int]] = {}
    lines_of: dict[tuple[str, str], int] = {}
    for number, line in lines:
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 4:
            raise DatasetError(f"{where(path, number)}: expected 4 whitespace-separated fields 'qid iteration docid grade', got {len(fields)}")
        qid, _iteration, doc_id, grade = fields
        add_judgement(qrels, lines_of, path, number, qid, doc_id, parse_grade(path, number, grade))
    return qrels, lines_of, lines.stamp()


def read_qrels_file(path: str | os.PathLike[str]
                    ) -> tuple[dict[str, dict[str, int]], dict[tuple[str, str], int], FileStamp]:
    """Qrels from a TREC qrels file (4 fields) or a BEIR ``qrels/<split>.tsv`` (3), told apart by the first line.

    Returns the qrels, the line of each judgement and what was read (its stamp).
    """
    path = Path(path)
    for _, line in HashingLines(path):
        if line.strip():
            if len(line.split()) == 4:
                return _read_trec_qrels(path)
            break
    return read_beir_qrels_file(path)


def read_trec_run(path: str | os.PathLike[str]) -> dict[str, dict[str, float]]:
    """A run from a TREC run file (``qid Q0 docid rank score tag`` per line).

    Like trec_eval, the scores decide the ranking and the rank column is not
    used (it must hold a whole number all the same: anything else is a sign of
    swapped columns); documents keep the file's order, so a written run reads
    back equal.
    """
    path = Path(path)
    run: dict[str, dict[str, float]] = {}
    lines_of: dict[tuple[str, str], int] = {}
    for number, line in HashingLines(path):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 6:
            raise DatasetError(f"{where(path, number)}: expected 6 whitespace-separated fields 'qid Q0 docid rank score tag', got {len(fields)}")
        qid, _q0, doc_id, rank, score_text, _tag = fields
        _check_rank(path, number, rank)
        score = _score(path, number, score_text)
        if (qid, doc_id) in lines_of:
            raise DatasetError(f"{where(path, number)}: document {doc_id!r} appears twice for query {qid!r} (first on line {lines_of[qid, doc_id]})")
        lines_of[qid, doc_id] = number
        run.setdefault(qid, {})[doc_id] = score
    return run


def _score(path: Path, number: int, text: str) -> float:
    """A score as trec_eval's ``atof`` reads it: a decimal number, or +-inf (beyond float range: +-inf too).

    NaN cannot be ranked; ``float``'s extras (``"1_000"``, non-ASCII digits)
    are refused because trec_eval would read them differently.
    """
    if not _SCORE.fullmatch(text):
        raise DatasetError(f"{where(path, number)}: score {shown(text)} is not a number (the 5th field of "
                           "'qid Q0 docid rank score tag', e.g. 12.5 or -0.25)")
    return float(text)


def _check_rank(path: Path, number: int, rank: str) -> None:
    """The rank column holds a whole number (0 or more, at most 18 digits), though the scores decide the order.

    trec_eval skips the column; a fraction or a sign there almost always means
    the rank and score columns were swapped, which would rank by the ranks.
    """
    if not _RANK.fullmatch(rank):
        raise DatasetError(f"{where(path, number)}: rank {shown(rank)} is not a whole number from 0 to 10**18 - 1 (the "
                           "4th field of 'qid Q0 docid rank score tag': 1, 2, 3, ...); are the rank and score columns "
                           "swapped?")


def check_token(value: str, what: str) -> str:
    """``value`` if a TREC line can hold it (non-empty UTF-8 text without whitespace), else a DatasetError."""
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise DatasetError(f"{what} {value!r} cannot be written to a TREC run: it must be a non-empty string without whitespace")
    check_text(value, what, error=DatasetError)  # a run file is UTF-8 text
    return value


def write_trec_run(path: str | os.PathLike[str], run: Mapping[str, Mapping[str, float]], tag: str = "irflow") -> None:
    """Write a run as a TREC run file: per query, score descending, ranks 1..n.

    Equal scores keep the order given (a stable sort), so the file shows the
    ranking the caller produced; evaluators re-rank by score anyway.  Scores
    are written with ``repr`` so they read back exactly.  The file is
    written query by query into a temporary file renamed into place: a
    reader never sees half a run file, a failed write leaves the old one.

    >>> write_trec_run("run.txt", {"q1": {"d1": 2.0, "d2": 1.0}}, tag="bm25")  # doctest: +SKIP
    """
    check_token(tag, "tag")
    ranked: Iterator[tuple[str, list[str], list[float]]]
    if isinstance(run, ColumnarRun):
        # its document ids are the corpus' distinct ones: checked once, not per line
        for doc_id in run.names.tolist():
            check_token(doc_id, "document id")
        if any(np.isnan(batch.scores).any() for batch in run.batches):
            raise DatasetError("a NaN score cannot be ranked; the run holds one")
        ranked = run.by_score()
    else:
        ranked = _by_score(run)
    with atomic_writer(Path(path), "run file") as out:
        for qid, doc_ids, scores in ranked:
            out.write(trec_run_lines(qid, doc_ids, scores, tag, checked=True).encode("utf-8"))


def trec_run_lines(qid: str, doc_ids: Sequence[str], scores: Sequence[float], tag: str, *,
                   checked: bool = False) -> str:
    """One query's ranking as TREC run lines ``qid Q0 docid rank score tag``, ranks 1..n in the order given.

    Scores are written with ``repr`` (they read back exactly).  The query id,
    the tag and (unless ``checked``) every document id must be non-empty
    text without whitespace: a DatasetError names the one that is not.

    >>> trec_run_lines("q1", ["d7", "d2"], [2.5, 1.0], "bm25")
    'q1 Q0 d7 1 2.5 bm25\\nq1 Q0 d2 2 1.0 bm25\\n'
    """
    check_token(qid, "query id")
    check_token(tag, "tag")
    if not checked:
        for doc_id in doc_ids:
            check_token(doc_id, "document id")
    return "".join([f"{qid} Q0 {doc_id} {rank} {float(score)!r} {tag}\n"
                    for rank, (doc_id, score) in enumerate(zip(doc_ids, scores), start=1)])


def _by_score(run: Mapping[str, Mapping[str, float]]) -> Iterator[tuple[str, list[str], list[float]]]:
    """Per query: (id, document ids, scores as floats), score descending, equal scores in the given order."""
    for qid, scores in run.items():
        ranked = sorted(((doc_id, float(score)) for doc_id, score in scores.items()), key=lambda item: -item[1])
        for doc_id, score in ranked:
            check_token(doc_id, "document id")
            if math.isnan(score):
                raise DatasetError(f"query {qid!r}, document {doc_id!r}: a NaN score cannot be ranked")
        yield qid, [doc_id for doc_id, _ in ranked], [score for _, score in ranked]
