"""Which of two kernels runs: a compiled module (numba, an optional extra) or the always-available numpy path.

BM25 (:mod:`irflow.kernels.bm25.kernel`) and the dense scan
(:mod:`irflow.kernels.dense_kernel`) choose the same way: an environment
variable read once per process (``auto``, ``numba`` or ``numpy``; an
unknown value warns and means ``auto``), ``auto`` compiling only from
``min_rows`` rows up (numba's first call in a process costs about a second),
the compiled module imported once — missing numba falls back silently, a
broken install falls back with a warning, and asking for ``numba`` without
it is one clear error naming the extra to install.  Both kernels give the
same answers, so the choice is about speed only.

>>> switch = KernelSwitch(env="IRFLOW_X_KERNEL", module="no.such.module", what="the X kernel",
...                       fallback="using numpy", min_rows=10)
>>> switch.kernel_name(5), switch.kernel_name(50)
('numpy', 'numpy')
"""

from __future__ import annotations

import contextlib
import importlib
import os
import warnings
from typing import Any, Iterator

from irflow.errors import IrflowError
from irflow.util.extras import install_hint

__all__ = ["KernelSwitch", "KERNELS"]

KERNELS: tuple[str, ...] = ("auto", "numba", "numpy")


class KernelSwitch:
    """One kernel family's choice: ``env`` names it, ``module`` is the compiled module's import path.

    ``what`` names the compiled kernel in messages, ``fallback`` says what
    runs without it; ``error`` is the class of a bad :meth:`use` name.
    """

    def __init__(self, *, env: str, module: str, what: str, fallback: str, min_rows: int,
                 error: type[IrflowError] = IrflowError) -> None:
        self.env, self.module, self.what, self.fallback = env, module, what, fallback
        self.min_rows = min_rows
        self.error = error
        self.chosen: list[str] = []  # [one of KERNELS], resolved once
        self.loaded: list[Any] = []  # [the compiled module, or None (numba missing or broken)], loaded once

    def choice(self) -> str:
        """The kernel asked for (the environment variable, read once)."""
        if not self.chosen:
            choice = os.environ.get(self.env, "auto").strip().lower() or "auto"
            if choice not in KERNELS:
                warnings.warn(f"{self.env}={choice!r} is not one of {', '.join(KERNELS)}; using auto", stacklevel=4)
                choice = "auto"
            self.chosen.append(choice)
        return self.chosen[0]

    def load(self, required: bool) -> Any:
        """The compiled module, or None when numba cannot be used (an error when ``required``)."""
        if not self.loaded:
            try:
                self.loaded.append(importlib.import_module(self.module))
            except ImportError as error:
                if required:
                    raise IrflowError(f"{self.what} was asked for ({self.env}=numba) but numba cannot be imported "
                                      f"({error}); {install_hint('fast')}, or unset {self.env}") from error
                self.loaded.append(None)
            except Exception as error:  # a broken numba install (llvmlite mismatch, no cache dir)
                if required:
                    raise IrflowError(f"{self.what} was asked for ({self.env}=numba) but it failed to load: "
                                      f"{error}") from error
                warnings.warn(f"irflow's {self.what.removeprefix('the ')} failed to load ({error}); {self.fallback}",
                              stacklevel=4)
                self.loaded.append(None)
        return self.loaded[0]

    def compiled_module(self, n_rows: int | None = None) -> Any:
        """The compiled module for ``n_rows`` rows (None: a large index), or None for the numpy path."""
        choice = self.choice()
        if choice == "numpy" or (choice == "auto" and n_rows is not None and n_rows < self.min_rows):
            return None
        return self.load(required=choice == "numba")

    def kernel_name(self, n_rows: int | None = None) -> str:
        """The kernel that runs for ``n_rows`` rows (None: a large index) here: "numba" or "numpy"."""
        return "numpy" if self.compiled_module(n_rows) is None else "numba"

    @contextlib.contextmanager
    def use(self, name: str, what: str = "kernel") -> Iterator[None]:
        """Run ``name`` (one of ``KERNELS``) inside the block (benchmarks, tests; not thread-safe)."""
        if name not in KERNELS:
            raise self.error(f"{what} must be one of {', '.join(KERNELS)}; got {name!r}")
        saved = self.choice()
        self.chosen[:] = [name]
        try:
            yield
        finally:
            self.chosen[:] = [saved]
