"""Lexical top-k: irflow's BM25 (kernel and public API) against rank_bm25 and bm25s, in one run on the same data.

Datasets:

- ``issue12``: issue 12's corpus (``zipf_corpus.py``): a Zipf vocabulary of
  50k words, documents of 20-200 tokens (mean 60), at 100k and 1M records,
  with two query mixes: tokens drawn at corpus frequency (``corpus``: mostly
  common words) and content words only (``content``: ranks >= 100);
- ``zipf``: the project's first synthetic corpus (exponent 1.05, Poisson
  lengths of mean 40, queries at corpus frequency), at 100k;
- SciFact (``$IRFLOW_DATA/scifact`` or ``../shared/data/scifact``: title +
  text, irflow's "english" analyzer; skipped when absent).

Every system gets the same tokens: the peers and irflow's kernel the token
lists, irflow's public API the texts, which its analyzer ("plain" for the
synthetic corpora, whose words are ``w<rank>``) cuts back into the same
tokens.

Systems, single queries, top 10, interleaved pass by pass:

- ``irflow kernel``: ``bm25_topk`` on the corpus's postings, the kernel this
  process runs (compiled with numba when installed and the corpus has at
  least 50k records, see ``irflow.kernels.bm25.kernel``);
- ``irflow kernel numpy``: the same with the numpy kernel forced (what an
  install without numba runs);
- ``irflow kernel k50``: the kernel at top 50, the seed's over-fetch (the
  call ``search()`` makes on a corpus of several surfaces per artifact);
- ``irflow search()``: ``irflow.search(corpus, text, mode="lexical", k=10)``
  (the engine: recipe parameters, filter stage, tokenizing, the kernel at
  top 10 — these corpora hold one record per artifact, so search() fetches
  ``k`` —, collapse per artifact, hits; search() minus ``irflow kernel`` is
  the engine's share);
- ``irflow recipe``: ``load_recipe("lexical").run(corpus, text, k=10)``;
- ``irflow kernel 1%`` / ``irflow search() 1%``: the same with a metadata
  filter keeping 1% of the records (``{"group": 7}``; statistics over the
  candidates, the seed's semantics);
- ``rank_bm25``: ``BM25Okapi.get_scores`` + ``argpartition`` (at most
  ``--rank-max-docs`` records, 100k: it scores every record in Python, and
  answers only the first ``--rank-queries`` queries);
- ``bm25s numpy`` / ``bm25s numba``: bm25s's two backends, one thread.

bm25s scores with Lucene's idf, so only its speed is compared; irflow's
scores must equal rank_bm25's (max |difference| over the top 10 printed) and
the compiled kernel's the numpy kernel's, to the bit (checked on every query).

Figures per dataset and query mix: CPU ms per query (median over
``--repeats`` passes, then median / p90 / mean over queries), ratios peer /
irflow on median and p90, the queries where irflow is slower, and what
part of ``search()`` is the engine (search() minus the kernel).  Per dataset,
in a fresh child process per system (``--no-memory`` skips): build time,
peak and retained RSS of building the index (irflow's postings alone, and
``irflow.build`` end to end from records; bm25s's ``index`` on the token
lists, and ``tokenize`` + ``index`` from the texts), the index's size on
disk, and the peak of a first batch of queries.

    python benchmarks/lexical.py                          # everything (about 40 minutes)
    python benchmarks/lexical.py --datasets issue12 --sizes 100000,1000000 --no-memory
    python benchmarks/lexical.py --quick                  # smoke test, under a minute
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as H  # noqa: E402
import zipf_corpus as Z  # noqa: E402

H.ensure_irflow()

import irflow  # noqa: E402
from irflow.kernels import bm25 as B  # noqa: E402
from irflow.kernels.bm25 import BM25Params, bm25_topk  # noqa: E402
from irflow.kernels.bm25.kernel import AUTO_MIN_ROWS, KERNEL_ENV  # noqa: E402
from irflow.kernels.postings import Postings  # noqa: E402

DATA = os.environ.get("IRFLOW_DATA") or os.path.join(H.REPO, "..", "shared", "data")
SCIFACT = os.path.join(DATA, "scifact")
IRFLOW = ("irflow kernel", "irflow kernel numpy", "irflow kernel k50", "irflow search()", "irflow recipe")
FILTERED = ("irflow kernel 1%", "irflow search() 1%")
PEERS = ("rank_bm25", "bm25s numpy", "bm25s numba")
SYSTEMS = IRFLOW + FILTERED + PEERS
FILTER = {"group": 7}  # records carry group = row % 100: 1% of them


# -- data ---------------------------------------------------------------------------------


def legacy_corpus(n_docs: int, vocab: int, exponent: float, mean_length: float,
                  seed: int) -> tuple[list[list[str]], np.ndarray]:
    """The first benchmark's corpus: ``n_docs`` token lists over ``vocab`` Zipfian terms, and the law."""
    rng = np.random.default_rng(seed)
    law = 1.0 / np.arange(1, vocab + 1) ** exponent
    law /= law.sum()
    lengths = np.maximum(rng.poisson(mean_length, n_docs), 1)
    tokens = rng.choice(vocab, size=int(lengths.sum()), p=law)
    words = [f"t{i}" for i in range(vocab)]
    flat = [words[i] for i in tokens.tolist()]
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    return [flat[bounds[i]:bounds[i + 1]] for i in range(n_docs)], law


def legacy_queries(n_queries: int, law: np.ndarray, seed: int) -> list[list[str]]:
    """Queries of 2-5 terms drawn from the corpus's own term law."""
    rng = np.random.default_rng(seed + 1)
    return [[f"t{i}" for i in rng.choice(law.size, size=int(rng.integers(2, 6)), p=law)]
            for _ in range(n_queries)]


def scifact(path: str, n_queries: int) -> tuple[list[str], list[list[str]], list[str], list[list[str]]]:
    """SciFact's texts (title + text) and tokens, its first queries' texts and tokens ("english" analyzer)."""
    from irflow.kernels.text import get_analyzer

    analyzer = get_analyzer("english")
    with open(os.path.join(path, "corpus.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    with open(os.path.join(path, "queries.jsonl"), encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    docs_text = [f"{r.get('title', '')} {r.get('text', '')}" for r in rows]
    queries = [(t, q) for t, q in zip(texts, analyzer.tokenize_many(texts)) if q][:n_queries]
    return docs_text, analyzer.tokenize_many(docs_text), [t for t, _ in queries], [q for _, q in queries]


def load(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A dataset: token lists, texts (a callable: made on demand), analyzer, query mixes (texts and tokens)."""
    if spec["kind"] == "issue12":
        docs = Z.zipf_docs(spec["docs"], seed=spec["seed"])
        mixes = {mix: Z.zipf_queries(spec["queries"], mix, seed=spec["seed"]) for mix in Z.MIXES}
        return {"docs": docs, "texts": lambda: (" ".join(d) for d in docs), "analyzer": "plain",
                "mixes": {m: ([" ".join(q) for q in qs], qs) for m, qs in mixes.items()}}
    if spec["kind"] == "zipf":
        docs, law = legacy_corpus(spec["docs"], spec["vocab"], spec["zipf"], spec["length"], spec["seed"])
        queries = legacy_queries(spec["queries"], law, spec["seed"])
        return {"docs": docs, "texts": lambda: (" ".join(d) for d in docs), "analyzer": "plain",
                "mixes": {"corpus": ([" ".join(q) for q in queries], queries)}}
    texts, docs, query_texts, queries = scifact(spec["path"], spec["queries"])
    return {"docs": docs, "texts": lambda: iter(texts), "analyzer": "english",
            "mixes": {"queries": (query_texts, queries)}}


def records(data: Mapping[str, Any]) -> list[irflow.Record]:
    """One record per document (its own artifact), ``group`` = row % 100 for the 1% filter."""
    return [irflow.Record(f"d{i}", "text", text, {"group": i % 100}) for i, text in enumerate(data["texts"]())]


# -- systems ------------------------------------------------------------------------------


def build_peer(system: str, docs: Sequence[Sequence[str]]) -> Any:
    if system == "rank_bm25":
        from rank_bm25 import BM25Okapi

        return BM25Okapi(docs)
    import bm25s

    index = bm25s.BM25(backend="numba" if H.have("numba") else "numpy")
    index.index(docs, show_progress=False)
    return index


def searchers(systems: Sequence[str], corpus: Any, peers: Mapping[str, Any], k: int,
              texts: Sequence[str], queries: Sequence[Sequence[str]]) -> dict[str, Callable[[int], Any]]:
    """``run(i)`` answering query ``i`` for each system."""
    params = BM25Params()
    postings = corpus.postings
    recipe = irflow.load_recipe("lexical")
    mask = corpus.candidate_mask(FILTER)
    runs: dict[str, Callable[[int], Any]] = {}
    for system in systems:
        if system == "irflow kernel":
            runs[system] = lambda i: bm25_topk(postings, [queries[i]], None, k, params)
        elif system == "irflow kernel numpy":
            def numpy_kernel(i: int) -> Any:
                with B.use_kernel("numpy"):
                    return bm25_topk(postings, [queries[i]], None, k, params)
            runs[system] = numpy_kernel
        elif system == "irflow kernel k50":  # the seed's over-fetch (fetch_k = max(5k, 50))
            runs[system] = lambda i: bm25_topk(postings, [queries[i]], None, max(5 * k, 50), params)
        elif system == "irflow search()":
            runs[system] = lambda i: irflow.search(corpus, texts[i], mode="lexical", k=k)
        elif system == "irflow recipe":
            runs[system] = lambda i: recipe.run(corpus, texts[i], k=k)
        elif system == "irflow kernel 1%":
            runs[system] = lambda i: corpus.bm25_topk([queries[i]], mask, k, params)
        elif system == "irflow search() 1%":
            runs[system] = lambda i: irflow.search(corpus, texts[i], mode="lexical", k=k, filter=FILTER)
        elif system == "rank_bm25":
            index = peers["rank_bm25"]

            def rank(i: int, index: Any = index) -> Any:
                scores = index.get_scores(queries[i])
                top = np.argpartition(-scores, k)[:k]
                return top[np.argsort(-scores[top], kind="stable")]
            runs[system] = rank
        else:
            runs[system] = _bm25s_run(peers["bm25s"], "numba" if system == "bm25s numba" else "numpy",
                                      queries, k)
    return runs


def _bm25s_run(index: Any, backend: str, queries: Sequence[Sequence[str]], k: int) -> Callable[[int], Any]:
    """bm25s on one backend: one index, its ``backend`` attribute picks the retrieval code (numba or numpy)."""
    def run(i: int) -> Any:
        index.backend = backend
        return index.retrieve([queries[i]], k=k, show_progress=False, n_threads=0, backend_selection=backend)
    return run


def available(n_docs: int, args: argparse.Namespace) -> list[str]:
    systems = [s for s in SYSTEMS if s in args.systems]
    if n_docs > args.rank_max_docs or not H.have("rank_bm25"):
        systems = [s for s in systems if s != "rank_bm25"]
    if not H.have("bm25s"):
        systems = [s for s in systems if not s.startswith("bm25s")]
    if not H.have("numba"):
        systems = [s for s in systems if s != "bm25s numba"]
    return systems


# -- memory and build (one fresh process per system) ---------------------------------------


MEMORY_SYSTEMS = ("irflow postings", "irflow build()", "bm25s index", "bm25s tokenize+index", "rank_bm25")


def _dir_mb(path: str) -> float:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files) / 2**20


def child(payload: Mapping[str, Any]) -> None:
    """Build one system's index over the dataset in this fresh process: time, peak / retained RSS, disk, query peak."""
    data = load(payload["data"])
    system, k = payload["system"], payload["k"]
    queries = data["mixes"][next(iter(data["mixes"]))][1][: payload["batch"]]
    texts = list(data["texts"]()) if system in ("irflow build()", "bm25s tokenize+index") else None
    made = records(data) if system == "irflow build()" else None
    if texts is not None:
        del data["docs"]
    probe = H.MemoryProbe()
    probe.start()
    wall, cpu, index = H.measure(lambda: _build_for_memory(system, data, texts, made))
    built = probe.stop()
    disk = None
    with tempfile.TemporaryDirectory() as tmp:
        if system == "irflow postings":
            for name, array in index.arrays().items():
                np.save(os.path.join(tmp, name + ".npy"), array)
            disk = _dir_mb(tmp)
        elif system.startswith("bm25s"):
            index.save(tmp)
            disk = _dir_mb(tmp)
    probe.start()
    if system.startswith("irflow"):
        postings = index if system == "irflow postings" else index.postings
        bm25_topk(postings, queries, None, k)
    elif system == "rank_bm25":
        for q in queries:
            index.get_scores(q)
    else:
        index.retrieve(queries, k=k, show_progress=False, n_threads=0)
    queried = probe.stop()
    extra = {}
    if system == "irflow build()":
        with tempfile.TemporaryDirectory() as tmp:  # on disk: the whole corpus, and its postings files
            probe.start()  # the build that writes the corpus: its peak too
            irflow.build(made, embedder=None, analyzer=data["analyzer"], path=os.path.join(tmp, "c"))
            extra = {"disk_build_peak_mb": probe.stop()["peak_mb"], "disk_corpus_mb": _dir_mb(tmp),
                     "disk_mb": sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(tmp)
                                    for f in fs if "postings" in f) / 2**20}
    print(json.dumps({"build_cpu_s": cpu, "build_wall_s": wall, "build_peak_mb": built["peak_mb"],
                      "retained_mb": built["retained_mb"], "query_peak_mb": queried["peak_mb"],
                      "disk_mb": disk, **extra, "method": probe.method}))


def _build_for_memory(system: str, data: Mapping[str, Any], texts: Sequence[str] | None,
                      made: Sequence[irflow.Record] | None) -> Any:
    if system == "irflow postings":
        postings = Postings.build(data["docs"])
        postings.head_columns()  # built by the first query otherwise
        return postings
    if system == "irflow build()":
        corpus = irflow.build(made, embedder=None, analyzer=data["analyzer"])
        corpus.postings.head_columns()
        return corpus
    if system == "rank_bm25":
        return build_peer("rank_bm25", data["docs"])
    import bm25s

    index = bm25s.BM25()
    if system == "bm25s index":
        index.index(data["docs"], show_progress=False)
    else:  # from the texts, as irflow.build: bm25s's own tokenizer (words of 2+ characters, no stopwords)
        index.index(bm25s.tokenize(texts, stopwords=None, show_progress=False), show_progress=False)
    return index


# -- one dataset --------------------------------------------------------------------------


def agreement(postings: Postings, rank: Any, queries: Sequence[Sequence[str]], k: int) -> tuple[float, int]:
    """Max |irflow - rank_bm25| over each query's top k, and how many top-k row lists are identical."""
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


def same_bits(postings: Postings, queries: Sequence[Sequence[str]], k: int) -> int:
    """Queries whose top k (rows and score bits) the compiled and numpy kernels agree on."""
    same = 0
    for query in queries:
        with B.use_kernel("numpy"):
            want = bm25_topk(postings, [query], None, k)
        with B.use_kernel("numba"):
            same += bm25_topk(postings, [query], None, k) == want
    return same


def run_mix(label: str, systems: list[str], runs: Mapping[str, Callable[[int], Any]], n_queries: int,
            rank_queries: int, args: argparse.Namespace, n_docs: int) -> dict[str, Any]:
    rank_repeats = 1 if n_docs >= 500_000 else min(args.repeats, 3)
    single = H.interleaved(
        {s: (runs[s], rank_queries if s == "rank_bm25" else n_queries,
             rank_repeats if s == "rank_bm25" else args.repeats) for s in systems}, n_queries)
    print(f"\n-- query mix: {label} ({n_queries} queries; CPU ms per query: median over {args.repeats} "
          f"interleaved passes, then over queries) --")
    rows = [[s + (f" ({rank_queries} q)" if s == "rank_bm25" else ""), single[s].median_ms(),
             single[s].p90_ms(), single[s].mean_ms(), single[s].median_ms("wall")] for s in systems]
    print(H.table(["system", "median", "p90", "mean", "wall median"], rows))
    mine = [s for s in IRFLOW + FILTERED if s in systems]
    peers = [p for p in PEERS if p in systems]
    figures: dict[str, Any] = {s: {"median": single[s].median_ms(), "p90": single[s].p90_ms()} for s in systems}
    if peers:
        print("\nratios peer / irflow (> 1: irflow faster), median (p90), on the same queries:")
        header, rows = ["irflow system"] + [f"vs {p}" for p in peers], []
        for s in mine:
            if s.endswith("1%"):
                continue
            row = [s]
            for p in peers:
                first = rank_queries if p == "rank_bm25" else None
                med = H.ratio(single[p].median_ms("cpu", first), single[s].median_ms("cpu", first))
                p90 = H.ratio(single[p].p90_ms("cpu", first), single[s].p90_ms("cpu", first))
                row.append(f"{med:.2f} ({p90:.2f})")
                figures[s][f"x {p}"] = (med, p90)
            rows.append(row)
        print(H.table(header, rows))
        for s in ("irflow kernel", "irflow kernel numpy", "irflow search()"):
            for p in ("bm25s numba",):
                if s in single and p in single:
                    slower = [i for i in range(n_queries) if single[s].cpu[i] > single[p].cpu[i]]
                    print(f"  {s} slower than {p} on {len(slower)}/{n_queries} queries"
                          + (f" (worst {max(single[s].cpu[i] / single[p].cpu[i] for i in slower):.1f}x)"
                             if slower else ""))
    if "irflow search()" in single and "irflow kernel" in single:
        # the engine's share: search() minus the kernel call it makes — top 10: each record of these corpora
        # is an artifact of its own, so search() fetches k (the recipes' lean), not the seed's 50
        kernel, search = single["irflow kernel"].median_ms(), single["irflow search()"].median_ms()
        print(f"  search(): {search:.3f} ms median, of which the kernel {kernel:.3f} ms (top 10, the call search() "
              f"makes here) and the engine {search - kernel:.3f} ms ({100 * (search - kernel) / search:.0f}%); "
              f"search() / kernel = {search / kernel:.2f}x")
        figures["engine_ms"] = search - kernel
    for s, base in (("irflow search() 1%", "irflow search()"), ("irflow kernel 1%", "irflow kernel")):
        if s in single and base in single:
            print(f"  1% filter: {base} {single[base].median_ms():.3f} ms -> {single[s].median_ms():.3f} ms "
                  f"({single[base].median_ms() / single[s].median_ms():.1f}x faster than no filter; p90 "
                  f"{single[base].p90_ms() / single[s].p90_ms():.1f}x)")
    return figures


def run_dataset(label: str, spec: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    print(f"\n=== {label} ===")
    t0 = time.perf_counter()
    data = load(spec)
    docs = data["docs"]
    n_docs = len(docs)
    print(f"{n_docs} records, {sum(map(len, docs))} tokens (made in {time.perf_counter() - t0:.1f} s); "
          f"irflow's kernel at this size: {B.kernel_name(n_docs)}")
    systems = available(n_docs, args)
    peers: dict[str, Any] = {}
    t0 = time.perf_counter()
    corpus = irflow.build(records(data), embedder=None, analyzer=data["analyzer"])
    corpus.postings.head_columns()
    print(f"irflow corpus built in {time.perf_counter() - t0:.1f} s (wall)")
    if "rank_bm25" in systems:
        peers["rank_bm25"] = build_peer("rank_bm25", docs)
    if any(s.startswith("bm25s") for s in systems):
        peers["bm25s"] = build_peer("bm25s", docs)
        if "bm25s numba" in systems:  # compile outside the timings
            _bm25s_run(peers["bm25s"], "numba", [docs[0][:2]], 2)(0)
    results: dict[str, Any] = {"n_docs": n_docs}
    for mix, (texts, queries) in data["mixes"].items():
        rank_queries = min(len(queries), args.rank_queries or max(5, min(len(queries), 2_000_000 // n_docs)))
        if "rank_bm25" in peers:
            worst, same = agreement(corpus.postings, peers["rank_bm25"], queries[:rank_queries], args.k)
            print(f"agreement with rank_bm25 on {rank_queries} {mix} queries: max |irflow - rank_bm25| on the top "
                  f"{args.k} = {worst:.2e}; identical top-{args.k} rows: {same}/{rank_queries}")
        if H.have("numba"):
            print(f"compiled kernel = numpy kernel, rows and bits, on {same_bits(corpus.postings, queries, args.k)}"
                  f"/{len(queries)} {mix} queries")
        runs = searchers(systems, corpus, peers, args.k, texts, queries)
        for s in systems:  # warm: lazy statistics, masks, compiled code
            runs[s](0)
        results[mix] = run_mix(mix, systems, runs, len(queries), rank_queries, args, n_docs)
    del corpus, peers
    if not args.no_memory:
        memory_table(spec, n_docs, args)
    return results


def memory_table(spec: dict[str, Any], n_docs: int, args: argparse.Namespace) -> None:
    rows, errors, method = [], {}, None
    for system in MEMORY_SYSTEMS:
        if system == "rank_bm25" and (n_docs > args.rank_max_docs or not H.have("rank_bm25")):
            continue
        if system.startswith("bm25s") and not H.have("bm25s"):
            continue
        got = H.run_child(os.path.abspath(__file__), {"system": system, "data": spec, "k": args.k,
                                                     "batch": args.batch})
        if "error" in got:
            errors[system] = got["error"]
            continue
        method = got.get("method")
        rows.append([system, got["build_cpu_s"], got["build_wall_s"], got["build_peak_mb"], got["retained_mb"],
                     got.get("disk_mb"), got.get("disk_corpus_mb"), got.get("disk_build_peak_mb"),
                     got["query_peak_mb"]])
    print(f"\nbuild and memory (fresh process per system; MB of RSS; query peak = first {args.batch} queries)")
    print(H.table(["system", "build cpu s", "wall s", "build peak MB", "retained MB", "index on disk MB",
                   "corpus on disk MB", "peak of a build to disk MB", "query peak MB"], rows))
    for system, error in errors.items():
        print(f"  {system} failed: {error}")
    if method:
        print(f"  memory method: {method}; irflow build() = records -> corpus (tokenize, store, postings); "
              "bm25s tokenize+index = its tokenizer on the same texts, then index")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="issue12,zipf,scifact", help="issue12, zipf, scifact (comma list)")
    parser.add_argument("--sizes", default="100000,1000000", help="issue12 corpus sizes (comma list)")
    parser.add_argument("--zipf-sizes", default="100000", help="sizes of the first synthetic corpus")
    parser.add_argument("--queries", type=int, default=200, help="queries per mix")
    parser.add_argument("--rank-queries", type=int, default=None,
                        help="queries rank_bm25 answers (default: 2M / records, at least 5)")
    parser.add_argument("--rank-max-docs", type=int, default=100_000, help="rank_bm25 up to this many records")
    parser.add_argument("--batch", type=int, default=64, help="queries of the memory children's query batch")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved passes (median taken per query)")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scifact", default=SCIFACT, help="SciFact folder (BEIR layout); skipped if absent")
    parser.add_argument("--no-scifact", action="store_true")
    parser.add_argument("--no-memory", action="store_true", help="skip the build / memory child processes")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="systems to time (comma list)")
    parser.add_argument("--quick", action="store_true", help="10k records, few queries (smoke test)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(json.loads(args.child))
        return {}
    if args.quick:
        args.sizes, args.zipf_sizes, args.queries, args.repeats, args.batch = "10000", "10000", 24, 2, 16
        args.datasets = "issue12"
        args.no_scifact = True
    args.systems = [s.strip() for s in args.systems.split(",")]
    if "irflow kernel" not in args.systems:
        args.systems.insert(0, "irflow kernel")
    datasets = [d.strip() for d in args.datasets.split(",")]

    print("lexical top-k benchmark: irflow BM25 (kernel, search(), recipe) vs rank_bm25 and bm25s")
    for line in H.machine_lines():
        print(line)
    kernel = B.kernel_name()
    print(f"irflow BM25 kernel: {kernel}" + (f" (numba {__import__('numba').__version__}; {KERNEL_ENV}="
                                             f"{os.environ.get(KERNEL_ENV, '(unset: auto)')}, auto compiles from "
                                             f"{AUTO_MIN_ROWS} rows)" if kernel == "numba"
                                             else " (numba not installed: pip install 'irflow[fast]')"))
    versions = [f"{m} {__import__(m).__version__}" for m in ("bm25s", "numba") if H.have(m)]
    print("peers: " + (", ".join(versions) or "(bm25s not installed)") + ", rank_bm25")
    missing = [s for s in SYSTEMS if s in args.systems and s.startswith(("bm25s", "rank")) and
               not H.have("bm25s" if s.startswith("bm25s") else "rank_bm25")]
    if missing:
        print(f"not installed, skipped: {', '.join(missing)} (pip install -e '.[bench]')")

    results: dict[Any, Any] = {}
    if "issue12" in datasets:
        for size in [int(s) for s in args.sizes.split(",") if s]:
            spec = {"kind": "issue12", "docs": size, "seed": args.seed, "queries": args.queries}
            results[("issue12", size)] = run_dataset(
                f"issue 12 corpus, {size} records (Zipf 50k words, exponent {Z.EXPONENT}, 20-200 tokens, mean "
                f"{Z.MEAN_LENGTH}; seed {args.seed})", spec, args)
    if "zipf" in datasets:
        for size in [int(s) for s in args.zipf_sizes.split(",") if s]:
            spec = {"kind": "zipf", "docs": size, "vocab": 50_000, "zipf": 1.05, "length": 40.0,
                    "seed": args.seed, "queries": args.queries}
            results[("zipf", size)] = run_dataset(
                f"first synthetic corpus, {size} records (vocab 50000, exponent 1.05, mean length 40, seed "
                f"{args.seed})", spec, args)
    if "scifact" in datasets and not args.no_scifact:
        if os.path.isfile(os.path.join(args.scifact, "corpus.jsonl")):
            spec = {"kind": "scifact", "path": os.path.abspath(args.scifact), "queries": args.queries}
            results["scifact"] = run_dataset("SciFact (title + text, english analyzer)", spec, args)
        else:
            print(f"\nSciFact skipped: {args.scifact} not found (set IRFLOW_DATA or --scifact)")
    summary(results)
    return results


def summary(results: Mapping[Any, Any]) -> None:
    """Issue 12's lexical targets, per dataset and mix: search() >= 1.0x bm25s numba on median and p90."""
    lines = []
    for key, result in results.items():
        for mix, figures in result.items():
            if not isinstance(figures, dict) or "irflow search()" not in figures:
                continue
            for s in ("irflow kernel", "irflow kernel numpy", "irflow search()"):
                ratio = figures.get(s, {}).get("x bm25s numba")
                if ratio:
                    verdict = "met" if min(ratio) >= 1.0 else "NOT met"
                    lines.append(f"  {key} {mix}: {s} vs bm25s numba {ratio[0]:.2f}x median, {ratio[1]:.2f}x p90"
                                 f"  {verdict}")
    if lines:
        print("\nissue 12 target (>= 1.0x bm25s numba on median and p90):")
        print("\n".join(lines))


if __name__ == "__main__":
    main()
