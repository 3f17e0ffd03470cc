"""Seeds until decided: the group-sequential rule keeps the error rate it states when the ledger looks after every
round (simulated, normal and heavy-tailed seed noise), reduces to a 95% interval with one look, and the
leave-one-seed-out fragility; the skew-guarded reading (issue 48) keeps it under skewed seed noise where the plain
t-rule does not. (The rules are derived in nbs/ground/02_stats.ipynb.)"""

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

import hierbench.stats
from hierbench.stats import (
    SKEW_ALLOWANCE,
    SKEW_ALLOWANCE_INTERIM,
    SKEW_ALLOWANCE_LAST,
    SequentialPlan,
    alpha_spent,
    fragility,
    guarded_interval,
    leave_one_out_verdicts,
    look_schedule,
    mean_interval,
    sequential_levels,
    sequential_rates,
    sequential_verdict,
    simulate_sequential,
    verdict,
)

PLAN = SequentialPlan(look_schedule(5, 15, 2), interval="t")  # the standard budget's looks read by the plain t-rule
GUARDED = SequentialPlan(PLAN.looks)  # ... and by the ledger's skew-guarded rule
REPS = 200_000
# Monte-Carlo tolerance of a simulated rate p over REPS claims: 3 standard errors of the estimate, plus 3 of the
# boundaries' own calibration (400,000 null paths; stated in the notebook): at p = 0.025, 0.00105 + 0.00074.
TOL = 3 * math.sqrt(0.025 * 0.975 / REPS) + 3 * math.sqrt(0.025 * 0.975 / 400_000)


@pytest.mark.parametrize("noise", ["normal", "t3"])
@pytest.mark.parametrize("direction", ["higher", "lower", "no_worse"])
def test_false_supported_rate_stays_at_the_nominal_level_when_the_ledger_looks_after_every_round(noise, direction):
    # the null of each direction: no effect (higher, lower), exactly the margin below (no_worse)
    effect = -0.1 if direction == "no_worse" else 0.0
    r = simulate_sequential(effect, PLAN, direction, margin=0.1, noise=noise, reps=REPS, seed=11)
    assert r["supported"] <= PLAN.alpha / 2 + TOL, r
    assert r["supported"] + r["contradicted"] <= PLAN.alpha + 2 * TOL, r
    if noise == "normal":
        assert r["supported"] >= PLAN.alpha / 2 - TOL, r  # exact, not merely conservative
    g = simulate_sequential(effect, GUARDED, direction, margin=0.1, noise=noise, reps=REPS, seed=11)
    assert g["supported"] <= PLAN.alpha / 2 + TOL and g["contradicted"] <= PLAN.alpha / 2 + TOL, g  # the guard keeps it


def test_reading_todays_interval_after_every_round_would_break_the_rate():
    "The check above can fail: the 95% interval read at the same six looks says 'supported' far more often."
    x = np.random.default_rng(3).standard_normal((REPS // 4, 15))
    total, squares = np.cumsum(x, 1), np.cumsum(x * x, 1)
    naive = np.zeros(len(x), bool)
    for n in PLAN.looks:
        mean = total[:, n - 1] / n
        sd = np.sqrt((squares[:, n - 1] - n * mean**2) / (n - 1))
        naive |= mean - sps.t.ppf(0.975, n - 1) * sd / np.sqrt(n) > 0
    assert naive.mean() > PLAN.alpha / 2 + 10 * TOL


def test_each_look_spends_what_the_spending_function_allows():
    "Under the null, the share of claims first decided at look k is α_k = f(t_k) − f(t_{k−1}) (independent paths)."
    spend = np.diff(np.r_[0.0, alpha_spent(np.asarray(PLAN.looks) / 15)])
    r = simulate_sequential(0.0, PLAN, reps=REPS, seed=5)
    se = np.sqrt(spend * (1 - spend) / REPS)
    assert np.all(np.abs(r["decided_at"] - spend) <= 4 * se + 3 * np.sqrt(spend / 400_000)), (r["decided_at"], spend)


def test_one_look_is_todays_rule_and_levels_are_a_function_of_the_plan():
    np.testing.assert_allclose(sequential_levels([5]), [0.95])
    np.testing.assert_allclose(sequential_levels([7], alpha=0.1), [0.90])
    d = np.array([0.004, -0.001, 0.006, 0.002, 0.003])
    one = sequential_verdict(d, SequentialPlan((5,), interval="t"), "higher")
    assert (one["low"], one["high"]) == pytest.approx(mean_interval(d)[1:3])
    assert one["verdict"] == one["fixed_verdict"] == verdict(*mean_interval(d)[1:3], "higher")
    guarded = sequential_verdict(d, SequentialPlan((5,)), "higher")  # the ledger's: one skew-guarded 95% interval
    assert (guarded["low"], guarded["high"]) == pytest.approx(guarded_interval(d)[1:3]) and guarded[
        "level"
    ] == pytest.approx(0.95)
    np.testing.assert_array_equal(PLAN.levels(), sequential_levels(PLAN.looks))  # same plan, same numbers
    g = GUARDED.levels()  # the guard reads from 9 seeds on, spending what 5-9 may
    assert np.isnan(g[:2]).all() and g[2] == pytest.approx(1 - alpha_spent(9 / 15)) and np.all(np.diff(g[2:]) < 0)
    lev = PLAN.levels()
    assert np.all(np.diff(lev) < 0) and lev[0] > 0.999 and 0.95 < lev[-1] < 0.97
    assert np.ptp(SequentialPlan(PLAN.looks, spending="pocock").levels()[1:]) < 0.003  # Pocock: about even


@pytest.mark.parametrize("plan", [PLAN, GUARDED], ids=["t", "guarded"])
def test_the_vectorised_reading_is_the_ledgers_row_by_row(plan):
    "Claim by claim, on normal and skewed noise, every direction: the simulation study reads the rule the ledger reads."
    from hierbench.stats import _seed_noise

    rng = np.random.default_rng(4)
    for noise, effect, direction in (
        ("normal", 0.7, "higher"),
        ("normal", -0.5, "lower"),
        ("gamma-2", 0.0, "no_worse"),
        ("gamma1.5", -0.8, "higher"),
        ("gamma-1.5", 0.6, "higher"),
        ("t3", 0.4, "lower"),
    ):
        x = _seed_noise(rng, noise, (150, 15)) + effect
        v = [sequential_verdict(r, plan, direction, margin=0.3) for r in x]
        one = [sequential_rates(r[None, :], plan, direction, margin=0.3) for r in x]
        for o, w in zip(one, v):
            assert ("supported" if o["supported"] else "contradicted" if o["contradicted"] else "inconclusive") == w[
                "verdict"
            ]
            assert o["mean_seeds"] == w["n"]
        rates = sequential_rates(x, plan, direction, margin=0.3)
        for name in ("supported", "contradicted", "inconclusive"):
            assert rates[name] == pytest.approx(np.mean([o["verdict"] == name for o in v]), abs=1e-12)


def test_sequential_verdict_stops_at_its_first_decided_look_and_keeps_the_history():
    d = np.r_[np.full(5, 0.0) + [0.01, -0.01, 0.0, 0.005, -0.005], np.full(10, 0.05)]  # decided only once seeds 6+ come
    v = sequential_verdict(d, PLAN, "higher")
    assert v["verdict"] == "supported" and v["n"] in PLAN.looks[1:] and v["history"][0]["verdict"] == "inconclusive"
    assert (v["t_verdict"], v["t_n"]) == (v["verdict"], v["n"])  # a t plan is its own t-rule
    assert [h["n"] for h in v["history"]] == list(PLAN.looks[: v["look"]])
    short = sequential_verdict(d[:4], PLAN, "higher")  # below the first look: nothing read
    assert short["verdict"] == "inconclusive" and short["look"] == 0 and short["n"] == 4
    assert sequential_verdict(d[:8], PLAN, "higher")["n"] <= 7  # the data reach looks 1 and 2 only


def test_power_never_falls_below_todays_design_and_costs_seeds_only_when_needed():
    from hierbench.stats import power_curve

    c = power_curve([0.0, 0.5, 1.0, 2.0], PLAN, reps=20_000, seed=1)
    assert (c.power >= c.fixed_first - 0.01).all() and (c.power <= c.fixed_max + 0.015).all()
    assert c.loc[2.0, "mean_seeds"] < 9 < c.loc[0.5, "mean_seeds"]
    g = power_curve([0.0, 0.5, 1.0, 2.0], GUARDED, reps=20_000, seed=1)
    assert (g.power >= g.fixed_first - 0.01).all() and (g.power <= c.power + 0.01).all()  # the guard costs, never gives
    assert 9 <= g.loc[2.0, "mean_seeds"] < 11.5 < g.loc[0.5, "mean_seeds"]  # it reads from 9 seeds on


@pytest.mark.parametrize(
    "bad", [dict(first=0, max_seeds=5), dict(first=5, max_seeds=4), dict(first=5, max_seeds=9, step=0)]
)
def test_look_schedule_rejects_bad_plans(bad):
    with pytest.raises(ValueError, match="look"):
        look_schedule(**{"step": 2, **bad})


def test_bad_spending_noise_and_looks_are_named():
    with pytest.raises(ValueError, match="sideways"):
        alpha_spent(0.5, spending="sideways")
    with pytest.raises(ValueError, match="t2"):
        simulate_sequential(0.0, PLAN, noise="t2", reps=10)
    with pytest.raises(ValueError, match="increasing"):
        sequential_levels([5, 5, 7])


def test_fragile_when_one_seed_overturns_the_verdict_robust_otherwise():
    marginal = np.array([0.0005, 0.003, 0.002, 0.0025, 0.004])  # supported; without seed 1 or 3 the interval reaches 0
    assert fragility(marginal, "higher", interval="t") == dict(verdict="supported", kept=3, n=5, fragile=True)
    robust = np.array([0.010, 0.011, 0.009, 0.012, 0.010])
    assert fragility(robust, "higher", interval="t") == dict(verdict="supported", kept=5, n=5, fragile=False)
    assert (
        leave_one_out_verdicts(np.r_[robust, np.nan], "higher", interval="t") == ["supported"] * 5
    )  # NaN seeds left out
    blocked = np.array([0.001, 0.002, 0.0015, 0.0005, 0.012])  # inconclusive only because of seed 4
    assert fragility(blocked, "higher", interval="t") == dict(verdict="inconclusive", kept=4, n=5, fragile=True)
    # by default the rule the ledger's verdicts read: the guarded interval's own verdict, left-one-out by the same rule
    assert fragility(marginal, "higher")["verdict"] == verdict(*guarded_interval(marginal)[1:3], "higher")
    assert fragility(robust, "higher") == dict(verdict="supported", kept=5, n=5, fragile=False)


SKEW_REPS = 100_000
SKEW_TOL = 3 * math.sqrt(0.05 * 0.95 / SKEW_REPS)


@pytest.mark.parametrize("skew, goal", [(1.5, 0.04), (2.3, 0.05)])
def test_the_guard_keeps_the_error_under_skewed_seed_noise_where_the_t_rule_does_not(skew, goal):
    "Issue 48's goals on null claims: false supported (left skew) and false contradicted (right skew) each within them."
    for sign, side in ((-1, "supported"), (1, "contradicted")):
        g = simulate_sequential(0.0, GUARDED, noise=f"gamma{sign * skew:+g}", reps=SKEW_REPS, seed=12)
        t = simulate_sequential(0.0, PLAN, noise=f"gamma{sign * skew:+g}", reps=SKEW_REPS, seed=12)
        assert g[side] <= goal + SKEW_TOL, (skew, side, g)
        assert t[side] > goal + 0.02, (skew, side, t)  # the check can fail: the t-rule fails it


def test_the_guard_meets_the_power_goal(monkeypatch):
    """Issue 48's power goal: at a 1-sd effect the guard says supported at least 90% of the time (the study: 0.9003 on
    its confirming run, 0.9016 pooled over 1.1 M claims), within 3 Monte-Carlo standard errors; the t-rule about 93.5%,
    and one allowance of 0.35 at every look (the first guarded rule) 0.886, below the goal: the check can fail."""
    reps = 100_000
    tol = 3 * math.sqrt(0.9 * 0.1 / reps)
    g = simulate_sequential(1.0, GUARDED, reps=reps, seed=13)["supported"]
    t = simulate_sequential(1.0, PLAN, reps=reps, seed=13)["supported"]
    assert 0.90 - tol <= g < t - 0.02 and t > 0.92, (g, t)
    monkeypatch.setattr(hierbench.stats, "SKEW_ALLOWANCE_INTERIM", 0.35)  # the first guarded rule, same claims
    monkeypatch.setattr(hierbench.stats, "SKEW_ALLOWANCE_LAST", 0.35)
    assert simulate_sequential(1.0, GUARDED, reps=reps, seed=13)["supported"] < 0.90 - tol < g


def test_each_look_reads_its_own_allowance():
    "Interim looks read the larger allowance, the last look none beyond the sample's skewness, one look alone 0.35."
    assert GUARDED.allowances() == (SKEW_ALLOWANCE_INTERIM,) * 5 + (SKEW_ALLOWANCE_LAST,)
    assert SequentialPlan((15,)).allowances() == (SKEW_ALLOWANCE,)
    rng = np.random.default_rng(4)
    for _ in range(200):  # rows that reach the last look
        d = 0.6 + rng.gamma(1.0, 1.0, 15)
        v = sequential_verdict(d, GUARDED, "higher")
        for h in v["history"]:
            assert h["allowance"] == GUARDED.allowances()[h["look"] - 1]
            if np.isfinite(h["level"]):
                assert (h["low"], h["high"]) == guarded_interval(d[: h["n"]], h["level"], h["allowance"])[1:3]
    # a left skew of -1: the last look's interval sits inside the one an interim allowance gives, on the heavy side
    d = np.r_[0.006 + 0.004 * np.sin(np.arange(14)), -0.004]
    last, interim = guarded_interval(d, 0.95, SKEW_ALLOWANCE_LAST), guarded_interval(d, 0.95, SKEW_ALLOWANCE_INTERIM)
    assert interim[1] < last[1] < mean_interval(d)[1] and interim[2] == last[2] == mean_interval(d)[2]


def test_the_guarded_reading_is_deterministic_and_drops_nan_seeds():
    d = np.r_[0.006 + 0.004 * np.sin(np.arange(14)), -0.02]  # fourteen steady seeds and one bad one
    one_look = SequentialPlan((15,))  # one skew-guarded 95% interval at 15 seeds
    a, b = sequential_verdict(d, one_look, "higher"), sequential_verdict(d.copy(), one_look, "higher")
    assert json.dumps(a) == json.dumps(b)  # no resampling: the same numbers, bit for bit
    with_nan = sequential_verdict(np.insert(d, 3, np.nan), one_look, "higher")
    assert {k: with_nan[k] for k in ("verdict", "n", "low", "high")} == {
        k: a[k] for k in ("verdict", "n", "low", "high")
    }
    assert a["verdict"] == "inconclusive" and a["t_verdict"] == "supported"  # the bad seed: only the t-rule decides
    seq = sequential_verdict(d, GUARDED, "higher")  # the plan decides at 11 seeds, before the bad one
    assert json.dumps(seq) == json.dumps(sequential_verdict(d, GUARDED, "higher")) and seq["n"] == 11
    assert guarded_interval([np.nan, 0.1, np.nan])[1:] == (float("-inf"), float("inf"), 1)
    assert fragility(np.r_[d, np.nan], "higher")["n"] == 15


def test_the_per_look_allowance_search_runs_and_reads_the_librarys_boundaries(capsys):
    "tools/allowance_per_look_search.py (the robust-verdicts page's search), small: every rule read, the table printed."
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tools" / "allowance_per_look_search.py"
    spec = importlib.util.spec_from_file_location("allowance_per_look_search", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.guarded_bounds is hierbench.stats.guarded_bounds and len(mod.ALLOWANCES) ** 4 == 4096
    mod.main(["--reps", "2000", "--top", "3"])
    out = capsys.readouterr().out
    assert "of 4096 rules meet the error goals" in out and out.count("\n| ") == 4 and "give the last look" in out
