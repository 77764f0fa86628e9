"""Living corpora: what a change costs (add, delete, compact) and what segments cost a query.

Data: ``--records`` live records (default 1M), lexical and precomputed
vectors: Zipf texts of 20-200 tokens (``zipf_corpus.py``, issue 12's
corpus) and 384-d clustered float32 vectors (``dense_codes.clustered``'s
law: 1,000 random centres plus noise, normalized), made chunk by chunk.

Two corpora, built once under ``--workdir`` (default a folder of the
system's temporary directory, never the repository) and reused while the
parameters match:

* ``segmented``: ``--records / 0.9`` rows as 10 segments — a build of 55 %
  of them, then nine ``add`` commits of 5 % each (no merge policy) — and
  10 % of its rows deleted at random, leaving ``--records`` live;
* ``compacted``: the same corpus after ``compact()`` (one segment of the
  live rows), measured on the way: its wall time and the peak resident
  memory (``ru_maxrss``) of a fresh process that opens and compacts it,
  against the corpus's bytes on disk.

Then, on a copy of the compacted corpus (hard links, as a commit shares
files): ``add`` of 1,000 new records (their vectors precomputed) and
``delete`` of 1,000 live ones, ``--commits`` times each: each commit's
wall time and the bytes of the files it wrote (files of the new generation
not shared with the one before), against the corpus's bytes.

Search latency: BM25 and dense, through ``search()`` (top 10) and the
kernels (``bm25_topk`` / ``dense_topk``, k = 10, the query tokenized or
embedded beforehand, no ids fetched), on the segmented corpus
and the compacted one, interleaved pass by pass in runs of ``CHUNK``
queries (``_harness.interleaved``: a slow spell of the shared machine then
falls on both corpora's calls alike), with one BLAS thread and with the
default threads; per query the median over ``--repeats`` passes, then the
median and p90 over queries, and the ratio segmented / compacted (target:
at most 1.25).  Both corpora must give
the same hits (record ids and score bits) for every query; the script
checks and says so.  Queries: 2-5 Zipf tokens (corpus and content mixes
alternating); each query text's vector a clustered point (a centre plus
noise), looked up (``_harness.LookupEmbedder``: embedding costs nothing).

Clocks: CPU time (``time.process_time``) is quoted with one thread (the
machine is shared: other processes do not inflate it), wall time with the
default threads.

    python benchmarks/update.py                   # 1M records (builds ~10 min the first time, ~5 GB disk)
    python benchmarks/update.py --parts latency   # the latency tables only, on the corpora built before
    python benchmarks/update.py --quick           # smoke test: 100k records
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as H  # noqa: E402

H.ensure_irflow()

import irflow  # noqa: E402
from irflow.store.corpus import open_corpus  # noqa: E402
from irflow.store.records import Record  # noqa: E402
from zipf_corpus import zipf_queries, zipf_texts  # noqa: E402

DIM = 384
CENTRES = 1000
SPREAD = 0.5
SEGMENTS = 10
FIRST_FRACTION = 0.55
DELETED_FRACTION = 0.10
CHANGE = 1000
PARTS = ("build", "compact", "update", "latency")
#: Queries per run of one corpus's calls when the latency passes alternate (see ``_harness.interleaved``).
CHUNK = 20
TARGETS = {"add": "<= 2 s, <= 5 % of the corpus's bytes", "delete": "<= 0.5 s",
           "latency": "segmented / compacted <= 1.25 (median and p90)",
           "compact": "peak memory <= 2x the corpus on disk"}


# -- data ---------------------------------------------------------------------------------


class Source:
    """Records in row order, made chunk by chunk (deterministic): texts from the Zipf law, clustered vectors."""

    CHUNK = 50_000

    def __init__(self, total: int, seed: int) -> None:
        self.texts = zipf_texts(total, seed=seed)
        rng = np.random.default_rng([seed, 7])
        centres = rng.standard_normal((CENTRES, DIM), dtype=np.float32)
        self.centres = centres / np.linalg.norm(centres, axis=1, keepdims=True)
        self.seed, self.next = seed, 0

    def vectors(self, lo: int, n: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, 11, lo])
        block = self.centres[rng.integers(0, CENTRES, n)] + SPREAD * rng.standard_normal((n, DIM), dtype=np.float32) \
            / np.sqrt(DIM)
        out: np.ndarray = (block / np.linalg.norm(block, axis=1, keepdims=True)).astype(np.float32)
        return out

    def take(self, n: int) -> Iterator[Record]:
        """The next ``n`` records (one artifact each)."""
        end = self.next + n
        while self.next < end:
            m = min(self.CHUNK, end - self.next)
            vectors = self.vectors(self.next, m)
            for j in range(m):
                i = self.next + j
                yield Record(f"a{i}", "text", next(self.texts), {"g": i % 10}, surface_index=0, vector=vectors[j])
            self.next += m


def queries(n: int, centres: np.ndarray, seed: int) -> tuple[list[str], H.LookupEmbedder]:
    """``n`` distinct query texts (the two Zipf mixes alternating) and their vectors (clustered points)."""
    rng = np.random.default_rng([seed, 13])
    mixes = [zipf_queries(4 * n, mix, seed=seed) for mix in ("corpus", "content")]
    texts: list[str] = []
    table: dict[str, np.ndarray] = {}
    for i in range(4 * n):
        text = " ".join(mixes[i % 2][i])
        if text in table:
            continue
        near = centres[rng.integers(0, CENTRES)] + SPREAD * rng.standard_normal(DIM, dtype=np.float32) / np.sqrt(DIM)
        table[text] = (near / np.linalg.norm(near)).astype(np.float32)
        texts.append(text)
        if len(texts) == n:
            break
    return texts, H.LookupEmbedder(table, DIM)


# -- files --------------------------------------------------------------------------------


def generation(root: Path) -> Path:
    return root / (root / "CURRENT").read_text().split()[0]


def files_of(root: Path) -> dict[int, int]:
    """The current generation's files: inode -> bytes (a file linked twice counts once)."""
    return {s.st_ino: s.st_size for s in (p.stat() for p in generation(root).iterdir() if p.is_file())}


def link_copy(source: Path, target: Path) -> None:
    """A copy of a corpus whose generations' files are hard links (as a commit shares them); the rest copied."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for entry in source.iterdir():
        if entry.is_dir():
            (target / entry.name).mkdir()
            for f in entry.iterdir():
                os.link(f, target / entry.name / f.name)
        else:
            shutil.copy2(entry, target / entry.name)


def _mb(n: float) -> float:
    return n / 2**20


# -- the corpora ----------------------------------------------------------------------------


def build_corpora(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The segmented corpus (10 segments, 10 % deleted), built afresh."""
    rows = round(args.records / (1 - DELETED_FRACTION))
    first = round(rows * FIRST_FRACTION)
    step = (rows - first) // (SEGMENTS - 1)
    source = Source(rows + 10 * args.commits * CHANGE, args.seed)
    seg = work / "segmented"
    shutil.rmtree(seg, ignore_errors=True)
    t0 = time.perf_counter()
    irflow.build(source.take(first), embedder=None, analyzer="plain", path=seg)
    built = time.perf_counter() - t0
    corpus = open_corpus(seg)
    corpus.merge_policy = irflow.MergePolicy.never()
    adds = []
    for s in range(SEGMENTS - 1):
        n = rows - first - step * (SEGMENTS - 2) if s == SEGMENTS - 2 else step
        t0 = time.perf_counter()
        corpus.add(source.take(n))
        adds.append(time.perf_counter() - t0)
    doomed = np.random.default_rng([args.seed, 17]).choice(rows, rows - args.records, replace=False)
    t0 = time.perf_counter()
    corpus.delete(corpus.record_ids[np.sort(doomed)].tolist())
    deleted = time.perf_counter() - t0
    facts = {"rows": rows, "live": len(corpus), "segments": len(corpus.segments), "build_s": built,
             "adds_s": adds, "delete_s": deleted, "next_row": source.next, "params": _params(args)}
    (work / "built.json").write_text(json.dumps(facts))
    print(f"built the segmented corpus: {rows:,} rows in {len(corpus.segments)} segments, {len(corpus):,} live; "
          f"build of {first:,} {built:.0f} s, adds of {step:,} {statistics.median(adds):.1f} s each (median), "
          f"delete of {rows - args.records:,} {deleted:.1f} s", flush=True)
    return facts


def _params(args: argparse.Namespace) -> dict[str, Any]:
    return {"records": args.records, "seed": args.seed, "dim": DIM, "commits": args.commits}


def compact_child(payload: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: open the corpus (checksums verified) and compact it; wall time and peak RSS.

    ``peak_mb``: the process's ``ru_maxrss`` (open included: verifying
    reads every file, and mapped file pages count); ``step_mb``: the
    compaction's own peak over the resident size after opening
    (``_harness.MemoryProbe``).
    """
    corpus = open_corpus(payload["path"])
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    probe = H.MemoryProbe()
    probe.start()
    t0 = time.perf_counter()
    report = corpus.compact()
    wall = time.perf_counter() - t0
    step = probe.stop()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"wall_s": wall, "peak_mb": peak / 1024, "open_mb": base / 1024, "step_mb": step["peak_mb"],
            "probe": probe.method, "segments": report.segments}


def run_compact(work: Path) -> dict[str, Any]:
    seg, com = work / "segmented", work / "compacted"
    link_copy(seg, com)
    on_disk = sum(files_of(seg).values())
    out = H.run_child(os.path.abspath(__file__), {"path": str(com)})
    if "error" in out:
        raise SystemExit(f"compact failed: {out['error']}")
    out.update(disk_mb=_mb(on_disk), after_mb=_mb(sum(files_of(com).values())))
    out["ratio"] = out["peak_mb"] / out["disk_mb"]
    (work / "compact.json").write_text(json.dumps(out))
    return out


# -- commits ------------------------------------------------------------------------------


def run_updates(args: argparse.Namespace, work: Path, facts: dict[str, Any]) -> list[list[Any]]:
    """Add and delete ``CHANGE`` records, ``--commits`` times each, on a copy of the compacted corpus."""
    copy = work / "updated"
    link_copy(work / "compacted", copy)
    corpus = open_corpus(copy)
    corpus.merge_policy = irflow.MergePolicy.never()
    source = Source(facts["next_row"] + 10 * args.commits * CHANGE, args.seed)
    for _ in source.take(facts["next_row"]):  # skip the rows the corpora hold
        pass
    rng = np.random.default_rng([args.seed, 19])
    rows = []
    for what in ("add", "delete"):
        for c in range(args.commits):
            before = files_of(copy)
            if what == "add":
                batch = list(source.take(CHANGE))
            else:  # live records at random (rows deleted by an earlier commit are not picked)
                live = np.flatnonzero(corpus.live)
                batch = corpus.record_ids[np.sort(rng.choice(live, CHANGE, replace=False))].tolist()
            t0 = time.perf_counter()
            report = corpus.add(batch) if what == "add" else corpus.delete(batch)
            wall = time.perf_counter() - t0
            after = files_of(copy)
            new = sum(size for inode, size in after.items() if inode not in before)
            total = sum(after.values())
            rows.append([f"{what} {len(batch):,}", c + 1, wall, _mb(new), 100 * new / total, _mb(total),
                         report.segments])
    shutil.rmtree(copy, ignore_errors=True)
    return rows


# -- latency ------------------------------------------------------------------------------


def _hits(corpus: Any, text: str, mode: str) -> list[tuple[str, float]]:
    return [(h.record_id, h.score) for h in irflow.search(corpus, text, mode=mode, k=10)]


def _kernel(corpus: Any, query: Any, kind: str) -> Any:
    """The kernel alone (the query tokenized or embedded before: a lookup; no ids fetched)."""
    return corpus.bm25_topk(query, None, 10) if kind == "bm25" else corpus.dense_topk(query, None, 10)


def _kernel_hits(corpus: Any, text: str, kind: str) -> list[tuple[str, float]]:
    query = corpus.tokenize_queries([text]) if kind == "bm25" else corpus.embed_queries([text])
    rows, scores = _kernel(corpus, query, kind).per_query(0)
    return list(zip(corpus.record_ids_of(rows).tolist(), scores.tolist()))


#: name -> (the timed call on a prepared query, the answer as (record id, score) pairs, the query's preparation)
CALLS: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Any, str], Any], Callable[[Any, str], Any]]] = {
    "bm25_topk": (lambda c, q: _kernel(c, q, "bm25"), lambda c, t: _kernel_hits(c, t, "bm25"),
                  lambda c, t: c.tokenize_queries([t])),
    "search lexical": (lambda c, t: _hits(c, t, "lexical"), lambda c, t: _hits(c, t, "lexical"), lambda c, t: t),
    "dense_topk": (lambda c, q: _kernel(c, q, "dense"), lambda c, t: _kernel_hits(c, t, "dense"),
                   lambda c, t: c.embed_queries([t])),
    "search dense": (lambda c, t: _hits(c, t, "dense"), lambda c, t: _hits(c, t, "dense"), lambda c, t: t),
}


def run_latency(args: argparse.Namespace, work: Path) -> tuple[list[list[Any]], int, int]:
    """Per call and thread setting: medians and p90s over queries, segmented vs compacted, interleaved."""
    texts, embedder = queries(args.queries, Source(1, args.seed).centres, args.seed)
    corpora = {name: open_corpus(work / name, embedder=embedder) for name in ("segmented", "compacted")}
    same = checked = 0
    for _, answer, _ in CALLS.values():  # first calls (codes, masks, numba) out of the timing; answers compared
        for text in texts:
            a, b = (answer(corpora[name], text) for name in corpora)
            same += a == b
            checked += 1
    rows = []
    for threads in ("1", "default"):
        limit = _threads(threads)
        with limit:
            for name, (call, _, prepare) in CALLS.items():
                prepared = {c: [prepare(corpora[c], t) for t in texts] for c in corpora}
                systems = {f"{c} {name}": (lambda i, c=c, call=call, p=prepared: call(corpora[c], p[c][i]), len(texts),
                                           args.repeats) for c in corpora}
                timing = H.interleaved(systems, len(texts), CHUNK)
                clock = "cpu" if threads == "1" else "wall"
                seg, com = timing[f"segmented {name}"], timing[f"compacted {name}"]
                rows.append([name, threads, clock, seg.median_ms(clock), com.median_ms(clock),
                             seg.median_ms(clock) / com.median_ms(clock), seg.p90_ms(clock), com.p90_ms(clock),
                             seg.p90_ms(clock) / com.p90_ms(clock)])
                print(f"  {name}, {threads} thread(s): x p50 {rows[-1][5]:.2f}, x p90 {rows[-1][8]:.2f}", flush=True)
    return rows, same, checked


HEADERS = ["call", "threads", "clock", "seg p50 ms", "com p50 ms", "x p50", "seg p90 ms", "com p90 ms", "x p90"]


def _threads(setting: str) -> Any:
    import contextlib

    if setting == "default":
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1)


# -- main ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, help="live records of both corpora (default 1M; --quick 100k)")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "irflow-bench-update"))
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)}")
    parser.add_argument("--fresh", action="store_true", help="build the corpora again even when present")
    parser.add_argument("--queries", type=int, help="queries timed (default 200; --quick 30)")
    parser.add_argument("--repeats", type=int, help="passes over the queries (default 5; --quick 2)")
    parser.add_argument("--commits", type=int, help="add and delete commits measured, each (default 3; --quick 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke test: 100k records, 30 queries, 2 passes")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(compact_child(json.loads(args.child))))
        return
    quick = {"records": 100_000, "queries": 30, "repeats": 2, "commits": 2}
    for name, full in {"records": 1_000_000, "queries": 200, "repeats": 5, "commits": 3}.items():
        if getattr(args, name) is None:
            setattr(args, name, quick[name] if args.quick else full)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if set(parts) - set(PARTS):
        parser.error(f"--parts: one or more of {', '.join(PARTS)}")
    work = Path(args.workdir) / f"r{args.records}"
    if Path(H.REPO) in [work, *work.parents]:
        parser.error("--workdir must be outside the repository")
    work.mkdir(parents=True, exist_ok=True)
    print("\n".join(H.machine_lines()))
    facts_file = work / "built.json"
    facts = json.loads(facts_file.read_text()) if facts_file.is_file() else None
    if args.fresh or facts is None or facts.get("params") != _params(args) or not (work / "segmented").is_dir():
        facts = build_corpora(args, work)
        parts = list(dict.fromkeys(["compact", *parts]))
    elif "build" in parts:
        print(f"reusing the corpora in {work} (--fresh to build them again)")
    print(f"corpus: {facts['rows']:,} rows, {facts['segments']} segments, {facts['live']:,} live "
          f"({DELETED_FRACTION:.0%} deleted); Zipf texts 20-200 tokens, {DIM}-d clustered float32 vectors; "
          f"workdir {work}")
    if "compact" in parts or not (work / "compacted").is_dir():
        out = run_compact(work)
    else:
        out = json.loads((work / "compact.json").read_text())
    print(f"\ncompact: {out['wall_s']:.1f} s; peak RSS of the process {out['peak_mb']:.0f} MB (opening with "
          f"checksums verified: {out['open_mb']:.0f} MB; the compaction's own peak above the resident size after "
          f"opening: {out.get('step_mb', float('nan')):.0f} MB) for a corpus of {out['disk_mb']:.0f} MB on disk "
          f"({out['after_mb']:.0f} MB after): {out['ratio']:.2f}x (target {TARGETS['compact']})")
    if "update" in parts:
        rows = run_updates(args, work, facts)
        print(f"\ncommits on the compacted corpus (targets: add {TARGETS['add']}; delete {TARGETS['delete']})")
        print(H.table(["commit", "#", "wall s", "new files MB", "% of corpus", "corpus MB", "segments"], rows))
    if "latency" in parts:
        print(f"\nsearch latency, segmented / compacted, top 10, {args.queries} queries x {args.repeats} passes "
              f"interleaved in runs of {CHUNK} queries (target: {TARGETS['latency']}); cpu clock with 1 BLAS thread, wall with the default")
        rows, same, checked = run_latency(args, work)
        print(H.table(HEADERS, rows))
        print(f"same hits (record ids and score bits) on both corpora: {same}/{checked}")


if __name__ == "__main__":
    main()
