#!/usr/bin/env python3
"""Does a LoRA DeGLA fine-tune keep DeGLA's compositional gain? On the world, per seed: the CLIP pre-training of a
`hierbench compare` budget, DeGLA fine-tuned from it in full (the compare job's own run) and with LoRA adapters
(`train_recipe(lora=...)`, every other setting equal — the runs' config.json files differ in `lora` only, which the
tool checks), both evaluated with the compare job's protocol.

    .venv/bin/python tools/lora_vs_full.py --budget quick --seeds 5 --out runs/lora-vs-full [--rank 8] [--lr-scale 10]

`--lr-scale` gives the LoRA arm the recipe's learning rate times that factor (LoRA usually takes a larger one): the
pair then differs in LoRA and the learning rate, which the check allows and records.

Runs already in OUT are reused (CLIP and full DeGLA as `hierbench compare` reuses them: a compare folder of the same
budget can be OUT). Writes OUT/lora_vs_full.json (per seed and arm: metrics, training seconds, trainable weights) and
prints markdown tables: per metric, each arm's mean over seeds with its 95% t-interval; the gains over CLIP of both
arms; and the paired difference LoRA − full (the CLIP run cancels) with its interval and the smallest difference the
seeds could detect (80% power); the share of the full change LoRA makes where the full change's interval excludes
zero."""

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

METRICS = (
    "comp_acc",
    "comp_acc/replace_rel",
    "comp_acc/swap_att",
    "zs_acc/test-iid",
    "zs_acc/general",
    "i2t_R@5",
    "tot_acc",
)
ARMS = ("clip", "degla", "degla-lora")


def arm_name(rank: int, lr_scale: float = 1.0) -> str:
    return f"degla-lora{rank}" + (f"-lr{lr_scale:g}x" if lr_scale != 1 else "")


def lora_folder(out: Path, rank: int, seed: int, lr_scale: float = 1.0) -> Path:
    return Path(out) / "runs" / arm_name(rank, lr_scale) / f"seed{seed}"


def lora_run(seed: int, budget, out: Path, eval_data: dict, rank: int, lr_scale: float = 1.0) -> dict:
    """DeGLA with LoRA adapters of `rank` from the CLIP run of `seed`, exactly as `hierbench.ledger.compare`
    fine-tunes it
    otherwise (the learning rate times `lr_scale`)."""
    from hierbench.ledger import compare as C
    from hierbench.config import atomic_write_text
    from hierbench.recipes.recipe_run import Validation, train_recipe
    from hierbench.models.lora import LoraSpec, lora_parameter_count
    from hierbench.models.family import load_model
    from hierbench.recipes.registry import get_recipe
    from hierbench.data.sources import WorldData

    folder = lora_folder(out, rank, seed, lr_scale)
    lr = {} if lr_scale == 1 else {"lr": get_recipe("degla").world.lr * lr_scale}
    if (folder / "eval.json").is_file():
        row = json.loads((folder / "eval.json").read_text())
        if row.get("run_key") == budget.run_key():
            return row
        raise SystemExit(f"{folder} holds a run of another budget: use another --out")
    t0 = time.perf_counter()
    res = train_recipe(
        "degla",
        folder,
        WorldData(n_train=budget.n_train),
        arch=budget.arch,
        steps=budget.finetune_steps,
        seed=seed,
        init_checkpoint=C.run_dir(out, "clip", seed),
        batch_size=budget.finetune_batch_size,
        resume=True,
        quiet=True,
        precision=budget.precision,
        validation=Validation(every=budget.validate_every),
        log_every=math.gcd(10, budget.validate_every),
        lora=LoraSpec(rank),
        **lr,
    )  # as compare._train_run
    train_s = time.perf_counter() - t0
    model = load_model(res.weights_path)
    trainable, total = lora_parameter_count(model)
    row = dict(
        recipe="degla-lora",
        seed=seed,
        run_key=budget.run_key(),
        rank=rank,
        lr_scale=lr_scale,
        train_seconds=train_s,
        trainable=trainable,
        total=total,
        metrics=C.evaluate_run(model, eval_data),
    )
    atomic_write_text(folder / "eval.json", json.dumps(C.json_safe(row), indent=1))
    return row


def check_fair(out: Path, rank: int, seed: int, lr_scale: float = 1.0) -> None:
    """The full and the LoRA fine-tune of `seed` were set up alike but for LoRA (and the learning rate times `lr_scale`,
    when asked), by their config.json files; else exit naming what differs."""
    from hierbench.ledger import compare as C

    full = json.loads((C.run_dir(out, "degla", seed) / "config.json").read_text())
    lora = json.loads((lora_folder(out, rank, seed, lr_scale) / "config.json").read_text())
    # run_dir: where it trained; seed_group: which seeds shared compare's process (the runs are bit for bit the same)
    allowed = ("run_dir", "seed_group", "lora") + (
        ("lr",) if lr_scale != 1 and math.isclose(lora["lr"], full["lr"] * lr_scale) else ()
    )
    differ = sorted(k for k in set(full) | set(lora) if full.get(k) != lora.get(k) and k not in allowed)
    if differ:
        raise SystemExit(
            f"seed {seed}: the full and the LoRA DeGLA runs differ in {', '.join(differ)}, not only in LoRA"
        )
    if "lora" not in lora or "lora" in full:
        raise SystemExit(f"seed {seed}: the LoRA run has no adapters recorded")


def run(budget, seeds: int, out: Path, rank: int, log=print, lr_scale: float = 1.0) -> pd.DataFrame:
    """Train (or reuse) every run of `budget` (a name or a `Budget`), check the pairs, write OUT/lora_vs_full.json;
    long rows (arm, seed, metric, value)."""
    from hierbench.ledger import compare as C
    from hierbench.ledger.budgets import BUDGETS
    from hierbench.config import atomic_write_text

    budget = BUDGETS[budget] if isinstance(budget, str) else budget
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    C._prepare_world(budget)
    eval_data = C._EVAL_CACHE[budget]
    rows, runs = [], []
    for seed in range(seeds):
        t0 = time.perf_counter()
        got = {name: C.run_recipe(name, seed, budget, out, eval_data) for name in ("clip", "degla")}
        got["degla-lora"] = lora_run(seed, budget, out, eval_data, rank, lr_scale)
        check_fair(out, rank, seed, lr_scale)
        for arm, r in got.items():
            runs.append(
                dict(
                    arm=arm,
                    seed=seed,
                    train_seconds=r.get("train_seconds"),
                    metrics=r["metrics"],
                    **({"trainable": r["trainable"], "total": r["total"]} if arm == "degla-lora" else {}),
                )
            )
            rows += [dict(arm=arm, seed=seed, metric=m, value=r["metrics"].get(m)) for m in METRICS]
        g = lambda a: got[a]["metrics"].get("comp_acc", float("nan"))
        log(
            f"seed {seed}: comp_acc clip {g('clip'):.3f}, degla {g('degla'):.3f}, {arm_name(rank, lr_scale)} "
            f"{g('degla-lora'):.3f} "
            f"({time.perf_counter() - t0:.0f} s)"
        )
    name = "lora_vs_full" + (f"-lr{lr_scale:g}x" if lr_scale != 1 else "") + ".json"
    atomic_write_text(
        out / name,
        json.dumps(
            C.json_safe(dict(budget=budget.name, seeds=seeds, rank=rank, lr_scale=lr_scale, runs=runs)), indent=1
        ),
    )
    return pd.DataFrame(rows).dropna()


def tables(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per metric and arm: mean and t-interval over seeds; per metric: gains over CLIP and the paired LoRA − full
    difference)."""
    from hierbench.stats import mean_interval, min_detectable_effect

    wide = rows.pivot_table(index=["metric", "seed"], columns="arm", values="value")
    arms, gains = [], []
    for metric, w in wide.groupby(level="metric"):
        for arm in ARMS:
            if arm in w:
                m, lo, hi, n = mean_interval(w[arm].to_numpy())
                arms.append(dict(metric=metric, arm=arm, mean=m, low=lo, high=hi, n=n))
        if not {"clip", "degla", "degla-lora"} <= set(w.columns):
            continue
        full_gain, lora_gain = (w["degla"] - w["clip"]).to_numpy(), (w["degla-lora"] - w["clip"]).to_numpy()
        diff = lora_gain - full_gain
        (gf, gfl, gfh, n), (gl, gll, glh, _), (d, dl, dh, _) = (
            mean_interval(full_gain),
            mean_interval(lora_gain),
            mean_interval(diff),
        )
        sd = float(np.std(diff, ddof=1)) if n > 1 else float("nan")
        gains.append(
            dict(
                metric=metric,
                seeds=n,
                full_gain=gf,
                full_low=gfl,
                full_high=gfh,
                lora_gain=gl,
                lora_low=gll,
                lora_high=glh,
                lora_minus_full=d,
                diff_low=dl,
                diff_high=dh,
                mde=min_detectable_effect(sd, n) if n > 1 else float("nan"),
                # a share of the full gain only where there is one (its interval excludes zero)
                kept=gl / gf if np.isfinite(gfl) and (gfl > 0 or gfh < 0) else float("nan"),
            )
        )
    return pd.DataFrame(arms), pd.DataFrame(gains)


def _f(x, nd=3) -> str:
    return "—" if x is None or not np.isfinite(x) else f"{x:+.{nd}f}"


def markdown(arms: pd.DataFrame, gains: pd.DataFrame) -> str:
    lines = ["| metric | arm | mean | 95% interval | seeds |", "|---|---|---|---|---|"]
    lines += [
        f"| {r.metric} | {r.arm} | {r.mean:.3f} | [{r.low:.3f}, {r.high:.3f}] | {r.n} |" for r in arms.itertuples()
    ]
    lines += [
        "",
        "| metric | full DeGLA − CLIP | LoRA DeGLA − CLIP | LoRA − full | 95% interval | smallest detectable | share "
        "of the full change |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.metric} | {_f(r.full_gain)} [{_f(r.full_low)}, {_f(r.full_high)}] | {_f(r.lora_gain)} "
        f"[{_f(r.lora_low)}, "
        f"{_f(r.lora_high)}] | {_f(r.lora_minus_full)} | [{_f(r.diff_low)}, {_f(r.diff_high)}] | "
        f"{abs(r.mde):.3f} | {f'{100 * r.kept:.0f} %' if np.isfinite(r.kept) else '—'} |"
        for r in gains.itertuples()
    ]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", default="quick", help="a hierbench compare budget (smoke, quick, standard, full)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument(
        "--out", type=Path, required=True, help="folder of the runs (a compare folder of the same budget works)"
    )
    ap.add_argument("--rank", type=int, default=8, help="LoRA rank (alpha 2 x rank, the default targets)")
    ap.add_argument("--lr-scale", type=float, default=1.0, help="the LoRA arm's learning rate: the recipe's times this")
    args = ap.parse_args(argv)
    rows = run(args.budget, args.seeds, args.out, args.rank, lr_scale=args.lr_scale)
    arms, gains = tables(rows)
    print(markdown(arms, gains))
    return 0


if __name__ == "__main__":
    sys.exit(main())
