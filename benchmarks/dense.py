"""Dense exact top-k: irflow's ``dense_topk`` against a naive numpy argsort and faiss IndexFlatIP.

Data: ``n`` x 384 float32 rows with random Gaussian entries, L2-normalized
(fixed seed), at 100k and 1M rows (1M x 384 = 1.5 GB; faiss keeps its own
copy).  Queries are corpus rows plus noise, normalized, float32, so every
query has a few true near neighbours.  Filters keep a random 1%, 10% or 50%
of the rows (fixed seed) — scattered rows, the worst case for a gather.

Systems, all exact, top 10 by inner product (= cosine):

* irflow — ``irflow.kernels.dense.dense_topk(matrix, queries, mask, 10)``, without
  the int8 codes a corpus builds where numba is installed (so: the plan an install
  without numba runs; ``benchmarks/dense_codes.py`` measures the codes' scan): BLAS
  ranks (a matrix-vector product for one query, row tiles of a matrix
  product with a running top-k for a batch; gathered rows under a selective
  filter), then the few candidates get their exact score from the vectors
  alone (see ``irflow/kernels/dense.py``).  The matrix is read-only, as a corpus's
  vectors are, so the rows' norm bound is computed once (before the timings).
* irflow base — with ``--base DIR`` (a checkout of an older commit, e.g.
  ``git worktree add DIR e714f53``), that commit's ``dense_topk`` on the same
  data in the same run: the before/after comparison.
* search() / Recipe.run — the same search through the public API (with
  ``--api``, the default): a corpus built by ``irflow.build`` from the same
  vectors (one record per row, its own artifact, a one-word text, a
  boolean metadata field per filter), a lookup query embedder (query text
  -> its vector: embedding costs a dict lookup), ``irflow.search(corpus,
  text, k=10, per_artifact=False, mode="dense", filter=...)`` for single
  queries and ``load_recipe("search").run(corpus, texts, ...)`` for
  batches: the kernel plus everything the engine does around it (mask,
  embedding, stages, hits).
* naive — ``scores = queries @ matrix.T``, dropped rows set to -inf,
  ``np.argsort(-scores, axis=1)[:, :10]``: what one writes without care.
  A full sort is slow on big batches, so on those it answers the first
  batch once only (said in the table).
* faiss — ``IndexFlatIP`` over the same matrix.  With a filter, two ways:
  ``faiss sel`` passes an ``IDSelectorBitmap`` through
  ``SearchParameters(sel=...)`` (faiss then skips the dropped rows), and
  ``faiss subset`` gathers the kept rows into a new ``IndexFlatIP`` per
  call and maps ids back (gather + add + search timed, like irflow's
  gather).  faiss >= 1.12 ships ``distance_compute_blas_threshold =
  128000``, so any batch of fewer queries takes its one-query-at-a-time
  path and gains nothing from batching; batches here run with the
  threshold at 20 (faiss's historical default: the BLAS path, its fastest),
  and the unfiltered ``faiss default`` row shows the shipped setting.
  Skipped when faiss is not installed.

Timing: single queries, and batches of 64 and 256 (time per query); per
item the median of ``--repeats`` runs, systems interleaved, then the median
over items.  Both clocks are printed: CPU time of the process (all threads)
and wall time.  By default every thread pool is limited to one thread
(``--threads 1``: threadpoolctl for the BLAS libraries, and
``faiss.omp_set_num_threads``), so CPU time equals latency and a loaded,
shared machine cannot inflate it with threads spinning while they wait
for a core; ``--threads 0`` leaves the pools as they are (all cores; wall
time is then the latency and CPU time the total work).  Results are checked: the fraction of queries whose
top-10 rows equal irflow's is printed.

    python benchmarks/dense.py                    # 100k and 1M (about 10 minutes)
    python benchmarks/dense.py --base ../i9-base  # also the old kernel, interleaved
    python benchmarks/dense.py --sizes 100000
    python benchmarks/dense.py --quick            # smoke test, under a minute
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as H  # noqa: E402

H.ensure_irflow()

from irflow.kernels.dense import dense_topk, row_norm_bound  # noqa: E402

FILTERS: tuple[float | None, ...] = (None, 0.01, 0.10, 0.50)


# -- data ---------------------------------------------------------------------------------


def make_matrix(n: int, d: int, seed: int) -> np.ndarray:
    """``n`` x ``d`` float32 random rows, L2-normalized (made in chunks to bound the temporaries)."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, d), dtype=np.float32)
    for lo in range(0, n, 100_000):
        block = rng.standard_normal((min(100_000, n - lo), d), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[lo:lo + block.shape[0]] = block
    return out


def make_queries(matrix: np.ndarray, n: int, seed: int, noise: float = 0.5) -> np.ndarray:
    """``n`` queries: random corpus rows plus Gaussian noise, normalized, float32."""
    rng = np.random.default_rng(seed + 1)
    rows = rng.integers(0, matrix.shape[0], n)
    q = matrix[rows] + noise * rng.standard_normal((n, matrix.shape[1]), dtype=np.float32) / np.sqrt(
        matrix.shape[1], dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return np.ascontiguousarray(q, dtype=np.float32)


def make_mask(n: int, keep: float, seed: int) -> np.ndarray:
    """A random row mask keeping ``keep`` of ``n`` rows (exactly round(keep * n))."""
    rng = np.random.default_rng(seed + 2 + int(keep * 1000))
    mask = np.zeros(n, dtype=bool)
    mask[rng.choice(n, size=max(1, round(keep * n)), replace=False)] = True
    return mask


# -- systems ------------------------------------------------------------------------------


def irflow_run(matrix: np.ndarray, mask: np.ndarray | None, k: int,
               kernel: Callable[..., Any] = dense_topk) -> Callable[[np.ndarray], np.ndarray]:
    def run(q: np.ndarray) -> np.ndarray:
        top = kernel(matrix, q, mask, k)
        return top.row.reshape(q.shape[0], -1) if len(top) == q.shape[0] * k else top.row
    return run


def naive_run(matrix: np.ndarray, mask: np.ndarray | None, k: int) -> Callable[[np.ndarray], np.ndarray]:
    drop = None if mask is None else ~mask

    def run(q: np.ndarray) -> np.ndarray:
        scores = q @ matrix.T
        if drop is not None:
            scores[:, drop] = -np.inf
        return np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return run


#: faiss >= 1.12 ships ``distance_compute_blas_threshold = 128000``: a batch of fewer
#: queries takes its one-query-at-a-time SIMD path, which gains nothing from batching.
#: Batches here run with faiss's historical default of 20, so faiss uses BLAS like numpy.
FAISS_BLAS_THRESHOLD = 20


class blas_threshold:
    """Set faiss's ``distance_compute_blas_threshold`` for the calls inside the block."""

    def __init__(self, value: int | None) -> None:
        self.value = value

    def __enter__(self) -> None:
        import faiss

        self.old = faiss.cvar.distance_compute_blas_threshold
        if self.value is not None:
            faiss.cvar.distance_compute_blas_threshold = self.value

    def __exit__(self, *exc: Any) -> None:
        import faiss

        faiss.cvar.distance_compute_blas_threshold = self.old


def faiss_runs(index: Any, matrix: np.ndarray, mask: np.ndarray | None, k: int,
               threshold: int | None) -> dict[str, Callable]:
    """faiss searches: plain, or with a filter by selector and by gathered subset."""
    import faiss

    if mask is None:
        def plain(q: np.ndarray) -> np.ndarray:
            with blas_threshold(threshold):
                return index.search(q, k)[1]
        return {"faiss": plain}
    bitmap = np.packbits(mask, bitorder="little")
    selector = faiss.IDSelectorBitmap(mask.size, faiss.swig_ptr(bitmap))
    params = faiss.SearchParameters(sel=selector)
    kept = np.flatnonzero(mask)

    def with_selector(q: np.ndarray, _keep=(bitmap, selector)) -> np.ndarray:  # keep the bitmap alive
        with blas_threshold(threshold):
            return index.search(q, k, params=params)[1]

    def subset(q: np.ndarray) -> np.ndarray:
        sub = faiss.IndexFlatIP(matrix.shape[1])
        sub.add(np.take(matrix, kept, axis=0))
        with blas_threshold(threshold):
            return kept[sub.search(q, k)[1]]
    return {"faiss sel": with_selector, "faiss subset": subset}


def filter_field(keep: float) -> str:
    return f"keep{round(keep * 1000)}"


def make_api_corpus(matrix: np.ndarray, queries: np.ndarray, masks: Mapping[float, np.ndarray]) -> tuple[Any, list[str]]:
    """A corpus over ``matrix`` (one record per row, a boolean field per filter) and one text per query."""
    import irflow
    from irflow.store.records import Record

    fields = {keep: mask.tolist() for keep, mask in masks.items()}
    records = [Record(f"a{i}", "doc", f"w{i % 1000}", {filter_field(keep): fields[keep][i] for keep in fields},
                      id=f"r{i}", vector=matrix[i]) for i in range(matrix.shape[0])]
    texts = [f"query {i}" for i in range(queries.shape[0])]
    embedder = H.LookupEmbedder(dict(zip(texts, queries)), matrix.shape[1])
    corpus = irflow.build(records, embedder=embedder)
    del records
    return corpus, texts


def api_runs(corpus: Any, texts: Sequence[str], keep: float | None, k: int, batch: int) -> dict[str, Callable]:
    """``search()`` (one query) or ``Recipe.run`` (a batch), returning rows (query position -> row ids)."""
    import irflow

    where = None if keep is None else {filter_field(keep): True}
    recipe = irflow.load_recipe("search")

    def rows(hits: Sequence[Any]) -> list[int]:
        return [int(h.record_id[1:]) for h in hits]

    if batch == 1:
        def one(q: np.ndarray) -> np.ndarray:
            return np.array([rows(irflow.search(corpus, texts[int(q[0])], k=k, per_artifact=False, mode="dense",
                                                filter=where))])
        return {"search()": one}

    def many(q: np.ndarray) -> np.ndarray:
        hits = recipe.run(corpus, [texts[int(i)] for i in q], k=k, per_artifact=False, mode="dense",
                          filter=where).hits
        return np.array([rows(h) for h in hits])
    return {"Recipe.run": many}


def limit_threads(n: int | None) -> Any:
    """Limit BLAS / OpenMP pools (and faiss's) to ``n`` threads; returns the controller to keep."""
    if not n:
        return None
    try:
        import faiss

        faiss.omp_set_num_threads(n)
    except ImportError:
        pass
    try:
        from threadpoolctl import threadpool_limits

        return threadpool_limits(limits=n)
    except ImportError:
        print("  (threadpoolctl not installed: --threads applies to faiss only)")
        return None


# -- one size ------------------------------------------------------------------------------


def agreement(reference: np.ndarray, other: np.ndarray) -> float:
    """Fraction of queries whose top-k row lists are equal."""
    reference = np.asarray(reference).reshape(other.shape[0], -1)
    return float(np.mean([np.array_equal(a, b) for a, b in zip(reference, np.asarray(other))]))


def run_size(n: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    d, k = args.dim, args.k
    t0 = time.perf_counter()
    matrix = make_matrix(n, d, args.seed)
    matrix.flags.writeable = False  # as a corpus's vectors
    row_norm_bound(matrix)  # once, as a corpus does on its first dense query
    batch_sizes = [b for b in args.batches if b > 0]
    n_queries = max([args.queries] + [b * args.n_batches for b in batch_sizes])
    queries = make_queries(matrix, n_queries, args.seed)
    index = None
    if H.have("faiss") and not args.no_faiss:
        import faiss

        index = faiss.IndexFlatIP(d)
        index.add(matrix)
    masks = {keep: make_mask(n, keep, args.seed) for keep in args.filters if keep is not None}
    corpus = texts = None
    if args.api:
        t1 = time.perf_counter()
        corpus, texts = make_api_corpus(matrix, queries, masks)
        print(f"  api corpus built in {time.perf_counter() - t1:.1f} s")
    print(f"\n=== {n} x {d} float32 ({matrix.nbytes / 2**30:.2f} GiB; made in {time.perf_counter() - t0:.1f} s)"
          f"{'' if index is not None else '; faiss not installed: skipped'} ===")
    results = []
    positions = np.arange(n_queries)
    for keep in args.filters:
        mask = None if keep is None else masks[keep]
        label = "no filter" if keep is None else f"filter keeps {keep:.0%}"
        rows = []
        for b in [1] + batch_sizes:
            systems: dict[str, Callable[[np.ndarray], Any]] = {"irflow": irflow_run(matrix, mask, k)}
            if args.base_module is not None:
                systems["irflow base"] = irflow_run(matrix, mask, k, args.base_module.dense_topk)
            if not args.no_naive:
                systems["naive argsort"] = naive_run(matrix, mask, k)
            if index is not None:
                systems.update(faiss_runs(index, matrix, mask, k, None if b == 1 else FAISS_BLAS_THRESHOLD))
                if b > 1 and mask is None:
                    systems["faiss default"] = faiss_runs(index, matrix, mask, k, None)["faiss"]
            items = [queries[i:i + 1] for i in range(args.queries)] if b == 1 else \
                [queries[i * b:(i + 1) * b] for i in range(args.n_batches)]
            by_position = [positions[i:i + 1] for i in range(args.queries)] if b == 1 else \
                [positions[i * b:(i + 1) * b] for i in range(args.n_batches)]
            api = {} if corpus is None else api_runs(corpus, texts, keep, k, b)
            lookup = {id(x): p for x, p in zip(items, by_position)}  # the API takes texts: item -> positions
            for name, run in api.items():
                systems[name] = (lambda q, run=run, lookup=lookup: run(lookup[id(q)]))
            plan = {}
            for name, run in systems.items():
                reps, count = (args.repeats if b == 1 else args.batch_repeats), len(items)
                if name in ("naive argsort", "faiss default") and b * n > 20_000_000:
                    reps, count = 1, 1  # a full sort per query / faiss's per-query path: slow, once
                elif name == "faiss sel" and b > 1 and b * n * keep > 20_000_000:
                    reps, count = 1, 1  # faiss skips dropped rows on its per-query path only
                plan[name] = ((lambda i, run=run, items=items: run(items[i])), count, reps)
            timing = H.interleaved(plan, len(items))
            mine = irflow_run(matrix, mask, k)(items[0])
            for name in systems:
                out = np.asarray(systems[name](items[0]))
                same = agreement(mine, out)
                first = len(timing[name])
                note = "" if first == len(items) else f" ({first}x1)"
                cpu = timing[name].median_ms("cpu") / b
                p90 = timing[name].p90_ms("cpu") / b
                wall = timing[name].median_ms("wall") / b
                ref_cpu = statistics.median(timing["irflow"].cpu[:first]) * 1e3 / b
                ref_wall = statistics.median(timing["irflow"].wall[:first]) * 1e3 / b
                rows.append([name + note, b, wall, cpu, p90, H.ratio(wall, ref_wall), H.ratio(cpu, ref_cpu), same])
                results.append({"n": n, "filter": keep, "batch": b, "system": name, "wall_ms": wall,
                                "cpu_ms": cpu, "cpu_p90_ms": p90, "x_wall": H.ratio(wall, ref_wall),
                                "x_cpu": H.ratio(cpu, ref_cpu), "same": same})
        print(f"\n{label}: top-{k} time per query, ms (median over {args.queries} single queries x "
              f"{args.repeats} repeats / {args.n_batches} batches x {args.batch_repeats} repeats; "
              f"p90 over the same items)")
        print(H.table(["system", "batch", "wall ms/q", "cpu ms/q", "cpu p90", "x wall", "x cpu", "same top-k"],
                      rows))
    print("  x = system time / irflow time on the same queries (> 1: irflow faster); "
          "same top-k = share of queries whose top-k rows equal irflow's")
    return results


def targets(results: Sequence[Mapping[str, Any]]) -> None:
    """Issue 12's dense targets, from the figures just measured (CPU clock, medians; p90 beside)."""
    print("\ntargets (issue 12): irflow / faiss time, < 1 means irflow faster (faiss: its BLAS path for batches)")

    def pick(n: int, keep: float | None, batch: int, system: str) -> Mapping[str, Any] | None:
        return next((r for r in results if r["n"] == n and r["filter"] == keep and r["batch"] == batch
                     and r["system"] == system), None)

    for n in sorted({r["n"] for r in results}):
        for batch in sorted({r["batch"] for r in results}):
            faiss_row = pick(n, None, batch, "faiss")
            mine = pick(n, None, batch, "irflow")
            if faiss_row is None or mine is None:
                continue
            line = (f"  {n} rows, batch {batch}: kernel {mine['cpu_ms'] / faiss_row['cpu_ms']:.2f} "
                    f"(p90 {mine['cpu_p90_ms'] / faiss_row['cpu_p90_ms']:.2f})")
            api = pick(n, None, batch, "search()" if batch == 1 else "Recipe.run")
            if api is not None:
                line += (f", {api['system']} {api['cpu_ms'] / faiss_row['cpu_ms']:.2f} "
                         f"(p90 {api['cpu_p90_ms'] / faiss_row['cpu_p90_ms']:.2f})")
            need = "<= 1.0" if batch > 1 else "<= 1.2"
            print(line + f"  [target {need}: {'met' if mine['cpu_ms'] <= faiss_row['cpu_ms'] * (1.0 if batch > 1 else 1.2) else 'NOT met'} by the kernel]")
        for system in ("irflow", "search()"):
            none, one = pick(n, None, 1, system), pick(n, 0.01, 1, system)
            if none and one:
                gain = none["cpu_ms"] / one["cpu_ms"]
                print(f"  {n} rows, single query, {system}: no filter / 1% filter = {gain:.1f}x "
                      f"(target >= 30) {'met' if gain >= 30 else 'NOT met'}")


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="row counts (comma list)")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=16, help="single queries timed")
    parser.add_argument("--batches", default="64,256", help="batch sizes (comma list)")
    parser.add_argument("--n-batches", type=int, default=3, help="batches timed per batch size")
    parser.add_argument("--repeats", type=int, default=5, help="repeats per single query")
    parser.add_argument("--batch-repeats", type=int, default=3, help="repeats per batch")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="BLAS/OpenMP threads (default 1; 0 = leave the pools as they are)")
    parser.add_argument("--no-faiss", action="store_true")
    parser.add_argument("--no-naive", action="store_true", help="skip the naive argsort")
    parser.add_argument("--no-api", dest="api", action="store_false",
                        help="skip search() / Recipe.run (building the corpus takes a while at 1M)")
    parser.add_argument("--filters", default="none,0.01,0.1,0.5",
                        help="filters: 'none' and kept fractions (comma list)")
    parser.add_argument("--base", default=None, metavar="DIR",
                        help="also time the dense_topk of another checkout (an older commit), interleaved")
    parser.add_argument("--quick", action="store_true", help="20k rows, few queries (smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.queries, args.batches, args.n_batches, args.repeats = "20000", 8, "64", 2, 3
        args.batch_repeats = 2
    args.batches = [int(b) for b in str(args.batches).split(",") if b]
    args.filters = [None if f.strip() == "none" else float(f) for f in args.filters.split(",") if f.strip()]
    args.base_module = None if args.base is None else H.load_base(args.base, "dense")
    controller = limit_threads(args.threads)  # noqa: F841 - kept alive for the run

    print("dense top-k benchmark: irflow dense_topk vs naive numpy argsort and faiss IndexFlatIP")
    for line in H.machine_lines():
        print(line)
    print(f"thread pools: {f'limited to {args.threads}' if args.threads else 'as configured (all cores)'}")
    if args.base_module is not None:
        print(f"irflow base: dense_topk of {args.base} (commit {args.base_module.REVISION})")
    results = []
    for n in [int(s) for s in args.sizes.split(",") if s]:
        results += run_size(n, args)
    targets(results)
    return results


if __name__ == "__main__":
    main()
