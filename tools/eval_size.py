#!/usr/bin/env python
"""Evaluation only, the same trained models: re-score the runs of a compare folder on a larger test-iid split (more
scenes, optionally a larger PEP pool) and show, for each claim row among the recipes given, where its uncertainty
lives and its seed half-width before (the budget's evaluation) and after (the larger one), at the same seeds.

Writes FILE.json: the plan, the sizes, each run's metrics at both sizes, and the variance table
(`hierbench.ledger.claims.
variance_components`) of both, so a results page's numbers can be re-read without the checkpoints. Usage:
    .venv/bin/python tools/eval_size.py COMPARE_DIR --recipes hycoclip,argent,argent-no-reg --n-test 1200 \\
        [--pep-pool 100] [--metrics pep_ap,pep_auc] [--seeds 5] --json nbs/results/data/eval-size.json
"""

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from hierbench.ledger.claims import CLAIMS, evaluate_claims, variance_components
from hierbench.ledger.compare import load_items, results_rows, run_dir
from hierbench.evaluation.encoding import encode_uint8_images, pep_metrics
from hierbench.evaluation.world_eval import compositional_metrics, world_eval_data
from hierbench.models.family import load_model
from hierbench.ledger.records import finished_runs, read_plan


def rescore(out: Path, plan, recipes, n_test: int, pep_pool: int, seeds: int | None = None, log=print):
    """Each run of `recipes` scored on `n_test` test-iid scenes by the two protocols the rows read, as
    `evaluate_world_split` scores them (compositional accuracy, PEP): ({(recipe, seed): metrics}, {(recipe, seed):
    items})."""
    data = world_eval_data("test-iid", n_test, seed=0, pep_pool=pep_pool)
    metrics, items = {}, {}
    for r, s in [k for k in plan.runs() if k[0] in recipes and (seeds is None or k[1] < seeds)]:
        t0, its = time.perf_counter(), {}
        model = load_model(run_dir(out, r, s) / "model.safetensors")
        img = encode_uint8_images(model, data.images, 256)
        m = compositional_metrics(model, img, [ch[-1] for ch in data.chains], data.negatives, "", 256, its)
        m.update(pep_metrics(model, img, data.chains, data.pool_negatives, "pep", "angle", 256, its))
        metrics[(r, s)], items[(r, s)] = m, {"test-iid": its}
        log(f"{r}/seed{s}: comp_acc {m['comp_acc']:.4f} pep_ap {m['pep_ap']:.4f} ({time.perf_counter() - t0:.0f} s)")
    return metrics, items


def table(runs, items, rows, n_test: int, n_boot: int) -> pd.DataFrame:
    "The variance table of the claim `rows` (every seed both arms have) from run rows and items."
    res = pd.DataFrame(results_rows(runs))
    led = evaluate_claims(res, rows)
    led["n"] = [res[(res.recipe == c.a) & (res.metric == c.metric)].seed.nunique() for c in rows]  # every seed
    return variance_components(led, res, items, {"test-iid": n_test}, n_boot=n_boot)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="a compare folder whose runs' weights are here")
    p.add_argument("--recipes", required=True)
    p.add_argument("--n-test", type=int, required=True)
    p.add_argument("--pep-pool", type=int, default=None, help="default: the budget's")
    p.add_argument("--metrics", default="pep_ap,pep_auc")
    p.add_argument("--seeds", type=int, default=None, help="only seeds 0 .. N-1 (default: every seed of the plan)")
    p.add_argument("--json", type=Path, required=True)
    a = p.parse_args(argv)
    plan = read_plan(a.out)
    recipes, metrics = a.recipes.split(","), a.metrics.split(",")
    rows = [c for c in CLAIMS if c.a in recipes and c.b in recipes and c.metric in metrics]
    if not rows:
        raise SystemExit(f"no claim row compares two of {recipes} on {metrics}")
    runs = [
        r for r in finished_runs(a.out, plan) if r["recipe"] in recipes and (a.seeds is None or r["seed"] < a.seeds)
    ]
    before_items = {
        (r["recipe"], r["seed"]): load_items(run_dir(a.out, r["recipe"], r["seed"]) / "items.npz") for r in runs
    }
    pool = a.pep_pool or plan.budget.pep_pool
    big, big_items = rescore(a.out, plan, recipes, a.n_test, pool, a.seeds)
    after_runs = [{**r, "metrics": big[(r["recipe"], r["seed"])]} for r in runs]
    n_boot = plan.budget.n_boot
    before = table(runs, before_items, rows, plan.budget.n_test, n_boot).assign(
        n_test=plan.budget.n_test, pep_pool=plan.budget.pep_pool
    )
    after = table(after_runs, big_items, rows, a.n_test, n_boot).assign(n_test=a.n_test, pep_pool=pool)
    both = pd.concat([before, after], ignore_index=True)
    cols = [
        "id",
        "a",
        "b",
        "metric",
        "n_test",
        "pep_pool",
        "n",
        "seed_var",
        "train",
        "eval_in_seed",
        "eval_share",
        "eval_shared",
        "half_width",
        "half_width_no_eval",
    ]
    with pd.option_context("display.width", 250, "display.max_columns", None):
        print(both[cols].round(5).to_string(index=False))
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(
        json.dumps(
            dict(
                source=str(a.out),
                budget=plan.budget.name,
                recipes=recipes,
                metrics=metrics,
                n_test=[plan.budget.n_test, a.n_test],
                pep_pool=[plan.budget.pep_pool, pool],
                runs=[
                    dict(
                        recipe=r["recipe"],
                        seed=r["seed"],
                        before={m: r["metrics"][m] for m in metrics},
                        after={m: big[(r["recipe"], r["seed"])][m] for m in metrics},
                    )
                    for r in runs
                ],
                variance=json.loads(both[cols].to_json(orient="records")),
            ),
            indent=1,
        )
    )
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
