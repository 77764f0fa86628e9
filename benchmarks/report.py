"""The cost of a trace's HTML page: write time, page size, and the time a headless chromium takes to open it.

The trace is synthetic (tests/report_scale.py): QUERIES queries through a chain of STAGES stages of
CANDIDATES candidates each (1,000 x 10 x 1,000 by default: ten million candidates), loaded-style
(identities and text excerpts from tables, as a trace file gives them).  A page holds its first 100
queries, each stage's top 50 candidates per query and the paths of each query's top 10 hits.

    python benchmarks/report.py             # 1,000 x 10 x 1,000
    python benchmarks/report.py --quick     # 100 x 5 x 200, in seconds

Write time (the target: <= 2 s of CPU, and opening <= 2 s) is the median of three writes (CPU
and wall clock); the load time is the page's own navigation timing (its load event), the best of
two opens in one browser, when /usr/bin/chromium and playwright are there.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the synthetic trace's builder
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _harness import machine_lines  # noqa: E402
from report_scale import big_trace  # noqa: E402

CHROMIUM = "/usr/bin/chromium"


def load_seconds(path: Path) -> float | None:
    """Seconds until the page's load event in a headless chromium (None without one)."""
    try:
        from playwright.sync_api import sync_playwright  # optional: only to open the page
    except ImportError:
        return None
    if not Path(CHROMIUM).is_file():
        return None
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as running:
        context = running.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, offline=True,
            args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"])
        page = context.new_page()
        seen = []
        for _ in range(2):
            page.goto(path.resolve().as_uri(), wait_until="load")
            seen.append(page.evaluate("() => performance.getEntriesByType('navigation')[0].loadEventEnd") / 1000)
        context.close()
    return min(seen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--stages", type=int, default=10)
    parser.add_argument("--candidates", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="100 queries x 5 stages x 200 candidates")
    args = parser.parse_args()
    if args.quick:
        args.queries, args.stages, args.candidates = 100, 5, 200
    print("\n".join(machine_lines()))
    start = time.perf_counter()
    trace = big_trace(args.queries, args.stages, args.candidates)
    print(f"trace: {args.queries} queries x {args.stages} stages x {args.candidates} candidates "
          f"({args.queries * args.stages * args.candidates:,} candidates), built in {time.perf_counter() - start:.1f} s")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "report.html"
        cpu, wall = [], []
        for _ in range(3):
            c, w = time.process_time(), time.perf_counter()
            trace.to_html(path)
            cpu.append(time.process_time() - c)
            wall.append(time.perf_counter() - w)
        print(f"write: {statistics.median(cpu):.2f} s CPU, {statistics.median(wall):.2f} s wall (median of 3)")
        print(f"page: {path.stat().st_size / 1e6:.1f} MB")
        loaded = load_seconds(path)
        print("load: " + (f"{loaded:.2f} s to the load event in headless chromium" if loaded is not None
                          else f"not measured (needs playwright and {CHROMIUM})"))


if __name__ == "__main__":
    main()
