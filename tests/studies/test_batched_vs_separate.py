"""tools/batched_vs_separate.py at a tiny size: it trains both folders with compare, and its table says what the
runs say (here: the same runs, so every difference is zero). The statistics at the quick budget are on the results
page 2026-12-03_batched-seeds; this checks that the tool works, not the statistics."""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "batched_vs_separate.py"


def _tool():
    spec = importlib.util.spec_from_file_location("batched_vs_separate", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_tool_trains_both_folders_and_reports_zero_differences(tmp_path, capsys):
    tool = _tool()
    text = tool.main(
        [
            str(tmp_path),
            "--budget",
            "smoke",
            "--recipes",
            "clip",
            "--seeds",
            "2",
            "--seeds-per-process",
            "2",
            "--jobs",
            "1",
        ]
    )
    assert "| recipe | metric | seeds | separate | batched | difference | low | high | seed_sd |" in text
    assert "runs with identical weights in both folders: 2 of 2" in text
    assert "seeds per process: separate 1, batched 2" in text
    sep, bat = tool.read_folder(tmp_path / "separate")[1], tool.read_folder(tmp_path / "batched")[1]
    table = tool.compare_metrics(sep, bat, ("i2t_R@5", "comp_acc"))
    assert len(table) == 2 and (table.difference == 0).all() and table.holds_zero.all()
    assert tool.main([str(tmp_path), "--report-only"]) == text  # the finished folders, compared again


def test_the_comparison_flags_a_shift_and_refuses_other_budgets(tmp_path):
    tool = _tool()
    rows = lambda shift: pd.DataFrame(
        [dict(recipe="clip", seed=s, metric="comp_acc", value=0.5 + 0.01 * s + shift) for s in range(4)]
    )
    moved = tool.compare_metrics(rows(0.0), rows(0.1), ("comp_acc",))
    assert moved.difference.round(6).tolist() == [0.1] and not moved.holds_zero.any()
    with pytest.raises(SystemExit, match="not a finished compare folder"):
        tool.read_folder(tmp_path / "nothing")
