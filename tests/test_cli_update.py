"""irflow add / delete / compact: a corpus changed from the command line, one commit each, refusals change nothing.

The expectations are independent of the code under test: a fresh ``irflow
index`` of the same lines, record ids computed from the input, and the
rebuild oracle (``rebuild_oracle``: a fresh build of the live records
answers every recipe and search mode to the bit).  A refused command leaves
the corpus directory as it was: ``CURRENT`` and every file, byte for byte.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import irflow
from irflow.cli import main
from irflow.store.corpus import open_corpus
from irflow.store.records import Record
from irflow.util import progress
from rebuild_oracle import assert_same_answers
from shard_corpus import records as make_records

EMBEDDER = "hash:64"


def invoke(*args: object, input: str | None = None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


def ok(*args: object, input: str | None = None):
    result = invoke(*args, input=input)
    assert result.exit_code == 0, result.output
    return result


def fails(code: int, *args: object, input: str | None = None):
    result = invoke(*args, input=input)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and result.stdout == "", result.output
    return result


def _write(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def _by_artifact(records: list[dict]) -> list[list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(r["artifact_id"], []).append(r)
    return list(out.values())


ARTIFACTS = _by_artifact(make_records(n_artifacts=60))
BASE = [r for group in ARTIFACTS[:30] for r in group]
MORE = [r for group in ARTIFACTS[30:34] for r in group]


def _snapshot(root: Path) -> tuple:
    """The corpus directory as a refusal must leave it: CURRENT, and every file with its bytes."""
    files = sorted((str(p.relative_to(root)), p.read_bytes() if p.is_file() else None) for p in root.rglob("*"))
    return (root / "CURRENT").read_bytes(), files


def _ids(corpus) -> list[str]:
    return [r.id for r in corpus]


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    path = tmp_path / "toys"
    ok("index", _write(tmp_path / "base.jsonl", BASE), "--out", path, "--embedder", EMBEDDER, "--no-progress")
    return path


# -- help ------------------------------------------------------------------------------------------


def test_the_commands_are_listed_and_their_help_says_what_they_do():
    listed = invoke("--help").output
    assert all(f"  {name}  " in listed or f"  {name} " in listed for name in ("add", "delete", "compact"))
    add = " ".join(invoke("add", "--help").output.split())
    assert "add [OPTIONS] CORPUS FILE" in add and "as one commit" in add
    for option in ("--upsert", "--artifacts", "--embedder", "--title-mode", "--skip-bad", "--progress", "--json"):
        assert option in add, option
    assert '{"artifact_id": "unbox", "surface_kind": "description", "text": "Unpack any archive.", ' in add
    assert "A record whose id is live is refused unless --upsert" in add
    delete = " ".join(invoke("delete", "--help").output.split())
    for option in ("--id ID", "--artifact ARTIFACT", "--ids-from FILE", "--missing [error|ok]", "--json"):
        assert option in delete, option
    assert "'-': standard input" in delete and "as one commit" in delete
    compact = " ".join(invoke("compact", "--help").output.split())
    assert "Merge every segment of CORPUS into one" in compact and "--json" in compact


# -- add: every format, one commit -----------------------------------------------------------------


def test_add_equals_an_index_of_both_files(root, tmp_path):
    more = _write(tmp_path / "more.jsonl", MORE)
    before = _snapshot(root)
    result = ok("add", root, more, "--no-progress")
    assert f"into corpus 'toys' in one commit: {len(MORE)} added, 0 replaced, 0 deleted" in result.stdout
    assert f"it holds {len(BASE) + len(MORE)} records in 2 segments" in result.stdout
    after = open_corpus(root)
    assert (root / "CURRENT").read_bytes() != before[0] and len(after.segments) == 2  # one commit: one segment more
    fresh_path = tmp_path / "fresh" / "toys"  # the same name: hits carry it
    ok("index", _write(tmp_path / "all.jsonl", BASE + MORE), "--out", fresh_path, "--embedder", EMBEDDER,
       "--no-progress")
    fresh = open_corpus(fresh_path)
    assert [r.to_dict() for r in after] == [r.to_dict() for r in fresh]
    assert_same_answers(after, fresh, quick=True)


@pytest.mark.parametrize("title_mode", ["prepend", "separate"])
def test_beir_documents_are_added_as_index_reads_them(tmp_path, title_mode):
    docs = [{"_id": f"d{i}", "title": f"Title {i}" if i % 3 else "", "text": f"python parser {i} graph sql",
             "metadata": {"owner": "ann" if i % 2 else "bob", "stars": i * 7, "lang": "py", "license": "mit",
                          "tags": ["db"]}} for i in range(12)]
    first, second = _write(tmp_path / "a.jsonl", docs[:8]), _write(tmp_path / "b.jsonl", docs[8:])
    ok("index", first, "--out", tmp_path / "c", "--embedder", EMBEDDER, "--title-mode", title_mode, "--no-progress")
    result = ok("add", tmp_path / "c", second, "--title-mode", title_mode, "--json")
    assert json.loads(result.stdout)["format"] == "beir"
    ok("index", _write(tmp_path / "all.jsonl", docs), "--out", tmp_path / "fresh" / "c", "--embedder", EMBEDDER,
       "--title-mode", title_mode, "--no-progress")  # the same name: hits carry it
    assert_same_answers(open_corpus(tmp_path / "c"), open_corpus(tmp_path / "fresh" / "c"), quick=True)
    again = fails(1, "add", tmp_path / "c", second, "--title-mode", title_mode)  # the ids are live now
    assert "already in corpus 'c'" in again.stderr and "--upsert" in again.stderr


def test_precomputed_vectors_are_added_and_a_wrong_dimension_changes_nothing(tmp_path):
    rng = np.random.default_rng(3)
    rows = [dict(r, vector=rng.normal(size=8).round(4).tolist()) for r in BASE[:20] + MORE]
    _write(tmp_path / "base.jsonl", rows[:20])
    ok("index", tmp_path / "base.jsonl", "--out", tmp_path / "c", "--embedder", "none", "--no-progress")
    assert open_corpus(tmp_path / "c").embedder_info.source == "precomputed"
    before = _snapshot(tmp_path / "c")
    wrong = _write(tmp_path / "wrong.jsonl", [dict(rows[20], vector=[1.0, 2.0])])
    result = fails(1, "add", tmp_path / "c", wrong)
    assert "holds vectors of 8 dimensions" in result.stderr and _snapshot(tmp_path / "c") == before
    bare = _write(tmp_path / "bare.jsonl", [{k: v for k, v in rows[20].items() if k != "vector"}])
    assert "carry none" in fails(1, "add", tmp_path / "c", bare).stderr and _snapshot(tmp_path / "c") == before
    ok("add", tmp_path / "c", _write(tmp_path / "more.jsonl", rows[20:]))
    corpus = open_corpus(tmp_path / "c")
    assert len(corpus) == len(rows)
    vectors = {Record(**r).id: np.asarray(r["vector"], np.float32) for r in rows}
    assert_same_answers(corpus, vectors=vectors, quick=True)


def test_a_lexical_corpus_takes_records_and_refuses_vectors(tmp_path):
    ok("index", _write(tmp_path / "base.jsonl", BASE), "--out", tmp_path / "c", "--embedder", "none",
       "--no-progress")
    before = _snapshot(tmp_path / "c")
    carrying = _write(tmp_path / "v.jsonl", [dict(MORE[0], vector=[1.0, 0.0])])
    assert "lexical-only" in fails(1, "add", tmp_path / "c", carrying).stderr and _snapshot(tmp_path / "c") == before
    ok("add", tmp_path / "c", _write(tmp_path / "more.jsonl", MORE))
    assert_same_answers(open_corpus(tmp_path / "c"), quick=True)


def test_upsert_replaces_live_ids_and_artifacts_replaces_whole_artifacts(root, tmp_path):
    base = open_corpus(root)
    ids = _ids(base)
    changed = [dict(BASE[0], text="pkg00 a new text about sql"), dict(BASE[1], text="pkg00 graph again")]
    upserts = _write(tmp_path / "up.jsonl", changed + MORE[:2])
    summary = json.loads(ok("add", root, upserts, "--upsert", "--json").stdout)
    assert (summary["added"], summary["replaced"], summary["deleted"], summary["mode"]) == (2, 2, 0, "upsert")
    corpus = open_corpus(root)
    new_ids = [Record(**r).id for r in changed + MORE[:2]]
    # the replaced records leave their rows, their new versions and the new records follow, in file order
    assert _ids(corpus) == [i for i in ids if i not in new_ids[:2]] + new_ids
    assert [r.text for r in corpus][-4:-2] == [c["text"] for c in changed]
    # --artifacts: pkg02 becomes exactly the file's two surfaces (numbered from 0), pkg31 is new
    whole = [{"artifact_id": "pkg02", "surface_kind": "name", "text": "pkg02 renamed"},
             {"artifact_id": "pkg02", "surface_kind": "description", "text": "pkg02 a json cache"}]
    summary = json.loads(ok("add", root, _write(tmp_path / "whole.jsonl", whole + ARTIFACTS[40]), "--artifacts",
                            "--json").stdout)
    old = [r for r in BASE if r["artifact_id"] == "pkg02"]
    assert summary["mode"] == "artifacts" and summary["added"] + summary["replaced"] == 2 + len(ARTIFACTS[40])
    assert summary["replaced"] + summary["deleted"] == len(old)
    corpus = open_corpus(root)
    assert [(r.surface_kind, r.surface_index, r.text) for r in irflow.records_for_artifact(corpus, "pkg02")] == \
        [("name", 0, "pkg02 renamed"), ("description", 1, "pkg02 a json cache")]
    assert_same_answers(corpus, quick=True)


def test_a_cli_sequence_answers_as_a_fresh_build(root, tmp_path):
    ok("add", root, _write(tmp_path / "a.jsonl", MORE), "--no-progress")
    ok("add", root, _write(tmp_path / "b.jsonl", [dict(MORE[0], text="pkg30 sql sql schema")]), "--upsert")
    ok("delete", root, "--id", Record(**BASE[3]).id, "--artifact", "pkg07")
    ok("add", root, _write(tmp_path / "c.jsonl", ARTIFACTS[7] + ARTIFACTS[45]), "--artifacts")  # pkg07 again
    _write(tmp_path / "gone.txt", [Record(**r).id for r in BASE[10:14]] + [""])
    ok("delete", root, "--ids-from", tmp_path / "gone.txt")
    live = open_corpus(root)
    expected = {Record(**r).id for r in BASE + MORE + ARTIFACTS[45]} - {Record(**r).id for r in BASE[10:14]}
    expected -= {Record(**BASE[3]).id} if BASE[3]["artifact_id"] != "pkg07" else set()
    assert set(_ids(live)) == expected and len(live.segments) > 1
    assert_same_answers(live)
    compact = ok("compact", root)
    assert f"1 segment, {len(expected)} rows ({len(expected)} live) after" in compact.stdout
    compacted = open_corpus(root)
    assert len(compacted.segments) == 1 and _ids(compacted) == _ids(live)
    assert_same_answers(compacted, quick=True)
    assert "compact already" in ok("compact", root).stdout


# -- bad lines, --skip-bad, progress -----------------------------------------------------------------


def test_bad_lines_are_reported_by_number_and_nothing_is_added(root, tmp_path):
    lines = [MORE[0], "not json", {"artifact_id": "x", "text": "no kind"}, MORE[1], {**MORE[2], "vector": ["a"]}]
    path = _write(tmp_path / "bad.jsonl", lines)
    before = _snapshot(root)
    result = fails(1, "add", root, path)
    assert "3 bad lines of 5" in result.stderr and "nothing was added" in result.stderr
    assert "pass --skip-bad to add the other lines" in result.stderr
    assert "line 2: not JSON" in result.stderr and "line 3: missing 'surface_kind'" in result.stderr
    assert "line 5: 'vector' must be" in result.stderr
    assert _snapshot(root) == before
    skipped = ok("add", root, path, "--skip-bad", "--json")
    assert json.loads(skipped.stdout)["skipped_lines"] == [2, 3, 5] and json.loads(skipped.stdout)["added"] == 2
    assert "skipped 3 bad lines of 5" in skipped.stderr and "lines 2-3, 5" in skipped.stderr
    empty = fails(1, "add", root, _write(tmp_path / "e.jsonl", ["", " "]))
    assert "no records to add" in empty.stderr


def test_a_corpus_file_given_as_file_is_said_to_be_one(root):
    before = _snapshot(root)
    for name in ("CURRENT", f"{(root / 'CURRENT').read_text().split()[0]}/manifest.json"):
        result = fails(1, "add", root, root / name)
        assert f"is a file of the irflow corpus {root}, not a records file" in result.stderr
    assert _snapshot(root) == before


def test_progress_covers_reading_and_embedding(root, tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "_is_terminal", lambda stream: True)
    result = ok("add", root, _write(tmp_path / "m.jsonl", MORE))
    assert "reading m.jsonl: 100%" in result.stderr and "embedding: 100%" in result.stderr
    quiet = ok("add", root, _write(tmp_path / "n.jsonl", ARTIFACTS[50]), "--no-progress")
    assert quiet.stderr == ""


# -- delete --------------------------------------------------------------------------------------


def test_delete_by_id_artifact_and_ids_file_is_one_commit(root, tmp_path):
    ids = [Record(**r).id for r in BASE]
    pkg05 = [Record(**r).id for r in BASE if r["artifact_id"] == "pkg05"]
    _write(tmp_path / "ids.txt", [ids[0], "", ids[1]])
    pointer = (root / "CURRENT").read_bytes()
    summary = json.loads(ok("delete", root, "--id", ids[2], "--artifact", "pkg05", "--ids-from", tmp_path / "ids.txt",
                            "--json").stdout)
    assert summary["deleted"] == 3 + len(pkg05) and summary["records"] == len(BASE) - 3 - len(pkg05)
    assert summary["generation"] == "gen-000002" and b"gen-000001" in pointer  # one commit
    assert set(_ids(open_corpus(root))) == set(ids) - {ids[0], ids[1], ids[2], *pkg05}
    piped = ok("delete", root, "--ids-from", "-", input=f"{ids[3]}\r\n{ids[4]}\n")
    assert "deleted 2 records of corpus 'toys' in one commit" in piped.stdout
    assert_same_answers(open_corpus(root), quick=True)


def test_unknown_ids_are_an_error_or_with_missing_ok_a_warning(root):
    ids = [Record(**r).id for r in BASE]
    before = _snapshot(root)
    result = fails(1, "delete", root, "--id", ids[0], "--id", "nope")
    assert "1 record id(s) not in corpus 'toys' (unknown, or deleted already): 'nope'" in result.stderr
    assert "--missing ok" in result.stderr and _snapshot(root) == before
    result = fails(1, "delete", root, "--artifact", "no-such-package")
    assert "'no-such-package'" in result.stderr and _snapshot(root) == before
    warned = ok("delete", root, "--id", ids[0], "--id", "nope", "--artifact", "gone", "--missing", "ok")
    assert "deleted 1 record of corpus 'toys'" in warned.stdout
    assert "Warning: 1 record id(s) not in corpus 'toys' (unknown, or deleted already): 'nope'" in warned.stderr
    assert "Warning: 1 artifact not in corpus 'toys'" in warned.stderr and "'gone'" in warned.stderr
    assert ids[0] not in _ids(open_corpus(root))
    as_json = ok("delete", root, "--id", "nope", "--missing", "ok", "--json")  # the warning stays off stdout
    assert json.loads(as_json.stdout)["deleted"] == 0 and "Warning:" in as_json.stderr


# -- refusals change nothing ---------------------------------------------------------------------


def test_refused_commands_leave_the_directory_as_it_was(root, tmp_path):
    live = _write(tmp_path / "live.jsonl", BASE[:3])
    before = _snapshot(root)
    result = fails(1, "add", root, live)
    assert "3 record(s) already in corpus 'toys'" in result.stderr and "--upsert replaces" in result.stderr
    clash = _write(tmp_path / "clash.jsonl", [dict(BASE[0], surface_kind="other", id="fresh-id")])
    assert "take a surface another live record" in fails(1, "add", root, clash).stderr
    own = _write(tmp_path / "own.jsonl", [dict(MORE[0], vector=[0.5] * 64)])
    assert "carry vectors of their own" in fails(1, "add", root, own).stderr
    both = fails(2, "add", root, live, "--upsert", "--artifacts")
    assert "give one of them" in both.stderr
    embedder = fails(2, "add", root, live, "--embedder", "hash:32")
    assert "embeds with its own embedder, hash:64" in embedder.stderr and "leave it out" in embedder.stderr
    assert "nothing to delete" in fails(2, "delete", root).stderr
    assert "no such file" in fails(1, "delete", root, "--ids-from", tmp_path / "none.txt").stderr.lower()
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9\n")
    assert "line 1: not UTF-8" in fails(1, "delete", root, "--ids-from", tmp_path / "latin1.txt").stderr
    assert _snapshot(root) == before


def test_a_foreign_or_missing_directory_is_refused(tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    records = _write(tmp_path / "r.jsonl", MORE)
    for args in (("add", foreign, records), ("delete", foreign, "--id", "x"), ("compact", foreign)):
        result = fails(1, *args)
        assert "not an irflow corpus" in result.stderr
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    assert "does not exist" in fails(1, "compact", tmp_path / "nowhere").stderr
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_a_read_only_corpus_is_refused_and_unchanged(root, tmp_path):
    before = _snapshot(root)
    os.chmod(root, 0o555)
    try:
        result = fails(1, "add", root, _write(tmp_path / "m.jsonl", MORE))
        assert "cannot write to the corpus at" in result.stderr and "nothing was changed" in result.stderr
        assert "cannot write" in fails(1, "delete", root, "--id", Record(**BASE[0]).id).stderr
    finally:
        os.chmod(root, 0o755)
    assert _snapshot(root)[0] == before[0] and len(open_corpus(root)) == len(BASE)


def test_a_damaged_segment_is_named(root, tmp_path):
    ok("add", root, _write(tmp_path / "m.jsonl", MORE))
    target = next((root / (root / "CURRENT").read_text().split()[0]).glob("seg-000002.records.text.bytes.npy"))
    data = bytearray(target.read_bytes())
    data[-1] ^= 1
    target.unlink()
    target.write_bytes(bytes(data))
    before = _snapshot(root)
    for args in (("add", root, _write(tmp_path / "n.jsonl", ARTIFACTS[50])), ("compact", root)):
        result = fails(1, *args)
        assert "seg-000002.records.text.bytes.npy does not match its checksum" in result.stderr
    assert _snapshot(root) == before


def test_a_custom_embedder_corpus_needs_embedder_again(tmp_path):
    from irflow.kernels.embedders import resolve_embedder

    hashing = resolve_embedder("hash:16")
    path = tmp_path / "custom"
    irflow.build(BASE, embedder=lambda texts: hashing.embed_documents(list(texts)), path=path)
    more = _write(tmp_path / "m.jsonl", MORE)
    before = _snapshot(path)
    result = fails(1, "add", path, more)
    assert "custom embedder" in result.stderr and "pass --embedder SPEC" in result.stderr
    assert _snapshot(path) == before
    summary = json.loads(ok("add", path, more, "--embedder", "hash:16", "--json").stdout)
    assert summary["embedded"] == len({r["text"] for r in MORE})
    assert_same_answers(open_corpus(path, embedder="hash:16"), quick=True)


def test_a_sharded_corpus_is_updated_as_the_corpus_it_was_sharded_from(root, tmp_path):
    ok("shard", root, "--shards", "2", "--out", tmp_path / "s", "--no-progress")
    more = _write(tmp_path / "m.jsonl", MORE)
    for target in (root, tmp_path / "s"):  # the same commands on both
        ok("add", target, more, "--no-progress")
        ok("delete", target, "--artifact", MORE[0]["artifact_id"])
    single = open_corpus(root)  # each restores the embedder its manifest names
    with irflow.open_corpus(tmp_path / "s") as sharded:
        assert [r.id for r in sharded] == [r.id for r in single]
        for mode in ("lexical", "dense", "hybrid"):
            for query in ("archive", "graph paths", "progress"):
                want = [(h.record_id, h.score) for h in irflow.search(single, query, k=10, mode=mode)]
                assert [(h.record_id, h.score) for h in irflow.search(sharded, query, k=10, mode=mode)] == want


# -- kill -9 (the quick version of tests/hostile_updates.py) -------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks the writers")
def test_writers_killed_at_their_pause_points_and_at_random_leave_before_or_after(tmp_path):
    import hostile_updates

    schedule = [("add", "pause", "after:NEXT.vectors.npy"), ("upsert", "pause", "before-rename"),
                ("artifacts", "none", None), ("delete", "pause", "before-current"),
                ("put_artifact", "pause", "before-current"), ("compact", "pause", "after:NEXT.records.text.bytes.npy"),
                ("py_upsert", "pause", "before-rename"), ("add", "random", None), ("delete", "random", None)]
    done = hostile_updates.attack(tmp_path, kills=0, seed=5, fork=True, schedule=schedule)
    assert done.failures == []
    paused = sum(c["pause killed"] for c in done.tally.values())
    assert paused == 6 and sum(c["left before"] for c in done.tally.values()) >= 5, done.table()


def test_an_updated_corpus_is_still_guarded_and_can_be_rebuilt(root, tmp_path):
    ok("add", root, _write(tmp_path / "m.jsonl", MORE))
    ok("delete", root, "--artifact", "pkg03")
    generation = root / (root / "CURRENT").read_text().split()[0]
    for inside in (root / "t.jsonl", generation / "t.jsonl"):
        result = fails(1, "run", "lexical", "--corpus", root, "-q", "parser", "--trace", inside)
        assert f"is inside the irflow corpus {root}" in result.stderr
    ok("index", tmp_path / "m.jsonl", "--out", root, "--embedder", EMBEDDER, "--no-progress")  # a rebuild over it
    assert len(open_corpus(root)) == len(MORE) and len(open_corpus(root).segments) == 1
    assert "it holds" in ok("add", root, _write(tmp_path / "n.jsonl", ARTIFACTS[50])).stdout


def test_an_empty_ids_file_and_a_huge_id_get_short_clear_errors(root, tmp_path):
    before = _snapshot(root)
    empty = fails(1, "delete", root, "--ids-from", _write(tmp_path / "e.txt", ["", "  "]))
    assert "holds no record id (one per line); nothing was deleted" in empty.stderr
    huge = fails(1, "delete", root, "--id", "x" * 5000)
    assert "(5002 characters)" in huge.stderr and len(huge.stderr) < 500  # cut, not echoed whole
    assert _snapshot(root) == before


def test_a_corpus_named_under_irflow_home(tmp_path, monkeypatch):
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    ok("index", _write(tmp_path / "base.jsonl", BASE), "--out", tmp_path / "home" / "corpora" / "named",
       "--embedder", EMBEDDER, "--no-progress")
    monkeypatch.chdir(tmp_path)
    summary = json.loads(ok("add", "named", _write(tmp_path / "m.jsonl", MORE), "--json").stdout)
    assert summary["added"] == len(MORE) and summary["name"] == "named"
    assert "deleted" in ok("delete", "named", "--artifact", "pkg01").stdout
    assert "compacted corpus 'named'" in ok("compact", "named").stdout
    assert "no corpus named 'nameless'" in fails(1, "compact", "nameless").stderr
