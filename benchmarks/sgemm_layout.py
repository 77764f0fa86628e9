"""The product under dense batches alone: numpy's float32 matrix product in either layout, tile by tile.

Issue 12 item 3 asks dense batches to be at least as fast as faiss's
``IndexFlatIP`` under the machine's OpenBLAS kernels.  Both spend most of
their time in the same ``sgemm``; this script times that product alone, the
way ``irflow.kernels.dense`` tiles it — (rows x queries) blocks of about
4 MB — against the other layout (queries x rows) and one whole product,
so the share left for selecting and rescoring is known per kernel setting;
faiss's whole search (its own product, selection, everything; its BLAS path)
beside them — faiss-cpu bundles its own OpenBLAS, which runs the kernel the
setting names (unset: the one it picks for this CPU, Prescott here).

One BLAS thread, CPU time of the process, median of ``--repeats`` passes
per layout, interleaved; ms per query.  Run it under each kernel setting:

    python benchmarks/sgemm_layout.py
    OPENBLAS_CORETYPE=Haswell python benchmarks/sgemm_layout.py
    python benchmarks/sgemm_layout.py --rows 20000 --repeats 2     # smoke test
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as H  # noqa: E402

#: Scores per tile, as irflow.kernels.dense.TILE_SCORES (float32: 4 MB), at least this many rows.
TILE_SCORES, TILE_MIN_ROWS = 1 << 20, 2048


def layouts(matrix: np.ndarray, queries: np.ndarray) -> dict[str, Callable[[], None]]:
    """Each way of computing every (row, query) product, as a call."""
    rows = max(TILE_MIN_ROWS, TILE_SCORES // queries.shape[0])
    by_rows = np.empty((rows, queries.shape[0]), np.float32)
    by_queries = np.empty((queries.shape[0], rows), np.float32)

    def rows_x_queries() -> None:  # irflow's layout
        for lo in range(0, matrix.shape[0], rows):
            tile = matrix[lo:lo + rows]
            np.matmul(tile, queries.T, out=by_rows[:tile.shape[0]])

    def queries_x_rows() -> None:
        for lo in range(0, matrix.shape[0], rows):
            tile = matrix[lo:lo + rows]
            np.matmul(queries, tile.T, out=by_queries[:, :tile.shape[0]])

    def whole() -> None:  # one (queries x rows) product, the whole score matrix at once
        np.matmul(queries, matrix.T)

    return {"tiles rows x queries": rows_x_queries, "tiles queries x rows": queries_x_rows,
            "whole queries x rows": whole}


def faiss_search(matrix: np.ndarray, queries: np.ndarray) -> dict[str, Callable[[], None]]:
    """faiss ``IndexFlatIP`` top 10, the whole search (its product, selection and all), when installed."""
    try:
        import faiss  # the bench extra's
    except ImportError:
        return {}
    faiss.omp_set_num_threads(1)
    # its BLAS path, as benchmarks/dense.py runs batches (faiss >= 1.12 ships a threshold of 128000)
    faiss.cvar.distance_compute_blas_threshold = 20
    index = faiss.IndexFlatIP(matrix.shape[1])
    index.add(matrix)
    return {"faiss search": lambda: index.search(queries, 10) and None}


def one_blas_thread() -> Any:
    """BLAS limited to one thread while inside (threadpoolctl, the bench extra's; without it, as set)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        print("  (threadpoolctl not installed: BLAS runs with its own thread count)")
        return contextlib.nullcontext()
    return threadpool_limits(limits=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--batches", default="64,256", help="queries per product (comma list)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for line in H.machine_lines():
        print(line)
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((args.rows, args.dim)).astype(np.float32)
    print(f"{args.rows} rows x {args.dim} float32; one BLAS thread; CPU ms per query, median of {args.repeats}")
    with one_blas_thread():
        for batch in (int(b) for b in args.batches.split(",")):
            queries = rng.standard_normal((batch, args.dim)).astype(np.float32)
            runs = {**layouts(matrix, queries), **faiss_search(matrix, queries)}
            times: dict[str, list[float]] = {name: [] for name in runs}
            for _ in range(args.repeats):
                for name, run in runs.items():
                    start = time.process_time()
                    run()
                    times[name].append((time.process_time() - start) * 1000 / batch)
            print(f"batch {batch}: " + ", ".join(f"{name} {np.median(t):.3f}" for name, t in times.items()))


if __name__ == "__main__":
    main()
