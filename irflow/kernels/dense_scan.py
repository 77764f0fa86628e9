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

import platform
from typing import Any

import llvmlite.binding as llvm_binding  # numba's LLVM: which instructions this CPU has
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils, config
from numba.extending import intrinsic

__all__ = ["GROUPED", "LANES", "scan", "scan_carry", "encode", "group_for", "dot4", "dot4_loops"]

# -- four dot products at once (x86 with AVX2) -----------------------------------------------
#
# A batch is compute-bound, and LLVM's auto-vectorized loop (in ``scan``) spends three
# instructions per 16 multiply-adds (widen the row's bytes, multiply-add pairs, add) and sums
# each (row, query) pair's lanes on its own: at 64 queries it multiplies no faster than BLAS.
# ``dot4`` widens a row's 16 bytes once for four queries and keeps four vector accumulators,
# written as LLVM vector code with AVX2's ``pmaddwd`` (LLVM fuses it with the add into one
# ``vpdpwssd`` where the CPU has AVX-512 VNNI): about half the time per query of a batch.
# Exact: a ``pmaddwd`` lane adds two products of at most 127 x 32767 and a row's whole sum fits
# an int32 (``dense_index``), so no lane overflows and the integers equal the plain loop's.  Only
# where numba compiles for this machine's CPU (its default) and that CPU has AVX2 (``GROUPED``);
# elsewhere ``dot4`` is the plain loop (``dot4_loops``).  In this file, not its own module: numba's
# disk cache of ``scan`` is invalidated by changes to ``scan``'s file only.

#: Components per step of ``dot4``: its dimension must be a multiple of this.
LANES = 16


def _host_has_avx2() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64") or getattr(config, "CPU_NAME", None) \
            or getattr(config, "CPU_FEATURES", None):
        return False  # not x86, or numba told to compile for another CPU than this one
    try:
        return "+avx2" in llvm_binding.get_host_cpu_features().flatten().split(",")
    except Exception:  # noqa: BLE001 - no feature list: the plain loop
        return False


#: Whether ``dot4`` is the vector code (x86 with AVX2, numba compiling for this CPU).
GROUPED = _host_has_avx2()


@njit(inline="always")
def dot4_loops(codes, r, qcodes, j, d):  # pragma: no cover - compiled
    """``codes[r] . qcodes[j + g]`` for g < 4, plain loops (the portable form of ``dot4``)."""
    s0 = s1 = s2 = s3 = 0
    for i in range(d):
        x = np.int32(codes[r, i])
        s0 += x * np.int32(qcodes[j, i])  # type: ignore[assignment]
        s1 += x * np.int32(qcodes[j + 1, i])  # type: ignore[assignment]
        s2 += x * np.int32(qcodes[j + 2, i])  # type: ignore[assignment]
        s3 += x * np.int32(qcodes[j + 3, i])  # type: ignore[assignment]
    return np.int32(s0), np.int32(s1), np.int32(s2), np.int32(s3)


def _codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> Any:
    """LLVM IR of ``dot4``: a loop over ``LANES`` components, four <8 x i32> accumulators, four sums."""
    codes = context.make_array(signature.args[0])(context, builder, args[0])
    qcodes = context.make_array(signature.args[2])(context, builder, args[2])
    r, j, d = args[1], args[3], args[4]
    i64 = ir.IntType(64)
    bytes_ = ir.VectorType(ir.IntType(8), LANES)
    words = ir.VectorType(ir.IntType(16), LANES)
    sums = ir.VectorType(ir.IntType(32), LANES // 2)
    pmadd = cgutils.get_or_insert_function(builder.module, ir.FunctionType(sums, [words, words]),
                                           "llvm.x86.avx2.pmadd.wd")
    reduce = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), [sums]),
                                            "llvm.vector.reduce.add.v8i32")
    row = builder.gep(builder.bitcast(codes.data, ir.IntType(8).as_pointer()), [builder.mul(r, d)])
    first = builder.gep(builder.bitcast(qcodes.data, ir.IntType(16).as_pointer()), [builder.mul(j, d)])
    queries = [builder.gep(first, [builder.mul(d, ir.Constant(i64, g))]) for g in range(4)]
    entry = builder.basic_block
    loop = builder.append_basic_block("dot4.loop")
    done = builder.append_basic_block("dot4.done")
    builder.branch(loop)
    builder.position_at_end(loop)
    i = builder.phi(i64)
    accumulators = [builder.phi(sums) for _ in range(4)]
    i.add_incoming(ir.Constant(i64, 0), entry)
    x = builder.sext(builder.load(builder.bitcast(builder.gep(row, [i]), bytes_.as_pointer()), align=1), words)
    after = []
    for query, acc in zip(queries, accumulators):
        acc.add_incoming(ir.Constant(sums, None), entry)
        y = builder.load(builder.bitcast(builder.gep(query, [i]), words.as_pointer()), align=2)
        after.append(builder.add(acc, builder.call(pmadd, [x, y])))
    step = builder.add(i, ir.Constant(i64, LANES))
    i.add_incoming(step, loop)
    for acc, new in zip(accumulators, after):
        acc.add_incoming(new, loop)
    builder.cbranch(builder.icmp_signed("<", step, d), loop, done)
    builder.position_at_end(done)
    return context.make_tuple(builder, signature.return_type, [builder.call(reduce, [a]) for a in after])


@intrinsic
def _dot4_vector(typingctx: Any, codes: Any, r: Any, qcodes: Any, j: Any, d: Any) -> Any:
    """The vector ``dot4``: (n, d) C-contiguous int8 codes, (q, d) C-contiguous int16 queries, d % LANES == 0, d > 0."""
    return types.UniTuple(types.int32, 4)(codes, r, qcodes, j, d), _codegen


#: ``dot4(codes, r, qcodes, j, d)``: the four sums; the vector code where ``GROUPED``.
dot4: Any = _dot4_vector if GROUPED else dot4_loops



def group_for(codes: np.ndarray, qcodes: np.ndarray) -> int:
    """4 where ``scan`` may take four queries at once (``dot4``'s conditions), else 1."""
    d = codes.shape[1]
    fits = d > 0 and d % LANES == 0 and codes.flags.c_contiguous and qcodes.flags.c_contiguous
    return 4 if GROUPED and fits and qcodes.shape[0] >= 4 else 1


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
         block, group, least):  # pragma: no cover - compiled
    """(query, row) of every row whose upper bound reaches the query's k-th best lower bound and ``least``.

    ``scan_carry`` from an empty heap whose floor starts at ``least``; its
    arguments are described there.
    """
    heap = np.full((qcodes.shape[0], k), -np.inf)
    held = np.zeros(qcodes.shape[0], np.int64)
    kq, kr, _ = scan_carry(codes, scale, error, norm, blocks, qcodes, qscale, qcoded, qerror, qnorm, mask, k,
                           slack, block, group, heap, held, least.copy())
    return kq, kr


@njit(nogil=True, cache=True, error_model="numpy")
def scan_carry(codes, scale, error, norm, blocks, qcodes, qscale, qcoded, qerror, qnorm, mask, k, slack,
               block, group, heap, held, floor):  # pragma: no cover - compiled
    """(query, row, upper bound) of every row whose upper bound reaches the query's floor, which rises as it goes.

    ``codes`` (n, d) int8 with ``scale``, ``error``, ``norm`` per row and
    ``blocks`` per block of ``block`` rows (``DenseIndex.blocks``);
    ``qcodes`` (q, d) int16 with ``qscale``, ``qcoded`` (|c_q b|),
    ``qerror`` (|f|), ``qnorm`` (|q|) per query; ``mask`` (n,) bool, or
    size 0 for every row; ``k`` at most the rows the mask keeps (the
    parts' masks, when carried); ``slack`` the relative slack of the
    window; ``block`` rows per block; ``group`` 4: four queries' dot
    products at once (``dot4``: the dimension a multiple of its ``LANES``,
    C-contiguous codes), else 1; ``heap`` (q, k), ``held`` (q,) and ``floor`` (q,), read and updated in
    place: per query a min-heap of the k largest lower bounds seen (its
    first ``held`` entries), and a score rows must reach to be wanted — at
    least the heap's smallest once it holds k; a block or row whose upper
    bound is below it is skipped.  Start them empty with the floor at -inf
    (or at a score found before, as ``scan``'s ``least``); hand them on
    from one part of a corpus to the next, and every part is pruned by the
    lower bounds of all the rows before it, as one matrix is (the kept rows
    are distinct, so k lower bounds in the heap are k rows' scores).  The
    rows returned reach the floor as it is at the end of this call (a later
    part may raise it further: the caller cuts them again by the final one).
    """
    n, d = codes.shape
    n_queries = qcodes.shape[0]
    use_mask = mask.size > 0
    cap = max(4096, min(2 * k * n_queries, 1 << 20))  # grows when it must: a huge k x batch allocates as it fills
    kq = np.empty(cap, np.int64)
    kr = np.empty(cap, np.int64)
    ku = np.empty(cap, np.float64)
    m = 0
    dots = np.zeros((4, block), np.int32)
    ups = np.zeros(block)
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        j0 = 0
        while j0 < n_queries:
            # the block's dot products first, for four queries at once where ``group`` is 4
            width = 4 if group == 4 and j0 + 4 <= n_queries else 1
            if width == 4:
                for r in range(lo, hi):
                    dots[0, r - lo], dots[1, r - lo], dots[2, r - lo], dots[3, r - lo] = dot4(codes, r, qcodes,
                                                                                              j0, d)
            else:  # one query: a loop with nothing else in it vectorizes best
                for r in range(lo, hi):
                    s = 0
                    for i in range(d):
                        s += np.int32(codes[r, i]) * np.int32(qcodes[j0, i])  # type: ignore[assignment]
                    # the sum fits an int32 (d * 127 * the largest query code < 2**31): saying so lets
                    # LLVM sum int16 products into int32 lanes (vpmaddwd), twice as wide as int64
                    dots[0, r - lo] = np.int32(s)
            for g in range(width):
                j = j0 + g
                cq, qc, qw = qscale[j], qcoded[j], qerror[j] + slack * qnorm[j]
                fl = floor[j]
                # a bound of the whole block: its largest dot product at the scale that makes it
                # largest, plus the largest window; below the floor (most blocks), no row can pass
                top = dots[g, 0]
                for r in range(1, hi - lo):
                    top = max(top, dots[g, r])
                b = lo // block
                edge = top * (blocks[b, 0] if top >= 0 else blocks[b, 1]) * cq
                if edge + (blocks[b, 2] * qc + blocks[b, 3] * qw) < fl:
                    continue
                # then each row's upper bound (a loop without branches: vectorized too)
                for r in range(lo, hi):
                    ups[r - lo] = dots[g, r - lo] * (scale[r] * cq) + (error[r] * qc + norm[r] * qw)
                for r in range(lo, hi):
                    up = ups[r - lo]
                    if up < fl or (use_mask and not mask[r]):
                        continue
                    w = error[r] * qc + norm[r] * qw
                    held[j] = _push(heap, j, held[j], k, up - 2 * w)
                    if held[j] == k and heap[j, 0] > fl:
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
            j0 += width
    m = _compact(kq, kr, ku, m, floor)
    return kq[:m].copy(), kr[:m].copy(), ku[:m].copy()


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
