"""A sharded corpus changes in one step: kills, readers during a reshard, and a sealed shards.json.

The expectations are the unsharded corpora's answers (``shard_states``): a
sharded directory must answer exactly as the corpus it was sharded from
before a reshard's commit, and as the new one after it — never a mixture,
never an error — and a damaged ``shards.json`` must be refused, naming it.
The longer random-kill loop is ``tests/hostile_shard.py``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from click.testing import CliRunner
from hypothesis import strategies as st

import irflow
from irflow.cli import main as cli
from irflow.errors import CorpusError, OutputError
from irflow.shard import ShardedCorpus, shard
from irflow.shard.manifest import MANIFEST_FILE, read_manifest
from irflow.store import generations as gens
from irflow.store.corpus import open_corpus as open_plain
from old_format import downgrade_sharded_to_v1
from shard_states import REPO, answers, answers_of, assert_clean, build_sources, layout, spawn_shard


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """(A, B, A's answers, B's answers): the two plain corpora and what each answers."""
    a, b = build_sources(tmp_path_factory.mktemp("sources"))
    return a, b, answers_of(a), answers_of(b)


def _wait_for(marker: Path, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the writer exited ({proc.returncode}) before its pause point: "
                                 f"{proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("the writer never reached its pause point")
        time.sleep(0.02)


def _kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL


def _shard_again(source: Path, n: int, root: Path) -> None:
    """``irflow shard SOURCE --shards N --out ROOT`` run again, in this process."""
    done = CliRunner().invoke(cli, ["shard", str(source), "--shards", str(n), "--out", str(root)])
    assert done.exit_code == 0, done.output


# Points before the commit leave the previous sharding, points after it the new one.  "before-rename#2":
# the first shard's new generation is in place (gen-000002 of shard-000), the second's is being renamed.
BEFORE = ["before-rename#2", "after:vectors.npy#2", "shard:before-commit"]
AFTER = ["shard:after-commit", "shard:before-cleanup"]
RESHARDS = [(3, 2, point) for point in BEFORE + AFTER] + [(2, 3, "before-rename#2"), (2, 3, "shard:after-commit")]


@pytest.mark.slow
@pytest.mark.parametrize("old_n, new_n, point", RESHARDS)
def test_a_killed_reshard_leaves_the_old_or_the_new_sharding(sources, tmp_path, old_n, new_n, point):
    a, b, of_a, of_b = sources
    root = tmp_path / "S"
    shard(irflow.open_corpus(a), old_n, root).close()
    marker = tmp_path / "paused"
    proc = spawn_shard(b, new_n, root, pause=point, marker=marker)
    _wait_for(marker, proc)
    _kill(proc)
    expected, n = (of_a, old_n) if point in BEFORE else (of_b, new_n)
    assert answers_of(root) == expected
    with ShardedCorpus.open(root) as sharded:
        assert sharded.n_shards == n
    # running the command again finishes the reshard and leaves nothing of the old one or the killed one
    _shard_again(b, new_n, root)
    assert answers_of(root) == of_b
    assert_clean(root, new_n)
    for entry in read_manifest(root).shards:  # each shard still opens alone, as the generation shards.json names
        assert open_plain(root / entry.dir).n_rows == entry.n_rows
        assert gens.read_current(root / entry.dir).name == entry.generation


@pytest.mark.slow
@pytest.mark.parametrize("point", ["before-rename#2", "shard:before-commit", "shard:after-commit"])
def test_a_killed_first_sharding_says_so_and_running_it_again_works(sources, tmp_path, point):
    _, b, _, of_b = sources
    root = tmp_path / "S"
    marker = tmp_path / "paused"
    proc = spawn_shard(b, 2, root, pause=point, marker=marker)
    _wait_for(marker, proc)
    _kill(proc)
    if point in BEFORE:
        with pytest.raises(CorpusError, match=r"holds an interrupted sharding.*run the irflow shard command again"):
            irflow.open_corpus(root)
        with pytest.raises(CorpusError, match=r"interrupted sharding"):
            ShardedCorpus.open(root)
    else:
        assert answers_of(root) == of_b
    _shard_again(b, 2, root)
    assert answers_of(root) == of_b
    assert_clean(root, 2)


def test_a_reshard_keeps_what_a_reader_holds_and_the_next_one_removes_it(sources, tmp_path):
    a, b, of_a, of_b = sources
    root = tmp_path / "S"
    shard(irflow.open_corpus(a), 3, root).close()
    old = read_manifest(root)
    entry = old.shards[2]
    with gens.holding(root / entry.dir, entry.generation, entry.manifest_checksum, recorded_in="test"):
        shard(irflow.open_corpus(b), 2, root).close()  # shard-002 is no longer used, but a reader holds it
        assert (root / entry.dir / entry.generation / "manifest.json").is_file()
    assert answers_of(root) == of_b  # an unlisted leftover changes nothing
    shard(irflow.open_corpus(b), 2, root).close()
    assert_clean(root, 2)


def test_a_corpus_served_on_ray_keeps_its_shards_on_disk_until_closed(sources, tmp_path, monkeypatch):
    # a Ray actor restarted after a crash reopens its shard: the driver holds the generations while it is open
    from irflow.shard import living
    from irflow.shard.backend import InProcessBackend

    class FakeRay(InProcessBackend):
        def __init__(self, root, manifest, *, address, verify=True, **options):
            super().__init__(root, manifest, verify=verify)

    monkeypatch.setattr(living, "RayBackend", FakeRay)  # where a served sharding's backend is made
    a, b, of_a, of_b = sources
    root = tmp_path / "S"
    shard(irflow.open_corpus(a), 3, root).close()
    old = read_manifest(root)
    served = ShardedCorpus.open(root, ray="auto")
    shard(irflow.open_corpus(b), 2, root).close()
    assert all((root / e.dir / e.generation / "manifest.json").is_file() for e in old.shards)
    assert answers(served) == of_a and answers_of(root) == of_b
    served.close()
    shard(irflow.open_corpus(b), 2, root).close()
    assert_clean(root, 2)
    with ShardedCorpus.open(root) as local:  # served in this process: held only while it opens
        shard(irflow.open_corpus(a), 2, root).close()
        assert_clean(root, 2)
        assert answers(local) == of_b  # its maps outlive the files


def test_a_sharded_path_where_one_corpus_is_opened_says_what_it_is(sources, tmp_path):
    _, b, _, of_b = sources
    root = tmp_path / "S"
    shard(irflow.open_corpus(b), 2, root).close()
    with pytest.raises(CorpusError, match=r"is a sharded corpus .*open it with irflow\.open_corpus"):
        irflow.search(str(root), "python")  # the seed API opens a path as one corpus
    (root / MANIFEST_FILE).unlink()  # what a killed first sharding leaves
    with pytest.raises(CorpusError, match=r"is a sharded corpus .*interrupted"):
        open_plain(root)


def test_a_first_sharding_into_a_foreign_or_plain_directory_is_refused(sources, tmp_path):
    a, _, _, _ = sources
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    (foreign / "shard-000").mkdir()
    with pytest.raises(CorpusError, match="not empty and not a sharded corpus.*'notes.txt'"):
        shard(irflow.open_corpus(a), 2, foreign)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt", "shard-000"]
    with pytest.raises(OutputError, match="is the irflow corpus"):
        shard(irflow.open_corpus(a), 2, a)  # a plain corpus is no sharding: the output guard says so first
    assert not (foreign / "notes.txt").is_dir() and (foreign / "notes.txt").read_text() == "mine"


_ALTERNATE = """
import sys
from pathlib import Path
import irflow
from irflow.shard.split import shard_corpus
a, b, root, ready = (Path(p) for p in sys.argv[1:5])
sources = [(irflow.open_corpus(b), 2), (irflow.open_corpus(a), 3)]
ready.write_text("ready")
i = 0
while True:  # reshard back and forth until killed
    corpus, n = sources[i % 2]
    shard_corpus(corpus, n, root)
    i += 1
    (ready.parent / "commits").write_text(str(i))
"""


def _spawn_alternating(a: Path, b: Path, root: Path, ready: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop(gens.PAUSE_ENV, None)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(_ALTERNATE), str(a), str(b), str(root), str(ready)],
                            env=env, cwd=REPO, stderr=subprocess.PIPE)


@pytest.mark.slow
def test_readers_during_reshards_always_open_one_whole_sharding(sources, tmp_path):
    a, b, of_a, of_b = sources
    root = tmp_path / "S"
    shard(irflow.open_corpus(a), 3, root).close()
    ready = tmp_path / "ready"
    writer = _spawn_alternating(a, b, root, ready)
    try:
        _wait_for(ready, writer)
        seen = {"A": 0, "B": 0}
        deadline = time.monotonic() + 60
        commits = tmp_path / "commits"
        while time.monotonic() < deadline and (not commits.exists() or int(commits.read_text() or 0) < 6):
            with irflow.open_corpus(root) as sharded:  # reopened while the writer reshards
                got = answers(sharded)
            assert got in (of_a, of_b)
            seen["A" if got == of_a else "B"] += 1
        assert writer.poll() is None, writer.stderr.read().decode() if writer.stderr else ""
    finally:
        writer.kill()
        writer.wait(timeout=10)
    assert int(commits.read_text()) >= 6, "the writer committed too few reshards for the test to mean anything"
    assert seen["A"] and seen["B"], seen


@pytest.mark.slow
def test_reshards_killed_at_random_moments(sources, tmp_path):
    """No hook: SIGKILL a writer resharding back and forth; the survivor is always one whole sharding."""
    a, b, of_a, of_b = sources
    root = tmp_path / "S"
    shard(irflow.open_corpus(a), 3, root).close()
    ready = tmp_path / "ready"
    rng = random.Random(20)
    for _ in range(3):
        writer = _spawn_alternating(a, b, root, ready)
        _wait_for(ready, writer)
        time.sleep(rng.uniform(0.1, 1.0))
        writer.kill()
        writer.wait(timeout=10)
        ready.unlink()
        assert answers_of(root) in (of_a, of_b)


# -- a sealed shards.json --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sealed(sources, tmp_path_factory):
    """A sharded B (interleaved: rows files in its shards' generations), its manifest's bytes, B's answers."""
    _, b, _, of_b = sources
    root = tmp_path_factory.mktemp("sealed") / "S"
    shard(irflow.open_corpus(b), 3, root).close()
    return root, (root / MANIFEST_FILE).read_bytes(), of_b


def _with_flip(path: Path, original: bytes, position: int, bit: int):
    damaged = bytearray(original)
    damaged[position] ^= 1 << bit
    path.write_bytes(bytes(damaged))


def _flip_text(raw: bytes, find: bytes, offset: int = 0) -> int:
    position = raw.index(find) + offset
    return position


@pytest.mark.parametrize("what, find, offset", [
    ("the name", b'"name": "B"', len(b'"name": "')),                # a hit's source would read another name
    ("a count", b'"live": ', len(b'"live": ')),
    ("a shard's first row", b'"first_row": ', len(b'"first_row": ')),
    ("a shard's generation", b'"generation": "gen-', len(b'"generation": "gen-')),
    ("a shard's kinds", b'"kinds": [', len(b'"kinds": [') + 3),
    ("the seal", b'"checksum": "', len(b'"checksum": "') + 5),
    ("white space", b'\n "counts"', 1),
])
def test_one_bit_of_shards_json_changed_is_refused_naming_it(sealed, what, find, offset):
    root, original, of_b = sealed
    path = root / MANIFEST_FILE
    try:
        _with_flip(path, original, _flip_text(original, find, offset), 0)
        with pytest.raises(CorpusError, match=r"shards\.json"):
            irflow.open_corpus(root)
    finally:
        path.write_bytes(original)
    assert answers_of(root) == of_b


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_bit_of_shards_json_changed_is_refused_naming_it(sealed, data):
    root, original, _ = sealed
    path = root / MANIFEST_FILE
    position = data.draw(st.integers(0, len(original) - 1), label="position")
    bit = data.draw(st.integers(0, 7), label="bit")
    try:
        _with_flip(path, original, position, bit)
        with pytest.raises(CorpusError, match=r"shards\.json"):
            read_manifest(root)
    finally:
        path.write_bytes(original)


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and p.stat().st_size)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_damaged_byte_anywhere_is_refused_naming_its_file_or_changes_nothing(sealed, data):
    root, _, of_b = sealed
    path = data.draw(st.sampled_from(_files(root)), label="file")
    original = path.read_bytes()
    position = data.draw(st.integers(0, len(original) - 1), label="position")
    try:
        _with_flip(path, original, position, data.draw(st.integers(0, 7), label="bit"))
        try:
            got = answers_of(root)
        except CorpusError as error:
            assert path.name in str(error)
        else:  # a byte nobody reads (a shard's CURRENT, a marker): no answer changed
            assert got == of_b
    finally:
        path.write_bytes(original)


# -- version 1 ---------------------------------------------------------------------------------------------


def test_a_sharded_corpus_of_the_previous_release_still_opens_and_resharding_upgrades_it(sources, tmp_path):
    a, b, of_a, of_b = sources
    root = tmp_path / "S"
    shard(irflow.open_corpus(b), 3, root).close()
    downgrade_sharded_to_v1(root)
    assert json.loads((root / MANIFEST_FILE).read_text())["version"] == 1
    assert sorted(p.name for p in root.glob("*.rows.npy")) == ["shard-000.rows.npy", "shard-001.rows.npy",
                                                               "shard-002.rows.npy"]
    assert answers_of(root) == of_b
    rows = root / "shard-001.rows.npy"  # its rows file is still checked against the manifest
    kept = rows.read_bytes()
    rows.write_bytes(kept[:-8] + np.arange(1, dtype=np.int64).tobytes())
    with pytest.raises(CorpusError, match=r"shard 1: .*shard-001\.rows\.npy does not match the checksum"):
        irflow.open_corpus(root)
    rows.write_bytes(kept)
    shard(irflow.open_corpus(a), 2, root).close()
    assert read_manifest(root).version == 2 and answers_of(root) == of_a
    assert_clean(root, 2)


def test_resharding_removes_nothing_it_did_not_write(sources, tmp_path):
    a, b, _, of_b = sources
    root = tmp_path / "S"
    shard(irflow.open_corpus(a), 3, root).close()
    (root / MANIFEST_FILE).unlink()  # as a killed first sharding would leave it
    mine = [root / "shard-001" / "mine.txt", root / "shard-002" / "mine.txt"]
    for path in mine:
        path.write_text("mine")
    shard(irflow.open_corpus(b), 2, root).close()  # shard-002 is no longer used: only irflow's files go
    assert answers_of(root) == of_b
    assert [path.read_text() for path in mine] == ["mine", "mine"]
    assert layout(root)["shard-002"] == ["mine.txt"]
    (root / "notes.txt").write_text("mine")
    shard(irflow.open_corpus(b), 2, root).close()  # over a sharded corpus: its own files go, the others stay
    assert (root / "notes.txt").read_text() == "mine"
