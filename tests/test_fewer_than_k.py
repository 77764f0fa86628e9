"""Never fewer than k hits without saying so.

- A per-artifact search over one channel whose ``fetch_k`` the caller did not
  set fetches deeper (``fetch_k`` doubled) until its candidates hold ``k``
  artifacts or every match: its hits are the exact per-artifact top ``k`` of
  the channel — the ``k`` best artifacts by their best surface — checked
  against a brute-force ranking of every candidate (``search_reference``'s
  channels at full depth), alone, in batches, and on a sharded corpus.
- Otherwise (a ``fetch_k`` the caller set, a fused ranking, a query
  formulated into several texts) a query that gets fewer than ``k`` hits
  while more match gets a note — ``Result.short``, the trace, one stderr
  line of ``irflow run`` — with the ``fetch_k`` that gives ``k`` when it can
  be computed (one channel): the smallest such depth, checked by running it.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from irflow.api.retrieve import search
from irflow.cli.app import main
from irflow.engine.recipe import load_recipe
from irflow.engine.shortfall import DEPTH, FUSED, SUBQUERIES, Shortfall
from irflow.engine.trace import Trace
from irflow.errors import TraceError
from irflow.shard import shard
from irflow.store.corpus import build
from irflow.store.records import Record
from search_reference import candidate_rows, dense_channel, lexical_channel, reference_search
from shard_corpus import assert_same_result

# texts that match "parser" strongly (the many surfaces of a few big artifacts) and weakly (the others)
STRONG = ["parser parser chunk", "parser chunk", "parser parser"]
WEAK = ["a parser among many other words here", "sql parser tool and more words", "graph tool", "json parser docs"]
QUERIES = ["parser", "parser chunk", "sql parser", "graph json", "zzz"]


def big_corpus() -> list[Record]:
    """3 artifacts of 30 identical strong chunks, then 6 of one weak description: 50 surfaces hold 2 artifacts."""
    out = [Record(f"big{a}", "readme_chunk", "parser parser chunk", surface_index=j) for a in range(3)
           for j in range(30)]
    out += [Record(f"small{a}", "description", f"a parser among many other words here {a}", surface_index=0)
            for a in range(6)]
    return out


@st.composite
def deep_corpora(draw):
    """1-3 big artifacts (15-45 strong surfaces each) and 1-6 small ones (1-3 surfaces), rows shuffled."""
    out = []
    for a in range(draw(st.integers(1, 3))):
        for j in range(draw(st.integers(15, 45))):
            out.append(Record(f"big{a}", "readme_chunk", draw(st.sampled_from(STRONG)), surface_index=j))
    for a in range(draw(st.integers(1, 6))):
        for j in range(draw(st.integers(1, 3))):
            out.append(Record(f"small{a}", draw(st.sampled_from(["name", "description"])),
                              draw(st.sampled_from(WEAK + STRONG[:1])), surface_index=j))
    return draw(st.permutations(out))


def brute_top_k(corpus, query: str, mode: str, k: int) -> tuple[list[tuple[int, float]], int]:
    """The exact per-artifact top k of one channel: every candidate ranked, each artifact at its best (first)
    surface; and how many artifacts match at all."""
    rows = candidate_rows(corpus, None, None)
    ranked = dense_channel(corpus, query, rows, len(rows)) if mode == "dense" else \
        lexical_channel(corpus, query, rows, len(rows), None)
    best: dict[str, tuple[int, float]] = {}
    for row, score in ranked:
        best.setdefault(corpus.record(row).artifact_id, (row, score))
    return list(best.values())[:k], len(best)


def ids(corpus, pairs) -> list[str]:
    return [corpus.record(row).id for row, _ in pairs]


# -- one channel, fetch_k not given: deeper until k artifacts -----------------------------------------


@pytest.mark.parametrize("mode", ["lexical", "dense"])
def test_a_single_channel_search_returns_k_hits_when_k_artifacts_match(mode):
    # the issue: 50 surfaces (max(k * 5, 50)) held 2 artifacts, so k = 5 gave 2 hits though 9 match
    corpus = build(big_corpus(), embedder="hash", name="big")
    for k in (3, 5, 8, 9, 12):
        hits = search(corpus, "parser", mode=mode, k=k)
        expected, matching = brute_top_k(corpus, "parser", mode, k)
        assert len(hits) == min(k, matching) == len(expected), (mode, k)
        assert [h.record_id for h in hits] == ids(corpus, expected)
        assert len({h.artifact_id for h in hits}) == len(hits)
        result = load_recipe(mode).run(corpus, "parser", k=k)
        assert result.hits == hits and result.short == ()


@settings(max_examples=40, deadline=None)
@given(deep_corpora(), st.data())
def test_one_channel_gives_the_exact_per_artifact_top_k(records, data):
    corpus = build(records, embedder="hash", name="deep")
    mode = data.draw(st.sampled_from(["lexical", "dense"]))
    k = data.draw(st.integers(1, 9))
    queries = data.draw(st.lists(st.sampled_from(QUERIES), min_size=1, max_size=3))
    batch = load_recipe("search").run(corpus, queries, mode=mode, k=k).hits
    traced = load_recipe(mode).run(corpus, queries, k=k, trace=True)
    assert traced.hits == batch and traced.short == ()
    for query, hits in zip(queries, batch):
        expected, _ = brute_top_k(corpus, query, mode, k)
        assert [h.record_id for h in hits] == ids(corpus, expected), (mode, k, query)
        assert [h.score for h in hits] == pytest.approx([s for _, s in expected], rel=1e-6, abs=1e-7)
        assert search(corpus, query, mode=mode, k=k) == hits  # alone as in a batch
        # the seed's own answer (50 surfaces) is a prefix: deepening only adds what it missed
        seed = search(corpus, query, mode=mode, k=k, fetch_k=max(5 * k, 50))
        assert hits[:len(seed)] == seed


@settings(max_examples=25, deadline=None)
@given(deep_corpora(), st.data())
def test_search_equals_the_reference_with_deepening(records, data):
    # rerank, weights and boost run over the deepened candidates, as they would with that fetch_k given
    corpus = build(records, embedder="hash", name="deep")
    query = data.draw(st.sampled_from(QUERIES))
    params = dict(mode=data.draw(st.sampled_from(["lexical", "dense"])), k=data.draw(st.integers(1, 9)),
                  per_artifact=data.draw(st.booleans()),
                  rerank=data.draw(st.sampled_from([None, lambda q, segments: [len(s["text"]) for s in segments]])),
                  rerank_text=data.draw(st.sampled_from(["surface", "artifact"])),
                  surface_weights=data.draw(st.sampled_from([None, {"name": 3.0}])),
                  dep_boost=data.draw(st.sampled_from([None, lambda hit: 0.5 if hit.surface_kind == "name" else 0.0])))
    got = search(corpus, query, **params)
    expected = reference_search(corpus, query, **params)
    assert [h.record_id for h in got] == [h.record_id for h in expected], params
    assert [h.score for h in got] == pytest.approx([h.score for h in expected], rel=1e-6, abs=1e-7)


def test_deepening_on_a_sharded_corpus_is_the_single_machine_answer(tmp_path):
    single = build(big_corpus(), embedder="hash", name="big")
    with shard(single, 3, tmp_path / "big.sharded") as sharded:
        for params in (dict(mode="lexical", k=5), dict(mode="dense", k=8), dict(mode="lexical", k=5, fetch_k=50),
                       dict(mode="hybrid", k=5)):
            a = load_recipe("search").run(single, ["parser", "zzz", "parser chunk"], trace=True, **params)
            b = load_recipe("search").run(sharded, ["parser", "zzz", "parser chunk"], trace=True, **params)
            assert_same_result(a, b)
            assert a.short == b.short


# -- otherwise: said, with the fetch_k that gives k ----------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(deep_corpora(), st.data())
def test_a_given_fetch_k_that_falls_short_is_said_with_the_smallest_fetch_k_that_gives_k(records, data):
    corpus = build(records, embedder="hash", name="deep")
    mode = data.draw(st.sampled_from(["lexical", "dense"]))
    k, fetch_k = data.draw(st.integers(1, 9)), data.draw(st.integers(1, 60))
    per_artifact = data.draw(st.booleans())
    query = data.draw(st.sampled_from(QUERIES))
    params = dict(mode=mode, k=k, fetch_k=fetch_k, per_artifact=per_artifact)
    result = load_recipe("search").run(corpus, query, **params)
    got = len(result.hits)
    _, artifacts = brute_top_k(corpus, query, mode, k)
    rows = candidate_rows(corpus, None, None)
    matching = artifacts if per_artifact else len(
        dense_channel(corpus, query, rows, len(rows)) if mode == "dense" else
        lexical_channel(corpus, query, rows, len(rows), None))
    assert bool(result.short) == (got < min(k, matching))  # said exactly when more would match
    if result.short:
        (note,) = result.short
        assert (note.query_index, note.got, note.k, note.fetch_k, note.reason) == (0, got, k, fetch_k, DEPTH)
        assert note.gives == min(k, matching) and note.needed > fetch_k
        assert len(search(corpus, query, **{**params, "fetch_k": note.needed})) == note.gives
        assert len(search(corpus, query, **{**params, "fetch_k": note.needed - 1})) < note.gives  # the smallest
        assert load_recipe("search").run(corpus, query, trace=True, **params).short == result.short


def test_the_note_says_what_came_back_and_the_fetch_k_that_gives_k():
    corpus = build(big_corpus(), embedder="hash", name="big")
    result = load_recipe("lexical").run(corpus, ["zzz", "parser", "small"], k=5, fetch_k=50, trace=True)
    assert [len(hits) for hits in result.hits] == [0, 2, 0]  # nothing matches zzz, nor "small": no note
    (note,) = result.short
    assert note == Shortfall(1, "parser", got=2, k=5, per_artifact=True, fetch_k=50, needed=92, gives=5,
                             reason=DEPTH)
    assert note.message() == ("query 1 'parser': 2 hits, fewer than k=5: the 50 candidates fetched (fetch_k=50) "
                              "hold 2 artifacts; fetch_k=92 gives 5")
    assert len(load_recipe("lexical").run(corpus, "parser", k=5, fetch_k=92).hits) == 5
    assert result.trace.short == result.short
    everything = load_recipe("lexical").run(corpus, "parser", k=20, fetch_k=50).short[0]
    assert (everything.needed, everything.gives) == (96, 9)
    assert everything.message().endswith("only 9 artifacts match: fetch_k=96 gives them all")
    records = load_recipe("lexical").run(corpus, "parser", k=5, fetch_k=3, per_artifact=False).short[0]
    assert (records.got, records.needed, records.gives) == (3, 5, 5) and "hold 3 records" in records.message()


def test_a_fused_ranking_that_falls_short_says_raise_fetch_k():
    corpus = build(big_corpus(), embedder="hash", name="big")
    for result in (load_recipe("hybrid").run(corpus, "parser", k=5),
                   load_recipe("search").run(corpus, "parser", k=5, mode="hybrid", trace=True),
                   load_recipe("hybrid-rerank").run(corpus, "parser", k=5)):
        assert len(result.hits) < 5
        (note,) = result.short
        assert (note.reason, note.needed, note.fetch_k) == (FUSED, None, 50)
        assert note.message().endswith("cannot be computed (its scores depend on fetch_k); raise fetch_k")
    assert load_recipe("hybrid").run(corpus, "parser", k=5, fetch_k=400).short == ()


def test_a_query_formulated_into_several_texts_says_so():
    corpus = build(big_corpus(), embedder="hash", name="big")
    result = load_recipe("search").run(corpus, "parser", k=5, mode="lexical", formulate=lambda q: [q, "chunk"])
    (note,) = result.short
    assert note.reason == SUBQUERIES and note.needed is None and "formulated into several texts" in note.message()


def test_the_trace_file_keeps_the_notes_and_refuses_bad_ones(tmp_path):
    corpus = build(big_corpus(), embedder="hash", name="big")
    result = load_recipe("search").run(corpus, ["parser", "zzz"], mode="lexical", k=5, fetch_k=50, trace=True)
    path = result.trace.dump(tmp_path / "t.jsonl")
    loaded = Trace.load(path)
    assert loaded.short == result.short and len(loaded.short) == 1
    assert "note: query 0 'parser': 2 hits, fewer than k=5" in loaded.table(query=0)
    assert "note:" not in loaded.table(query=1)
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    for bad in ([{"query_index": 5, "query": "x", "got": 1, "k": 2, "per_artifact": True}],
                [{"query_index": 0, "query": "x", "got": -1, "k": 2, "per_artifact": True}],
                [{"query_index": 0, "query": "x", "got": 1, "k": 2, "per_artifact": True, "reason": "bad"}],
                [{"query_index": 0, "query": "x", "got": 1, "k": 2, "per_artifact": True, "extra": 1}],
                "not a list", [3]):
        (tmp_path / "bad.jsonl").write_text("\n".join([json.dumps({**header, "short": bad}), *lines[1:]]) + "\n",
                                           encoding="utf-8")
        with pytest.raises(TraceError, match="the header is malformed"):
            Trace.load(tmp_path / "bad.jsonl")
    del header["short"]  # a trace written before notes existed
    (tmp_path / "old.jsonl").write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    assert Trace.load(tmp_path / "old.jsonl").short == ()


def test_irflow_run_says_it_on_stderr_and_in_json(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in big_corpus()), encoding="utf-8")
    runner = CliRunner()

    def run(*args: object):
        result = runner.invoke(main, [str(a) for a in args])
        assert result.exit_code == 0, result.output
        return result

    run("index", path, "--out", tmp_path / "corpus", "--embedder", "hash")
    base = ("run", "search", "--corpus", tmp_path / "corpus", "-q", "parser", "--set", "mode=lexical")
    deep = run(*base, "--set", "k=5")
    assert "5 hits" in deep.stdout and "note:" not in deep.stderr  # fetched deeper: k hits, nothing to say
    short = run(*base, "--set", "k=5", "--set", "fetch_k=50", "--trace", tmp_path / "t.jsonl")
    notes = [line for line in short.stderr.splitlines() if line.startswith("note:")]
    assert notes == ["note: query 0 'parser': 2 hits, fewer than k=5: the 50 candidates fetched (fetch_k=50) "
                     "hold 2 artifacts; fetch_k=92 gives 5"]
    assert "note:" not in short.stdout and "2 hits" in short.stdout
    data = json.loads(run(*base, "--set", "k=5", "--set", "fetch_k=50", "--json").stdout)
    assert data["queries"][0]["short"]["needed"] == 92 and data["queries"][0]["short"]["got"] == 2
    assert json.loads(run(*base, "--set", "k=5", "--json").stdout)["queries"][0]["short"] is None
    shown = run("trace", "show", tmp_path / "t.jsonl")
    assert "note: query 0 'parser': 2 hits, fewer than k=5" in shown.stdout
    assert json.loads(run("trace", "show", tmp_path / "t.jsonl", "--json").stdout)["header"]["short"][0]["needed"] == 92
