"""Memory and wall time of ``irflow eval`` on many queries: 20,000 queries over 3,000 documents, lexical.

The workload of a hostile test run: a BEIR-format collection of 3,000
Zipf-word documents (``zipf_corpus``: 20-200 tokens) and 20,000 queries of
2-5 words drawn at corpus frequency (an ~830 KB ``queries.jsonl``), each
judged on 1-4 random documents with grades 1-2.  Such queries match most
documents, so every ranking is as deep as asked: 20M (query, document)
entries per system at the default depth of 1000.

Each case is one ``irflow eval ... --json`` process under ``/usr/bin/time
-v``: its maximum resident set size, wall time and CPU time (user +
system: the steadier clock on a shared machine) are printed, with the
figures it reported (so two versions of irflow can be checked to agree).
The corpus is built once first (a warm-up run), so the cases measure the
evaluation, not the build.  Cases:

- ``lexical``: ``irflow eval lexical`` at the default depth;
- ``baseline+second``: the same with ``--baseline search --set mode=lexical``
  (a second lexical system, and the paired tests);
- ``depth 100``: ``--depth 100``;
- ``runs``: ``--runs DIR`` (the run files written: runs are then kept).

    python benchmarks/eval_memory.py                 # the full workload (~2-4 min)
    python benchmarks/eval_memory.py --quick         # 2,000 queries over 300 documents
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import REPO, machine_lines, table  # noqa: E402
from zipf_corpus import zipf_queries, zipf_texts  # noqa: E402

TIME = "/usr/bin/time"


def write_collection(root: Path, n_docs: int, n_queries: int, seed: int = 0) -> Path:
    """The BEIR-format collection of the workload under ``root`` (deterministic)."""
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    with open(root / "corpus.jsonl", "w", encoding="utf-8") as out:
        for i, text in enumerate(zipf_texts(n_docs, vocab=20_000, seed=seed)):
            out.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    queries = zipf_queries(n_queries, "corpus", vocab=20_000, seed=seed)
    with open(root / "queries.jsonl", "w", encoding="utf-8") as out:
        for i, words in enumerate(queries):
            out.write(json.dumps({"_id": f"q{i}", "text": " ".join(words)}) + "\n")
    rng = np.random.default_rng(seed + 7)
    with open(root / "qrels" / "test.tsv", "w", encoding="utf-8") as out:
        out.write("query-id\tcorpus-id\tscore\n")
        for i in range(n_queries):
            for d in rng.choice(n_docs, size=int(rng.integers(1, 5)), replace=False).tolist():
                out.write(f"q{i}\td{d}\t{int(rng.integers(1, 3))}\n")
    return root


def _time_v(field: str, text: str) -> str:
    match = re.search(rf"^\s*{re.escape(field)}: (.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else "?"


def run_case(args: list[str], env: dict[str, str]) -> dict[str, object]:
    """One ``irflow eval`` process: max RSS (MB), wall seconds, and its --json figures."""
    command = [sys.executable, "-m", "irflow", *args]
    timed = os.path.exists(TIME)
    start = time.perf_counter()
    done = subprocess.run([TIME, "-v", *command] if timed else command, capture_output=True, text=True, env=env,
                          cwd=REPO)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    rss = _time_v("Maximum resident set size (kbytes)", done.stderr) if timed else "?"
    try:
        cpu: float | None = sum(float(_time_v(f"{kind} time (seconds)", done.stderr)) for kind in ("User", "System"))
    except ValueError:
        cpu = None
    notes = [line for line in done.stderr.splitlines() if line.startswith(("Warning", "WARNING"))]
    return {"rss_mb": int(rss) / 1024 if rss.isdigit() else None, "wall_s": wall, "cpu_s": cpu,
            "figures": json.loads(done.stdout)["systems"], "notes": notes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 queries over 300 documents")
    parser.add_argument("--docs", type=int, default=3000)
    parser.add_argument("--queries", type=int, default=20_000)
    parser.add_argument("--cases", default="lexical,baseline+second,depth 100,runs",
                        help="comma-separated cases to run (default: all)")
    parser.add_argument("--data", type=Path, default=None, help="keep the collection (and IRFLOW_HOME) here")
    opts = parser.parse_args()
    n_docs, n_queries = (300, 2000) if opts.quick else (opts.docs, opts.queries)
    for line in machine_lines():
        print(line)
    with tempfile.TemporaryDirectory(prefix="irflow-evalmem-") as scratch:
        base = opts.data or Path(scratch)
        data = write_collection(base / "collection", n_docs, n_queries)
        size = (data / "queries.jsonl").stat().st_size
        print(f"workload: {n_queries:,} queries ({size / 1000:.0f} KB queries.jsonl) over {n_docs:,} documents, "
              f"lexical recipe")
        env = {**os.environ, "IRFLOW_HOME": str(base / "home"), "PYTHONPATH": REPO}
        common = ["eval", "lexical", "--dataset", str(data), "--embedder", "none", "--no-progress", "--json"]
        cases = {
            "lexical": common,
            "baseline+second": [*common, "--baseline", "search", "--set", "mode=lexical"],
            "depth 100": [*common, "--depth", "100"],
            "runs": [*common, "--runs", str(base / "runs")],
        }
        chosen = [c.strip() for c in opts.cases.split(",") if c.strip()]
        run_case([*common, "--depth", "10", "--metrics", "ndcg@10"], env)  # warm-up: builds the cached corpus
        rows, figures = [], {}
        for name in chosen:
            found = run_case(cases[name], env)
            figures[name] = found["figures"]
            rows.append([name, found["rss_mb"], found["wall_s"], found["cpu_s"]])
            for note in found["notes"]:  # type: ignore[attr-defined]
                print(f"  {name}: {note}")
        print(table(["case", "max RSS MB", "wall s", "cpu s"], rows))
        print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())} (wall time swings with it; "
              "CPU time, user + system, much less)")
        if "lexical" in figures and "runs" in figures:
            print(f"same figures with and without --runs: {figures['lexical'] == figures['runs']}")
        for name, systems in figures.items():
            print(f"{name}: {json.dumps(systems, sort_keys=True)}")


if __name__ == "__main__":
    main()
