"""Unit vectors: the one normalization every embedder's output and every stored matrix goes through."""

from __future__ import annotations

from typing import Any

import numpy as np

from irflow.errors import EmbedderError

__all__ = ["normalize_rows"]


def normalize_rows(x: Any) -> np.ndarray:
    """A float32 copy of the 2-d array ``x`` with every row scaled to unit L2 norm.

    Zero rows stay zero (a text with no features matches nothing rather than
    everything).  Norms are computed in float64, chunk by chunk, so large
    values neither overflow nor need a float64 copy of a big matrix.

    >>> normalize_rows([[3.0, 4.0], [0.0, 0.0]]).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    out = np.array(x, dtype=np.float32)  # always a copy: never scale the caller's array
    if out.ndim != 2:
        raise EmbedderError(f"normalize_rows needs a 2-d array (n, d), got shape {out.shape}")
    step = 1 << 16
    for start in range(0, out.shape[0], step):
        block = out[start : start + step]
        wide = block.astype(np.float64)
        norms = np.sqrt(np.einsum("ij,ij->i", wide, wide))
        norms[norms == 0.0] = 1.0
        block[...] = wide / norms[:, None]
    return out
