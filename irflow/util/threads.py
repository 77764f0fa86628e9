"""The threads irflow's compute may use: the ONNX embedder's (its session and its tokenizer) and BLAS's.

Answers never depend on them — every score is the same bits at any thread
count (dense products only rank, the rows that can reach the top are
rescored exactly; BM25 sums its terms in one order) —, so this is about
speed and about sharing a machine.  :func:`limit_threads` sets them for a
block (the command line's ``--threads N``); :func:`requested_threads` is what
the ONNX embedder reads when it opens its session, before
``$IRFLOW_ONNX_THREADS``.

BLAS is limited through threadpoolctl, which calls the loaded library's own
setter (``openblas_set_num_threads``, MKL's, BLIS's): ``OPENBLAS_NUM_THREADS``
and its kin are read once, when numpy loads its BLAS — at ``import irflow``,
before any option is parsed —, so an option cannot work through them.  The
tokenizer's thread pool (HF tokenizers, Rust's rayon) starts at its first
batch and reads ``RAYON_NUM_THREADS`` then, so that one is an environment
variable, set for the block unless the user set it.  irflow's numba kernels
are serial (no ``parallel=True``): they have no pool to limit, but a batch of
BM25 queries is cut into chunks that run on :func:`requested_threads`
threads (one outside a block; ``irflow.kernels.bm25.batch``).

>>> with limit_threads(1):
...     requested_threads()
1
>>> requested_threads() is None
True
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from threadpoolctl import threadpool_info, threadpool_limits

from irflow.errors import ArgumentError

__all__ = ["limit_threads", "requested_threads"]

logger = logging.getLogger(__name__)

# what limit_threads asked for (None: nothing asked); process-wide, as BLAS's own setting is
_requested: int | None = None

#: The tokenizer pool's variable (rayon's), set for a block unless the user set it.
RAYON = "RAYON_NUM_THREADS"


def requested_threads() -> int | None:
    """The thread count :func:`limit_threads` asked for in the current block, or None outside one."""
    return _requested


@contextlib.contextmanager
def limit_threads(n: int) -> Iterator[None]:
    """Within the block: BLAS on ``n`` threads, ONNX embedder sessions (opened in it) and BM25 batches too.

    A session opened before the block keeps its threads; the tokenizer's pool
    is sized once, when it first runs.  Restores the previous limits on exit.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ArgumentError(f"threads must be a positive integer, got {n!r}")
    global _requested
    previous = _requested
    rayon_given = RAYON in os.environ
    _requested = n
    if not rayon_given:
        os.environ[RAYON] = str(n)
    try:
        with threadpool_limits(limits=n, user_api="blas"):
            libraries = ", ".join(sorted({f"{lib['internal_api']} {lib['num_threads']}"
                                          for lib in threadpool_info() if lib["user_api"] == "blas"})) or "none loaded"
            logger.info("threads: %d for the ONNX embedder and BLAS (%s)", n, libraries)
            yield
    finally:
        _requested = previous
        if not rayon_given:
            os.environ.pop(RAYON, None)
