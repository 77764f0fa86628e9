"""Reading ``.npy`` files from several threads at once: one header parsed at a time.

numpy parses a ``.npy`` header with ``ast.literal_eval``.  CPython 3.11
keeps the AST converter's recursion depth in state the whole interpreter
shares, so a thread switch in the middle of one conversion — a garbage
collection there freeing a memory map releases the GIL — lets another
thread's conversion move it, and the first raises ``SystemError: AST
constructor recursion depth mismatch`` (python/cpython#106905).  Readers
opening a corpus (every array of it is a mapped ``.npy`` file) while other
threads open one too hit it.  Every header irflow parses goes through
:data:`HEADER_LOCK`: a few microseconds each, the data itself is mapped or
read outside it where numpy allows.
"""

from __future__ import annotations

import os
import threading
from typing import IO, Any

import numpy as np

__all__ = ["HEADER_LOCK", "load", "read_header"]

#: Held while numpy parses a ``.npy`` header (re-entrant: a collection inside may close a reader that loads).
HEADER_LOCK = threading.RLock()


def load(path: str | os.PathLike[str], *, mmap_mode: Any = None) -> np.ndarray:
    """``np.load`` of one array file, never unpickled, its header parsed under :data:`HEADER_LOCK`."""
    with HEADER_LOCK:
        return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)  # type: ignore[no-any-return]


def read_header(fh: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
    """The (shape, fortran order, dtype) of a ``.npy`` file at its start, format 1.0 or 2.0 (ValueError else)."""
    version = np.lib.format.read_magic(fh)
    if version not in ((1, 0), (2, 0)):  # np.save writes 3.0 only for non-latin-1 field names
        raise ValueError(f"unknown .npy format version {version}")
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    with HEADER_LOCK:
        shape, fortran, dtype = read(fh)
    return shape, fortran, dtype
