"""The real-data training path end to end on the real COCO images of ../shared/data/hierarcaps (skipped when absent):
a Karpathy-format file and a GRIT-style file built over them, hard negatives written once by `hierbench negatives`,
fine-tunes from a saved checkpoint through `hierbench train --data`, WebDataset shards read under 2 ranks x 2 workers,
exact resume mid-epoch, and the open_clip export loaded back by open_clip."""

import json
import math
from pathlib import Path

import pytest
import torch
from PIL import Image

from hierbench.data import real_data as RD
from hierbench.cli.parser import main
from hierbench.data.batch import DataFormatError, collate_batch
from hierbench.data.loaders import load_hierarcaps
from hierbench.training.distributed import DistInfo
from hierbench.training.trainer import TrainConfig, _Batches, read_metrics

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "hierarcaps"
pytestmark = pytest.mark.skipif(
    not (SHARED / "hierarcaps_test.csv").exists(), reason="../shared/data/hierarcaps not present"
)
N_IMAGES = 24


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    "Karpathy + GRIT files over the first real images, their negatives and paraphrases, and a 2-step CLIP checkpoint."
    d = tmp_path_factory.mktemp("real")
    items = load_hierarcaps(SHARED / "hierarcaps_test.csv", SHARED / "test_imgs")[:N_IMAGES]
    root = items[0].image_path.parent
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
    (d / "karpathy.json").write_text(json.dumps(kp))
    lines = []
    for k, it in enumerate(items):
        w, h = Image.open(it.image_path).size
        cap = f"{it.chain[0]} : {it.chain[-1]}"
        spans = [
            [0, len(it.chain[0]), 0.1, 0.1, 0.9, 0.9, 0.9],  # the general phrase, a large box
            [0, len(it.chain[0]), 0.0, 0.0, 10 / w, 10 / h, 0.5],
        ]  # a 10 px box: dropped (< 32 px)
        lines.append(
            json.dumps(
                {
                    "key": str(k),
                    "image_path": it.image_path.name,
                    "caption": cap,
                    "width": w,
                    "height": h,
                    "noun_chunks": spans,
                }
            )
        )
    (d / "grit.jsonl").write_text("\n".join(lines) + "\n")
    caps = [c for it in items for c in it.chain]
    (d / "para.json").write_text(json.dumps({c: f"there is {c}" for c in caps}))
    assert main(
        [
            "negatives",
            "--data",
            f"coco:{d / 'karpathy.json'}",
            "--image-root",
            str(root),
            "--jsonl",
            str(d / "negs.jsonl"),
            "--tagger",
            "lexicon",
        ]
    ) in (None, 0)
    base = ["--image-root", str(root), "--arch", "real-tiny", "--batch-size", "8", "--log-every", "1"]
    main(["train", "clip", "--data", f"coco:{d / 'karpathy.json'}", "--steps", "2", "--out", str(d / "clip"), *base])
    return dict(d=d, root=root, items=items, base=base)


def test_negatives_file_and_statistics(real):
    negs = RD.load_negatives(real["d"] / "negs.jsonl")
    stats = json.loads((real["d"] / "negs.jsonl.stats.json").read_text())
    caps = {c for it in real["items"] for c in it.chain}
    assert set(negs) == caps and stats["captions"] == len(caps)
    assert set(stats["by_rule"]) == {
        "reshuffle",
        "swap_nouns",
        "swap_adjectives",
        "replace_adjectives",
        "replace_nouns",
    }
    assert sum(r.get("produced", 0) for r in stats["by_rule"].values()) == sum(len(v) for v in negs.values()) > 0
    for r in stats["by_rule"].values():
        assert r.get("grammatical", 0) + r.get("ungrammatical", 0) == r.get("produced", 0)


@pytest.mark.parametrize("recipe,lr", [("negclip", 1e-6), ("degla", 1e-6), ("read", 1e-5)])
def test_finetune_from_checkpoint_on_real_images(real, recipe, lr):
    d = real["d"]
    out = d / recipe
    main(
        [
            "train",
            recipe,
            "--data",
            f"coco:{d / 'karpathy.json'}",
            "--init-checkpoint",
            str(d / "clip"),
            "--negatives",
            str(d / "negs.jsonl"),
            "--paraphrases",
            str(d / "para.json"),
            "--decoder-steps",
            "20",
            "--steps",
            "2",
            "--out",
            str(out),
            *real["base"],
        ]
    )
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["lr"] == lr and cfg["steps"] == 2 and cfg["data"].startswith("coco:") and cfg["n_train"] == N_IMAGES
    assert cfg["init_checkpoint"].endswith("model.safetensors") and (out / "model.safetensors").is_file()
    rows = read_metrics(out)
    assert len(rows) == 2 and all(math.isfinite(r["loss"]) for r in rows)
    assert {"degla": "distill", "read": "recon", "negclip": "contrastive"}[recipe] in rows[-1]


@pytest.mark.parametrize("recipe", ["hycoclip", "argent"])
def test_grounded_pretraining_on_real_images(real, recipe):
    out = real["d"] / recipe
    main(
        [
            "train",
            recipe,
            "--data",
            f"grit:{real['d'] / 'grit.jsonl'}",
            "--steps",
            "2",
            "--out",
            str(out),
            *real["base"],
        ]
    )
    rows = read_metrics(out)
    assert len(rows) == 2 and all(math.isfinite(r["loss"]) for r in rows) and "curvature" in rows[-1]
    assert {"hycoclip": "entailment", "argent": "adaent"}[recipe] in rows[-1]
    recs = RD.grit_records(real["d"] / "grit.jsonl", real["root"])
    assert all(len(r.phrases) == 1 for r in recs)  # the 10 px box is dropped


def test_coco_without_negatives_is_refused(real):
    "One line that names the command writing the file, not a traceback; nothing is written."
    with pytest.raises(SystemExit, match="hierbench negatives --data"):
        main(
            [
                "train",
                "negclip",
                "--data",
                f"coco:{real['d'] / 'karpathy.json'}",
                "--steps",
                "1",
                "--out",
                str(real["d"] / "noneg"),
                *real["base"],
            ]
        )
    assert not (real["d"] / "noneg").exists()


def _write_shards(real, folder: Path, per_shard: int = 12) -> str:
    import webdataset as wds

    folder.mkdir(exist_ok=True)
    for s in range(len(real["items"]) // per_shard):
        with wds.TarWriter(str(folder / f"shard-{s:03d}.tar")) as w:
            for k, it in enumerate(real["items"][s * per_shard : (s + 1) * per_shard]):
                w.write({"__key__": f"{s:03d}{k:05d}", "jpg": it.image_path.read_bytes(), "txt": it.chain[-1]})
    return str(folder / "shard-{000..001}.tar")


def test_shards_every_sample_once_per_epoch_over_2_ranks_and_2_workers(real, tmp_path):
    import torchvision.transforms as T

    pattern = _write_shards(real, tmp_path / "wds")
    ds = RD.ImageTextDataset(RD.ShardRecords(pattern), T.Compose([T.Resize((32, 32)), T.ToTensor()]))
    assert len(ds) == N_IMAGES
    cfg = TrainConfig(steps=100, batch_size=8, seed=3)
    steps_per_epoch = N_IMAGES // 8
    for epoch in range(2):
        seen = []
        for rank in range(2):
            b = _Batches(ds, cfg, collate_batch, DistInfo(rank=rank, world_size=2))
            for batch in b.stream(epoch * steps_per_epoch, (epoch + 1) * steps_per_epoch, num_workers=2):
                seen += batch["index"].tolist()
        assert sorted(seen) == list(range(N_IMAGES)), epoch  # each sample exactly once per epoch


def test_shard_training_resumes_at_the_same_sample(real, tmp_path):
    pattern = _write_shards(real, tmp_path / "wds")
    args = ["train", "clip", "--data", f"wds:{pattern}", "--steps", "5", "--ckpt-every", "1", *real["base"]]
    main([*args, "--out", str(tmp_path / "full")])
    from hierbench.recipes.recipe_run import train_recipe

    train_recipe(
        "clip",
        tmp_path / "cut",
        RD.RealData(f"wds:{pattern}", image_root=str(real["root"])),
        arch="real-tiny",
        steps=5,
        # "killed" after step 2 of an epoch of 3
        batch_size=8,
        log_every=1,
        ckpt_every=1,
        stop_at=2,
    )
    main([*args, "--out", str(tmp_path / "cut"), "--resume"])
    full, cut = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "cut")
    assert [r["step"] for r in cut] == [1, 2, 3, 4, 5]
    assert [r["loss"] for r in cut] == [r["loss"] for r in full]


def test_export_loads_in_open_clip_with_identical_embeddings(real, tmp_path):
    import open_clip
    from hierbench.models.family import load_model

    main(["export", str(real["d"] / "clip"), "--out", str(tmp_path), "--name", "hb-real-tiny-test"])
    open_clip.add_model_config(tmp_path / "hb-real-tiny-test.json")
    oc = open_clip.create_model("hb-real-tiny-test", pretrained=str(tmp_path / "hb-real-tiny-test.safetensors")).eval()
    ours = load_model(real["d"] / "clip" / "model.safetensors").eval()
    x = torch.randn(3, 3, 64, 64)
    tokens = ours.tokenize(["a dog on a sofa", "two plates", "a red bus"])
    with torch.no_grad():
        torch.testing.assert_close(oc.encode_image(x), ours.image_features(x))
        torch.testing.assert_close(oc.encode_text(tokens), ours.text_features(tokens))


def test_bad_real_inputs_name_the_record(real, tmp_path):
    bad = tmp_path / "negs.jsonl"
    bad.write_text(json.dumps({"caption": "a cat", "negatives": [{"rule": "swap", "text": "a  Cat"}]}) + "\n")
    with pytest.raises(DataFormatError, match="line 1.*equal to its caption"):
        RD.load_negatives(bad)
    one = RD.ImageTextRecord("7", lambda: Image.new("RGB", (40, 40)), ("only caption",), (), "mine.json")
    ds = RD.ImageTextDataset([one], lambda im: torch.zeros(3, 4, 4), ("images", "captions", "alternatives"))
    with pytest.raises(DataFormatError, match="mine.json.*'7'.*another caption"):
        ds[0]
    missing = RD.ImageTextRecord(
        "8",
        lambda: __import__("hierbench.data.batch").data.load_image(tmp_path / "nope.jpg"),
        ("a cap",),
        (),
        "ann.json",
    )
    with pytest.raises(DataFormatError, match="ann.json.*'8'.*image"):
        RD.ImageTextDataset([missing], lambda im: im)[0]


def test_eval_every_logs_benchmark_metrics_during_training(real):
    out = real["d"] / "clip-eval"
    main(
        [
            "train",
            "clip",
            "--data",
            f"coco:{real['d'] / 'karpathy.json'}",
            "--steps",
            "2",
            "--out",
            str(out),
            "--eval-every",
            "2",
            "--eval-hierarcaps",
            str(SHARED / "hierarcaps_test.csv"),
            "--eval-image-root",
            str(SHARED / "test_imgs"),
            "--eval-limit",
            "16",
            *real["base"],
        ]
    )
    rows = read_metrics(out)
    evals = [r for r in rows if any(k.startswith("eval/") for k in r)]
    assert [r["step"] for r in evals] == [2]
    assert math.isfinite(evals[0]["eval/d_corr/hierarcaps"])


def test_hierarcaps_chains_as_training_captions(real, tmp_path):
    out = tmp_path / "meru-hc"
    main(
        [
            "train",
            "meru",
            "--data",
            f"hierarcaps:{SHARED / 'hierarcaps_test.csv'}",
            "--steps",
            "2",
            "--out",
            str(out),
            "--image-root",
            str(SHARED / "test_imgs"),
            "--arch",
            "real-tiny",
            "--batch-size",
            "8",
            "--log-every",
            "1",
        ]
    )
    assert len(read_metrics(out)) == 2
    recs = RD.real_records(f"hierarcaps:{SHARED / 'hierarcaps_test.csv'}", SHARED / "test_imgs")
    assert len(recs) == 1000 and len(recs[0].captions) == 4


def test_paraphrases_command_then_read_trains_on_them(real, capsys):
    "`hierbench paraphrases` writes the file `train read --paraphrases` reads; its statistics say what made it."
    d = real["d"]
    main(
        [
            "paraphrases",
            "--data",
            f"coco:{d / 'karpathy.json'}",
            "--image-root",
            str(real["root"]),
            "--jsonl",
            str(d / "para_rules.jsonl"),
        ]
    )
    stats = json.loads((d / "para_rules.jsonl.stats.json").read_text())
    lines = [json.loads(l) for l in (d / "para_rules.jsonl").read_text().splitlines()]
    assert lines and all(l["paraphrase"].strip() and l["paraphrase"] != l["caption"] for l in lines)
    assert "not a language model" in json.dumps(stats)
    out = d / "read_rules"
    main(
        [
            "train",
            "read",
            "--data",
            f"coco:{d / 'karpathy.json'}",
            "--init-checkpoint",
            str(d / "clip"),
            "--negatives",
            str(d / "negs.jsonl"),
            "--paraphrases",
            str(d / "para_rules.jsonl"),
            "--decoder-steps",
            "5",
            "--steps",
            "1",
            "--out",
            str(out),
            *real["base"],
        ]
    )
    assert (out / "model.safetensors").is_file()


def test_read_without_paraphrases_says_what_to_run(real):
    with pytest.raises(SystemExit, match="hierbench paraphrases"):
        main(
            [
                "train",
                "read",
                "--data",
                f"coco:{real['d'] / 'karpathy.json'}",
                "--negatives",
                str(real["d"] / "negs.jsonl"),
                "--steps",
                "1",
                "--out",
                str(real["d"] / "nopara"),
                *real["base"],
            ]
        )
    assert not (real["d"] / "nopara").exists()
