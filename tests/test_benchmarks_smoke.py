"""Smoke test of the benchmark scripts: each runs its smallest configuration and its answers agree.

No timing is asserted (CI machines are noisy); what must hold is that the
scripts still run against the current library and that the systems they
compare return the same results: irflow's BM25 scores equal rank_bm25's,
the dense top-k rows equal the naive argsort's (and faiss's when
installed), and the hand-written hybrid pipeline returns search()'s hits.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"irflow_benchmark_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_lexical_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("rank_bm25")
    lexical = load("lexical")
    systems = "irflow,rank_bm25" + (",bm25s numpy" if importlib.util.find_spec("bm25s") else "")
    results = lexical.main(["--sizes", "2000", "--vocab", "3000", "--queries", "8", "--repeats", "1",
                            "--batch", "4", "--no-memory", "--no-scifact", "--systems", systems])
    result = results[2000]
    assert result["worst"] < 1e-9
    assert result["same"] == result["rank_queries"] == 8
    assert "top-10 latency" in capsys.readouterr().out


def test_dense_smoke() -> None:
    dense = load("dense")
    results = dense.main(["--sizes", "5000", "--queries", "2", "--batches", "8", "--n-batches", "1",
                          "--repeats", "1"])
    assert {r["filter"] for r in results} == {None, 0.01, 0.10, 0.50}
    assert all(r["same"] == 1.0 for r in results), [r for r in results if r["same"] != 1.0]


def test_pipeline_smoke() -> None:
    pipeline = load("pipeline")
    results = pipeline.main(["--artifacts", "300", "--queries", "2", "--batch", "8", "--n-batches", "1",
                             "--repeats", "1"])
    assert results["agree"] == results["n_check"]
    assert results["single_ok"]
