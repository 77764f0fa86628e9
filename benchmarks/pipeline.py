"""The engine's own cost: ``search(mode="hybrid")`` end to end against the sum of its kernels.

Corpus: synthetic artifacts with four surface kinds each (name,
description, readme_chunk, deps: 25k artifacts = 100k records by default),
texts drawn from a Zipfian vocabulary, and *precomputed* random
384-dimensional normalized vectors per record.  The query embedder is a
fixed lookup (query text -> a precomputed normalized vector near a random
record), so embedding costs a dict lookup and the figures measure
retrieval, not a model.  Queries: 2-4 words from the same vocabulary.

Compared, on the same corpus and queries, in one run:

* ``search()`` — ``irflow.search(corpus, q, mode="hybrid", fusion="rrf")`` (batch of 1
  only: it takes one query string);
* ``recipe trace=off`` / ``recipe trace=on`` — the same built-in recipe,
  ``load_recipe("search").run(corpus, queries, mode="hybrid", fusion="rrf",
  trace=...).hits``, for a batch of 1 (a string) and of 256 (a list);
* ``kernels`` — the same work by hand: ``corpus.candidate_mask()``,
  ``corpus.embed_queries``, ``corpus.dense_topk``,
  ``corpus.tokenize_queries``, ``corpus.bm25_topk`` (fetch 50 each, the
  recipe's ``max(5 k, 50)``), an RRF in numpy (rrf_k 60, equal scores by
  corpus row, the lexical-empty pass-through), the cut to 50, the best
  surface per artifact and the top 10, then the SearchHits.  Its hits are
  checked equal to ``search()``'s (artifact, record, score).
* ``kernels mask=None`` — the same with ``mask=None`` handed to the
  kernels instead of the all-rows mask the filter stage produces (what a
  kernel-level fast path for "no filter" would gain).

Engine overhead = (recipe trace=off - kernels) / recipe trace=off.  Every
system is timed item by item, interleaved, median of ``--repeats`` per
item, then the median over items; CPU time of the process is quoted (one
thread: numpy's BLAS is limited to 1 thread here, see ``--threads``) and
wall time printed beside it.  A per-kernel breakdown follows.  "Tracing off
unmeasurable": two identical trace=off series are timed side by side; their
difference is the noise floor, and the tracing code left on the trace=off
path (a few ``is not None`` tests per stage) is timed on its own.

    python benchmarks/pipeline.py            # 100k records (about 3 minutes)
    python benchmarks/pipeline.py --quick    # smoke test, under a minute
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import timeit
from typing import Any, Callable, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as H  # noqa: E402

H.ensure_irflow()

import irflow  # noqa: E402
from irflow.store.records import Record  # noqa: E402

KINDS = ("name", "description", "readme_chunk", "deps")
LENGTHS = {"name": 3, "description": 16, "readme_chunk": 60, "deps": 6}
FETCH_K, K, RRF_K = 50, 10, 60
# what the hand pipeline computes: hybrid with RRF (the recipe's default fusion is the blend since issue 14)
HYBRID = {"mode": "hybrid", "fusion": "rrf"}


# -- data ---------------------------------------------------------------------------------


def make_corpus(n_artifacts: int, dim: int, n_queries: int, seed: int) -> tuple[Any, list[str]]:
    """A corpus of ``4 * n_artifacts`` records with precomputed vectors, and the query texts."""
    rng = np.random.default_rng(seed)
    vocab = 30_000
    law = 1.0 / np.arange(1, vocab + 1) ** 1.05
    law /= law.sum()
    words = np.array([f"w{i}" for i in range(vocab)], dtype=object)
    n = n_artifacts * len(KINDS)
    vectors = rng.standard_normal((n, dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    records = []
    row = 0
    for a in range(n_artifacts):
        for s, kind in enumerate(KINDS):
            length = max(1, int(rng.poisson(LENGTHS[kind])))
            text = " ".join(words[rng.choice(vocab, size=length, p=law)])
            records.append(Record(f"pkg{a}", kind, text, {"owner": f"o{a % 97}", "stars": int(a % 1000)},
                                  surface_index=s, vector=vectors[row]))
            row += 1
    texts, table = [], {}
    while len(texts) < n_queries:
        text = " ".join(words[rng.choice(vocab, size=int(rng.integers(2, 5)), p=law)])
        if text in table:
            continue
        near = vectors[rng.integers(0, n)] + 0.5 * rng.standard_normal(dim, dtype=np.float32) / np.sqrt(dim)
        table[text] = (near / np.linalg.norm(near)).astype(np.float32)
        texts.append(text)
    corpus = irflow.build(records, embedder=H.LookupEmbedder(table, dim))
    return corpus, texts


# -- the kernels by hand ----------------------------------------------------------------------


def artifact_codes(corpus: Any) -> np.ndarray:
    """Artifact code per row (made once, like an index column)."""
    return np.unique(np.asarray(corpus.artifact_ids, dtype=object).astype(str), return_inverse=True)[1] \
        .reshape(-1).astype(np.int64)


def ranks(query_index: np.ndarray, n_queries: int) -> np.ndarray:
    """1-based rank of each entry within its query (entries grouped by query, best first)."""
    starts = np.searchsorted(query_index, np.arange(n_queries))
    return np.arange(query_index.size) - starts[query_index] + 1


def fuse_collapse(dense: Any, lexical: Any, n_queries: int, n_rows: int,
                  codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """RRF of the two channels, cut to FETCH_K, best surface per artifact, top K: (query, row, score)."""
    dq, lq = dense.query_index.astype(np.int64), lexical.query_index.astype(np.int64)
    q = np.concatenate([dq, lq])
    row = np.concatenate([dense.row, lexical.row])
    rank = np.concatenate([ranks(dq, n_queries), ranks(lq, n_queries)])
    src = np.concatenate([np.zeros(dq.size, np.int8), np.ones(lq.size, np.int8)])
    score = np.concatenate([dense.score, lexical.score])
    order = np.lexsort((rank, src, q))  # first-seen order per query: dense ranking, then lexical
    q, row, rank, src, score = q[order], row[order], rank[order], src[order], score[order]
    _, first, inverse = np.unique(q * n_rows + row, return_index=True, return_inverse=True)
    fused = np.bincount(inverse.reshape(-1), weights=1.0 / (RRF_K + rank))
    g_q = q[first]
    # a query whose lexical channel found nothing passes the dense ranking through, with its scores
    passthrough = np.bincount(lq, minlength=n_queries) == 0
    g_order = np.lexsort((first, -fused, g_q))  # equal scores keep first-seen order (README, "Ties")
    g_order = g_order[~passthrough[g_q[g_order]]]
    pt = np.flatnonzero(passthrough[q] & (src == 0))
    out_q = np.concatenate([g_q[g_order], q[pt]])
    out_row = np.concatenate([row[first][g_order], row[pt]])
    out_score = np.concatenate([fused[g_order], score[pt]])
    within = np.concatenate([np.arange(g_order.size), rank[pt]])
    final = np.lexsort((within, out_q))
    out_q, out_row, out_score = out_q[final], out_row[final], out_score[final]
    keep = ranks(out_q, n_queries) <= FETCH_K  # the weight stage's cut to fetch_k
    out_q, out_row, out_score = out_q[keep], out_row[keep], out_score[keep]
    # best surface per artifact: in a score-sorted list the first of each artifact wins
    _, winners = np.unique(out_q * (codes.max() + 1) + codes[out_row], return_index=True)
    winners.sort()
    out_q, out_row, out_score = out_q[winners], out_row[winners], out_score[winners]
    keep = ranks(out_q, n_queries) <= K
    return out_q[keep], out_row[keep], out_score[keep]


def kernels(corpus: Any, codes: np.ndarray, texts: Sequence[str], use_mask: bool = True,
            steps: dict[str, list[float]] | None = None) -> list[list[Any]]:
    """The hybrid search by hand; ``steps`` collects per-step CPU seconds when given."""
    clock = time.process_time
    t = [clock()]
    mask = corpus.candidate_mask(None, None) if use_mask else None
    t.append(clock())
    vectors = corpus.embed_queries(list(texts))
    t.append(clock())
    dense = corpus.dense_topk(vectors, mask, FETCH_K)
    t.append(clock())
    tokens = corpus.tokenize_queries(list(texts))
    t.append(clock())
    lexical = corpus.bm25_topk(tokens, mask, FETCH_K, None)
    t.append(clock())
    q, row, score = fuse_collapse(dense, lexical, len(texts), corpus.n_rows, codes)
    t.append(clock())
    hits: list[list[Any]] = [[] for _ in texts]
    hit = corpus.hit
    for i, r, s in zip(q.tolist(), row.tolist(), score.tolist()):
        hits[i].append(hit(r, s))
    t.append(clock())
    if steps is not None:
        for name, a, b in zip(("mask", "embed", "dense_topk", "tokenize", "bm25_topk", "rrf+collapse", "hits"),
                              t[:-1], t[1:]):
            steps.setdefault(name, []).append(b - a)
    return hits


def same_hits(a: Sequence[Any], b: Sequence[Any]) -> bool:
    key = lambda hits: [(h.artifact_id, h.record_id, round(h.score, 12)) for h in hits]  # noqa: E731
    return key(a) == key(b)


# -- tracing-off cost ------------------------------------------------------------------------------


def tracing_off_cost(n_stages: int) -> float:
    """Seconds the trace=off path spends on tracing per run: two ``is not None`` tests per stage."""
    recorder = None
    number = 200_000

    def body() -> None:
        for _ in range(n_stages):
            _ = 0.0 if recorder is None else 1.0
            if recorder is not None:
                pass
    return min(timeit.repeat(body, number=number, repeat=5)) / number


def per_run_work(corpus: Any, recipe: Any, text: str) -> list[tuple[str, float, float]]:
    """What a run used to redo and now reuses (issue 11): (piece, old µs, new µs) per hybrid run, in one process.

    Each piece is timed both ways side by side (best of 5 repeats): the old way is the
    uncached computation the engine still has (resolving the arguments, keying every value,
    walking the graph, BM25Params from the mapping, a checked Candidates rebuild), the new
    way what a run now does instead.
    """
    from irflow.engine.params import _resolve_params, resolve_params_keyed
    from irflow.kernels.bm25 import BM25Params
    from irflow.util.cachekey import cache_key

    pipeline = recipe.pipeline()
    values, _ = resolve_params_keyed(recipe, HYBRID)
    lexical = pipeline.instances(values, ["lexical"])["lexical"]
    found = recipe.run(corpus, text, **HYBRID, output="lexical").output("lexical")
    order = np.lexsort((found.row, -found.score, found.query_index))
    pieces = [
        ("resolve the arguments", lambda: _resolve_params(recipe, dict(HYBRID)),
         lambda: resolve_params_keyed(recipe, HYBRID)),
        ("key the stage objects", lambda: cache_key(dict(values)), lambda: None),
        ("stages the output needs", lambda: pipeline._walk_up(recipe.output, frozenset()),
         lambda: pipeline.needed(recipe.output, ())),
        ("BM25 settings (lexical stage)", lambda: BM25Params.from_mapping(lexical.bm25), lambda: lexical.bm25_params),
        ("one re-sort of 50 candidates", lambda: found.take(order), lambda: found.sorted_by_score()),
    ]
    out = []
    for name, old, new in pieces:
        number = 2000
        times = {"old": [], "new": []}
        for _ in range(5):
            for way, call in (("old", old), ("new", new)):
                times[way].append(timeit.timeit(call, number=number) / number * 1e6)
        out.append((name, min(times["old"]), min(times["new"])))
    return out


# -- main -----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifacts", type=int, default=25_000, help="artifacts (4 records each)")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=40, help="single queries timed")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--n-batches", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="BLAS threads (default 1: CPU time then equals latency; 0 = leave as is)")
    parser.add_argument("--quick", action="store_true", help="5k artifacts, few queries (smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.artifacts, args.queries, args.batch, args.n_batches, args.repeats = 2_500, 10, 32, 2, 3
    controller = None
    if args.threads:
        try:
            from threadpoolctl import threadpool_limits

            controller = threadpool_limits(limits=args.threads)  # noqa: F841 - kept for the run
        except ImportError:
            print("  (threadpoolctl not installed: BLAS threads left as they are)")

    print("pipeline benchmark: search(mode='hybrid', fusion='rrf') end to end vs the sum of its kernels")
    for line in H.machine_lines():
        print(line)
    t0 = time.perf_counter()
    n_queries = max(args.queries, args.batch * args.n_batches)
    corpus, texts = make_corpus(args.artifacts, args.dim, n_queries, args.seed)
    codes = artifact_codes(corpus)
    recipe = irflow.load_recipe("search")
    n_stages = len(recipe.stages)
    print(f"corpus: {corpus.n_rows} records ({args.artifacts} artifacts x {len(KINDS)} kinds), "
          f"{args.dim}-d precomputed vectors, lookup query embedder; built in {time.perf_counter() - t0:.1f} s; "
          f"recipe 'search' ({n_stages} stages), mode hybrid, fusion rrf, k {K}, fetch_k {FETCH_K}; "
          f"BLAS threads {args.threads or 'default'}")

    # correctness first: the hand pipeline must return search()'s hits
    check = texts[: min(len(texts), 64)]
    engine_hits = recipe.run(corpus, check, **HYBRID).hits
    hand_hits = kernels(corpus, codes, check)
    agree = sum(same_hits(a, b) for a, b in zip(engine_hits, hand_hits))
    agree_none = sum(same_hits(a, b) for a, b in zip(engine_hits, kernels(corpus, codes, check, use_mask=False)))
    single_ok = all(same_hits(irflow.search(corpus, t, **HYBRID), h) for t, h in zip(check[:8], hand_hits))
    print(f"hits equal to the engine's: kernels {agree}/{len(check)}, kernels mask=None {agree_none}/{len(check)}, "
          f"search() single {'yes' if single_ok else 'NO'}")

    results: dict[str, Any] = {"agree": agree, "n_check": len(check), "single_ok": single_ok}
    for batch in (1, args.batch):
        if batch == 1:
            items: list[Any] = texts[: args.queries]
        else:
            items = [texts[i * batch:(i + 1) * batch] for i in range(args.n_batches)]
        systems: dict[str, Callable[[Any], Any]] = {}
        if batch == 1:
            systems["search()"] = lambda t: irflow.search(corpus, t, **HYBRID)
        systems["recipe trace=off"] = lambda t: recipe.run(corpus, t, **HYBRID).hits
        systems["recipe trace=off (again)"] = lambda t: recipe.run(corpus, t, **HYBRID).hits
        systems["recipe trace=on"] = lambda t: recipe.run(corpus, t, **HYBRID, trace=True).hits
        systems["kernels"] = lambda t: kernels(corpus, codes, [t] if isinstance(t, str) else t)
        systems["kernels mask=None"] = lambda t: kernels(corpus, codes, [t] if isinstance(t, str) else t,
                                                         use_mask=False)
        timing = H.interleaved({name: ((lambda i, run=run: run(items[i])), len(items), args.repeats)  # noqa: B023
                                for name, run in systems.items()}, len(items))
        base = timing["recipe trace=off"].median_ms("cpu")
        kern = timing["kernels"].median_ms("cpu")
        rows = []
        for name in systems:
            cpu, wall = timing[name].median_ms("cpu") / batch, timing[name].median_ms("wall") / batch
            rows.append([name, cpu, timing[name].p90_ms("cpu") / batch, wall, timing[name].median_ms("cpu") / base])
        print(f"\nbatch of {batch}: time per query, ms (median and p90 over {len(items)} "
              f"{'queries' if batch == 1 else 'batches'}, {args.repeats} repeats each)")
        print(H.table(["system", "cpu ms/q", "cpu p90", "wall ms/q", "/ recipe off"], rows))
        overhead = (base - kern) / base
        # the engine's own cost, item by item: the recipe's time minus the kernels' on the same item
        engine = [(r - k) * 1e3 / batch for r, k in zip(timing["recipe trace=off"].values("cpu"),
                                                       timing["kernels"].values("cpu"))]
        engine_median, engine_p90 = statistics.median(engine), float(np.percentile(engine, 90))
        on = timing["recipe trace=on"].median_ms("cpu")
        again = timing["recipe trace=off (again)"].median_ms("cpu")
        print(f"  engine overhead (recipe trace=off - kernels) / recipe trace=off: {overhead:.1%} "
              f"({(base - kern) / batch:.3f} ms per query); per item, recipe - kernels: median "
              f"{engine_median:.3f} ms/q, p90 {engine_p90:.3f} ms/q")
        print(f"  tracing on costs {(on - base) / base:+.1%}; two identical trace=off series differ by "
              f"{(again - base) / base:+.1%} (the noise floor)")
        mask_gain = (kern - timing["kernels mask=None"].median_ms("cpu")) / kern
        print(f"  all-rows mask vs mask=None in the kernels: the mask costs {mask_gain:+.1%} of the kernels")

        steps: dict[str, list[float]] = {}
        for _ in range(args.repeats):
            for item in items:
                kernels(corpus, codes, [item] if isinstance(item, str) else item, steps=steps)
        total = sum(statistics.median(v) for v in steps.values())
        print("  kernel breakdown (CPU ms per query, median): " + ", ".join(
            f"{name} {statistics.median(v) * 1e3 / batch:.3f}" for name, v in steps.items())
            + f"; sum {total * 1e3 / batch:.3f}")
        results[batch] = {"overhead": overhead, "trace_on": (on - base) / base, "noise": (again - base) / base,
                          "engine_ms": engine_median, "engine_p90_ms": engine_p90,
                          "mask_cost": mask_gain,
                          "ms": {name: timing[name].median_ms("cpu") / batch for name in systems}}

    cost = tracing_off_cost(n_stages)
    per_query = results[1]["ms"]["recipe trace=off"] / 1e3
    print(f"\ntracing-off code path: {cost * 1e9:.0f} ns per run ({n_stages} stages) = "
          f"{cost / per_query:.4%} of a single hybrid search")
    results["tracing_off_ns"] = cost * 1e9
    work = per_run_work(corpus, recipe, texts[0])
    print("\nper-run work now reused (issue 11), µs, best of 5, old way and new way timed side by side:")
    print(H.table(["piece", "old µs", "new µs"], [[n, o, w] for n, o, w in work]))
    results["per_run_work"] = work
    print("\ntargets (issue 5):")
    for batch in (1, args.batch):
        o = results[batch]["overhead"]
        print(f"  engine overhead < 10% of a hybrid search, batch {batch}: {o:.1%} "
              f"{'met' if o < 0.10 else 'NOT met'}")
    print(f"  tracing off unmeasurable: its code path costs {cost / per_query:.4%} of a search, "
          f"below the {abs(results[1]['noise']):.1%} noise floor of identical series")
    return results


if __name__ == "__main__":
    main()
