"""`hierbench.report`: static figures are whole or absent, the PEP and learnability tables, the report's sections."""
import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from hierbench import report as RP
from hierbench.budgets import BUDGETS
from hierbench.claims import evaluate_claims


def test_static_figures_are_written_whole_or_skipped_with_the_reason(tmp_path, monkeypatch):
    import plotly.graph_objects as go, plotly.io as pio
    figs = {"a b/c": go.Figure(go.Bar(y=[1, 2]))}
    def broken(figs, files, **kwargs):   # a browser that dies after starting the first file
        Path(files[0]).write_bytes(b"partial")
        raise RuntimeError("\nno Chrome found\nsecond line")   # plotly's messages start with a newline
    monkeypatch.setattr(pio, "write_images", broken)
    res = RP.save_static_figures(figs, tmp_path / "figs")
    assert res == {"written": [], "skipped": "RuntimeError: no Chrome found second line"}   # one line, all of it
    assert not list((tmp_path / "figs").glob("*"))   # nothing half-written
    assert RP.save_static_figures({}, tmp_path / "none") == {"written": [], "skipped": None}


def test_learnability_table_needs_every_seed():
    rows = [dict(recipe="clip", seed=s, metric="zs_acc/general", value=v, chance=1 / 9) for s, v in enumerate((0.7, 0.59, 0.8))]
    rows += [dict(recipe="negclip", seed=0, metric="comp_acc/replace_rel", value=0.99, chance=0.5),
             dict(recipe="negclip", seed=0, metric="comp_acc/add_obj", value=0.999, chance=0.5)]
    t = RP.learnability_table(pd.DataFrame(rows))
    assert t.loc["zs_acc/general", "met"] is False and t.loc["zs_acc/general", "seeds met"] == "2/3"
    assert t.loc["zs_acc/general", "min"] == pytest.approx(0.59)
    assert t.loc["comp_acc/replace_rel", "met"] is None      # clip has no value: not checked, not passed
    sat = RP.saturation_table(pd.DataFrame(rows))
    # replace_rel 0.99 breaks the limit; add_obj may saturate and is not among the compared types
    assert not sat.loc["negclip", "within limit"] and sat.loc["negclip", "highest type"] == "replace_rel"
    assert RP.saturation_table(pd.DataFrame(rows[:3])).empty


def test_summary_table_uses_the_ledgers_interval():
    rows = [dict(recipe="clip", seed=s, metric="comp_acc", value=v, chance=0.5) for s, v in enumerate((0.70, 0.74, 0.72))]
    t = RP.summary_table(pd.DataFrame(rows))
    assert t.loc["(chance)", "comp_acc"] == "0.500" and t.loc["clip", "comp_acc"] == "0.720 ± 0.050"   # t_.975,2 · 0.02 / √3


def test_report_reads_old_and_new_meta_and_lists_the_ledger():
    rows = [dict(recipe=r, seed=s, metric="pep_auc", value=v + 0.01 * s, chance=0.5)
            for s in range(3) for r, v in (("argent-no-reg", 0.8), ("hycoclip", 0.7))]
    results = pd.DataFrame(rows)
    ledger = evaluate_claims(results)
    meta = dict(budget=dataclasses.asdict(BUDGETS["smoke"]), seeds=3, recipes=["argent-no-reg", "hycoclip"],
                wall_seconds=60.0, peak_rss_mb=100.0, torch="2", threads=1)
    figures = {}
    page = RP.render_report(results, ledger, meta, plotlyjs=False, figures=figures)
    assert "budget <b>smoke</b>" in page and "Claims ledger" in page and "ARG-1" in page
    assert {"forest", "papers", "bars_pep_auc"} <= set(figures)
    old = {k: v for k, v in meta.items() if k != "budget"} | {"preset": {"name": "smoke", "model_preset": "world-debug"}}
    assert "budget <b>smoke</b>" in RP.render_report(results, ledger, old, plotlyjs=False)
