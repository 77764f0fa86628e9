"""The engine's fixed cost per ``search()`` call, library versions side by side (issue 12, item 2).

Each version is a plain copy of the repository (``git archive <commit> | tar -x -C DIR``;
the script links ``DIR/irflow/stages`` and ``DIR/irflow/recipes`` so the copy imports its own
stage kinds and recipes).  Every version runs in a child process of its own, all alive at
once; the parent asks them in turn, query by query (A B A B ...), so they share the machine's
load at the same moments — on a shared machine, versions timed one after the other see
different loads.  For each query a child times, one after the other:

- ``kernel k50``: ``bm25_topk`` at top 50, the kernel call ``search()`` makes;
- ``search lexical``: ``irflow.search(corpus, text, mode="lexical", k=10)``;
- ``search hybrid``: the same with ``mode="hybrid"`` (RRF; hash embedder, 64 dimensions).

Corpus: issue 12's (``zipf_corpus.py``: Zipf vocabulary of 50k words, documents of 20-200
tokens), ``--docs`` records, built once into ``--corpus`` (hash:64 vectors); 200 content-word
queries.  CPU ms per query (the child's thread time, its process time for hybrid; see CLOCKS): the median over ``--passes`` per
query, then median and p90 over queries; "engine" = search lexical - kernel k50, per query.

    git archive <base> | tar -x -C /tmp/base && git archive HEAD | tar -x -C /tmp/new
    python benchmarks/engine_ab.py /tmp/base /tmp/new --passes 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEMS = ("kernel k50", "search lexical", "search hybrid")
#: CPU time of the calling thread for the lexical systems (they run in it alone): the process's
#: would also charge them the BLAS threads still spinning after the previous hybrid query's dense
#: call (measured: the kernel at 0.37 CPU ms by the process's clock, 0.13 ms by the thread's);
#: the process's for hybrid, whose dense scoring runs in those threads.
#: BLAS on one thread in every child: a child's BLAS threads spinning after its dense call would
#: otherwise take the cores from the other child, timed at that moment (2-core machines).
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
CLOCKS = {"kernel k50": time.thread_time_ns, "search lexical": time.thread_time_ns,
          "search hybrid": time.process_time_ns}


def child(root: str, corpus_path: str, docs: int) -> None:
    """Serve timings: read a query number per line, answer one JSON line of CPU ms per system."""
    sys.path.insert(0, root)
    sys.path.insert(1, HERE)
    import irflow
    import irflow.stages
    import zipf_corpus as Z
    from irflow.kernels.bm25 import BM25Params, bm25_topk

    assert irflow.__file__.startswith(root) and irflow.stages.__file__.startswith(root)
    if not os.path.exists(corpus_path):
        records = [irflow.Record(f"d{i}", "text", " ".join(d), {"group": i % 100})
                   for i, d in enumerate(Z.zipf_docs(docs, seed=0))]
        irflow.build(records, embedder="hash:64", analyzer="plain", path=corpus_path)
    corpus = irflow.open_corpus(corpus_path, embedder="hash:64")
    queries = Z.zipf_queries(200, "content", seed=0)
    texts = [" ".join(q) for q in queries]
    params, postings = BM25Params(), corpus.postings
    runs = {"kernel k50": lambda i: bm25_topk(postings, [queries[i]], None, 50, params),
            "search lexical": lambda i: irflow.search(corpus, texts[i], mode="lexical", k=10),
            "search hybrid": lambda i: irflow.search(corpus, texts[i], mode="hybrid", k=10)}
    for i in range(20):  # warm up (numba compiles on the first call)
        for run in runs.values():
            run(i)
    print(json.dumps({"queries": len(texts)}), flush=True)
    for line in sys.stdin:
        i = int(line)
        found = {}
        for name, run in runs.items():
            clock = CLOCKS[name]
            start = clock()
            run(i)
            found[name] = (clock() - start) / 1e6
        print(json.dumps(found), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="+", help="repository copies to compare (first = baseline)")
    parser.add_argument("--passes", type=int, default=5, help="passes over the queries (median per query)")
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--corpus", default=os.path.join("/tmp", "irflow_engine_ab_corpus"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.versions[0], args.corpus, args.docs)
        return
    for root in args.versions:
        for name in ("stages", "recipes"):
            link = os.path.join(root, "irflow", name)
            if not os.path.exists(link):
                os.symlink(os.path.join("..", name), link)
    children = []
    for root in args.versions:  # one at a time: the first one may build the corpus
        child_process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), root, "--child", "--corpus", args.corpus,
             "--docs", str(args.docs)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/",
            env={**os.environ, **ONE_THREAD})
        n_queries = json.loads(child_process.stdout.readline())["queries"]
        children.append(child_process)
    times = {root: {name: np.zeros((args.passes, n_queries)) for name in SYSTEMS} for root in args.versions}
    for p in range(args.passes):
        for i in range(n_queries):
            # alternate which version goes first, so neither always follows the other's cache traffic
            order = list(zip(args.versions, children))
            for root, child_process in (order if (p + i) % 2 == 0 else order[::-1]):
                child_process.stdin.write(f"{i}\n")
                child_process.stdin.flush()
                for name, ms in json.loads(child_process.stdout.readline()).items():
                    times[root][name][p, i] = ms
    for child_process in children:
        child_process.stdin.close()
        child_process.wait()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    print(f"cpu {cpu}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}; BLAS on one thread; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.docs} records; "
          f"{args.passes} passes, versions alternated query by query")
    for root in args.versions:
        per_query = {name: np.median(t, axis=0) for name, t in times[root].items()}
        engine = per_query["search lexical"] - per_query["kernel k50"]
        print(f"[{root}]")
        for name, t in per_query.items():
            print(f"  {name:16s} median {np.median(t):.3f} ms  p90 {np.percentile(t, 90):.3f} ms")
        print(f"  engine (search lexical - kernel k50) median {np.median(engine):.3f} ms  "
              f"p90 {np.percentile(engine, 90):.3f} ms; search/kernel "
              f"{np.median(per_query['search lexical'] / per_query['kernel k50']):.2f}x")


if __name__ == "__main__":
    main()
