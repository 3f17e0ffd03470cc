"""`hierbench.ledger.report`: static figures are whole or absent, the PEP and learnability tables, the report's
sections."""

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hierbench.ledger import report as RP
from hierbench.ledger.budgets import BUDGETS
from hierbench.ledger.claims import evaluate_claims


def test_static_figures_are_written_whole_or_skipped_with_the_reason(tmp_path, monkeypatch):
    import plotly.graph_objects as go
    import plotly.io as pio

    figs = {"a b/c": go.Figure(go.Bar(y=[1, 2]))}

    def broken(figs, files, **kwargs):  # a browser that dies after starting the first file
        Path(files[0]).write_bytes(b"partial")
        raise RuntimeError("\nno Chrome found\nsecond line")  # plotly's messages start with a newline

    monkeypatch.setattr(pio, "write_images", broken)
    res = RP.save_static_figures(figs, tmp_path / "figs")
    assert res == {"written": [], "skipped": "RuntimeError: no Chrome found second line"}  # one line, all of it
    assert not list((tmp_path / "figs").glob("*"))  # nothing half-written
    assert RP.save_static_figures({}, tmp_path / "none") == {"written": [], "skipped": None}


def test_learnability_table_needs_every_seed():
    rows = [
        dict(recipe="clip", seed=s, metric="zs_acc/general", value=v, chance=1 / 9)
        for s, v in enumerate((0.7, 0.59, 0.8))
    ]
    rows += [
        dict(recipe="negclip", seed=0, metric="comp_acc/replace_rel", value=0.99, chance=0.5),
        dict(recipe="negclip", seed=0, metric="comp_acc/add_obj", value=0.999, chance=0.5),
    ]
    t = RP.learnability_table(pd.DataFrame(rows))
    assert t.loc["zs_acc/general", "met"] is False and t.loc["zs_acc/general", "seeds met"] == "2/3"
    assert t.loc["zs_acc/general", "min"] == pytest.approx(0.59)
    assert t.loc["comp_acc/replace_rel", "met"] is None  # clip has no value: not checked, not passed
    sat = RP.saturation_table(pd.DataFrame(rows))
    # replace_rel 0.99 breaks the limit; add_obj may saturate and is not among the compared types
    assert not sat.loc["negclip", "within limit"] and sat.loc["negclip", "highest type"] == "replace_rel"
    assert RP.saturation_table(pd.DataFrame(rows[:3])).empty


def test_summary_table_uses_the_ledgers_interval():
    rows = [
        dict(recipe="clip", seed=s, metric="comp_acc", value=v, chance=0.5) for s, v in enumerate((0.70, 0.74, 0.72))
    ]
    t = RP.summary_table(pd.DataFrame(rows))
    assert (
        t.loc["(chance)", "comp_acc"] == "0.500" and t.loc["clip", "comp_acc"] == "0.720 ± 0.050"
    )  # t_.975,2 · 0.02 / √3


def test_report_reads_old_and_new_meta_and_lists_the_ledger():
    rows = [
        dict(recipe=r, seed=s, metric="pep_auc", value=v + 0.01 * s, chance=0.5)
        for s in range(3)
        for r, v in (("argent-no-reg", 0.8), ("hycoclip", 0.7))
    ]
    results = pd.DataFrame(rows)
    ledger = evaluate_claims(results)
    meta = dict(
        budget=dataclasses.asdict(BUDGETS["smoke"]),
        seeds=3,
        recipes=["argent-no-reg", "hycoclip"],
        wall_seconds=60.0,
        peak_rss_mb=100.0,
        torch="2",
        threads=1,
    )
    figures = {}
    page = RP.render_report(results, ledger, meta, plotlyjs=False, figures=figures)
    assert "budget <b>smoke</b>" in page and "Claims ledger" in page and "ARG-1" in page
    assert {"forest", "papers", "bars_pep_auc"} <= set(figures)
    old = {k: v for k, v in meta.items() if k != "budget"} | {
        "preset": {"name": "smoke", "model_preset": "world-debug"}
    }
    assert "budget <b>smoke</b>" in RP.render_report(results, ledger, old, plotlyjs=False)


def _two_seeds():
    """The quick budget's shape: 2 seeds a recipe, one of them far from the other (as the main job's CLIP and ARGENT
    were)."""
    rows = []
    for s, (acc, tau) in enumerate(((0.66, -0.45), (0.87, 0.25))):
        for r in ("clip", "argent"):
            rows += [
                dict(recipe=r, seed=s, metric="zs_acc/test-iid", value=acc, chance=1 / 9),
                dict(recipe=r, seed=s, metric="d_corr", value=tau, chance=0.0),
            ]
    return pd.DataFrame(rows)


def test_at_two_seeds_the_summary_says_each_seed_and_no_interval_and_its_caption_says_why():
    t = RP.summary_table(_two_seeds())
    assert t.loc["clip", "zs_acc/test-iid"] == "0.765 (0.660 / 0.870)"  # the t-interval would be ± 1.334
    assert t.loc["argent", "d_corr"] == "-0.100 (-0.450 / 0.250)"  # ± 4.447 on a range of 2
    assert not any("±" in v for v in t.to_numpy().ravel())
    cap = t.attrs["caption"]
    assert cap.startswith("2 seeds a recipe: the mean (lowest / highest seed) and no interval")
    assert "one degree of freedom" in cap and "12.7 × sd/√2" in cap and cap.endswith("first row: chance")
    md = RP.headline_table(_two_seeds(), 300)
    assert "±" not in md and "| 0.765 (0.660 / 0.870) |" in md and md.splitlines()[-1].endswith("12.7 × sd/√2.")


def test_an_interval_wider_than_the_metrics_range_is_not_clipped_but_replaced_by_the_seeds_range():
    rows = [
        dict(recipe="argent", seed=s, metric="d_corr", value=v, chance=0.0) for s, v in enumerate((-0.9, 0.9, -0.9))
    ]
    rows += [
        dict(recipe="clip", seed=s, metric="d_corr", value=v, chance=0.0) for s, v in enumerate((0.90, 0.95, 0.92))
    ]
    rows += [
        dict(recipe="clip", seed=s, metric="train_seconds", value=v, chance=None) for s, v in enumerate((100, 900, 100))
    ]
    t = RP.summary_table(pd.DataFrame(rows), metrics=("d_corr", "train_seconds"))
    assert t.loc["argent", "d_corr"] == "-0.300 (-0.900 / 0.900)" and t.loc["clip", "d_corr"].startswith("0.923 ± ")
    assert t.loc["clip", "train_seconds"].startswith("366.667 ± ")  # no known range: the interval stays, however wide
    cap = t.attrs["caption"]
    assert "mean ± 95% half-width over seeds (t-interval) at 3 seeds or more" in cap
    assert cap.endswith("would be wider than the metric's whole range: argent d_corr; first row: chance")


@pytest.mark.parametrize("seed", range(5))
def test_no_summary_cell_holds_an_interval_wider_than_its_metrics_range(seed):
    rng = np.random.default_rng(seed)
    rows = [
        dict(recipe=f"r{k}", seed=s, metric=m, value=float(rng.uniform(lo, hi)), chance=None)
        for k, n in enumerate(rng.integers(1, 7, size=12))
        for s in range(n)
        for m, lo, hi in (("comp_acc", 0, 1), ("d_corr", -1, 1), ("pep_ap", 0, 1))
    ]
    t = RP.summary_table(pd.DataFrame(rows), metrics=("comp_acc", "d_corr", "pep_ap"))
    for m in t.columns:
        lo, hi = RP.metric_range(m)
        for cell in t[m].iloc[1:]:
            if "±" in cell:
                assert 2 * float(cell.split("±")[1]) <= hi - lo, (m, cell)
            elif "(" in cell:
                assert " / " in cell


def test_seeds_that_differ_between_recipes_are_named_with_both_spellings():
    rows = [dict(recipe="clip", seed=s, metric="comp_acc", value=0.7 + 0.01 * s, chance=0.5) for s in range(5)]
    rows += [dict(recipe="negclip", seed=s, metric="comp_acc", value=0.75 + 0.02 * s, chance=0.5) for s in range(2)]
    t = RP.summary_table(pd.DataFrame(rows))
    assert " ± " in t.loc["clip", "comp_acc"] and t.loc["negclip", "comp_acc"] == "0.760 (0.750 / 0.770)"
    assert t.attrs["caption"].startswith(
        "seeds a recipe: clip 5, negclip 2: mean ± 95% half-width over seeds (t-interval) "
        "at 3 seeds or more; at 2 seeds the mean (lowest / highest seed) and no interval"
    )


def test_the_report_shows_the_summarys_caption_at_two_seeds():
    results = _two_seeds()
    meta = dict(
        budget=dataclasses.asdict(BUDGETS["quick"]),
        seeds=2,
        recipes=["clip", "argent"],
        wall_seconds=60.0,
        peak_rss_mb=100.0,
        torch="2",
        threads=1,
    )
    page = RP.render_report(results, evaluate_claims(results), meta, plotlyjs=False)
    summary = page.split("<h2>Summary</h2>")[1].split("<h3>")[0]
    assert "one degree of freedom" in summary and "0.765 (0.660 / 0.870)" in summary and "±" not in summary
