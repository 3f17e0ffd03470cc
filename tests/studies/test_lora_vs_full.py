"""tools/lora_vs_full.py at the smoke budget (one seed, fewer evaluation scenes): both arms, the pairs checked fair
(config.json differs in LoRA
only), finished runs reused, the tables computed from the runs."""

import dataclasses
import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

from hierbench.ledger.budgets import BUDGETS

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("lora_vs_full", ROOT / "tools" / "lora_vs_full.py")
lvf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lvf)


def test_the_tool_runs_both_arms_fairly_and_reuses_them(tmp_path, monkeypatch):
    monkeypatch.setenv("HIERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    tiny = dataclasses.replace(
        BUDGETS["smoke"], n_train=64, n_test=16, pep_pool=4, snapshots=()
    )  # smoke, smaller still
    rows = lvf.run(tiny, 1, out, 2, log=lambda m: None)
    saved = json.loads((out / "lora_vs_full.json").read_text())
    assert sorted((r["arm"], r["seed"]) for r in saved["runs"]) == sorted((a, 0) for a in lvf.ARMS)
    lora = [r for r in saved["runs"] if r["arm"] == "degla-lora"]
    assert all(0 < r["trainable"] < 0.2 * r["total"] for r in lora)
    # the arms' numbers are the runs' own: the difference of gains is the difference of the two fine-tunes
    again = lvf.run(tiny, 1, out, 2, log=lambda m: None)  # every run reused: the same numbers
    pd.testing.assert_frame_equal(rows, again)
    arms, gains = lvf.tables(rows)
    g = gains.set_index("metric").loc["comp_acc"]
    acc = {(r["arm"], r["seed"]): r["metrics"]["comp_acc"] for r in saved["runs"]}
    assert g.lora_minus_full == pytest.approx(acc["degla-lora", 0] - acc["degla", 0])
    assert g.full_gain == pytest.approx(acc["degla", 0] - acc["clip", 0])
    text = lvf.markdown(arms, gains)
    assert "LoRA DeGLA − CLIP" in text and "| comp_acc |" in text
    # an unfair pair is refused
    cfg = lvf.lora_folder(out, 2, 0) / "config.json"
    c = json.loads(cfg.read_text())
    c["lr"] = 1.0
    cfg.write_text(json.dumps(c))
    with pytest.raises(SystemExit, match="differ in lr"):
        lvf.check_fair(out, 2, 0)
    c["lr"] = json.loads((out / "runs" / "degla" / "seed0" / "config.json").read_text())["lr"]
    c["device"] = "cuda"
    cfg.write_text(json.dumps(c))  # another device sums in another order: not only LoRA either
    with pytest.raises(SystemExit, match="differ in device"):
        lvf.check_fair(out, 2, 0)
    # a LoRA arm at 10x the learning rate: the pair may differ in lr, by that factor only
    lvf.run(tiny, 1, out, 2, log=lambda m: None, lr_scale=10)
    lr = {
        a: json.loads((f / "config.json").read_text())["lr"]
        for a, f in (("full", out / "runs" / "degla" / "seed0"), ("lora", lvf.lora_folder(out, 2, 0, 10)))
    }
    assert lr["lora"] == pytest.approx(10 * lr["full"]) and (out / "lora_vs_full-lr10x.json").is_file()
