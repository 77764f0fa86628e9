"""A sharded corpus updated in place answers, to the bit, as the single corpus after the same operations.

The single corpus and its shardings (2 and 3 shards, one with interleaved
artifacts) take the same operations in lockstep; after each one the
sharded corpora list the single corpus's records in its order and answer
every built-in recipe, ``search()`` mode, BM25 variant and statistics mode
and dense top-k as a fresh build of those records (``rebuild_oracle``),
reopened from disk too; refusals change nothing; a kill at each pause point
of a commit leaves the old or the new sharded state.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine_fakes  # noqa: F401  (maps irflow.stages / irflow.recipes in a bare checkout)
import irflow
import irflow.engine.registry as registry
import rebuild_oracle as oracle
from irflow.engine.recipe import load_recipe
from irflow.errors import CorpusError
from irflow.shard import shard
from irflow.shard.manifest import MANIFEST_FILE, read_manifest
from irflow.shard.updating import PAUSE_AFTER_SHARDS
from irflow.store import generations as gens
from shard_corpus import records
from surface_corpus import FakeReranker

REPO = Path(__file__).resolve().parents[1]


def _new(artifact: str, n: int, word: str = "parser") -> list[dict]:
    return [{"artifact_id": artifact, "surface_kind": "name" if i == 0 else "readme_chunk",
             "text": f"{artifact} {word} python data {i}"} for i in range(n)]


def _dicts(corpus) -> list[dict]:
    return [r.to_dict() for r in corpus]


def assert_sharded_answers(sharded, single, *, quick: bool = True) -> None:
    """The sharded corpus lists the single corpus's records in order and answers as a fresh build of them."""
    assert _dicts(sharded) == _dicts(single)
    assert len(sharded) == len(single)
    fresh = oracle.rebuild(single)
    for artifact in list(fresh.store.ledger)[:8]:
        assert oracle._sibling_records(sharded, artifact) == oracle._sibling_records(fresh, artifact)
    with registry.registered("fake_rerank", FakeReranker()):
        for name, rerank in oracle.RUNS:
            params: dict = {"k": 4, **({"rerank": "fake_rerank"} if rerank else {})}
            oracle._same_run(load_recipe(name), sharded, fresh, oracle.QUERIES[:3], **params)
    oracle._search(sharded, fresh, True, quick)
    oracle._kernels(sharded, fresh, True, quick)


@pytest.fixture
def trio(tmp_path):
    """(single corpus on disk, [its 2-shard and 3-shard (interleaved) shardings])."""
    single = irflow.build(records(16), embedder="hash", path=tmp_path / "single")
    interleaved = irflow.build(records(16, interleave=True), embedder="hash", path=tmp_path / "inter")
    two = shard(single, 2, tmp_path / "two")
    three = shard(interleaved, 3, tmp_path / "three")
    interleaved_single = irflow.open_corpus(tmp_path / "inter")
    return tmp_path, [(single, two), (interleaved_single, three)]


def _both(pairs, method: str, *args, **kwargs) -> None:
    for single, sharded in pairs:
        getattr(single, method)(*args, **kwargs)
        getattr(sharded, method)(*args, **kwargs)


def _ops(pairs):
    """The lockstep sequence: each step applied to every pair."""
    yield "add new artifacts and a surface of a held one", lambda p: _both(
        p, "add", _new("zz-new", 3) + [{"artifact_id": "pkg01", "surface_kind": "deps", "text": "pkg01 sql graph"}])
    yield "upsert a record of the first shard", lambda p: [
        (s.upsert([{**list(s)[0].to_dict(), "text": "pkg00 fast sql schema"}]),
         sh.upsert([{**list(sh)[0].to_dict(), "text": "pkg00 fast sql schema"}])) for s, sh in p]
    yield "delete records of several shards", lambda p: [
        (s.delete([r.id for r in list(s)[2:40:9]]), sh.delete([r.id for r in list(sh)[2:40:9]])) for s, sh in p]
    yield "put an artifact", lambda p: _both(p, "put_artifact", "pkg03", _new("pkg03", 2, "graph network"))
    yield "delete an artifact", lambda p: _both(p, "delete_artifact", "pkg07")
    yield "a batch", lambda p: [_batch(s) or _batch(sh) for s, sh in p]
    yield "compact", lambda p: _both(p, "compact")
    yield "after compaction, add again", lambda p: _both(p, "add", _new("zz-late", 2, "sql query"))


def _batch(corpus) -> None:
    with corpus.batch() as b:
        b.add(_new("zz-batch", 2, "async json"))
        b.delete_artifact("pkg02")
        b.upsert([{"artifact_id": "zz-new", "surface_kind": "name", "text": "zz-new renamed cache", "surface_index": 0}])


@pytest.mark.slow
def test_updates_in_lockstep_answer_as_the_single_corpus(trio):
    tmp_path, pairs = trio
    full = {"delete records of several shards", "a batch", "after compaction, add again"}
    for label, step in _ops(pairs):
        step(pairs)
        for single, sharded in pairs:
            if label in full:  # every recipe and search() mode (a few steps: the suite stays quick)
                assert_sharded_answers(sharded, single)
            else:  # the records in order, and the kernels' answers
                assert _dicts(sharded) == _dicts(single), label
                oracle._kernels(sharded, oracle.rebuild(single), True, True)
            reopened = irflow.open_corpus(sharded.path)
            assert _dicts(reopened) == _dicts(single), label
    # everything took the paths it should: new artifacts in the last shard, shards of several segments
    single, three = pairs[1]
    assert three.n_shards == 3 and [e.generation for e in three.manifest.shards]


def test_new_artifacts_go_to_the_last_shard_and_surfaces_to_their_artifacts_shard(trio):
    _, pairs = trio
    single, sharded = pairs[0]
    held = {s: set(sharded.artifact_ids_of(sharded.rows.rows[s]).tolist()) for s in range(sharded.n_shards)}
    first_shard_artifact = sorted(held[0])[0]
    _both([pairs[0]], "add", _new("brand-new", 2) + [{"artifact_id": first_shard_artifact, "surface_kind": "deps",
                                                      "text": "one more surface"}])
    rows = sharded.rows.rows
    now = {s: sharded.artifact_ids_of(rows[s]).tolist() for s in range(sharded.n_shards)}
    assert now[sharded.n_shards - 1][-2:] == ["brand-new", "brand-new"]
    assert now[0][-1] == first_shard_artifact
    # global rows: the new records follow the old ones in write order, whatever shard holds them
    n = single.n_rows
    assert sorted(np.concatenate(rows).tolist()) == list(range(sharded.n_rows))
    assert sharded.record_ids_of(np.arange(n - 3, n)).tolist() == single.record_ids_of(np.arange(n - 3, n)).tolist()
    assert_sharded_answers(sharded, single)


def test_refused_operations_change_nothing(trio):
    _, pairs = trio
    single, sharded = pairs[1]
    before = (sharded.path / MANIFEST_FILE).read_bytes()
    records_before = _dicts(sharded)
    existing = records_before[5]
    refusals = [
        lambda c: c.add([existing]),
        lambda c: c.delete(["no-such-id"]),
        lambda c: c.delete_artifact("no-such-artifact"),
        lambda c: c.put_artifact("pkg01", [{"artifact_id": "pkg02", "surface_kind": "name", "text": "x"}]),
        lambda c: c.add([{"artifact_id": "pkg01", "surface_kind": "name", "text": "x", "surface_index": 0}]),
    ]
    for refuse in refusals:
        messages = []
        for corpus in (single, sharded):
            with pytest.raises(CorpusError) as caught:
                refuse(corpus)
            messages.append(str(caught.value).replace("'single'", "X").replace("'inter'", "X"))
        assert messages[0] == messages[1]
        assert (sharded.path / MANIFEST_FILE).read_bytes() == before
        assert _dicts(sharded) == records_before
    with pytest.raises(CorpusError):
        with sharded.batch() as b:  # a batch refused in its second operation commits nothing of its first
            b.add(_new("zz-never", 1))
            b.delete(["no-such-id"])
    assert (sharded.path / MANIFEST_FILE).read_bytes() == before and _dicts(sharded) == records_before
    assert _dicts(irflow.open_corpus(sharded.path)) == records_before


def test_readers_and_other_processes_see_committed_states(trio):
    _, pairs = trio
    single, sharded = pairs[0]
    other = irflow.open_corpus(sharded.path)
    pinned = other.snapshot()
    before = _dicts(other)
    _both([pairs[0]], "add", _new("zz-seen", 1))
    assert _dicts(pinned) == before  # a pinned state never changes
    assert other.refresh() and not other.refresh()
    assert _dicts(other) == _dicts(single)
    other.add(_new("zz-other", 1))  # a second writer, through another object: no update lost
    single.add(_new("zz-other", 1))
    assert sharded.refresh()
    assert_sharded_answers(sharded, single)


@pytest.mark.slow
def test_merges_by_policy_keep_the_answers(trio):
    _, pairs = trio
    single, sharded = pairs[1]
    sharded.merge_policy = irflow.MergePolicy(merge_factor=2)
    single.merge_policy = irflow.MergePolicy(merge_factor=2)
    for i in range(5):
        last = list(single)[-1].id
        _both([pairs[1]], "add", _new(f"zz-{i}", 2, ["sql", "graph", "json"][i % 3]))
        _both([pairs[1]], "delete", [last])
    reports = sharded.add(_new("zz-final", 1))
    single.add(_new("zz-final", 1))
    assert reports.segments < 3 + 6  # merged along the way
    assert_sharded_answers(sharded, single)


def test_irflow_shard_of_an_updated_corpus(tmp_path):
    single = irflow.build(records(12), embedder="hash", path=tmp_path / "single")
    single.add(_new("zz-a", 2))
    single.delete([list(single)[1].id])
    single.upsert([{**list(single)[4].to_dict(), "text": "changed sql text"}])
    assert len(single.segments) > 1
    reopened = irflow.open_corpus(tmp_path / "single")
    sharded = shard(reopened, 3, tmp_path / "sharded")
    assert_sharded_answers(sharded, single)
    from click.testing import CliRunner
    from irflow.cli import main as cli
    result = CliRunner().invoke(cli, ["shard", str(tmp_path / "single"), "--shards", "2", "--out",
                                      str(tmp_path / "cli")])
    assert result.exit_code == 0, result.output
    assert_sharded_answers(irflow.open_corpus(tmp_path / "cli"), single)


# -- kills ---------------------------------------------------------------------------------------------

_WRITER = textwrap.dedent("""
    import sys
    import irflow
    corpus = irflow.open_corpus(sys.argv[1])
    with corpus.batch() as b:
        b.add([{"artifact_id": "zz-kill", "surface_kind": "name", "text": "killed python parser"},
               {"artifact_id": "pkg01", "surface_kind": "deps", "text": "pkg01 killed deps"}])
        b.delete_artifact("pkg02")
    corpus.compact()
""")


@pytest.mark.slow
@pytest.mark.parametrize("point", [PAUSE_AFTER_SHARDS, "shard:after-commit", "before-rename"])
def test_a_killed_update_leaves_the_old_or_the_new_state(tmp_path, point):
    single = irflow.build(records(10), embedder="hash", path=tmp_path / "single")
    sharded = shard(single, 2, tmp_path / "sharded")
    old = _dicts(sharded)
    new_single = irflow.build(records(10), embedder="hash", name="single")
    with new_single.batch() as b:
        b.add([{"artifact_id": "zz-kill", "surface_kind": "name", "text": "killed python parser"},
               {"artifact_id": "pkg01", "surface_kind": "deps", "text": "pkg01 killed deps"}])
        b.delete_artifact("pkg02")
    new = _dicts(new_single)
    marker = tmp_path / "paused"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env[gens.PAUSE_ENV] = f"{point}@{marker}"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path / "sharded")], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    reopened = irflow.open_corpus(tmp_path / "sharded")
    state = _dicts(reopened)
    assert state in (old, new)
    assert_sharded_answers(reopened, new_single if state == new else single)
    # the next update works and cleans up what the killed one left
    reopened.add(_new("zz-after", 1))
    (new_single if state == new else single).add(_new("zz-after", 1))
    assert_sharded_answers(reopened, new_single if state == new else single)
    for entry in read_manifest(tmp_path / "sharded").shards:
        generations = [p.name for p in (tmp_path / "sharded" / entry.dir).iterdir() if p.name.startswith("gen-")]
        assert generations == [entry.generation]


# -- random sequences ----------------------------------------------------------------------------------

_operation = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.just("upsert"), st.integers(0, 40), st.integers(0, 2)),
    st.tuples(st.just("delete"), st.integers(0, 40), st.integers(1, 3)),
    st.tuples(st.just("put_artifact"), st.integers(0, 9), st.integers(0, 2)),
    st.tuples(st.just("delete_artifact"), st.integers(0, 9), st.just(0)),
    st.tuples(st.just("compact"), st.just(0), st.just(0)),
)


def _apply(corpus, op, step: int) -> None:
    kind, a, b = op
    live = list(corpus)
    if kind == "add":
        corpus.add(_new(f"r{step}-{a}", b, ["sql", "graph", "parser"][a]))
    elif kind == "upsert" and live:
        record = live[a % len(live)].to_dict()
        corpus.upsert([{**record, "text": f"{record['text']} {['json', 'tool', 'fast'][b]}"}])
    elif kind == "delete" and live:
        corpus.delete([r.id for r in live[a % len(live)::7][:b]])
    elif kind == "put_artifact":
        corpus.put_artifact(f"pkg{a:02d}", _new(f"pkg{a:02d}", b, "network cache"))
    elif kind == "delete_artifact":
        corpus.delete_artifact(f"pkg{a:02d}", missing="ok")
    elif kind == "compact":
        corpus.compact()


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow])
@given(ops=st.lists(_operation, min_size=1, max_size=5), n=st.sampled_from([2, 3]))
def test_random_sequences_answer_as_the_single_corpus(tmp_path_factory, ops, n):
    import warnings
    tmp = tmp_path_factory.mktemp("random")
    single = irflow.build(records(10, interleave=n == 3), embedder="hash", path=tmp / "single")
    sharded = shard(single, n, tmp / "sharded")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", irflow.MissingRecordWarning)
        for step, op in enumerate(ops):
            _apply(single, op, step)
            _apply(sharded, op, step)
            assert _dicts(sharded) == _dicts(single)
    fresh = oracle.rebuild(single)
    oracle._kernels(sharded, fresh, True, True)
    oracle._search(irflow.open_corpus(tmp / "sharded"), fresh, True, True)


def test_a_merged_term_with_no_rows_left_has_df_zero_whatever_was_asked_before():
    """A merge keeps a term whose rows all went, with no postings: it starts where the next term does.

    The per-row-set df cache was keyed by where a term's postings start, so
    after the next term's df was asked, the empty term got it too (a shard
    merged by its policy counted 13 rows for a word none of its rows held).
    """
    from irflow.kernels.bm25 import BM25Params, bm25_scorer, partial_stats
    from irflow.kernels.postings import Postings
    from irflow.kernels.postings_merge import merge_postings

    source = Postings.build([["gone", "x"], ["b", "x"], ["b", "y"], ["x"]])
    vocab, arrays = merge_postings([source], [np.array([False, True, True, True])])
    merged = Postings(vocab=vocab, **{name: arrays[name] for name in (
        "term_offsets", "post_rows", "post_tfs", "doc_lengths", "row_offsets", "row_terms")})
    term = merged.vocab["gone"]
    assert merged.term_offsets[term] == merged.term_offsets[term + 1]  # empty, and where the next term starts
    rows = np.array([True, True, False])
    assert partial_stats(merged, rows, ["x"]).df["x"] == 1
    assert partial_stats(merged, rows, ["gone"]).df["gone"] == 0
    scorer = bm25_scorer(merged, rows, BM25Params(stats="candidates"), None)
    lo, hi = int(merged.term_offsets[term]), int(merged.term_offsets[term + 1])
    x = merged.vocab["x"]
    assert scorer._df(int(merged.term_offsets[x]), int(merged.term_offsets[x + 1]), -1) == 1
    assert scorer._df(lo, hi, -1) == 0
