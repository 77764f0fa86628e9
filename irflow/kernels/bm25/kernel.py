"""Which BM25 kernel scores: the compiled one (numba, when installed) or numpy.

``IRFLOW_BM25_KERNEL`` (read once per process):

- ``auto`` (default): the compiled kernel for an index of at least
  ``AUTO_MIN_ROWS`` rows when numba imports, numpy otherwise.  Below that
  size numpy answers in well under a millisecond, while the compiled kernel
  costs its first call in each process about 1.5 s (importing numba, loading
  the cached machine code; the first call ever on a machine also compiles it,
  10-20 s) — a loss for a small corpus or a one-shot command;
- ``numba``: always the compiled kernel (an error without numba);
- ``numpy``: always numpy.

``use_kernel`` switches inside a block (benchmarks, tests).  Both kernels
give the same rows and the same score bits (``tests/test_bm25.py``).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from irflow.errors import BM25ParamError
from irflow.kernels.switch import KERNELS, KernelSwitch

__all__ = ["KERNEL_ENV", "KERNELS", "AUTO_MIN_ROWS", "SWITCH", "kernel_name", "use_kernel", "compiled_module"]

KERNEL_ENV = "IRFLOW_BM25_KERNEL"
#: ``auto`` compiles from this many rows up (see the module docstring).
AUTO_MIN_ROWS = 50_000
#: Rows per block of the compiled kernel (None: its own ``BLOCK``); tests set tiny blocks.
COMPILED_BLOCK: int | None = None

#: The choice, and the compiled module once loaded (:class:`~irflow.kernels.switch.KernelSwitch`).
SWITCH = KernelSwitch(env=KERNEL_ENV, module="irflow.kernels.bm25.compiled", what="the compiled BM25 kernel",
                      fallback="using the numpy kernel", min_rows=AUTO_MIN_ROWS, error=BM25ParamError)


def compiled_module(n_rows: int | None = None) -> Any:
    """The compiled kernel module for an index of ``n_rows`` rows (None: a large one), or None for numpy."""
    return SWITCH.compiled_module(n_rows)


def kernel_name(n_rows: int | None = None) -> str:
    """The kernel that scores an index of ``n_rows`` rows (None: a large one) here: "numba" or "numpy"."""
    return SWITCH.kernel_name(n_rows)


@contextlib.contextmanager
def use_kernel(name: str) -> Iterator[None]:
    """Score with ``name`` (one of ``KERNELS``) inside the block (benchmarks, tests; not thread-safe).

    >>> with use_kernel("numpy"):
    ...     kernel_name()
    'numpy'
    """
    with SWITCH.use(name):
        yield
