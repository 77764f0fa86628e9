"""Which BM25 kernel scores: the compiled one (numba, when installed) or numpy.

``IRFLOW_BM25_KERNEL`` = "auto" (default: compiled when numba imports),
"numpy" or "numba" (an error without numba), read once per process;
``use_kernel`` switches inside a block (benchmarks, tests).  Both kernels
give the same rows and the same score bits (``tests/test_bm25.py``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import warnings
from typing import Any, Iterator

from irflow.bm25.params import BM25ParamError
from irflow.errors import IrflowError

__all__ = ["KERNEL_ENV", "kernel_name", "use_kernel", "compiled_module"]

#: Which kernel scores: "auto" (compiled when numba is installed, else numpy), "numpy" or "numba".
KERNEL_ENV = "IRFLOW_BM25_KERNEL"
_COMPILED: list[Any] = []  # resolved once: [module or None]
#: Rows per block of the compiled kernel (None: its own ``BLOCK``); tests set tiny blocks.
COMPILED_BLOCK: int | None = None


def compiled_module() -> Any:
    """The compiled kernel module, or None for the numpy paths (``IRFLOW_BM25_KERNEL``; numba installed)."""
    if _COMPILED:
        return _COMPILED[0]
    choice = os.environ.get(KERNEL_ENV, "auto").strip().lower() or "auto"
    module = None
    if choice not in ("auto", "numpy", "numba"):
        warnings.warn(f"{KERNEL_ENV}={choice!r} is not one of auto, numpy, numba; using auto", stacklevel=3)
        choice = "auto"
    if choice != "numpy":
        try:
            module = importlib.import_module("irflow.bm25.compiled")
        except ImportError as error:
            if choice == "numba":
                raise IrflowError(f"{KERNEL_ENV}=numba but numba cannot be imported ({error}); "
                                  "pip install 'irflow[fast]'") from error
            module = None
        except Exception as error:  # a broken numba install (llvmlite mismatch, no cache dir): numpy still works
            if choice == "numba":
                raise IrflowError(f"{KERNEL_ENV}=numba but the compiled kernel failed to load: {error}") from error
            warnings.warn(f"irflow's compiled BM25 kernel failed to load ({error}); using the numpy kernel",
                          stacklevel=3)
            module = None
    _COMPILED.append(module)
    return module


def kernel_name() -> str:
    """The kernel that scores in this process: "numba" (compiled) or "numpy"."""
    return "numpy" if compiled_module() is None else "numba"


@contextlib.contextmanager
def use_kernel(name: str) -> Iterator[None]:
    """Score with ``name`` ("numpy", "numba" or "auto") inside the block (benchmarks, tests; not thread-safe).

    >>> with use_kernel("numpy"):
    ...     kernel_name()
    'numpy'
    """
    if name not in ("auto", "numpy", "numba"):
        raise BM25ParamError(f"kernel must be one of auto, numpy, numba; got {name!r}")
    saved = list(_COMPILED)
    _COMPILED.clear()
    if name == "numpy":
        _COMPILED.append(None)
    elif name == "numba":
        _COMPILED.append(importlib.import_module("irflow.bm25.compiled"))
    try:
        yield
    finally:
        _COMPILED[:] = saved
