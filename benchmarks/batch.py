"""Batch throughput: ``Recipe.run`` over 1,000 queries against bm25s-numba's batched ``retrieve``, and hybrid batches.

Lexical: issue 12's Zipf corpus (``zipf_corpus.py``: 50k words, 20-200
tokens a document) at 100k and 1M records, its two query mixes (``corpus``:
tokens at corpus frequency; ``content``: ranks >= 100), 500 queries of each
= 1,000 queries. Systems, top 10, the same tokens:

- ``irflow recipe 1000``: ``load_recipe("lexical").run(corpus, texts, k=10)``
  with all 1,000 query texts in one call (the engine: tokenizing, the filter
  stage, the kernel, collapse per artifact, the result); this corpus holds
  one record per artifact, so the recipe fetches ``k`` rows per query (its
  ``lean`` rule: the first ``k`` rows already are ``k`` artifacts);
- ``irflow recipe 100``: the same in batches of 100;
- ``irflow recipe 1000 lean=False``: the same at the seed's depth,
  ``max(5 k, 50)`` = 50 rows per query, what a corpus of several surfaces per
  artifact fetches (the answers are checked equal);
- ``irflow kernel 1000``: ``corpus.bm25_topk(tokens, None, 10)``, one call
  (and ``k50``: at the seed's depth, to split that recipe's time);
- ``bm25s numba``: ``retrieve(tokens, k=10, n_threads=T)`` (bm25s 0.3's
  numba backend: a prange over queries, one thread when T = 1).

Each at ``--threads`` 1 and 2: irflow's batch under
``irflow.util.threads.limit_threads(T)`` (the command line's ``--threads``),
bm25s with ``n_threads=T``.  One item = the 1,000 queries; per system the
median and p90 over ``--repeats`` interleaved passes, wall time quoted (with
2 threads CPU time is the work of both), CPU time beside it.

Hybrid (``--hybrid``): ``pipeline.py``'s corpus (25k artifacts x 4 surface
kinds = 100k records, 384-d precomputed vectors, a lookup query embedder),
``load_recipe("search").run(corpus, texts, mode="hybrid", fusion="rrf")``
on batches of 256 against the kernels by hand (``pipeline.kernels``: mask,
embed, dense_topk, tokenize, bm25_topk, RRF, collapse, hits), hits checked
equal.

The 1M corpus takes a while to build (~10 min): it is cached under
``--cache`` (default ``/tmp/irflow-bench-batch``, never in the repository),
irflow's corpus and bm25s's index both, keyed by size and seed.

    python benchmarks/batch.py                       # 100k and 1M, threads 1 and 2, hybrid (~30 min)
    python benchmarks/batch.py --sizes 100000 --no-hybrid
    python benchmarks/batch.py --quick               # smoke test, under a minute
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as H  # noqa: E402
import zipf_corpus as Z  # noqa: E402

H.ensure_irflow()

import irflow  # noqa: E402
from irflow.kernels.bm25 import kernel_name  # noqa: E402
from irflow.util.threads import limit_threads  # noqa: E402

K = 10
CACHE = os.path.join(os.environ.get("TMPDIR", "/tmp"), "irflow-bench-batch")


# -- data (cached) ----------------------------------------------------------------------------


def queries(n_queries: int, seed: int) -> tuple[list[str], list[list[str]]]:
    """``n_queries`` queries, half of each mix (corpus, content), interleaved: texts and tokens."""
    half = [Z.zipf_queries((n_queries + 1) // 2, mix, seed=seed) for mix in Z.MIXES]
    tokens = [q for pair in zip(*half) for q in pair][:n_queries]
    return [" ".join(q) for q in tokens], tokens


def _records(n_docs: int, seed: int) -> Any:
    for i, text in enumerate(Z.zipf_texts(n_docs, seed=seed)):
        yield irflow.Record(f"d{i}", "text", text)


def irflow_corpus(n_docs: int, seed: int, cache: str | None) -> tuple[Any, str]:
    """The Zipf corpus as an irflow corpus: opened from the cache, else built (and written there)."""
    if cache is None:
        return irflow.build(_records(n_docs, seed), embedder=None, analyzer="plain"), "built in memory"
    path = os.path.join(cache, f"irflow-{n_docs}-{seed}")
    if not os.path.exists(os.path.join(path, ".built")):
        shutil.rmtree(path, ignore_errors=True)
        t0 = time.perf_counter()
        irflow.build(_records(n_docs, seed), embedder=None, analyzer="plain", path=os.path.join(path, "corpus"))
        with open(os.path.join(path, ".built"), "w") as f:
            f.write(f"{time.perf_counter() - t0:.1f}\n")
    t0 = time.perf_counter()
    corpus = irflow.open_corpus(os.path.join(path, "corpus"))
    return corpus, f"opened from {path} in {time.perf_counter() - t0:.1f} s"


def bm25s_index(n_docs: int, seed: int, cache: str | None) -> tuple[Any, str]:
    """bm25s's index of the same corpus (token ids straight from the Zipf ranks), numba backend."""
    import bm25s
    from bm25s.tokenization import Tokenized

    path = None if cache is None else os.path.join(cache, f"bm25s-{n_docs}-{seed}")
    if path is not None and os.path.exists(os.path.join(path, ".built")):
        t0 = time.perf_counter()
        index = bm25s.BM25.load(path, mmap=False, show_progress=False)
        index.backend = "numba"
        index.compile(activate_numba=True, warmup=False)
        return index, f"loaded from {path} in {time.perf_counter() - t0:.1f} s"
    ids: list[list[int]] = []
    for lengths, ranks in Z.zipf_ranks(n_docs, seed=seed):
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        flat = ranks.tolist()
        ids.extend(flat[bounds[i]:bounds[i + 1]] for i in range(lengths.size))
    vocab = {Z.word(r): r for r in range(Z.VOCAB)}
    index = bm25s.BM25(backend="numba")
    t0 = time.perf_counter()
    index.index(Tokenized(ids=ids, vocab=vocab), show_progress=False)
    took = time.perf_counter() - t0
    del ids
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
        index.save(path)
        with open(os.path.join(path, ".built"), "w") as f:
            f.write(f"{took:.1f}\n")
    return index, f"indexed in {took:.1f} s"


# -- timing ------------------------------------------------------------------------------------


def timed(systems: Mapping[str, Callable[[], Any]], repeats: int) -> dict[str, dict[str, list[float]]]:
    """Every system ``repeats`` times, interleaved pass by pass in a rotating order: wall and CPU seconds."""
    names = list(systems)
    out: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in names}
    for r in range(repeats):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            wall, cpu, _ = H.measure(systems[name])
            out[name]["wall"].append(wall)
            out[name]["cpu"].append(cpu)
    return out


def stats(values: Sequence[float]) -> tuple[float, float]:
    """(median, p90) in seconds."""
    return statistics.median(values), float(np.percentile(values, 90))


def answers(result: Any) -> list[tuple[Any, ...]]:
    """A lexical recipe run's answers, as compared between ways of running it: (query, row, score bits)."""
    out = result.output()
    return list(zip(out.origin_index.tolist(), out.row.tolist(), out.score.view(np.int64).tolist()))


def lexical_size(n_docs: int, args: argparse.Namespace) -> dict[str, Any]:
    """Recipe.run over the queries, in one call and in batches, vs bm25s-numba's retrieve, per thread count."""
    print(f"\n=== Zipf corpus, {n_docs:,} records ===")
    t0 = time.perf_counter()
    corpus, how = irflow_corpus(n_docs, args.seed, args.cache)
    print(f"irflow corpus: {how} ({time.perf_counter() - t0:.1f} s); BM25 kernel here: {kernel_name(n_docs)}")
    have_bm25s = H.have("bm25s") and H.have("numba") and not args.no_bm25s
    index = None
    if have_bm25s:
        t0 = time.perf_counter()
        index, how = bm25s_index(n_docs, args.seed, args.cache)
        print(f"bm25s index (numba backend): {how} ({time.perf_counter() - t0:.1f} s)")
    else:
        print("bm25s with numba not installed (or --no-bm25s): irflow alone")
    texts, tokens = queries(args.queries, args.seed)
    recipe = irflow.load_recipe("lexical")
    n, step = len(texts), args.batch

    def run_recipe(threads: int, size: int, **given: Any) -> Callable[[], Any]:
        def run() -> Any:
            with limit_threads(threads):
                return [recipe.run(corpus, texts[i:i + size], k=K, **given) for i in range(0, n, size)]
        return run

    def run_kernel(threads: int, depth: int = K) -> Callable[[], Any]:
        def run() -> Any:
            with limit_threads(threads):
                return corpus.bm25_topk(corpus.tokenize_queries(texts), None, depth)
        return run

    def run_bm25s(threads: int) -> Callable[[], Any]:
        return lambda: index.retrieve(tokens, k=K, show_progress=False, n_threads=threads)

    # warm: statistics, the compiled code (irflow's and bm25s's serial and parallel), lazy columns
    for threads in args.threads:
        run_recipe(threads, step)()
        run_kernel(threads)()
        if index is not None:
            run_bm25s(threads)()
    # the same answers however the batch is cut and whatever the threads: rows and score bits
    whole = answers(run_recipe(1, n)()[0])
    same = all(whole == [(q + i, row, s) for i, r in zip(range(0, n, size), run_recipe(t, size)())
                         for q, row, s in answers(r)]
               for t in args.threads for size in (n, step))
    print(f"answers (rows and score bits) the same in one call, in batches of {step}, at threads "
          f"{', '.join(map(str, args.threads))}: {'yes' if same else 'NO'}")
    # one record per artifact here: the recipe fetches k (lean); the seed's depth gives the same answers
    shallow = answers(run_recipe(1, n, lean=False)()[0]) == whole
    print(f"answers at the seed's depth (lean=False: 50 rows a query) the same as the recipe's {K} rows "
          f"(this corpus holds one record per artifact): {'yes' if shallow else 'NO'}")

    systems: dict[str, Callable[[], Any]] = {}
    for threads in args.threads:
        systems[f"irflow recipe {n} T{threads}"] = run_recipe(threads, n)
        systems[f"irflow recipe {step} T{threads}"] = run_recipe(threads, step)
        systems[f"irflow kernel {n} T{threads}"] = run_kernel(threads)
        if threads == args.threads[0]:  # the seed's depth (max(5 k, 50)): its kernel's share
            systems[f"irflow kernel {n} k50 T{threads}"] = run_kernel(threads, 50)
        systems[f"irflow recipe {n} lean=False T{threads}"] = run_recipe(threads, n, lean=False)
        if index is not None:
            systems[f"bm25s numba T{threads}"] = run_bm25s(threads)
    timing = timed(systems, args.repeats)
    print(f"\n{n} queries (half each mix, 2-5 tokens), top {K}; one item = all {n} queries; median and p90 over "
          f"{args.repeats} interleaved passes; ms per 1,000 queries")
    rows = []
    for name, t in timing.items():
        (wm, wp), (cm, cp) = stats(t["wall"]), stats(t["cpu"])
        scale = 1e3 * 1000 / n
        rows.append([name, cm * scale, cp * scale, wm * scale, wp * scale, n / wm])
    print(H.table(["system", "cpu median", "cpu p90", "wall median", "wall p90", "queries/s wall"], rows))
    figures: dict[str, Any] = {"same": same, "shallow": shallow}
    first = args.threads[0]
    recipe_ms = stats(timing[f"irflow recipe {n} T{first}"]["cpu"])[0]
    kernel_ms = stats(timing[f"irflow kernel {n} T{first}"]["cpu"])[0]
    print(f"  where the recipe's time goes (CPU, T{first}): the kernel at its depth {K} {kernel_ms / recipe_ms:.0%}, "
          f"the engine (stages, deepen check, collapse) {1 - kernel_ms / recipe_ms:.0%}")
    if index is not None:
        print("\nratios bm25s numba / irflow (> 1: irflow faster), median (p90):")
        out = []
        for threads in args.threads:
            peer = timing[f"bm25s numba T{threads}"]
            for mine in (f"irflow recipe {n} T{threads}", f"irflow recipe {step} T{threads}",
                         f"irflow recipe {n} lean=False T{threads}", f"irflow kernel {n} T{threads}"):
                row = [mine]
                for clock in ("cpu", "wall"):
                    (pm, pp), (mm, mp) = stats(peer[clock]), stats(timing[mine][clock])
                    row.append(f"{pm / mm:.2f} ({pp / mp:.2f})")
                    figures[(mine, clock)] = (pm / mm, pp / mp)
                out.append(row)
        print(H.table(["irflow system", "cpu", "wall"], out))
    return figures


# -- hybrid --------------------------------------------------------------------------------------


def hybrid(args: argparse.Namespace) -> dict[str, Any]:
    """``load_recipe("hybrid").run`` (fusion rrf) on batches vs the same work with the kernels by hand."""
    import pipeline as P

    print(f"\n=== hybrid: {args.artifacts * len(P.KINDS):,} records ({args.artifacts:,} artifacts x "
          f"{len(P.KINDS)} kinds), {args.dim}-d precomputed vectors, batches of {args.hybrid_batch} ===")
    t0 = time.perf_counter()
    n_queries = args.hybrid_batch * args.hybrid_batches
    corpus, texts = P.make_corpus(args.artifacts, args.dim, n_queries, args.seed)
    codes = P.artifact_codes(corpus)
    recipe = irflow.load_recipe("hybrid")
    print(f"built in {time.perf_counter() - t0:.1f} s; recipe 'hybrid' with fusion rrf, k {K} (fetch_k 50); the "
          "kernels by hand: mask, embed, dense_topk, tokenize, bm25_topk, RRF, cut to 50, best surface, hits "
          "(benchmarks/pipeline.py)")
    batches = [texts[i * args.hybrid_batch:(i + 1) * args.hybrid_batch] for i in range(args.hybrid_batches)]
    run = lambda batch: recipe.run(corpus, batch, fusion="rrf", k=K).hits  # noqa: E731
    agree = sum(P.same_hits(a, b) for batch in batches for a, b in zip(run(batch), P.kernels(corpus, codes, batch)))
    print(f"hits equal to the kernels by hand: {agree}/{n_queries}")
    figures: dict[str, Any] = {"agree": agree, "n": n_queries}
    for threads in args.threads:
        systems: dict[str, Callable[[], Any]] = {}
        for b, batch in enumerate(batches):
            systems[f"recipe {b}"] = lambda batch=batch: run(batch)
            systems[f"kernels {b}"] = lambda batch=batch: P.kernels(corpus, codes, batch)
        with limit_threads(threads):
            timing = timed(systems, args.repeats)
        per = {way: [statistics.median(timing[f"{way} {b}"]["cpu"]) for b in range(len(batches))]
               for way in ("recipe", "kernels")}
        walls = {way: [statistics.median(timing[f"{way} {b}"]["wall"]) for b in range(len(batches))]
                 for way in ("recipe", "kernels")}
        scale = 1e3 / args.hybrid_batch
        rows = [[way, statistics.median(per[way]) * scale, float(np.percentile(per[way], 90)) * scale,
                 statistics.median(walls[way]) * scale] for way in ("recipe", "kernels")]
        print(f"\nthreads {threads} (BLAS and BM25 batches): ms per query (median and p90 over "
              f"{len(batches)} batches, each the median of {args.repeats} interleaved passes)")
        print(H.table(["way", "cpu ms/q", "cpu p90", "wall ms/q"], rows))
        ratio = statistics.median(per["kernels"]) / statistics.median(per["recipe"])
        print(f"  kernels by hand / recipe: {ratio:.3f} (>= 1: the recipe at least as fast)")
        figures[threads] = ratio
    return figures


# -- main --------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="Zipf corpus sizes (comma list)")
    parser.add_argument("--queries", type=int, default=1000, help="queries (half of each mix)")
    parser.add_argument("--batch", type=int, default=100, help="the smaller batch size timed")
    parser.add_argument("--threads", default="1,2", help="thread counts (comma list)")
    parser.add_argument("--repeats", type=int, default=7, help="interleaved passes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", default=CACHE, help="where the built corpora are kept ('' = build in memory)")
    parser.add_argument("--no-bm25s", action="store_true")
    parser.add_argument("--no-hybrid", action="store_true")
    parser.add_argument("--artifacts", type=int, default=25_000, help="hybrid corpus: artifacts (4 records each)")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--hybrid-batch", type=int, default=256)
    parser.add_argument("--hybrid-batches", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="a 20k corpus in memory, few queries (smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.queries, args.batch, args.repeats, args.cache = "20000", 100, 25, 2, ""
        args.artifacts, args.hybrid_batch, args.hybrid_batches = 1_000, 32, 2
    args.threads = [int(t) for t in args.threads.split(",") if t]
    args.cache = args.cache or None
    print("batch benchmark: Recipe.run over a batch of queries vs bm25s-numba's batched retrieve; hybrid batches "
          "vs the kernels by hand")
    for line in H.machine_lines():
        print(line)
    print("  the machine is shared (other jobs run): passes interleaved, medians and p90 over them; with 2 threads "
          "CPU time is the work of both, wall time the throughput")
    results: dict[str, Any] = {}
    for size in [int(s) for s in args.sizes.split(",") if s]:
        results[f"lexical {size}"] = lexical_size(size, args)
    if not args.no_hybrid:
        results["hybrid"] = hybrid(args)
    return results


if __name__ == "__main__":
    main()
