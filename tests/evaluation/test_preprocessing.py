"""Preprocessing parity with open_clip on real, non-square COCO images: the input tensors hierbench feeds a tower are
bit-identical to open_clip's `preprocess`, and a random-init model's SugarCrepe verdicts equal a plain open_clip loop's
item for item (issue 27). The training transform is open_clip_train's. Random weights only: nothing is downloaded."""

import json
import re
from pathlib import Path

import numpy as np
import open_clip
import pytest
import torch
from PIL import Image

from hierbench.data import real_data as R
from hierbench.evaluation.benchmarks import score_choice_items
from hierbench.data.batch import CLIP_MEAN, CLIP_STD, ChoiceItem, image_to_tensor, load_image, open_clip_transform
from hierbench.evaluation.encoding import default_preprocess
from hierbench.models.family import create_model, resolve_architecture

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
IMGS = DATA / "hierarcaps" / "test_imgs"
needs_imgs = pytest.mark.skipif(
    not IMGS.is_dir(), reason="../shared/data/hierarcaps/test_imgs is absent (a user's clone)"
)


def crops(im: Image.Image) -> list[tuple[int, int, int, int]]:
    "Integer boxes: a 4:3 landscape, a 3:4 portrait and an odd-sized crop of `im` (all non-square)."
    w, h = im.size
    land = (0, 0, w, min(h, w * 3 // 4)) if w * 3 // 4 <= h else (0, 0, h * 4 // 3, h)
    pw = min(w, h * 3 // 4)
    port = ((w - pw) // 2, 0, (w - pw) // 2 + pw, min(h, pw * 4 // 3))
    odd = (3, 1, min(w, 3 + 2 * (min(w, h) // 2) + 37), min(h, 1 + 2 * (min(w, h) // 2) - 2))
    return [land, port, odd]


def coco_files(n: int) -> list[Path]:
    return sorted(IMGS.glob("*.jpg"))[:n]


# ---- the transform itself ---------------------------------------------------------------------------------------
def test_open_clip_transform_bad_inputs():
    with pytest.raises(ValueError, match="interpolation"):
        open_clip_transform(224, interpolation="nearest")
    with pytest.raises(ValueError, match="resize_mode"):
        open_clip_transform(224, resize_mode="pad")
    with pytest.raises(ValueError, match="positive int"):
        open_clip_transform(0)
    with pytest.raises(ValueError, match="positive int"):
        open_clip_transform(224.0)
    with pytest.raises(ValueError, match="3 values"):
        open_clip_transform(224, mean=(0.5, 0.5))
    with pytest.raises(TypeError, match="PIL image or uint8"):
        image_to_tensor("x.jpg", 224)
    assert open_clip_transform(224, [0.5] * 3, [0.5] * 3) is open_clip_transform(224, (0.5,) * 3, (0.5,) * 3)  # cached


def test_long_side_is_torchvisions_int_rule():
    "640x480 at 224: the long side is int(224*640/480) = 298 (rounding gives 299); a synthetic gradient shows it."
    x = np.tile(np.arange(640, dtype=np.float64) / 639 * 255, (480, 1)).astype(np.uint8)
    im = Image.fromarray(np.stack([x, x[:, ::-1], np.full_like(x, 7)], -1))
    ref = open_clip.image_transform(224, is_train=False)(im)
    assert torch.equal(image_to_tensor(im, 224), ref)
    assert torch.equal(image_to_tensor(np.asarray(im), 224), ref)  # an array goes the same way
    rounded = im.resize((299, 224), Image.BICUBIC).crop((37, 0, 261, 224))  # the old rule: round() and floor offset
    old = (
        torch.from_numpy(np.asarray(rounded).copy()).permute(2, 0, 1).float() / 255
        - torch.tensor(CLIP_MEAN)[:, None, None]
    ) / torch.tensor(CLIP_STD)[:, None, None]
    assert not torch.equal(old, ref)


def test_every_open_clip_architecture_gets_open_clips_preprocess_config():
    "open_clip builds `preprocess` for a built-in architecture from PreprocessCfg defaults + the tower's image size."
    defaults = open_clip.transform.PreprocessCfg()
    assert (defaults.interpolation, defaults.resize_mode, tuple(defaults.mean), tuple(defaults.std)) == (
        "bicubic",
        "shortest",
        CLIP_MEAN,
        CLIP_STD,
    )
    for name in open_clip.list_models():
        cfg = open_clip.get_model_config(name)
        assert "preprocess_cfg" not in cfg, f"{name}: open_clip now ships a preprocess_cfg; hierbench must carry it"
        if "multimodal_cfg" in cfg:
            continue  # captioners: refused by hierbench
        arch = resolve_architecture(name)
        assert arch["vision_cfg"].get("image_size", 224) == cfg["vision_cfg"].get("image_size", 224), name


# ---- real COCO images -------------------------------------------------------------------------------------------
@needs_imgs
@pytest.mark.parametrize("arch,size", [("ViT-B-32", 224), ("ViT-B-32-256", 256)])
def test_inputs_equal_open_clip_preprocess_on_real_crops(arch, size):
    _, _, preprocess = open_clip.create_model_and_transforms(arch, pretrained=None)
    model = create_model(arch)
    assert model.image_size == size
    prep = default_preprocess(model)  # what hierbench's evaluation uses
    n = 0
    for f in coco_files(8):
        im = load_image(f)
        for box in crops(im):
            item = ChoiceItem(f, ("a", "b"), 0, box=box)
            ref = preprocess(Image.open(f).convert("RGB").crop(box))
            assert ref.shape == (3, size, size)
            assert torch.equal(prep(item.image()), ref), (f.name, box)
            assert torch.equal(item.image_tensor(size), ref), (f.name, box)
            n += 1
    assert n == 24


@needs_imgs
def test_training_transform_is_open_clip_trains():
    _, preprocess_train, _ = open_clip.create_model_and_transforms("ViT-B-32", pretrained=None)
    model = create_model("ViT-B-32")
    ours = R.train_transform(model)
    for f in coco_files(4):
        im = load_image(f)
        torch.manual_seed(5)
        a = ours(im)
        torch.manual_seed(5)
        b = preprocess_train(im)
        assert torch.equal(a, b), f.name
    assert torch.equal(R.train_transform(model, is_train=False)(im), image_to_tensor(im, 224))


def sugarcrepe_on_shipped_images(n_items: int) -> list[ChoiceItem]:
    "Real SugarCrepe items whose COCO image ships with HierarCaps, each cropped to landscape / portrait / odd."
    by_id = {int(re.search(r"(\d+)\.jpg$", p.name).group(1)): p for p in IMGS.glob("*.jpg")}
    out = []
    for subset in ("replace_att", "swap_obj", "add_obj"):
        f = DATA / "sugarcrepe" / f"{subset}.json"
        if not f.is_file():
            pytest.skip(f"{f} absent")
        for key, rec in json.loads(f.read_text()).items():
            p = by_id.get(int(re.search(r"(\d+)\.jpg$", rec["filename"]).group(1)))
            if p is None:
                continue
            box = crops(load_image(p))[len(out) % 3]
            out.append(
                ChoiceItem(
                    p, (rec["caption"], rec["negative_caption"]), 0, box=box, subset=subset, key=f"{subset}/{key}"
                )
            )
            if len(out) % (n_items // 3) == 0:
                break
    return out[:n_items]


@needs_imgs
def test_sugarcrepe_verdicts_equal_a_plain_open_clip_loop():
    torch.manual_seed(0)
    model = create_model("ViT-B-32").eval()
    _, _, preprocess = open_clip.create_model_and_transforms("ViT-B-32", pretrained=None)
    tokenizer = open_clip.get_tokenizer("ViT-B-32")
    items = sugarcrepe_on_shipped_images(36)
    assert len(items) == 36 and len({it.subset for it in items}) == 3
    df = score_choice_items(model, items, batch_size=16)
    clip = model.clip
    plain = []
    with torch.no_grad():
        for it in items:  # the loop a user writes with open_clip
            x = preprocess(Image.open(it.image_path).convert("RGB").crop(it.box))[None]
            img = clip.encode_image(x, normalize=True)
            txt = clip.encode_text(tokenizer(list(it.options)), normalize=True)
            s = (img @ txt.T)[0].double().numpy()
            plain.append((s, bool(s[0] > s[1])))
    np.testing.assert_allclose(np.stack(df.scores.tolist()), np.stack([s for s, _ in plain]), atol=2e-5)
    assert df.ok.tolist() == [v for _, v in plain]  # item for item
