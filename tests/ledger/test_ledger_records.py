"""Ledger records (issue 39): a compare folder reduced to records recomputes its claims.json exactly; a plan continued
from records trains only the new seeds and ends where the uninterrupted run ends; bad records are refused in one line
naming the record; the committed standard ledger recomputes from its records alone."""

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hierbench.ledger import compare as C, records as R
from hierbench.ledger.launchers import InProcess

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "nbs" / "results" / "data" / "ledger-standard"
KW = dict(
    recipes=["clip", "meru"],
    launcher=InProcess(),
    log=lambda *a: None,
    progress=False,
    until_decided=True,
    max_seeds=3,
    round_seeds=1,
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    "An uninterrupted smoke compare --until-decided: clip and meru (HYP-1's row), looks at 2 and 3 seeds."
    out = tmp_path_factory.mktemp("full")
    C.run_compare("smoke", seeds=2, out=out, **KW)
    return out


@pytest.fixture(scope="module")
def records(folder, tmp_path_factory):
    return R.write_records(folder, tmp_path_factory.mktemp("recs") / "ledger")


def _rows(path):
    return [c for c in json.loads(Path(path).read_text())["claims"]]


def test_records_recompute_the_folders_claims_exactly(folder, records):
    rec = R.read_records(records)
    doc = json.loads(json.dumps(R.ledger_from_records(rec)["document"]))
    assert R.ledger_differences(doc, json.loads((folder / "claims.json").read_text())) == []
    assert doc == rec.claims
    assert len(rec.runs) == 6 and {r["seed"] for r in rec.runs} == {0, 1, 2}
    assert "model.safetensors" not in {p.name for p in records.iterdir()}


def test_a_plan_continued_from_records_trains_only_new_seeds_and_ends_as_the_uninterrupted_run(folder, tmp_path):
    # the same folder as it stood after its first round (2 seeds), reduced to records
    partial = tmp_path / "partial"
    shutil.copytree(folder, partial)
    for r in ("clip", "meru"):
        shutil.rmtree(C.run_dir(partial, r, 2))
    plan = json.loads((partial / "plan.json").read_text())
    ud = plan["until_decided"]
    plan["until_decided"] = {
        **ud,
        "seeds_per_recipe": {"clip": 2, "meru": 2},
        "rounds": ud["rounds"][:1],
        "stopped": "time cap",
    }
    plan["seeds"] = 2
    (partial / "plan.json").write_text(json.dumps(plan))
    (partial / "claims.json").unlink()
    recs = R.write_records(partial, tmp_path / "recs")
    # continued on a "new machine": a folder with nothing but the records restored into it
    out = tmp_path / "continued"
    lines = []
    from hierbench.ledger.compare import launch_compare

    res = launch_compare(
        "smoke",
        seeds=2,
        out=out,
        from_records=recs,
        recipes=["clip", "meru"],
        quiet=True,
        log=lines.append,
        progress=True,
        until_decided=True,
        max_seeds=3,
        round_seeds=1,
        jobs=1,
    )
    trained = sorted(
        p.parent.relative_to(out / "runs").as_posix() for p in (out / "runs").glob("*/seed*/model.safetensors")
    )
    assert trained == ["clip/seed2", "meru/seed2"]  # only the seeds the plan still asked for
    assert any("4 of 4 recorded run(s) restored" in l for l in lines)
    # the restored runs stand in for their folders: the first round has nothing to run, the second trains the new seeds
    assert any(l.startswith("compare: round 1: 0 runs, 0 in the folder, 0 to train; about 0 s") for l in lines), lines
    assert any(l.startswith("compare: round 2: 2 runs, 0 in the folder, 2 to train") for l in lines), lines
    assert _rows(out / "claims.json") == _rows(folder / "claims.json")  # the same ledger as without the break
    assert res["meta"]["until_decided"]["seeds_per_recipe"] == {"clip": 3, "meru": 3}


def test_a_continuation_under_another_plan_is_refused(records, tmp_path):
    from hierbench.ledger.compare import launch_compare

    with pytest.raises(ValueError, match=r"looks at \[2, 3\] seeds .* these flags plan \[2, 3, 4\]"):
        launch_compare(
            "smoke",
            seeds=2,
            out=tmp_path,
            from_records=records,
            recipes=["clip", "meru"],
            log=lambda *a: None,
            progress=False,
            until_decided=True,
            max_seeds=4,
            round_seeds=1,
            jobs=1,
        )
    with pytest.raises(ValueError, match="another budget"):
        launch_compare(
            "quick",
            seeds=2,
            out=tmp_path / "q",
            from_records=records,
            recipes=["clip", "meru"],
            log=lambda *a: None,
            progress=False,
            until_decided=True,
            max_seeds=3,
            round_seeds=1,
            jobs=1,
        )


def _edit_runs(folder: Path, edit):
    lines = gzip.open(folder / R.RUNS_FILE, "rt").read().splitlines()
    with gzip.open(folder / R.RUNS_FILE, "wt") as f:
        f.write("\n".join(edit(lines)) + "\n")


def _bad(records, tmp_path, edit) -> str:
    bad = tmp_path / "bad"
    shutil.copytree(records, bad)
    edit(bad)
    with pytest.raises(R.RecordsError) as e:
        R.read_records(bad)
    assert "\n" not in str(e.value)
    return str(e.value)


def _hash(line):
    row = json.loads(line)
    row["settings_sha256"] = "0" * 64
    return json.dumps(row)


def _foreign(line):
    row = json.loads(line)
    row["seed"] = 7
    return json.dumps(row)


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda f: _edit_runs(f, lambda ls: ls[1:]),
            "run(s) of the plan are not recorded (clip/seed0): nothing is recomputed from a partial set",
        ),
        (lambda f: _edit_runs(f, lambda ls: ls + ls[:1]), "line 7: clip/seed0 is recorded twice (first on line 1)"),
        (
            lambda f: _edit_runs(f, lambda ls: [_hash(ls[0])] + ls[1:]),
            "line 1: clip/seed0: settings hash 000000000000… disagrees with recipe 'clip'",
        ),
        (
            lambda f: _edit_runs(f, lambda ls: ls + [_foreign(ls[0])]),
            "line 7: clip/seed7 is not a run of the plan in ledger.json (budget 'smoke'): records from another plan",
        ),
        (lambda f: _edit_runs(f, lambda ls: ls[:2] + ["{not json"] + ls[2:]), "line 3: not JSON"),
        (lambda f: (f / R.LEDGER_FILE).unlink(), "ledger.json: missing: not a ledger-records folder"),
        (lambda f: (f / R.LEDGER_FILE).write_text("{"), "ledger.json: not JSON"),
        (lambda f: (f / R.RUNS_FILE).write_bytes(b"plain"), "runs.jsonl.gz: not a gzip file"),
        (lambda f: (f / R.ITEMS_FILE).unlink(), "items.npz: missing"),
    ],
)
def test_bad_records_are_refused_in_one_line_naming_the_record(records, tmp_path, edit, message):
    assert message in _bad(records, tmp_path, edit)


def test_a_record_dropped_from_items_is_named(records, tmp_path):
    def drop(f):
        with np.load(f / R.ITEMS_FILE) as z:
            arrays = {k: z[k] for k in z.files if not k.startswith("meru|1|")}
        np.savez_compressed(f / R.ITEMS_FILE, **arrays)

    assert (
        "(meru/seed1): ledger.json says it keeps per-item record 'test-iid|chains', whose field(s) tau the file lacks"
        in _bad(records, tmp_path, drop)
    )


def test_a_record_the_ledger_did_not_read_is_refused_not_a_silent_nan(records):
    rec = R.read_records(records)
    with pytest.raises(R.RecordsError, match="clip/seed0.* keeps no per-item record 'general'"):
        rec.items[("clip", 0)]["general"]


def test_the_cli_reduces_recomputes_and_refuses_in_one_line(folder, tmp_path):
    hb = [sys.executable, "-m", "hierbench.cli", "claims"]
    out = subprocess.run(hb + [str(folder), "--records", str(tmp_path / "r")], capture_output=True, text=True)
    assert out.returncode == 0 and "6 runs of 2 recipes" in out.stdout
    out = subprocess.run(
        hb + [str(tmp_path / "r"), "--wide", "--json", str(tmp_path / "c.json")], capture_output=True, text=True
    )
    assert out.returncode == 0 and "equal to" in out.stdout and "| seeds | 3 | 3 |" in out.stdout
    assert json.loads((tmp_path / "c.json").read_text()) == json.loads((tmp_path / "r" / "claims.json").read_text())
    out = subprocess.run(hb + [str(tmp_path / "nothing")], capture_output=True, text=True)
    assert out.returncode != 0 and out.stderr.strip().count("\n") == 0 and "not a compare folder" in out.stderr


@pytest.mark.skipif(not (COMMITTED / R.LEDGER_FILE).is_file(), reason="no committed ledger records")
def test_the_committed_standard_ledger_recomputes_from_its_records_alone():
    rec = R.read_records(COMMITTED)
    doc = json.loads(json.dumps(R.ledger_from_records(rec)["document"]))
    assert R.ledger_differences(doc, rec.claims) == [] and doc == rec.claims
    assert rec.plan.budget.name == "standard" and rec.plan.sequential.looks == (5, 7, 9, 11, 13, 15)
    size = sum(p.stat().st_size for p in COMMITTED.iterdir())
    assert size < 12e6, f"{size / 1e6:.1f} MB"


def test_a_plugin_claim_asked_of_the_committed_records_is_a_new_row_not_a_difference(tmp_path):
    "Issue 55: the recorded rows recompute equal, the plugin's row is reported as new with its verdict, exit 0."
    plugin = tmp_path / "mine.py"
    plugin.write_text(
        "from hierbench.ledger.claims import Claim, register_claim\n"
        "from hierbench.recipes.registry import get_recipe, recipe_fields\n"
        "a, b = recipe_fields(get_recipe('degla')), recipe_fields(get_recipe('negclip'))\n"
        "differs = tuple(sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)))\n"
        "register_claim(Claim('MINE-9', 'me', 'DeGLA keeps zero-shot', 'degla', 'negclip', 'zs_acc/general',\n"
        "                     direction='no_worse', differs_in=differs))\n"
    )
    records = ROOT / "nbs" / "results" / "data" / "ledger-standard"
    out = subprocess.run(
        [sys.executable, "-m", "hierbench.cli", "claims", str(records), "--plugin", str(plugin)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    said = " ".join(out.stdout.split())  # lines are folded to 100 columns
    assert "new row, not in" in said and "MINE-9 degla − negclip zs_acc/general" in said, out.stdout[-1500:]
    assert "equal to" in said and "1 new row(s) above" in said
