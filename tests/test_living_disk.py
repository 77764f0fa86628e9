"""Corpora updated in place on disk: one generation per commit, files shared, crash-safe, concurrent.

A commit writes the new segment's files, the tombstone files it changed and
the manifest, and hard-links everything else (checked by inode); a reopened
corpus answers exactly as the object that committed (and as a fresh build);
a corpus of format 2 (what ``build`` writes) or 1 becomes format 3 at its
first update; a writer killed at any point leaves the state before or after
its commit; two writers serialize on the corpus lock (with a timeout) and
lose no update; readers never fail while commits go on.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import irflow
from irflow.errors import CorpusError
from irflow.store.generations import PAUSE_ENV
from irflow.store.mergepolicy import MergePolicy
from irflow.store.corpus import open_corpus
from old_format import downgrade_to_v1
from rebuild_oracle import assert_same_answers, assert_same_records, rebuild
from shard_corpus import records

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the concurrency tests fork processes")


def _current(root: Path) -> str:
    return (root / "CURRENT").read_text().split()[0]


def _manifest(root: Path) -> dict:
    return json.loads((root / _current(root) / "manifest.json").read_text())


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    path = tmp_path / "toys"
    irflow.build(records()[:40], embedder="hash:64", path=path)
    return path


def _open(root: Path) -> irflow.Corpus:
    corpus = open_corpus(root)
    corpus.merge_policy = MergePolicy.never()
    return corpus


# -- commits, reopened ---------------------------------------------------------------------------


def test_every_commit_reopens_to_the_same_answers(root):
    recs = records()
    corpus = _open(root)
    steps = [
        lambda c: c.add(recs[40:70]),
        lambda c: c.delete(c.record_ids[[2, 3, 45]].tolist()),
        lambda c: c.upsert([dict(recs[10], text="a new text for an old surface"), recs[70]]),
        lambda c: c.put_artifact("pkg04", [dict(artifact_id="pkg04", surface_kind="name", text="pkg04 sql")]),
        lambda c: c.store.delete_record(c.store.ledger["pkg05"][1]),  # out of band: stays listed (stale)
        lambda c: c.compact(),
        lambda c: c.delete_artifact("pkg05"),  # the artifact goes, off the ledger: the stale entry too
    ]
    for step in steps:
        step(corpus)
        reopened = open_corpus(root)
        assert reopened.segments == corpus.segments and reopened.version == 0
        assert_same_records(reopened, corpus)
        for mode in ("dense", "lexical", "hybrid"):
            for where in (None, {"owner": "ann"}):
                expected = irflow.search(corpus, "python parser json", mode=mode, filter=where, k=8)
                assert irflow.search(reopened, "python parser json", mode=mode, filter=where, k=8) == expected
    assert_same_answers(corpus, quick=True)  # and a fresh build of the live records
    assert _manifest(root)["version"] == 3 and len(corpus.segments) == 1
    assert sorted(p.name for p in root.iterdir()) == [".lock", "CURRENT", _current(root)]


def test_a_commit_writes_only_what_changed_and_links_the_rest(root):
    before = root / _current(root)
    inodes = {p.name: p.stat().st_ino for p in before.iterdir()}
    corpus = _open(root)
    report = corpus.add(records()[40:45])
    after = root / report.generation
    written = {p.name for p in after.iterdir() if p.name.replace("seg-000001.", "") not in inodes
               or p.stat().st_ino != inodes[p.name.replace("seg-000001.", "")]}
    # format 2 -> 3: the build's files linked as segment seg-000001's; the digests the add computed kept too
    assert all(n.startswith("seg-000002.") for n in written - {"manifest.json", ".irflow-generation",
                                                               "seg-000001.text_hash.npy"})
    assert "seg-000001.vectors.npy" not in written and "seg-000001.postings.post_rows.npy" not in written
    inodes = {p.name: p.stat().st_ino for p in after.iterdir()}
    report = corpus.delete(corpus.record_ids[[0, 42]].tolist())
    third = root / report.generation
    changed = sorted(p.name for p in third.iterdir() if p.name not in inodes or p.stat().st_ino != inodes[p.name])
    assert changed == [".irflow-generation", "manifest.json", "seg-000001.tombstones.npy",
                       "seg-000001.unlisted.npy", "seg-000002.tombstones.npy", "seg-000002.unlisted.npy"]
    assert all((third / n).stat().st_size < 200 for n in changed if n.endswith(".npy"))  # a few row numbers


def test_corpora_of_formats_1_and_2_are_updated(tmp_path):
    recs = records()
    for version in (1, 2):
        path = tmp_path / f"v{version}"
        irflow.build(recs[:30], embedder="hash:64", path=path)
        if version == 1:
            downgrade_to_v1(path)
        old = open_corpus(path)
        old.store.delete_record(old.record_ids[4])  # out of band: the corpus keeps its format
        assert _manifest(path)["version"] == version
        old.add(recs[30:40])
        assert _manifest(path)["version"] == 3
        entry = _manifest(path)["segments"][0]
        assert entry["records"] == version and entry["deleted"] == 1 and entry["unlisted"] == 0
        reopened = open_corpus(path)
        assert_same_answers(reopened, old, quick=True)
        assert old.record_ids[4] in reopened.store.ledger[old.store.record(4).artifact_id]  # still listed


def test_refused_updates_leave_the_directory_as_it_was(root):
    corpus = _open(root)
    corpus.add(records()[40:45])
    pointer = (root / "CURRENT").read_bytes()
    listing = sorted(p.name for p in root.iterdir())
    with pytest.raises(CorpusError, match="already in"):
        corpus.add(records()[40:41])
    with pytest.raises(CorpusError, match="not in corpus"):
        corpus.delete(["nope"])
    assert (root / "CURRENT").read_bytes() == pointer and sorted(p.name for p in root.iterdir()) == listing


def test_a_damaged_segment_is_named(root):
    corpus = _open(root)
    corpus.add(records()[40:45])
    gen = root / _current(root)
    target = gen / "seg-000002.records.text.bytes.npy"
    data = bytearray(target.read_bytes())
    data[-1] ^= 1
    target.unlink()
    target.write_bytes(bytes(data))
    with pytest.raises(CorpusError, match="seg-000002.records.text.bytes.npy does not match its checksum"):
        open_corpus(root)


def test_a_read_only_or_foreign_directory_is_refused(tmp_path, root):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(CorpusError, match="not an irflow corpus"):
        open_corpus(foreign)
    if os.geteuid() == 0:
        return  # root writes anywhere
    corpus = _open(root)
    before = corpus.snapshot()
    os.chmod(root, 0o555)
    try:
        with pytest.raises(CorpusError, match=r"cannot write to the corpus at .*Permission denied.*nothing was changed"):
            corpus.add(records()[40:41])
    finally:
        os.chmod(root, 0o755)
    assert corpus.snapshot() is before
    assert_same_records(open_corpus(root), corpus)
    corpus.add(records()[40:41])  # writable again: the debris is cleaned up, the commit lands
    assert len(open_corpus(root)) == 41


# -- two writers, readers, kills ----------------------------------------------------------------


def _add_in_turn(path: str, lo: int, hi: int) -> None:
    corpus = open_corpus(path)
    corpus.merge_policy = MergePolicy.never()
    for at in range(lo, hi, 2):
        corpus.add(records()[at:at + 2])


def test_two_writers_both_land(root):
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_add_in_turn, args=(str(root), lo, lo + 10)) for lo in (40, 50)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(120)
        assert w.exitcode == 0
    corpus = open_corpus(root)
    expected = {irflow.Record(**r).id for r in records()[:60]}
    assert {r.id for r in corpus} == expected and len(corpus) == 60


_PAUSED_ADD = """
import sys
from irflow.store.corpus import open_corpus
from shard_corpus import records
corpus = open_corpus(sys.argv[1])
corpus.add(records()[int(sys.argv[2]):int(sys.argv[3])])
"""


def _spawn(script: str, *args: str, pause: str | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests"),
                                                       os.environ.get("PYTHONPATH", "")]))
    if pause:
        env[PAUSE_ENV] = pause
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *args], env=env, cwd=REPO)


def _wait_for(marker: Path, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not marker.exists():
        assert proc.poll() is None, f"the writer exited ({proc.returncode}) before its pause point"
        assert time.monotonic() < deadline, "the writer never reached its pause point"
        time.sleep(0.02)


def _kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def test_the_second_writer_waits_then_says_so(root, tmp_path):
    marker = tmp_path / "paused"
    proc = _spawn(_PAUSED_ADD, str(root), "40", "45", pause=f"before-current@{marker}")
    try:
        _wait_for(marker, proc)
        corpus = _open(root)
        corpus.lock_timeout = 0.3
        started = time.monotonic()
        with pytest.raises(CorpusError, match=r"another process is writing to the corpus at .*waited 0.3 s.*retry"):
            corpus.add(records()[45:46])
        assert time.monotonic() - started >= 0.3
    finally:
        _kill(proc)
    corpus.add(records()[45:46])  # the killed writer's lock went with it
    assert len(open_corpus(root)) == 41


@pytest.mark.slow
@pytest.mark.parametrize("point", ["after:seg-000002.vectors.npy", "before-current"])
def test_a_killed_add_leaves_the_corpus_before_it(root, tmp_path, point):
    before = open_corpus(root)
    marker = tmp_path / "paused"
    proc = _spawn(_PAUSED_ADD, str(root), "40", "50", pause=f"{point}@{marker}")
    _wait_for(marker, proc)
    _kill(proc)
    assert_same_answers(open_corpus(root), before, quick=True)
    corpus = _open(root)
    corpus.add(records()[40:50])  # the next writer cleans up and commits
    assert sorted(p.name for p in root.iterdir()) == [".lock", "CURRENT", _current(root)]
    assert_same_answers(corpus, quick=True)


_PAUSED_COMPACT = """
import sys
from irflow.store.corpus import open_corpus
open_corpus(sys.argv[1]).compact()
"""


@pytest.mark.slow
@pytest.mark.parametrize("point", ["after:seg-000004.vectors.npy"])
def test_a_killed_compaction_leaves_the_corpus_before_it(root, tmp_path, point):
    corpus = _open(root)
    corpus.add(records()[40:50])
    corpus.delete(corpus.record_ids[:3].tolist())
    corpus.add(records()[50:55])
    marker = tmp_path / "paused"
    proc = _spawn(_PAUSED_COMPACT, str(root), pause=f"{point}@{marker}")
    _wait_for(marker, proc)
    _kill(proc)
    reopened = open_corpus(root)
    assert len(reopened.segments) == 3
    assert_same_answers(reopened, corpus, quick=True)


def _commit_quickly(path: str, seconds: float) -> None:
    corpus = open_corpus(path)
    corpus.merge_policy = MergePolicy(merge_factor=4)
    deadline = time.monotonic() + seconds
    at = 40
    while time.monotonic() < deadline and at < len(records()):
        corpus.add(records()[at:at + 1])
        if at % 3 == 0:
            corpus.delete([corpus.record_ids[at - 39]], missing="ok")
        at += 1
        time.sleep(0.05)


def test_readers_never_fail_while_commits_go_on(root):
    context = multiprocessing.get_context("fork")
    writer = context.Process(target=_commit_quickly, args=(str(root), 3.0))
    writer.start()
    reader = _open(root)
    seen, deadline = set(), time.monotonic() + 2.5
    try:
        while time.monotonic() < deadline:
            fresh = open_corpus(root)  # opened while generations come and go
            hits = irflow.search(fresh, "python parser", mode="hybrid", k=5)
            assert len(hits) == 5 and len(fresh) == sum(s.live for s in fresh.segments)
            reader.refresh()  # a reader that stays open moves to the latest state
            assert irflow.search(reader, "python parser", k=3)
            seen.add(fresh.snapshot().n_rows)
    finally:
        writer.join(60)
    assert writer.exitcode == 0 and len(seen) > 2
    assert_same_answers(open_corpus(root), quick=True)


def test_a_corpus_rebuilt_meanwhile_is_not_updated(root):
    stale = _open(root)
    irflow.build(records()[:5], embedder="hash:64", path=root)
    with pytest.raises(CorpusError, match="rebuilt since it was opened"):
        stale.add(records()[40:41])
    assert len(open_corpus(root)) == 5


def test_an_open_corpus_reads_what_others_committed(root):
    first, second = _open(root), _open(root)
    first.add(records()[40:45])
    assert len(second) == 40 and second.refresh() and len(second) == 45
    assert not second.refresh()
    second.add(records()[45:50])  # moves to the latest state first: first's add is kept
    first.refresh()
    assert len(first) == 50 and np.array_equal(first.record_ids, second.record_ids)
    assert_same_records(first, rebuild(second))


def test_a_commit_that_cannot_write_changes_nothing(root, monkeypatch):
    import errno

    import irflow.store.generations as generations

    corpus = _open(root)
    before, pointer = corpus.snapshot(), (root / "CURRENT").read_bytes()

    def full(path, payload):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))
    monkeypatch.setattr(generations, "write_file", full)
    with pytest.raises(CorpusError, match=r"cannot write to the corpus at .*No space left.*nothing was changed"):
        corpus.add(records()[40:42])
    monkeypatch.undo()
    assert corpus.snapshot() is before and (root / "CURRENT").read_bytes() == pointer
    corpus.add(records()[40:42])
    assert len(open_corpus(root)) == 42


def test_a_corpus_of_a_custom_embedder_needs_it_again_to_embed(tmp_path):
    from irflow.kernels.embedders import resolve_embedder

    hashing = resolve_embedder("hash:16")
    path = tmp_path / "custom"
    irflow.build(records()[:10], embedder=lambda texts: hashing.embed_documents(list(texts)), path=path)
    reopened = open_corpus(path)
    pointer = (path / "CURRENT").read_bytes()
    with pytest.raises(CorpusError, match="custom embedder.*pass it again: open_corpus"):
        reopened.add(records()[10:12])
    assert (path / "CURRENT").read_bytes() == pointer
    reopened.delete([reopened.record_ids[0]])  # no new text: nothing to embed, nothing needed
    wrong = open_corpus(path, embedder="hash:8")
    with pytest.raises(irflow.EmbedderError, match="8"):
        wrong.add(records()[10:12])
    right = open_corpus(path, embedder=lambda texts: hashing.embed_documents(list(texts)))
    assert right.add(records()[10:12]).embedded == 2
