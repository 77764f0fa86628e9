"""``irflow add``, ``irflow delete`` and ``irflow compact``: a corpus changed in place, one commit per command.

    irflow add ./corpus more.jsonl                  # new records (an id the corpus holds live: refused)
    irflow add ./corpus changed.jsonl --upsert      # a record whose id is live replaces it
    irflow add ./corpus packages.jsonl --artifacts  # each artifact of the file replaces all of its surfaces
    irflow delete ./corpus --id 3f2a... --artifact unbox --ids-from gone.txt
    irflow compact ./corpus

``add`` reads its file with the reader of ``irflow index`` (:mod:`irflow.cli.index`:
the same two formats, every bad line by number, ``--skip-bad``, progress), so a
line's record gets the id ``irflow index`` gives it (its ``id``, else one made
of its artifact, kind and ``surface_index`` — by default its position among its
artifact's lines of the file).  Adding the file a corpus was indexed from is
therefore refused (the ids are live), ``--upsert`` replaces them, and a line
that gives an artifact the corpus holds a new surface names its
``surface_index`` (or the file gives the artifact whole, with ``--artifacts``).
Whatever the file holds is one commit, and so is one ``delete``: the corpus
goes from the state before to the state after at once, or — refused, or
killed — stays as it was (:class:`irflow.store.corpus.Corpus`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import click

from irflow.cli.globals import note, show_progress
from irflow.cli.index import RECORD_FORMAT, RecordFile, bad_lines_report, read_record_file, skipped_report
from irflow.cli.options import dumps, embedder_option
from irflow.cli.output import echo_json, machine_readable
from irflow.cli.text import PATH_TEXT
from irflow.errors import CorpusError, InputError
from irflow.shard import open_corpus  # plain and sharded corpora alike
from irflow.util.corpusmarks import enclosing_corpus
from irflow.util.fileio import open_regular, read_lines

__all__ = ["add_command", "delete_command", "compact_command", "read_ids"]

#: What ``--embedder`` of ``add`` is for (and the note added to an error that needs it).
EMBEDDER_NOTE = ("irflow add: pass --embedder SPEC, the embedder the corpus was built with (a corpus built with a "
                 "custom one cannot restore it from disk)")


def _open(corpus_path: str, embedder: str | None = None) -> Any:
    """The corpus to update (plain or sharded), refused with a clear error when it cannot be updated."""
    corpus = open_corpus(corpus_path, embedder=embedder)
    if hasattr(corpus, "close"):  # a sharded corpus serves its shards until closed
        click.get_current_context().call_on_close(corpus.close)
    if not all(hasattr(corpus, name) for name in ("batch", "compact")):  # a sharded corpus that cannot update
        raise CorpusError(f"{corpus_path} is a sharded corpus, which this command cannot update in place; update "
                          "the corpus it was sharded from and shard it again (irflow shard)")
    return corpus


def _check_embedder(corpus: Any, embedder: str | None) -> None:
    """``--embedder`` is for a corpus built with a custom embedder only: any other has its own (or none)."""
    if embedder is None:
        return
    info = getattr(corpus, "embedder_info", None)
    spec = corpus.embedder_spec if info is None else info.spec
    if info is not None and info.source == "embedded" and info.spec is None:
        return  # custom: the user gives it again
    if spec is not None and spec == embedder:
        return  # its own, named again: harmless
    if corpus.dim is None:
        has = "is lexical-only (no vectors): its records are never embedded"
    elif info is not None and info.source == "precomputed":
        has = "holds precomputed vectors: every record added carries its own (\"vector\" in the file)"
    else:
        has = f"embeds with its own embedder, {spec}, restored from disk"
    raise click.UsageError(f"--embedder {embedder}: corpus {corpus.name!r} {has}; --embedder is only for a corpus "
                           "built with a custom embedder — leave it out")


def _inside_corpus_hint(path: Path) -> str:
    """A file of a corpus given as FILE (reading it is harmless, but it holds no records): said first."""
    found = enclosing_corpus(path, itself=False)
    if found is None:
        return ""
    return (f"{path} is a file of the irflow {found.kind} {found.root}, not a records file; give the JSON Lines "
            "file of records to add. ")


def _read(input_path: Path, title_mode: str, skip_bad: bool, show: bool) -> RecordFile:
    found = read_record_file(input_path, title_mode=title_mode, progress=show)
    if found.bad and not skip_bad:
        raise click.ClickException(_inside_corpus_hint(input_path)
                                   + bad_lines_report(found, done="nothing was added", to="add"))
    if found.bad:
        note(skipped_report(found))
    if not found.records:
        raise InputError(f"{_inside_corpus_hint(input_path)}{input_path}: no records to add ({found.lines} non-blank lines"
                         f"{', all bad' if found.bad else ''}); write one JSON object per line, e.g. "
                         '{"artifact_id": "unbox", "surface_kind": "description", "text": "Unpack any archive."}')
    return found


def _by_artifact(found: RecordFile) -> dict[str, list[Any]]:
    """The file's records per artifact, artifacts in the order they first appear, records in file order."""
    grouped: dict[str, list[Any]] = {}
    for record in found.records:
        grouped.setdefault(record.artifact_id, []).append(record)
    return grouped


def _commit_file(corpus: Any, found: RecordFile, mode: str, show: bool, embedder: str | None) -> Any:
    """The whole file as one commit: add, upsert, or put_artifact per artifact; its UpdateReport."""
    try:
        if mode == "add":
            return corpus.add(found.records, progress=show)
        if mode == "upsert":
            return corpus.upsert(found.records, progress=show)
        with corpus.batch(progress=show) as batch:
            for artifact, records in _by_artifact(found).items():
                batch.put_artifact(artifact, records)
        return batch.report
    except CorpusError as error:
        text = str(error)
        if "already in" in text and mode == "add":
            error.add_note("irflow add: --upsert replaces records whose id is live, --artifacts replaces whole "
                           "artifacts")
        elif "custom embedder" in text and embedder is None:
            error.add_note(EMBEDDER_NOTE)
        raise


def _report_fields(report: Any) -> dict[str, Any]:
    return attrs.asdict(report)


def _held(corpus: Any) -> str:
    segments = getattr(corpus, "segments", None)
    where = "" if segments is None else f" in {len(segments)} segment{'' if len(segments) == 1 else 's'}"
    return f"it holds {len(corpus)} record{'' if len(corpus) == 1 else 's'}{where}"


@click.command("add", epilog=f"Record format: {RECORD_FORMAT}")
@click.argument("corpus_path", type=PATH_TEXT, metavar="CORPUS")
@click.argument("input_path", metavar="FILE", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--upsert", is_flag=True,
              help="A record whose id the corpus holds live replaces it (the new version goes at the end); the "
                   "others are added.")
@click.option("--artifacts", is_flag=True,
              help="Each artifact of FILE replaces every surface the corpus holds of it (its lines are the "
                   "artifact whole, surfaces numbered from 0 in file order); artifacts FILE does not name stay.")
@click.option("--embedder", default=None, type=PATH_TEXT,  # a spec may hold a model path
              help="Only for a corpus built with a custom embedder (which cannot be restored from disk): a spec "
                   "giving the same vectors. Any other corpus embeds new texts with its own.")
@click.option("--title-mode", type=click.Choice(["prepend", "separate", "ignore"]), default="prepend",
              show_default=True, help="BEIR documents: how titles become records (as irflow index).")
@click.option("--skip-bad", is_flag=True,
              help="Add the good lines and report the bad ones (default: refuse the file, listing every bad line).")
@click.option("--progress/--no-progress", default=None,
              help="Progress of reading, embedding and writing (default: unless irflow -q).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary (the commit's counts).")
@machine_readable
def add_command(corpus_path: str, input_path: Path, upsert: bool, artifacts: bool, embedder: str | None,
                title_mode: str, skip_bad: bool, progress: bool | None, as_json: bool) -> None:
    """Add the records of FILE (the formats irflow index reads) to CORPUS, as one commit.

    A line's record has the id irflow index gives it: its "id", else one made of its artifact, kind and
    surface_index (by default its position among its artifact's lines). A record whose id is live is
    refused unless --upsert; a new surface of an artifact the corpus holds names its surface_index, or
    --artifacts gives artifacts whole. Only texts the corpus lacks are embedded.
    """
    if upsert and artifacts:
        raise click.UsageError("--upsert and --artifacts are two ways of replacing; give one of them")
    mode = "upsert" if upsert else "artifacts" if artifacts else "add"
    spec = None if embedder is None else embedder_option(embedder)
    corpus = _open(corpus_path, spec)
    _check_embedder(corpus, spec)
    show = show_progress(progress)
    found = _read(input_path, title_mode, skip_bad, show)
    report = _commit_file(corpus, found, mode, show, spec)
    summary: dict[str, Any] = {"path": corpus_path, "name": corpus.name, "file": str(input_path),
                               "format": found.format, "mode": mode, "skipped_lines": [b.number for b in found.bad],
                               **_report_fields(report), "records": len(corpus)}
    if as_json:
        echo_json(dumps(summary))
        return
    source = "BEIR documents" if found.format == "beir" else "records"
    verb = {"add": "added", "upsert": "upserted", "artifacts": "put the artifacts of"}[mode]
    click.echo(f"{verb} {input_path} ({source}) into corpus {corpus.name!r} in one commit: {report.added} added, "
               f"{report.replaced} replaced, {report.deleted} deleted; {report.embedded} texts embedded, "
               f"{report.reused} vectors reused{_generation(report)}; {_held(corpus)}")


def _generation(report: Any) -> str:
    merged = f", {report.merged} segments merged after it" if report.merged else ""
    return f"{merged} (generation {report.generation})" if report.generation else merged


# --------------------------------------------------------------------------
# delete


def _ids_of_lines(lines: Iterator[tuple[int, bytes]], name: str) -> list[str]:
    ids = []
    for number, raw in lines:
        try:
            line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as error:
            raise InputError(f"{name} line {number}: not UTF-8 text (byte {error.start + 1} of the line); save "
                             "the file as UTF-8, one record id per line") from None
        line = line.rstrip("\r\n")
        if line.strip():
            ids.append(line)
    return ids


def read_ids(path: str) -> list[str]:
    """The record ids of a file, one per line (blank lines skipped; ``-``: standard input)."""
    if path == "-":
        return _ids_of_lines(read_lines(sys.stdin.buffer, "standard input", "ids file"), "standard input")
    with open_regular(path, "ids file") as handle:
        return _ids_of_lines(read_lines(handle, path, "ids file"), path)


@click.command("delete")
@click.argument("corpus_path", type=PATH_TEXT, metavar="CORPUS")
@click.option("--id", "ids", multiple=True, metavar="ID", help="A record id to delete; repeatable.")
@click.option("--artifact", "artifacts", multiple=True, metavar="ARTIFACT",
              help="An artifact whose every record is deleted; repeatable.")
@click.option("--ids-from", "ids_from", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              metavar="FILE", help="Delete the record ids of FILE, one per line ('-': standard input).")
@click.option("--missing", type=click.Choice(["error", "ok"]), default="error", show_default=True,
              help="An id or artifact the corpus does not hold live: an error that deletes nothing, or (ok) a "
                   "warning while the others are deleted.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary (the commit's counts).")
@machine_readable
def delete_command(corpus_path: str, ids: tuple[str, ...], artifacts: tuple[str, ...], ids_from: str | None,
                   missing: str, as_json: bool) -> None:
    """Delete records of CORPUS by id (--id, --ids-from) and whole artifacts (--artifact), as one commit.

    Record ids are those irflow run --json and irflow.search show (record_id) and list(corpus) holds.
    """
    if not ids and not artifacts and ids_from is None:
        raise click.UsageError("nothing to delete: give --id ID, --artifact ARTIFACT or --ids-from FILE")
    wanted = list(ids) + ([] if ids_from is None else read_ids(ids_from))  # read before the corpus opens
    if not wanted and not artifacts:
        raise InputError(f"{'standard input' if ids_from == '-' else ids_from} holds no record id (one per line); "
                         "nothing was deleted")
    corpus = _open(corpus_path)
    try:
        with corpus.batch() as batch:
            if wanted:
                batch.delete(wanted, missing=missing)
            for artifact in dict.fromkeys(artifacts):
                batch.delete_artifact(artifact, missing=missing)
    except CorpusError as error:
        if "(unknown, or deleted already)" in str(error):
            error.add_note("irflow delete: --missing ok deletes the others and warns about these")
        raise
    report = batch.report
    summary = {"path": corpus_path, "name": corpus.name, "ids": len(dict.fromkeys(wanted)),
               "artifacts": len(dict.fromkeys(artifacts)), **_report_fields(report), "records": len(corpus)}
    if as_json:
        echo_json(dumps(summary))
        return
    click.echo(f"deleted {report.deleted} record{'' if report.deleted == 1 else 's'} of corpus {corpus.name!r} "
               f"in one commit{_generation(report)}; {_held(corpus)}")


# --------------------------------------------------------------------------
# compact


def _shape(corpus: Any) -> dict[str, int]:
    segments = getattr(corpus, "segments", None)
    if segments is None:
        return {"segments": 0, "rows": int(corpus.n_rows), "records": len(corpus)}
    return {"segments": len(segments), "rows": sum(s.rows for s in segments), "records": len(corpus)}


@click.command("compact")
@click.argument("corpus_path", type=PATH_TEXT, metavar="CORPUS")
@click.option("--progress/--no-progress", default=None, help="Progress (default: unless irflow -q).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary: segments and rows before and after.")
@machine_readable
def compact_command(corpus_path: str, progress: bool | None, as_json: bool) -> None:
    """Merge every segment of CORPUS into one, dropping deleted rows (its answers do not change)."""
    corpus = _open(corpus_path)
    before = _shape(corpus)
    report = corpus.compact(progress=show_progress(progress))
    after = _shape(corpus)
    summary = {"path": corpus_path, "name": corpus.name, "before": before, "after": after,
               "merged": report.merged, "generation": report.generation}
    if as_json:
        echo_json(dumps(summary))
        return
    if not report.merged:
        click.echo(f"corpus {corpus.name!r} is compact already: {_counts(after)}; nothing was written")
        return
    click.echo(f"compacted corpus {corpus.name!r}: {_counts(before)} before, {_counts(after)} after"
               f"{_generation(attrs.evolve(report, merged=0))}")


def _counts(shape: dict[str, int]) -> str:
    segments = f"{shape['segments']} segment{'' if shape['segments'] == 1 else 's'}, " if shape["segments"] else ""
    return f"{segments}{shape['rows']} rows ({shape['records']} live)"
