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

import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture()
def fast_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on tmpfs when there is one: a durable commit is ~30 fsyncs (a few a second on a slow disk),
    and the concurrency tests check what readers and writers see while commits go on, at the rate they go on."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    base = Path(tempfile.mkdtemp(dir=shm, prefix="irflow-test-"))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


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


def _add_in_turn(path: str, lo: int, hi: int, log: str, start: Any) -> None:
    """Add records lo..hi one commit at a time, logging when each commit asked for the lock, got it, let it go."""
    from irflow.store import diskwriter

    held = []
    plain = diskwriter.DiskWriter.locked

    @contextlib.contextmanager
    def timed(self: Any) -> Iterator[None]:
        asked = time.monotonic()
        with plain(self):
            got = time.monotonic()
            yield
            held.append((asked, got, time.monotonic()))
    diskwriter.DiskWriter.locked = timed  # this process only: the test's stopwatch around the real lock
    corpus = open_corpus(path)
    corpus.merge_policy = MergePolicy(merge_factor=3)  # merges take the lock too
    start.wait(30)
    for at in range(lo, hi):
        corpus.add(records()[at:at + 1])
    Path(log).write_text(json.dumps(held))


def test_two_writers_wait_for_each_other_and_both_land(fast_dir, tmp_path):
    root = fast_dir / "toys"
    irflow.build(records()[:40], embedder="hash:64", path=root)
    context = multiprocessing.get_context("fork")
    start = context.Event()
    logs = [tmp_path / "a.json", tmp_path / "b.json"]
    writers = [context.Process(target=_add_in_turn, args=(str(root), lo, lo + 8, str(log), start))
               for lo, log in zip((40, 48), logs)]
    for w in writers:
        w.start()
    start.set()
    for w in writers:
        w.join(120)
        assert w.exitcode == 0
    corpus = open_corpus(root)
    expected = {irflow.Record(**r).id for r in records()[:56]}
    assert {r.id for r in corpus} == expected and len(corpus) == 56  # no update lost
    a, b = (json.loads(log.read_text()) for log in logs)
    spans = sorted([(got, left, "a") for _, got, left in a] + [(got, left, "b") for _, got, left in b])
    assert all(left <= next_got for (_, left, _), (next_got, _, _) in zip(spans, spans[1:]))  # one at a time
    # and one writer waited for the other: it asked while the other held the lock, and got it after
    waited = [(asked, got) for mine, theirs in ((a, b), (b, a)) for asked, got, _ in mine
              if any(o_got <= asked < o_left <= got for _, o_got, o_left in theirs)]
    assert waited
    assert_same_answers(corpus, quick=True)


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


QUERY = "python parser json"


def _answer(corpus: Any) -> list[Any]:
    """One state's answer to the fixed query: its live count and hybrid top 5 (ids, score bits)."""
    snapshot = corpus.snapshot()
    hits = irflow.search(snapshot, QUERY, mode="hybrid", k=5)
    return [len(snapshot), [(h.record_id, h.score.hex()) for h in hits]]


def _commit_quickly(path: str, seconds: float, log: str, rate: float = 20.0) -> None:
    """Commit about *rate* operations a second (adds, deletes, upserts, batches), logging each state's answer."""
    corpus = open_corpus(path)
    corpus.merge_policy = MergePolicy(merge_factor=4)
    answers = [_answer(corpus)]
    started = time.monotonic()
    at, n = 40, 0
    while time.monotonic() < started + seconds and at < len(records()):
        ids = corpus.record_ids[corpus.live]  # live ones only
        if n % 7 == 6:  # a batch: several operations, one commit
            with corpus.batch() as batch:
                batch.add(records()[at:at + 1])
                batch.delete([ids[(n * 3) % len(ids)]])
        elif n % 4 in (0, 3):
            corpus.add(records()[at:at + 1])
        elif n % 4 == 1:
            corpus.delete([ids[n % len(ids)]])
        else:
            corpus.upsert([dict(records()[at - 1], text=f"python parser json {n}")])
        at += n % 4 in (0, 3) or n % 7 == 6
        n += 1
        answers.append(_answer(corpus))
        time.sleep(max(0.0, started + n / rate - time.monotonic()))
    Path(log).write_text(json.dumps({"answers": answers, "operations": n, "seconds": time.monotonic() - started}))


def _read_until(path: str, stop: Path, out: Path | None = None) -> tuple[list[Any], list[str]]:
    """Search in a loop until *stop* exists: a corpus opened anew each time, and one kept open and refreshed."""
    answers, errors = [], []
    kept = open_corpus(path)
    while not stop.exists():
        try:
            answers.append(_answer(open_corpus(path)))  # opened while generations come and go
            kept.refresh()  # a reader that stays open moves to the latest state
            answers.append(_answer(kept))
            time.sleep(0.02)  # two cores: leave the writer its share
        except Exception as error:  # noqa: BLE001 - every failure is reported
            errors.append(f"{type(error).__name__}: {error}")
    if out is not None:
        out.write_text(json.dumps({"answers": answers, "errors": errors}))
    return answers, errors


def _read_in_a_process(path: str, stop: str, out: str) -> None:
    _read_until(path, Path(stop), Path(out))


def test_readers_see_one_committed_state_while_a_writer_commits_20_a_second(fast_dir):
    path = fast_dir / "toys"
    irflow.build(records()[:40], embedder="hash:64", path=path)
    stop, log, out = fast_dir / "stop", fast_dir / "writer.json", fast_dir / "reader.json"
    context = multiprocessing.get_context("fork")
    writer = context.Process(target=_commit_quickly, args=(str(path), 3.0, str(log)))
    reader = context.Process(target=_read_in_a_process, args=(str(path), str(stop), str(out)))
    reader.start()
    writer.start()
    seen: list[tuple[list[Any], list[str]]] = []
    threads = [threading.Thread(target=lambda: seen.append(_read_until(str(path), stop))) for _ in range(2)]
    for thread in threads:
        thread.start()
    writer.join(120)
    stop.touch()
    for thread in threads:
        thread.join(60)
    reader.join(60)
    assert writer.exitcode == 0 and reader.exitcode == 0
    wrote = json.loads(log.read_text())
    read = json.loads(out.read_text())
    committed = {json.dumps(a) for a in wrote["answers"]}
    answers = read["answers"] + [a for got, _ in seen for a in got]
    assert not read["errors"] and not [e for _, errors in seen for e in errors]  # no reader failed
    assert answers and all(json.dumps(a) in committed for a in answers)  # each answer: one committed state's
    assert len({json.dumps(a) for a in answers}) > 3  # the readers did see the states change
    rate = wrote["operations"] / wrote["seconds"]
    # paced at 20 a second (alone on tmpfs it keeps up); two shared cores and three readers get fewer done
    assert wrote["operations"] >= 10, f"{wrote['operations']} operations in {wrote['seconds']:.1f} s ({rate:.1f}/s)"
    assert_same_answers(open_corpus(path), quick=True)


class _Cycle:
    """An array held in a reference cycle: only a garbage collection frees it (and its memory map)."""

    def __init__(self, value: Any) -> None:
        self.value, self.me = value, self


def test_threads_read_array_files_at_once(root):
    # numpy parses a .npy header with ast; CPython 3.11 fails one thread's parse (SystemError: AST constructor
    # recursion depth mismatch) when a collection in the middle of it frees a memory map, releasing the GIL, and
    # another thread parses meanwhile — readers opening a corpus while others do hit it
    import gc

    from irflow.store import generations, persist, recordfiles

    generation = generations.read_current(root)
    files = [f for f in generation.files if f.endswith(".npy") and f != "vectors.npy"]
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for at in range(600):
                _Cycle(recordfiles.load_array(generation, files[at % len(files)]))
                if at % 50 == 0:
                    _Cycle(persist.map_vectors(generation, verify=False)[0])
                    _Cycle(open_corpus(root))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threshold = gc.get_threshold()
    gc.set_threshold(20)  # collections often, so some land inside a parse
    try:
        threads = [threading.Thread(target=read) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        gc.set_threshold(*threshold)
    assert not errors, errors[:3]


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
