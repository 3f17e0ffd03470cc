#!/usr/bin/env python3
"""Relations under CLIP's own loss: CLIP pre-trained on quick's schedule (2,000 steps at batch 64, 4,000 scenes) with
the changes that make its batches ask for relations — an image readout that keeps position (`world-tiny-flat`),
each scene beside its left-right mirror in the batch (`mirror_twins`), and the top (relational) caption drawn with
probability 0.3 or always (`top_caption_p`). The loss is CLIP's in every arm; each arm differs from plain CLIP in
the named settings only.

    .venv/bin/python tools/relation_pretrain.py --seeds 5 --only 0,2,4 &   # two processes on 2 cores
    .venv/bin/python tools/relation_pretrain.py --seeds 5 --only 1,3; wait; .venv/bin/python tools/relation_pretrain.py
    --seeds 5
    .venv/bin/python tools/relation_pretrain.py --preset smoke --seeds 2 --compare-dir /tmp/rp-smoke   # plumbing

Plain CLIP is the compare job's run (`--compare-dir`, default the main job's; missing seeds are trained there with
that preset, so they are the runs the ledger uses); the other arms train into `--out` with the same call and
settings. Each run is scored on the compare job's evaluation scenes (`compare.build_eval_data`), by
`evaluate.relation_sensitivity` and by `evaluate.position_readout`. Writes `relation-pretrain.json` (every run, the
paired effects) and prints per arm the mean and 95% seed half-width, the contrasts paired by seed with the smallest
effect the design detects, and on how many seeds each arm meets the world's learnability targets (report.
LEARNABILITY_TARGETS). A diagnostic, not a recipe: no claim uses it."""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from relation_lever import print_summary, read_score, summarise  # noqa: E402

# an arm = what it changes against plain CLIP (model preset, batch composition, caption draws)
ARMS = {
    "clip": {},
    "flat": {"preset": "world-tiny-flat"},
    "flat+twins+top30": {"preset": "world-tiny-flat", "mirror_twins": True, "top_caption_p": 0.3},
    # every sampled caption the relational top one: the batch asks for relations and little else (short prompts
    # such as "a circle" leave the training distribution, so zero-shot naming is expected to suffer)
    "twins+top100": {"mirror_twins": True, "top_caption_p": 1.0},
    "flat+twins+top100": {"preset": "world-tiny-flat", "mirror_twins": True, "top_caption_p": 1.0},
}
DEFAULT_ARMS = ",".join(ARMS)
CONTRASTS = (
    ("flat", "clip"),
    ("flat+twins+top30", "flat"),
    ("flat+twins+top100", "flat+twins+top30"),
    ("flat+twins+top100", "twins+top100"),
    ("flat+twins+top30", "clip"),
    ("flat+twins+top100", "clip"),
)
KEYS = (
    "comp_acc/replace_rel",
    "zs_acc/general",
    "zs_acc/test-iid",
    "i2t_R@5",
    "comp_acc",
    "tot_acc",
    "pep_auc",
    "text_inverted",
    "image_mirrored",
    "position_left_right",
)


def train_kwargs(arm: str, preset) -> dict:
    "The `train_recipe` keywords of an arm at a compare preset: the compare job's CLIP call, changed as the arm says."
    return {
        **dict(
            preset=preset.arch,
            steps=preset.pretrain_steps,
            n_train=preset.n_train,
            batch_size=preset.batch_size,
            mirror_twins=False,
            top_caption_p=0.0,
        ),
        **ARMS[arm],
    }


def train_call(kw: dict, cache_dir) -> dict:
    "`train_kwargs` spelled for `train_recipe`: the world's settings as a `WorldData`, the model preset as `arch`."
    from hierbench.data.sources import WorldData

    kw = dict(kw)
    data = WorldData(
        n_train=kw.pop("n_train"),
        cache_dir=cache_dir,
        mirror_twins=kw.pop("mirror_twins"),
        top_caption_p=kw.pop("top_caption_p"),
    )
    return dict(data=data, arch=kw.pop("preset"), **kw)


def score(model, eval_data) -> dict:
    from hierbench.ledger.compare import evaluate_run
    from hierbench.ledger.report import LEARNABILITY_TARGETS
    from hierbench.evaluation.world_eval import position_readout, relation_sensitivity

    m = evaluate_run(model, eval_data)
    rel, pos = relation_sensitivity(model), position_readout(model)
    wanted = set(KEYS) | {k for k, _ in LEARNABILITY_TARGETS}
    return {
        **{k: float(m[k]) for k in wanted if k in m},
        "text_inverted": rel["text_inverted"],
        "image_mirrored": rel["image_mirrored"],
        "position_left_right": pos["left_right"],
        "position_above_below": pos["above_below"],
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument(
        "--compare-dir", default=None, help="compare folder holding runs/clip/seedN (default: the main job's)"
    )
    ap.add_argument("--out", default=None, help="default: COMPARE_DIR/relation-pretrain")
    ap.add_argument(
        "--preset",
        default="standard",
        help="compare preset of the schedule, the CLIP seeds and the evaluation scenes (smoke: a plumbing check)",
    )
    ap.add_argument(
        "--arms", default=DEFAULT_ARMS, help=f"comma-separated arms among {', '.join(ARMS)} (default {DEFAULT_ARMS})"
    )
    ap.add_argument(
        "--only",
        default=None,
        help="comma-separated seeds to train and score now (parallel processes, "
        "one per core); the tables are printed once every seed is scored",
    )
    args = ap.parse_args(argv)
    unknown = set(args.arms.split(",")) - set(ARMS)
    if unknown:
        ap.error(f"--arms: unknown {sorted(unknown)} (arms: {', '.join(ARMS)})")
    arms = [a for a in ARMS if a in args.arms.split(",")]

    import pandas as pd
    from hierbench.ledger.budgets import BUDGETS as COMPARE_PRESETS
    from hierbench.ledger.compare import build_eval_data, main_job_dir, run_compare
    from hierbench.ledger.report import LEARNABILITY_TARGETS, learnability_table
    from hierbench.config import atomic_write_text, load_settings
    from hierbench.recipes.recipe_run import train_recipe
    from hierbench.models.family import load_model

    compare_dir = Path(args.compare_dir).expanduser() if args.compare_dir else main_job_dir()
    out = Path(args.out).expanduser() if args.out else compare_dir / "relation-pretrain"
    preset = COMPARE_PRESETS[args.preset]
    seeds = list(range(args.seeds))
    todo = [int(s) for s in args.only.split(",")] if args.only else seeds
    if "clip" in arms and not all(
        (compare_dir / "runs" / "clip" / f"seed{s}" / "model.safetensors").exists() for s in todo
    ):
        print(f"training the missing CLIP seeds in {compare_dir} (--preset {args.preset})", flush=True)
        run_compare(args.preset, seeds=max(todo) + 1, out=compare_dir, recipes=["clip"])
    eval_data, rows = None, []
    for seed in seeds:
        for arm in arms:
            run_dir = compare_dir / "runs" / "clip" / f"seed{seed}" if arm == "clip" else out / arm / f"seed{seed}"
            want = dict(compare_preset=args.preset, **train_kwargs(arm, preset))
            row = read_score(out / "scores" / f"{arm}-seed{seed}.json", want)
            if row is not None:
                rows.append(row)
                continue
            if seed not in todo:
                continue
            t0 = time.perf_counter()
            if arm != "clip":
                train_recipe(
                    "clip",
                    run_dir,
                    seed=seed,
                    resume=True,
                    quiet=True,
                    log_every=10,
                    **train_call(train_kwargs(arm, preset), load_settings().cache_dir),
                )
            if eval_data is None:
                eval_data = build_eval_data(preset)  # once, and only when something is scored
            row = dict(
                arm=arm,
                seed=seed,
                settings=want,
                train_seconds=time.perf_counter() - t0,
                **score(load_model(run_dir / "model.safetensors"), eval_data),
            )
            atomic_write_text(out / "scores" / f"{arm}-seed{seed}.json", json.dumps(row, indent=1))
            rows.append(row)
            print(
                f"seed {seed} {arm}: replace_rel {row['comp_acc/replace_rel']:.3f}, zs general "
                f"{row['zs_acc/general']:.3f}, "
                f"R@5 {row['i2t_R@5']:.3f}, position {row['position_left_right']:.3f} ({row['train_seconds']:.0f} s)",
                flush=True,
            )

    if len(rows) < len(seeds) * len(arms):
        print(f"{len(rows)} of {len(seeds) * len(arms)} runs scored: the tables wait for the rest")
        return
    summary = {"seeds": seeds, "preset": args.preset, **summarise(rows, seeds, arms, CONTRASTS, KEYS)}
    long = pd.DataFrame(
        [
            dict(recipe=r["arm"], seed=r["seed"], metric=k, value=r[k], chance=np.nan)
            for r in rows
            for k, _ in LEARNABILITY_TARGETS
            if k in r
        ]
    )
    summary["learnability"] = {arm: learnability_table(long, recipe=arm)["seeds met"].to_dict() for arm in arms}
    atomic_write_text(out / "relation-pretrain.json", json.dumps(dict(runs=rows, **summary), indent=1))
    print_summary(summary, KEYS)
    print("\nlearnability targets met (seeds met per target)")
    print("| target | " + " | ".join(arms) + " |")
    for metric in next(iter(summary["learnability"].values())):
        print(f"| {metric} | " + " | ".join(summary["learnability"][a][metric] for a in arms) + " |")
    print(f"\nwrote {out / 'relation-pretrain.json'}")


if __name__ == "__main__":
    sys.exit(main())
