"""Exact dense top-k from int8 codes: irflow's compiled scan against its BLAS plan and faiss IndexFlatIP.

One exact query at 1M x 384 reads the whole float32 matrix (1.5 GB): memory
bandwidth is the limit.  irflow's compiled scan (``IRFLOW_DENSE_KERNEL``,
numba) reads int8 codes of the rows instead (a quarter of the bytes) with a
rigorous bound on their error, keeps the rows that can still reach the top
k, and rescores those exactly from the float32 vectors: the same rows and
score bits as the BLAS plan (checked here on every query).

Data, three kinds (``--kinds``):

* ``random`` — ``n`` x 384 Gaussian rows, L2-normalized (``dense.py``'s);
  queries are rows plus noise (a few true near neighbours each);
* ``clustered`` — 1,000 random centres, rows = a centre plus noise (cosine
  to their centre about 0.9), normalized; queries likewise near a row: a
  query's cluster (about n / 1,000 rows) scores close to the k-th best;
* ``scifact`` — the real all-MiniLM-L6-v2 vectors of SciFact's 5,183
  abstracts (title + text), queries its 1,109 claims, embedded once with
  irflow's ONNX embedder and cached under ``/tmp`` (``--cache``); skipped
  when the data or the model is absent.  Only 5,183 rows: its timings are
  small, its rescored fraction and window are the point.

Systems, all exact, top 10 by inner product: ``irflow`` —
``dense_topk(matrix, q, None, 10, index=codes)`` as a corpus calls it (the
compiled scan for batches up to ``SCAN_MAX_QUERIES`` — ``_GROUPED`` where it
takes four queries at once —, BLAS above); ``irflow int8 forced`` — the scan
for a larger batch too; ``irflow blas`` — the same
call without the codes (what an install without numba runs); ``faiss`` —
``IndexFlatIP`` (batches with its BLAS threshold at 20, as in ``dense.py``).  One thread per pool (threadpoolctl, faiss's
OpenMP); CPU time quoted, wall beside it; systems interleaved pass by pass
(``_harness.interleaved``), per item the median over ``--repeats``, then
median and p90 over items.  Also printed: the codes' build time and size,
bytes read per query (codes + the per-row numbers of every block + the
rescored rows' float32 vectors: an upper bound), rows rescored per query,
and the window (the bound on an estimate's error) against the k-th score.

With ``--api``: ``irflow.search(corpus, text, mode="hybrid")`` (default
recipe settings) over a corpus of ``pipeline.py``'s kind (records with
Zipfian texts, precomputed random vectors, a lookup query embedder) of
``--api-rows`` records, with the compiled scan and with BLAS, interleaved.

    python benchmarks/dense_codes.py                      # 1M random + clustered, SciFact (~15 min)
    python benchmarks/dense_codes.py --api                # plus hybrid search() at 1M (~10 min more)
    python benchmarks/dense_codes.py --quick              # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as H  # noqa: E402

H.ensure_irflow()

from dense import FAISS_BLAS_THRESHOLD, blas_threshold, limit_threads, make_matrix, make_queries  # noqa: E402

from irflow.kernels import dense as dense_module  # noqa: E402
from irflow.kernels import dense_kernel  # noqa: E402
from irflow.kernels.dense import dense_topk, row_norm_bound  # noqa: E402
from irflow.kernels.dense_index import BLOCK, DenseIndex, encode_queries  # noqa: E402

#: SciFact: ``$IRFLOW_DATA/scifact``, else ``shared/data/scifact`` beside the checkout or one level up
#: (a git worktree sits a level deeper than the main checkout).
SCIFACT = next((p for p in ([Path(os.environ["IRFLOW_DATA"]) / "scifact"] if os.environ.get("IRFLOW_DATA") else [])
                + [Path(H.REPO).parent / "shared" / "data" / "scifact",
                   Path(H.REPO).parent.parent / "shared" / "data" / "scifact"] if p.is_dir()),
               Path(H.REPO).parent / "shared" / "data" / "scifact")


# -- data ---------------------------------------------------------------------------------


def clustered(n: int, d: int, seed: int, centres: int = 1000, spread: float = 0.5) -> np.ndarray:
    """Rows near one of ``centres`` random directions (cosine to it about 0.9), normalized."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centres, d), dtype=np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    out = np.empty((n, d), dtype=np.float32)
    for lo in range(0, n, 100_000):
        m = min(100_000, n - lo)
        block = c[rng.integers(0, centres, m)] + spread * rng.standard_normal((m, d), dtype=np.float32) / np.sqrt(d)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[lo:lo + m] = block
    return out


def scifact(cache: Path, folder: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """SciFact's abstracts and claims as all-MiniLM-L6-v2 vectors (cached), or None when unavailable."""
    if (cache / "docs.npy").is_file() and (cache / "queries.npy").is_file():
        return np.load(cache / "docs.npy"), np.load(cache / "queries.npy")
    if not (folder / "corpus.jsonl").is_file():
        print(f"  scifact: no data at {folder}: skipped")
        return None
    from irflow.kernels.embedders import resolve_embedder

    try:
        embedder = resolve_embedder("onnx:all-MiniLM-L6-v2")
        assert embedder is not None
        with open(folder / "corpus.jsonl") as f:
            docs = [json.loads(line) for line in f]
        with open(folder / "queries.jsonl") as f:
            claims = [json.loads(line)["text"] for line in f]
        t0 = time.perf_counter()
        d = embedder.embed_documents([(x.get("title", "") + " " + x.get("text", "")).strip() for x in docs])
        q = embedder.embed_queries(claims)
    except Exception as error:  # noqa: BLE001 - the model extra may be missing: the kind is skipped
        print(f"  scifact: the ONNX embedder is unavailable ({error}): skipped")
        return None
    print(f"  scifact: embedded {len(docs)} abstracts and {len(claims)} claims in {time.perf_counter() - t0:.0f} s")
    cache.mkdir(parents=True, exist_ok=True)
    np.save(cache / "docs.npy", np.asarray(d, np.float32))
    np.save(cache / "queries.npy", np.asarray(q, np.float32))
    return np.asarray(d, np.float32), np.asarray(q, np.float32)


# -- what the scan does -----------------------------------------------------------------------


def scan_stats(index: DenseIndex, matrix: np.ndarray, queries: np.ndarray, k: int) -> dict[str, float]:
    """Rows rescored per query, the window against the k-th score, and the bytes read."""
    n, d = matrix.shape
    rescored, windows, kth = [], [], []
    for q in queries:
        found = dense_kernel.scan_candidates(index, q[None, :], None, k)
        assert found is not None
        rescored.append(found[1].size)
        codes = encode_queries(q[None, :])
        w = index.error * codes.coded_norm[0] + index.norm * codes.error[0]
        windows.append(float(np.median(w)))
        kth.append(float(dense_topk(matrix, q, None, k, index=index).score[-1]))
    median_rescored = statistics.median(rescored)
    bytes_codes = n * d + n * 24 + (n + BLOCK - 1) // BLOCK * 32  # codes, per-row numbers, per-block bounds
    return {"rescored": median_rescored, "rescored_p90": float(np.percentile(rescored, 90)),
            "fraction": median_rescored / n, "window": statistics.median(windows), "kth": statistics.median(kth),
            "bytes": bytes_codes + median_rescored * d * 4, "bytes_float": n * d * 4}


def scan_limit() -> int:
    """The largest batch the int8 scan ranks here (more queries: BLAS)."""
    return dense_module.SCAN_MAX_QUERIES_GROUPED if dense_kernel.grouped_scan() else dense_module.SCAN_MAX_QUERIES


def forced_scan(matrix: np.ndarray, q: np.ndarray, k: int, index: DenseIndex) -> Any:
    """``dense_topk`` with the int8 scan whatever the batch size."""
    saved = dense_module.SCAN_MAX_QUERIES, dense_module.SCAN_MAX_QUERIES_GROUPED
    dense_module.SCAN_MAX_QUERIES = dense_module.SCAN_MAX_QUERIES_GROUPED = 1 << 30
    try:
        return dense_topk(matrix, q, None, k, index=index)
    finally:
        dense_module.SCAN_MAX_QUERIES, dense_module.SCAN_MAX_QUERIES_GROUPED = saved


# -- one data set ---------------------------------------------------------------------------


def run_kind(label: str, matrix: np.ndarray, queries: np.ndarray, args: argparse.Namespace) -> list[dict[str, Any]]:
    n, d = matrix.shape
    k = args.k
    matrix.flags.writeable = False
    row_norm_bound(matrix)  # once, as a corpus does
    dense_kernel.compiled_module()  # numba's import, outside the build's time
    t0 = time.perf_counter()
    index = dense_kernel.build_index(matrix)
    build_s = time.perf_counter() - t0
    assert index is not None, "the compiled scan is not available (numba)"
    print(f"\n=== {label}: {n} x {d} float32 ({matrix.nbytes / 2**20:.0f} MiB); codes built in {build_s:.2f} s "
          f"(first call in a process also loads numba's cached code), {index.nbytes / 2**20:.0f} MiB ===")
    stats = scan_stats(index, matrix, queries[:args.queries], k)
    print(f"  rows rescored per query: median {stats['rescored']:.0f} ({stats['fraction']:.2e} of the rows), "
          f"p90 {stats['rescored_p90']:.0f}; window (median over rows) {stats['window']:.4f} against a k-th score "
          f"of {stats['kth']:.3f}")
    print(f"  bytes read per query: {stats['bytes'] / 2**20:.0f} MiB (codes, per-row and per-block bounds, rescored "
          f"rows) against {stats['bytes_float'] / 2**20:.0f} MiB for the float32 matrix "
          f"({stats['bytes_float'] / stats['bytes']:.2f}x fewer)")
    fi = None
    if H.have("faiss") and not args.no_faiss:
        import faiss

        fi = faiss.IndexFlatIP(d)
        fi.add(matrix)
    results = []
    for b in [1] + [x for x in args.batches if x > 1]:
        count = args.queries if b == 1 else args.n_batches
        items = [queries[i * b:(i + 1) * b] for i in range(count) if (i + 1) * b <= queries.shape[0]]
        systems: dict[str, Callable[[np.ndarray], Any]] = {
            "irflow": lambda q: dense_topk(matrix, q, None, k, index=index),
            "irflow blas": lambda q: dense_topk(matrix, q, None, k),
        }
        if b > scan_limit():  # the corpus's plan is BLAS here: the scan forced, for comparison
            systems["irflow int8 forced"] = lambda q: forced_scan(matrix, q, k, index)
        if fi is not None:
            def faiss_run(q: np.ndarray, threshold: int | None = None if b == 1 else FAISS_BLAS_THRESHOLD) -> Any:
                with blas_threshold(threshold):
                    return fi.search(q, k)
            systems["faiss"] = faiss_run
        reps = args.repeats if b == 1 else args.batch_repeats
        plan = {name: ((lambda i, run=run, items=items: run(items[i])), len(items), reps)
                for name, run in systems.items()}
        timing = H.interleaved(plan, len(items))
        same = all(forced_scan(matrix, q, k, index) == dense_topk(matrix, q, None, k) for q in items)
        agree = 1.0 if fi is None else float(np.mean([
            np.array_equal(dense_topk(matrix, q, None, k, index=index).row.reshape(q.shape[0], -1),
                           fi.search(q, k)[1]) for q in items]))
        rows = []
        mine = timing["irflow"]
        for name in systems:
            t = timing[name]
            rows.append([name, b, t.median_ms("wall") / b, t.median_ms("cpu") / b, t.p90_ms("cpu") / b,
                         H.ratio(t.median_ms("cpu"), mine.median_ms("cpu")),
                         H.ratio(t.p90_ms("cpu"), mine.p90_ms("cpu"))])
            results.append({"kind": label, "n": n, "batch": b, "system": name, "cpu_ms": t.median_ms("cpu") / b,
                            "cpu_p90_ms": t.p90_ms("cpu") / b, "build_s": build_s, **stats})
        print(f"\n{label}, batch {b}: top-{k} time per query, ms ({len(items)} items x {reps} repeats, interleaved; "
              f"medians, p90 over items); int8 scan = blas to the bit on every item: {'yes' if same else 'NO'}; "
              f"int8 rows = faiss rows on {agree:.0%} of items")
        print(H.table(["system", "batch", "wall ms/q", "cpu ms/q", "cpu p90", "x cpu", "x p90"], rows))
    print(f"  irflow = dense_topk with the codes, as a corpus runs it: the int8 scan for batches of up to "
          f"{scan_limit()} queries (four at once: {'yes' if dense_kernel.grouped_scan() else 'no'}), BLAS above; "
          "x = system time / irflow time on the same items (> 1: irflow faster)")
    return results


def api_corpus(n_rows: int, n_queries: int, seed: int) -> tuple[Any, list[str]]:
    """``pipeline.py``'s kind of corpus, made faster for 1M rows: every text's words drawn in one call.

    Records of four kinds per artifact with Zipfian texts (the kind's mean
    length), precomputed random normalized vectors, a lookup query embedder
    (query text -> a vector near a random record).
    """
    import irflow
    from irflow.store.records import Record
    from pipeline import KINDS, LENGTHS

    rng = np.random.default_rng(seed)
    vocab = 30_000
    law = 1.0 / np.arange(1, vocab + 1) ** 1.05
    law /= law.sum()
    words = np.array([f"w{i}" for i in range(vocab)], dtype=object)
    n_artifacts = n_rows // len(KINDS)
    n = n_artifacts * len(KINDS)
    vectors = make_matrix(n, 384, seed)
    lengths = np.maximum(1, rng.poisson([LENGTHS[kind] for kind in KINDS] * n_artifacts))
    drawn = words[rng.choice(vocab, size=int(lengths.sum()), p=law)]
    ends = np.cumsum(lengths)
    records = [Record(f"pkg{i // len(KINDS)}", KINDS[i % len(KINDS)], " ".join(drawn[end - size:end]),
                      {"owner": f"o{(i // len(KINDS)) % 97}"}, surface_index=i % len(KINDS), vector=vectors[i])
               for i, (size, end) in enumerate(zip(lengths.tolist(), ends.tolist()))]
    texts: list[str] = []
    table: dict[str, np.ndarray] = {}
    while len(texts) < n_queries:
        text = " ".join(words[rng.choice(vocab, size=int(rng.integers(2, 5)), p=law)])
        if text not in table:
            near = vectors[rng.integers(0, n)] + 0.5 * rng.standard_normal(384, dtype=np.float32) / np.sqrt(384)
            table[text] = (near / np.linalg.norm(near)).astype(np.float32)
            texts.append(text)
    corpus = irflow.build(records, embedder=H.LookupEmbedder(table, 384))
    return corpus, texts


def run_api(args: argparse.Namespace) -> None:
    """``search(mode="hybrid")`` with the default recipe settings, compiled scan vs BLAS, interleaved."""
    import irflow

    t0 = time.perf_counter()
    corpus, texts = api_corpus(args.api_rows, args.queries, args.seed)
    print(f"\n=== search(mode='hybrid') at {corpus.n_rows} records (pipeline.py's kind of corpus, built in "
          f"{time.perf_counter() - t0:.0f} s), default recipe settings, top 10 ===")
    with dense_kernel.use_kernel("numba"):
        t0, c0 = time.perf_counter(), time.process_time()
        irflow.search(corpus, texts[0], mode="hybrid")
        print(f"  first query (builds the int8 codes, the norm bound, the masks): {time.perf_counter() - t0:.1f} s "
              f"wall, {time.process_time() - c0:.1f} s CPU")
    with dense_kernel.use_kernel("numpy"):
        irflow.search(corpus, texts[0], mode="hybrid")
    systems = {}
    for name in ("numba", "numpy"):
        def run(i: int, name: str = name) -> Any:
            with dense_kernel.use_kernel(name):
                return irflow.search(corpus, texts[i], mode="hybrid")
        systems[f"search() {'int8' if name == 'numba' else 'blas'}"] = (run, len(texts), args.repeats)
    timing = H.interleaved(systems, len(texts))
    same = all([(h.record_id, h.score) for h in systems["search() int8"][0](i)]
               == [(h.record_id, h.score) for h in systems["search() blas"][0](i)] for i in range(len(texts)))
    rows = [[name, t.median_ms("wall"), t.median_ms("cpu"), t.p90_ms("cpu")] for name, t in timing.items()]
    print(f"  hits (record, score) equal on every query: {'yes' if same else 'NO'}; {len(texts)} queries x "
          f"{args.repeats} repeats, interleaved; p50 = median over queries")
    print(H.table(["system", "wall p50 ms", "cpu p50 ms", "cpu p90 ms"], rows))
    with dense_kernel.use_kernel("numba"):
        parts = {"dense_topk k=50": lambda i: corpus.dense_topk(corpus.embed_queries([texts[i]]), None, 50),
                 "bm25_topk k=50": lambda i: corpus.bm25_topk(corpus.tokenize_queries([texts[i]]), None, 50)}
        split = H.interleaved({name: (f, len(texts), args.repeats) for name, f in parts.items()}, len(texts))
    print("  its kernels alone (scan on): " + ", ".join(f"{name} {t.median_ms('cpu'):.2f} ms (p90 "
                                                       f"{t.p90_ms('cpu'):.2f})" for name, t in split.items()))


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000000", help="rows of the random and clustered kinds (comma list)")
    parser.add_argument("--kinds", default="random,clustered,scifact")
    parser.add_argument("--queries", type=int, default=16, help="single queries timed")
    parser.add_argument("--batches", default="64", help="batch sizes (comma list)")
    parser.add_argument("--n-batches", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-repeats", type=int, default=3)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads (0: leave the pools)")
    parser.add_argument("--no-faiss", action="store_true")
    parser.add_argument("--api", action="store_true", help="also hybrid search() at --api-rows records")
    parser.add_argument("--api-rows", type=int, default=1_000_000)
    parser.add_argument("--cache", default="/tmp/irflow-bench-scifact-minilm", help="SciFact vectors cache")
    parser.add_argument("--scifact", default=str(SCIFACT), help="SciFact folder (BEIR layout); skipped if absent")
    parser.add_argument("--quick", action="store_true", help="20k rows, few queries (smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.queries, args.batches, args.n_batches, args.repeats, args.batch_repeats = \
            "20000", 4, "8", 1, 2, 1
        args.kinds, args.api_rows = "random,clustered", 8000
    args.batches = [int(b) for b in str(args.batches).split(",") if b]
    controller = limit_threads(args.threads)  # noqa: F841 - kept alive for the run
    print("dense int8 codes benchmark: irflow compiled scan (int8) vs irflow BLAS plan and faiss IndexFlatIP")
    for line in H.machine_lines():
        print(line)
    print(f"thread pools: {f'limited to {args.threads}' if args.threads else 'as configured'}; "
          f"{dense_kernel.KERNEL_ENV}={os.environ.get(dense_kernel.KERNEL_ENV, '(unset)')}; the machine is shared: "
          "medians and p90 of interleaved runs")
    results: list[dict[str, Any]] = []
    with dense_kernel.use_kernel("numba"):
        for kind in [x.strip() for x in args.kinds.split(",") if x.strip()]:
            if kind == "scifact":
                data = scifact(Path(args.cache), Path(args.scifact))
                if data is not None:
                    results += run_kind("scifact MiniLM", data[0], data[1], args)
                continue
            for n in [int(s) for s in args.sizes.split(",") if s]:
                matrix = make_matrix(n, 384, args.seed) if kind == "random" else clustered(n, 384, args.seed)
                queries = make_queries(matrix, max(args.queries, max(args.batches) * args.n_batches), args.seed)
                results += run_kind(f"{kind} {n}", matrix, queries, args)
                del matrix
    if args.api:
        run_api(args)
    return results


if __name__ == "__main__":
    main()
