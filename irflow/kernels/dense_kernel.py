"""Which dense scan ranks: the compiled one over int8 codes (numba, when installed) or BLAS over float32.

``IRFLOW_DENSE_KERNEL`` (read once per process):

- ``auto`` (default): the compiled scan for a matrix of at least
  ``AUTO_MIN_ROWS`` rows when numba imports, BLAS otherwise.  Below that
  size BLAS answers in a few milliseconds, while the compiled scan costs
  its first call in each process about a second (importing numba, loading
  the cached machine code; the first call ever on a machine also compiles
  it, 10-20 s) and its codes a quarter of the vectors' memory;
- ``numba``: always the compiled scan (an error without numba);
- ``numpy``: always BLAS (what an install without numba runs).

Either way the candidates are scored exactly from the float32 vectors, so
the answers are the same to the bit (``irflow.kernels.dense_index`` has the
bound).  ``use_kernel`` switches inside a block (benchmarks, tests).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import numpy as np

from irflow.kernels.dense_index import BLOCK, SLACK, DenseIndex, encode_queries
from irflow.kernels.switch import KERNELS, KernelSwitch

__all__ = ["KERNEL_ENV", "KERNELS", "AUTO_MIN_ROWS", "DenseIndex", "kernel_name", "use_kernel",
           "compiled_module", "SWITCH", "build_index", "scan_module", "scan_candidates", "grouped_scan", "IndexSlot"]

KERNEL_ENV = "IRFLOW_DENSE_KERNEL"
#: ``auto`` compiles from this many rows up (see the module docstring).
AUTO_MIN_ROWS = 50_000

#: The choice, and the compiled module once loaded (:class:`~irflow.kernels.switch.KernelSwitch`).
SWITCH = KernelSwitch(env=KERNEL_ENV, module="irflow.kernels.dense_scan", what="the compiled dense scan",
                      fallback="ranking with BLAS", min_rows=AUTO_MIN_ROWS)


def compiled_module(n_rows: int | None = None) -> Any:
    """The compiled scan module for a matrix of ``n_rows`` rows (None: a large one), or None for BLAS."""
    return SWITCH.compiled_module(n_rows)


def kernel_name(n_rows: int | None = None) -> str:
    """The scan that ranks a matrix of ``n_rows`` rows (None: a large one) here: "numba" or "numpy"."""
    return SWITCH.kernel_name(n_rows)


@contextlib.contextmanager
def use_kernel(name: str) -> Iterator[None]:
    """Rank with ``name`` (one of ``KERNELS``) inside the block (benchmarks, tests; not thread-safe).

    >>> with use_kernel("numpy"):
    ...     kernel_name()
    'numpy'
    """
    with SWITCH.use(name, what="the dense kernel"):
        yield


def grouped_scan() -> bool:
    """Whether the compiled scan, loaded, takes four queries at once here (``dense_scan.GROUPED``)."""
    loaded = SWITCH.loaded
    return bool(loaded and loaded[0] is not None and loaded[0].GROUPED)


def build_index(matrix: np.ndarray, n_rows: int | None = None) -> DenseIndex | None:
    """The int8 index of ``matrix`` when the compiled scan ranks a matrix of its size here, else None.

    ``n_rows``: the size that decides, when ``matrix`` is a part of a larger
    corpus (a segment: the corpus's rows are scanned, part after part).
    """
    module = compiled_module(int(matrix.shape[0]) if n_rows is None else int(n_rows))
    return None if module is None else DenseIndex.build(matrix, module.encode)


def scan_module() -> Any:
    """The compiled scan module for an index given (whatever its size), or None: numpy asked for, or no numba."""
    choice = SWITCH.choice()
    return None if choice == "numpy" else SWITCH.load(required=choice == "numba")


def scan_candidates(index: DenseIndex, queries: np.ndarray, mask: np.ndarray | None,
                    k: int, group: int | None = None,
                    least: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """(query, row) of the rows that may reach each query's top ``k`` (queries finite, nonzero).

    None when the compiled scan cannot run here (numba missing or not
    chosen): the caller ranks with BLAS.  A superset of each query's exact
    top k, ties included (``irflow.kernels.dense_index``).  ``group``: 1 or
    4 queries' dot products at once (None: 4 where ``dense_scan.dot4`` can;
    tests compare the two).  ``least``: per query, a score its rows must
    exceed to be wanted (see ``dense.dense_topk``'s ``least``): rows whose
    upper bound is below it are not kept.
    """
    module = scan_module()
    if module is None:
        return None
    codes = encode_queries(queries)
    flags = np.zeros(0, np.bool_) if mask is None else mask
    start = np.full(queries.shape[0], -np.inf) if least is None else np.asarray(least, dtype=np.float64)
    query, row = module.scan(index.codes, index.scale, index.error, index.norm, index.blocks, codes.codes,
                             codes.scale, codes.coded_norm, codes.error, codes.norm, flags, int(k), SLACK, BLOCK,
                             module.group_for(index.codes, codes.codes) if group is None else group, start)
    return query, row


class IndexSlot:
    """A matrix's index, built on first use by whoever holds the matrix (a corpus), once, thread-safe.

    Built again if the compiled scan is chosen after a first use without it
    (``use_kernel``); the matrix must not change (a corpus's vectors are read-only).
    """

    def __init__(self) -> None:
        self._built: tuple[DenseIndex | None, bool] | None = None  # (index, compiled scan chosen then)
        self._lock = threading.Lock()

    def get(self, matrix: np.ndarray, n_rows: int | None = None) -> DenseIndex | None:
        """``matrix``'s index where the compiled scan ranks a matrix of its size (or of ``n_rows``), else None."""
        size = int(matrix.shape[0]) if n_rows is None else int(n_rows)
        compiled = kernel_name(size) == "numba"
        built = self._built
        if built is None or (compiled and not built[1]):
            with self._lock:
                built = self._built
                if built is None or (compiled and not built[1]):
                    built = self._built = (build_index(matrix, size), compiled)
        return built[0]
