"""irflow.evaluation.significance: t-test against scipy, randomization test against exact enumeration, corrections."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from irflow.evaluation.significance import (
    Comparison,
    SignificanceError,
    adjust_p_values,
    betainc,
    bonferroni,
    compare,
    compare_many,
    holm,
    paired_t_test,
    randomization_test,
    t_cdf,
)


@pytest.fixture(scope="module")
def scipy_stats():
    return pytest.importorskip("scipy.stats", reason="scipy (dev extra) is needed for the reference values")


# --------------------------------------------------------------- t distribution

@pytest.mark.parametrize("df", [1, 2, 3, 7.5, 29, 299, 5000, 1e6])
@pytest.mark.parametrize("t", [-40.0, -3.1, -1.0, -1e-3, 0.0, 0.4, 2.0, 6.5, 25.0])
def test_t_cdf_matches_scipy(scipy_stats, t: float, df: float) -> None:
    expected = float(scipy_stats.t.cdf(t, df))
    assert t_cdf(t, df) == pytest.approx(expected, rel=1e-9, abs=1e-14)


def test_betainc_matches_scipy(scipy_stats) -> None:
    from scipy.special import betainc as reference

    rng = np.random.default_rng(3)
    for a, b, x in zip(rng.uniform(0.05, 500, 200), rng.uniform(0.05, 500, 200), rng.uniform(0, 1, 200)):
        assert betainc(a, b, x) == pytest.approx(float(reference(a, b, x)), rel=1e-8, abs=1e-13)
    assert betainc(2, 3, 0.0) == 0.0 and betainc(2, 3, 1.0) == 1.0
    with pytest.raises(SignificanceError):
        betainc(-1, 1, 0.5)


@settings(max_examples=100, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(st.floats(0, 1, allow_nan=False), st.floats(0, 1, allow_nan=False)), min_size=2, max_size=60
    )
)
def test_paired_t_test_matches_scipy(scipy_stats, pairs: list) -> None:
    a, b = np.array(pairs).T
    d = b - a
    if np.ptp(d) <= 1e-9 * max(1.0, np.abs(d).max()):
        return  # zero variance up to float noise: scipy's answer is noise too (our rule is tested below)
    t, p = paired_t_test(a, b)
    reference = scipy_stats.ttest_rel(a, b)
    assert t == pytest.approx(-float(reference.statistic), rel=1e-9)
    assert p == pytest.approx(float(reference.pvalue), rel=1e-8, abs=1e-14)


def test_paired_t_test_degenerate_cases() -> None:
    assert paired_t_test([0.1, 0.2], [0.1, 0.2]) == (0.0, 1.0)
    assert paired_t_test([0.0, 0.5], [0.25, 0.75]) == (math.inf, 0.0)
    t, p = paired_t_test([0.3], [0.4])
    assert math.isnan(t) and math.isnan(p)
    with pytest.raises(SignificanceError, match="equal length"):
        paired_t_test([0.1, 0.2], [0.1])
    with pytest.raises(SignificanceError, match="finite"):
        paired_t_test([0.1, math.nan], [0.1, 0.2])


# --------------------------------------------------------------- randomization

def brute_force_p(a: list[float], b: list[float]) -> float:
    d = [y - x for x, y in zip(a, b)]
    observed = abs(sum(d))
    hits = sum(abs(sum(s * x for s, x in zip(signs, d))) >= observed - 1e-12 for signs in itertools.product((1, -1), repeat=len(d)))
    return hits / 2 ** len(d)


def test_randomization_exact_matches_enumeration() -> None:
    a = [0.10, 0.40, 0.35, 0.80, 0.00, 0.55, 0.20, 0.61]
    b = [0.30, 0.42, 0.30, 0.95, 0.10, 0.50, 0.45, 0.70]
    expected = brute_force_p(a, b)
    assert randomization_test(a, b) == pytest.approx(expected, abs=1e-15)  # 2^8 <= 10000: exact
    assert randomization_test(a, b, exact=True) == pytest.approx(expected, abs=1e-15)
    # the sampled test estimates the same p-value: within 4 standard errors
    sampled = randomization_test(a, b, exact=False, n_permutations=20_000, seed=1)
    assert abs(sampled - expected) < 4 * math.sqrt(expected * (1 - expected) / 20_000) + 1e-4


def test_randomization_is_seeded_and_bounded() -> None:
    rng = np.random.default_rng(0)
    a = rng.uniform(size=40)
    b = a + rng.normal(0.05, 0.2, size=40)
    p1 = randomization_test(a, b, seed=5)
    assert p1 == randomization_test(a, b, seed=5)
    assert 1 / 10_001 <= p1 <= 1.0
    # a large effect: p is the smallest value the sampled test can give, never 0
    assert randomization_test(a, a + 1.0, n_permutations=999) == pytest.approx(1 / 1000)
    assert randomization_test(a, a) == 1.0
    assert math.isnan(randomization_test([], []))
    with pytest.raises(SignificanceError, match="positive integer"):
        randomization_test(a, b, n_permutations=0)
    for seed in (-1, True, 2.0):
        with pytest.raises(SignificanceError, match="seed must be a non-negative integer"):
            randomization_test(a, b, seed=seed)  # type: ignore[arg-type]


def test_randomization_agrees_with_t_test_roughly() -> None:
    rng = np.random.default_rng(11)
    a = rng.uniform(size=200)
    b = np.clip(a + rng.normal(0.02, 0.15, size=200), 0, 1)
    _, t_p = paired_t_test(a, b)
    assert abs(randomization_test(a, b) - t_p) < 0.02  # large n: both approximate the same null


# --------------------------------------------------------------- corrections

def test_holm_hand_example() -> None:
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> made monotone: 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []
    assert bonferroni([0.01, 0.04, 0.3]) == pytest.approx([0.03, 0.12, 0.9])


def test_holm_is_between_raw_and_bonferroni() -> None:
    p = list(np.random.default_rng(2).uniform(0, 0.2, size=12))
    for raw, h, b in zip(p, holm(p), bonferroni(p)):
        assert raw <= h <= b


def test_corrections_skip_nan() -> None:
    out = holm([0.01, math.nan, 0.04])
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.04)
    assert adjust_p_values([0.01, 0.2], "none") == [0.01, 0.2]
    with pytest.raises(SignificanceError, match="valid corrections"):
        adjust_p_values([0.01], "sidak")
    with pytest.raises(SignificanceError, match=r"\[0, 1\]"):
        holm([1.5])


# --------------------------------------------------------------- compare

def test_compare_counts_and_p_values() -> None:
    base = {"q1": 0.2, "q2": 0.5, "q3": 0.1, "q4": 0.4, "q5": 0.0}
    other = {"q5": 0.3, "q4": 0.3, "q3": 0.1, "q2": 0.6, "q1": 0.4}  # order does not matter
    c = compare(base, other)
    assert isinstance(c, Comparison)
    assert (c.wins, c.losses, c.ties, c.n) == (3, 1, 1, 5)
    assert c.mean_diff == pytest.approx(0.1)
    assert c.other_mean - c.baseline_mean == pytest.approx(c.mean_diff)
    qids = sorted(base)
    assert (c.t_statistic, c.t_p) == pytest.approx(paired_t_test([base[q] for q in qids], [other[q] for q in qids]))
    assert c.rand_p == pytest.approx(brute_force_p([base[q] for q in qids], [other[q] for q in qids]))
    assert c.correction is None and c.t_p_adjusted is None


def test_compare_needs_the_same_queries() -> None:
    with pytest.raises(SignificanceError, match="missing='zero'"):
        compare({"q1": 0.1, "q2": 0.2}, {"q1": 0.1, "q3": 0.2})


def test_compare_many_adjusts_across_systems() -> None:
    rng = np.random.default_rng(4)
    qids = [f"q{i}" for i in range(30)]
    base = {q: float(v) for q, v in zip(qids, rng.uniform(size=30))}
    others = {name: {q: min(1.0, v + float(rng.normal(shift, 0.1))) for q, v in base.items()} for name, shift in [("a", 0.1), ("b", 0.0), ("c", 0.02)]}
    out = compare_many(base, others)
    raw_t = [out[n].t_p for n in others]
    raw_r = [out[n].rand_p for n in others]
    assert [out[n].t_p_adjusted for n in others] == pytest.approx(holm(raw_t))
    assert [out[n].rand_p_adjusted for n in others] == pytest.approx(holm(raw_r))
    assert all(out[n].correction == "holm" for n in others)
    bonf = compare_many(base, others, correction="bonferroni")
    assert [bonf[n].t_p_adjusted for n in others] == pytest.approx(bonferroni(raw_t))
    with pytest.raises(SignificanceError, match="valid corrections"):
        compare_many(base, others, correction="fdr")  # type: ignore[arg-type]
