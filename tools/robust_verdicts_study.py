#!/usr/bin/env python
"""The simulation study of issue 48: which per-row rule keeps the ledger's error rate under the skewed seed noise its
own rows show. Null claims and claims with an effect, read at the standard plan's looks (5, 7, ..., 15 seeds,
O'Brien–Fleming spending of 0.05) by each candidate rule, under normal, t3, centred gamma and lognormal noise of
skewness ±0.5 … ±2.3, and a stress family (normal seeds with a rare outlier). Writes
nbs/results/data/robust-verdicts-study.json and prints the markdown tables of the results page
(nbs/results/2026-12-06_robust-verdicts.ipynb). Usage:
    .venv/bin/python tools/robust_verdicts_study.py [--reps 200000] [--boot-reps 6000] [--quick]

Candidates (the closed-form ones vectorised over `--reps` claims per cell, the resampling ones over `--boot-reps`):
  t            the ledger's rule before issue 48: paired t-intervals at the plan's levels
  hall         Hall's skewness-corrected t (Hall 1992) with the sample's G1, every look
  hall&t       decide only where both hall and t decide
  boot-t       studentized bootstrap (999 resamples) at each look's level
  boot-t&t     decide only where both decide
  calib        per-row calibration: the whole sequential procedure bootstrapped (999 paths) from the row's centred
               differences; each side's boundary spends the plan's α_k/2 among the paths not yet stopped
  calib&t      decide only where both decide
  guarded-0.35 the first guarded rule (Hall with 0.35 standard errors of G1 of allowance on the heavy side at every
               look, never inside the t-boundary, no decision where the skew term b²/(3√n) exceeds 2)
  guarded      the chosen rule (hierbench.stats): the same guard with an allowance of SKEW_ALLOWANCE_INTERIM (1.0) at
               the looks before the last and SKEW_ALLOWANCE_LAST (0.0) at the last
The tuning grid (interim allowance × last allowance, and the reach) runs on its own seed; the tables of the chosen
rule on another.
"""

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
from scipy import stats as sps

from hierbench.stats import (
    SKEW_ALLOWANCE_INTERIM,
    SKEW_ALLOWANCE_LAST,
    SKEW_REACH,
    SequentialPlan,
    _seed_noise,
    _skewness_rows,
    _t_stat,
    alpha_spent,
    guarded_bounds,
    hall_inverse,
    look_schedule,
    sequential_rates,
    sequential_verdict,
    skew_term,
)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "nbs/results/data/robust-verdicts-study.json"
PLAN = SequentialPlan(look_schedule(5, 15, 2))
T_PLAN = SequentialPlan(PLAN.looks, interval="t")
N = PLAN.looks[-1]
NULL_FAMILIES = [
    "normal",
    "t3",
    "gamma-0.5",
    "gamma-1",
    "gamma-1.5",
    "gamma-2.3",
    "lognormal-1.5",
    "lognormal-2.3",
    "outlier-1.5",
    "outlier-2.3",
]
TUNING_SEED, STUDY_SEED, BOOT_SEED, AGREE_SEED = 21, 48, 7, 3


def noise(rng, family: str, shape) -> np.ndarray:
    "hierbench's seed noise, and the stress family 'outlierS': normal seeds, 10% of them shifted so the skewness is S."
    if not family.startswith("outlier"):
        return _seed_noise(rng, family, shape)
    s, p = float(family[7:]), 0.1
    lo, hi = 0.0, 50.0  # the shift D whose mixture has skewness |s|
    for _ in range(100):
        D = (lo + hi) / 2
        skew = p * (1 - p) * (1 - 2 * p) * D**3 / (1 + p * (1 - p) * D * D) ** 1.5
        lo, hi = (D, hi) if skew < abs(s) else (lo, D)
    z = rng.standard_normal(shape) + D * (rng.random(shape) < p)
    return math.copysign(1, s) * (z - p * D) / math.sqrt(1 + p * (1 - p) * D * D)


def draw(family: str, effect: float, reps: int, seed: int) -> np.ndarray:
    return noise(np.random.default_rng(seed), family, (reps, N)) + effect


# ---- the closed-form candidates, vectorised: per look, the boundaries (upper, lower) of the t-statistic
def _t_bounds(x, n, level, k=None):
    b = sps.t.ppf(0.5 + level / 2, n - 1)
    return np.full(len(x), b), np.full(len(x), -b)


def _hall_bounds(x, n, level, k=None):
    b, g = sps.t.ppf(0.5 + level / 2, n - 1), _skewness_rows(x[:, :n])
    return hall_inverse(b, g, n), hall_inverse(-b, g, n)


def _guarded_variant(interim: float, last: float, reach: float):
    """The guarded rule with other allowances (before the last look, at it) and reach (the tuning grid);
    (1.0, 0.0, 2) is hierbench's, (0.35, 0.35, 2) the first guarded rule."""

    def levels():
        full = T_PLAN.levels()
        first = next(k for k, (n, l) in enumerate(zip(PLAN.looks, full)) if skew_term(l, n) <= reach)
        return np.r_[np.full(first, np.nan), SequentialPlan(PLAN.looks[first:], interval="t").levels()]

    lev = levels()

    def bounds(x, n, level, k=None):
        b = sps.t.ppf(0.5 + level / 2, n - 1)
        return guarded_bounds(b, _skewness_rows(x[:, :n]), n, last if k == len(PLAN.looks) - 1 else interim)

    return lev, bounds


def read(x: np.ndarray, bounds_of, levels, both_t: bool = False) -> dict:
    "A sequential reading of every row of `x` ('higher'): stop at the first look whose statistic leaves its boundaries."
    reps = len(x)
    total, squares = np.cumsum(x, 1), np.cumsum(x * x, 1)
    open_, up, down, used = np.ones(reps, bool), np.zeros(reps, bool), np.zeros(reps, bool), np.full(reps, N)
    t_levels = T_PLAN.levels()
    for k, (n, level) in enumerate(zip(PLAN.looks, levels)):
        if not np.isfinite(level):
            continue
        t = _t_stat(total[:, n - 1], squares[:, n - 1], n)
        upper, lower = bounds_of(x, n, level, k)
        if both_t:
            tu, tl = _t_bounds(x, n, t_levels[k])
            upper, lower = np.maximum(upper, tu), np.minimum(lower, tl)
        hi, lo = open_ & (t > upper), open_ & (t < lower)
        up |= hi
        down |= lo
        used[hi | lo] = n
        open_ &= ~(hi | lo)
    return dict(supported=float(up.mean()), contradicted=float(down.mean()), mean_seeds=float(used.mean()))


# ---- the resampling candidates: per look, bootstrap boundaries for every row (B resamples or paths)
def boot_bounds(x: np.ndarray, B: int = 999, seed: int = BOOT_SEED, chunk: int = 100) -> list[dict]:
    """Per look k: the studentized bootstrap's boundaries at the t-plan's level (`boot`) and the per-row calibration's
    (`calib`: B paths of n_k draws from the row's centred first n_k differences, each look's boundary spending α_j/2
    per side among the paths still running), for every row of `x`."""
    rng, reps = np.random.default_rng(seed), len(x)
    spend = np.diff(np.r_[0.0, alpha_spent(np.asarray(PLAN.looks) / N)])
    levels, out = T_PLAN.levels(), []

    def tstat(tot, sq, n):
        mu = tot / n
        var = np.maximum(sq - n * mu * mu, 0) / (n - 1)
        with np.errstate(all="ignore"):
            t = mu / np.sqrt(var / n)
        return np.where(np.isfinite(t), t, np.where(mu > 0, np.inf, np.where(mu < 0, -np.inf, 0.0)))

    for k, (n, level) in enumerate(zip(PLAN.looks, levels)):
        cu, cl, bu, bl = (np.empty(reps) for _ in range(4))
        for a in range(0, reps, chunk):
            v = x[a : a + chunk, :n]
            c = v - v.mean(1, keepdims=True)
            idx = rng.integers(0, n, (len(v), B, n))
            r = np.take_along_axis(np.broadcast_to(c[:, None, :], (len(v), B, n)), idx, 2)
            cs, cq = np.cumsum(r, 2), np.cumsum(r * r, 2)
            alive_u, alive_l = np.ones((len(v), B), bool), np.ones((len(v), B), bool)
            for j, m in enumerate(PLAN.looks[: k + 1]):
                ts = tstat(cs[:, :, m - 1], cq[:, :, m - 1], m)
                kk = int(math.floor(spend[j] / 2 * B))  # paths a side may stop at look j
                if kk < 1:
                    u, l = np.full(len(v), np.inf), np.full(len(v), -np.inf)
                else:
                    u = np.sort(np.where(alive_u, ts, -np.inf), 1)[:, B - kk]
                    l = np.sort(np.where(alive_l, ts, np.inf), 1)[:, kk - 1]
                alive_u &= ~(ts >= u[:, None])
                alive_l &= ~(ts <= l[:, None])
            cu[a : a + chunk], cl[a : a + chunk] = u, l
            p = (1 - level) / 2  # bootstrap-t: the look's own level
            ts = np.sort(ts, 1)
            kh = int(math.ceil((1 - p) * B)) - 1
            bu[a : a + chunk] = ts[:, min(B - 1, kh)] if p * B >= 1 else np.inf
            bl[a : a + chunk] = ts[:, max(0, B - 1 - kh)] if p * B >= 1 else -np.inf
        out.append(dict(calib=(cu, cl), boot=(bu, bl)))
    return out


def read_boot(x, bb, name, both_t=False):
    return read(x, lambda x_, n, level, k: bb[k][name], T_PLAN.levels(), both_t)


def se(p, reps):
    return math.sqrt(max(p * (1 - p), 1e-12) / reps)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200_000)
    ap.add_argument("--boot-reps", type=int, default=6_000)
    ap.add_argument(
        "--quick", action="store_true", help="a small run (tables of the same shape, larger Monte-Carlo error)"
    )
    a = ap.parse_args(argv)
    reps, breps = (20_000, 600) if a.quick else (a.reps, a.boot_reps)
    t0, res = (
        time.time(),
        dict(
            reps=reps,
            boot_reps=breps,
            boot_resamples=999,
            plan=dict(looks=PLAN.looks, alpha=PLAN.alpha, spending=PLAN.spending),
            guarded=dict(interim=SKEW_ALLOWANCE_INTERIM, last=SKEW_ALLOWANCE_LAST, reach=SKEW_REACH),
            seeds=dict(tuning=TUNING_SEED, study=STUDY_SEED, bootstrap=BOOT_SEED, agreement=AGREE_SEED),
        ),
    )
    log = lambda m: print(f"[{time.time() - t0:6.0f} s] {m}", flush=True)

    # 1. tuning grid (its own seed): the allowances before and at the last look, and the reach
    grid, chosen = [], (SKEW_ALLOWANCE_INTERIM, SKEW_ALLOWANCE_LAST)
    cells = [(f, 0.0) for f in ("normal", "t3", "gamma-1.5", "gamma-2.3", "lognormal-1.5")] + [
        ("normal", 0.5),
        ("normal", 1.0),
    ]
    tune_reps = reps // 2
    for fam, eff in cells:
        x = draw(fam, eff, tune_reps, TUNING_SEED)
        pairs = [(a, a) for a in (0.0, 0.2, 0.35, 0.5)] + [
            (a, l) for a in (0.35, 0.5, 0.7, 1.0, 1.5, 2.0) for l in (0.0, 0.1, 0.2)
        ]
        for interim, last in pairs:
            for reach in (SKEW_REACH, math.inf) if (interim, last) in (chosen, (0.35, 0.35)) else (SKEW_REACH,):
                lev, bounds = _guarded_variant(interim, last, reach)
                grid.append(
                    dict(family=fam, effect=eff, interim=interim, last=last, reach=reach, **read(x, bounds, lev))
                )
                if (interim, last, reach) == (*chosen, SKEW_REACH):  # the variant is hierbench's rule, exactly
                    assert grid[-1]["supported"] == sequential_rates(x, PLAN)["supported"], (fam, eff)
    res["tuning"] = dict(reps=tune_reps, rows=grid)
    log("tuning grid done")

    # 2. the closed-form candidates and the chosen rule, on the study seed
    closed = {
        "t": (_t_bounds, T_PLAN.levels(), False),
        "hall": (_hall_bounds, T_PLAN.levels(), False),
        "hall&t": (_hall_bounds, T_PLAN.levels(), True),
        "guarded-0.35": (*reversed(_guarded_variant(0.35, 0.35, SKEW_REACH)), False),
    }
    rows = []
    cells = [(f, 0.0) for f in NULL_FAMILIES] + [
        (f, e) for f in ("normal", "gamma-1.5", "gamma1.5", "t3") for e in (0.5, 1.0)
    ]
    for fam, eff in cells:
        x = draw(fam, eff, reps, STUDY_SEED)
        for name, (bounds, lev, both) in closed.items():
            rows.append(dict(rule=name, family=fam, effect=eff, reps=reps, **read(x, bounds, lev, both)))
        g = sequential_rates(x, PLAN)  # the library's own vectorised rule
        rows.append(
            dict(
                rule="guarded",
                family=fam,
                effect=eff,
                reps=reps,
                supported=g["supported"],
                contradicted=g["contradicted"],
                mean_seeds=g["mean_seeds"],
            )
        )
    mirror = sequential_rates(draw("gamma1.5", 0.0, reps, STUDY_SEED), PLAN)
    res["mirror"] = dict(family="gamma1.5", supported=mirror["supported"], contradicted=mirror["contradicted"])
    log("closed-form candidates done")

    # 3. the resampling candidates (fewer claims), with the closed-form ones on the same claims
    for fam, eff in [(f, 0.0) for f in ("normal", "t3", "gamma-1.5", "gamma-2.3", "lognormal-1.5", "outlier-1.5")] + [
        ("normal", 0.5),
        ("normal", 1.0),
    ]:
        x = draw(fam, eff, breps, STUDY_SEED + 1)
        bb = boot_bounds(x)
        for name, (src, both) in {
            "boot-t": ("boot", False),
            "boot-t&t": ("boot", True),
            "calib": ("calib", False),
            "calib&t": ("calib", True),
        }.items():
            rows.append(dict(rule=name, family=fam, effect=eff, reps=breps, **read_boot(x, bb, src, both)))
        for name, (bounds, lev, both) in closed.items():
            rows.append(
                dict(rule=name + " (same claims)", family=fam, effect=eff, reps=breps, **read(x, bounds, lev, both))
            )
        g = sequential_rates(x, PLAN)
        rows.append(
            dict(
                rule="guarded (same claims)",
                family=fam,
                effect=eff,
                reps=breps,
                supported=g["supported"],
                contradicted=g["contradicted"],
                mean_seeds=g["mean_seeds"],
            )
        )
        log(f"resampling candidates: {fam} {eff}")
    res["rows"] = rows

    # 4. the ledger's per-row function against the vectorised rule, claim by claim
    agree = []
    for fam, eff in (("normal", 0.0), ("gamma-1.5", 0.0), ("gamma-2.3", 0.0), ("normal", 1.0)):
        x = draw(fam, eff, 3_000 if not a.quick else 500, AGREE_SEED)
        per_row = [sequential_verdict(r, PLAN, "higher")["verdict"] for r in x]
        vec = sequential_rates(x, PLAN)
        one = [sequential_rates(r[None, :], PLAN) for r in x]  # the vectorised form, claim by claim
        one = ["supported" if o["supported"] else "contradicted" if o["contradicted"] else "inconclusive" for o in one]
        agree.append(
            dict(
                family=fam,
                effect=eff,
                claims=len(x),
                per_row_supported=float(np.mean([v == "supported" for v in per_row])),
                per_row_contradicted=float(np.mean([v == "contradicted" for v in per_row])),
                vectorised_supported=vec["supported"],
                vectorised_contradicted=vec["contradicted"],
                claims_that_differ=int(sum(p != q for p, q in zip(per_row, one))),
            )
        )
    res["agreement"] = agree
    log("agreement done")
    if not a.quick:
        OUT.write_text(json.dumps(res, indent=1) + "\n")
        log(f"wrote {OUT}")
    print(tables(res))


def tables(res: dict) -> str:
    "The results page's markdown tables."
    import pandas as pd

    rows = pd.DataFrame(res["rows"])
    pct = lambda p, n: f"{100 * p:.2f} ± {100 * se(p, n):.2f}"
    out = []
    # chosen rule vs t on every family (study seed)
    main_rules = ["t", "hall&t", "guarded-0.35", "guarded"]
    null = rows[(rows.effect == 0) & rows.rule.isin(main_rules)]
    out += [
        "| noise (null claims) | " + " | ".join(f"{r}: false supported / contradicted (%)" for r in main_rules) + " |",
        "|---|" + "---|" * len(main_rules),
    ]
    for fam in NULL_FAMILIES:
        cells = [null[(null.family == fam) & (null.rule == r)].iloc[0] for r in main_rules]
        out.append(
            f"| {fam} | " + " | ".join(f"{pct(c.supported, c.reps)} / {100 * c.contradicted:.2f}" for c in cells) + " |"
        )
    out += [
        "",
        "| claims with an effect | " + " | ".join(f"{r}: P(supported), mean seeds" for r in main_rules) + " |",
        "|---|" + "---|" * len(main_rules),
    ]
    eff = rows[(rows.effect > 0) & rows.rule.isin(main_rules)]
    for (fam, e), g in eff.groupby(["family", "effect"], sort=False):
        cells = [g[g.rule == r].iloc[0] for r in main_rules]
        out.append(
            f"| {fam}, {e:g} sd | "
            + " | ".join(f"{c.supported:.3f} ± {se(c.supported, c.reps):.3f}, {c.mean_seeds:.1f}" for c in cells)
            + " |"
        )
    # all candidates on the same (fewer) claims
    boot = rows[rows.reps == res["boot_reps"]]
    cands = [
        "t (same claims)",
        "hall (same claims)",
        "hall&t (same claims)",
        "boot-t",
        "boot-t&t",
        "calib",
        "calib&t",
        "guarded-0.35 (same claims)",
        "guarded (same claims)",
    ]
    fams = list(dict.fromkeys(zip(boot.family, boot.effect)))
    out += [
        "",
        "| candidate | " + " | ".join(f"{f}{'' if e == 0 else f', {e:g} sd'}" for f, e in fams) + " |",
        "|---|" + "---|" * len(fams),
    ]
    for c in cands:
        cells = []
        for f, e in fams:
            r = boot[(boot.rule == c) & (boot.family == f) & (boot.effect == e)].iloc[0]
            cells.append(f"{100 * r.supported:.1f}" if e == 0 else f"{r.supported:.3f}")
        out.append(f"| {c.replace(' (same claims)', '')} | " + " | ".join(cells) + " |")
    # tuning grid
    tune = pd.DataFrame(res["tuning"]["rows"])
    cols = [
        ("normal", 0.0),
        ("t3", 0.0),
        ("gamma-1.5", 0.0),
        ("gamma-2.3", 0.0),
        ("lognormal-1.5", 0.0),
        ("normal", 0.5),
        ("normal", 1.0),
    ]
    out += [
        "",
        "| allowance before the last look (se of G1) | at the last look | reach | "
        + " | ".join(f"{f}{'' if e == 0 else f', {e:g} sd'}" for f, e in cols)
        + " |",
        "|---|---|---|" + "---|" * len(cols),
    ]
    for (al, la, rc), g in tune.groupby(["interim", "last", "reach"], sort=True):
        cells = []
        for f, e in cols:
            r = g[(g.family == f) & (g.effect == e)].iloc[0]
            cells.append(f"{100 * r.supported:.2f}" if e == 0 else f"{r.supported:.3f}")
        out.append(f"| {al:g} | {la:g} | {'∞' if math.isinf(rc) else f'{rc:g}'} | " + " | ".join(cells) + " |")
    out += [
        "",
        "| noise, effect | claims | sequential_verdict: supported / contradicted | sequential_rates: supported / "
        "contradicted | claims that differ |",
        "|---|---|---|---|---|",
    ]
    for r in res["agreement"]:
        out.append(
            f"| {r['family']}, {r['effect']:g} | {r['claims']} | {r['per_row_supported']:.4f} / "
            f"{r['per_row_contradicted']:.4f} | "
            f"{r['vectorised_supported']:.4f} / {r['vectorised_contradicted']:.4f} | {r['claims_that_differ']} |"
        )
    m = res["mirror"]
    out.append(
        f"\nMirror (gamma +1.5, null): guarded false contradicted {100 * m['contradicted']:.2f} %, false supported "
        f"{100 * m['supported']:.2f} %."
    )
    return "\n".join(out)


if __name__ == "__main__":
    main()
