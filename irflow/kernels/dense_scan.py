"""The compiled scan over a ``DenseIndex``'s int8 codes: the rows that may reach each query's top k (numba).

Reads 1 byte per component instead of 4 (``irflow.kernels.dense_index``
has the bound and why the filter is exact).  numpy has no int8 matrix
product, so this loop is compiled: per block of ``dense_index.BLOCK`` rows
(in L1), per query, the integer dot products of the codes (LLVM vectorizes
them: int16 multiply-adds into int32); then one bound for the whole block
(its largest dot product, scale, error and norm), below the query's floor
for most blocks, which are then done; else each row's window and a running
k-th best lower bound per query (a min-heap).  A row is kept when its upper
bound reaches the running bound; the kept rows are filtered by the final
one at the end (and whenever the list fills, so it stays small).  ``scan``
is one loop nest on purpose, as BM25's compiled ``topk``: no call boundary
in the hot loop.

Integer sums are exact in any order, and every comparison uses bounds that
hold whatever the order, so the rows kept — a superset of the exact top k,
ties included — are the same under any CPU, vector width or compiler.
Imported only when numba is installed and chosen
(``irflow.kernels.dense_kernel``); the machine code is cached on disk.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["scan", "encode"]


@njit(inline="always")
def _push(heap, j, m, k, value):  # pragma: no cover - compiled
    """Offer ``value`` to query j's min-heap of the k largest lower bounds (m held); returns the new size."""
    if m < k:
        i = m
        while i > 0:
            parent = (i - 1) >> 1
            if heap[j, parent] <= value:
                break
            heap[j, i] = heap[j, parent]
            i = parent
        heap[j, i] = value
        return m + 1
    if value <= heap[j, 0]:
        return m
    i = 0
    while True:
        c = 2 * i + 1
        if c >= k:
            break
        if c + 1 < k and heap[j, c + 1] < heap[j, c]:
            c += 1
        if heap[j, c] >= value:
            break
        heap[j, i] = heap[j, c]
        i = c
    heap[j, i] = value
    return m


@njit(inline="always")
def _compact(kq, kr, ku, m, floor):  # pragma: no cover - compiled
    """Keep the entries whose upper bound reaches their query's floor; returns how many."""
    out = 0
    for i in range(m):
        if ku[i] >= floor[kq[i]]:
            kq[out] = kq[i]
            kr[out] = kr[i]
            ku[out] = ku[i]
            out += 1
    return out


@njit(nogil=True, cache=True, error_model="numpy")
def scan(codes, scale, error, norm, blocks, qcodes, qscale, qcoded, qerror, qnorm, mask, k, slack,
         block):  # pragma: no cover - compiled
    """(query, row) of every row whose upper bound reaches the query's k-th best lower bound.

    ``codes`` (n, d) int8 with ``scale``, ``error``, ``norm`` per row and
    ``blocks`` per block of ``block`` rows (``DenseIndex.blocks``);
    ``qcodes`` (q, d) int16 with ``qscale``, ``qcoded`` (|c_q b|),
    ``qerror`` (|f|), ``qnorm`` (|q|) per query; ``mask`` (n,) bool, or
    size 0 for every row; ``k`` at most the rows the mask keeps; ``slack``
    the relative slack of the window; ``block`` rows per block.
    """
    n, d = codes.shape
    n_queries = qcodes.shape[0]
    use_mask = mask.size > 0
    heap = np.full((n_queries, k), -np.inf)
    held = np.zeros(n_queries, np.int64)
    floor = np.full(n_queries, -np.inf)
    cap = max(4096, min(2 * k * n_queries, 1 << 20))  # grows when it must: a huge k x batch allocates as it fills
    kq = np.empty(cap, np.int64)
    kr = np.empty(cap, np.int64)
    ku = np.empty(cap, np.float64)
    m = 0
    dots = np.zeros(block, np.int32)
    ups = np.zeros(block)
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        for j in range(n_queries):
            # the block's dot products first: a loop with nothing else in it vectorizes best
            for r in range(lo, hi):
                s = 0
                for i in range(d):
                    s += np.int32(codes[r, i]) * np.int32(qcodes[j, i])  # type: ignore[assignment]
                # the sum fits an int32 (d * 127 * the largest query code < 2**31): saying so lets
                # LLVM sum int16 products into int32 lanes (vpmaddwd), twice as wide as int64
                dots[r - lo] = np.int32(s)
            cq, qc, qw = qscale[j], qcoded[j], qerror[j] + slack * qnorm[j]
            fl = floor[j]
            # first a bound of the whole block: its largest dot product at the scale that makes it
            # largest, plus the largest window; below the floor (most blocks), no row can pass
            top = dots[0]
            for r in range(1, hi - lo):
                top = max(top, dots[r])
            b = lo // block
            edge = top * (blocks[b, 0] if top >= 0 else blocks[b, 1]) * cq
            if edge + (blocks[b, 2] * qc + blocks[b, 3] * qw) < fl:
                continue
            # then each row's upper bound (a loop without branches: vectorized too)
            for r in range(lo, hi):
                ups[r - lo] = dots[r - lo] * (scale[r] * cq) + (error[r] * qc + norm[r] * qw)
            fl = floor[j]
            for r in range(lo, hi):
                up = ups[r - lo]
                if up < fl or (use_mask and not mask[r]):
                    continue
                w = error[r] * qc + norm[r] * qw
                held[j] = _push(heap, j, held[j], k, up - 2 * w)
                if held[j] == k:
                    fl = heap[j, 0]
                    floor[j] = fl
                if m == cap:
                    m = _compact(kq, kr, ku, m, floor)
                    if 2 * m > cap:  # still half full: more room
                        cap *= 2
                        kq2, kr2, ku2 = np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap)
                        kq2[:m], kr2[:m], ku2[:m] = kq[:m], kr[:m], ku[:m]
                        kq, kr, ku = kq2, kr2, ku2
                kq[m] = j
                kr[m] = r
                ku[m] = up
                m += 1
    m = _compact(kq, kr, ku, m, floor)
    return kq[:m].copy(), kr[:m].copy()


@njit(nogil=True, cache=True, error_model="numpy")
def encode(matrix, codes, scale, error, norm):  # pragma: no cover - compiled
    """``DenseIndex.build``'s arithmetic in one pass per row (see ``irflow.kernels.dense_index``).

    Float64 throughout, as the numpy reference does; returns False at the
    first non-finite component (no index for such a matrix).
    """
    n, d = matrix.shape
    for r in range(n):
        largest = 0.0
        total = 0.0
        for i in range(d):
            x = np.float64(matrix[r, i])
            if not np.isfinite(x):
                return False
            largest = max(largest, abs(x))
            total += x * x
        c = largest / 127
        safe = c if c > 0 else 1.0
        err = 0.0
        for i in range(d):
            x = np.float64(matrix[r, i])
            a = min(max(np.rint(x / safe), -127.0), 127.0)
            codes[r, i] = np.int8(a)
            e = x - a * c
            err += e * e
        scale[r] = c
        error[r] = np.sqrt(err)
        norm[r] = np.sqrt(total)
    return True
