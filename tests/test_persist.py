"""The on-disk format: layout, verification of damaged files, durable deletes, and kill-mid-write safety."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

import irflow
import irflow.store.corpus as corpus_module
from irflow.store.corpus import Corpus, build, open_corpus
from irflow.errors import CorpusError
from irflow.store.generations import PAUSE_ENV
from irflow.store.ledger import records_for_artifact
from irflow.store.records import Record
from irflow.kernels import text
from old_format import downgrade_to_v1

REPO = Path(__file__).resolve().parents[1]
#: format 2's record store files: binary columns, no JSON parsed per record
RECORD_FILES = [f"{stem}.{part}.npy" for stem in ("records.id", "records.artifact_id", "records.text",
                                                   "records.metadata", "ledger.artifact")
                for part in ("bytes", "offsets")] + ["records.kind_code.npy", "records.surface_index.npy",
                                                     "ledger.offsets.npy", "ledger.rows.npy", "ledger.missing.json"]


def _records(n_artifacts: int = 6) -> list[Record]:
    records = []
    for a in range(n_artifacts):
        artifact = f"pkg{a}"
        records.append(Record(artifact, "name", artifact, {"owner": f"o{a % 3}", "n": a}))
        records.append(Record(artifact, "description", f"package {a} parses {'json yaml toml'.split()[a % 3]} files", {"owner": f"o{a % 3}"}))
        records.append(Record(artifact, "readme_chunk", f"install pkg{a} with pip; it supports python {a % 4 + 8}", {}))
    return records


def _current(root: Path) -> str:
    return (root / "CURRENT").read_text().split()[0]


def _snapshot(corpus: Corpus) -> dict:
    """Everything a reader can observe, to compare a corpus before and after a killed writer."""
    queries = ["json files", "install pip python"]
    dense = corpus.dense_topk(corpus.embed_queries(queries), corpus.candidate_mask(), 5)
    lexical = corpus.bm25_topk(corpus.tokenize_queries(queries), corpus.candidate_mask(), 5)
    return {
        "records": [r.to_dict() for r in corpus.store],
        "ledger": dict(corpus.store.ledger),
        "vectors": np.asarray(corpus.vectors).tobytes(),
        "dense": (dense.row.tolist(), dense.score.tolist()),
        "lexical": (lexical.row.tolist(), lexical.score.tolist()),
    }


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "corpus"
    build(_records(), embedder="hash:32", path=path)
    return path


# -- layout ------------------------------------------------------------------------------


def test_layout_and_manifest(root: Path) -> None:
    assert _current(root) == "gen-000001"
    gen = root / "gen-000001"
    manifest = json.loads((gen / "manifest.json").read_text())
    assert manifest["format"] == "irflow-corpus" and manifest["version"] == 2
    assert manifest["counts"]["rows"] == 18 and manifest["counts"]["live"] == 18 and manifest["counts"]["artifacts"] == 6
    assert manifest["embedder"]["spec"] == "hash:32" and manifest["embedder"]["dim"] == 32
    assert manifest["analyzer"]["name"] == text.DEFAULT_ANALYZER
    assert manifest["kinds"] == ["name", "description", "readme_chunk"]
    expected = {"tombstones.npy", "vectors.npy", "vocab.json", "postings.term_offsets.npy", *RECORD_FILES}
    assert expected <= set(manifest["files"]) and "records.json" not in manifest["files"]
    for name, entry in manifest["files"].items():
        data = (gen / name).read_bytes()
        assert entry["bytes"] == len(data)
        assert entry["crc32"] == f"{zlib.crc32(data):08x}" and "blake2b" not in entry
    vectors = np.load(gen / "vectors.npy", mmap_mode="r", allow_pickle=False)
    assert vectors.shape == (18, 32) and vectors.dtype == np.float32
    # CURRENT pins the manifest too.
    assert (root / "CURRENT").read_text().split()[1] == hashlib.blake2b((gen / "manifest.json").read_bytes(), digest_size=16).hexdigest()


def test_opened_arrays_are_memory_mapped(root: Path) -> None:
    corpus = open_corpus(root)
    base = corpus.vectors
    while base is not None and not isinstance(base, np.memmap):
        base = base.base
    assert isinstance(base, np.memmap)


# -- damage is detected -------------------------------------------------------------------


@pytest.mark.parametrize("file", [*RECORD_FILES, "vectors.npy", "postings.post_rows.npy", "vocab.json", "tombstones.npy"])
def test_truncated_file_raises_corpus_error_naming_it(root: Path, file: str) -> None:
    path = root / "gen-000001" / file
    path.write_bytes(path.read_bytes()[:-3])
    for verify in (True, False):  # sizes are checked even without checksums
        with pytest.raises(CorpusError, match=rf"{file}.*truncated.*rebuild"):
            open_corpus(root, verify=verify)


@pytest.mark.parametrize("file", ["records.text.bytes.npy", "records.metadata.bytes.npy", "records.id.offsets.npy",
                                  "ledger.rows.npy", "ledger.missing.json", "postings.post_tfs.npy", "vocab.json"])
def test_altered_byte_raises_corpus_error_naming_it(root: Path, file: str) -> None:
    path = root / "gen-000001" / file
    data = bytearray(path.read_bytes())
    data[len(data) - 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorpusError, match=rf"{file}.*checksum.*rebuild"):
        open_corpus(root)


def _flip_low_bit_of_a_vector(root: Path) -> None:
    # the last bit of a float32 component: the norm stays within tolerance, only the checksum sees it
    path = root / "gen-000001" / "vectors.npy"
    data = bytearray(path.read_bytes())
    data[len(data) - 4] ^= 0x01
    path.write_bytes(bytes(data))


def test_altered_vectors_are_refused_on_first_dense_use(root: Path) -> None:
    # opening maps the vectors and checks their size; their checksum is checked with their norms, on first
    # dense use (a pass over the whole matrix an open does not need), and refused on every later use too
    _flip_low_bit_of_a_vector(root)
    corpus = open_corpus(root)
    assert irflow.search(corpus, "json", mode="lexical")  # lexical search never reads the vectors
    for _ in range(2):
        with pytest.raises(CorpusError, match=r"gen-000001/vectors.npy does not match its checksum.*rebuild"):
            irflow.search(corpus, "json", mode="dense")
    assert irflow.search(open_corpus(root, verify=False), "json", mode="dense")  # no checksums asked


def _answers(corpus: Corpus) -> dict:
    """Every reader-visible answer that reads records: hits (text, metadata) through filters, siblings, lookups."""
    hits = {}
    for mode in ("dense", "lexical", "hybrid"):
        for where in (None, {"owner": "o1"}, {"n": {"$gte": 2}}):
            hits[(mode, repr(where))] = [h.to_dict() for h in irflow.search(corpus, "json files pip", mode=mode,
                                                                            filter=where, k=5)]
    return {
        "snapshot": _snapshot(corpus),
        "hits": hits,
        "siblings": {a: [r.to_dict() for r in records_for_artifact(corpus, a)] for a in corpus.store.ledger},
        "rows": [corpus.row_of(rid) for rid in corpus.record_ids.tolist()],
        "records": [r.to_dict() for r in corpus.records([5, 0, 17])],
        "artifacts": corpus.artifact_ids_of([3, 4]).tolist(),
    }


@pytest.mark.parametrize("digest", ["blake2b", "crc32"])
def test_corpora_of_the_previous_release_still_open(root: Path, digest: str) -> None:
    # format 1 (records.json, ledger.json) with blake2b digests (two releases back) or crc32 ones (the last)
    before = _answers(open_corpus(root))
    downgrade_to_v1(root, digest=digest)
    gen = root / "gen-000001"
    manifest = json.loads((gen / "manifest.json").read_text())
    assert manifest["version"] == 1 and "records.json" in manifest["files"] and "records.id.bytes.npy" not in manifest["files"]
    old = open_corpus(root)
    assert _answers(old) == before
    # a delete on an old corpus keeps its format (the other files are linked as they are) and still answers
    old.store.delete_record(old.record_ids[4])
    reopened = open_corpus(root)
    assert json.loads((root / _current(root) / "manifest.json").read_text())["version"] == 1
    assert reopened.record_ids[4] not in reopened.store and len(reopened) == 17
    assert [r.to_dict() for r in reopened.store] == [r.to_dict() for r in old.store]
    gen = root / _current(root)
    vectors = gen / "vectors.npy"
    data = bytearray(vectors.read_bytes())
    data[len(data) - 4] ^= 0x01
    vectors.unlink()
    vectors.write_bytes(bytes(data))
    with pytest.raises(CorpusError, match=r"vectors.npy does not match its checksum"):
        irflow.search(open_corpus(root), "json", mode="dense")
    records = gen / "records.json"
    raw = records.read_bytes().replace(b"pkg2", b"pkgX")
    records.unlink()
    records.write_bytes(raw)
    with pytest.raises(CorpusError, match=r"records.json does not match its checksum"):
        open_corpus(root)


def test_missing_file_manifest_and_current(root: Path, tmp_path: Path) -> None:
    (root / "gen-000001" / "vocab.json").unlink()
    with pytest.raises(CorpusError, match="vocab.json is missing"):
        open_corpus(root)
    manifest = root / "gen-000001" / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"live": 18', '"live": 17'))
    with pytest.raises(CorpusError, match="manifest.json.*checksum"):
        open_corpus(root)
    (root / "CURRENT").write_text("gen-000001")  # a CURRENT cut short
    with pytest.raises(CorpusError, match="CURRENT does not hold"):
        open_corpus(root)
    (root / "CURRENT").unlink()
    with pytest.raises(CorpusError, match="not an irflow corpus"):
        open_corpus(root)
    with pytest.raises(CorpusError, match="does not exist"):
        open_corpus(tmp_path / "nowhere")


def _rewrite_manifest(root: Path, change: dict) -> None:
    gen = root / _current(root)
    manifest = json.loads((gen / "manifest.json").read_text())
    manifest.update(change)
    raw = json.dumps(manifest).encode()
    (gen / "manifest.json").write_bytes(raw)
    (root / "CURRENT").write_text(f"{gen.name} {hashlib.blake2b(raw, digest_size=16).hexdigest()}\n")


def test_unknown_format_version_is_refused(root: Path) -> None:
    _rewrite_manifest(root, {"version": 99})
    with pytest.raises(CorpusError, match="version 99.*rebuild"):
        open_corpus(root)


def test_inconsistent_shapes_are_refused(root: Path) -> None:
    _rewrite_manifest(root, {"embedder": {"spec": "hash:32", "dim": 31, "description": "", "source": "embedded"}})
    with pytest.raises(CorpusError, match="vectors.npy"):
        open_corpus(root)


# -- records_for_artifact by path never touches the embedder or the vectors -----------------


def test_sibling_lookup_by_path_reads_only_the_store(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import irflow.kernels.embedders as embedders_module

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("records_for_artifact must not resolve an embedder")

    monkeypatch.setattr(embedders_module, "resolve_embedder", refuse)
    monkeypatch.setattr(corpus_module, "resolve_embedder", refuse)
    vectors = root / "gen-000001" / "vectors.npy"
    vectors.write_bytes(vectors.read_bytes()[:-8])  # a damaged vectors file is never read
    siblings = records_for_artifact(root, "pkg2")
    assert [r.surface_kind for r in siblings] == ["name", "description", "readme_chunk"]
    assert records_for_artifact(str(root), "pkg2", surface_kind="name")[0].text == "pkg2"
    with pytest.raises(CorpusError, match="vectors.npy"):
        open_corpus(root)


def test_sibling_lookup_by_path_still_verifies_the_store(root: Path) -> None:
    records = root / "gen-000001" / "records.artifact_id.bytes.npy"
    records.write_bytes(records.read_bytes().replace(b"pkg2", b"pkgX"))
    with pytest.raises(CorpusError, match="records.artifact_id.bytes.npy does not match its checksum"):
        records_for_artifact(root, "pkg2")


# -- durable deletes -------------------------------------------------------------------------


def test_delete_record_persists_as_a_new_generation(root: Path) -> None:
    corpus = open_corpus(root)
    victim = corpus.store.ledger["pkg1"][2]
    inode = (root / "gen-000001" / "vectors.npy").stat().st_ino
    corpus.store.delete_record(victim)
    assert _current(root) == "gen-000002" and not (root / "gen-000001").exists()
    # Unchanged files are hard links of the previous generation's (same inode).
    assert (root / "gen-000002" / "vectors.npy").stat().st_ino == inode
    manifest = json.loads((root / "gen-000002" / "manifest.json").read_text())
    assert manifest["counts"]["live"] == 17
    reopened = open_corpus(root)
    row = int(np.flatnonzero(reopened.record_ids == victim)[0])
    assert victim not in reopened.store and not reopened.candidate_mask()[row]
    assert dict(reopened.store.ledger) == dict(corpus.store.ledger)  # ledger untouched
    with pytest.raises(KeyError, match=f"{victim}.*pkg1.*stale"):
        records_for_artifact(root, "pkg1")
    # The in-memory corpus still answers, from arrays of the removed generation.
    assert corpus.dense_topk(corpus.embed_queries(["json"]), None, 3).row.size == 3


def test_delete_copies_when_hard_links_are_refused(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import irflow.store.generations as generations

    def no_links(source: object, target: object) -> None:
        raise OSError("hard links not supported here")

    monkeypatch.setattr(generations.os, "link", no_links)
    corpus = open_corpus(root)
    corpus.store.delete_record(corpus.record_ids[3])
    reopened = open_corpus(root, verify=True)
    assert len(reopened) == 17 and _current(root) == "gen-000002"


def test_deletes_from_two_handles_are_merged(root: Path) -> None:
    first, second = open_corpus(root), open_corpus(root)
    a, b = first.record_ids[0], second.record_ids[5]
    first.store.delete_record(a)
    second.store.delete_record(b)
    assert a not in second.store  # merged from disk by the second writer
    reopened = open_corpus(root)
    assert a not in reopened.store and b not in reopened.store and len(reopened) == 16


def test_delete_after_a_rebuild_is_refused(root: Path) -> None:
    stale = open_corpus(root)
    build(_records(3), embedder="hash:32", path=root)
    with pytest.raises(CorpusError, match="rebuilt since it was opened"):
        stale.store.delete_record(stale.record_ids[0])
    assert stale.record_ids[0] in stale.store  # memory never claims a delete the disk lacks


# -- kill mid-write ------------------------------------------------------------------------------

_REBUILD = """
import sys
from irflow.store.corpus import build
from irflow.store.records import Record
n = int(sys.argv[2])
records = [Record(f"new{i // 4}", "chunk", f"replacement text {i} " * 20, {"i": i}) for i in range(n)]
build(records, embedder="hash:32", path=sys.argv[1])
"""

_DELETE = """
import sys
from irflow.store.corpus import open_corpus
corpus = open_corpus(sys.argv[1])
corpus.store.delete_record(corpus.record_ids[0])
"""


def _spawn(script: str, root: Path, *args: str, env_extra: dict | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(env_extra or {})
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), str(root), *args], env=env, cwd=REPO)


def _wait_for(marker: Path, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"writer exited ({proc.returncode}) before reaching the pause point")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("writer never reached the pause point")
        time.sleep(0.02)


def _kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL


def _assert_intact(root: Path, before: dict) -> None:
    reopened = open_corpus(root, verify=True)
    assert _snapshot(reopened) == before
    assert len(records_for_artifact(root, "pkg3")) == 3


@pytest.mark.slow
@pytest.mark.parametrize("point", ["after:records.text.bytes.npy", "after:vectors.npy", "before-rename", "before-current"])
def test_killed_rebuild_leaves_the_previous_corpus_intact(root: Path, tmp_path: Path, point: str) -> None:
    before = _snapshot(open_corpus(root))
    marker = tmp_path / "paused"
    proc = _spawn(_REBUILD, root, "400", env_extra={PAUSE_ENV: f"{point}@{marker}"})
    _wait_for(marker, proc)
    _kill(proc)
    _assert_intact(root, before)
    # The next writer cleans up the debris and succeeds.
    build(_records(2), embedder="hash:32", path=root)
    assert open_corpus(root).n_rows == 6
    assert sorted(p.name for p in root.iterdir()) == [".lock", "CURRENT", _current(root)]


@pytest.mark.slow
@pytest.mark.parametrize("point", ["after:tombstones.npy", "before-current"])
def test_killed_delete_leaves_the_previous_corpus_intact(root: Path, tmp_path: Path, point: str) -> None:
    before = _snapshot(open_corpus(root))
    marker = tmp_path / "paused"
    proc = _spawn(_DELETE, root, env_extra={PAUSE_ENV: f"{point}@{marker}"})
    _wait_for(marker, proc)
    _kill(proc)
    _assert_intact(root, before)


@pytest.mark.slow
def test_killed_first_build_leaves_no_corpus(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    marker = tmp_path / "paused"
    proc = _spawn(_REBUILD, root, "50", env_extra={PAUSE_ENV: f"before-current@{marker}"})
    _wait_for(marker, proc)
    _kill(proc)
    with pytest.raises(CorpusError, match="interrupted"):
        open_corpus(root)
    build(_records(), embedder="hash:32", path=root)  # and the path is reusable
    assert open_corpus(root).n_rows == 18


_CHURN_REBUILDS = """
import json, sys
from pathlib import Path
import numpy as np
from irflow.store.corpus import build
from irflow.store.records import Record
original = [Record.from_dict(d) for d in json.loads(Path(sys.argv[2]).read_text())]
vectors = np.random.default_rng(7).normal(size=(2000, 1024))  # wide: writing dominates the loop
other = [Record(f"b{i // 4}", "chunk", f"b item {i}", {"i": i}, vector=vectors[i]) for i in range(2000)]
Path(sys.argv[3]).write_text("ready")
while True:  # alternate two corpora over one path until killed
    build(other, embedder=None, path=sys.argv[1])
    build(original, embedder="hash:32", path=sys.argv[1])
"""

_CHURN_DELETES = """
import sys
from pathlib import Path
from irflow.store.corpus import open_corpus
corpus = open_corpus(sys.argv[1])
Path(sys.argv[2]).write_text("ready")
for record_id in list(corpus.record_ids):  # row order, so the deleted rows are always a prefix
    if record_id in corpus.store:
        corpus.store.delete_record(record_id)
"""


def _kill_at_random(proc: subprocess.Popen, ready: Path, rng: random.Random, longest: float) -> None:
    _wait_for(ready, proc)
    time.sleep(rng.uniform(0.0, longest))
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    # killed, or finished on its own between the poll and the signal (then the kill finds a zombie)
    assert proc.returncode in (-signal.SIGKILL, 0), "the writer failed on its own"
    ready.unlink()


@pytest.mark.slow
def test_rebuilds_killed_at_random_moments(root: Path, tmp_path: Path) -> None:
    """No hook: SIGKILL a writer alternating two corpora; the survivor is always one of them, whole and verified."""
    before = _snapshot(open_corpus(root))
    expected_other = np.random.default_rng(7).normal(size=(2000, 1024))
    expected_other = (expected_other / np.linalg.norm(expected_other, axis=1, keepdims=True)).astype(np.float32)
    originals = tmp_path / "records.json"
    originals.write_text(json.dumps([r.to_dict() for r in _records()]))
    ready = tmp_path / "ready"
    rng = random.Random(1234)
    for _ in range(3):
        _kill_at_random(_spawn(_CHURN_REBUILDS, root, str(originals), str(ready)), ready, rng, 1.5)
        reopened = open_corpus(root, verify=True)
        if reopened.n_rows == 18:
            assert _snapshot(reopened) == before
        else:
            assert reopened.n_rows == 2000 and reopened.record(1999).text == "b item 1999"
            np.testing.assert_allclose(reopened.vectors, expected_other, rtol=1e-6)


@pytest.mark.slow
def test_deletes_killed_at_random_moments(tmp_path: Path) -> None:
    """No hook: SIGKILL a process deleting record after record; what survives is a whole prefix of its deletes."""
    root = tmp_path / "churn"
    original = build(_records(40), embedder="hash:32", path=root)
    ready = tmp_path / "ready"
    rng = random.Random(99)
    for _ in range(3):
        _kill_at_random(_spawn(_CHURN_DELETES, root, str(ready)), ready, rng, 0.8)
        reopened = open_corpus(root, verify=True)
        deleted = np.flatnonzero(~reopened.live)
        assert deleted.tolist() == list(range(deleted.size))
        assert [r.to_dict() for r in reopened.store] == [original.record(row).to_dict() for row in range(deleted.size, 120)]
        np.testing.assert_array_equal(reopened.vectors, original.vectors)
        assert dict(reopened.store.ledger) == dict(original.store.ledger)
