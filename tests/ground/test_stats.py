"""`hierbench.stats`: one implementation of each interval, effect, power and verdict rule, checked against scipy and
against each other (the minimum detectable effect shrinks with seeds; the seeds a target needs give that half-width)."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from hierbench import stats as S


def test_paired_effect_matches_a_hand_computed_t_interval():
    a, b = np.array([0.61, 0.70, 0.66, 0.64]), np.array([0.50, 0.58, 0.60, 0.52])
    d = a - b
    eff, lo, hi, n = S.paired_effect(a, b)
    half = 3.182446305284263 * d.std(ddof=1) / 2  # t_{0.975, 3} · s / sqrt(4)
    assert n == 4 and math.isclose(eff, d.mean()) and math.isclose(hi - eff, half, rel_tol=1e-9)
    assert math.isclose(eff - lo, half, rel_tol=1e-9)


@pytest.mark.parametrize("level", [0.8, 0.9, 0.95, 0.99])
def test_paired_effect_equals_scipys_paired_t_test_interval(level):
    rng = np.random.default_rng(1)
    for n in (2, 3, 5, 12):
        a = rng.normal(0.7, 0.05, n)
        b = a - 0.02 + rng.normal(0, 0.01, n)
        eff, lo, hi, k = S.paired_effect(a, b, level)
        ci = sps.ttest_rel(a, b).confidence_interval(level)
        assert k == n and math.isclose(lo, ci.low, rel_tol=1e-9, abs_tol=1e-12)
        assert math.isclose(hi, ci.high, rel_tol=1e-9, abs_tol=1e-12)


def test_mean_interval_is_the_one_sample_t_interval_and_skips_missing_values():
    v = np.array([0.70, 0.74, 0.72, np.nan, 0.69])
    m, lo, hi, n = S.mean_interval(v)
    ci = sps.ttest_1samp(v[np.isfinite(v)], 0).confidence_interval(0.95)
    assert n == 4 and math.isclose(lo, ci.low, rel_tol=1e-12) and math.isclose(hi, ci.high, rel_tol=1e-12)
    assert S.mean_interval([0.5]) == (0.5, -math.inf, math.inf, 1)
    m0, lo0, hi0, n0 = S.mean_interval([np.nan])
    assert n0 == 0 and math.isnan(m0) and (lo0, hi0) == (-math.inf, math.inf)


def test_t_half_width_is_what_the_intervals_use():
    v = np.array([0.1, 0.3, 0.2, 0.25])
    m, lo, hi, n = S.mean_interval(v, 0.9)
    assert math.isclose(hi - m, S.t_half_width(v.std(ddof=1), 4, 0.9), rel_tol=1e-12)
    assert S.t_half_width(0.1, 1) == math.inf


def test_single_seed_or_missing_values_are_inconclusive():
    eff, lo, hi, n = S.paired_effect(np.array([0.9]), np.array([0.1]))
    assert n == 1 and S.verdict(lo, hi, "higher") == "inconclusive"
    assert S.paired_effect(np.array([np.nan]), np.array([0.1]))[3] == 0


@pytest.mark.parametrize(
    "lo,hi,direction,expected",
    [
        (0.01, 0.02, "higher", "supported"),
        (-0.02, -0.01, "higher", "contradicted"),
        (-0.01, 0.01, "higher", "inconclusive"),
        (-0.02, -0.01, "lower", "supported"),
        (0.01, 0.02, "lower", "contradicted"),
        (-0.01, 0.05, "no_worse", "supported"),
        (-0.09, -0.03, "no_worse", "contradicted"),
        (-0.05, 0.01, "no_worse", "inconclusive"),
    ],
)
def test_verdict_reads_the_interval_against_the_direction(lo, hi, direction, expected):
    assert S.verdict(lo, hi, direction, margin=0.02) == expected


def test_verdict_rejects_unknown_direction():
    with pytest.raises(ValueError, match="sideways"):
        S.verdict(0, 1, "sideways")


def test_min_detectable_effect_matches_the_power_formula_and_shrinks_with_seeds():
    # (t_.975,4 + t_.8,4) · sd / sqrt(5)
    assert math.isclose(S.min_detectable_effect(0.02, 5), (2.7764451 + 0.9409646) * 0.02 / math.sqrt(5), rel_tol=1e-6)
    mdes = [S.min_detectable_effect(0.02, n) for n in range(2, 40)]
    assert all(a > b for a, b in zip(mdes, mdes[1:]))  # strictly monotone in n
    assert S.min_detectable_effect(0.02, 1) == math.inf and S.min_detectable_effect(float("nan"), 5) == math.inf
    assert math.isclose(S.min_detectable_effect(0.04, 7), 2 * S.min_detectable_effect(0.02, 7))  # linear in sd


@pytest.mark.parametrize("sd,target", [(0.02, 0.02), (0.05, 0.03), (0.01, 0.002), (0.1, 0.5)])
def test_seeds_for_half_width_is_the_first_seed_count_whose_paired_interval_reaches_the_target(sd, target):
    n = int(S.seeds_for_half_width(sd, target))

    # data with exactly that sd of the difference: paired_effect's half-width at n meets the target, at n - 1 it does
    # not
    def half(k):
        d = np.zeros(k)
        d[0], d[1] = 1, -1
        d = d / d.std(ddof=1) * sd
        eff, lo, hi, _ = S.paired_effect(d, np.zeros(k))
        return hi - eff

    assert half(n) <= target + 1e-12
    if n > 2:
        assert half(n - 1) > target


def test_seeds_for_half_width_edge_cases():
    assert S.seeds_for_half_width(0.02, 0.02) == 7 and S.seeds_for_half_width(0.0, 0.02) == 2
    assert math.isnan(S.seeds_for_half_width(float("nan"), 0.02)) and math.isnan(S.seeds_for_half_width(0.02, 0))
    assert S.seeds_for_half_width(1.0, 1e-4, max_seeds=50) == math.inf
