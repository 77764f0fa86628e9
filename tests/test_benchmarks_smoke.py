"""The benchmark scripts run from a clean clone (smallest configurations; no timing assertions)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True,
                          timeout=240, cwd=BENCH.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_lexical_quick_agrees_with_rank_bm25():
    out = _run("lexical.py", "--quick", "--no-memory", "--no-scifact", "--systems", "irflow,rank_bm25")
    line = next(l for l in out.splitlines() if l.startswith("agreement with rank_bm25"))
    diff = float(line.split("=")[1].split(";")[0])
    assert diff < 1e-9
    assert "identical top-10 rows" in line


@pytest.mark.slow
def test_dense_quick_runs_and_matches_the_naive_top_k():
    out = _run("dense.py", "--quick", "--no-faiss")
    assert "naive argsort" in out and "targets (issue 12)" in out
    # the public API's answers are checked against the kernel's: every query the same top 10
    for line in out.splitlines():
        if line.startswith(("search()", "Recipe.run", "naive argsort")):
            assert line.split()[-1] == "1.00", line


@pytest.mark.slow
def test_open_runs():
    out = _run("open.py", "--sizes", "2000", "--words", "5", "--repeats", "1")
    assert "open cpu s" in out and "irflow" in out


@pytest.mark.slow
def test_pipeline_quick_runs_and_the_kernels_give_the_same_hits():
    out = _run("pipeline.py", "--quick")
    assert "hits equal to the engine's" in out and "engine overhead" in out
