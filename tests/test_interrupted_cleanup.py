"""A writer killed while it removes old generations or a killed writer's leftovers: the next commit finishes the job.

A commit removes what it superseded (old generations, the temporary
directories of writers killed before) only with proof that irflow wrote it:
the marker file ``.irflow-generation`` (and, for a generation, its manifest
listing its files).  Killed in the middle of that removal — after any number
of unlinks — the directory must keep its proof until the rest of it is gone,
so the next commit removes what is left instead of leaving it for ever (as
``tests/hostile_updates.py`` found: a temporary directory whose marker went
first stayed behind, unmarked).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import irflow
import irflow.store.genfiles as genfiles
from irflow.util.corpusmarks import MARKER_FILE, MARKER_TEXT


class Killed(BaseException):
    """The process dies here (nothing catches it, as nothing catches SIGKILL)."""


def _current(root: Path) -> str:
    return (root / "CURRENT").read_text().split()[0]


def _records(n: int) -> list[irflow.Record]:
    return [irflow.Record(f"pkg{i}", "name", f"pkg{i} parser") for i in range(n)]


def _killed_after(monkeypatch: pytest.MonkeyPatch, unlinks: int) -> None:
    real, done = genfiles.os.unlink, [0]

    def unlink(path, *args, **kwargs):
        if done[0] == unlinks:
            raise Killed
        done[0] += 1
        return real(path, *args, **kwargs)
    monkeypatch.setattr(genfiles.os, "unlink", unlink)


def _clean(root: Path) -> bool:
    return sorted(p.name for p in root.iterdir()) == [".lock", "CURRENT", _current(root)]


@pytest.fixture()
def corpus(tmp_path: Path) -> irflow.Corpus:
    return irflow.build(_records(2), embedder=None, path=tmp_path / "c")


@pytest.mark.parametrize("name", [".tmp-gen-000900-0123abcd", "gen-000900"])
def test_a_removal_killed_after_any_number_of_unlinks_is_finished_by_the_next(corpus, monkeypatch, name):
    """A killed writer's temporary directory, or an old generation: killed while removing it, then removed."""
    root = corpus.path
    corpus.add(_records(3)[-1:])  # a generation of format 3: segments, as updates leave them
    live = root / _current(root)
    files = len(list(live.iterdir()))
    for unlinks in range(files):
        shutil.copytree(live, root / name)  # its marker, its manifest and every file it lists
        _killed_after(monkeypatch, unlinks)
        with pytest.raises(Killed):
            genfiles.remove_superseded(root, keep=[live.name])
        monkeypatch.undo()
        genfiles.remove_superseded(root, keep=[live.name])  # the next commit's clean-up
        assert _clean(root), (unlinks, sorted(p.name for p in (root / name).iterdir()))
    assert len(irflow.open_corpus(root)) == 3


def test_a_removal_killed_after_its_last_unlink_leaves_no_empty_directory(corpus, monkeypatch):
    """Killed between the marker's unlink and the directory's rmdir: the empty directory goes at the next commit."""
    root = corpus.path
    live = root / _current(root)
    shutil.copytree(live, root / "gen-000900")

    def rmdir(path, *args, **kwargs):
        raise Killed
    monkeypatch.setattr(genfiles.os, "rmdir", rmdir)
    with pytest.raises(Killed):
        genfiles.remove_superseded(root, keep=[live.name])
    monkeypatch.undo()
    assert not any((root / "gen-000900").iterdir())
    corpus.add([irflow.Record("z", "name", "z")])
    assert _clean(root), sorted(p.name for p in root.iterdir())


def test_a_writer_killed_while_writing_its_marker_leaves_nothing_for_ever(corpus):
    root = corpus.path
    for written in (b"", MARKER_TEXT[:10]):
        leftover = root / ".tmp-gen-000999-0123abcd"
        leftover.mkdir()
        (leftover / MARKER_FILE).write_bytes(written)  # killed between creating the marker and its last byte
        corpus.add([irflow.Record(f"x{len(written)}", "name", "x")])
        assert _clean(root), sorted(p.name for p in root.iterdir())


def test_foreign_files_are_still_never_removed(corpus):
    root = corpus.path
    leftover = root / ".tmp-gen-000999-0123abcd"
    leftover.mkdir()
    (leftover / MARKER_FILE).write_bytes(b"not irflow's marker, but a file of the same name and a different text")
    (leftover / "mine.txt").write_text("mine")
    old = root / "gen-000777"
    old.mkdir()
    (old / "notes.txt").write_text("mine too")
    corpus.add([irflow.Record("y", "name", "y")])
    assert (leftover / "mine.txt").read_text() == "mine" and (leftover / MARKER_FILE).exists()
    assert (old / "notes.txt").read_text() == "mine too"
