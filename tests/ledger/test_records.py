"""Records a researcher trusts (issue 27): negatives files drop ungrammatical negatives by default and say how many
captions were left without one; config.json names the negative rules the file holds; checkpoints can leave the
optimizer state out (and then refuse to resume, saying why) and only the last N are kept; the batch size says whether
it is global or per process."""

import json
from pathlib import Path

import pytest
import torch

from hierbench.recipes import recipe_run as J
from hierbench.data import real_data as RD
from hierbench.training import trainer as T
from hierbench.training.distributed import DistInfo
from hierbench.data.negatives import NEGCLIP_RULES
from hierbench.data.sources import WorldData
from hierbench.training.trainer import TrainConfig, read_metrics

HIER = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "hierarcaps"
needs_real = pytest.mark.skipif(not (HIER / "hierarcaps_test.csv").is_file(), reason="../shared/data/hierarcaps absent")
CAPS = [
    "a man riding a red horse on the beach",
    "two dogs playing with a ball",
    "a small cat on a wooden table",
    "an apple on a plate",
    "hello",
    "the big red bus next to a small white car",
]


# ---- negatives ----------------------------------------------------------------------------------------------------
def test_ungrammatical_negatives_dropped_by_default(tmp_path):
    lines = []
    st = RD.generate_negatives(CAPS, tmp_path / "n.jsonl", "degla", tagger=None, log=lines.append)
    kept = RD.generate_negatives(CAPS, tmp_path / "k.jsonl", "degla", tagger=None, keep_ungrammatical=True)
    assert st["kept_ungrammatical"] is False and kept["kept_ungrammatical"] is True
    dropped = sum(r.get("rejected_ungrammatical", 0) for r in st["by_rule"].values())
    assert dropped > 0 and sum(r.get("ungrammatical", 0) for r in kept["by_rule"].values()) == dropped
    for text in (t for ts in RD.load_negatives(tmp_path / "n.jsonl").values() for t in ts):
        assert RD.looks_grammatical(text)
    for r in st["by_rule"].values():
        assert r.get("ungrammatical", 0) == 0 and r.get("grammatical", 0) == r.get("produced", 0)
    assert st["captions_without_negatives"] >= 1  # "hello": nothing to swap, replace or reshuffle
    assert len(lines) == 1 and f"{st['captions_without_negatives']} caption(s) left without a negative" in lines[0]
    assert f"{dropped} ungrammatical negative(s) dropped" in lines[0]


def test_negative_rules_of_a_file(tmp_path):
    RD.generate_negatives(CAPS, tmp_path / "n.jsonl", "negclip", tagger=None)
    rules = RD.negative_rules(tmp_path / "n.jsonl")
    assert rules and set(rules) <= set(NEGCLIP_RULES)
    with pytest.raises(FileNotFoundError, match="hierbench negatives"):
        RD.negative_rules(tmp_path / "missing.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"caption": "a", "negatives": []}\n{oops\n')
    with pytest.raises(RD.DataFormatError, match="line 2"):
        RD.negative_rules(tmp_path / "bad.jsonl")


@needs_real
def test_real_run_records_the_files_rule_names(tmp_path):
    from hierbench.data.loaders import load_hierarcaps

    items = load_hierarcaps(HIER / "hierarcaps_test.csv", HIER / "test_imgs")[:8]
    kp = {
        "images": [
            {
                "split": "train",
                "filename": it.image_path.name,
                "filepath": "",
                "cocoid": k,
                "sentences": [{"raw": c} for c in it.chain],
            }
            for k, it in enumerate(items)
        ]
    }
    (tmp_path / "kp.json").write_text(json.dumps(kp))
    RD.generate_negatives([c for it in items for c in it.chain], tmp_path / "neg.jsonl", "negclip", tagger=None)
    data = RD.RealData(
        f"coco:{tmp_path / 'kp.json'}", image_root=items[0].image_path.parent, negatives=tmp_path / "neg.jsonl"
    )
    res = J.train_recipe(
        "negclip",
        tmp_path / "run",
        data=data,
        arch="real-tiny",
        steps=1,
        batch_size=4,
        quiet=True,
        save_optimizer=False,
    )
    cfg = json.loads(res.config_path.read_text())
    assert cfg["negative_types"] == RD.negative_rules(tmp_path / "neg.jsonl")
    assert set(cfg["negative_types"]) <= set(NEGCLIP_RULES) and not {"swap_obj", "swap_att"} & set(
        cfg["negative_types"]
    )
    # a short real run without optimizer state: the checkpoint is the weights (+ a small state file), not 3x them
    ck = T.latest_checkpoint(res.run_dir)
    assert (ck / "state.pt").stat().st_size < 0.05 * (ck / "model.safetensors").stat().st_size


# ---- checkpoints --------------------------------------------------------------------------------------------------
def _world(tmp_path, **over):
    return dict(
        data=WorldData(n_train=16, cache_dir=tmp_path / "cache"),
        arch="world-debug",
        steps=4,
        batch_size=8,
        log_every=1,
        quiet=True,
        **over,
    )


def test_keep_last_checkpoints_and_optimizer_state(tmp_path):
    with_opt = J.train_recipe("clip", tmp_path / "a", ckpt_every=1, keep_checkpoints=2, **_world(tmp_path))
    without = J.train_recipe(
        "clip", tmp_path / "b", ckpt_every=1, keep_checkpoints=2, save_optimizer=False, **_world(tmp_path)
    )
    for r in (with_opt, without):
        assert [p.name for p in T.list_checkpoints(r.run_dir)] == ["step-00000003", "step-00000004"]
    size = lambda r: (T.latest_checkpoint(r.run_dir) / "state.pt").stat().st_size
    assert size(without) < size(with_opt) / 3
    assert torch.load(T.latest_checkpoint(without.run_dir) / "state.pt", weights_only=True)["optimizer"] is None
    # identical numbers: leaving the optimizer state out of the files changes nothing in the run
    assert [m["loss"] for m in read_metrics(with_opt.run_dir)] == [m["loss"] for m in read_metrics(without.run_dir)]


def test_resume_without_optimizer_state_is_refused(tmp_path):
    kw = _world(tmp_path, save_optimizer=False)
    J.train_recipe("clip", tmp_path / "r", stop_at=2, **kw)
    with pytest.raises(ValueError, match=r"saved without optimizer state \(save_optimizer=False\).*init_checkpoint="):
        J.train_recipe("clip", tmp_path / "r", resume=True, **kw)
    # kept optimizer state (the default): the last checkpoint resumes exactly
    kw = _world(tmp_path)
    full = J.train_recipe("clip", tmp_path / "full", **kw)
    J.train_recipe("clip", tmp_path / "cut", stop_at=2, **kw)
    res = J.train_recipe("clip", tmp_path / "cut", resume=True, **{**kw, "save_optimizer": False})  # free to change
    assert [m["loss"] for m in read_metrics(full.run_dir)] == [m["loss"] for m in read_metrics(res.run_dir)]


# ---- batch size: global or per process ----------------------------------------------------------------------------
def test_batch_scope_recorded_and_printed(tmp_path):
    lines = []
    res = J.train_recipe("clip", tmp_path / "p", batch_scope="process", log=lines.append, **_world(tmp_path))
    cfg = json.loads(res.config_path.read_text())
    assert (cfg["batch_size"], cfg["batch_scope"], cfg["global_batch_size"], cfg["world_size"]) == (8, "process", 8, 1)
    assert "batch 8 per process" in lines[0] and "precision fp32" in lines[0]
    lines.clear()
    J.train_recipe("clip", tmp_path / "g", log=lines.append, **_world(tmp_path))
    assert "batch 8 global" in lines[0]
    with pytest.raises(ValueError, match="batch_scope"):
        TrainConfig(batch_scope="local")


def test_per_process_batch_under_two_ranks():
    "open_clip's convention: --batch-size 4 on 2 processes is a global batch of 8, each rank holding its own 4."
    data = list(range(40))
    cfg = TrainConfig(batch_size=4, batch_scope="process", seed=0)
    glob = T.replace(cfg, batch_size=cfg.batch_size * 2, batch_scope="global")  # what `train` builds for 2 ranks
    got = [T._Batches(data, glob, lambda xs: xs, DistInfo(rank=r, world_size=2))(0) for r in (0, 1)]
    assert [len(g) for g in got] == [4, 4] and sorted(got[0] + got[1]) == sorted(T.batch_indices(0, 40, 8, 0).tolist())
