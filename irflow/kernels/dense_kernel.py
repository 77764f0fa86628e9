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
import importlib
import os
import threading
import warnings
from typing import Any, Iterator

import numpy as np

from irflow.errors import IrflowError
from irflow.kernels.dense_index import BLOCK, SLACK, DenseIndex, encode_queries
from irflow.util.extras import install_hint

__all__ = ["KERNEL_ENV", "KERNELS", "AUTO_MIN_ROWS", "DenseIndex", "kernel_name", "use_kernel",
           "compiled_module", "build_index", "scan_candidates", "grouped_scan", "IndexSlot"]

KERNEL_ENV = "IRFLOW_DENSE_KERNEL"
KERNELS: tuple[str, ...] = ("auto", "numba", "numpy")
#: ``auto`` compiles from this many rows up (see the module docstring).
AUTO_MIN_ROWS = 50_000

_CHOICE: list[str] = []  # the kernel asked for: [one of KERNELS], resolved once
_MODULE: list[Any] = []  # [irflow.kernels.dense_scan or None (numba missing or broken)], loaded once


def _choice() -> str:
    if not _CHOICE:
        choice = os.environ.get(KERNEL_ENV, "auto").strip().lower() or "auto"
        if choice not in KERNELS:
            warnings.warn(f"{KERNEL_ENV}={choice!r} is not one of {', '.join(KERNELS)}; using auto", stacklevel=4)
            choice = "auto"
        _CHOICE.append(choice)
    return _CHOICE[0]


def _load(required: bool) -> Any:
    """The compiled module, or None when numba cannot be used (an error when ``required``)."""
    if not _MODULE:
        try:
            _MODULE.append(importlib.import_module("irflow.kernels.dense_scan"))
        except ImportError as error:
            if required:
                raise IrflowError(f"the compiled dense scan was asked for ({KERNEL_ENV}=numba) but numba cannot "
                                  f"be imported ({error}); {install_hint('fast')}, or unset {KERNEL_ENV}"
                                  ) from error
            _MODULE.append(None)
        except Exception as error:  # a broken numba install (llvmlite mismatch, no cache dir): BLAS still works
            if required:
                raise IrflowError(f"the compiled dense scan was asked for ({KERNEL_ENV}=numba) but it failed "
                                  f"to load: {error}") from error
            warnings.warn(f"irflow's compiled dense scan failed to load ({error}); ranking with BLAS",
                          stacklevel=4)
            _MODULE.append(None)
    return _MODULE[0]


def compiled_module(n_rows: int | None = None) -> Any:
    """The compiled scan module for a matrix of ``n_rows`` rows (None: a large one), or None for BLAS."""
    choice = _choice()
    if choice == "numpy" or (choice == "auto" and n_rows is not None and n_rows < AUTO_MIN_ROWS):
        return None
    return _load(required=choice == "numba")


def kernel_name(n_rows: int | None = None) -> str:
    """The scan that ranks a matrix of ``n_rows`` rows (None: a large one) here: "numba" or "numpy"."""
    return "numpy" if compiled_module(n_rows) is None else "numba"


@contextlib.contextmanager
def use_kernel(name: str) -> Iterator[None]:
    """Rank with ``name`` (one of ``KERNELS``) inside the block (benchmarks, tests; not thread-safe).

    >>> with use_kernel("numpy"):
    ...     kernel_name()
    'numpy'
    """
    if name not in KERNELS:
        raise IrflowError(f"the dense kernel must be one of {', '.join(KERNELS)}; got {name!r}")
    saved = _choice()
    _CHOICE[:] = [name]
    try:
        yield
    finally:
        _CHOICE[:] = [saved]


def grouped_scan() -> bool:
    """Whether the compiled scan, loaded, takes four queries at once here (``dense_scan.GROUPED``)."""
    return bool(_MODULE and _MODULE[0] is not None and _MODULE[0].GROUPED)


def build_index(matrix: np.ndarray, n_rows: int | None = None) -> DenseIndex | None:
    """The int8 index of ``matrix`` when the compiled scan ranks a matrix of its size here, else None.

    ``n_rows``: the size that decides, when ``matrix`` is a part of a larger
    corpus (a segment: the corpus's rows are scanned, part after part).
    """
    module = compiled_module(int(matrix.shape[0]) if n_rows is None else int(n_rows))
    return None if module is None else DenseIndex.build(matrix, module.encode)


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
    choice = _choice()  # an index given is used whatever its size, unless numpy was asked for
    module = None if choice == "numpy" else _load(required=choice == "numba")
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
