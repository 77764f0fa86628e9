"""A compressed copy of the corpus vectors (int8, one scale per row) with a rigorous bound on its error.

One exact dense query at 1M x 384 reads the whole float32 matrix (1.5 GB):
memory bandwidth is the limit, so a faster exact search must read fewer
bytes.  A :class:`DenseIndex` holds each row as int8 codes (4x fewer bytes)
and, per row, what bounds the codes' error.  The compiled scan
(``irflow.kernels.dense_scan``) reads only the codes to choose the rows that
may still reach a query's top k; those are then scored exactly from the
float32 vectors, as every other plan does (``irflow.kernels.dense_exact``),
so the answer is the same to the bit: the codes only filter.

**The bound.**  Row ``v`` (float32) is stored as ``c_v * a`` with integer
codes ``a = round(v / c_v)``, ``|a_i| <= 127``, ``c_v = max|v_i| / 127``;
the query ``q`` as ``c_q * b`` with int16 codes ``b`` (``|b_i| <= B``, ``B``
chosen so that ``d * 127 * B`` fits an int32).  With ``e = v - c_v a`` and
``f = q - c_q b`` (real numbers):

    v . q = c_v c_q (a . b) + e . (c_q b) + v . f

``a . b`` is an integer, summed exactly in int32 (in any order: threads,
vector width and blocking cannot change it).  By Cauchy-Schwarz the other
two terms are at most ``|e| |c_q b| + |v| |f|``.  So with ``est = c_v c_q
(a . b)`` and ``w = |e| |c_q b| + |v| |f|``, the true score lies in
``[est - w, est + w]``.  ``|e|`` and ``|v|`` are computed per row when the
index is built, ``|f|`` and ``|c_q b|`` per query, all in float64 (relative
error below 1e-13 for any d this kernel accepts); ``w`` also carries
``SLACK * |v| |q|`` (1e-9), which exceeds those roundings, the float64
rounding of ``est``, and the float64 rescoring's own error (about 1e-15
``|v| |q|``: ``irflow.kernels.dense_exact``).

**The filter.**  Let ``L`` be the k-th largest ``est - w`` of a query over
the candidate rows: k rows score (as rescored) at least ``L``.  A row whose
``est + w < L`` scores strictly below those k, so it cannot be in the top k
— not even by a tie broken by row.  Every other row is rescored exactly.
The scan keeps ``L`` as a running k-th best (a heap), so it only ever rises
towards the final value, and keeps a row when ``est + w`` reaches the
running value (a superset), then filters the kept rows by the final ``L``.

How loose it is: ``|e|`` is about ``c_v sqrt(d / 12)`` (rounding errors
uniform in half a code), so ``w`` is about ``0.3 %`` of a unit vector's
norm at d = 384 for random unit vectors (whose largest component is about
3x the mean); a few rows in a million fall in the window of a top-10 query.
Vectors with a few large components (``c_v`` large against the rest) get a
wider window; clustered vectors have more rows within it of the k-th best.
The benchmark (``benchmarks/dense.py``) reports the fraction rescored.

Zero rows have zero codes, scale and error: their window is 0 and their
score exactly 0.  Rows with a non-finite component cannot be bounded: no
index is built for such a matrix (``build`` returns None) and the kernel
ranks with BLAS as without one.

>>> m = np.array([[0.6, 0.8], [1.0, 0.0], [0.0, 0.0]], np.float32)
>>> index = DenseIndex.build(m)
>>> index.codes.tolist(), index.n_rows
([[95, 127], [127, 0], [0, 0]], 3)
"""

from __future__ import annotations

from typing import Callable

import attrs
import numpy as np

__all__ = ["BLOCK", "DenseIndex", "QueryCodes", "SLACK", "ROW_CODE_MAX", "encode_queries"]

#: Largest row code: rows are int8.
ROW_CODE_MAX = 127
#: Largest query code: int16, bounded so that a dot product of d codes fits an int32.
QUERY_CODE_MAX = 32767
#: Relative slack of the window, per unit of |v| |q| (covers every float64 rounding; see the docstring).
SLACK = 1e-9
#: Rows per block of the scan: 64 rows x 384 int8 = 24 KB, in L1 while every query of a batch reads them.
BLOCK = 64
#: Rows encoded per step of ``build`` (bounds its float64 temporaries: 64k x d x 8 bytes).
BUILD_CHUNK = 1 << 16


def _readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


@attrs.frozen(eq=False)
class DenseIndex:
    """Int8 codes of a matrix's rows and, per row, the scale and error bounds the scan needs.

    ``codes`` (n, d) int8; ``scale`` (n,) float64, ``c_v``; ``error`` (n,)
    float64, an upper bound of ``|v - c_v a|``; ``norm`` (n,) float64, an
    upper bound of ``|v|``.  Read-only arrays; made by :meth:`build`.
    """

    codes: np.ndarray
    scale: np.ndarray
    error: np.ndarray
    norm: np.ndarray
    blocks: np.ndarray = attrs.field(init=False)

    @blocks.default
    def _blocks(self) -> np.ndarray:
        """Per block of ``BLOCK`` rows: the largest and smallest scale, the largest error and norm.

        The scan bounds a whole block's scores from these and its largest
        dot product, and skips the block when that bound is below the k-th
        best (most blocks, most of the time).
        """
        n = self.scale.size
        pad = -n % BLOCK

        def per_block(values: np.ndarray, fill: float) -> np.ndarray:
            return np.concatenate((values, np.full(pad, fill))).reshape(-1, BLOCK)

        blocks = np.stack((per_block(self.scale, 0.0).max(axis=1), per_block(self.scale, np.inf).min(axis=1),
                           per_block(self.error, 0.0).max(axis=1), per_block(self.norm, 0.0).max(axis=1)), axis=1)
        return _readonly(np.ascontiguousarray(blocks))

    @property
    def n_rows(self) -> int:
        return int(self.codes.shape[0])

    @property
    def dim(self) -> int:
        return int(self.codes.shape[1])

    @property
    def nbytes(self) -> int:
        """Bytes held: the codes, three float64 per row and four per block."""
        return int(self.codes.nbytes + self.scale.nbytes + self.error.nbytes + self.norm.nbytes + self.blocks.nbytes)

    @classmethod
    def build(cls, matrix: np.ndarray, encode: Callable[..., bool] | None = None) -> DenseIndex | None:
        """The index of ``matrix`` (n, d) float32 or float64; None when it cannot be bounded.

        None for a matrix with a non-finite component, another dtype, or so
        many dimensions that a dot product of codes could overflow an int32.
        ``encode``: the compiled encoder (``irflow.kernels.dense_scan.encode``,
        one pass); None: numpy, in chunks of ``BUILD_CHUNK`` rows.  The codes
        and scales are the same either way; the error and norm bounds may
        differ in their last bits (sums in another order), both valid.
        """
        matrix = np.asarray(matrix)
        if matrix.ndim != 2 or matrix.dtype not in (np.float32, np.float64) or matrix.shape[1] == 0:
            return None
        n, d = matrix.shape
        if _query_code_max(d) < 1:
            return None
        codes = np.empty((n, d), dtype=np.int8)
        scale, error, norm = np.empty(n), np.empty(n), np.empty(n)
        if not (_encode if encode is None else encode)(matrix, codes, scale, error, norm):
            return None
        # float64 sums of d squares: relative error below d * 2**-53; rounded up well past it
        up = 1 + 4 * d * 2.0 ** -53 + 1e-12
        return cls(_readonly(codes), _readonly(scale), _readonly(error * up), _readonly(norm * up))


def _encode(matrix: np.ndarray, codes: np.ndarray, scale: np.ndarray, error: np.ndarray,
            norm: np.ndarray) -> bool:
    """Fill the codes, scales, error and norm of ``matrix``'s rows (numpy); False if a value is not finite."""
    for lo in range(0, matrix.shape[0], BUILD_CHUNK):
        block = matrix[lo:lo + BUILD_CHUNK].astype(np.float64)
        if not np.isfinite(block).all():
            return False
        hi = lo + block.shape[0]
        norm[lo:hi] = np.sqrt(np.einsum("ij,ij->i", block, block))
        c = np.abs(block).max(axis=1) / ROW_CODE_MAX
        a = np.rint(block / np.where(c > 0, c, 1.0)[:, None])
        np.clip(a, -ROW_CODE_MAX, ROW_CODE_MAX, out=a)  # (|v_i| / c_v <= 127 already, up to rounding)
        codes[lo:hi] = a
        block -= a * c[:, None]  # e = v - c_v a
        scale[lo:hi] = c
        error[lo:hi] = np.sqrt(np.einsum("ij,ij->i", block, block))
    return True


def _query_code_max(d: int) -> int:
    """The largest query code for d dimensions: d * 127 * code must fit an int32."""
    return min(QUERY_CODE_MAX, (2 ** 31 - 1) // (ROW_CODE_MAX * max(d, 1)))


@attrs.frozen(eq=False)
class QueryCodes:
    """Queries as the scan reads them: int16 codes, scale ``c_q``, ``|c_q b|``, ``|f|`` and ``|q|`` (float64)."""

    codes: np.ndarray
    scale: np.ndarray
    coded_norm: np.ndarray
    error: np.ndarray
    norm: np.ndarray


def encode_queries(queries: np.ndarray) -> QueryCodes:
    """The codes and bounds of ``queries`` (q, d), finite.

    >>> codes = encode_queries(np.array([[0.6, -0.8]], np.float32))
    >>> codes.codes.tolist(), bool(codes.error[0] < 1e-5)
    ([[24575, -32767]], True)
    """
    q = np.asarray(queries, dtype=np.float64)
    top = _query_code_max(q.shape[1])
    scale = np.abs(q).max(axis=1) / top
    b = np.rint(q / np.where(scale > 0, scale, 1.0)[:, None])  # a zero query: zero codes, scale and error
    np.clip(b, -top, top, out=b)
    coded = b * scale[:, None]
    up = 1 + 4 * q.shape[1] * 2.0 ** -53 + 1e-12

    def norms(x: np.ndarray) -> np.ndarray:
        result: np.ndarray = np.sqrt(np.einsum("ij,ij->i", x, x)) * up
        return result

    return QueryCodes(np.ascontiguousarray(b.astype(np.int16)), scale, norms(coded), norms(q - coded), norms(q))

