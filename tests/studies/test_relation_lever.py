"""tools/relation_lever.py: its arms differ in the two local-term weights only, all draw relation replacements
alone, and the script runs end to end (smoke preset) and resumes from what it scored."""

import importlib.util
import json
from pathlib import Path

import pytest

from hierbench.recipes.registry import recipe_fields

ROOT = Path(__file__).resolve().parents[2]


def _lever():
    spec = importlib.util.spec_from_file_location("relation_lever", ROOT / "tools" / "relation_lever.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_arms_differ_in_the_local_weights_only():
    lv = _lever()
    f = {arm: recipe_fields(lv.lever_recipe(w)) for arm, w in lv.ARMS.items()}
    control, lever = f["control"], f["lever"]
    diff = lambda a, b: {k for k in f[a] if f[a][k] != f[b][k]}
    assert diff("lever", "control") == {"weights.igc", "weights.tgc"}
    assert diff("igc", "control") == diff("lever", "tgc") == {"weights.igc"}
    assert diff("tgc", "control") == diff("lever", "igc") == {"weights.tgc"}
    assert (control["weights.igc"], lever["weights.igc"]) == (0.1, 1.0)
    assert control["negative_types"] == lever["negative_types"] == ("replace_rel",)
    # and DeGLA's own recipe is what the control starts from: the relation-only draw is the one change
    degla = recipe_fields("degla")
    assert {k for k in degla if degla[k] != control[k]} == {"negative_types"}


def test_the_script_runs_and_resumes(tmp_path, capsys):
    lv = _lever()
    args = [
        "--preset",
        "smoke",
        "--seeds",
        "2",
        "--steps",
        "3",
        "--n-train",
        "128",
        "--batch-size",
        "8",
        "--compare-dir",
        str(tmp_path),
    ]
    lv.main(args + ["--only", "0"])
    assert "the table waits" in capsys.readouterr().out
    lv.main(args)
    out = json.loads((tmp_path / "relation-lever" / "lever.json").read_text())
    assert sorted((r["arm"], r["seed"]) for r in out["runs"]) == sorted(
        (a, s) for a in ("clip", "control", "igc", "tgc", "lever") for s in (0, 1)
    )
    e = out["effects"]["lever - control"]["comp_acc/replace_rel"]
    assert e["low"] <= e["effect"] <= e["high"] and e["n"] == 2
    # the interaction is the difference of the two paired differences it names
    r = {(x["arm"], x["seed"]): x["comp_acc/replace_rel"] for x in out["runs"]}
    want = sum((r["lever", s] - r["tgc", s]) - (r["igc", s] - r["control", s]) for s in (0, 1)) / 2
    assert abs(out["interaction_replace_rel"]["effect"] - want) < 1e-12
    cfg = json.loads((tmp_path / "relation-lever" / "lever" / "seed1" / "config.json").read_text())
    assert cfg["steps"] == 3 and cfg["negative_types"] == ["replace_rel"]
    # a second call trains nothing: every run is read back from its score file
    lv.main(args)
    assert "seed 0 lever" not in capsys.readouterr().out
    # two arms: only the contrasts between arms that ran, and no interaction
    lv.main(args + ["--arms", "control,lever"])
    out = json.loads((tmp_path / "relation-lever" / "lever.json").read_text())
    assert set(out["effects"]) == {"lever - control", "control - clip", "lever - clip"}
    assert "interaction_replace_rel" not in out and {r["arm"] for r in out["runs"]} == {"clip", "control", "lever"}
    with pytest.raises(SystemExit):
        lv.main(args + ["--arms", "control,levr"])
    assert "unknown ['levr']" in capsys.readouterr().err
    # a score made with other settings is refused, not silently reused
    with pytest.raises(SystemExit, match="scored with"):
        lv.main([*args[:5], "4", *args[6:]])


# ---------------------------------------------------------------- tools/relation_pretrain.py
def _pretrain():
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    spec = importlib.util.spec_from_file_location("relation_pretrain", ROOT / "tools" / "relation_pretrain.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pretrain_arms_differ_from_clip_in_their_named_settings_only():
    from hierbench.ledger.budgets import BUDGETS
    from hierbench.models.family import resolve_architecture

    rp = _pretrain()
    std = BUDGETS["standard"]
    clip = rp.train_kwargs("clip", std)
    # plain CLIP is the compare job's call: quick/standard's schedule, model and scenes, plain batches
    assert clip == dict(
        preset=std.arch,
        steps=std.pretrain_steps,
        n_train=std.n_train,
        batch_size=std.batch_size,
        mirror_twins=False,
        top_caption_p=0.0,
    )
    for arm, change in rp.ARMS.items():
        kw = rp.train_kwargs(arm, std)
        assert {k for k in kw if kw[k] != clip[k]} == set(change), arm
    # the one model change is the readout
    a, b = resolve_architecture(rp.ARMS["flat"]["preset"]), resolve_architecture(clip["preset"])
    assert {k for k in set(a) | set(b) if a.get(k) != b.get(k)} == {"image_readout"}
    # the contrasts of the design: the readout alone, then twins with the caption weight, then the caption weight
    # alone, then the readout alone again (with twins and relational captions)
    diff = lambda a, b: {k for k in clip if rp.train_kwargs(a, std)[k] != rp.train_kwargs(b, std)[k]}
    assert [diff(a, b) for a, b in rp.CONTRASTS[:4]] == [
        {"preset"},
        {"mirror_twins", "top_caption_p"},
        {"top_caption_p"},
        {"preset"},
    ]
    assert rp.train_kwargs("flat+twins+top100", std)["top_caption_p"] == 1.0
    # spelled for train_recipe: the world's settings in one WorldData, the model as arch
    from hierbench.data.sources import WorldData

    call = rp.train_call(rp.train_kwargs("flat+twins+top30", std), False)
    assert call == dict(
        data=WorldData(n_train=std.n_train, cache_dir=False, mirror_twins=True, top_caption_p=0.3),
        arch="world-tiny-flat",
        steps=std.pretrain_steps,
        batch_size=std.batch_size,
    )


def test_pretrain_script_runs_and_resumes(tmp_path, capsys):
    rp = _pretrain()
    args = ["--preset", "smoke", "--seeds", "2", "--compare-dir", str(tmp_path), "--arms", "clip,flat+twins+top30"]
    rp.main(args + ["--only", "0"])
    assert "the tables wait" in capsys.readouterr().out
    rp.main(args)
    out = json.loads((tmp_path / "relation-pretrain" / "relation-pretrain.json").read_text())
    assert sorted((r["arm"], r["seed"]) for r in out["runs"]) == [
        ("clip", 0),
        ("clip", 1),
        ("flat+twins+top30", 0),
        ("flat+twins+top30", 1),
    ]
    e = out["effects"]["flat+twins+top30 - clip"]["comp_acc/replace_rel"]
    assert e["low"] <= e["effect"] <= e["high"] and e["n"] == 2
    cfg = json.loads((tmp_path / "relation-pretrain" / "flat+twins+top30" / "seed1" / "config.json").read_text())
    assert cfg["mirror_twins"] is True and cfg["top_caption_p"] == 0.3 and cfg["preset"] == "world-tiny-flat"
    assert set(out["learnability"]["clip"]) >= {"comp_acc/replace_rel", "i2t_R@5", "zs_acc/general"}
    rp.main(args)  # everything is read back: nothing trains
    assert "seed 0 flat+twins+top30" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        rp.main(args[:-1] + ["clip,flatt"])
    assert "unknown ['flatt']" in capsys.readouterr().err
