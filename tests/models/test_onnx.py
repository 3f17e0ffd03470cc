"""ONNX towers (`hierbench export --format onnx`, `eval --scorer onnx:DIR`): onnxruntime equals torch within 1e-4 on a
batch, for a world run (word tokenizer, Lorentz head) and a ViT with open_clip's tokenizer; the benchmarks score the
same from the ONNX files as from the torch model. Skipped without the [onnx] extra."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from hierbench.cli.parser import main
from hierbench.recipes.recipe_run import train_recipe
from hierbench.models.family import create_model, load_model, save_model
from hierbench.models.onnx_export import ONNX_FORMAT, OnnxScorer, export_onnx, read_onnx_config
from hierbench.data.sources import WorldData
from hierbench.world import scenes as world

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
TOL = 1e-4  # the bound on |onnxruntime − torch| per embedding coordinate
METRIC_TOL = 1e-5  # eval metrics from the ONNX files vs the torch model: accuracies and recalls come out identical;
# an AUC over ~10^5 angle pairs may flip one near-tied pair (measured: 4e-6), norms differ by float rounding


@pytest.fixture(scope="module")
def world_run(tmp_path_factory):
    "A world-debug MERU run: a few steps, so the embeddings are not the initial ones."
    out = tmp_path_factory.mktemp("run") / "meru"
    train_recipe(
        "meru",
        out,
        WorldData(n_train=64, cache_dir=False),
        arch="world-debug",
        steps=3,
        batch_size=16,
        log=lambda *a: None,
    )
    return out


@pytest.fixture(scope="module")
def world_export(world_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx") / "meru-onnx"
    main(["export", str(world_run), "--format", "onnx", "--out", str(out)])
    return out


def _ort(folder, kind, x):
    import onnxruntime as ort

    cfg = json.loads((Path(folder) / "config.json").read_text())
    sess = ort.InferenceSession(str(Path(folder) / cfg[kind]["file"]), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {cfg[kind]["input"]: x})))


def test_world_run_exports_and_onnxruntime_equals_torch(world_run, world_export):
    cfg = read_onnx_config(world_export)
    model = load_model(world_run / "model.safetensors").eval()
    assert cfg["format"] == ONNX_FORMAT and cfg["geometry"] == "lorentz" and cfg["embed_dim"] == model.embed_dim
    assert cfg["curvature"] == float(model.head.curv) and cfg["tokenizer"]["kind"] == "hierbench-words"
    ws = world.build_split("test-iid", 7, cache_dir=False)  # real world images and captions, batch of 7
    mean, std = np.array(cfg["preprocessing"]["mean"]), np.array(cfg["preprocessing"]["std"])
    pixels = (
        ((ws.images / 255.0 - mean) / std).transpose(0, 3, 1, 2).astype(np.float32)
    )  # config.json's recipe, no hierbench
    texts = [c for ch in ws.chains for c in ch]
    ids = model.tokenize(texts).numpy()
    img, txt = _ort(world_export, "image", pixels), _ort(world_export, "text", ids)
    with torch.no_grad():
        ref_img, ref_txt = model.encode_image(torch.from_numpy(pixels)).numpy(), model.encode_text(texts).numpy()
        ref_feat = model.text_features(texts).numpy()
    diffs = {
        "image": np.abs(img["image_embeds"] - ref_img).max(),
        "text": np.abs(txt["text_embeds"] - ref_txt).max(),
        "features": np.abs(txt["text_features"] - ref_feat).max(),
    }
    assert max(diffs.values()) <= TOL, diffs
    # the hyperboloid output: time first, on the hyperboloid of curvature −c
    h = img["embedding_hyperboloid"].astype(np.float64)
    c = cfg["curvature"]
    np.testing.assert_allclose(h[:, 0] ** 2 - (h[:, 1:] ** 2).sum(1), 1 / c, rtol=1e-5)
    assert max(cfg["check"]["max_abs_diff"].values()) <= TOL


def test_world_resnet_tower_exports(tmp_path):
    "world-tiny, the default world architecture: a ResNet image tower (BatchNorm, channels-last) + the word tokenizer."
    model = create_model("world-tiny", geometry="lorentz").eval()
    res = export_onnx(model, tmp_path / "onnx")
    assert max(res["max_abs_diff"].values()) <= TOL, res["max_abs_diff"]


def test_vit_with_open_clip_tokenizer_exports(tmp_path):
    "A ViT with open_clip's byte-pair tokenizer and CLIP normalisation (real-tiny), Euclidean and Lorentz heads."
    for geometry in ("euclidean", "lorentz"):
        model = create_model("real-tiny", geometry=geometry).eval()
        res = export_onnx(model, tmp_path / geometry)
        assert max(res["max_abs_diff"].values()) <= TOL, res["max_abs_diff"]
        sc = OnnxScorer(tmp_path / geometry)
        texts = ["a photo of a dog", "two red buses parked on a street next to a tree", ""]
        x = torch.randn(5, 3, 64, 64)
        with torch.no_grad():
            assert (sc.encode_text(texts) - model.encode_text(texts)).abs().max() <= TOL
            assert (sc.encode_image(x) - model.encode_image(x)).abs().max() <= TOL
        assert sc.tokenize(texts).equal(model.tokenize(texts)) and sc.image_mean == model.image_mean


def _metrics(path):
    return {
        k: v
        for k, v in json.loads(Path(path).read_text()).items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def test_eval_from_onnx_equals_eval_from_torch(world_run, world_export, tmp_path):
    a, b = tmp_path / "torch.json", tmp_path / "onnx.json"
    main(["eval", "--scorer", f"hierbench:{world_run}", "--n-test", "40", "--json", str(a)])
    main(["eval", "--scorer", f"onnx:{world_export}", "--n-test", "40", "--json", str(b)])
    ma, mb = _metrics(a), _metrics(b)
    assert ma.keys() == mb.keys() and len(ma) > 20
    diff = {k: abs(ma[k] - mb[k]) for k in ma if not (math.isnan(ma[k]) and math.isnan(mb[k]))}
    assert max(diff.values()) <= METRIC_TOL, sorted(diff.items(), key=lambda kv: -kv[1])[:5]
    for k in ma:  # accuracies, recalls and AUCs rank embeddings: equal, not merely close
        if k.startswith(("zs_acc/", "recall", "comp_acc")):
            assert ma[k] == mb[k], k


@pytest.mark.skipif(
    not (SHARED / "hierarcaps" / "test_imgs").is_dir(), reason="../shared/data is absent (a user's clone)"
)
def test_hierarcaps_from_onnx_equals_torch_with_photos(tmp_path):
    "Real photos through config.json's preprocessing (open_clip's transform): HierarCaps' metrics agree."
    model = create_model("real-tiny", geometry="lorentz").eval()
    save_model(model, tmp_path / "m" / "model.safetensors")
    export_onnx(model, tmp_path / "onnx")
    out = {}
    for name, spec in (("torch", f"hierbench:{tmp_path / 'm'}"), ("onnx", f"onnx:{tmp_path / 'onnx'}")):
        out[name] = tmp_path / f"{name}.json"
        main(
            [
                "eval",
                "--scorer",
                spec,
                "--no-world",
                "--hierarcaps",
                str(SHARED / "hierarcaps" / "hierarcaps_test.csv"),
                "--limit",
                "24",
                "--json",
                str(out[name]),
            ]
        )
    ma, mb = _metrics(out["torch"]), _metrics(out["onnx"])
    assert ma.keys() == mb.keys() and ma
    assert max(abs(ma[k] - mb[k]) for k in ma) <= METRIC_TOL, (ma, mb)


def test_bad_folders_are_one_line_errors(tmp_path, world_run):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        OnnxScorer(tmp_path)
    (tmp_path / "config.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="expected 'hierbench-onnx/1'"):
        OnnxScorer(tmp_path)
    (tmp_path / "keep.txt").write_text("a user's file")
    with pytest.raises(SystemExit, match="exists and is not an earlier result"):
        main(["export", str(world_run), "--format", "onnx", "--out", str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "keep.txt"]


def _cut(name, keep):
    def damage(folder):
        (folder / name).write_bytes((folder / name).read_bytes()[:keep])

    return damage


def _config(mutate):
    def damage(folder):
        cfg = json.loads((folder / "config.json").read_text())
        mutate(cfg)
        (folder / "config.json").write_text(json.dumps(cfg))

    return damage


@pytest.mark.parametrize(
    "damage, says",
    [
        (_cut("image.onnx", 3000), "{d}/image.onnx is not a readable ONNX model (InvalidProtobuf: "),
        (
            lambda d: (d / "image.onnx").write_bytes(b"\x89PNG not a graph" * 50),
            "{d}/image.onnx is not a readable ONNX model (",
        ),
        (_cut("text.onnx", 500), "{d}/text.onnx is not a readable ONNX model ("),
        (_cut("text.onnx", 0), "{d}/text.onnx is not a readable ONNX model (InvalidArgument: No graph was found"),
        (lambda d: (d / "image.onnx").unlink(), "{d}/image.onnx is missing (config.json's image.file)"),
        (
            lambda d: (d / "text.onnx").write_bytes((d / "image.onnx").read_bytes()),
            "{d}/text.onnx is not the text tower config.json describes",
        ),
        (_cut("config.json", 200), "{d}/config.json: not JSON ("),
        (lambda d: (d / "config.json").write_bytes(b"\xff\xfe\x00 binary"), "{d}/config.json: not JSON ("),
        (
            _config(lambda c: c["preprocessing"].pop("image_size")),
            "{d}/config.json, field 'preprocessing.image_size': missing or not int",
        ),
        (
            _config(lambda c: c["head"].update(log_curv="1")),
            "{d}/config.json, field 'head.log_curv': missing or not a number",
        ),
        (_config(lambda c: c.update(geometry="spherical")), "{d}/config.json, field 'geometry': 'spherical': expected"),
        (
            _config(lambda c: c["preprocessing"].update(image_size=32)),
            "{d}/image.onnx is not the image tower config.json describes",
        ),
    ],
)
def test_a_damaged_export_is_one_line_naming_its_file(world_export, tmp_path, damage, says):
    "Issue 46: a tower file cut short or overwritten ended in onnxruntime's InvalidProtobuf traceback."
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(world_export, bad)
    damage(bad)
    with pytest.raises(SystemExit) as e:
        main(["eval", "--scorer", f"onnx:{bad}", "--n-test", "8", "--json", str(tmp_path / "m.json")])
    msg = str(e.value.code)
    assert msg.startswith("hierbench eval: ") and "\n" not in msg and says.format(d=bad) in msg, msg
    assert not (tmp_path / "m.json").exists()
