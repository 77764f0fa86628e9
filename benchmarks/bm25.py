"""BM25 top-k: irflow's kernel against rank_bm25 and bm25s on one synthetic corpus.

A Zipfian corpus (fixed seed) and queries of 2-5 terms drawn from the same
distribution; every engine answers the same queries for the top ``k`` in one
run.  Prints build times, per-query latencies (median over queries of the
median over repeats, and the mean), speed ratios, and the agreement of
irflow's scores with rank_bm25's ``BM25Okapi`` (the reference irflow
reproduces).  bm25s is timed when installed (its default numpy backend, and
its numba backend when numba is installed); it scores with Lucene's idf, so
only its speed is compared.

    python benchmarks/bm25.py --docs 100000

Every engine here runs its queries on one thread, so ``--clock cpu`` (the
default) times them by the thread's CPU time, which other processes sharing
the machine do not inflate; ``--clock wall`` uses the wall clock.  The ratios,
measured in the same run on the same queries, are the figures to quote.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from typing import Callable, Sequence

import numpy as np

try:
    import irflow  # noqa: F401
except ImportError:  # run from a checkout without an install
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from irflow.bm25 import BM25Params, bm25_topk
from irflow.postings import Postings


def zipf_corpus(n_docs: int, vocab: int, exponent: float, mean_length: float,
                seed: int) -> tuple[list[list[str]], np.ndarray]:
    """``n_docs`` token lists over ``vocab`` terms with Zipfian frequencies, and the term law."""
    rng = np.random.default_rng(seed)
    law = 1.0 / np.arange(1, vocab + 1) ** exponent
    law /= law.sum()
    lengths = np.maximum(rng.poisson(mean_length, n_docs), 1)
    tokens = rng.choice(vocab, size=int(lengths.sum()), p=law)
    words = [f"t{i}" for i in range(vocab)]
    flat = [words[i] for i in tokens.tolist()]
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    return [flat[bounds[i]:bounds[i + 1]] for i in range(n_docs)], law


def zipf_queries(n_queries: int, law: np.ndarray, seed: int) -> list[list[str]]:
    """Queries of 2-5 terms drawn from the corpus's own term law."""
    rng = np.random.default_rng(seed + 1)
    return [[f"t{i}" for i in rng.choice(law.size, size=int(rng.integers(2, 6)), p=law)]
            for _ in range(n_queries)]


#: The clock timings read (``--clock``): the thread's CPU time or the wall clock.
CLOCK: Callable[[], float] = time.thread_time


def per_query_ms(run: Callable[[Sequence[str]], object], queries: Sequence[Sequence[str]],
                 repeats: int) -> list[float]:
    """Median over ``repeats`` of each query's latency, in milliseconds."""
    out = []
    for query in queries:
        times = []
        for _ in range(repeats):
            start = CLOCK()
            run(query)
            times.append(CLOCK() - start)
        out.append(statistics.median(times) * 1e3)
    return out


def timed(label: str, make: Callable[[], object]) -> object:
    start = CLOCK()
    value = make()
    print(f"  {label:<28} {CLOCK() - start:8.2f} s")
    return value


def describe(label: str, ms: list[float]) -> None:
    print(f"  {label:<28} median {statistics.median(ms):9.3f} ms   mean {statistics.fmean(ms):9.3f} ms"
          f"   ({len(ms)} queries)")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=100_000, help="records in the corpus (default 100000)")
    parser.add_argument("--vocab", type=int, default=50_000, help="distinct terms (default 50000)")
    parser.add_argument("--zipf", type=float, default=1.05, help="Zipf exponent of term frequencies")
    parser.add_argument("--length", type=float, default=40.0, help="mean tokens per record")
    parser.add_argument("--queries", type=int, default=200, help="queries timed for irflow and bm25s")
    parser.add_argument("--rank-queries", type=int, default=None,
                        help="queries timed for rank_bm25 (default: fewer on large corpora)")
    parser.add_argument("--batch", type=int, default=64, help="queries per batch call")
    parser.add_argument("--repeats", type=int, default=5, help="repeats per query (median taken)")
    parser.add_argument("--k", type=int, default=10, help="top k")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                        help="time by the thread's CPU time (default; robust on a shared machine) or wall clock")
    args = parser.parse_args(argv)
    global CLOCK
    CLOCK = time.thread_time if args.clock == "cpu" else time.perf_counter
    rank_queries = args.rank_queries or max(5, min(args.queries, 2_000_000 // args.docs))

    print(f"corpus: {args.docs} records, {args.vocab} terms, zipf {args.zipf}, "
          f"mean length {args.length}, seed {args.seed}; top {args.k}; {args.clock} clock")
    docs, law = zipf_corpus(args.docs, args.vocab, args.zipf, args.length, args.seed)
    queries = zipf_queries(args.queries, law, args.seed)
    k = args.k

    print("build")
    postings: Postings = timed("irflow Postings.build", lambda: Postings.build(docs))
    timed("irflow head columns", postings.head_columns)
    from rank_bm25 import BM25Okapi
    rank = timed("rank_bm25 BM25Okapi", lambda: BM25Okapi(docs))
    engines: dict[str, Callable[[Sequence[str]], object]] = {}
    batches: dict[str, Callable[[Sequence[Sequence[str]]], object]] = {}
    if importlib.util.find_spec("bm25s") is not None:
        import bm25s
        numpy_index = bm25s.BM25()
        timed("bm25s index (numpy)", lambda: numpy_index.index(docs, show_progress=False))
        engines["bm25s numpy"] = lambda q: numpy_index.retrieve([q], k=k, show_progress=False)
        batches["bm25s numpy"] = lambda qs: numpy_index.retrieve(qs, k=k, show_progress=False)
        if importlib.util.find_spec("numba") is not None:
            numba_index = bm25s.BM25(backend="numba")
            timed("bm25s index (numba)", lambda: numba_index.index(docs, show_progress=False))
            numba_index.retrieve([queries[0]], k=k, show_progress=False)  # compile outside the timing
            engines["bm25s numba"] = lambda q: numba_index.retrieve([q], k=k, show_progress=False)
            batches["bm25s numba"] = lambda qs: numba_index.retrieve(qs, k=k, show_progress=False)
        else:
            print("  (numba not installed: bm25s numba backend skipped)")
    else:
        print("  (bm25s not installed: skipped; pip install bm25s)")

    params = BM25Params()
    bm25_topk(postings, queries[:8], None, k, params)  # warm the statistics cache

    print(f"\nscore agreement with rank_bm25 BM25Okapi (top {k} of {rank_queries} queries)")
    rank_ms, worst, same_rows = [], 0.0, 0
    for query in queries[:rank_queries]:
        start = CLOCK()
        reference = rank.get_scores(query)
        np.argpartition(-reference, k)[:k]  # what a rank_bm25 user pays for the top k
        rank_ms.append((CLOCK() - start) * 1e3)
        # the reference top k among the records holding a query token, ties by row
        ids = [postings.vocab[t] for t in set(query) if t in postings.vocab]
        holders = np.unique(np.concatenate([postings.postings(t)[0] for t in ids] or [np.empty(0, int)]))
        top_ref = holders[np.argsort(-reference[holders], kind="stable")[:k]]
        rows, scores = bm25_topk(postings, [query], None, k, params).per_query(0)
        worst = max(worst, float(np.max(np.abs(reference[rows] - scores), initial=0.0)),
                    float(np.max(np.abs(reference[top_ref] - scores), initial=0.0)))
        same_rows += bool(np.array_equal(rows, top_ref))
    print(f"  max |irflow - rank_bm25| on the top {k}: {worst:.2e}; "
          f"identical top-{k} rows: {same_rows}/{rank_queries}")

    print(f"\nsingle-query latency (top {k}; median of {args.repeats} repeats per query)")
    irflow_ms = per_query_ms(lambda q: bm25_topk(postings, [q], None, k, params), queries, args.repeats)
    describe("irflow bm25_topk", irflow_ms)
    describe("rank_bm25 get_scores+top", rank_ms)
    peer_ms = {name: per_query_ms(run, queries, args.repeats) for name, run in engines.items()}
    for name, ms in peer_ms.items():
        describe(name, ms)

    batch = max(1, min(args.batch, len(queries)))
    chunks = [queries[i:i + batch] for i in range(0, len(queries) - batch + 1, batch)] or [queries]
    print(f"\nbatch latency per query (batches of {len(chunks[0])}; median over {args.repeats} repeats)")

    def batch_ms(run: Callable[[Sequence[Sequence[str]]], object]) -> float:
        totals = []
        for _ in range(args.repeats):
            start = CLOCK()
            for chunk in chunks:
                run(chunk)
            totals.append(CLOCK() - start)
        return statistics.median(totals) * 1e3 / sum(len(c) for c in chunks)

    irflow_batch = batch_ms(lambda qs: bm25_topk(postings, qs, None, k, params))
    print(f"  {'irflow bm25_topk':<28} {irflow_batch:9.3f} ms")
    peer_batch = {name: batch_ms(run) for name, run in batches.items()}
    for name, value in peer_batch.items():
        print(f"  {name:<28} {value:9.3f} ms")

    print("\nspeed ratios (peer time / irflow time; > 1 means irflow is faster)")
    mine, mine_mean = statistics.median(irflow_ms), statistics.fmean(irflow_ms)
    # rank_bm25 ran on the first queries only: compare it with irflow on the same ones
    mine_rank = statistics.median(irflow_ms[:rank_queries])
    print(f"  rank_bm25    single: median {statistics.median(rank_ms) / mine_rank:8.1f}x"
          f"   mean {statistics.fmean(rank_ms) / statistics.fmean(irflow_ms[:rank_queries]):8.1f}x")
    for name, ms in peer_ms.items():
        print(f"  {name:<12} single: median {statistics.median(ms) / mine:8.1f}x"
              f"   mean {statistics.fmean(ms) / mine_mean:8.1f}x")
    for name, value in peer_batch.items():
        print(f"  {name:<12} batch:  {value / irflow_batch:8.1f}x")


if __name__ == "__main__":
    main()
