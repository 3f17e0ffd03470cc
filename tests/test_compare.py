"""`hierbench compare`: the ledger's statistics, and the whole job end to end on the smoke preset."""
import json, math, subprocess, sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hierbench import compare as C


def test_paired_effect_matches_a_hand_computed_t_interval():
    a, b = np.array([0.61, 0.70, 0.66, 0.64]), np.array([0.50, 0.58, 0.60, 0.52])
    d = a - b
    eff, lo, hi, n = C.paired_effect(a, b)
    half = 3.182446305284263 * d.std(ddof=1) / 2  # t_{0.975, 3} · s / sqrt(4)
    assert n == 4 and math.isclose(eff, d.mean()) and math.isclose(hi - eff, half, rel_tol=1e-9)
    assert math.isclose(eff - lo, half, rel_tol=1e-9)


def test_single_seed_or_missing_values_are_inconclusive():
    eff, lo, hi, n = C.paired_effect(np.array([0.9]), np.array([0.1]))
    assert n == 1 and C.verdict(lo, hi, "higher") == "inconclusive"
    assert C.paired_effect(np.array([np.nan]), np.array([0.1]))[3] == 0


@pytest.mark.parametrize("lo,hi,direction,expected", [
    (0.01, 0.02, "higher", "supported"), (-0.02, -0.01, "higher", "contradicted"), (-0.01, 0.01, "higher", "inconclusive"),
    (-0.02, -0.01, "lower", "supported"), (0.01, 0.02, "lower", "contradicted"),
    (-0.01, 0.05, "no_worse", "supported"), (-0.09, -0.03, "no_worse", "contradicted"), (-0.05, 0.01, "no_worse", "inconclusive")])
def test_verdict_reads_the_interval_against_the_direction(lo, hi, direction, expected):
    assert C.verdict(lo, hi, direction, margin=0.02) == expected


def test_verdict_rejects_unknown_direction():
    with pytest.raises(ValueError, match="sideways"): C.verdict(0, 1, "sideways")


def test_ledger_pairs_by_seed_and_covers_every_claim():
    rows = []
    for seed, (x, y) in enumerate([(0.60, 0.50), (0.80, 0.71), (0.40, 0.29)]):  # big seed effect, steady +0.1 gap
        rows += [dict(recipe="degla", seed=seed, metric="comp_acc", value=x),
                 dict(recipe="clip", seed=seed, metric="comp_acc", value=y)]
    led = C.evaluate_claims(pd.DataFrame(rows))
    assert set(led.id) == {c.id for c in C.CLAIMS}
    row = led[(led.id == "DEG-1") & (led.a == "degla")].iloc[0]
    assert row.verdict == "supported" and row.n == 3 and math.isclose(row.effect, 0.1, abs_tol=1e-9)
    assert (led[led.a == "negclip"].verdict == "not run").all()


def test_plan_runs_adds_parents_first():
    assert C.plan_runs(["read", "argent+degla"]) == ["clip", "read", "argent", "argent+degla"]
    assert C.plan_runs(None) == list(C.ALL_RECIPES)


def test_smoke_compare_on_a_subset_writes_everything_and_restarts(tmp_path):
    out = tmp_path / "cmp"
    res = C.run_compare("smoke", seeds=2, out=out, recipes=["clip", "negclip"], log=lambda *_: None)
    for name in ("results.json", "claims.json", "report.html"): assert (out / name).exists()
    rows = pd.DataFrame(json.loads((out / "results.json").read_text())["rows"])
    assert set(rows.recipe) == {"clip", "negclip"} and set(rows.seed) == {0, 1}
    for metric in ("zs_acc/test-iid", "i2t_R@5", "comp_acc", "pep_auc", "tot_acc"):
        vals = rows[rows.metric == metric]
        assert len(vals) == 4 and vals.value.between(-1, 1).all(), metric
        assert vals.chance.notna().all(), f"{metric} has no chance level"
    claims = json.loads((out / "claims.json").read_text())["claims"]
    deg1 = [c for c in claims if c["id"] == "DEG-1" and c["a"] == "negclip"][0]
    assert deg1["n"] == 2 and deg1["verdict"] in ("supported", "contradicted", "inconclusive")
    report = (out / "report.html").read_text()
    assert "Claims ledger" in report and "DEG-1" in report and "chance" in report
    # a second call finds every run finished and recomputes the same table without training
    again = C.run_compare("smoke", seeds=2, out=out, recipes=["clip", "negclip"], log=lambda *_: None)
    pd.testing.assert_frame_equal(again["results"], res["results"])


def test_a_finished_run_of_another_preset_is_not_silently_reused(tmp_path):
    out = tmp_path / "cmp"
    C.run_compare("smoke", seeds=1, out=out, recipes=["clip"], jobs=1, log=lambda *_: None)
    other = C.dataclasses.replace(C.PRESETS["smoke"], name="smoke-longer", pretrain_steps=7)
    with pytest.raises(ValueError, match="another preset"):
        C.run_compare(other, seeds=1, out=out, recipes=["clip"], jobs=1, log=lambda *_: None)


def test_a_finished_run_of_an_older_architecture_is_not_silently_reused(tmp_path, monkeypatch):
    "Same preset name, but the model preset now means another architecture (e.g. after an upgrade): refuse."
    from hierbench import models as M
    out = tmp_path / "cmp"
    C.run_compare("smoke", seeds=1, out=out, recipes=["clip"], jobs=1, log=lambda *_: None)
    changed = {**M.PRESETS["world-debug"], "embed_dim": 24}
    monkeypatch.setitem(M.PRESETS, "world-debug", changed)
    with pytest.raises(ValueError, match="architecture"):
        C.run_compare("smoke", seeds=1, out=out, recipes=["clip"], jobs=1, log=lambda *_: None)


@pytest.mark.timeout(900)
def test_cli_compare_smoke_runs_every_recipe(tmp_path):
    "The main job end to end (all recipes, one seed) through the console script."
    out = tmp_path / "all"
    proc = subprocess.run([sys.executable, "-m", "hierbench.cli", "compare", "--preset", "smoke", "--seeds", "1",
                           "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "claims ledger" in proc.stdout
    rows = pd.DataFrame(json.loads((out / "results.json").read_text())["rows"])
    assert set(rows.recipe) == set(C.ALL_RECIPES)
    assert np.isfinite(rows.value).all()
