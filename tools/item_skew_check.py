#!/usr/bin/env python
"""Issue 48, item 4: are paired differences over evaluation *items* skewed the way the ledger's seed differences are,
and does it matter for the item intervals (`eval --compare`'s percentile item bootstrap)? Reads the per-item rows of
the ledger's records (nbs/results/data/ledger-standard/items.npz): for six claim rows' two arms at seed 0, the
per-item differences A − B, their skewness, and — drawing n items from those differences — how often the 95%
percentile bootstrap, the t-interval and the skew-guarded interval miss the mean on each side (2.5% each is exact).
Bootstrap means come from multinomial counts over the few distinct values a difference takes, so thousands of
samples of thousands of items cost seconds. Writes nbs/results/data/item-skew-check.json and prints the results
page's table. Usage:
    .venv/bin/python tools/item_skew_check.py [--reps 4000] [--boot 999]
"""

import argparse
import json
import math
from pathlib import Path

import numpy as np
from scipy import stats as sps

from hierbench.stats import guarded_bounds, sample_skewness, skew_term, SKEW_REACH

ROOT = Path(__file__).resolve().parents[1]
ITEMS = ROOT / "nbs/results/data/ledger-standard/items.npz"
OUT = ROOT / "nbs/results/data/item-skew-check.json"
PAIRS = [
    ("DEG-1", "degla", "clip", "test-iid|comp|ok"),
    ("READ-2", "read-align-only", "read-base", "test-iid|tot|ok"),
    ("ARG-2", "argent-no-reg", "hycoclip", "test-iid|zs/test-iid|ok"),
    ("DEG-2", "degla", "degla-base", "general|zs/general|ok"),
    ("ARG-5", "argent-no-reg", "argent", "test-iid|i2t|rank"),
    ("HYP-1", "meru", "clip", "test-iid|chains|tau"),
]


def per_item(z, a: str, b: str, rec: str, seed: int = 0) -> np.ndarray:
    x, y = (z[f"{r}|{seed}|{rec}"] for r in (a, b))
    if rec.endswith("rank"):
        x, y = x < 5, y < 5  # image→text recall@5 per query
    return x.astype(float) - y.astype(float)


def miss_rates(d: np.ndarray, n: int, reps: int, boot: int, rng, level: float = 0.95) -> dict:
    "One-sided miss rates (the mean below the interval / above it) of three intervals, samples of n items from d."
    values, counts = np.unique(d, return_counts=True)
    p, mu = counts / counts.sum(), float(d.mean())
    samples = rng.multinomial(n, p, size=reps)  # (reps, k) item counts
    means = samples @ values / n
    m2 = samples @ values**2 / n - means**2
    m3 = samples @ values**3 / n - 3 * means * (samples @ values**2 / n) + 2 * means**3
    sd = np.sqrt(np.maximum(m2, 0) * n / (n - 1))
    spread = m2 > 1e-20
    g1 = np.divide(m3, np.where(spread, m2, 1.0) ** 1.5, out=np.zeros_like(m2), where=spread)
    skew = g1 * math.sqrt(n * (n - 1)) / (n - 2)
    b = sps.t.ppf(0.5 + level / 2, n - 1)
    out = {}
    boots = np.concatenate(
        [
            (rng.multinomial(n, samples[i : i + 200] / n, size=(boot, len(samples[i : i + 200]))) @ values / n).T
            for i in range(0, reps, 200)
        ]
    )  # (reps, boot) bootstrap means
    lo, hi = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2], axis=1)
    out["percentile bootstrap"] = (float((lo > mu).mean()), float((hi < mu).mean()))
    se = sd / math.sqrt(n)
    out["t"] = (float((means - b * se > mu).mean()), float((means + b * se < mu).mean()))
    if skew_term(level, n) <= SKEW_REACH:
        up, down = guarded_bounds(b, skew, n)
        out["skew-guarded"] = (float((means - up * se > mu).mean()), float((means - down * se < mu).mean()))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=4000)
    ap.add_argument("--boot", type=int, default=999)
    a = ap.parse_args(argv)
    rng, rows = np.random.default_rng(48), []
    with np.load(ITEMS) as z:
        for cid, A, B, rec in PAIRS:
            d = per_item(z, A, B, rec)
            seeds = sorted(
                {int(k.split("|")[1]) for k in z.files if k.startswith(f"{A}|") and k.endswith(rec)}
                & {int(k.split("|")[1]) for k in z.files if k.startswith(f"{B}|") and k.endswith(rec)}
            )
            skews = [sample_skewness(per_item(z, A, B, rec, s)) for s in seeds]
            row = dict(
                claim=cid,
                a=A,
                b=B,
                record=rec,
                items=len(d),
                mean=float(d.mean()),
                share_differing=float((d != 0).mean()),
                skewness=sample_skewness(d),
                skewness_over_seeds=[float(np.min(skews)), float(np.max(skews))],
                seeds=len(seeds),
                miss={},
            )
            for n in (30, 100, 300, len(d)):
                if n > len(d):
                    continue
                row["miss"][str(n)] = miss_rates(d, n, a.reps, a.boot, rng)
            rows.append(row)
            print(f"{cid}: done", flush=True)
    OUT.write_text(json.dumps(dict(reps=a.reps, boot=a.boot, rows=rows), indent=1) + "\n")
    print(f"wrote {OUT}\n")
    print(
        "| claim row | record | items | A − B | items that differ | skewness of the item differences (seed 0; range "
        "over seeds) "
        "| items n | percentile bootstrap: miss below / above (%) | t | skew-guarded |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        for n, m in r["miss"].items():
            f = lambda k: "—" if k not in m else f"{100 * m[k][0]:.1f} / {100 * m[k][1]:.1f}"
            print(
                f"| {r['claim']} {r['a']} − {r['b']} | {r['record'].replace('|', ' · ')} | {r['items']} | "
                f"{r['mean']:+.4f} | {100 * r['share_differing']:.1f} % | "
                f"{r['skewness']:+.2f} ({r['skewness_over_seeds'][0]:+.2f} to {r['skewness_over_seeds'][1]:+.2f}) | "
                f"{n} | "
                f"{f('percentile bootstrap')} | {f('t')} | {f('skew-guarded')} |"
            )


if __name__ == "__main__":
    main()
