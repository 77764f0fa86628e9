"""Sharded corpora: what splitting a corpus over shards costs and buys — measured here, and by a cost model.

Data: ``--records`` synthetic records (default 1M): artifacts of 4 surfaces
(name, description, readme chunk, deps), texts of 4-14 words drawn from a
Zipfian vocabulary of 50k words, metadata with an owner (3 values) for a
filtered run, embedded with ``hash:--dim``.  Built once into ``--workdir``
(reused when present), then sharded 1, 2 and 4 ways (``--shards``).
Queries: 2-4 words from the same law.

Systems, on the same corpus and queries, interleaved pass by pass:

* ``single`` — the corpus as one :class:`Corpus` in this process;
* ``in-process S`` — a ShardedCorpus of S shards served in this process:
  the driver's own cost (two BM25 phases, merges, row fetches), no Ray;
* ``ray S`` — the same S shards, one Ray actor each, on a local cluster of
  ``--cpus`` CPUs started as irflow starts it (contained, offline).

Figures: time to open (checksums verified; the cluster's start apart);
per recipe (lexical, dense, hybrid) the wall time of a batch of 1 and of
a batch of ``--batch`` queries (median and p90 over ``--repeats`` passes
and over the batches), and queries per second; memory (this process's resident
growth, each actor's PSS); and whether every system's hits equal
``single``'s (they must, bit for bit).  Wall time is quoted: with Ray the
work runs in other processes, so this process's CPU clock says nothing.

Cost model.  With S shards on S machines a batch costs about::

    T(S) = driver(S) + sum over the recipe's rounds of (rtt(S) + max over shards of shard(N / S))

``shard(n)`` is a shard's kernel time for the batch at n rows, measured in
process on the real shards (the per-call time of every shard, summed by
round) and fitted as ``a + b n``; ``driver(S)`` is the in-process run minus
the shards' time (fitted ``c + d S``); ``rtt(S)`` a round trip to all S
actors with nothing to do, measured on the cluster.  The table predicts
S = 1..64 machines (one core per shard) and checks the prediction against
the Ray runs measured here (2 cores: more than 2 shards share them).

    python benchmarks/sharded.py                      # 1M records, 1/2/4 shards (about 40 min, ~6 GB disk)
    python benchmarks/sharded.py --records 200000     # a smaller run
    python benchmarks/sharded.py --quick              # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

# One BLAS thread everywhere (this process, and the Ray workers, which inherit it): on a shared
# 2-core machine two spinning BLAS threads per process lose to one, and every system gets the same.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as H  # noqa: E402

H.ensure_irflow()

import irflow  # noqa: E402
from irflow.engine.recipe import load_recipe  # noqa: E402
from irflow.shard import ShardedCorpus, shard  # noqa: E402

RECIPES = ("lexical", "dense", "hybrid")
KINDS = ("name", "description", "readme_chunk", "deps")


# -- data -----------------------------------------------------------------------------------------


def law(vocab: int) -> tuple[list[str], np.ndarray]:
    words = [f"w{i}" for i in range(vocab)]
    p = 1.0 / np.arange(1, vocab + 1) ** 1.05
    return words, p / p.sum()


def make_records(n: int, seed: int = 5) -> list[dict[str, Any]]:
    """``n`` records: artifacts of four surfaces, Zipfian texts, an owner per artifact."""
    rng = np.random.default_rng(seed)
    words, p = law(50_000)
    lengths = rng.integers(4, 15, size=n)
    flat = rng.choice(len(words), size=int(lengths.sum()), p=p)
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    out = []
    for i in range(n):
        a = i // 4
        text = " ".join(words[t] for t in flat[bounds[i]:bounds[i + 1]].tolist())
        out.append({"artifact_id": f"a{a}", "surface_kind": KINDS[i % 4], "text": text,
                    "metadata": {"owner": ("ann", "bob", "cy")[a % 3]}, "surface_index": i % 4})
    return out


def queries(count: int, seed: int = 9) -> list[str]:
    rng = np.random.default_rng(seed)
    words, p = law(50_000)
    return [" ".join(words[t] for t in rng.choice(len(words), size=int(rng.integers(2, 5)), p=p).tolist())
            for _ in range(count)]


def corpus_dirs(workdir: Path, records: int, dim: int, shards: list[int]) -> tuple[Path, dict[int, Path]]:
    """The corpus and its shardings under ``workdir`` (built when missing)."""
    base = workdir / f"corpus-{records}-{dim}"
    if not (base / "CURRENT").exists():
        t = time.perf_counter()
        irflow.build(make_records(records), embedder=f"hash:{dim}", path=base, name="bench", progress=True)
        print(f"built {records:,} records in {time.perf_counter() - t:.0f} s -> {base}", flush=True)
    single = irflow.open_corpus(base)
    out = {}
    for s in shards:
        target = workdir / f"sharded-{records}-{dim}-{s}"
        if not (target / "shards.json").exists():
            t = time.perf_counter()
            shard(single, s, target).close()
            print(f"sharded {s} ways in {time.perf_counter() - t:.0f} s -> {target}", flush=True)
        out[s] = target
    return base, out


# -- measuring ------------------------------------------------------------------------------------


class Recorder:
    """Wraps a backend's ``run``: rounds, and per round the time of each shard's call (in-process only)."""

    def __init__(self, corpus: ShardedCorpus) -> None:
        self.corpus = corpus
        self.rounds: list[tuple[str, list[float]]] = []
        backend = corpus.backend
        self.real = backend.run
        workers = getattr(backend, "workers", None)

        def run(method: str, calls: Any) -> Any:
            if workers is None:
                self.rounds.append((method, []))
                return self.real(method, calls)
            times, out = [], []
            for shard_index, args in calls:
                t = time.perf_counter()
                out.append(workers[shard_index].call(method, *args))
                times.append(time.perf_counter() - t)
            self.rounds.append((method, times))
            return out

        backend.run = run

    def reset(self) -> None:
        self.rounds = []
        self.corpus._records.clear()  # fresh queries fetch their hits' records: a round of its own


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def pss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = call()
    return time.perf_counter() - t, out


def run_batches(corpus: Any, recipe: str, batches: list[list[str]], params: dict[str, Any]) -> Callable[[int], Any]:
    compiled = load_recipe(recipe)
    return lambda i: compiled.run(corpus, batches[i], **params).hits


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares ``y = a + b x`` with ``a, b >= 0`` (costs neither shrink below 0 nor with more work)."""
    if len(set(xs)) < 2:
        return statistics.mean(ys), 0.0
    x, y = np.array(xs, float), np.array(ys, float)
    b, a = np.polyfit(x, y, 1)
    if b < 0:  # noise on a cost that cannot shrink with more shards (driver work, round trips)
        return float(y.mean()), 0.0
    if a < 0:  # faster than linear in the rows (caches): the line through the origin
        return 0.0, float((x * y).sum() / (x * x).sum())
    return float(a), float(b)


# -- main -----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--shards", default="1,2,4")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--batches", type=int, default=4, help="batches of --batch queries per pass")
    parser.add_argument("--singles", type=int, default=16, help="queries timed one by one per pass")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--workdir", default=str(Path(os.environ.get("TMPDIR", "/tmp")) / "irflow-bench-sharded"))
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the corpora in --workdir (default: keep)")
    parser.add_argument("--clean", action="store_true", help="remove --workdir at the end")
    parser.add_argument("--quick", action="store_true", help="20k records, 1 and 2 shards, small batches")
    args = parser.parse_args()
    if args.quick:
        args.records, args.shards, args.batch, args.batches, args.singles, args.repeats = 20_000, "1,2", 16, 2, 4, 1
        args.workdir = str(Path(args.workdir + "-quick"))
    shards = [int(s) for s in args.shards.split(",")]
    use_ray = not args.no_ray and H.have("ray")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)

    for line in H.machine_lines():
        print(line)
    print(f"records {args.records:,}, hash:{args.dim}, shards {shards}, batch {args.batch} x {args.batches}, "
          f"singles {args.singles}, repeats {args.repeats}, ray {'yes (%d CPUs)' % args.cpus if use_ray else 'no'}, "
          f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}")
    base, sharded_dirs = corpus_dirs(workdir, args.records, args.dim, shards)
    texts = queries(args.batch * args.batches + args.singles)
    batches = [texts[i * args.batch:(i + 1) * args.batch] for i in range(args.batches)]
    singles = [[t] for t in texts[-args.singles:]]

    # -- open ---------------------------------------------------------------------------------
    opened: dict[str, Any] = {}
    open_rows = []
    m0 = rss_mb()
    t, opened["single"] = timed(lambda: irflow.open_corpus(base))
    open_rows.append(("single", t * 1e3, rss_mb() - m0, dir_mb(base)))
    for s in shards:
        m0 = rss_mb()
        t, opened[f"in-process {s}"] = timed(lambda s=s: ShardedCorpus.open(sharded_dirs[s]))
        open_rows.append((f"in-process {s}", t * 1e3, rss_mb() - m0, dir_mb(sharded_dirs[s])))
    cluster_s = None
    if use_ray:
        from irflow.shard.ray_backend import connect

        cluster_s, _ = timed(lambda: connect("auto", num_cpus=args.cpus))
        for s in shards:
            t, opened[f"ray {s}"] = timed(lambda s=s: ShardedCorpus.open(sharded_dirs[s], ray="auto"))
            open_rows.append((f"ray {s}", t * 1e3, float("nan"), dir_mb(sharded_dirs[s])))
    print("\n## time to open (checksums verified) and size on disk")
    if cluster_s is not None:
        print(f"local Ray cluster start (num_cpus={args.cpus}): {cluster_s:.1f} s")
    print(H.table(["system", "open ms", "RSS growth MB", "files MB"], open_rows))

    # -- correctness: every system's hits are single's --------------------------------------
    print("\n## answers")
    for recipe in RECIPES:
        expected = load_recipe(recipe).run(opened["single"], batches[0], filter={"owner": "bob"}).hits
        for name, corpus in opened.items():
            got = load_recipe(recipe).run(corpus, batches[0], filter={"owner": "bob"}).hits
            same = [[(h.record_id, h.score) for h in q] for q in got] == \
                [[(h.record_id, h.score) for h in q] for q in expected]
            if not same:
                print(f"MISMATCH: {recipe} on {name}")
                sys.exit(1)
    print(f"hits equal to single's, bit for bit: every system, recipes {', '.join(RECIPES)} (filtered run)")

    # -- latency and throughput --------------------------------------------------------------
    results: dict[tuple[str, str, str], float] = {}
    tails: dict[tuple[str, str, str], float] = {}  # p90 of the same samples
    for recipe in RECIPES:
        for kind, items in (("batch", batches), ("single", singles)):
            systems = {name: (run_batches(corpus, recipe, items, {}), len(items), args.repeats)
                       for name, corpus in opened.items()}
            for name in opened:  # warm: the first query of a mask / a term costs more
                systems[name][0](0)
            sample = H.interleaved(systems, len(items))
            for name in opened:
                results[recipe, kind, name] = sample[name].median_ms("wall")
                tails[recipe, kind, name] = sample[name].p90_ms("wall")
    print(f"\n## latency (wall ms, median) and throughput: batch of 1, batch of {args.batch}")
    rows = []
    for name in opened:
        row: list[Any] = [name]
        for recipe in RECIPES:
            one, many = results[recipe, "single", name], results[recipe, "batch", name]
            row += [one, many, args.batch / many * 1e3]
        rows.append(row)
    heads = ["system"] + [f"{r} {w}" for r in RECIPES for w in ("1 q ms", f"{args.batch} q ms", "q/s")]
    print(H.table(heads, rows))
    print(f"\n## latency p90 (wall ms): batch of 1, batch of {args.batch}")
    rows = [[name] + [tails[recipe, kind, name] for recipe in RECIPES for kind in ("single", "batch")]
            for name in opened]
    print(H.table(["system"] + [f"{r} {w}" for r in RECIPES for w in ("1 q p90", f"{args.batch} q p90")], rows))

    # -- memory ---------------------------------------------------------------------------------
    print("\n## memory")
    print(f"this process: {rss_mb():.0f} MB resident (single and every in-process sharding open, pages touched)")
    if use_ray:
        rows = []
        for s in shards:
            corpus = opened[f"ray {s}"]
            pss = [pss_mb(info["pid"]) for info in corpus.shard_info]
            files = [dir_mb(sharded_dirs[s] / e.dir) for e in corpus.manifest.shards]
            rows.append((f"ray {s}", statistics.mean(pss), max(pss), sum(pss), statistics.mean(files)))
        print(H.table(["system", "PSS per actor MB", "max", "all actors", "shard files MB"], rows))

    # -- cost model -------------------------------------------------------------------------------
    print(f"\n## cost model: a batch of {args.batch} on S machines (one core per shard)")
    model_rows = []
    for recipe in RECIPES:
        shard_x, shard_y, drv_x, drv_y, rounds = [], [], [], [], {}
        for s in shards:
            corpus = opened[f"in-process {s}"]
            rec = Recorder(corpus)
            walls, per_round_max, shard_sum = [], [], []
            compiled = load_recipe(recipe)
            for _ in range(args.repeats):
                for batch in batches:
                    rec.reset()
                    t, _ = timed(lambda c=compiled, k=corpus, b=batch: c.run(k, b).hits)
                    walls.append(t)
                    per_round_max.append(sum(max(times) for _, times in rec.rounds if times))
                    shard_sum.append(sum(sum(times) for _, times in rec.rounds))
            del corpus.backend.run
            rounds[s] = len(rec.rounds)
            shard_x.append(args.records / s)
            shard_y.append(statistics.median(per_round_max))
            drv_x.append(s)
            drv_y.append(statistics.median(walls) - statistics.median(shard_sum))
        a, b = fit(shard_x, shard_y)
        c, d = fit(drv_x, drv_y)
        rtt = {}
        if use_ray:
            for s in shards:
                corpus = opened[f"ray {s}"]
                samples = [timed(lambda k=corpus, s=s: k.backend.run("ping", [(i, ()) for i in range(s)]))[0]
                           for _ in range(30)]
                rtt[s] = statistics.median(samples)
        e, f = fit(list(rtt), list(rtt.values())) if rtt else (0.004, 0.0)
        single_ms = results[recipe, "batch", "single"]
        for s in (1, 2, 4, 8, 16, 32, 64):
            n_rounds = rounds.get(s, rounds[max(rounds)])
            predicted = (c + d * s) + n_rounds * (e + f * s) + (a + b * args.records / s)
            measured = results.get((recipe, "batch", f"ray {s}"))
            model_rows.append((recipe, s, n_rounds, (e + f * s) * 1e3, (a + b * args.records / s) * 1e3,
                               (c + d * s) * 1e3, predicted * 1e3, args.batch / predicted, measured,
                               single_ms / (predicted * 1e3)))
    print(H.table(["recipe", "S", "rounds", "rtt ms", "shard ms", "driver ms", "predicted ms", "q/s",
                   "measured ray ms (2 cores)", "speedup vs single"], model_rows))
    print("rounds: calls to every shard per batch (mask, BM25 phase 1 [+ vocabulary], phase 2, dense, row fetches);"
          " shard ms: the slowest shard's kernel time summed over rounds, fitted a + b*rows; driver ms: the "
          "in-process run minus the shards' time, fitted c + d*S; rtt: an empty call to all S actors.")

    for corpus in opened.values():
        if isinstance(corpus, ShardedCorpus):
            corpus.close()
    if use_ray:
        from irflow.shard.ray_backend import shutdown

        shutdown()
    if args.clean:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps({"done": True}))


if __name__ == "__main__":
    main()
