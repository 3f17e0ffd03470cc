#!/usr/bin/env python3
"""Replicate the relation lever over seeds: DeGLA's loss with relation replacements as its only hard negatives, at
DeGLA's term weights (IGC = TGC = 0.1, the control), with one local term at 1.0 (igc, tgc) and with both (the
lever), each fine-tuned from the same CLIP seed for the same steps on the same scenes. The arms differ in those two
weights only.

    .venv/bin/python tools/relation_lever.py --seeds 5 --only 0,2,4 &   # two processes on 2 cores: ≈ 37 min
    .venv/bin/python tools/relation_lever.py --seeds 5 --only 1,3; wait; .venv/bin/python tools/relation_lever.py
    --seeds 5
    .venv/bin/python tools/relation_lever.py --preset smoke --seeds 2 --steps 4 --n-train 256 --compare-dir
    /tmp/lever-smoke  # plumbing

CLIP seeds come from a `hierbench compare --preset standard` folder (`--compare-dir`, default the main job's); the
missing ones are trained there with that preset, so they are the runs the ledger uses. Every fine-tune is scored on
the compare job's evaluation scenes (`compare.build_eval_data`) and by `evaluate.relation_sensitivity`. Finished runs
are reused (an interrupted job resumes from its checkpoints); a score made with other run settings is refused, not
reused. Writes `lever.json` (every run's numbers, the paired effects) and prints a table: per arm the mean and 95%
seed half-width, then the `CONTRASTS` paired by seed with the minimum detectable effect at that seed count, and the
interaction. A diagnostic, not a recipe: no claim uses it."""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

METRICS = ("comp_acc/replace_rel", "zs_acc/general", "zs_acc/test-iid", "i2t_R@5", "comp_acc", "tot_acc", "pep_auc")
# a 2 x 2 over the two local terms' weights (DeGLA's 0.1 or 1.0); every other field of the recipe is the same
ARMS = {"control": {}, "igc": {"igc": 1.0}, "tgc": {"tgc": 1.0}, "lever": {"igc": 1.0, "tgc": 1.0}}
CONTRASTS = (
    ("lever", "control"),
    ("igc", "control"),
    ("tgc", "control"),
    ("lever", "igc"),
    ("lever", "tgc"),
    ("control", "clip"),
    ("lever", "clip"),
)


def lever_recipe(weights: dict):
    "DeGLA drawing only relation replacements, with `weights` changed (the arms differ in nothing else)."
    from hierbench.recipes.registry import get_recipe

    r = get_recipe("degla").replace(negative_types=("replace_rel",))
    return r.replace(weights=weights) if weights else r


def score(model, eval_data) -> dict:
    from hierbench.ledger.compare import evaluate_run
    from hierbench.evaluation.world_eval import relation_sensitivity

    m = evaluate_run(model, eval_data)
    rel = relation_sensitivity(model)
    return {
        **{k: float(m[k]) for k in METRICS if k in m},
        "text_inverted": rel["text_inverted"],
        "image_mirrored": rel["image_mirrored"],
    }


def read_score(done: Path, want: dict) -> dict | None:
    "The row scored into `done`, None when there is none; a row scored with other `settings` than `want` is refused."
    if not done.exists():
        return None
    row = json.loads(done.read_text())
    if {k: row.get("settings", {}).get(k) for k in want} != want:
        sys.exit(f"{done} was scored with {row.get('settings')}, not {want}: use another --out")
    return row


def summarise(rows: list, seeds: list, arms, contrasts, keys) -> dict:
    """Per arm and metric the mean, 95% seed half-width, min and max; per contrast (a, b) between arms that ran the
    paired effect a − b with its interval and the minimum detectable effect at that seed count."""
    from hierbench.stats import mean_interval, min_detectable_effect, paired_effect

    by = {arm: {r["seed"]: r for r in rows if r["arm"] == arm} for arm in arms}
    out = {"arms": {}, "effects": {}}
    for arm, rs in by.items():
        out["arms"][arm] = {}
        for k in keys:
            v = np.array([rs[s][k] for s in seeds])
            mean, _, high, _ = mean_interval(v)  # the ledger's t-interval (hierbench.stats)
            out["arms"][arm][k] = dict(mean=mean, half_width=high - mean, min=float(v.min()), max=float(v.max()))
    for a, b in (c for c in contrasts if set(c) <= set(by)):
        out["effects"][f"{a} - {b}"] = {}
        for k in keys:
            x = np.array([by[a][s][k] for s in seeds])
            y = np.array([by[b][s][k] for s in seeds])
            eff, lo, hi, n = paired_effect(x, y)
            mde = min_detectable_effect(float(np.std(x - y, ddof=1)) if n > 1 else float("nan"), n)
            out["effects"][f"{a} - {b}"][k] = dict(effect=eff, low=lo, high=hi, n=n, mde=mde)
    return out


def print_summary(summary: dict, keys) -> None:
    "The two markdown tables of `summarise`: per arm mean ± half-width [min, max], then the paired contrasts."
    print(f"\n{len(summary['seeds'])} seeds; mean ± 95% half-width [min, max]")
    print("| metric | " + " | ".join(summary["arms"]) + " |")
    for k in keys:
        cells = [
            f"{d['mean']:.3f} ± {d['half_width']:.3f} [{d['min']:.3f}, {d['max']:.3f}]"
            for d in (summary["arms"][arm][k] for arm in summary["arms"])
        ]
        print(f"| {k} | " + " | ".join(cells) + " |")
    print("\npaired by seed: effect [95% interval] (minimum detectable effect)")
    print("| contrast | " + " | ".join(keys) + " |")
    for name, eff in summary["effects"].items():
        print(
            f"| {name} | "
            + " | ".join(
                f"{e['effect']:+.3f} [{e['low']:+.3f}, {e['high']:+.3f}] ({e['mde']:.3f})" for e in eff.values()
            )
            + " |"
        )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument(
        "--compare-dir", default=None, help="compare folder holding runs/clip/seedN (default: the main job's)"
    )
    ap.add_argument("--out", default=None, help="default: COMPARE_DIR/relation-lever")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--n-train", type=int, default=40000)
    ap.add_argument(
        "--preset",
        default="standard",
        help="compare preset of the CLIP seeds and the evaluation scenes (smoke: a plumbing check)",
    )
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated arms (default all: {','.join(ARMS)})")
    ap.add_argument(
        "--only",
        default=None,
        help="comma-separated seeds to train and score now (parallel processes, "
        "one per core); the table is printed once every seed is scored",
    )
    args = ap.parse_args(argv)
    arms = {a: ARMS[a] for a in ARMS if a in args.arms.split(",")}
    unknown = set(args.arms.split(",")) - set(ARMS)
    if unknown:
        ap.error(f"--arms: unknown {sorted(unknown)} (arms: {', '.join(ARMS)})")

    from hierbench.ledger.budgets import BUDGETS as COMPARE_PRESETS
    from hierbench.ledger.compare import build_eval_data, main_job_dir, run_compare
    from hierbench.stats import paired_effect
    from hierbench.config import atomic_write_text, load_settings
    from hierbench.recipes.recipe_run import train_recipe
    from hierbench.data.sources import WorldData
    from hierbench.models.family import load_model

    compare_dir = Path(args.compare_dir).expanduser() if args.compare_dir else main_job_dir()
    out = Path(args.out).expanduser() if args.out else compare_dir / "relation-lever"
    preset = COMPARE_PRESETS[args.preset]
    seeds = list(range(args.seeds))
    if not all((compare_dir / "runs" / "clip" / f"seed{s}" / "model.safetensors").exists() for s in seeds):
        print(f"training the missing CLIP seeds in {compare_dir} (--preset {args.preset})", flush=True)
        run_compare(args.preset, seeds=args.seeds, out=compare_dir, recipes=["clip"])
    eval_data = build_eval_data(preset)
    rows = []
    # what a score depends on besides its arm and seed: a score file made with other settings must not stand in
    run_settings = dict(preset=args.preset, steps=args.steps, batch_size=args.batch_size, n_train=args.n_train)
    todo = [int(s) for s in args.only.split(",")] if args.only else seeds
    for seed in seeds:
        clip_dir = compare_dir / "runs" / "clip" / f"seed{seed}"
        jobs = [("clip", None)] + [(arm, w) for arm, w in arms.items()]
        for arm, weights in jobs:
            run_dir = clip_dir if arm == "clip" else out / arm / f"seed{seed}"
            done = out / "scores" / f"{arm}-seed{seed}.json"
            want = dict(preset=args.preset) if arm == "clip" else run_settings
            row = read_score(done, want)
            if row is not None:
                rows.append(row)
                continue
            if seed not in todo:
                continue
            t0 = time.perf_counter()
            if arm != "clip":
                train_recipe(
                    lever_recipe(weights),
                    run_dir,
                    WorldData(n_train=args.n_train, cache_dir=load_settings().cache_dir),
                    arch=preset.arch,
                    steps=args.steps,
                    seed=seed,
                    init_checkpoint=clip_dir,
                    batch_size=args.batch_size,
                    resume=True,
                    quiet=True,
                )
            row = dict(
                arm=arm,
                seed=seed,
                settings=want,
                train_seconds=time.perf_counter() - t0,
                **score(load_model(run_dir / "model.safetensors"), eval_data),
            )
            atomic_write_text(done, json.dumps(row, indent=1))
            rows.append(row)
            print(
                f"seed {seed} {arm}: replace_rel {row['comp_acc/replace_rel']:.3f}, zs general "
                f"{row['zs_acc/general']:.3f}, text cosine {row['text_inverted']:.4f} ({row['train_seconds']:.0f} s)",
                flush=True,
            )

    rows = [r for r in rows if r["arm"] == "clip" or r["arm"] in arms]
    if len(rows) < len(seeds) * (1 + len(arms)):
        print(f"{len(rows)} of {len(seeds) * (1 + len(arms))} runs scored: the table waits for the rest")
        return
    keys = METRICS + ("text_inverted", "image_mirrored")
    summary = {
        "seeds": seeds,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "n_train": args.n_train,
        **summarise(rows, seeds, ("clip", *arms), CONTRASTS, keys),
    }
    by = {arm: {r["seed"]: r for r in rows if r["arm"] == arm} for arm in ("clip", *arms)}
    # interaction: does the second term add more when the first is on? (lever - tgc) - (igc - control), paired by seed
    if len(arms) == len(ARMS):
        x = {arm: np.array([by[arm][s]["comp_acc/replace_rel"] for s in seeds]) for arm in ARMS}
        eff, lo, hi, n = paired_effect(x["lever"] - x["tgc"], x["igc"] - x["control"])
        summary["interaction_replace_rel"] = dict(effect=eff, low=lo, high=hi, n=n)
    atomic_write_text(out / "lever.json", json.dumps(dict(runs=rows, **summary), indent=1))

    print_summary(summary, keys)
    i = summary.get("interaction_replace_rel")
    if i:
        print(
            f"interaction on replace_rel, (lever - tgc) - (igc - control): {i['effect']:+.3f} [{i['low']:+.3f}, "
            f"{i['high']:+.3f}]"
        )
    print(f"\nwrote {out / 'lever.json'}")


if __name__ == "__main__":
    sys.exit(main())
