"""The main job's answer (issue 46): a compare folder's runs checked against ledger records — paired by recipe, seed and
settings hash, shifts pooled by family against a margin from the records' seed spread, the ledger recomputed with
this machine's runs — and every way the check cannot be made said in one line, the job's own outputs still written."""

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hierbench.ledger import compare as C, records as R
from hierbench.ledger.launchers import InProcess
from hierbench.ledger.reproduction import metric_shifts, pair_runs, reproduction_check, reproduction_lines

HIERBENCH = str(Path(sys.executable).parent / "hierbench")
COMMITTED = Path(__file__).resolve().parents[2] / "nbs" / "results" / "data" / "ledger-standard"
KW = dict(recipes=["clip", "meru", "clip-ft"], launcher=InProcess(), log=lambda *a: None, progress=False)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    "Ledger records of a smoke compare: clip, meru, clip-ft over 3 seeds (6 families: clip/s with clip-ft/s, meru/s)."
    out = tmp_path_factory.mktemp("recorded")
    C.run_compare("smoke", seeds=3, out=out, **KW)
    return R.write_records(out, tmp_path_factory.mktemp("recs") / "ledger")


@pytest.fixture(scope="module")
def again(recorded, tmp_path_factory):
    "The same plan trained again on this machine, in another folder, checked against those records."
    out = tmp_path_factory.mktemp("again")
    return out, C.run_compare("smoke", seeds=3, out=out, records=None, **KW)


def test_the_same_runs_again_reproduce_their_records(again, recorded):
    out, res = again
    rows = res["runs"]
    rep = reproduction_check(out, rows, recorded)
    assert rep["runs"] == 9 and rep["families"] == 6 and rep["seeds"] == [0, 1, 2]
    assert rep["verdict"] == "reproduces" and {m["verdict"] for m in rep["metrics"]} == {"equivalent"}
    assert all(abs(m["shift"]) < 1e-9 for m in rep["metrics"])  # the same machine: the same bits
    assert rep["claims"]["changed"] == []
    lines = reproduction_lines(rep)
    assert len(lines) <= 20 and lines[0].startswith("this machine reproduces the ledger: 9 runs")
    assert f"in {recorded.name} (made on" in lines[1]  # records outside the repository: named by their folder
    cli = subprocess.run(
        [HIERBENCH, "claims", str(out), "--against", str(recorded)], capture_output=True, text=True, timeout=300
    )
    assert cli.returncode == 0 and "this machine reproduces the ledger" in cli.stdout, cli.stderr


def test_a_shift_beyond_the_margin_is_called_shifted(again, recorded, tmp_path):
    out, res = again
    shifted = tmp_path / "shifted"
    shutil.copytree(recorded, shifted)
    rows = [json.loads(l) for l in gzip.open(shifted / "runs.jsonl.gz", "rt").read().splitlines() if l]
    margin = {
        m["metric"]: m["margin"]
        for m in metric_shifts(pair_runs(res["runs"], R.read_records(recorded)), R.read_records(recorded)).to_dict(
            "records"
        )
    }
    for r in rows:
        r["metrics"]["zs_acc/general"] -= 5 * margin["zs_acc/general"]  # the recorded runs were better
    with gzip.open(shifted / "runs.jsonl.gz", "wt") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")
    rep = reproduction_check(out, res["runs"], shifted)
    got = {m["metric"]: m for m in rep["metrics"]}
    assert got["zs_acc/general"]["verdict"] == "shifted" and got["zs_acc/general"]["shift"] > 0
    assert got["comp_acc"]["verdict"] == "equivalent" and rep["verdict"] == "shifted"


def test_records_continued_from_records_keep_where_each_run_was_trained(again, recorded, tmp_path):
    """A run restored from records keeps its machine through the rewrite; the check names the twins' machine, not the
    writer's."""
    out, res = again
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(recorded, elsewhere)
    rows = [json.loads(l) for l in gzip.open(elsewhere / "runs.jsonl.gz", "rt").read().splitlines() if l]
    assert all(r["made"]["cpu"] and len(r["made"]["commit"] or "x" * 40) == 40 and "recorded" not in r for r in rows)
    for r in rows:
        r["made"] = dict(cpu="Elsewhere CPU", commit="e" * 40, date="2026-12-01")
    with gzip.open(elsewhere / "runs.jsonl.gz", "wt") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")
    assert reproduction_check(out, res["runs"], elsewhere)["recorded_on"] == "Elsewhere CPU"
    folder = tmp_path / "continued"
    assert R.restore_records(R.read_records(elsewhere), folder) == 9
    again_written = R.write_records(folder, tmp_path / "rewritten")
    kept = [json.loads(l) for l in gzip.open(again_written / "runs.jsonl.gz", "rt").read().splitlines() if l]
    assert {r["made"]["cpu"] for r in kept} == {"Elsewhere CPU"} and all("recorded" not in r for r in kept)
    assert "9 on Elsewhere CPU at commit `eeeeeee` (2026-12-01)" in (again_written / "README.md").read_text()


def test_why_no_check_was_made_is_said_in_one_line(again, recorded, tmp_path):
    out, res = again
    # the main job's own outputs carry the check against settings.ini's records (the committed standard ledger): other
    # settings
    doc = json.loads((out / "claims.json").read_text())
    assert (
        "other run settings" in doc["reproduction"]["skipped"]
        and "Reproduction check" in (out / "report.html").read_text()
    )
    moved = [{**r, "seed": r["seed"] + 50} for r in res["runs"]]
    assert "none of its runs is one the records hold" in reproduction_check(out, moved, recorded)["skipped"]
    assert "cannot be read" in reproduction_check(out, res["runs"], tmp_path / "absent")["skipped"]
    broken = tmp_path / "broken"
    shutil.copytree(recorded, broken)
    data = (broken / "items.npz").read_bytes()
    (broken / "items.npz").write_bytes(data[: len(data) // 2])
    rep = reproduction_check(out, res["runs"], broken)
    assert "items.npz: not a .npz file" in rep["skipped"] and "\n" not in rep["skipped"]
    cli = subprocess.run([HIERBENCH, "claims", str(broken)], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 1 and cli.stderr.count("\n") == 1 and "items.npz" in cli.stderr, cli.stderr
    with pytest.raises(R.RecordsError, match="other run settings"):
        from hierbench.cli.commands import cmd_claims
        import argparse

        cmd_claims(argparse.Namespace(dir=str(out), records=None, plugin=None, against=str(COMMITTED), json=None))


@pytest.mark.skipif(not COMMITTED.is_dir(), reason="the committed ledger records")
def test_two_seeds_could_decide_none_of_the_committed_rows():
    from hierbench.ledger.reproduction import decidable_at
    from hierbench.ledger.budgets import QUICK_RECIPES

    rec = R.read_records(COMMITTED)
    rows = decidable_at(rec, 2, QUICK_RECIPES)  # the README's main job: 2 seeds of the quick recipes
    assert len(rows) >= 10 and not any(r["could_decide"] for r in rows)
    assert any(r["could_decide"] for r in decidable_at(rec, 2))  # GEN-1's PEP rows (effects of 15 seed sd) could
    assert sum(r["could_decide"] for r in decidable_at(rec, 15)) > sum(r["could_decide"] for r in decidable_at(rec, 5))
