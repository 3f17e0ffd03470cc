#!/usr/bin/env python3
"""Do the world's results move when training runs at another precision? Two `hierbench compare` folders of one
budget and the same seeds, trained at two precisions (every other setting equal), compared run by run.

    hierbench compare --budget quick --out runs/quick-fp32
    hierbench compare --budget quick --precision amp_bf16 --out runs/quick-amp_bf16
    .venv/bin/python tools/paired_precision.py runs/quick-fp32 runs/quick-amp_bf16

Prints two markdown tables:
1. per metric, the paired difference B − A over every (recipe, seed) run both folders hold — its mean with a 95%
   t-interval and the smallest shift the pairs could detect (80% power) — beside the seed-to-seed spread of folder
   A (the same recipe, seed s+1 − seed s), so a precision effect reads against the noise a new seed brings;
2. every claim row of the two `claims.json` with its effect and verdict in each folder, and a count of verdicts
   that moved.
The folders must hold the same budget apart from its precision; anything else is refused."""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

METRICS = (
    "zs_acc/test-iid",
    "zs_acc/general",
    "i2t_R@5",
    "comp_acc",
    "comp_acc/replace_rel",
    "tot_acc",
    "pep_auc",
    "pep_ap",
)


def read_folder(folder: Path) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    "(budget, result rows, claim rows) of a compare folder."
    try:
        results = json.loads((folder / "results.json").read_text())
        claims = json.loads((folder / "claims.json").read_text())
    except FileNotFoundError as e:
        raise SystemExit(f"{folder}: not a finished compare folder ({Path(e.filename).name} missing)")
    return results["meta"]["budget"], pd.DataFrame(results["rows"]), pd.DataFrame(claims["claims"])


def check_pairable(a: dict, b: dict) -> None:
    "The two budgets must differ in their precision only."
    differ = sorted(k for k in set(a) | set(b) if k != "precision" and a.get(k) != b.get(k))
    if differ:
        raise SystemExit(f"the folders' budgets differ in {', '.join(differ)}, not only in precision")
    if a.get("precision", "fp32") == b.get("precision", "fp32"):
        raise SystemExit("both folders ran at the same precision")


def metric_pairs(rows_a: pd.DataFrame, rows_b: pd.DataFrame, metrics=METRICS) -> pd.DataFrame:
    "Per metric: paired precision difference (B − A) over the shared runs, and folder A's seed-to-seed spread."
    from hierbench.stats import mean_interval, min_detectable_effect

    key = ["recipe", "seed", "metric"]
    both = rows_a[key + ["value"]].merge(rows_b[key + ["value"]], on=key, suffixes=("_a", "_b")).dropna()
    out = []
    for m in metrics:
        d = both[both.metric == m]
        if d.empty:
            continue
        diff = (d.value_b - d.value_a).to_numpy()
        effect, low, high, n = mean_interval(diff)
        wide = d.pivot(index="recipe", columns="seed", values="value_a").sort_index(axis=1)
        seed_steps = (
            np.concatenate(
                [(wide[s1] - wide[s0]).dropna().to_numpy() for s0, s1 in zip(wide.columns, wide.columns[1:])]
            )
            if wide.shape[1] > 1
            else np.array([])
        )
        sd = float(np.std(diff, ddof=1)) if n > 1 else float("nan")
        out.append(
            dict(
                metric=m,
                runs=n,
                mean_shift=effect,
                low=low,
                high=high,
                mde=min_detectable_effect(sd, n) if n > 1 else float("nan"),
                sd_shift=sd,
                rms_shift=float(np.sqrt(np.mean(diff**2))),
                rms_seed_step=float(np.sqrt(np.mean(seed_steps**2))) if seed_steps.size else float("nan"),
            )
        )
    return pd.DataFrame(out)


def claim_pairs(claims_a: pd.DataFrame, claims_b: pd.DataFrame) -> pd.DataFrame:
    "Every claim row in both folders: effect and verdict at each precision."
    key = ["id", "a", "b", "metric"]
    cols = key + ["effect", "ci_low", "ci_high", "n", "verdict"]
    return claims_a[cols].merge(claims_b[cols], on=key, suffixes=("_a", "_b"), how="outer", indicator=True)


def _f(x, nd=4) -> str:
    return "—" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:+.{nd}f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path, help="compare folder A (the reference, e.g. fp32)")
    ap.add_argument("b", type=Path, help="compare folder B (e.g. amp_bf16)")
    args = ap.parse_args(argv)
    (ba, ra, ca), (bb, rb, cb) = read_folder(args.a), read_folder(args.b)
    check_pairable(ba, bb)
    pa, pb = ba.get("precision", "fp32"), bb.get("precision", "fp32")
    mp = metric_pairs(ra, rb)
    print(f"budget {ba['name']}, {pb} − {pa}, paired by recipe and seed\n")
    print(
        f"| metric | runs | mean shift {pb} − {pa} [95% CI] | smallest detectable shift | RMS shift | RMS seed step "
        f"({pa}) |"
    )
    print("|---|---|---|---|---|---|")
    for r in mp.itertuples():
        print(
            f"| {r.metric} | {r.runs} | {_f(r.mean_shift)} [{_f(r.low)}, {_f(r.high)}] | {r.mde:.4f} | "
            f"{r.rms_shift:.4f} | {r.rms_seed_step:.4f} |"
        )
    cp = claim_pairs(ca, cb)
    run = cp[(cp._merge == "both") & (cp.verdict_a != "not run") & (cp.verdict_b != "not run")]
    moved = run[run.verdict_a != run.verdict_b]
    print(
        f"\n| claim | A − B | metric | seeds | effect {pa} [95% CI] | verdict {pa} | effect {pb} [95% CI] | verdict "
        f"{pb} |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in run.itertuples():
        print(
            f"| {r.id} | {r.a} − {r.b} | {r.metric} | {r.n_a:.0f} | {_f(r.effect_a)} [{_f(r.ci_low_a)}, "
            f"{_f(r.ci_high_a)}] | {r.verdict_a} "
            f"| {_f(r.effect_b)} [{_f(r.ci_low_b)}, {_f(r.ci_high_b)}] | {r.verdict_b} |"
        )
    print(
        f"\nverdicts moved: {len(moved)} of {len(run)} claim rows run in both folders"
        f" ({len(cp) - len(run)} rows not run in one or both, left out)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
