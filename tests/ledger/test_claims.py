"""`hierbench.ledger.claims`: the ledger pairs by seed, covers every claim, reads the evaluation bootstrap, and the
power table
compares half-widths with the targets."""

import math

import numpy as np
import pandas as pd

from hierbench.ledger import claims as CL
from hierbench.evaluation.world_eval import metric_from_items


def test_ledger_pairs_by_seed_and_covers_every_claim():
    rows = []
    for seed, (x, y) in enumerate(
        [(0.60, 0.50), (0.80, 0.71), (0.40, 0.29), (0.55, 0.45)]
    ):  # big seed effect, steady +0.1 gap
        rows += [
            dict(recipe="degla", seed=seed, metric="comp_acc", value=x),
            dict(recipe="clip", seed=seed, metric="comp_acc", value=y),
        ]
    led = CL.evaluate_claims(pd.DataFrame(rows))
    assert set(led.id) == {c.id for c in CL.CLAIMS}
    row = led[(led.id == "DEG-1") & (led.a == "degla")].iloc[0]
    assert row.verdict == "supported" and row.n == 4 and math.isclose(row.effect, 0.1, abs_tol=1e-9)
    assert row.rule == "skew-guarded t-interval 95%" and row.rules_agree and np.isfinite(row.skewness)
    # three seeds: the t-interval decides, the skew-guarded one cannot (a skewness from three values is no estimate)
    three = CL.evaluate_claims(pd.DataFrame(rows[:6]))
    row = three[(three.id == "DEG-1") & (three.a == "degla")].iloc[0]
    assert (row.verdict, row.t_verdict, row.rules_agree, row.n) == ("inconclusive", "supported", False, 3)
    assert (led[led.a == "negclip"].verdict == "not run").all()
    assert set(led.decided_by) <= {"standard", "full", "none"}


def _fake_items(rng, n_scenes=40, p=0.7):
    "Per-item records of a test-iid evaluation: 3 negatives per scene of two types, correct with probability p."
    g = np.repeat(np.arange(n_scenes), 3)
    t = np.tile(np.array(["swap_obj", "replace_att", "swap_obj"]), n_scenes)
    return {"test-iid": {"comp": dict(ok=rng.random(len(g)) < p, group=g, type=t)}}


def test_ledger_bootstrap_interval_covers_evaluation_noise_only():
    rng = np.random.default_rng(0)
    items, rows = {}, []
    for seed in range(4):
        for recipe, p in (("degla", 0.8), ("clip", 0.6)):
            its = _fake_items(rng, p=p)
            items[(recipe, seed)] = its
            rows.append(dict(recipe=recipe, seed=seed, metric="comp_acc", value=metric_from_items("comp_acc", its)))
    led = CL.evaluate_claims(pd.DataFrame(rows), items=items, n_boot=300)
    row = led[(led.id == "DEG-1") & (led.a == "degla") & (led.b == "clip")].iloc[0]
    assert row.boot_low < row.effect < row.boot_high and row.boot_half_width > 0
    assert np.isfinite(row.mde) and row.n == 4
    # the same items for every seed: no seed variance, but the bootstrap still sees the scenes' noise
    same = {(r, s): items[(r, 0)] for r, s in items}
    rows0 = [
        dict(r, value=[x for x in rows if x["recipe"] == r["recipe"] and x["seed"] == 0][0]["value"]) for r in rows
    ]
    led0 = CL.evaluate_claims(pd.DataFrame(rows0), items=same, n_boot=300)
    r0 = led0[(led0.id == "DEG-1") & (led0.a == "degla") & (led0.b == "clip")].iloc[0]
    assert r0.seed_half_width == 0 and r0.boot_half_width > 0.01


def test_power_table_compares_half_widths_with_targets():
    led = pd.DataFrame(
        [
            dict(metric="comp_acc", verdict="supported", seed_half_width=0.015, boot_half_width=0.01, mde=0.02),
            dict(metric="zs_acc/general", verdict="inconclusive", seed_half_width=0.05, boot_half_width=0.02, mde=0.06),
        ]
    )
    p = CL.power_table(led)
    assert p.loc["comp_acc", "met"] and not p.loc["zs_acc", "met"]
    assert p.loc["zs_acc", "target"] == 0.03
    led = pd.concat(
        [
            led,
            pd.DataFrame(
                [dict(metric="d_corr", verdict="inconclusive", seed_half_width=0.2, boot_half_width=0.01, mde=0.3)]
            ),
        ],
        ignore_index=True,
    )
    p = CL.power_table(led)
    assert p.loc["d_corr", "met"] is None  # no target: neither met nor missed
    assert np.isnan(p.loc["comp_acc", "seeds_needed"])  # a ledger without seed sds plans nothing
    led["seed_sd"] = [0.02, 0.05, np.nan]
    p = CL.power_table(led)
    # sd 0.02 reaches 0.02 at 7 seeds; sd 0.05 reaches 0.03 at 14 (13 seeds: 0.0302)
    assert p.loc["comp_acc", "seeds_needed"] == 7 and p.loc["zs_acc", "seeds_needed"] == 14


def test_the_committed_ledger_carries_issue_48s_diagnostics():
    """Every row run has its seed differences' skewness and normality and the plain t-rule's verdict beside the guarded
    one."""
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).resolve().parents[2] / "nbs/results/data/ledger-standard/claims.json").read_text())
    run = [r for r in doc["claims"] if r["verdict"] != "not run"]
    # 28 rows, and ARG-3/ARG-4 since they joined the plan
    assert len(run) == 32 and all(
        {"skewness", "shapiro_p", "t_verdict", "t_n", "rules_agree", "fragile"} <= set(r) for r in run
    )
    assert all(r["rule"].endswith("skew-guarded t-intervals)") for r in run)
    assert sum(abs(r["skewness"]) > 1 for r in run) == 12  # ARG-3/4: |skew| 0.49-0.92
    differ = [(r["id"], r["a"], r["metric"], r["t_verdict"], r["verdict"]) for r in run if not r["rules_agree"]]
    assert differ == [("ARG-1", "argent", "pep_auc", "contradicted", "inconclusive")]  # held only under the t-rule
