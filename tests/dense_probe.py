"""Dense reproducibility probe, run by tests/test_reproducible.py in a subprocess per BLAS kernel.

``python tests/dense_probe.py corename`` prints the OpenBLAS kernel this
process runs (``OPENBLAS_CORETYPE`` is read when numpy loads, so each kernel
needs its own process).  ``python tests/dense_probe.py check`` runs every
query of a fixed random set alone, in batches of 1 to 1000 queries (with
duplicates, in shuffled orders), under masks keeping 0.5% to 100% of the
rows on both plans (gathered rows, full matrix), and prints one JSON line:
the kernel, the thread count, how many results disagreed with the query's
answer alone (must be 0), and a digest of all answers (the test compares it
across kernels and thread counts).
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import os
import sys

import numpy as np


def corename() -> str | None:
    """The kernel numpy's OpenBLAS runs (None when numpy does not bundle a readable OpenBLAS)."""
    try:
        from threadpoolctl import threadpool_info

        for pool in threadpool_info():
            if pool.get("internal_api") == "openblas":
                return str(pool.get("architecture"))
    except ImportError:
        pass
    libs = os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs")
    for path in glob.glob(os.path.join(libs, "*openblas*")):
        lib = ctypes.CDLL(path)
        for symbol in ("scipy_openblas_get_corename64_", "openblas_get_corename64_", "openblas_get_corename"):
            function = getattr(lib, symbol, None)
            if function is not None:
                function.restype = ctypes.c_char_p
                return function().decode()
    return None


def check() -> dict:
    from irflow.kernels import dense

    rng = np.random.default_rng(20240609)
    n, d, n_queries, k = 4000, 384, 1000, 20
    matrix = rng.standard_normal((n, d), dtype=np.float32)
    matrix[rng.choice(n, 150, replace=False)] = matrix[rng.choice(n, 150)]  # exact duplicates: ties
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix.flags.writeable = False  # as a corpus's vectors: the norm bound is computed once
    queries = rng.standard_normal((n_queries, d), dtype=np.float32)
    queries[rng.choice(n_queries, 50, replace=False)] = queries[rng.choice(n_queries, 50)]  # equal queries
    queries[:20] = matrix[rng.choice(n, 20)]  # queries that hit rows exactly
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    masks = {"all": None}
    for keep in (0.005, 0.05, 0.6):
        masks[f"{keep:g}"] = rng.random(n) < keep
    singles = rng.choice(n_queries, 12, replace=False)
    mismatches = 0
    digest = hashlib.sha256()
    saved = (dense.GATHER_FRACTION_SINGLE, dense.GATHER_FRACTION_SMALL_BATCH, dense.GATHER_FRACTION_BATCH)
    for name, mask in masks.items():
        answers: dict[int, tuple[bytes, bytes]] = {}

        def record(batch: np.ndarray, top: dense.TopK) -> None:
            nonlocal mismatches
            for i, q in enumerate(batch.tolist()):
                rows, scores = top.per_query(i)
                got = (rows.tobytes(), scores.tobytes())
                if answers.setdefault(q, got) != got:  # noqa: B023 (called within this loop turn)
                    mismatches += 1

        for plan in ("default", "gather", "after"):
            if plan != "default":
                value = 1.0 if plan == "gather" else 0.0
                dense.GATHER_FRACTION_SINGLE = dense.GATHER_FRACTION_SMALL_BATCH = dense.GATHER_FRACTION_BATCH = value
            try:
                for q in singles.tolist():  # alone first: the answer every batch must give
                    record(np.array([q]), dense.dense_topk(matrix, queries[q], mask, k))
                if plan == "default":  # all 1000 queries, shuffled
                    everything = rng.permutation(n_queries)
                    record(everything, dense.dense_topk(matrix, queries[everything], mask, k))
                for size in (2, 64, 257):
                    batch = rng.choice(singles, size)  # with duplicates, any order
                    record(batch, dense.dense_topk(matrix, queries[batch], mask, k))
            finally:
                (dense.GATHER_FRACTION_SINGLE, dense.GATHER_FRACTION_SMALL_BATCH,
                 dense.GATHER_FRACTION_BATCH) = saved
        for q in sorted(answers):
            digest.update(f"{name}:{q}:".encode())
            digest.update(answers[q][0])
            digest.update(answers[q][1])
    return {
        "corename": corename(),
        "threads": os.environ.get("OPENBLAS_NUM_THREADS", ""),
        "mismatches": mismatches,
        "digest": digest.hexdigest(),
    }


if __name__ == "__main__":
    if sys.argv[1:] == ["corename"]:
        print(json.dumps({"corename": corename()}))
    else:
        print(json.dumps(check()))
