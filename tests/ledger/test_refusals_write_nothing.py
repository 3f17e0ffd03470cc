"""Every refusal of compare, sweep, claims and explain leaves --out as it was (issue 55): absent stays absent, a folder
that holds files keeps exactly those files. Run in-process through the command line's entry point (the exit's message
is the one line the console prints)."""

import warnings
from pathlib import Path

import pytest

from hierbench.cli.parser import main

RECORDS = Path(__file__).resolve().parents[2] / "nbs" / "results" / "data" / "ledger-standard"

REFUSALS = {
    "compare, an unknown recipe": (["compare", "--recipes", "nope", "--budget", "smoke"], "unknown recipe(s) ['nope']"),
    "compare, no seeds": (["compare", "--seeds", "0", "--budget", "smoke"], "seeds must be >= 1"),
    "compare, max seeds alone": (["compare", "--max-seeds", "9", "--budget", "smoke"], "go with --until-decided"),
    "compare, no max seeds": (["compare", "--until-decided", "--budget", "smoke"], "needs --max-seeds"),
    "compare, a missing plugin": (["compare", "--plugin", "no_such_plugin.py", "--budget", "smoke"], "no_such_plugin"),
    "sweep, an unknown field": (["sweep", "clip", "--grid", "weights.nope=1,2"], "has no field 'weights.nope'"),
    "explain, an unknown claim": (["explain", str(RECORDS), "NOPE-1"], "no claim 'NOPE-1'"),
}


def _snapshot(folder: Path):
    return sorted((str(p.relative_to(folder)), p.read_bytes()) for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("case", list(REFUSALS))
@pytest.mark.parametrize("before", ["absent", "with a file"])
def test_a_refusal_leaves_out_as_it_was(case, before, tmp_path, monkeypatch):
    argv, message = REFUSALS[case]
    out = tmp_path / "out"
    if before == "with a file":
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    snapshot = _snapshot(out) if out.exists() else None
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # main installs its one-line warnings
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--out", str(out)])
    line = str(exit_.value.code)
    assert "\n" not in line and message in line, line
    if snapshot is None:
        assert not out.exists()
    else:
        assert _snapshot(out) == snapshot


def test_claims_of_a_folder_that_is_not_one_writes_no_json(tmp_path, monkeypatch):
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    with pytest.raises(SystemExit) as exit_:
        main(["claims", str(tmp_path / "nothing"), "--json", str(tmp_path / "out" / "claims.json")])
    assert "not a compare folder" in str(exit_.value.code)
    assert not (tmp_path / "out").exists()
