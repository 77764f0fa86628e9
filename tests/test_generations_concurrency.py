"""Generations under concurrency, and clean-up that never deletes what irflow did not write (issue 10, items 2 and 3).

Item 2: a process deleting records (~30/s) while another opens the corpus in
a loop made ~35% of the opens fail ("the corpus is damaged", a raw
FileNotFoundError for ledger.json, "CURRENT names gen-N but manifest.json is
missing").  Item 3: ``build(path=D)`` deleted a user's ``gen-20240101-photos/``
or ``.tmp-notes/``, and ``delete_record`` deleted a ``gen-000001.bak`` file.
"""

from __future__ import annotations

import collections
import logging
import multiprocessing
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from irflow.store import generations as gens
from irflow.store.corpus import build, open_corpus
from irflow.errors import CorpusError
from irflow.store.ledger import records_for_artifact
from irflow.store.records import Record

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the concurrency tests fork processes")


def _records(n: int) -> list[Record]:
    return [Record(f"a{i // 2}", ("name", "description")[i % 2], f"item {i} parses json yaml files {i % 7}", {"i": i})
            for i in range(n)]


def _delete_slowly(root: str, stop: multiprocessing.synchronize.Event, started: multiprocessing.synchronize.Event,
                   pause: float) -> None:
    corpus = open_corpus(root)
    started.set()
    for record_id in list(corpus.record_ids):
        if stop.is_set():
            return
        corpus.store.delete_record(record_id)
        time.sleep(pause)


def _open_while_deleting(root: Path, seconds: float, read) -> tuple[int, collections.Counter, set[int]]:
    context = multiprocessing.get_context("fork")
    stop, started = context.Event(), context.Event()
    writer = context.Process(target=_delete_slowly, args=(str(root), stop, started, 1 / 30))
    writer.start()
    failures: collections.Counter = collections.Counter()
    seen_live: set[int] = set()
    opens = 0
    try:
        assert started.wait(60), "the deleting process did not start"
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            opens += 1
            try:
                seen_live.add(read(root))
            except Exception as exc:  # every failure is counted: none is allowed
                failures[f"{type(exc).__name__}: {str(exc)[:100]}"] += 1
    finally:
        stop.set()
        writer.join(60)
    assert writer.exitcode == 0, "the deleting process failed"
    return opens, failures, seen_live


@pytest.mark.slow
@pytest.mark.parametrize("what", ["corpus", "store"])
def test_readers_never_fail_while_another_process_deletes(tmp_path: Path, what: str) -> None:
    root = tmp_path / "c"
    build(_records(12000), embedder="hash:64", path=root)
    if what == "corpus":
        def read(path: Path) -> int:
            corpus = open_corpus(path)
            corpus.dense_topk(corpus.embed_queries(["json"]), None, 3)  # the mapped vectors are readable
            return len(corpus)
    else:
        def read(path: Path) -> int:  # sibling lookup by path reads the store alone
            records_for_artifact(path, "a5999")  # far from the deleted prefix
            return len(open_corpus(path).store)
    opens, failures, seen = _open_while_deleting(root, 4.0, read)
    assert not failures, f"{sum(failures.values())} of {opens} opens failed: {dict(failures)}"
    assert len(seen) >= 3, "the reader should have seen several generations (the writer was deleting)"
    # and nothing was leaked: the writer removed every generation the reader let go of
    open_corpus(root).store.delete_record(open_corpus(root).record_ids[-1])
    assert sorted(p.name for p in root.iterdir()) == [".lock", "CURRENT", gens.read_current(root).name]


def _rebuild_alternately(root: str, stop, started) -> None:
    small = [Record(f"s{i}", "name", f"small {i}") for i in range(50)]
    big = [Record(f"b{i}", "name", f"big {i} json") for i in range(3000)]
    started.set()
    while not stop.is_set():
        build(small, embedder="hash:16", path=root)
        build(big, embedder="hash:16", path=root)


@pytest.mark.slow
def test_readers_see_a_whole_corpus_while_another_process_rebuilds(tmp_path: Path) -> None:
    root = tmp_path / "c"
    build([Record(f"s{i}", "name", f"small {i}") for i in range(50)], embedder="hash:16", path=root)
    context = multiprocessing.get_context("fork")
    stop, started = context.Event(), context.Event()
    writer = context.Process(target=_rebuild_alternately, args=(str(root), stop, started))
    writer.start()
    failures: collections.Counter = collections.Counter()
    sizes: collections.Counter = collections.Counter()
    try:
        assert started.wait(60)
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            try:
                corpus = open_corpus(root)
                sizes[corpus.n_rows] += 1
                prefix = "s" if corpus.n_rows == 50 else "b"
                assert all(a.startswith(prefix) for a in corpus.artifact_ids)  # one whole corpus, never a mix
            except Exception as exc:
                failures[f"{type(exc).__name__}: {str(exc)[:100]}"] += 1
    finally:
        stop.set()
        writer.join(120)
    assert not failures, dict(failures)
    assert set(sizes) <= {50, 3000} and sum(sizes.values()) > 0


def test_a_generation_a_reader_holds_is_kept_until_it_lets_go(tmp_path: Path) -> None:
    root = tmp_path / "c"
    corpus = build(_records(40), embedder="hash:16", path=root)
    with gens.reading(root) as held:
        corpus.store.delete_record(corpus.record_ids[0])
        corpus.store.delete_record(corpus.record_ids[1])
        assert (root / held.name / "manifest.json").is_file()  # kept while held
        gens.verify_files(held)  # and whole
    corpus.store.delete_record(corpus.record_ids[2])  # the next writer removes it
    assert not (root / held.name).exists()
    assert sorted(p.name for p in root.iterdir()) == [".lock", "CURRENT", gens.read_current(root).name]


def test_an_opened_corpus_keeps_working_after_its_generation_is_removed(tmp_path: Path) -> None:
    root = tmp_path / "c"
    build(_records(40), embedder="hash:16", path=root)
    reader = open_corpus(root)
    old = gens.read_current(root).name
    queries = reader.embed_queries(["json files"])
    before_dense = reader.dense_topk(queries, None, 5)
    other = open_corpus(root)
    for row in (3, 4):
        other.store.delete_record(other.record_ids[row])
    assert not (root / old).exists()  # its files are unlinked...
    vectors = np.array(reader.vectors)  # ...but the mapped pages stay readable (POSIX)
    np.testing.assert_array_equal(vectors, other.vectors)
    after = reader.dense_topk(queries, None, 5)
    assert after.row.tolist() == before_dense.row.tolist() and after.score.tolist() == before_dense.score.tolist()
    assert reader.bm25_topk(reader.tokenize_queries(["json"]), None, 3).row.size == 3


def test_a_reader_retries_when_current_moves_under_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The one window left: CURRENT read, then its generation removed before the reader locks it."""
    root = tmp_path / "c"
    corpus = build(_records(20), embedder="hash:16", path=root)
    real = gens._read_pointer
    calls = {"n": 0}

    def pointer_then_two_commits(path: Path):
        found = real(path)
        calls["n"] += 1
        if calls["n"] == 1:  # a writer commits twice right after this reader read CURRENT
            corpus.store.delete_record(corpus.record_ids[0])
            corpus.store.delete_record(corpus.record_ids[1])
            assert not (root / found[0]).exists()
        return found

    monkeypatch.setattr(gens, "_read_pointer", pointer_then_two_commits)
    reopened = open_corpus(root)
    assert len(reopened) == 18  # the newest generation, not an error


def test_current_naming_a_missing_generation_is_damage_not_a_race(tmp_path: Path) -> None:
    root = tmp_path / "c"
    build(_records(4), embedder=None, path=root)
    name = gens.read_current(root).name
    for file in (root / name).iterdir():
        file.unlink()
    (root / name).rmdir()
    with pytest.raises(CorpusError, match=f"CURRENT names {name}, but that generation directory is missing.*rebuild"):
        open_corpus(root)
    (root / name).mkdir()
    with pytest.raises(CorpusError, match=f"CURRENT names {name}, but {name}/manifest.json is missing.*rebuild"):
        open_corpus(root)


# -- never delete what irflow did not write (item 3) ----------------------------------------------------------


def _user_folder(tmp_path: Path, entry: str, is_dir: bool = True) -> tuple[Path, Path]:
    folder = tmp_path / "user"
    folder.mkdir()
    target = folder / entry
    if is_dir:
        target.mkdir()
        (target / "precious.jpg").write_bytes(b"\xff\xd8 a photo")
    else:
        target.write_text("precious")
    return folder, target


@pytest.mark.parametrize("entry, is_dir", [
    ("gen-20240101-photos", True), (".tmp-notes", True), ("gen-20240101", True), ("gen-000001", True),
    (".tmp-gen-000001-deadbeef", True), (".tmp-CURRENT-deadbeef.txt", False), ("gen-000001.bak", False),
])
def test_build_refuses_a_folder_holding_what_irflow_did_not_write(tmp_path: Path, entry: str, is_dir: bool) -> None:
    folder, target = _user_folder(tmp_path, entry, is_dir)
    with pytest.raises(CorpusError, match=rf"cannot write a corpus to {folder}.*not an irflow corpus.*{entry}"):
        build(_records(4), embedder=None, path=folder)
    assert (target / "precious.jpg").read_bytes() if is_dir else target.read_text() == "precious"
    assert sorted(p.name for p in folder.iterdir()) == [entry]  # not even a .lock was left


def test_build_refuses_another_programs_current(tmp_path: Path) -> None:
    """LevelDB keeps a CURRENT file too; a rebuild over it would have replaced it."""
    folder = tmp_path / "db"
    folder.mkdir()
    (folder / "CURRENT").write_text("MANIFEST-000004\n")
    (folder / "LOG").write_text("log")
    with pytest.raises(CorpusError, match="not an irflow corpus.*'CURRENT'"):
        build(_records(4), embedder=None, path=folder)
    assert (folder / "CURRENT").read_text() == "MANIFEST-000004\n"


def test_deletes_and_rebuilds_leave_foreign_files_in_a_corpus_alone(tmp_path: Path, caplog) -> None:
    root = tmp_path / "c"
    corpus = build(_records(10), embedder="hash:16", path=root)
    first = gens.read_current(root).name
    (root / "gen-000001.bak").write_text("my backup")
    (root / "gen-000002-old").mkdir()
    (root / "gen-000002-old" / "x").write_text("mine")
    (root / ".tmp-notes").mkdir()
    (root / "notes.txt").write_text("notes")
    (root / first / "my-annotations.txt").write_text("inside a generation")
    with caplog.at_level(logging.WARNING, logger="irflow.store.generations"):
        corpus.store.delete_record(corpus.record_ids[0])
        corpus.store.delete_record(corpus.record_ids[1])
        build(_records(6), embedder="hash:16", path=root)
    assert (root / "gen-000001.bak").read_text() == "my backup"
    assert (root / "gen-000002-old" / "x").read_text() == "mine"
    assert (root / ".tmp-notes").is_dir() and (root / "notes.txt").read_text() == "notes"
    # the superseded generation lost only its own files; the user's file (and so its folder) stayed
    assert sorted(p.name for p in (root / first).iterdir()) == ["my-annotations.txt"]
    assert "irflow did not write" in caplog.text
    assert open_corpus(root).n_rows == 6


def test_leftovers_of_killed_writers_are_cleaned_up(tmp_path: Path) -> None:
    root = tmp_path / "c"
    corpus = build(_records(6), embedder=None, path=root)
    # what a writer killed mid-write leaves: a marked temporary directory, an empty one, a pointer temp file
    marked = root / ".tmp-gen-000002-0123abcd"
    marked.mkdir()
    (marked / gens.MARKER_FILE).write_bytes(gens.MARKER_TEXT)
    (marked / "records.json").write_text("{}")
    (root / ".tmp-gen-000003-89abcdef").mkdir()
    (root / ".tmp-CURRENT-0123abcd").write_text("gen-000002 ")
    corpus.store.delete_record(corpus.record_ids[0])
    assert sorted(p.name for p in root.iterdir()) == [".lock", "CURRENT", gens.read_current(root).name]


def test_a_generation_of_an_older_irflow_without_marker_is_still_cleaned_up(tmp_path: Path) -> None:
    root = tmp_path / "c"
    corpus = build(_records(6), embedder=None, path=root)
    old = gens.read_current(root).name
    (root / old / gens.MARKER_FILE).unlink()  # as written before markers existed: its manifest proves it
    corpus.store.delete_record(corpus.record_ids[0])
    assert not (root / old).exists()


def test_a_damaged_corpus_can_still_be_rebuilt_in_place(tmp_path: Path) -> None:
    root = tmp_path / "c"
    build(_records(6), embedder=None, path=root)
    (root / "CURRENT").write_text("garbage")
    with pytest.raises(CorpusError, match="rebuild it"):
        open_corpus(root)
    build(_records(4), embedder=None, path=root)  # what the message says to do
    assert open_corpus(root).n_rows == 4
    assert sorted(p.name for p in root.iterdir()) == [".lock", "CURRENT", gens.read_current(root).name]


def test_a_reader_thread_and_a_deleting_thread_share_a_process(tmp_path: Path) -> None:
    """flock is per open file: a reader and a writer in one process exclude each other like two processes."""
    root = tmp_path / "c"
    corpus = build(_records(400), embedder="hash:16", path=root)
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                open_corpus(root)
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for record_id in corpus.record_ids[:40]:
            corpus.store.delete_record(record_id)
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors[:3]
    assert len(open_corpus(root)) == 360
