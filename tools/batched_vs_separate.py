#!/usr/bin/env python3
"""Are seeds trained K to a process (`hierbench.recipes.seed_batch`) the runs trained one seed per process? Two compare
folders of one budget, recipes and seeds — one trained with `--seeds-per-process 1`, one with K — compared run by run.

    .venv/bin/python tools/batched_vs_separate.py runs/batched-vs-separate --budget quick --recipes clip,argent,degla \\
        --seeds 5 --seeds-per-process 4

trains (or reuses) `OUT/separate` and `OUT/batched` with `hierbench.ledger.compare.run_compare` (the compare's own
training,
evaluation and reuse), then prints markdown:
1. per recipe and headline metric (`hierbench.ledger.report.KEY_METRICS`): the mean over seeds of each folder, the
difference
   of means batched − separate with its 95% t-interval over the seeds (paired: seed k of both folders starts from the
   same initialisation and draws the same batches), one seed's spread (the SD over the separate runs' seeds), and
   whether the interval holds zero and is narrower than that spread;
2. how many runs have identical weights in both folders (every tensor of `model.safetensors`, bit for bit);
3. each compare's wall time (the two ran one after the other: on a shared machine their load may differ).
`--report-only` compares two finished folders without training. The folders must hold the same budget."""

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def read_folder(folder: Path) -> tuple[dict, pd.DataFrame]:
    "(results meta, result rows) of a finished compare folder."
    try:
        results = json.loads((Path(folder) / "results.json").read_text())
    except FileNotFoundError:
        raise SystemExit(f"{folder}: not a finished compare folder (no results.json)")
    return results["meta"], pd.DataFrame(results["rows"])


def same_weights(a: Path, b: Path) -> tuple[int, int]:
    """(runs whose weight tensors are equal bit for bit in both folders, runs in folder `a`). The files' hashes would
    not do: a fine-tune's file records the path of its parent's weights, which differs between the folders."""
    from safetensors.torch import load_file
    import torch

    runs = sorted(p.relative_to(a) for p in Path(a).glob("runs/*/seed*/model.safetensors"))
    same = 0
    for rel in runs:
        if not (Path(b) / rel).is_file():
            continue
        wa, wb = load_file(Path(a) / rel), load_file(Path(b) / rel)
        same += wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    return same, len(runs)


def compare_metrics(sep: pd.DataFrame, bat: pd.DataFrame, metrics) -> pd.DataFrame:
    "Per recipe and metric: both means, the paired difference of means with its t-interval, one seed's spread."
    from hierbench.stats import mean_interval

    key = ["recipe", "seed", "metric"]
    both = sep[key + ["value"]].merge(bat[key + ["value"]], on=key, suffixes=("_sep", "_bat")).dropna()
    rows = []
    for (recipe, metric), d in both.groupby(["recipe", "metric"], sort=False):
        if metric not in metrics or len(d) < 2:
            continue
        diff = (d.value_bat - d.value_sep).to_numpy(float)
        effect, low, high, n = mean_interval(diff)
        spread = float(np.std(d.value_sep.to_numpy(float), ddof=1))
        rows.append(
            dict(
                recipe=recipe,
                metric=metric,
                seeds=n,
                separate=float(d.value_sep.mean()),
                batched=float(d.value_bat.mean()),
                difference=effect,
                low=low,
                high=high,
                seed_sd=spread,
                holds_zero=bool(low <= 0 <= high),
                narrower=bool(high - low < spread or high - low == 0),
            )
        )  # a zero-width interval: identical runs
    return pd.DataFrame(rows)


def markdown(df: pd.DataFrame) -> str:
    "The table as markdown (numbers to 4 decimals)."
    cols = list(df.columns)
    fmt = lambda v: f"{v:+.4f}" if isinstance(v, float) and not math.isnan(v) else str(v)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def report(out: Path) -> str:
    "The markdown comparison of `out/separate` and `out/batched`."
    from hierbench.ledger.report import KEY_METRICS

    (meta_s, rows_s), (meta_b, rows_b) = read_folder(out / "separate"), read_folder(out / "batched")
    if meta_s["budget"] != meta_b["budget"]:
        raise SystemExit("the two folders hold different budgets")
    table = compare_metrics(rows_s, rows_b, KEY_METRICS)
    same, n_runs = same_weights(out / "separate", out / "batched")
    ok = table.holds_zero.all() and table.narrower.all() if len(table) else False
    text = [
        f"budget {meta_s['budget']['name']}, recipes {', '.join(sorted(set(rows_s.recipe)))}, "
        f"seeds {sorted(set(rows_s.seed))}; seeds per process: separate {meta_s.get('seeds_per_process', 1)}, "
        f"batched {meta_b.get('seeds_per_process')}",
        "",
        markdown(table),
        "",
        f"every interval holds zero and is narrower than one seed's spread: {'yes' if ok else 'NO'} "
        f"({int(table.holds_zero.sum())}/{len(table)} hold zero, {int(table.narrower.sum())}/{len(table)} narrower)",
        f"runs with identical weights in both folders: {same} of {n_runs}",
        f"wall time: separate {meta_s.get('wall_seconds', float('nan')):.0f} s, batched "
        f"{meta_b.get('wall_seconds', float('nan')):.0f} s (one after the other)",
    ]
    return "\n".join(text)


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="folder holding separate/ and batched/")
    p.add_argument("--budget", default="quick")
    p.add_argument("--recipes", default="clip,argent,degla")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument(
        "--seeds-per-process", type=int, default=None, help="K of the batched folder (default: compare's choice)"
    )
    p.add_argument("--jobs", type=int, default=None, help="processes of each compare (default: one per core)")
    p.add_argument("--report-only", action="store_true", help="compare two finished folders, train nothing")
    a = p.parse_args(argv)
    if not a.report_only:
        from hierbench.ledger.compare import run_compare

        recipes = [r.strip() for r in a.recipes.split(",") if r.strip()]
        for name, k in (("separate", 1), ("batched", a.seeds_per_process)):
            run_compare(
                a.budget,
                seeds=a.seeds,
                out=a.out / name,
                recipes=recipes,
                jobs=a.jobs,
                seeds_per_process=k,
                log=lambda m: print(m, file=sys.stderr),
                progress=False,
            )
    text = report(a.out)
    print(text)
    return text


if __name__ == "__main__":
    main()
