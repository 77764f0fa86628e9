"""Exact means reproducible: a query's scores and order do not depend on how it is run.

- Dense: the same bits alone or in any batch (duplicates, any order), on
  either plan (gathered rows, full matrix), under any mask, tile size, thread
  count and OpenBLAS kernel (one subprocess per kernel this CPU runs), and
  for rows split into shards.
- BM25: a corpus split into contiguous row ranges, each scored with the
  global statistics (``partial_stats`` -> ``combine_stats``), merges to the
  whole corpus's scores and order, bit for bit.
- Evaluation: a metric's value does not depend on the other metrics asked for.
- Ties: a kernel (a first ranking) orders equal scores by corpus row.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from irflow.kernels import dense, dense_exact
from irflow.kernels.bm25 import (BM25Params, BM25Stats, PartialStats, bm25_topk, combine_stats, mean_okapi_idf,
                         partial_stats)
from irflow.kernels.dense import dense_topk, exact_scores
from irflow.errors import IrflowError
from irflow.evaluation.evaluate import evaluate
from irflow.kernels.postings import Postings
from test_bm25 import PATHS, expected_many, kernel_paths

TESTS = Path(__file__).resolve().parent
#: ../shared/data beside the repository, or $IRFLOW_DATA (as in test_evaluate.py).
DATA = Path(os.environ.get("IRFLOW_DATA") or TESTS.parent / ".." / "shared" / "data")


# -- dense, in process ----------------------------------------------------------------------------


@contextlib.contextmanager
def dense_settings(plan: str, tile_rows: int, gather_bytes: int, chunk: int) -> Iterator[None]:
    """Force a plan and small tiles, so few rows already cross tile and chunk boundaries."""
    names = ("GATHER_FRACTION_SINGLE", "GATHER_FRACTION_SMALL_BATCH", "GATHER_FRACTION_BATCH",
             "TILE_SCORES", "TILE_MIN_ROWS", "GATHER_BYTES", "EXACT_CHUNK")
    modules = [dense] * 6 + [dense_exact]  # the exact step's chunks live beside its fold
    saved = [getattr(module, name) for module, name in zip(modules, names)]
    fraction = {"gather": [1.0] * 3, "after": [0.0] * 3, "default": saved[:3]}[plan]
    for module, name, value in zip(modules, names, [*fraction, tile_rows, tile_rows, gather_bytes, chunk]):
        setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in zip(modules, names, saved):
            setattr(module, name, value)


def answers(top: dense.TopK, batch: Sequence[int]) -> dict[int, tuple[list[int], bytes]]:
    """query -> (rows, score bits), checking that a query repeated in the batch answers the same."""
    out: dict[int, tuple[list[int], bytes]] = {}
    for i, q in enumerate(batch):
        rows, scores = top.per_query(i)
        got = (rows.tolist(), scores.tobytes())
        assert out.setdefault(q, got) == got
    return out


@st.composite
def dense_cases(draw: st.DrawFn) -> dict:
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(1, 300))
    d = draw(st.sampled_from([1, 3, 16, 33, 384]))
    if draw(st.booleans()):  # small integers: exact ties everywhere
        matrix = rng.integers(-2, 3, (n, d)).astype(np.float32)
    else:
        matrix = rng.standard_normal((n, d)).astype(np.float32)
        matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-6)
    duplicates = rng.integers(0, n, n // 4)
    matrix[rng.integers(0, n, duplicates.size)] = matrix[duplicates]
    n_queries = draw(st.integers(1, 12))
    queries = rng.standard_normal((n_queries, d)).astype(np.float32)
    queries[rng.integers(0, n_queries, n_queries // 3)] = queries[0]
    if draw(st.booleans()):
        queries[-1] = matrix[rng.integers(0, n)]
    keep = draw(st.sampled_from([None, 0.02, 0.3, 0.8, 1.0]))
    mask = None if keep is None else rng.random(n) < keep
    return {"matrix": matrix, "queries": queries, "mask": mask, "k": draw(st.integers(1, 40)), "rng": rng,
            "tiles": draw(st.sampled_from([1, 7, 64, 4096])), "gather": draw(st.sampled_from([1, 200, 10**7])),
            "chunk": draw(st.sampled_from([1, 5, 64]))}


@settings(max_examples=150, deadline=None)
@given(case=dense_cases())
def test_dense_scores_do_not_depend_on_batch_plan_or_tiles(case: dict) -> None:
    matrix, queries, mask, k, rng = case["matrix"], case["queries"], case["mask"], case["k"], case["rng"]
    alone = {q: answers(dense_topk(matrix, queries[q], mask, k), [q])[q] for q in range(len(queries))}
    for plan in ("gather", "after"):
        with dense_settings(plan, case["tiles"], case["gather"], case["chunk"]):
            batch = rng.integers(0, len(queries), rng.integers(1, 3 * len(queries) + 1))  # duplicates, any order
            got = answers(dense_topk(matrix, queries[batch], mask, k), batch.tolist())
        for q, answer in got.items():
            assert answer == alone[q], (plan, q)
    # the scores are the exact ones, and the order is (score desc, row asc)
    allowed = np.ones(len(matrix), bool) if mask is None else mask
    cosine = queries.astype(np.float64) @ matrix.astype(np.float64).T
    for q, (rows, bits) in alone.items():
        scores = np.frombuffer(bits)
        assert scores.tolist() == exact_scores(matrix, queries, np.full(len(rows), q), rows).tolist()
        np.testing.assert_allclose(scores, cosine[q, rows], rtol=0, atol=1e-12 * max(1.0, np.abs(cosine).max()))
        candidates = np.flatnonzero(allowed)
        full = exact_scores(matrix, queries, np.full(candidates.size, q), candidates)
        want = candidates[np.lexsort((candidates, -full))][:k]
        assert rows == want.tolist()


@settings(max_examples=60, deadline=None)
@given(case=dense_cases(), cuts=st.lists(st.integers(0, 300), max_size=4))
def test_dense_shards_merge_to_the_whole(case: dict, cuts: list[int]) -> None:
    matrix, queries, mask, k = case["matrix"], case["queries"], case["mask"], case["k"]
    n = len(matrix)
    whole = dense_topk(matrix, queries, mask, k)
    bounds = sorted({0, n, *[c % (n + 1) for c in cuts]})
    parts = []
    for lo, hi in zip(bounds, bounds[1:]):
        part = dense_topk(matrix[lo:hi], queries, None if mask is None else mask[lo:hi], k)
        parts.append((part.query_index, part.row + lo, part.score))
    q, row, score = (np.concatenate(c) for c in zip(*parts))
    order = np.lexsort((row, -score, q))  # the merge: score desc, global row asc
    q, row, score = q[order], row[order], score[order]
    for i in range(len(queries)):
        mine = np.flatnonzero(q == i)[:k]
        rows, scores = whole.per_query(i)
        assert row[mine].tolist() == rows.tolist()
        assert score[mine].tobytes() == scores.tobytes()


def test_dense_ties_go_by_row_across_the_cut() -> None:
    # four equal rows straddle k: the lowest rows win, alone or in a batch, on both plans
    matrix = np.array([[0, 1], [1, 0], [0, 1], [1, 0], [1, 0], [1, 0]], np.float32)
    for plan in ("gather", "after"):
        with dense_settings(plan, 1, 8, 1):
            assert dense_topk(matrix, [1, 0], None, 2).per_query(0)[0].tolist() == [1, 3]
            top = dense_topk(matrix, np.array([[0, 1], [1, 0], [1, 0]], np.float32), np.ones(6, bool), 3)
            assert [top.per_query(i)[0].tolist() for i in range(3)] == [[0, 2, 1], [1, 3, 4], [1, 3, 4]]


def test_dense_zero_and_bad_queries() -> None:
    matrix = np.eye(3, dtype=np.float32)
    rows, scores = dense_topk(matrix, np.zeros((2, 3), np.float32), np.array([False, True, True]), 5).per_query(1)
    assert rows.tolist() == [1, 2] and scores.tolist() == [0.0, 0.0]
    with pytest.raises(IrflowError, match="query vector 1 has NaN"):
        dense_topk(matrix, np.array([[1, 0, 0], [np.nan, 0, 0]], np.float32), None, 2)
    with pytest.raises(IrflowError, match="floating point"):
        dense_topk(np.eye(3, dtype=np.int64), np.ones(3), None, 2)


# -- dense, one subprocess per BLAS kernel ---------------------------------------------------------

#: OPENBLAS_CORETYPE values to try ("" = unset: the machine's own choice).  OpenBLAS maps names
#: it has no kernel for, or that this CPU cannot run, to another kernel (or the process dies of
#: an illegal instruction): the probe reports the kernel actually running, and each distinct
#: one is tested once.
CORETYPES = ("", "Prescott", "Nehalem", "Sandybridge", "Bulldozer", "Haswell", "Zen", "SkylakeX",
             "Cooperlake", "SapphireRapids")


def probe(command: str, coretype: str, threads: int | None = None) -> dict | None:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    if threads is not None:
        env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = str(threads)
    done = subprocess.run([sys.executable, str(TESTS / "dense_probe.py"), command], env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def kernels() -> dict[str, str]:
    """corename -> the OPENBLAS_CORETYPE value that selects it, for every kernel this CPU runs."""
    names = CORETYPES if platform.machine().lower() in ("x86_64", "amd64") else ("",)
    found: dict[str, str] = {}
    for name in names:
        reply = probe("corename", name)
        if reply is None:
            continue  # this CPU cannot run it
        if reply["corename"] is None:  # numpy without a readable OpenBLAS: one run, whatever it uses
            return {"unknown": ""}
        found.setdefault(reply["corename"], name)
    return found


def test_dense_scores_are_the_same_under_every_kernel_and_thread_count(kernels: dict[str, str]) -> None:
    runs = {}
    for corename, coretype in kernels.items():
        for threads in (1, 2):
            reply = probe("check", coretype, threads)
            assert reply is not None, f"the probe failed under OPENBLAS_CORETYPE={coretype!r}"
            if corename != "unknown":
                assert reply["corename"] == corename
            # within a process: every batch, plan and mask gives each query its answer alone
            assert reply["mismatches"] == 0, (corename, threads, reply)
            runs[(corename, threads)] = reply["digest"]
    # across processes: the same bits under every kernel and thread count
    assert len(set(runs.values())) == 1, runs
    if platform.machine().lower() in ("x86_64", "amd64") and "unknown" not in kernels:
        assert len(kernels) >= 2, f"only one OpenBLAS kernel ran: {kernels}"


# -- BM25: split corpora, global statistics -------------------------------------------------------


def global_stats(shards: Sequence[Postings], rows: Sequence[np.ndarray | None], tokens: Sequence[str],
                 params: BM25Params) -> BM25Stats:
    """The two-phase exchange a sharded run makes: counts and dfs, then vocabularies only when needed."""
    stats = combine_stats([partial_stats(p, r, tokens) for p, r in zip(shards, rows)])
    if stats.needs_vocabulary(params, tokens):
        stats = combine_stats([partial_stats(p, r, tokens, vocabulary=True) for p, r in zip(shards, rows)])
    return stats


def sharded_topk(docs: Sequence[Sequence[str]], bounds: Sequence[int], queries: Sequence[Sequence[str]],
                 mask: np.ndarray | None, corpus_mask: np.ndarray | None, k: int,
                 params: BM25Params) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Score each row range as its own index with the global statistics; merge by (score desc, row asc)."""
    ranges = list(zip(bounds, bounds[1:]))
    shards = [Postings.build(docs[lo:hi]) for lo, hi in ranges]
    masks = [None if mask is None else mask[lo:hi] for lo, hi in ranges]
    if params.stats == "candidates":
        stats_rows = masks
    else:
        stats_rows = [None if corpus_mask is None else corpus_mask[lo:hi] for lo, hi in ranges]
    tokens = sorted({t for query in queries for t in query})
    stats = global_stats(shards, stats_rows, tokens, params)
    parts = []
    for (lo, _), shard, shard_mask in zip(ranges, shards, masks):
        top = bm25_topk(shard, queries, shard_mask, k, params, stats=stats)
        parts.append((top.query_index, top.row + lo, top.score))
    q, row, score = (np.concatenate(c) for c in zip(*parts))
    order = np.lexsort((row, -score, q))
    return q[order], row[order], score[order]


@st.composite
def split_corpora(draw: st.DrawFn) -> dict:
    vocab = [f"w{i}" for i in range(draw(st.integers(1, 8)))]
    n = draw(st.integers(1, 40))
    docs = [draw(st.lists(st.sampled_from(vocab), max_size=8)) for _ in range(n)]
    cuts = draw(st.lists(st.integers(0, n), max_size=5))
    bounds = sorted({0, n, *cuts})
    bools = st.lists(st.booleans(), min_size=n, max_size=n).map(np.array)
    tokens = st.sampled_from(vocab + ["zz"])
    return {
        "docs": docs, "bounds": bounds, "mask": draw(st.none() | bools), "corpus_mask": draw(st.none() | bools),
        "queries": draw(st.lists(st.lists(tokens, max_size=6), min_size=1, max_size=4)),
        "params": BM25Params(variant=draw(st.sampled_from(["okapi", "bm25l", "bm25plus"])),
                             k1=draw(st.floats(0.1, 3.0)), b=draw(st.floats(0.0, 1.0)),
                             epsilon=draw(st.floats(-1.0, 1.0)), stats=draw(st.sampled_from(["candidates", "corpus"]))),
        "k": draw(st.integers(1, 15)), "path": draw(st.sampled_from(PATHS)),
    }


@settings(max_examples=300, deadline=None)
@given(case=split_corpora())
def test_bm25_shards_with_global_statistics_merge_to_the_whole(case: dict) -> None:
    docs, queries, mask, corpus_mask, k, params = (case[key] for key in
                                                    ("docs", "queries", "mask", "corpus_mask", "k", "params"))
    if corpus_mask is not None:  # the live rows: candidates are live, as a corpus passes them
        mask = corpus_mask if mask is None else mask & corpus_mask
    with kernel_paths(case["path"]):
        whole = bm25_topk(Postings.build(docs), queries, mask, k, params, corpus_mask=corpus_mask)
        q, row, score = sharded_topk(docs, case["bounds"], queries, mask, corpus_mask, k, params)
    for i in range(len(queries)):
        mine = np.flatnonzero(q == i)[:k]
        rows, scores = whole.per_query(i)
        assert row[mine].tolist() == rows.tolist(), i
        assert score[mine].tobytes() == scores.tobytes(), i  # bit for bit
    # and the whole corpus is still rank_bm25's
    reference = expected_many(docs, queries, mask, params, corpus_mask)
    for i, want in enumerate(reference):
        rows, scores = whole.per_query(i)
        assert {int(r): s for r, s in zip(rows, scores)} == pytest.approx({r: want[r] for r in rows.tolist()},
                                                                          abs=1e-9)


def test_bm25_statistics_api() -> None:
    p = Postings.build([["a", "b"], ["b", "b", "c"], ["c"]])
    part = partial_stats(p, np.array([True, True, False]), ["b", "c", "zz"], vocabulary=True)
    assert (part.n_docs, part.total_length, dict(part.df)) == (2, 5, {"b": 2, "c": 1, "zz": 0})
    assert dict(part.vocabulary) == {"a": 1, "b": 2, "c": 1}
    other = PartialStats(n_docs=1, total_length=1, df={"c": 1}, vocabulary={"c": 1})
    stats = combine_stats([part, other])
    assert (stats.n_docs, stats.total_length, dict(stats.df)) == (3, 6, {"b": 2, "c": 2, "zz": 0})
    assert stats.mean_okapi_idf == mean_okapi_idf(3, [1, 2, 2])
    # the same scores as the kernel's own statistics over all rows
    assert bm25_topk(p, [["b", "c"]], None, 3, stats=stats) == bm25_topk(p, [["b", "c"]], None, 3)
    # a token the statistics lack, and a needed mean they lack, are errors
    with pytest.raises(IrflowError, match="no document frequency for query token 'a'"):
        bm25_topk(p, [["a"]], None, 3, stats=stats)
    bare = combine_stats([partial_stats(p, None, ["b", "c"])])
    assert bare.mean_okapi_idf is None and bare.needs_vocabulary(BM25Params(), ["b"])
    with pytest.raises(IrflowError, match="lack.*vocabulary=True"):
        bm25_topk(p, [["b"]], None, 3, stats=bare)
    assert not bare.needs_vocabulary(BM25Params(variant="bm25plus"), ["b"])
    with pytest.raises(IrflowError, match="integer >= 0"):
        BM25Stats(n_docs=-1, total_length=0, df={})


def test_mean_okapi_idf_does_not_depend_on_term_order() -> None:
    rng = np.random.default_rng(3)
    df = rng.integers(1, 500, 20_000)
    values = {mean_okapi_idf(1000, df[rng.permutation(df.size)]) for _ in range(5)}
    assert len(values) == 1


@pytest.mark.data
def test_bm25_scifact_split_in_three_equals_one_machine() -> None:
    root = DATA / "scifact"
    if not (root / "corpus.jsonl").exists():
        pytest.skip("../shared/data/scifact is absent")
    from irflow.kernels.text import get_analyzer

    analyzer = get_analyzer("english")
    records = [json.loads(line) for line in open(root / "corpus.jsonl", encoding="utf-8") if line.strip()]
    docs = analyzer.tokenize_many([f"{r.get('title', '')} {r.get('text', '')}" for r in records])
    texts = [json.loads(line)["text"] for line in open(root / "queries.jsonl", encoding="utf-8") if line.strip()]
    queries = [q for q in analyzer.tokenize_many(texts[:300]) if q]
    n = len(docs)
    for params in (BM25Params(), BM25Params(variant="bm25plus")):
        whole = bm25_topk(Postings.build(docs), queries, None, 100, params)
        q, row, score = sharded_topk(docs, [0, n // 3, 2 * n // 3 + 7, n], queries, None, None, 100, params)
        for i in range(len(queries)):
            mine = np.flatnonzero(q == i)[:100]
            rows, scores = whole.per_query(i)
            assert row[mine].tolist() == rows.tolist() and score[mine].tobytes() == scores.tobytes(), i


# -- evaluation: a metric does not depend on the others asked for -------------------------------


def write_collection(root: Path, n_docs: int = 400, n_queries: int = 40, seed: int = 0) -> Path:
    """A random BEIR collection: Zipf-ish words, queries made of a judged document's words."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(300)]
    law = 1 / np.arange(1, 301)
    law /= law.sum()
    (root / "qrels").mkdir(parents=True)
    texts = [" ".join(rng.choice(words, rng.integers(5, 30), p=law)) for _ in range(n_docs)]
    with open(root / "corpus.jsonl", "w", encoding="utf-8") as out:
        for i, text in enumerate(texts):
            out.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    with open(root / "queries.jsonl", "w", encoding="utf-8") as out, \
            open(root / "qrels" / "test.tsv", "w", encoding="utf-8") as qrels:
        qrels.write("query-id\tcorpus-id\tscore\n")
        for j in range(n_queries):
            judged = rng.choice(n_docs, 3, replace=False)
            words_of = texts[judged[0]].split()
            out.write(json.dumps({"_id": f"q{j}", "text": " ".join(rng.choice(words_of, 3))}) + "\n")
            for doc in judged:
                qrels.write(f"q{j}\td{doc}\t{int(rng.integers(1, 3))}\n")
    return root


def metric_values(dataset: Path, recipe: str) -> list[dict[str, float]]:
    requests = ["ndcg@10", "ndcg@10,recall@100", "ndcg@10,map", "ndcg@10,recall@100,mrr@10,map,p@10"]
    return [evaluate(recipe, dataset, embedder="hash", metrics=m, use_cache=False)[recipe].means for m in requests]


def test_a_metric_does_not_depend_on_the_others_requested(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    dataset = write_collection(tmp_path / "random")
    for recipe in ("hybrid", "lexical", "dense"):
        values = metric_values(dataset, recipe)
        for metric in ("ndcg@10", "recall@100", "map"):
            seen = {v[metric] for v in values if metric in v}
            assert len(seen) == 1, (recipe, metric, values)


@pytest.mark.data
def test_cranfield_hybrid_ndcg_does_not_depend_on_the_others_requested(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    root = DATA / "cranfield"
    if not (root / "corpus.jsonl").exists():
        pytest.skip("../shared/data/cranfield is absent")
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    values = metric_values(root, "hybrid")
    assert len({v["ndcg@10"] for v in values}) == 1, values
