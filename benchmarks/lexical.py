"""Lexical top-k: irflow's BM25 kernel against rank_bm25 and bm25s, in one run on the same data.

Datasets: a Zipfian synthetic corpus at 10k, 100k and 1M records (fixed
seed; queries of 2-5 terms drawn from the corpus's own term law), and
SciFact (``../shared/data/scifact``: title + text, cut by irflow's
"english" analyzer; skipped when the folder is absent).  Every system
receives the same token lists and the same tokenized queries, so
tokenization is outside every timing.

Systems: irflow ``bm25_topk`` over ``Postings`` (Okapi, rank_bm25's
arithmetic); rank_bm25 ``BM25Okapi`` (``get_scores`` + ``argpartition``:
what a rank_bm25 user pays for a top k); bm25s with its default numpy
backend and, when numba is installed, its numba backend (both
single-threaded: ``n_threads=0``).  bm25s scores with Lucene's idf, so only
its speed is compared; irflow's scores must equal rank_bm25's (the max
absolute difference over the top 10 is printed).

Figures per dataset: index build time (one build each; irflow's includes
its head-term columns, which the first query would otherwise build),
memory (build peak, index retained, and the peak of a batch of queries;
measured in a fresh child process per system — see ``_harness.py``),
single-query latency for the top 10 (per query the median over
``--repeats``, then the median / mean / 90th percentile over queries) and
batched latency per query (batches of ``--batch``).  rank_bm25 scores every
record in Python per query term (seconds per query at 1M), so it answers
only the first few queries (``--rank-queries``; by default 2M / records,
at least 5) and its ratio is taken against irflow on those same queries.

With ``--base DIR`` (a checkout of an older commit, e.g. ``git worktree
add DIR e714f53``), that commit's ``bm25_topk`` runs as one more system,
"irflow base", over its own copy of the same postings, interleaved with the
others: the before/after comparison in one run.

Clocks: CPU time of the process (quoted: robust on a shared machine, and
every system here runs on one thread) and wall time.

    python benchmarks/lexical.py                 # 10k, 100k, 1M and SciFact (about 15 minutes)
    python benchmarks/lexical.py --sizes 100000  # one size
    python benchmarks/lexical.py --quick         # smoke test, under a minute
    python benchmarks/lexical.py --sizes 100000,1000000 --base ../i9-base --no-scifact
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as H  # noqa: E402

H.ensure_irflow()

from irflow.kernels.bm25 import BM25Params, bm25_topk  # noqa: E402
from irflow.kernels.postings import Postings  # noqa: E402

SCIFACT = os.path.join(H.REPO, "..", "shared", "data", "scifact")
SYSTEMS = ("irflow", "rank_bm25", "bm25s numpy", "bm25s numba")


# -- data ---------------------------------------------------------------------------------


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


def scifact(path: str, n_queries: int) -> tuple[list[list[str]], list[list[str]]]:
    """SciFact's records (title + text) and its first queries, cut by irflow's "english" analyzer."""
    from irflow.kernels.text import get_analyzer

    analyzer = get_analyzer("english")
    with open(os.path.join(path, "corpus.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    with open(os.path.join(path, "queries.jsonl"), encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    docs = analyzer.tokenize_many([f"{r.get('title', '')} {r.get('text', '')}" for r in rows])
    queries = [q for q in analyzer.tokenize_many(texts) if q][:n_queries]
    return docs, queries


def load(spec: Mapping[str, Any]) -> tuple[list[list[str]], list[list[str]]]:
    """The documents and queries a dataset spec names (children rebuild them from the spec)."""
    if spec["kind"] == "zipf":
        docs, law = zipf_corpus(spec["docs"], spec["vocab"], spec["zipf"], spec["length"], spec["seed"])
        return docs, zipf_queries(spec["queries"], law, spec["seed"])
    return scifact(spec["path"], spec["queries"])


# -- systems ------------------------------------------------------------------------------


BASE: dict[str, Any] = {}  # "module": the --base checkout's irflow.kernels.bm25, when given


def build(system: str, docs: Sequence[Sequence[str]]) -> Any:
    """The index of ``system`` over ``docs`` (irflow: postings + head columns)."""
    if system in ("irflow", "irflow base"):  # each its own copy: their caches must not meet
        postings = Postings.build(docs)
        postings.head_columns()
        return postings
    if system == "rank_bm25":
        from rank_bm25 import BM25Okapi

        return BM25Okapi(docs)
    import bm25s

    index = bm25s.BM25(backend="numba" if system == "bm25s numba" else "numpy")
    index.index(docs, show_progress=False)
    return index


def searcher(system: str, index: Any, k: int) -> Callable[[Sequence[Sequence[str]]], Any]:
    """``run(queries) -> top k of each`` for one system (rank_bm25: a loop, it has no batch API)."""
    if system == "irflow":
        params = BM25Params()
        return lambda qs: bm25_topk(index, qs, None, k, params)
    if system == "irflow base":
        base = BASE["module"]
        base_params = base.BM25Params()
        return lambda qs: base.bm25_topk(index, qs, None, k, base_params)
    if system == "rank_bm25":
        def run(qs: Sequence[Sequence[str]]) -> list[np.ndarray]:
            out = []
            for q in qs:
                scores = index.get_scores(q)
                top = np.argpartition(-scores, k)[:k]
                out.append(top[np.argsort(-scores[top], kind="stable")])
            return out
        return run
    return lambda qs: index.retrieve(qs, k=k, show_progress=False, n_threads=0)


def available() -> list[str]:
    systems = ["irflow"] + (["irflow base"] if BASE else []) + ["rank_bm25"]
    if H.have("bm25s"):
        systems.append("bm25s numpy")
        if H.have("numba"):
            systems.append("bm25s numba")
    return systems


def child(payload: Mapping[str, Any]) -> None:
    """Memory of one system in this fresh process: build peak, retained index, query-batch peak."""
    docs, queries = load(payload["data"])
    system, k = payload["system"], payload["k"]
    if payload.get("base"):
        BASE["module"] = H.load_base(payload["base"], "bm25")
    probe = H.MemoryProbe()
    probe.start()
    start = time.perf_counter()
    index = build(system, docs)
    build_s = time.perf_counter() - start
    built = probe.stop()
    run = searcher(system, index, k)
    probe.start()
    run(queries[: payload["batch"]])  # first queries also build lazy structures (scratch, compiled code)
    queried = probe.stop()
    print(json.dumps({"build_peak_mb": built["peak_mb"], "retained_mb": built["retained_mb"],
                      "query_peak_mb": queried["peak_mb"], "build_s": build_s, "method": probe.method}))


# -- one dataset --------------------------------------------------------------------------


def agreement(postings: Postings, rank: Any, queries: Sequence[Sequence[str]], k: int) -> tuple[float, int]:
    """Max |irflow - rank_bm25| over each query's top k, and how many top-k row lists are identical.

    The reference top k is taken among the records holding a query token
    (irflow returns only those), ties broken by row as irflow does.
    """
    params, worst, same = BM25Params(), 0.0, 0
    for query in queries:
        reference = rank.get_scores(query)
        ids = [postings.vocab[t] for t in set(query) if t in postings.vocab]
        holders = np.unique(np.concatenate([postings.postings(t)[0] for t in ids] or [np.empty(0, int)]))
        top_ref = holders[np.argsort(-reference[holders], kind="stable")[:k]]
        rows, scores = bm25_topk(postings, [query], None, k, params).per_query(0)
        worst = max(worst, float(np.max(np.abs(reference[rows] - scores), initial=0.0)),
                    float(np.max(np.abs(reference[top_ref] - scores), initial=0.0)))
        same += bool(np.array_equal(rows, top_ref))
    return worst, same


def run_dataset(label: str, spec: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Build, check, time and measure every system on one dataset; print its section."""
    print(f"\n=== {label} ===")
    t0 = time.perf_counter()
    docs, queries = load(spec)
    n_docs = len(docs)
    print(f"{n_docs} records, {sum(map(len, docs))} tokens, {len(queries)} queries "
          f"(made in {time.perf_counter() - t0:.1f} s)")
    k = args.k
    systems = [s for s in available() if s in args.systems]
    rank_queries = min(len(queries), args.rank_queries or max(5, min(len(queries), 2_000_000 // n_docs)))
    rank_repeats = 1 if n_docs >= 500_000 else min(args.repeats, 3)

    indexes: dict[str, Any] = {}
    build_s: dict[str, tuple[float, float]] = {}
    for system in systems:
        wall, cpu, indexes[system] = H.measure(lambda: build(system, docs))  # noqa: B023 (called at once)
        build_s[system] = (wall, cpu)
    runs = {s: searcher(s, indexes[s], k) for s in systems}
    if "bm25s numba" in runs:
        runs["bm25s numba"](queries[:2])  # compile outside the timings

    worst, same = (None, None)
    if "rank_bm25" in indexes:
        worst, same = agreement(indexes["irflow"], indexes["rank_bm25"], queries[:rank_queries], k)
        print(f"agreement with rank_bm25 on {rank_queries} queries: max |irflow - rank_bm25| on the top {k} = "
              f"{worst:.2e}; identical top-{k} rows: {same}/{rank_queries}")

    single = H.interleaved(
        {s: ((lambda i, s=s: runs[s]([queries[i]])),
             rank_queries if s == "rank_bm25" else len(queries),
             rank_repeats if s == "rank_bm25" else args.repeats) for s in systems},
        len(queries))
    size = max(1, min(args.batch, len(queries)))
    chunks = [queries[i:i + size] for i in range(0, len(queries) - size + 1, size)]
    batched = H.interleaved(
        {s: ((lambda i, s=s: runs[s](chunks[i])), len(chunks), args.repeats) for s in systems
         if s != "rank_bm25"}, len(chunks))

    memory: dict[str, dict[str, Any]] = {}
    if not args.no_memory:
        for system in systems:
            memory[system] = H.run_child(os.path.abspath(__file__), {
                "system": system, "data": spec, "k": k, "batch": size, "base": args.base})
    del indexes

    def per_query_batch(s: str, clock: str) -> float | None:
        if s not in batched:
            return None
        return statistics.median(batched[s].values(clock)) * 1e3 / size

    rows = []
    for s in systems:
        mem = memory.get(s, {})
        rows.append([s, build_s[s][1], build_s[s][0], mem.get("build_peak_mb"), mem.get("retained_mb"),
                     mem.get("query_peak_mb")])
    print("\nbuild (one build; seconds) and memory (MB, fresh process per system)")
    print(H.table(["system", "build cpu s", "build wall s", "build peak MB", "index MB", "query peak MB"], rows))
    errors = {s: m["error"] for s, m in memory.items() if "error" in m}
    for s, e in errors.items():
        print(f"  memory of {s} failed: {e}")
    if memory and not errors:
        print(f"  memory method: {next(iter(memory.values())).get('method')}; query peak = "
              f"first batch of {size} queries (includes lazy scratch buffers / JIT)")

    mine = single["irflow"]
    rows = []
    for s in systems:
        first = rank_queries if s == "rank_bm25" else None
        rows.append([s + (f" ({rank_queries} q)" if first else ""),
                     single[s].median_ms("cpu"), single[s].mean_ms("cpu"), single[s].p90_ms("cpu"),
                     single[s].median_ms("wall"), per_query_batch(s, "cpu"),
                     H.ratio(single[s].median_ms("cpu"), mine.median_ms("cpu", first)),
                     H.ratio(single[s].mean_ms("cpu"), mine.mean_ms("cpu", first)),
                     H.ratio(per_query_batch(s, "cpu"), per_query_batch("irflow", "cpu"))])
    print(f"\ntop-{k} latency, ms (single: median of {args.repeats} repeats per query, then over queries; "
          f"batch: per query in batches of {size})")
    print(H.table(["system", "single med", "single mean", "single p90", "wall med", "batch/q",
                   "x med", "x mean", "x batch"], rows))
    print("  x = peer time / irflow time on the same queries, CPU clock (> 1: irflow faster)")

    return {
        "label": label, "n_docs": n_docs, "worst": worst, "same": same, "rank_queries": rank_queries,
        "single": {s: {"median": single[s].median_ms("cpu"), "mean": single[s].mean_ms("cpu"),
                       "irflow_median": mine.median_ms("cpu", rank_queries if s == "rank_bm25" else None),
                       "irflow_mean": mine.mean_ms("cpu", rank_queries if s == "rank_bm25" else None)}
                   for s in systems},
        "batch": {s: per_query_batch(s, "cpu") for s in systems},
        "build": build_s, "memory": memory,
    }


def targets(result: Mapping[str, Any]) -> None:
    """Issue 5's lexical targets at this size (meant for 100k records)."""
    single = result["single"]
    print(f"\ntargets (issue 5, single query top 10; CPU medians over queries, means in brackets) "
          f"at {result['n_docs']} records:")
    checks = [("rank_bm25", 200.0, "x rank_bm25 >= 200"), ("bm25s numpy", 4.0, "x bm25s numpy >= 4"),
              ("bm25s numba", 0.5, "within 2x of bm25s numba (x >= 0.5)")]
    for system, need, text in checks:
        if system not in single:
            print(f"  {text}: not measured ({system} unavailable)")
            continue
        s = single[system]
        med, mean = s["median"] / s["irflow_median"], s["mean"] / s["irflow_mean"]
        verdict = "met" if med >= need else "NOT met"
        print(f"  {text}: {med:.2f}x ({mean:.2f}x)  {verdict}")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="synthetic corpus sizes (comma list)")
    parser.add_argument("--vocab", type=int, default=50_000, help="distinct terms (default 50000)")
    parser.add_argument("--zipf", type=float, default=1.05, help="Zipf exponent of term frequencies")
    parser.add_argument("--length", type=float, default=40.0, help="mean tokens per record")
    parser.add_argument("--queries", type=int, default=200, help="queries per dataset")
    parser.add_argument("--rank-queries", type=int, default=None,
                        help="queries rank_bm25 answers (default: 2M / records, at least 5)")
    parser.add_argument("--batch", type=int, default=64, help="queries per batch call")
    parser.add_argument("--repeats", type=int, default=5, help="repeats per query (median taken)")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scifact", default=SCIFACT, help="SciFact folder (BEIR layout); skipped if absent")
    parser.add_argument("--no-scifact", action="store_true")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory child processes")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="systems to run (comma list)")
    parser.add_argument("--quick", action="store_true", help="10k records only, few queries (smoke test)")
    parser.add_argument("--base", default=None, metavar="DIR",
                        help="also time the bm25_topk of another checkout (an older commit), interleaved")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(json.loads(args.child))
        return {}
    if args.quick:
        args.sizes, args.queries, args.repeats, args.batch = "10000", 32, 3, 16
        args.no_scifact = True
    args.systems = [s.strip() for s in args.systems.split(",")]
    if "irflow" not in args.systems:
        args.systems.insert(0, "irflow")
    if args.base:
        BASE["module"] = H.load_base(args.base, "bm25")
        args.systems.insert(1, "irflow base")

    print("lexical top-k benchmark: irflow BM25 vs rank_bm25 and bm25s")
    for line in H.machine_lines():
        print(line)
    if BASE:
        print(f"irflow base: bm25_topk of {args.base} (commit {BASE['module'].REVISION})")
    missing = [s for s in SYSTEMS if s in args.systems and s not in available()]
    if missing:
        print(f"not installed, skipped: {', '.join(missing)} (pip install bm25s numba)")

    results = {}
    for size in [int(s) for s in args.sizes.split(",") if s]:
        spec = {"kind": "zipf", "docs": size, "vocab": args.vocab, "zipf": args.zipf, "length": args.length,
                "seed": args.seed, "queries": args.queries}
        results[size] = run_dataset(f"zipf {size} records (vocab {args.vocab}, exponent {args.zipf}, "
                                    f"mean length {args.length}, seed {args.seed})", spec, args)
    if not args.no_scifact:
        if os.path.isfile(os.path.join(args.scifact, "corpus.jsonl")):
            spec = {"kind": "scifact", "path": os.path.abspath(args.scifact), "queries": args.queries}
            results["scifact"] = run_dataset("SciFact (title + text, english analyzer)", spec, args)
        else:
            print(f"\nSciFact skipped: {args.scifact} not found")
    target_size = 100_000 if 100_000 in results else next((s for s in results if s != "scifact"), None)
    if target_size is not None:
        targets(results[target_size])
    return results


if __name__ == "__main__":
    main()
