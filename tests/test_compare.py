"""`hierbench compare`: the ledger's statistics, and the whole job end to end on the smoke preset."""
import json, math, os, subprocess, sys
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
    # plotly.js is shared beside the report, not embedded: the report stays small
    assert (out / "plotly.min.js").stat().st_size > 1_000_000 and 'src="plotly.min.js"' in report
    assert len(report) < 1_500_000
    # every figure also as a PNG (kaleido + local Chromium), or the report says why there are none
    pngs = sorted((out / "figures").glob("*.png")) if (out / "figures").exists() else []
    if pngs: assert {"forest.png", "papers.png"} <= {f.name for f in pngs} and f"{len(pngs)} figures are also saved" in report
    else: assert "No static copies of the figures" in report
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


def test_a_finished_run_of_another_recipe_definition_or_world_is_not_silently_reused(tmp_path, monkeypatch):
    "Same preset and architecture, but the recipe's fields or the world's config changed since the run: refuse, naming them."
    from hierbench import recipes as R, world as W
    out = tmp_path / "cmp"
    C.run_compare("smoke", seeds=1, out=out, recipes=["clip"], jobs=1, log=lambda *_: None)
    assert json.loads((out / "runs" / "clip" / "seed0" / "eval.json").read_text())["run_fingerprint"] == C.run_fingerprint(R.get_recipe("clip"))
    changed = C.dataclasses.replace(R.get_recipe("clip"), weights={**R.get_recipe("clip").weights, "contrastive": 0.5})
    monkeypatch.setattr(R, "get_recipe", lambda name, _orig=R.get_recipe: changed if name == "clip" else _orig(name))
    with pytest.raises(ValueError, match="recipe.weights.contrastive"):
        C.run_compare("smoke", seeds=1, out=out, recipes=["clip"], jobs=1, log=lambda *_: None)
    monkeypatch.undo()
    monkeypatch.setattr(W, "WORLD_VERSION", W.WORLD_VERSION + 1)
    with pytest.raises(ValueError, match="world.config_hash"):
        C.run_compare("smoke", seeds=1, out=out, recipes=["clip"], jobs=1, log=lambda *_: None)


@pytest.mark.timeout(900)
def test_cli_compare_smoke_runs_every_recipe(tmp_path):
    "The main job end to end (all recipes, one seed) through the console script."
    out = tmp_path / "compare"   # no --out: the main job's folder, RUNS_DIR/compare (settings.ini / environment)
    proc = subprocess.run([sys.executable, "-m", "hierbench.cli", "compare", "--preset", "smoke", "--seeds", "1"],
                          capture_output=True, text=True, timeout=900, env={**os.environ, "HIERBENCH_RUNS_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "claims ledger" in proc.stdout
    rows = pd.DataFrame(json.loads((out / "results.json").read_text())["rows"])
    assert set(rows.recipe) == set(C.ALL_RECIPES)
    assert np.isfinite(rows.value).all()


def test_static_figures_are_written_whole_or_skipped_with_the_reason(tmp_path, monkeypatch):
    import plotly.graph_objects as go, plotly.io as pio
    figs = {"a b/c": go.Figure(go.Bar(y=[1, 2]))}
    def broken(figs, files, **kwargs):   # a browser that dies after starting the first file
        Path(files[0]).write_bytes(b"partial")
        raise RuntimeError("no Chrome found\nsecond line")
    monkeypatch.setattr(pio, "write_images", broken)
    res = C.save_static_figures(figs, tmp_path / "figs")
    assert res == {"written": [], "skipped": "RuntimeError: no Chrome found"}
    assert not list((tmp_path / "figs").glob("*"))   # nothing half-written
    assert C.save_static_figures({}, tmp_path / "none") == {"written": [], "skipped": None}


def test_min_detectable_effect_matches_the_power_formula():
    # (t_.975,4 + t_.8,4) · sd / sqrt(5)
    assert math.isclose(C.min_detectable_effect(0.02, 5), (2.7764451 + 0.9409646) * 0.02 / math.sqrt(5), rel_tol=1e-6)
    assert C.min_detectable_effect(0.02, 10) < C.min_detectable_effect(0.02, 5)
    assert C.min_detectable_effect(0.02, 1) == math.inf


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
            from hierbench.evaluate import metric_from_items
            rows.append(dict(recipe=recipe, seed=seed, metric="comp_acc", value=metric_from_items("comp_acc", its)))
    led = C.evaluate_claims(pd.DataFrame(rows), items=items, n_boot=300)
    row = led[(led.id == "DEG-1") & (led.a == "degla") & (led.b == "clip")].iloc[0]
    assert row.boot_low < row.effect < row.boot_high and row.boot_half_width > 0
    assert np.isfinite(row.mde) and row.n == 4
    # the same items for every seed: no seed variance, but the bootstrap still sees the scenes' noise
    same = {(r, s): items[(r, 0)] for r, s in items}
    rows0 = [dict(r, value=[x for x in rows if x["recipe"] == r["recipe"] and x["seed"] == 0][0]["value"]) for r in rows]
    led0 = C.evaluate_claims(pd.DataFrame(rows0), items=same, n_boot=300)
    r0 = led0[(led0.id == "DEG-1") & (led0.a == "degla") & (led0.b == "clip")].iloc[0]
    assert r0.seed_half_width == 0 and r0.boot_half_width > 0.01


def test_power_table_compares_half_widths_with_targets():
    led = pd.DataFrame([dict(metric="comp_acc", verdict="supported", seed_half_width=0.015, boot_half_width=0.01, mde=0.02),
                        dict(metric="zs_acc/general", verdict="inconclusive", seed_half_width=0.05, boot_half_width=0.02, mde=0.06)])
    p = C.power_table(led)
    assert p.loc["comp_acc", "met"] and not p.loc["zs_acc", "met"]
    assert p.loc["zs_acc", "target"] == 0.03
    led = pd.concat([led, pd.DataFrame([dict(metric="d_corr", verdict="inconclusive", seed_half_width=0.2,
                                             boot_half_width=0.01, mde=0.3)])], ignore_index=True)
    p = C.power_table(led)
    assert p.loc["d_corr", "met"] is None   # no target: neither met nor missed
    assert np.isnan(p.loc["comp_acc", "seeds_needed"])   # a ledger without seed sds plans nothing
    led["seed_sd"] = [0.02, 0.05, np.nan]
    p = C.power_table(led)
    # sd 0.02 reaches 0.02 at 7 seeds; sd 0.05 reaches 0.03 at 14 (13 seeds: 0.0302)
    assert p.loc["comp_acc", "seeds_needed"] == 7 and p.loc["zs_acc", "seeds_needed"] == 14


def test_a_forged_eval_json_is_not_trusted(tmp_path):
    "A reused run's eval.json must belong to the weights beside it: a mismatched hash re-evaluates from the weights."
    out = tmp_path / "cmp"
    C.run_compare("smoke", seeds=1, out=out, recipes=["clip"], jobs=1, log=lambda *_: None)
    path = out / "runs" / "clip" / "seed0" / "eval.json"
    row = json.loads(path.read_text())
    true_zs = row["metrics"]["zs_acc/general"]
    row["metrics"]["zs_acc/general"], row["weights_sha256"] = 0.99, "0" * 64
    path.write_text(json.dumps(row))
    again = C.run_compare("smoke", seeds=1, out=out, recipes=["clip"], jobs=1, log=lambda *_: None)
    got = again["results"].query("metric == 'zs_acc/general'").value.iloc[0]
    assert got == true_zs != 0.99


def test_fine_tunes_report_their_stage_and_pretrains_their_angles(tmp_path):
    res = C.run_compare("smoke", seeds=1, out=tmp_path / "c", recipes=["hycoclip", "negclip"], jobs=1, log=lambda *_: None)
    ft = [r for r in res["runs"] if r["recipe"] == "negclip"][0]
    assert set(ft["stage"]) >= {"start", "end", "plateau", "budget"} and "contrastive" in ft["stage"]["start"]
    hy = [r for r in res["runs"] if r["recipe"] == "hycoclip"][0]
    assert len(hy["pep_analysis"]) == 3          # two snapshots and the final model
    table = C.pep_analysis_table(res["runs"])
    assert {"l1_wide", "neg_wide", "pep_auc", "angle_auc"} <= set(table.columns)
    assert len(C.pep_diagnosis(table)) == len(table.index.get_level_values(0).unique())  # one line per recipe
    html = (tmp_path / "c" / "report.html").read_text()
    for section in ("Power of this design", "Fine-tuning stages", "The angles behind PEP"): assert section in html


def test_learnability_table_needs_every_seed():
    rows = [dict(recipe="clip", seed=s, metric="zs_acc/general", value=v, chance=1 / 9) for s, v in enumerate((0.7, 0.59, 0.8))]
    rows += [dict(recipe="negclip", seed=0, metric="comp_acc/replace_rel", value=0.99, chance=0.5),
             dict(recipe="negclip", seed=0, metric="comp_acc/add_obj", value=0.999, chance=0.5)]
    t = C.learnability_table(pd.DataFrame(rows))
    assert t.loc["zs_acc/general", "met"] is False and t.loc["zs_acc/general", "seeds met"] == "2/3"
    assert t.loc["zs_acc/general", "min"] == pytest.approx(0.59)
    assert t.loc["comp_acc/replace_rel", "met"] is None      # clip has no value: not checked, not passed
    sat = C.saturation_table(pd.DataFrame(rows))
    # replace_rel 0.99 breaks the limit; add_obj may saturate and is not among the compared types
    assert not sat.loc["negclip", "within limit"] and sat.loc["negclip", "highest type"] == "replace_rel"
    assert C.saturation_table(pd.DataFrame(rows[:3])).empty
