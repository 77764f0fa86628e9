"""Reopening a corpus from disk: ``irflow.open_corpus`` with and without checksums, and the first dense query.

Data: ``n`` records with 384-d random normalized float32 vectors
(precomputed) and texts of ``--words`` words drawn from a Zipf law over a
50k vocabulary (default 60, as in issue 12's corpus; ``--words 2`` makes a
1M build feasible on a small machine, and then measures mostly the vectors
and the integrity checks).  The corpus is built once into a temporary
directory; each timing runs in a fresh Python process (``python -c``), so
nothing is cached in the process, while the files stay in the page cache
(a warm reopen: what a service restart or a CLI command sees).

Timed per process, CPU and wall: ``open_corpus(path)`` (checksums),
``open_corpus(path, verify=False)``, then the first dense query (which maps
the vectors in and, from issue 12 on, checks their checksum and norms) and
a second one; then, CPU only, what a corpus may defer to first use: the
first hits (records read for the top 10), the first metadata filter (a 1%
filter: the filter's columnar view of every row's metadata), the first
lookup by record id and the first sibling lookup (from corpus format 2 on,
the id -> row and artifact -> ledger dicts are built then, not on open).  With ``--base DIR`` (a checkout of an older commit, e.g.
``git archive 9199a5b irflow | tar -x -C DIR``) that checkout's irflow
builds its own copy from the same records (each release reads the files it
writes) and is timed in the same way, interleaved: the before / after.
Peak RSS of the process is printed (``ru_maxrss``).

    python benchmarks/open.py --sizes 100000
    python benchmarks/open.py --sizes 1000000 --words 2 --base /tmp/base
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as H  # noqa: E402

H.ensure_irflow()

PROBE = r"""
import json, resource, sys, time
import numpy as np
import irflow
path, verify = sys.argv[1], sys.argv[2] == "1"
out = {"irflow": irflow.__file__}
w, c = time.perf_counter(), time.process_time()
corpus = irflow.open_corpus(path, verify=verify)
out["open_cpu"], out["open_wall"] = time.process_time() - c, time.perf_counter() - w
q = np.random.default_rng(0).standard_normal((1, corpus.dim)).astype(np.float32)
for name in ("first", "second"):
    w, c = time.perf_counter(), time.process_time()
    top = corpus.dense_topk(q, None, 10)
    out[name + "_cpu"], out[name + "_wall"] = time.process_time() - c, time.perf_counter() - w
# what a stored corpus may defer to first use: hits (records), a metadata filter, a lookup by id, siblings
for name, step in (("hits", lambda: corpus.hits(top.row, top.score)),
                   ("filter", lambda: corpus.candidate_mask({"g": 3})),
                   ("row_of", lambda: corpus.row_of(corpus.record_ids_of([7])[0])),
                   ("siblings", lambda: corpus.sibling_rows(list(corpus.artifact_ids_of([5]))))):
    c = time.process_time()
    step()
    out[name + "_cpu"] = time.process_time() - c
out["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def build(n: int, words: int, path: str, seed: int) -> None:
    import irflow
    from irflow.store.records import Record

    rng = np.random.default_rng(seed)
    vocab = 50_000
    law = 1.0 / np.arange(1, vocab + 1) ** 1.05
    law /= law.sum()
    names = np.array([f"w{i}" for i in range(vocab)], dtype=object)
    lengths = np.clip(rng.poisson(words, n), 1, None)
    tokens = names[rng.choice(vocab, size=int(lengths.sum()), p=law)]
    vectors = rng.standard_normal((n, 384), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ends = np.cumsum(lengths)
    records = [Record(f"a{i}", "doc", " ".join(tokens[end - length:end]), {"g": i % 100}, id=f"r{i}",
                      vector=vectors[i]) for i, (end, length) in enumerate(zip(ends, lengths))]
    del tokens
    irflow.build(records, embedder=None, path=path)


def build_with(checkout: str | None, n: int, words: int, path: str, seed: int) -> None:
    """``build`` run by a checkout's irflow, in a subprocess (this one's when None)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = checkout if checkout else H.REPO
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--build-only", str(n), str(words), path,
                           str(seed)], env=env, capture_output=True, text=True, timeout=7200)
    if done.returncode != 0:
        raise SystemExit(f"build failed: {done.stderr[-2000:]}")


def probe(path: str, verify: bool, checkout: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = checkout if checkout else H.REPO
    # not from the current directory: ``python -c`` puts it first on sys.path, and from a checkout's root
    # that would import its irflow instead of the one asked for
    done = subprocess.run([sys.executable, "-c", PROBE, path, "1" if verify else "0"], env=env,
                          capture_output=True, text=True, timeout=1800, cwd=os.path.dirname(path))
    if done.returncode != 0:
        raise SystemExit(f"probe failed: {done.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    wanted = os.path.realpath(checkout if checkout else H.REPO)
    if not os.path.realpath(out["irflow"]).startswith(wanted + os.sep):
        raise SystemExit(f"probe imported {out['irflow']}, not the irflow of {wanted}")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000", help="record counts (comma list)")
    parser.add_argument("--words", type=int, default=60, help="mean words per record")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--base", default=None, metavar="DIR", help="also time an older checkout's irflow")
    parser.add_argument("--keep", default=None, metavar="DIR", help="build into DIR and keep it (reused if present)")
    parser.add_argument("--build-only", nargs=4, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.build_only:
        n, words, path, seed = args.build_only
        build(int(n), int(words), path, int(seed))
        return
    print("open benchmark: irflow.open_corpus (warm page cache), fresh process per timing")
    for line in H.machine_lines():
        print(line)
    for n in [int(s) for s in args.sizes.split(",") if s]:
        tmp = None
        if args.keep:
            where = args.keep
        else:
            tmp = tempfile.mkdtemp(prefix="irflow-open-")
            where = tmp
        systems = {"irflow": None} if args.base is None else {"irflow": None, "irflow base": args.base}
        paths = {name: os.path.join(where, f"open-{n}-{args.words}{'-base' if checkout else ''}")
                 for name, checkout in systems.items()}
        try:
            for name, checkout in systems.items():
                path = paths[name]
                if not os.path.exists(os.path.join(path, "CURRENT")):
                    t0 = time.perf_counter()
                    build_with(checkout, n, args.words, path, args.seed)
                    print(f"\n{n} records, ~{args.words} words each, 384-d vectors: built by {name} in "
                          f"{time.perf_counter() - t0:.0f} s")
                size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
                print(f"{name}'s corpus on disk: {size / 2**20:.0f} MiB ({path})")
            runs: dict[tuple[str, bool], list[dict[str, Any]]] = {}
            for _ in range(args.repeats):
                for name, checkout in systems.items():
                    for verify in (True, False):
                        runs.setdefault((name, verify), []).append(probe(paths[name], verify, checkout))
            rows = []
            for (name, verify), samples in runs.items():
                def med(key: str, samples: list[dict[str, Any]] = samples) -> float:
                    return statistics.median(s[key] for s in samples)
                def p90(key: str, samples: list[dict[str, Any]] = samples) -> float:
                    values = sorted(s[key] for s in samples)
                    return values[min(len(values) - 1, int(0.9 * len(values)))]
                rows.append([name, "yes" if verify else "no", med("open_cpu"), p90("open_cpu"), med("open_wall"),
                             med("first_cpu"), med("second_cpu"), med("hits_cpu"), med("filter_cpu"),
                             med("row_of_cpu"), med("siblings_cpu"), med("maxrss_mb")])
            print(H.table(["system", "checksums", "open cpu s", "p90", "open wall s", "1st dense cpu s",
                           "2nd dense", "1st hits", "1st filter", "1st row_of", "1st siblings", "peak RSS MB"], rows))
            print(f"  medians (p90: nearest rank) of {args.repeats} fresh processes each, interleaved; the 1st-use "
                  "columns are CPU s")
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
