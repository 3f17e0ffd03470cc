"""tools/paired_precision.py: runs are paired by recipe and seed, the seed spread is folder A's, and folders that
differ in more than their precision are refused."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("paired_precision", ROOT / "tools" / "paired_precision.py")
pp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pp)


def _folder(path: Path, precision: str, shift: float, verdict: str, **budget) -> Path:
    path.mkdir()
    rows = [
        dict(recipe=r, seed=s, metric="comp_acc", value=0.5 + 0.1 * s + 0.01 * i + shift)
        for i, r in enumerate(["clip", "negclip", "degla"])
        for s in range(3)
    ]
    rows.append(dict(recipe="clip", seed=9, metric="comp_acc", value=0.0))  # in one folder only: not paired
    meta = dict(budget=dict(name="quick", arch="world-tiny", precision=precision, **budget))
    (path / "results.json").write_text(json.dumps(dict(meta=meta, rows=rows if precision == "fp32" else rows[:-1])))
    claim = dict(
        id="DEG-1",
        a="negclip",
        b="clip",
        metric="comp_acc",
        effect=0.01,
        ci_low=-0.01,
        ci_high=0.03,
        n=3,
        verdict=verdict,
    )
    skipped = dict(
        id="DEG-3",
        a="degla",
        b="degla-no-distill",
        metric="zs_acc/general",
        effect=None,
        ci_low=None,
        ci_high=None,
        n=0,
        verdict="not run",
    )
    (path / "claims.json").write_text(json.dumps(dict(meta={}, claims=[claim, skipped], power=[])))
    return path


def test_paired_shift_and_seed_spread(tmp_path):
    a, b = _folder(tmp_path / "a", "fp32", 0.0, "inconclusive"), _folder(tmp_path / "b", "amp_bf16", 0.002, "supported")
    _, ra, ca = pp.read_folder(a)
    _, rb, cb = pp.read_folder(b)
    t = pp.metric_pairs(ra, rb).set_index("metric").loc["comp_acc"]
    assert t.runs == 9 and t.mean_shift == pytest.approx(0.002) and t.rms_shift == pytest.approx(0.002)
    assert t.rms_seed_step == pytest.approx(0.1)  # seed s+1 − seed s of the same recipe, in folder A
    cp = pp.claim_pairs(ca, cb)
    assert list(cp.verdict_a) == ["inconclusive", "not run"] and list(cp.verdict_b) == ["supported", "not run"]


def test_main_prints_both_tables_and_counts_moved_verdicts(tmp_path, capsys):
    a, b = _folder(tmp_path / "a", "fp32", 0.0, "inconclusive"), _folder(tmp_path / "b", "amp_bf16", -0.01, "supported")
    assert pp.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert (
        "| comp_acc | 9 | -0.0100" in out
        and "verdicts moved: 1 of 1 claim rows run in both folders (1 rows not run" in out
    )
    assert "DEG-3" not in out


def test_refuses_folders_that_differ_in_more_than_precision(tmp_path):
    a = _folder(tmp_path / "a", "fp32", 0.0, "inconclusive", pretrain_steps=2000)
    b = _folder(tmp_path / "b", "amp_bf16", 0.0, "inconclusive", pretrain_steps=500)
    with pytest.raises(SystemExit, match="differ in pretrain_steps"):
        pp.main([str(a), str(b)])
    c = _folder(tmp_path / "c", "fp32", 0.0, "inconclusive", pretrain_steps=2000)
    with pytest.raises(SystemExit, match="same precision"):
        pp.main([str(a), str(c)])
    with pytest.raises(SystemExit, match="results.json missing"):
        pp.main([str(a), str(tmp_path)])
