"""Sweeps (issue 45): a grid of one recipe's settings run through compare's launchers, each point's paired effect
against
the reference with its interval, the points differing from it in the swept fields only; bad grids refused in one
line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest


from hierbench.ledger.sweep import run_sweep, sweep_table

HIERBENCH = str(Path(sys.executable).parent / "hierbench")


pytestmark = pytest.mark.usefixtures("isolated_registries")


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    return out, run_sweep(
        "degla",
        ["weights.distill=0,0.005,0.05"],
        out,
        budget="smoke",
        seeds=3,
        against="degla-base",
        jobs=1,
        progress=False,
        log=lambda *a: None,
    )


def test_every_point_is_trained_once_and_differs_from_the_reference_in_what_the_claim_is_about(swept):
    out, res = swept
    doc = json.loads((out / "sweep.json").read_text())
    assert [p["recipe"] for p in doc["points"]] == ["degla@weights.distill=0", "degla", "degla@weights.distill=0.05"]
    # against DeGLA's base (its hard-negative base alone), each point differs in DeGLA's terms; distill 0 in one fewer
    assert doc["points"][0]["differs_from_reference"] == ["weights.igc", "weights.tgc"]
    assert doc["points"][1]["differs_from_reference"] == ["weights.distill", "weights.igc", "weights.tgc"]
    trained = sorted(p.parent.parent.name for p in (out / "runs").glob("*/seed0/model.safetensors"))
    assert trained == ["clip", "degla", "degla-base", "degla@weights.distill=0", "degla@weights.distill=0.05"]
    e = doc["points"][0]["metrics"]["comp_acc"]
    assert e["n"] == 3 and e["low"] <= e["effect"] <= e["high"] and e["mde"] > 0
    assert (out / "sweep.html").read_text().count("plotly") and (out / "sweep_points.py").is_file()
    assert len(sweep_table(doc)) == 3


def test_a_point_equal_to_the_base_is_the_base(swept):
    out, res = swept
    assert res["document"]["points"][1]["values"] == {"weights.distill": 0.005}
    assert "degla@weights.distill=0.005" not in {p.name for p in (out / "runs").iterdir()}


BAD_GRIDS = [
    ("weights.distil=0,1", "has no field 'weights.distil'"),
    ("num_negatives=2,x", "num_negatives='x': not an int"),
    ("weights.distill=-1", "weights must be >= 0"),
    ("weights.distill", "write FIELD=V1,V2"),
]


def test_a_bad_grid_is_one_line_and_writes_nothing(tmp_path):
    "The console script prints the refusal as its one line on stderr, exits 1 and writes nothing."
    grid, message = BAD_GRIDS[0]
    res = subprocess.run(
        [HIERBENCH, "sweep", "degla", "--grid", grid, "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and message in res.stderr, res.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("grid,message", BAD_GRIDS)
def test_every_bad_grid_is_refused_in_one_line_before_anything_is_written(grid, message, tmp_path, monkeypatch):
    "The same entry point in this process (the exit's message is the line the console prints)."
    import warnings

    from hierbench.cli.parser import main

    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # main installs its one-line warnings
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", "degla", "--grid", grid, "--out", str(tmp_path / "out")])
    line = str(exit_.value.code)
    assert line.startswith("hierbench sweep: ") and "\n" not in line and message in line, line
    assert not (tmp_path / "out").exists()


def test_a_reference_restored_from_another_machines_records_is_named():
    "Points trained here against records trained elsewhere differ in the machine too: the sweep names that reference."
    from hierbench.ledger.sweep import trained_elsewhere
    from hierbench.ledger.records import made_on

    here = made_on()["cpu"]
    runs = [
        dict(recipe="degla", seed=0, recorded=dict(made=dict(cpu="Elsewhere CPU"))),  # restored, trained elsewhere
        dict(recipe="degla", seed=1, made=dict(cpu=here), recorded={}),  # restored, trained on this CPU
        dict(recipe="degla-margin", seed=0, metrics={}),
    ]  # trained here
    assert trained_elsewhere(runs, ["degla", "degla-margin"]) == {"degla": ["Elsewhere CPU"]}
    assert trained_elsewhere(runs[1:], ["degla", "degla-margin"]) == {}
