"""Exact cosine top-k over a corpus's parts (its segments) in one int8 scan carried from part to part.

A corpus of several segments can rank each with ``dense.dense_topk`` and
merge the tops (and does where this module does not apply), but then every
part encodes the queries again, starts its scan from a floor of its own,
scores its candidates exactly and ranks them before the merge: on ten
segments of 1M rows about 4 ms per query beside a scan of 17 ms.  Here:

1. the queries are encoded once (``dense_index.encode_queries``);
2. the compiled scan (``dense_scan.scan_carry``) reads each part's codes in
   turn with one heap of lower bounds and one floor per query, handed from
   part to part: every part is pruned by the bounds of all the rows before
   it, as the rows of one matrix are;
3. the candidates of every part are cut by the final floor, scored exactly
   (``dense_exact.exact_scores``, their vectors gathered from the parts'
   matrices) and ranked
   once by (score desc, global row asc).

**Exact.**  The heap holds lower bounds ``est - w`` of distinct candidate
rows (a row is offered once per query, and only when its part's mask keeps
it), so once it holds k of them its smallest, the floor, is a score that k
candidate rows reach.  A row is dropped — by a block's bound or its own in
the scan, or by the final cut — only when its upper bound ``est + w`` is
below such a floor: it scores strictly less than k other candidates, so it
is not in the top k, not even by a tie broken by row
(``irflow.kernels.dense_index`` proves the bounds).  Every other candidate
gets its exact score, whose bits depend on the two vectors only, so the top
k is the one a single matrix of the same rows gives — and the one ranking
each part with ``dense_topk`` and merging gives — to the bit.

It applies when every part has its codes, the compiled scan is chosen, the
batch is one the scan ranks (``dense.SCAN_MAX_QUERIES``), no query is zero
(a zero query's top k are the first k candidates) and no part's mask is
selective enough for ``dense_topk`` to gather its rows; elsewhere
``parts_topk`` returns None and the caller ranks part by part.

>>> import numpy as np
>>> from irflow.kernels.dense_index import DenseIndex
>>> m = np.eye(3, dtype=np.float32)
>>> parts = [DensePart(m[:2], DenseIndex.build(m[:2]), None, 0), DensePart(m[2:], DenseIndex.build(m[2:]), None, 2)]
>>> top = parts_topk(parts, np.array([[0.0, 0.6, 0.8]], np.float32), 2)
>>> top is None or top.per_query(0)[0].tolist() == [2, 1]
True
"""

from __future__ import annotations

from typing import Any, Sequence

import attrs
import numpy as np

from irflow.kernels import dense as _dense
from irflow.kernels.dense_exact import best_pairs, exact_scores
from irflow.kernels.dense_index import BLOCK, SLACK, DenseIndex, encode_queries
from irflow.kernels.dense_kernel import grouped_scan, scan_module
from irflow.kernels.topk import TopK

__all__ = ["DensePart", "parts_topk"]

_EVERY_ROW = np.zeros(0, dtype=np.bool_)  # the scan's mask for a part whose every row is a candidate


@attrs.frozen(eq=False)
class DensePart:
    """One part of a corpus for ``parts_topk``.

    ``matrix`` (n, d) its vectors; ``index`` their int8 codes (None: none
    built, so the scan cannot rank); ``mask`` (n,) bool its candidate rows
    (None: every row); ``first`` the corpus row of its row 0; ``allowed``
    the rows ``mask`` keeps when the caller knows (None: counted here).
    """

    matrix: np.ndarray
    index: DenseIndex | None
    mask: np.ndarray | None
    first: int
    allowed: int | None = None


_Scanned = tuple[DensePart, DenseIndex, np.ndarray]  # a part to scan, its codes, its mask as the scan reads it


def _plan(parts: Sequence[DensePart], queries: np.ndarray) -> tuple[Any, list[_Scanned], int] | None:
    """(the compiled module, the parts to scan, their candidate rows in all); None: not here."""
    n_queries = queries.shape[0]
    if n_queries == 0 or n_queries > (_dense.SCAN_MAX_QUERIES_GROUPED if grouped_scan() else _dense.SCAN_MAX_QUERIES):
        return None
    if not queries.any(axis=1).all():
        return None
    module = scan_module()
    if module is None:
        return None
    scanned: list[_Scanned] = []
    total, gather = 0, _dense.gather_fraction(n_queries)
    for part in parts:
        index, rows = part.index, part.matrix.shape[0]
        if index is None or index.codes.shape != part.matrix.shape or part.matrix.dtype != queries.dtype:
            return None
        allowed = rows if part.mask is None else \
            (int(np.count_nonzero(part.mask)) if part.allowed is None else int(part.allowed))
        if allowed == 0:
            continue  # nothing to rank here
        if allowed < rows and allowed <= gather * rows:
            return None  # dense_topk would gather this part's rows: part by part is the faster plan
        scanned.append((part, index, _EVERY_ROW if allowed == rows or part.mask is None else part.mask))
        total += allowed
    return module, scanned, total


def parts_topk(parts: Sequence[DensePart], queries: np.ndarray, fetch_k: int) -> TopK | None:
    """Top ``fetch_k`` corpus rows of the parts by dot product with each query, exactly; None where it does not apply.

    ``queries`` (q, d), finite, of the matrices' dtype (a corpus checks
    them); rows are the corpus's (``first`` + the part's row).  The answer
    is ``dense.dense_topk``'s on the parts' rows stacked, to the bit (see
    the module docstring); None: rank the parts one by one.
    """
    plan = _plan(parts, queries)
    if plan is None:
        return None
    module, scanned, total = plan
    n_queries, k = queries.shape[0], min(int(fetch_k), total)
    if k <= 0:
        return TopK.empty(n_queries)
    codes = encode_queries(queries)
    heap = np.full((n_queries, k), -np.inf)  # per query the k largest lower bounds so far, over every part
    held = np.zeros(n_queries, dtype=np.int64)
    floor = np.full(n_queries, -np.inf)
    found = []
    for part, index, flags in scanned:
        query, row, upper = module.scan_carry(
            index.codes, index.scale, index.error, index.norm, index.blocks, codes.codes, codes.scale,
            codes.coded_norm, codes.error, codes.norm, flags, k, SLACK, BLOCK,
            module.group_for(index.codes, codes.codes), heap, held, floor)
        found.append((part, query, row, upper))
    pairs = []
    for part, query, row, upper in found:
        keep = upper >= floor[query]  # the final floor: what the later parts raised it to
        if keep.any():
            pairs.append((query[keep], row[keep] + part.first, part.matrix[row[keep]]))
    if not pairs:
        return TopK.empty(n_queries)
    # the survivors' vectors side by side, scored in one call (a pair's bits depend on its two vectors only)
    query, row, vectors = (np.concatenate(p) for p in zip(*pairs))
    score = exact_scores(vectors, queries, query, np.arange(row.size))
    return best_pairs(query, row, score, k, n_queries)
