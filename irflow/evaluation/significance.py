"""Paired significance tests for comparing two systems query by query.

Two systems evaluated on the same queries give paired per-query scores; the
question is whether the mean difference is larger than chance.  Two standard
answers are given side by side, as IR papers do (Smucker, Allan & Carterette,
CIKM 2007): the paired Student t-test and the paired randomization
(sign-flip permutation) test.  Comparing several systems to one baseline
needs a correction for multiple comparisons: Holm–Bonferroni by default
(uniformly more powerful than Bonferroni, same guarantee), or Bonferroni.

No scipy at run time: the t distribution's tail comes from the regularized
incomplete beta function, evaluated by its continued fraction.

Example::

    >>> base = {"q1": 0.2, "q2": 0.5, "q3": 0.1, "q4": 0.4}
    >>> new = {"q1": 0.4, "q2": 0.6, "q3": 0.1, "q4": 0.3}
    >>> c = compare(base, new)
    >>> (round(c.mean_diff, 3), c.wins, c.losses, c.ties)
    (0.05, 2, 1, 1)
"""

from __future__ import annotations

import math
from typing import Literal, Mapping, Sequence

import attrs
import numpy as np

from irflow.errors import SignificanceError

__all__ = [
    "SignificanceError",
    "Comparison",
    "CORRECTIONS",
    "DEFAULT_PERMUTATIONS",
    "TIE_TOLERANCE",
    "betainc",
    "t_cdf",
    "paired_t_test",
    "randomization_test",
    "holm",
    "bonferroni",
    "adjust_p_values",
    "compare",
    "compare_many",
]

#: Multiple-comparison corrections :func:`adjust_p_values` knows.
CORRECTIONS: tuple[str, ...] = ("holm", "bonferroni", "none")

DEFAULT_PERMUTATIONS = 10_000
#: Per-query differences at most this large count as ties (float noise, not a change).
TIE_TOLERANCE = 1e-12

_MAX_ITERATIONS = 100_000  # the continued fraction needs O(sqrt(a + b)) steps
_EPS = 1e-15
_TINY = 1e-300
_LN_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
# sign matrices are built in blocks of at most this many entries (bounded memory)
_BLOCK_ENTRIES = 4_000_000


# ----------------------------------------------------------- the t distribution

def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b), modified Lentz's method (Numerical Recipes 6.4)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_ITERATIONS + 1):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            return h
    raise SignificanceError(f"incomplete beta did not converge for a={a}, b={b}, x={x}")


def _stirling_correction(x: float) -> float:
    """lgamma(x) minus its Stirling approximation, for x >= 10 (error below 1e-16)."""
    inv2 = 1.0 / (x * x)
    return (1.0 / 12 - inv2 * (1.0 / 360 - inv2 * (1.0 / 1260 - inv2 * (1.0 / 1680 - inv2 / 1188)))) / x


def _log_beta(a: float, b: float) -> float:
    """log B(a, b), accurate for large arguments too (R's ``lbeta``).

    ``lgamma(a + b) - lgamma(a) - lgamma(b)`` cancels millions against
    millions at a few thousand degrees of freedom; the Stirling form
    subtracts only the small corrections.
    """
    p, q = min(a, b), max(a, b)
    if p >= 10.0:
        corr = _stirling_correction(p) + _stirling_correction(q) - _stirling_correction(p + q)
        return -0.5 * math.log(q) + _LN_SQRT_2PI + corr + (p - 0.5) * math.log(p / (p + q)) + q * math.log1p(-p / (p + q))
    if q >= 10.0:
        corr = _stirling_correction(q) - _stirling_correction(p + q)
        return math.lgamma(p) + corr + p - p * math.log(p + q) + (q - 0.5) * math.log1p(-p / (p + q))
    return math.lgamma(p) + math.lgamma(q) - math.lgamma(p + q)


def betainc(a: float, b: float, x: float, y: float | None = None) -> float:
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1.

    ``y`` is ``1 - x`` when the caller knows it more accurately than the
    subtraction would give (a t statistic near 0 makes x close to 1).

    >>> round(betainc(2.0, 3.0, 0.4), 10)  # 1 - (1-x)^4 - 4x(1-x)^3
    0.5248
    """
    if y is None:
        y = 1.0 - x
    if not (a > 0 and b > 0 and 0.0 <= x <= 1.0):
        raise SignificanceError(f"betainc needs a, b > 0 and 0 <= x <= 1, got a={a}, b={b}, x={x}")
    if x == 0.0 or y == 0.0:
        return 0.0 if x == 0.0 else 1.0
    # log1p of the smaller of x, y keeps the precision of the one close to 1
    log_x = math.log(x) if x < 0.5 else math.log1p(-y)
    log_y = math.log(y) if y < 0.5 else math.log1p(-x)
    log_front = a * log_x + b * log_y - _log_beta(a, b)
    front = math.exp(log_front)
    # the fraction converges fast only on one side of the mean; use the symmetry on the other
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, y) / b


def _t_two_sided(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0
    # P(|T| >= |t|) = I_x(df/2, 1/2) with x = df / (df + t^2)
    denominator = df + t * t
    return betainc(df / 2.0, 0.5, df / denominator, t * t / denominator)


def t_cdf(t: float, df: float) -> float:
    """The cumulative distribution function of Student's t with ``df`` degrees of freedom.

    >>> round(t_cdf(2.0, 10), 6)
    0.963306
    """
    if df <= 0:
        raise SignificanceError(f"degrees of freedom must be positive, got {df}")
    tail = 0.5 * _t_two_sided(t, df)
    return 1.0 - tail if t >= 0 else tail


# ------------------------------------------------------------------- the tests

def _differences(baseline: Sequence[float] | np.ndarray, other: Sequence[float] | np.ndarray) -> np.ndarray:
    a = np.asarray(baseline, dtype=np.float64)
    b = np.asarray(other, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise SignificanceError(f"paired tests need two 1-d sequences of equal length, got shapes {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise SignificanceError("paired tests need finite scores; found NaN or infinity")
    return b - a


def paired_t_test(baseline: Sequence[float] | np.ndarray, other: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """The paired t-test of ``other`` against ``baseline``: (t statistic, two-sided p-value).

    The statistic is positive when ``other`` scores higher (``scipy``'s
    ``ttest_rel(baseline, other)`` has the opposite sign).  Degenerate cases:
    fewer than two pairs give (nan, nan); all differences zero give (0, 1),
    no evidence of a change; equal nonzero differences give (±inf, 0).

    >>> t, p = paired_t_test([0.1, 0.2, 0.3, 0.4], [0.2, 0.25, 0.5, 0.4])
    >>> round(t, 4), round(p, 4)
    (2.0494, 0.1328)
    """
    d = _differences(baseline, other)
    n = d.size
    if n < 2:
        return math.nan, math.nan
    mean = float(d.mean())
    if np.ptp(d) == 0.0:  # zero variance: decide exactly instead of dividing float noise
        return (0.0, 1.0) if mean == 0.0 else (math.copysign(math.inf, mean), 0.0)
    t = mean / (float(d.std(ddof=1)) / math.sqrt(n))
    return t, _t_two_sided(t, n - 1)


def _sign_matrix_exact(n: int) -> np.ndarray:
    # row i's signs are the bits of i: every one of the 2^n assignments once
    bits = (np.arange(2**n, dtype=np.int64)[:, None] >> np.arange(n, dtype=np.int64)) & 1
    return (1 - 2 * bits).astype(np.float64)


def randomization_test(
    baseline: Sequence[float] | np.ndarray,
    other: Sequence[float] | np.ndarray,
    *,
    n_permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
    exact: bool | Literal["auto"] = "auto",
) -> float:
    """The two-sided paired randomization test: p-value of |mean difference|.

    Under the null hypothesis the two systems are exchangeable on each query,
    so each per-query difference's sign is a coin flip.  The p-value is the
    share of sign assignments whose |mean| reaches the observed one.

    - exact (all 2^n assignments) when ``exact=True``, or with ``"auto"``
      when 2^n <= ``n_permutations``: p = count / 2^n;
    - otherwise ``n_permutations`` random assignments from ``seed``, with the
      observed one counted in (Phipson & Smyth 2010): p = (count + 1) /
      (n_permutations + 1), never 0, so it is a valid p-value.

    Same inputs and seed, same p-value.  No pairs gives nan.

    >>> randomization_test([0.1, 0.2, 0.3], [0.2, 0.3, 0.4])  # exact: 2 of 8 reach |0.1|
    0.25
    """
    if isinstance(n_permutations, bool) or not isinstance(n_permutations, int) or n_permutations < 1:
        raise SignificanceError(f"n_permutations must be a positive integer, got {n_permutations!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SignificanceError(f"seed must be a non-negative integer, got {seed!r}")
    d = _differences(baseline, other)
    n = d.size
    if n == 0:
        return math.nan
    observed = abs(float(d.sum()))
    # sums of the same numbers in another order differ in the last bits: count those as equal
    threshold = observed - 1e-9 * float(np.abs(d).sum())
    if exact is True or (exact == "auto" and n < 63 and 2**n <= n_permutations):
        if n > 24:
            raise SignificanceError(f"exact enumeration of 2^{n} sign assignments is too large; use exact=False")
        sums = _sign_matrix_exact(n) @ d
        return float(np.count_nonzero(np.abs(sums) >= threshold)) / 2**n
    rng = np.random.default_rng(seed)
    block = max(1, _BLOCK_ENTRIES // n)
    count, done = 0, 0
    while done < n_permutations:
        size = min(block, n_permutations - done)
        signs = 1.0 - 2.0 * rng.integers(0, 2, size=(size, n), dtype=np.int8)
        count += int(np.count_nonzero(np.abs(signs @ d) >= threshold))
        done += size
    return (count + 1) / (n_permutations + 1)


# ------------------------------------------------------ multiple comparisons

def _finite_order(pvalues: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 1:
        raise SignificanceError(f"p-values must be a 1-d sequence, got shape {p.shape}")
    finite = np.flatnonzero(~np.isnan(p))
    if ((p[finite] < 0) | (p[finite] > 1)).any():
        raise SignificanceError("p-values must lie in [0, 1]")
    return p, finite


def bonferroni(pvalues: Sequence[float]) -> list[float]:
    """Bonferroni-adjusted p-values: min(1, m p), m the number of (non-NaN) tests.

    >>> bonferroni([0.01, 0.04, 0.3])
    [0.03, 0.12, 0.8999999999999999]
    """
    p, finite = _finite_order(pvalues)
    out = p.copy()
    out[finite] = np.minimum(1.0, finite.size * p[finite])
    return out.tolist()


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm–Bonferroni step-down adjusted p-values, in the input order.

    The i-th smallest of m p-values is multiplied by (m - i + 1), then the
    adjusted values are made non-decreasing in that order and capped at 1.
    Reject where the adjusted p-value is <= alpha; this controls the
    family-wise error rate like Bonferroni, with more power.  NaN p-values
    (tests that could not run) stay NaN and are not counted in m.

    >>> holm([0.01, 0.04, 0.03, 0.005])
    [0.03, 0.06, 0.06, 0.02]
    """
    p, finite = _finite_order(pvalues)
    out = p.copy()
    m = finite.size
    order = finite[np.argsort(p[finite], kind="stable")]
    scaled = (m - np.arange(m)) * p[order]
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled)) if m else scaled
    return out.tolist()


def adjust_p_values(pvalues: Sequence[float], method: str = "holm") -> list[float]:
    """Adjust p-values for multiple comparisons: ``"holm"``, ``"bonferroni"`` or ``"none"``."""
    if method == "holm":
        return holm(pvalues)
    if method == "bonferroni":
        return bonferroni(pvalues)
    if method == "none":
        return [float(p) for p in pvalues]
    raise SignificanceError(f"unknown correction {method!r}; valid corrections are {list(CORRECTIONS)}")


# --------------------------------------------------------------- comparisons

@attrs.frozen
class Comparison:
    """One system against a baseline on one metric, over the same queries.

    ``mean_diff`` is other - baseline; ``wins``/``losses`` count queries where
    the other system scores higher/lower (differences within
    ``TIE_TOLERANCE`` are ties).  ``t_p`` and ``rand_p`` are raw two-sided
    p-values; ``t_p_adjusted``/``rand_p_adjusted`` are filled by
    :func:`compare_many` with the correction it names.
    """

    mean_diff: float
    t_p: float
    rand_p: float
    wins: int
    losses: int
    ties: int
    n: int = 0
    baseline_mean: float = math.nan
    other_mean: float = math.nan
    t_statistic: float = math.nan
    n_permutations: int = DEFAULT_PERMUTATIONS
    correction: str | None = None
    t_p_adjusted: float | None = None
    rand_p_adjusted: float | None = None


def _paired_values(baseline: Mapping[str, float], other: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
    if set(baseline) != set(other):
        only_base = sorted(set(baseline) - set(other))[:5]
        only_other = sorted(set(other) - set(baseline))[:5]
        raise SignificanceError(
            f"the two per-query tables cover different queries (only in baseline: {only_base}, only in other: {only_other}); "
            "evaluate both runs with missing='zero' so every judged query is paired"
        )
    # sorted ids: the randomization test's sampled signs must not depend on dict order
    qids = sorted(baseline)
    return (np.array([baseline[q] for q in qids], dtype=np.float64), np.array([other[q] for q in qids], dtype=np.float64))


def compare(
    per_query_baseline: Mapping[str, float],
    per_query_other: Mapping[str, float],
    *,
    n_permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
) -> Comparison:
    """Compare two per-query tables of one metric (``{query_id: value}``, same queries).

    >>> c = compare({"a": 0.1, "b": 0.2, "c": 0.3}, {"a": 0.2, "b": 0.3, "c": 0.4})
    >>> c.wins, c.rand_p
    (3, 0.25)
    """
    a, b = _paired_values(per_query_baseline, per_query_other)
    d = b - a
    t, t_p = paired_t_test(a, b)
    return Comparison(
        mean_diff=float(d.mean()) if d.size else math.nan,
        t_p=t_p,
        rand_p=randomization_test(a, b, n_permutations=n_permutations, seed=seed),
        wins=int(np.count_nonzero(d > TIE_TOLERANCE)),
        losses=int(np.count_nonzero(d < -TIE_TOLERANCE)),
        ties=int(np.count_nonzero(np.abs(d) <= TIE_TOLERANCE)),
        n=int(d.size),
        baseline_mean=float(a.mean()) if a.size else math.nan,
        other_mean=float(b.mean()) if b.size else math.nan,
        t_statistic=t,
        n_permutations=n_permutations,
    )


def compare_many(
    per_query_baseline: Mapping[str, float],
    others: Mapping[str, Mapping[str, float]],
    *,
    correction: Literal["holm", "bonferroni", "none"] = "holm",
    n_permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
) -> dict[str, Comparison]:
    """Compare several systems to one baseline, p-values adjusted across them.

    The family is the systems compared here on this metric; each test
    (t and randomization) is corrected separately.

    >>> base = {"a": 0.1, "b": 0.2, "c": 0.3}
    >>> out = compare_many(base, {"x": {"a": 0.2, "b": 0.3, "c": 0.4}, "y": base})
    >>> out["x"].rand_p_adjusted, out["y"].rand_p_adjusted
    (0.5, 1.0)
    """
    if correction not in CORRECTIONS:
        raise SignificanceError(f"unknown correction {correction!r}; valid corrections are {list(CORRECTIONS)}")
    raw = {name: compare(per_query_baseline, table, n_permutations=n_permutations, seed=seed) for name, table in others.items()}
    t_adj = adjust_p_values([c.t_p for c in raw.values()], correction)
    r_adj = adjust_p_values([c.rand_p for c in raw.values()], correction)
    return {
        name: attrs.evolve(c, correction=correction, t_p_adjusted=tp, rand_p_adjusted=rp)
        for (name, c), tp, rp in zip(raw.items(), t_adj, r_adj)
    }
