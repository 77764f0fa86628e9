"""The benchmark scripts run from a clean clone (smallest configurations; no timing assertions)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(script: str, *args: str, timeout: float = 240, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=BENCH.parent, env=None if env is None else {**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_lexical_quick_agrees_with_rank_bm25():
    out = _run("lexical.py", "--quick", "--no-memory", "--systems", "irflow kernel,irflow search(),rank_bm25")
    lines = [x for x in out.splitlines() if x.startswith("agreement with rank_bm25")]
    assert len(lines) == 2  # both query mixes of issue 12's corpus
    for line in lines:
        diff = float(line.split("=")[1].split(";")[0])
        assert diff < 1e-9
        assert "identical top-10 rows" in line
    assert "OPENBLAS_CORETYPE=" in out and "irflow BM25 kernel:" in out
    assert "engine" in out  # search() split into kernel and engine
    for line in (x for x in out.splitlines() if x.startswith("compiled kernel = numpy kernel")):
        done, total = line.split(" on ")[1].split()[0].split("/")
        assert done == total  # the two kernels' rows and score bits agree on every query


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
    # the hand-written pipeline does the recipe's work: the same hits for every query checked
    agree = re.search(r"hits equal to the engine's: kernels (\d+)/(\d+), kernels mask=None (\d+)/(\d+), "
                      r"search\(\) single (\w+)", out)
    assert agree is not None, out
    assert agree.group(1) == agree.group(2) == agree.group(3) == agree.group(4) and agree.group(5) == "yes", out


@pytest.mark.slow
def test_sgemm_layout_runs():
    out = _run("sgemm_layout.py", "--rows", "5000", "--dim", "16", "--batches", "8", "--repeats", "1")
    assert "OPENBLAS_CORETYPE=" in out
    line = next(x for x in out.splitlines() if x.startswith("batch 8:"))
    assert all(name in line for name in ("tiles rows x queries", "tiles queries x rows", "whole queries x rows"))


@pytest.mark.slow
@pytest.mark.data
def test_embed_quick_runs_both_graphs(tmp_path, monkeypatch):
    from irflow.kernels.onnx_embedder import pinned_model_available

    data = Path(os.environ.get("IRFLOW_DATA") or BENCH.parent / ".." / "shared" / "data")
    if not pinned_model_available() or not (data / "scifact" / "corpus.jsonl").is_file():
        pytest.skip("needs the models extra and ../shared/data (or $IRFLOW_DATA)")
    monkeypatch.setenv("IRFLOW_DATA", str(data))
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path))  # the fast graph is built into this cache
    out = _run("embed.py", "--quick", "--threads", "1")
    for texts in ("SciFact abstracts", "SciFact titles", "package summaries"):
        assert f"{texts}: exact, 1 thr" in out and f"{texts}: fast, 1 thr" in out
    cosine = re.search(r"fast vs exact over \d+ abstracts: cosine min ([0-9.]+)", out)
    assert cosine is not None and float(cosine.group(1)) > 0.99, out


@pytest.mark.slow
def test_eval_memory_quick_runs_and_the_runs_do_not_change_the_figures():
    out = _run("eval_memory.py", "--quick", "--cases", "lexical,runs")
    assert "workload: 2,000 queries" in out and "max RSS MB" in out
    assert "same figures with and without --runs: True" in out


def test_dense_codes_quick_gives_the_blas_plans_bits():
    pytest.importorskip("numba")
    out = _run("dense_codes.py", "--quick", "--no-faiss", "--api")
    checks = [x for x in out.splitlines() if "int8 scan = blas to the bit on every item" in x]
    assert len(checks) == 4 and all("every item: yes" in x for x in checks), out  # 2 kinds x 2 batch sizes
    assert "rows rescored per query" in out and "bytes read per query" in out
    assert "hits (record, score) equal on every query: yes" in out


def test_report_quick_writes_and_measures_a_page():
    out = _run("report.py", "--quick")
    assert "100 queries x 5 stages x 200 candidates" in out
    assert re.search(r"write: [0-9.]+ s CPU, [0-9.]+ s wall", out) and re.search(r"page: [0-9.]+ MB", out)
    assert "load: " in out


@pytest.mark.slow
def test_batch_quick_gives_the_same_answers_in_any_batch_and_thread_count():
    out = _run("batch.py", "--quick")
    assert "OPENBLAS_CORETYPE=" in out and "median" in out and "p90" in out
    # the lexical recipe's rows and score bits do not depend on how the batch is cut or on the threads
    assert "in one call, in batches of 25, at threads 1, 2: yes" in out, out
    agree = re.search(r"hits equal to the kernels by hand: (\d+)/(\d+)", out)
    assert agree is not None and agree.group(1) == agree.group(2), out
    assert out.count("kernels by hand / recipe:") == 2  # threads 1 and 2


def test_update_quick_measures_commits_compact_and_latency(tmp_path):
    pytest.importorskip("numba")
    # 20k records (the script's own --quick is 100k): the compiled BM25 kernel forced, as a corpus of 50k rows
    # and more chooses it, so the loop over the segments runs
    out = _run("update.py", "--quick", "--records", "20000", "--queries", "8", "--commits", "1", "--workdir",
               str(tmp_path), timeout=600, env={"IRFLOW_BM25_KERNEL": "numba"})
    assert "OPENBLAS_CORETYPE=" in out and "22,222 rows in 10 segments, 20,000 live" in out
    assert re.search(r"compact: [0-9.]+ s; peak RSS of the process \d+ MB", out)
    for commit in ("add 1,000", "delete 1,000"):
        assert re.search(commit + r" +1 +[0-9.]+ +[0-9.]+ +[0-9.]+", out), out
    for call in ("bm25_topk", "search lexical", "dense_topk", "search dense"):
        assert len(re.findall(rf"^{call} +(1|default) +(cpu|wall)", out, re.M)) == 2, out
    # the segmented corpus answers as the compacted one: every query, every call
    assert "same hits (record ids and score bits) on both corpora: 32/32" in out
