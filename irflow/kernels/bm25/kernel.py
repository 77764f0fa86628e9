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
import importlib
import os
import warnings
from typing import Any, Iterator

from irflow.errors import BM25ParamError, IrflowError
from irflow.util.extras import install_hint

__all__ = ["KERNEL_ENV", "KERNELS", "AUTO_MIN_ROWS", "kernel_name", "use_kernel", "compiled_module"]

KERNEL_ENV = "IRFLOW_BM25_KERNEL"
KERNELS: tuple[str, ...] = ("auto", "numba", "numpy")
#: ``auto`` compiles from this many rows up (see the module docstring).
AUTO_MIN_ROWS = 50_000
#: Rows per block of the compiled kernel (None: its own ``BLOCK``); tests set tiny blocks.
COMPILED_BLOCK: int | None = None

_CHOICE: list[str] = []  # the kernel asked for: [one of KERNELS], resolved once
_MODULE: list[Any] = []  # [irflow.kernels.bm25.compiled or None (numba missing or broken)], loaded once


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
            _MODULE.append(importlib.import_module("irflow.kernels.bm25.compiled"))
        except ImportError as error:
            if required:
                raise IrflowError(f"the numba BM25 kernel was asked for ({KERNEL_ENV}=numba) but numba cannot "
                                  f"be imported ({error}); {install_hint('fast')}, or unset {KERNEL_ENV}"
                                  ) from error
            _MODULE.append(None)
        except Exception as error:  # a broken numba install (llvmlite mismatch, no cache dir): numpy still works
            if required:
                raise IrflowError(f"the numba BM25 kernel was asked for ({KERNEL_ENV}=numba) but it failed to "
                                  f"load: {error}") from error
            warnings.warn(f"irflow's compiled BM25 kernel failed to load ({error}); using the numpy kernel",
                          stacklevel=4)
            _MODULE.append(None)
    return _MODULE[0]


def compiled_module(n_rows: int | None = None) -> Any:
    """The compiled kernel module for an index of ``n_rows`` rows (None: a large one), or None for numpy."""
    choice = _choice()
    if choice == "numpy" or (choice == "auto" and n_rows is not None and n_rows < AUTO_MIN_ROWS):
        return None
    return _load(required=choice == "numba")


def kernel_name(n_rows: int | None = None) -> str:
    """The kernel that scores an index of ``n_rows`` rows (None: a large one) here: "numba" or "numpy"."""
    return "numpy" if compiled_module(n_rows) is None else "numba"


@contextlib.contextmanager
def use_kernel(name: str) -> Iterator[None]:
    """Score with ``name`` (one of ``KERNELS``) inside the block (benchmarks, tests; not thread-safe).

    >>> with use_kernel("numpy"):
    ...     kernel_name()
    'numpy'
    """
    if name not in KERNELS:
        raise BM25ParamError(f"kernel must be one of {', '.join(KERNELS)}; got {name!r}")
    saved = _choice()
    _CHOICE[:] = [name]
    try:
        yield
    finally:
        _CHOICE[:] = [saved]
