"""tools/lora_vs_full.py at the smoke budget: both arms per seed, the pairs checked fair (config.json differs in LoRA
only), finished runs reused, the tables computed from the runs."""
import importlib.util, json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("lora_vs_full", ROOT / "tools" / "lora_vs_full.py")
lvf = importlib.util.module_from_spec(spec); spec.loader.exec_module(lvf)


def test_the_tool_runs_both_arms_fairly_and_reuses_them(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HIERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    assert lvf.main(["--budget", "smoke", "--seeds", "2", "--out", str(out), "--rank", "2"]) == 0
    printed = capsys.readouterr().out
    assert "LoRA DeGLA − CLIP" in printed and "| comp_acc |" in printed
    saved = json.loads((out / "lora_vs_full.json").read_text())
    assert sorted((r["arm"], r["seed"]) for r in saved["runs"]) == sorted((a, s) for a in lvf.ARMS for s in (0, 1))
    lora = [r for r in saved["runs"] if r["arm"] == "degla-lora"]
    assert all(0 < r["trainable"] < 0.2 * r["total"] for r in lora)
    # the arms' numbers are the runs' own: the difference of gains is the difference of the two fine-tunes
    rows = lvf.run("smoke", 2, out, 2, log=lambda m: None)          # everything reused: same numbers
    arms, gains = lvf.tables(rows)
    g = gains.set_index("metric").loc["comp_acc"]
    acc = {(r["arm"], r["seed"]): r["metrics"]["comp_acc"] for r in saved["runs"]}
    assert g.lora_minus_full == pytest.approx(np.mean([acc["degla-lora", s] - acc["degla", s] for s in (0, 1)]))
    # an unfair pair is refused
    cfg = lvf.lora_folder(out, 2, 0) / "config.json"
    c = json.loads(cfg.read_text()); c["lr"] = 1.0; cfg.write_text(json.dumps(c))
    with pytest.raises(SystemExit, match="differ in lr"): lvf.check_fair(out, 2, 0)
