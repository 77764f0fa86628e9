"""fuse: merge any number of rankings of the same queries into one.

Two methods, with the seed's semantics (``ir.retrieve.search``, hybrid mode):

- ``rrf`` — Reciprocal Rank Fusion: a candidate scores
  ``sum over inputs of weight[input] / (rrf_k + rank)``, its rank counted
  from 1 within each input; ``weights`` are keyed by *input stage name*
  (default 1.0 each), never by position.  Ordinal output (scale ``rrf``).
- ``blend`` — the magnitude-preserving convex blend of exactly two inputs,
  one on the cosine scale and one on the bm25 scale:
  ``alpha * cosine + (1 - alpha) * bm25 / (bm25 + bm25_sat_k)``; an absent
  channel, or a BM25 score that is not positive, contributes 0.

The union of the inputs is taken in first-seen order (inputs in declared
order, each in rank order — dense first in the built-in recipes), as the
seed's dict accumulates it, and sorted by fused score, descending, *stably*:
equal scores keep first-seen order (README "Ties") — exact ties are common
in RRF: the top candidate of each channel scores 1/(rrf_k + 1), and the
first input's wins.  A candidate's contributions are summed in that same
first-seen order, as the seed adds them.

Pass-through rules, per query, as in the seed:

- one active input (the others switched off by ``when``): it passes through
  unchanged;
- ``rrf``: when every input after the first is empty for a query (the
  lexical channel found nothing), the first input's ranking passes through
  with its own scores (dense cosine);
- ``blend``: when the bm25 input is empty, the cosine ranking passes
  through with its cosine scores; when the cosine input is empty, the bm25
  ranking passes through with its raw BM25 scores.

Provenance: the inputs' columns are carried (the first input holding a
candidate wins; absent entries are NaN / 0 / False), plus, per input
``<fuse>.<input>.score``, ``.rank`` (NaN / 0 where absent) and
``.contribution``; ``<fuse>.score``, ``<fuse>.rank`` and
``<fuse>.passthrough``.  Output scale: ``rrf`` / ``blend``, the passed-through
input's scale when every query passed through, ``mixed`` when queries differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from irflow.engine import CANDIDATES, Candidates, Port, Scale, Stage, StageContext, Upstream, fill_value, \
    non_negative_number, number_mapping, param, positive_number, register_stage
from irflow.errors import StageError
from irflow.kernels.fusion import DFLT_BLEND_ALPHA, DFLT_BM25_SAT_K, DFLT_RRF_K, FUSIONS

__all__ = ["Fuse", "METHODS"]

#: Fusion methods (the seed's FUSIONS).
METHODS: tuple[str, ...] = FUSIONS


def _unit_interval(instance: Any, attribute: Any, value: Any) -> None:
    non_negative_number(instance, attribute, value)
    if value > 1:
        raise ValueError(f"must be a number in [0, 1], got {value!r}")


def _scale_names(up: Upstream) -> str:
    if up.scales is None:
        return "unknown scale"
    return "/".join(sorted(s.value for s in up.scales))


@register_stage
@attrs.frozen
class Fuse(Stage):
    """Fuse several rankings of the same queries by RRF or by a cosine/BM25 blend."""

    kind = "fuse"
    inputs = (Port("inputs", CANDIDATES, "the rankings to fuse (rrf: the first passes through when the others "
                   "are empty)", variadic=True),)
    output = CANDIDATES

    method: str = param("rrf", choices=METHODS, doc="rrf (rank-based) or blend (cosine + squashed bm25)")
    rrf_k: float = param(DFLT_RRF_K, validator=non_negative_number, doc="RRF rank constant: weight/(rrf_k + rank)")
    alpha: float = param(DFLT_BLEND_ALPHA, validator=_unit_interval, doc="blend: weight of the cosine input")
    bm25_sat_k: float = param(DFLT_BM25_SAT_K, validator=positive_number,
                              doc="blend: bm25 -> bm25/(bm25 + bm25_sat_k)")
    weights: Mapping[str, float] | None = param(
        None, validator=number_mapping, doc="rrf: weight per input, keyed by input stage name (default 1.0)")

    # -- build time -------------------------------------------------------------

    def output_scales(self, inputs: Mapping[str, tuple[Upstream, ...]]) -> frozenset[Scale] | None:
        ups = inputs.get("inputs", ())
        if len(ups) == 1:
            return ups[0].scales
        if self.method == "blend":
            return frozenset({Scale.BLEND, Scale.COSINE, Scale.BM25, Scale.MIXED})
        first = ups[0].scales if ups else frozenset()
        return None if first is None else frozenset({Scale.RRF, Scale.MIXED}) | first

    def check(self, inputs: Mapping[str, tuple[Upstream, ...]]) -> list[str]:
        ups = inputs.get("inputs", ())
        names = [u.name for u in ups]
        problems = []
        for key in self.weights or {}:
            if key not in names:
                problems.append(f"weights names {key!r}, which is not an input of this stage (inputs: "
                                f"{', '.join(names) or 'none'}); weights are keyed by input stage name")
        if len(set(names)) != len(names):
            problems.append(f"an input is listed twice ({', '.join(names)}); list each input once")
        if self.method != "blend":
            return problems
        if self.weights:
            problems.append("weights apply to method \"rrf\" only; remove them or use method = \"rrf\"")
        listing = ", ".join(f"{u.name} ({_scale_names(u)})" for u in ups)
        if len(ups) != 2:
            problems.append(f"method \"blend\" fuses exactly two inputs, one on the cosine scale (a dense "
                            f"stage) and one on the bm25 scale (a lexical stage); got {len(ups)}: {listing}. "
                            "Use method = \"rrf\" to fuse any number of rankings")
        elif all(u.scales is not None for u in ups):
            kinds = sorted(tuple(sorted(s.value for s in u.scales)) for u in ups)  # type: ignore[union-attr]
            if kinds != [("bm25",), ("cosine",)]:
                problems.append(f"method \"blend\" needs one input on the cosine scale (a dense stage) and one "
                                f"on the bm25 scale (a lexical stage); got {listing}. Use method = \"rrf\" "
                                "to fuse rankings on any scales")
        return problems

    def unused_params(self, inputs: Mapping[str, tuple[str, ...]]) -> frozenset[str]:
        if len(inputs.get("inputs", ())) <= 1:  # one active input passes through: nothing is fused
            return frozenset({"method", "rrf_k", "alpha", "bm25_sat_k", "weights"})
        return frozenset({"alpha", "bm25_sat_k"} if self.method == "rrf" else {"rrf_k", "weights"})

    def passes_through(self, live: Mapping[str, int]) -> str | None:
        return "inputs" if live.get("inputs") == 1 else None  # one active input passes through unchanged

    # -- run time ---------------------------------------------------------------

    def run(self, ctx: StageContext, inputs: Mapping[str, Candidates]) -> Candidates:
        names = list(inputs)
        batches = list(inputs.values())
        if len(batches) == 1:
            return batches[0]  # one active input passes through unchanged
        queries = batches[0].queries
        for name, batch in zip(names[1:], batches[1:]):
            if batch.queries != queries:
                raise StageError(f"stage {ctx.name!r} (fuse): inputs {names[0]!r} and {name!r} were computed for "
                                 "different query batches; fuse rankings that share the same query source")
        n_queries = len(queries)
        counts = np.stack([b.counts() for b in batches])  # (inputs, queries)
        nonempty = counts > 0
        # per query: -1 = fuse, j = input j passes through
        passthrough = np.full(n_queries, -1, dtype=np.int64)
        if self.method == "blend":
            cos_j, bm_j = self._blend_roles(ctx, names, batches)
            passthrough[nonempty[cos_j] & ~nonempty[bm_j]] = cos_j
            passthrough[~nonempty[cos_j] & nonempty[bm_j]] = bm_j
        else:
            cos_j = bm_j = -1
            passthrough[nonempty[0] & ~nonempty[1:].any(axis=0)] = 0
        return self._fuse(ctx.name, names, batches, passthrough, cos_j, bm_j)

    def _blend_roles(self, ctx: StageContext, names: list[str], batches: list[Candidates]) -> tuple[int, int]:
        scales = [b.scale for b in batches]
        if len(batches) != 2 or sorted(s.value for s in scales) != ["bm25", "cosine"]:
            listing = ", ".join(f"{n} ({s.value})" for n, s in zip(names, scales))
            raise StageError(f"stage {ctx.name!r} (fuse): method \"blend\" needs exactly one cosine and one bm25 "
                             f"input, got {listing}; use method = \"rrf\"")
        cos_j = scales.index(Scale.COSINE)
        return cos_j, 1 - cos_j

    def _fuse(self, name: str, names: list[str], batches: list[Candidates], passthrough: np.ndarray,
              cos_j: int, bm_j: int) -> Candidates:
        e = _Entries.of(batches)
        q, row, rank, score, src, group, valid, representative = (
            e.q, e.row, e.rank, e.score, e.src, e.group, e.valid, e.representative)
        n_groups = representative.size

        # contributions, accumulated in first-seen order (dense before lexical, as the seed adds them)
        if self.method == "blend":
            contribution, scale = self._blend_contributions(src, score, cos_j, bm_j), Scale.BLEND
        else:
            contribution, scale = self._rrf_contributions(names, src, rank), Scale.RRF
        contribution[~valid] = 0.0
        fused = np.bincount(group, weights=contribution, minlength=n_groups)

        g_q = q[representative]
        g_row = row[representative]
        fused_query = passthrough[g_q] < 0
        # by fused score, stably: ties keep first-seen order (a group's representative is its first-seen
        # entry, and entries are numbered in first-seen order), as the seed's sort over its dict does
        g_order = np.lexsort((representative, -fused, g_q))
        g_order = g_order[fused_query[g_order]]

        # pass-through entries: each passing query's input ranking, untouched
        pt_entries = valid & (passthrough[q] == src)
        pt_idx = np.flatnonzero(pt_entries)

        # output rows: fused groups (as group ids) then pass-through entries (as entry ids)
        out_q = np.concatenate([g_q[g_order], q[pt_idx]])
        out_row = np.concatenate([g_row[g_order], row[pt_idx]])
        out_score = np.concatenate([fused[g_order], score[pt_idx]])
        n_fused = g_order.size
        within = np.concatenate([np.arange(n_fused), rank[pt_idx]])  # fused: already in order
        final = np.lexsort((within, out_q))
        out_q, out_row, out_score = out_q[final], out_row[final], out_score[final]
        is_pt = np.concatenate([np.zeros(n_fused, bool), np.ones(pt_idx.size, bool)])[final]
        # map every valid entry to its output position (or -1)
        out_of_group = np.full(n_groups, -1, dtype=np.int64)
        inverse_final = np.empty_like(final)
        inverse_final[final] = np.arange(final.size)
        out_of_group[g_order] = inverse_final[:n_fused]
        # (entries of a passed-through query from another input, and duplicates, stay at -1)
        out_pos = np.where(valid, out_of_group[group], -1)
        out_pos[pt_idx] = inverse_final[n_fused:]

        columns = _provenance(name, names, batches, e, contribution, out_pos, is_pt)
        result = Candidates(batches[0].queries, out_q, out_row, out_score,
                            self._scale(scale, passthrough, batches, out_q), columns)
        return result.with_channel_columns(name)

    def _blend_contributions(self, src: np.ndarray, score: np.ndarray, cos_j: int, bm_j: int) -> np.ndarray:
        """blend: ``alpha * cosine`` for the cosine input, ``(1 - alpha) * bm25 / (bm25 + bm25_sat_k)`` for the
        bm25 input (a score that is not positive contributes 0)."""
        contribution = np.zeros(src.size)
        is_cos = src == cos_j
        contribution[is_cos] = self.alpha * score[is_cos]
        is_bm = (src == bm_j) & (score > 0)
        bm = score[is_bm]
        contribution[is_bm] = (1.0 - self.alpha) * bm / (bm + self.bm25_sat_k)
        return contribution

    def _rrf_contributions(self, names: list[str], src: np.ndarray, rank: np.ndarray) -> np.ndarray:
        """rrf: ``weight[input] / (rrf_k + rank)`` per entry."""
        weights = np.array([float((self.weights or {}).get(n, 1.0)) for n in names])
        # float first: a Python int rrf_k beyond int64 (10**30) must not meet numpy's int arithmetic
        return weights[src] / (float(self.rrf_k) + rank)

    @staticmethod
    def _scale(fused: Scale, passthrough: np.ndarray, batches: list[Candidates], out_q: np.ndarray) -> Scale:
        present = np.unique(out_q)
        if present.size == 0:
            return fused
        sources = np.unique(passthrough[present]).tolist()  # at most one per input, plus -1
        scales = {fused if j < 0 else batches[j].scale for j in sources}
        return scales.pop() if len(scales) == 1 else Scale.MIXED


@attrs.frozen
class _Entries:
    """Every entry of every input, in first-seen order (query, then input in declared order, then rank),
    with its (query, row) group; ``valid`` is False for a row an input lists twice (its worse entries)."""

    q: np.ndarray
    row: np.ndarray
    rank: np.ndarray
    score: np.ndarray
    src: np.ndarray  # the input of each entry
    local: np.ndarray  # its position in that input
    group: np.ndarray
    valid: np.ndarray
    representative: np.ndarray  # the first-seen entry of each group

    @classmethod
    def of(cls, batches: list[Candidates]) -> "_Entries":
        n_inputs = len(batches)
        sizes = np.array([len(b) for b in batches])
        # every entry of every input, concatenated in declared order
        src = np.repeat(np.arange(n_inputs), sizes)
        local = np.concatenate([np.arange(s) for s in sizes])
        q = np.concatenate([b.query_index for b in batches]).astype(np.int64)
        row = np.concatenate([b.row for b in batches])
        rank = np.concatenate([b.rank for b in batches]).astype(np.int64)
        score = np.concatenate([b.score for b in batches])

        # first-seen order: by query, then input (declared order), then rank
        seen = np.lexsort((rank, src, q))
        q, row, rank, score, src, local = q[seen], row[seen], rank[seen], score[seen], src[seen], local[seen]
        m = q.size
        position = np.arange(m)
        # group entries by (query, row); within a group, by first-seen position
        by_key = np.lexsort((position, row, q))
        key_q, key_row, key_src = q[by_key], row[by_key], src[by_key]
        starts = np.ones(m, dtype=bool)
        starts[1:] = (key_q[1:] != key_q[:-1]) | (key_row[1:] != key_row[:-1])
        group_sorted = np.cumsum(starts) - 1
        group = np.empty(m, dtype=np.int64)
        group[by_key] = group_sorted
        # a row listed twice by one input counts once (its best-ranked entry)
        duplicate_sorted = np.zeros(m, dtype=bool)
        duplicate_sorted[1:] = ~starts[1:] & (key_src[1:] == key_src[:-1])
        valid = np.ones(m, dtype=bool)
        valid[by_key[duplicate_sorted]] = False
        representative = by_key[starts]  # first-seen entry of each group (positions in seen order)
        return cls(q, row, rank, score, src, local, group, valid, representative)


def _provenance(name: str, names: list[str], batches: list[Candidates], e: _Entries, contribution: np.ndarray,
                out_pos: np.ndarray, is_pt: np.ndarray) -> dict[str, np.ndarray]:
    """The output's provenance: the inputs' columns carried (the first input holding a candidate wins), and per
    input its score, rank and contribution; ``out_pos`` is each entry's output position (-1: not in the output)."""
    reached = out_pos >= 0
    n_out = is_pt.size
    columns: dict[str, np.ndarray] = {}
    # per input: its entries that reached the output, their output positions and positions in the input
    # (worked out once, read by every column below)
    sel = [reached & (e.src == j) for j in range(len(batches))]
    where = [out_pos[s] for s in sel]
    local = [e.local[s] for s in sel]
    # carried columns: scatter each input's values, last input first so the first input wins
    carried: dict[str, list[int]] = {}
    for j, batch in enumerate(batches):
        for column in batch.provenance:
            carried.setdefault(column, []).append(j)
    for column, holders in carried.items():
        dtype = np.result_type(*[batches[j].provenance[column].dtype for j in holders])
        out = np.full(n_out, fill_value(dtype), dtype=dtype)
        for j in reversed(holders):
            out[where[j]] = batches[j].provenance[column][local[j]]
        columns[column] = out
    for j, input_name in enumerate(names):
        s = np.full(n_out, np.nan)
        r = np.zeros(n_out, dtype=np.int32)
        c = np.zeros(n_out)
        s[where[j]] = e.score[sel[j]]
        r[where[j]] = e.rank[sel[j]]
        c[where[j]] = contribution[sel[j]]
        c[is_pt] = np.nan  # nothing was fused for a passed-through query
        columns[f"{name}.{input_name}.score"] = s
        columns[f"{name}.{input_name}.rank"] = r
        columns[f"{name}.{input_name}.contribution"] = c
    columns[f"{name}.passthrough"] = is_pt
    return columns
