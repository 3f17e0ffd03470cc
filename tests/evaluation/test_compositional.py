"""The compositional families of issue 47 on small fixtures in their exact released layouts, built from the HierarCaps
COCO images of ../shared (skipped without it): each family's metrics against an independent re-computation of its
official metric (one image and one text at a time, float64, the official formulas), malformed files refused in one
line or set aside and counted, one image encoding per evaluation however many families name an image, the command
line with --compare and --leaderboard, the suites, and the old import paths (the registry and import-path tests need
no ../shared and run in a user's clone too)."""

import hashlib
import io
import json
import math
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from fastcore import test as fct
from hierbench.evaluation.compositional import registry as REG
from hierbench.evaluation.compositional.common import EvalContext, run_families
from hierbench.data.batch import DataFormatError, DataWarning, image_to_tensor
from hierbench.evaluation.encoding import _WordHashHead

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
HC_IMGS = SHARED / "data" / "hierarcaps" / "test_imgs"


class PixelModel(torch.nn.Module):
    "Images: their own 8×8 pixels (no mixing across a batch); texts: a seeded random unit vector per text."

    image_size, image_mean, image_std = 8, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)

    def __init__(self, geometry="euclidean"):
        super().__init__()
        self.head, self.dim, self.image_calls = _WordHashHead(geometry, 1.0), 3 * 8 * 8, 0

    def _vec(self, t):
        g = torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little"))
        v = torch.randn(self.dim, generator=g)
        return v / v.norm()

    def encode_text(self, texts):
        return torch.stack([self._vec(t) for t in texts])

    def encode_image(self, x):
        self.image_calls += len(x)
        return x.flatten(1).float()


# ---- the independent re-computation: one image, one text at a time, float64 ---------------------------------------
def _img_emb(model, image) -> np.ndarray:
    im = image if isinstance(image, Image.Image) else Image.open(image).convert("RGB")
    x = image_to_tensor(im.convert("RGB"), model.image_size, model.image_mean, model.image_std)[None]
    return model.encode_image(x)[0].double().numpy()


def sim(model, image, text) -> float:
    "s(text, image) in the model's geometry: cosine, or −geodesic distance on the Lorentz hyperboloid (c = 1)."
    a, b = _img_emb(model, image), model.encode_text([text])[0].double().numpy()
    if model.head.geometry == "euclidean":
        return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    a0, b0 = math.sqrt(1 + a @ a), math.sqrt(1 + b @ b)
    return -math.acosh(max(1.0, a0 * b0 - a @ b))


def winoground(s):  # s[caption][image]
    text = s[0][0] > s[1][0] and s[1][1] > s[0][1]
    image = s[0][0] > s[0][1] and s[1][1] > s[1][0]
    return dict(text_score=text, image_score=image, group_score=text and image)


def pair_sims(model, caps, imgs):
    return [[sim(model, imgs[i], caps[c]) for i in (0, 1)] for c in (0, 1)]


# ---- fixtures in the released layouts --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def coco():
    """Eight of HierarCaps' COCO images; every test that builds a fixture from them skips without ../shared (a user's
    clone)."""
    if not HC_IMGS.is_dir():
        pytest.skip("needs ../shared/data/hierarcaps/test_imgs (the COCO images)")
    return sorted(HC_IMGS.glob("*.jpg"))[:8]


def _copy(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return dst


def vl_checklist_folder(root: Path, coco, absent: bool = True) -> tuple[Path, Path]:
    "The repository's corpus/v1 YAMLs, data/ JSONs and vl_checklist/corpus.json; images under IMAGES/vg, IMAGES/hake."
    repo, images = root / "VL-CheckList", root / "images"
    for k in range(6):
        _copy(coco[k], images / "vg" / ("VG_100K" if k % 2 else "VG_100K_2") / f"{k}.jpg")
    _copy(coco[6], images / "hake" / "hico" / "6.jpg")
    vg = lambda k: f"{'VG_100K' if k % 2 else 'VG_100K_2'}/{k}.jpg"
    files = {
        ("Object/Location/center", "vg_obj"): (
            "data/Object/Location/vg_location/vg_obj_center.json",
            "vg/",
            [
                (vg(0), "a dog on a sofa", "a cat on a sofa"),
                (vg(1), "a man riding a horse", "a horse riding a man"),
                (vg(2), "two people at a table", "three people at a table"),
            ]
            + ([("VG_100K/404.jpg", "an absent picture", "a present picture")] if absent else []),
        ),
        ("Object/Location/center", "hake"): (
            "data/Object/Location/hake_location/hake_obj_center.json",
            "hake/",
            [("hico/6.jpg", "a person holds a cup", "a person holds a bat")],
        ),
        ("Object/Size/large", "vg_obj"): (
            "data/Object/Size/vg_size/vg_obj_large.json",
            "vg/",
            [(vg(3), "a large bus", "a large boat"), (vg(4), "a big tree", "a big cloud")],
        ),
        ("Attribute/color", "vg"): (
            "data/Attribute/vg/color.json",
            "vg",
            [(vg(5), "a red kite", "a blue kite"), (vg(0), "a brown dog", "a green dog")],
        ),
        ("Relation/spatial", "vg"): (
            "data/Relation/vg/spatial.json",
            "vg",
            [(vg(1), "man ON horse", "man under horse"), (vg(2), "cup ON table", "cup under table")],
        ),
    }
    for (tp, name), (anno, img_root, recs) in files.items():
        (repo / "corpus/v1" / tp).mkdir(parents=True, exist_ok=True)
        (repo / "corpus/v1" / tp / f"{name}.yaml").write_text(
            f'ANNO_PATH: "{anno}"\nIMG_ROOT: "{img_root}"\nTYPE: "TUPLE_JSON"'
        )
        (repo / anno).parent.mkdir(parents=True, exist_ok=True)
        (repo / anno).write_text(
            json.dumps([[p, {"POS": [pos, pos + " indeed"], "NEG": [neg, neg + " again"]}] for p, pos, neg in recs])
        )
    (repo / "vl_checklist").mkdir()
    (repo / "vl_checklist/corpus.json").write_text(
        json.dumps(
            {
                "large": {"vg": ["Object_Size_large_vg_obj", "Object_Size_large_vg_subj"]},
                "center": {"vg": ["Object_Location_center_vg_obj"], "hake": ["Object_Location_center_hake"]},
                "color": {"vg": ["Attribute_color_vg"]},
                "spatial": {"vg": ["Relation_spatial_vg"]},
            }
        )
    )
    return repo, images


def eqben_folder(root: Path, coco) -> Path:
    """eqbenag.json (video → subject → frames, caption lists), eqbengebc.json, eqbenkubric_loc.json, eqbensd.json;
    images relative."""
    for k in range(6):
        _copy(coco[k], root / "frames" / f"{k}.jpg")
    pair = lambda a, b, c0, c1: dict(image0=f"frames/{a}.jpg", image1=f"frames/{b}.jpg", caption0=c0, caption1=c1)
    (root / "eqbenag.json").write_text(
        json.dumps(
            {
                "V1.mp4": {
                    "person": [
                        pair(0, 1, ["a person sits down", "x"], ["a person stands up"]),
                        pair(2, 3, ["a person opens a door"], ["a person closes a door"]),
                    ]
                },
                "V2.mp4": {"dog": [pair(4, 5, ["a dog jumps"], ["a dog lies down"])]},
            }
        )
    )
    (root / "eqbengebc.json").write_text(
        json.dumps(
            {"v3": [pair(1, 2, "before the goal", "after the goal"), pair(3, 4, "the ball flies", "the ball lands")]}
        )
    )
    (root / "eqbenkubric_loc.json").write_text(
        json.dumps([pair(0, 5, "the cube is left of the ball", "the cube is right of the ball")])
    )
    (root / "eqbensd.json").write_text(
        json.dumps([pair(2, 5, "a red car in snow", "a blue car in snow"), pair(1, 3, "a cat", "a dog")])
    )
    return root


SPEC_SUBSETS = ("count", "existence")


def spec_folder(root: Path, coco) -> Path:
    for s in SPEC_SUBSETS:
        for k in range(4):
            _copy(coco[k + (2 if s == "existence" else 0)], root / s / "images" / f"{k}.jpg")
        (root / s / "image2text.json").write_text(
            json.dumps(
                [
                    dict(
                        query=f"images/{k}.jpg",
                        keys=[f"{n} objects in a {s} photo" for n in ("one", "two", "three")],
                        label=k % 3,
                    )
                    for k in range(4)
                ]
            )
        )
        (root / s / "text2image.json").write_text(
            json.dumps(
                [
                    dict(query=f"photo {k} of {s}", keys=[f"images/{j}.jpg" for j in range(3)], label=k % 3)
                    for k in range(3)
                ]
            )
        )
    return root


def mmvp_folder(root: Path, coco, n_pairs: int = 16) -> Path:
    """Questions.csv (Question ID, Type, Statement) and 'MLLM_VLM Images/<Type>/<qid>.jpg'; 16 pairs: two categories by
    position."""
    rows = []
    for k in range(n_pairs):
        typ = "Orientation and Direction" if k < 15 else "Presence of Specific Features"
        for j in (0, 1):
            q = 2 * k + 1 + j
            rows.append(f'{q},{typ},"the {["left", "right"][j]} thing number {k}"')
            _copy(coco[(2 * k + j) % len(coco)], root / "MLLM_VLM Images" / typ / f"{q}.jpg")
    (root / "Questions.csv").write_text("Question ID,Type,Statement\n" + "\n".join(rows) + "\n")
    return root


def _jpeg(path: Path) -> bytes:
    return path.read_bytes()


def bivlc_folder(root: Path, coco) -> Path:
    "data/test-00000-of-00002.parquet and data/test-00001-of-00002.parquet as the Hub holds imirandam/BiVLC."
    import pyarrow as pa
    import pyarrow.parquet as pq

    img = lambda k: {"bytes": _jpeg(coco[k]), "path": None}
    rows = [
        dict(
            image=img(k),
            caption=f"caption {k} of a scene",
            negative_caption=f"negative {k} of a scene",
            negative_image=img((k + 3) % 8),
            type=("replace", "swap", "add")[k % 3],
            subtype="x",
        )
        for k in range(6)
    ]
    rows.append(dict(rows[0], negative_image=None))  # a row without its negative image: set aside, counted
    (root / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows[:4]), root / "data/test-00000-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(rows[4:]), root / "data/test-00001-of-00002.parquet")
    return root


def colorswap_folder(root: Path, coco) -> Path:
    (root / "images").mkdir(parents=True)
    for i in range(3):
        for k in (1, 2):
            Image.open(coco[2 * i + k - 1]).convert("RGB").save(root / "images" / f"img_{i}_{k}.png")
    rec = lambda i: dict(
        id=i,
        caption_1=f"a yellow thing and a white thing {i}",
        caption_2=f"a white thing and a yellow thing {i}",
        image_1=f"images/img_{i}_1.png",
        image_2=f"images/img_{i}_2.png",
        image_source="midjourney",
        caption_source="human",
    )
    (root / "test.json").write_text(json.dumps([rec(i) for i in range(3)]))
    (root / "train.json").write_text(json.dumps([dict(rec(9), image_1="images/absent.png")]))  # not scored
    return root


def cola_file(root: Path, images: Path, coco) -> Path:
    "COLA's multi-object JSON with image URLs, the images under IMAGES/VG_100K* by file name; one image found nowhere."
    url = "https://cs-people.bu.edu/array/data/vg_gqa_images/{}.jpg".format
    names = {}
    for k in range(6):
        names[k] = f"{2400000 + k}"
        _copy(coco[k], images / ("VG_100K" if k < 3 else "VG_100K_2") / f"{names[k]}.jpg")
    data = [
        [
            url(names[0]),
            "white shirt to the left of blue pants",
            url(names[1]),
            "blue shirt to the left of white pants",
        ],
        [url(names[2]), "a small dog near a big cat", url(names[3]), "a big dog near a small cat"],
        [url(names[4]), "a red bus behind a car", url(names[5]), "a red car behind a bus"],
        [url("9999999"), "an absent image", url(names[5]), "a present one"],
    ]
    f = root / "COLA_multiobjects_matching_benchmark.json"
    f.write_text(json.dumps(data))
    return f


def _ctx(**kw):
    return EvalContext(num_workers=0, log=None, **kw)


def run(model, values, ctx):
    "(metrics, per-item rows) of the families asked for in `values`."
    per: list = []
    res = run_families(model, values, ctx, per)
    return res, (pd.concat(per, ignore_index=True) if per else pd.DataFrame())


def _quiet(fn, *a, **k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        return fn(*a, **k)


# ---- each family against the official metric, re-computed ---------------------------------------------------------
@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_vl_checklist_equals_the_official_itc_and_radar(tmp_path, coco, geometry):
    repo, images = vl_checklist_folder(tmp_path, coco)
    m = PixelModel(geometry)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res, rows = run(m, {"vl_checklist": str(repo)}, _ctx(image_root=str(images)))
    assert any(
        "VG_100K/404.jpg" in str(w.message) and "silently" in str(w.message) for w in caught
    )  # named, not silent
    assert res["vl_checklist/set_aside"] == 1
    acc = {}  # the official loop: files' existing images, first POS vs first NEG, strict
    for y in sorted((repo / "corpus/v1").rglob("*.yaml")):
        cfg = dict(l.split(": ", 1) for l in y.read_text().splitlines())
        recs = json.loads((repo / cfg["ANNO_PATH"].strip('"')).read_text())
        root = images / cfg["IMG_ROOT"].strip('"')
        ok = [sim(m, root / p, t["POS"][0]) > sim(m, root / p, t["NEG"][0]) for p, t in recs if (root / p).exists()]
        acc[y.parent.relative_to(repo / "corpus/v1").as_posix().replace("/", "_") + "_" + y.stem] = np.mean(ok)
    for f, a in acc.items():
        fct.test_close(res[f"vl_checklist/file/{f}"], a)
    corpus = json.loads((repo / "vl_checklist/corpus.json").read_text())
    radar = {
        s: np.mean([np.mean([acc[f] for f in fs if f in acc]) for g, fs in groups.items() if any(f in acc for f in fs)])
        for s, groups in corpus.items()
    }
    for s, v in radar.items():
        fct.test_close(res[f"vl_checklist/subtype/{s}"], v)
    fct.test_close(
        res["vl_checklist/type/Object"], np.mean([radar["center"], radar["large"]])
    )  # hierbench's, no official one
    assert set(rows.benchmark) == {"vl_checklist"} and len(rows) == 10


def test_vl_checklist_max_per_file_cuts_after_the_absent_images(tmp_path, coco):
    repo, images = vl_checklist_folder(tmp_path, coco)
    res, rows = _quiet(
        run,
        PixelModel(),
        {
            "vl_checklist": str(repo),
            "max_per_file": 2,
            "vl_checklist_names": ["vg_obj"],
            "vl_checklist_types": ["Object/Location"],
        },
        _ctx(image_root=str(images)),
    )
    assert set(rows.file) == {"Object_Location_center_vg_obj"} and len(rows) == 2


@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_eqben_equals_the_toolkits_winoground_scores(tmp_path, coco, geometry):
    d = eqben_folder(tmp_path, coco)
    m = PixelModel(geometry)
    res, rows = run(m, {"eqben": str(d)}, _ctx())
    for s in ("eqbenag", "eqbengebc", "eqbenkubric_loc", "eqbensd"):
        data = json.loads((d / f"{s}.json").read_text())
        frames = (
            [f for v in data.values() for subj in v.values() for f in subj]
            if s == "eqbenag"
            else [f for v in data.values() for f in v]
            if s == "eqbengebc"
            else data
        )
        first = lambda c: c[0] if isinstance(c, list) else c  # eqbenag: the first caption of each list
        v = [
            winoground(pair_sims(m, (first(f["caption0"]), first(f["caption1"])), (d / f["image0"], d / f["image1"])))
            for f in frames
        ]
        for k in ("text_score", "image_score", "group_score"):
            fct.test_close(res[f"eqben/{s}/{k}"], np.mean([x[k] for x in v]))
    assert "eqben/eqbenyoucook2/text_score" not in res and len(rows) == 8


@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_spec_equals_the_official_argmax_accuracy(tmp_path, coco, geometry):
    d = spec_folder(tmp_path, coco)
    m = PixelModel(geometry)
    res, _ = run(m, {"spec": str(d)}, _ctx())
    means = {"i2t": [], "t2i": []}
    for s in SPEC_SUBSETS:
        i2t = json.loads((d / s / "image2text.json").read_text())
        ok = [int(np.argmax([sim(m, d / s / r["query"], k) for k in r["keys"]])) == r["label"] for r in i2t]
        t2i = json.loads((d / s / "text2image.json").read_text())
        ok2 = [int(np.argmax([sim(m, d / s / k, r["query"]) for k in r["keys"]])) == r["label"] for r in t2i]
        fct.test_close(res[f"spec/{s}/i2t_acc"], np.mean(ok))
        fct.test_close(res[f"spec/{s}/t2i_acc"], np.mean(ok2))
        means["i2t"].append(np.mean(ok))
        means["t2i"].append(np.mean(ok2))
    for k, v in means.items():
        fct.test_close(res[f"spec/{k}_acc"], np.mean(v))  # "average all subset"
    fct.test_close(res["spec_chance/count/i2t_acc"], 1 / 3)


def test_spec_breaks_ties_to_the_first_key_as_torch_argmax(tmp_path, coco):
    d = spec_folder(tmp_path, coco)
    (d / "count/image2text.json").write_text(
        json.dumps(
            [
                dict(query="images/0.jpg", keys=["the same", "the same"], label=0),
                dict(query="images/1.jpg", keys=["the same", "the same"], label=1),
            ]
        )
    )
    res, rows = run(PixelModel(), {"spec": str(d)}, _ctx())
    assert rows[(rows.subset == "count") & (rows.direction == "i2t")].ok.tolist() == [True, False]


def _official_mmvp(m, d: Path) -> dict:
    """scripts/evaluate_vlm.py's loop: consecutive rows, 'a photo of ', softmax over the two images (scale 100),
    categories by position."""
    cats = [
        "Orientation and Direction",
        "Presence of Specific Features",
        "State and Condition",
        "Quantity and Count",
        "Positional and Relational Context",
        "Color and Appearance",
        "Structural Characteristics",
        "Texts",
        "Viewpoint and Perspective",
    ]
    rows = pd.read_csv(d / "Questions.csv", dtype=str).to_numpy()
    right, n = {c: 0 for c in cats}, {c: 0 for c in cats}
    for k in range(len(rows) // 2):
        (q1, t1, s1), (q2, _, s2) = rows[2 * k], rows[2 * k + 1]
        imgs = [d / "MLLM_VLM Images" / t1 / f"{q}.jpg" for q in (q1, q2)]
        preds = []
        for s in (s1, s2):
            logits = 100 * np.array([sim(m, im, "a photo of " + s) for im in imgs])
            p = np.exp(logits - logits.max())
            p /= p.sum()
            preds.append("img1" if p[0] > 0.5 else "img2")
        gt = ["img1" if int(q) % 2 == 1 else "img2" for q in (q1, q2)]
        c = cats[k // 15]
        n[c] += 1
        right[c] += preds == gt
    return {c: right[c] / n[c] for c in cats if n[c]}


@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_mmvp_equals_the_official_pairing_prompt_and_positional_categories(tmp_path, coco, geometry):
    d = mmvp_folder(tmp_path, coco)
    m = PixelModel(geometry)
    lines = []
    res, rows = run(m, {"mmvp": str(d)}, EvalContext(num_workers=0, log=lines.append))
    official = _official_mmvp(m, d)
    for c, v in official.items():
        fct.test_close(res[f"mmvp/{c}"], v)
    fct.test_close(res["mmvp/average"], np.mean(list(official.values())))
    assert len(rows) == 16 and rows.subset.tolist()[14:] == [
        "Orientation and Direction",
        "Presence of Specific Features",
    ]


def test_mmvp_assigns_categories_by_position_not_by_the_type_column(tmp_path, coco):
    d = mmvp_folder(tmp_path, coco)
    csv = (d / "Questions.csv").read_text().replace("1,Orientation and Direction,", "1,Texts,", 1)  # pair 0 typed Texts
    (d / "Questions.csv").write_text(csv)
    _copy(coco[0], d / "MLLM_VLM Images/Texts/1.jpg")
    _copy(coco[1], d / "MLLM_VLM Images/Texts/2.jpg")
    lines = []
    res, rows = run(PixelModel(), {"mmvp": str(d)}, EvalContext(num_workers=0, log=lines.append))
    assert rows.subset.iloc[0] == "Orientation and Direction" and "mmvp/Texts" not in res
    assert any("by position" in l for l in lines)


@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_bivlc_equals_the_official_seven_scores(tmp_path, coco, geometry):
    pytest.importorskip("pyarrow")
    d = bivlc_folder(tmp_path, coco)
    m = PixelModel(geometry)
    res, rows = _quiet(run, m, {"bivlc": str(d)}, _ctx())
    import pyarrow.parquet as pq

    table = pd.concat(
        [pq.read_table(f).to_pandas() for f in sorted((d / "data").glob("test-*.parquet"))], ignore_index=True
    )
    score = {k: [] for k in ("I2T", "T2I", "group", "Ipos_2T", "Ineg_2T", "Tpos_2I", "Tneg_2I")}
    types = []
    for r in table.itertuples():
        if r.negative_image is None:
            continue
        I0, I1 = (Image.open(io.BytesIO(x["bytes"])) for x in (r.image, r.negative_image))
        C0I0, C0I1, C1I0, C1I1 = (
            sim(m, I0, r.caption),
            sim(m, I1, r.caption),
            sim(m, I0, r.negative_caption),
            sim(m, I1, r.negative_caption),
        )
        v = dict(Ipos_2T=C0I0 > C1I0, Ineg_2T=C1I1 > C0I1, Tpos_2I=C0I0 > C0I1, Tneg_2I=C1I1 > C1I0)
        v.update(I2T=v["Ipos_2T"] and v["Ineg_2T"], T2I=v["Tpos_2I"] and v["Tneg_2I"])
        v["group"] = v["I2T"] and v["T2I"]
        for k in score:
            score[k].append(v[k])
        types.append(r.type)
    for k, vals in score.items():
        fct.test_close(res[f"bivlc/{k}"], np.mean(vals))
        fct.test_close(res[f"bivlc/swap/{k}"], np.mean([x for x, t in zip(vals, types) if t == "swap"]))
    assert res["bivlc/set_aside"] == 1 and len(rows) == 6


@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_colorswap_and_cola_equal_their_official_scores(tmp_path, coco, geometry):
    m = PixelModel(geometry)
    cs = colorswap_folder(tmp_path / "colorswap", coco)
    res, rows = run(m, {"colorswap": str(cs)}, _ctx())
    v = [
        winoground(pair_sims(m, (r["caption_1"], r["caption_2"]), (cs / r["image_1"], cs / r["image_2"])))
        for r in json.loads((cs / "test.json").read_text())
    ]
    for k in ("text_score", "image_score", "group_score"):
        fct.test_close(res[f"colorswap/{k}"], np.mean([x[k] for x in v]))
    assert len(rows) == 3  # train.json is not scored
    images = tmp_path / "vg"
    f = cola_file(tmp_path, images, coco)
    res, rows = _quiet(run, m, {"cola": str(f)}, _ctx(image_root=str(images)))
    acc = []  # ColaMultiObjAcc: preds[img, cap]; right when im0_c0 > im1_c0 and im1_c1 > im0_c1
    for e1, c1, e2, c2 in json.loads(f.read_text())[:3]:
        i1, i2 = (next(images.rglob(Path(e).name)) for e in (e1, e2))
        p = np.array([[sim(m, i, c) for c in (c1, c2)] for i in (i1, i2)])
        acc.append(p[0, 0] > p[1, 0] and p[1, 1] > p[0, 1])
    fct.test_close(res["cola/image_score"], np.mean(acc))
    assert res["cola/set_aside"] == 1 and res["cola_chance/image_score"] == 0.25


# ---- malformed inputs: refused in one line, or set aside and counted ------------------------------------------------
def test_malformed_files_are_refused_naming_file_record_and_field(tmp_path, coco):
    m = PixelModel()
    repo, images = vl_checklist_folder(tmp_path / "a", coco)
    y = repo / "corpus/v1/Attribute/color/vg.yaml"
    y.write_text('IMG_ROOT: "vg"')
    with pytest.raises(DataFormatError, match=r"vg\.yaml.*ANNO_PATH.*missing"):
        run_families(m, {"vl_checklist": str(repo)}, _ctx(image_root=str(images)))
    repo, images = vl_checklist_folder(tmp_path / "b", coco)
    f = repo / "data/Attribute/vg/color.json"
    f.write_text(json.dumps([["VG_100K/1.jpg", {"POS": ["a red kite"]}]]))
    with pytest.raises(DataFormatError, match=r"color\.json.*record '0'.*NEG"):
        run_families(m, {"vl_checklist": str(repo)}, _ctx(image_root=str(images)))
    d = eqben_folder(tmp_path / "c", coco)
    (d / "eqbensd.json").write_text("[]")
    with pytest.raises(DataFormatError, match=r"eqbensd\.json.*no records"):
        run_families(m, {"eqben": str(d)}, _ctx())
    d = eqben_folder(tmp_path / "d", coco)
    (d / "eqbengebc.json").write_text(
        json.dumps({"v": [dict(image0="frames/0.jpg", image1="frames/1.jpg", caption0="x")]})
    )
    with pytest.raises(DataFormatError, match=r"eqbengebc\.json.*v/0.*caption1"):
        run_families(m, {"eqben": str(d)}, _ctx())
    d = spec_folder(tmp_path / "e", coco)
    (d / "count/text2image.json").write_text(
        json.dumps([dict(query="q", keys=["images/0.jpg", "images/1.jpg"], label=5)])
    )
    with pytest.raises(DataFormatError, match=r"text2image\.json.*label"):
        run_families(m, {"spec": str(d)}, _ctx())
    d = mmvp_folder(tmp_path / "f", coco, n_pairs=2)
    (d / "Questions.csv").write_text((d / "Questions.csv").read_text() + '5,Orientation and Direction,"one more"\n')
    with pytest.raises(DataFormatError, match=r"Questions\.csv.*5 rows, an odd number"):
        run_families(m, {"mmvp": str(d)}, _ctx())
    d = colorswap_folder(tmp_path / "g", coco)
    (d / "test.json").write_text(
        json.dumps([dict(id=0, caption_1="a", image_1="images/img_0_1.png", image_2="images/img_0_2.png")])
    )
    with pytest.raises(DataFormatError, match=r"test\.json.*caption_2"):
        run_families(m, {"colorswap": str(d)}, _ctx())
    f = cola_file(tmp_path / "h", tmp_path / "h" / "vg", coco)
    f.write_text(json.dumps([["a.jpg", "b", "c.jpg"]]))
    with pytest.raises(DataFormatError, match=r"COLA_multiobjects.*record '0'"):
        run_families(m, {"cola": str(f)}, _ctx(image_root=str(tmp_path / "h" / "vg")))
    d = eqben_folder(tmp_path / "i", coco)
    (d / "eqbensd.json").write_text(
        json.dumps([dict(image0="../../etc/passwd", image1="frames/1.jpg", caption0="a", caption1="b")])
    )
    with pytest.raises(DataFormatError, match="leaves the image root"):
        run_families(m, {"eqben": str(d)}, _ctx())


def test_bivlc_without_a_column_is_refused(tmp_path, coco):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    (tmp_path / "data").mkdir()
    pq.write_table(
        pa.Table.from_pylist([dict(image={"bytes": _jpeg(coco[0]), "path": None}, caption="x")]),
        tmp_path / "data/test-00000-of-00001.parquet",
    )
    with pytest.raises(DataFormatError, match=r"test-00000-of-00001\.parquet.*negative_caption"):
        run_families(PixelModel(), {"bivlc": str(tmp_path)}, _ctx())


def test_absent_and_corrupt_images_are_set_aside_named_and_counted(tmp_path, coco):
    m = PixelModel()
    d = eqben_folder(tmp_path / "e", coco)
    (d / "frames/5.jpg").unlink()
    (d / "frames/4.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res, rows = run(m, {"eqben": str(d)}, _ctx())
    said = " ".join(str(w.message) for w in caught)
    assert "5.jpg" in said and "4.jpg" in said
    # eqbenag's dog pair uses 4 and 5, gebc's second pair 3-4, kubric's 0-5, sd's first 2-5: five items set aside
    assert (
        res["eqben/eqbenag/set_aside"],
        res["eqben/eqbengebc/set_aside"],
        res["eqben/eqbenkubric_loc/set_aside"],
        res["eqben/eqbensd/set_aside"],
    ) == (1, 1, 1, 1) and len(rows) == 4
    d = mmvp_folder(tmp_path / "m", coco, n_pairs=3)
    (d / "MLLM_VLM Images/Orientation and Direction/4.jpg").unlink()
    res, rows = _quiet(run, m, {"mmvp": str(d)}, _ctx())
    assert res["mmvp/set_aside"] == 1 and res["mmvp/n_pairs"] == 2
    d = spec_folder(tmp_path / "s", coco)
    (d / "existence/images/2.jpg").unlink()
    res, rows = _quiet(run, m, {"spec": str(d)}, _ctx())
    assert res["spec/existence/set_aside"] == 4  # one I2T query and the three T2I queries that list it


# ---- one encoding per image, the registry, the command line, the suites ---------------------------------------------
def test_each_image_is_encoded_once_however_many_families_name_it(tmp_path, coco):
    root = tmp_path / "root"
    repo, images = vl_checklist_folder(root, coco, absent=False)
    f = cola_file(root, images / "vg", coco)
    d = images / "vg"  # EqBen's frames below are the very files VL-CheckList and COLA read
    pair = lambda a, b: dict(image0=a, image1=b, caption0="a thing here", caption1="another thing there")
    (d / "eqbensd.json").write_text(
        json.dumps([pair("VG_100K_2/0.jpg", "VG_100K/1.jpg"), pair("VG_100K_2/2.jpg", "VG_100K/2400000.jpg")])
    )
    m = PixelModel()
    ctx = _ctx(image_root=str(images))
    res = _quiet(run_families, m, {"vl_checklist": str(repo), "eqben": str(d), "cola": str(f)}, ctx)
    distinct = {p.resolve() for p in images.rglob("*.jpg")}
    assert m.image_calls == ctx.images.encoded == len(distinct), (m.image_calls, len(distinct))
    assert {"vl_checklist/micro", "eqben/eqbensd/group_score", "cola/image_score"} <= set(res)


def test_the_registry_lists_every_family_once_with_its_flags():
    names = list(REG.FAMILIES)
    assert {"sugarcrepe", "winoground", "vl_checklist", "eqben", "spec", "mmvp", "bivlc", "colorswap", "cola"} <= set(
        names
    )
    options = [f.option for fam in REG.FAMILIES.values() for f in fam.flags]
    assert len(options) == len(set(options))
    for fam in REG.FAMILIES.values():
        assert callable(fam.resolve()), fam.name


def test_old_import_paths_still_answer():
    from hierbench.evaluation import benchmarks
    from hierbench.evaluation.compositional import winoground
    from hierbench.evaluation.compositional import choice, hierarcaps, sugarcrepe, whatsup
    from hierbench.evaluation.compositional import winoground as moved

    assert (
        benchmarks.score_choice_items is choice.score_choice_items
        and benchmarks.evaluate_choice_benchmark is choice.evaluate_choice_benchmark
    )
    assert (
        benchmarks.evaluate_sugarcrepe_pp is sugarcrepe.evaluate_sugarcrepe_pp
        and benchmarks.whatsup_axis is whatsup.whatsup_axis
    )
    assert (
        benchmarks.evaluate_hierarcaps is hierarcaps.evaluate_hierarcaps
        and benchmarks.chain_radii is hierarcaps.chain_radii
    )
    assert (
        winoground.evaluate_winoground is moved.evaluate_winoground
        and winoground.load_winoground is moved.load_winoground
    )
    from hierbench.evaluation.benchmarks import evaluate_whatsup_controlled, hierarcaps_text_metrics  # noqa: F401
    from hierbench.winoground import TAG_FAMILIES, WINOGROUND_CHANCE, winoground_metrics, winoground_scores  # noqa: F401
    from hierbench.evaluation.suites import COCO_IMAGES

    assert COCO_IMAGES is REG.COCO_IMAGES


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    from hierbench.models.family import create_model, save_model

    d = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    a = save_model(create_model("world-debug"), d / "a" / "model.safetensors")
    torch.manual_seed(1)
    b = save_model(create_model("world-debug"), d / "b" / "model.safetensors")
    return a, b


def test_eval_command_scores_every_family_and_compares_two_models(tmp_path, coco, saved_models, capsys):
    pytest.importorskip("pyarrow")
    from hierbench.cli.parser import main

    repo, images = vl_checklist_folder(tmp_path, coco)
    f = cola_file(tmp_path, images / "vg", coco)
    flags = [
        "--vl-checklist",
        str(repo),
        "--image-root",
        str(images),
        "--eqben",
        str(eqben_folder(tmp_path / "eqben", coco)),
        "--spec",
        str(spec_folder(tmp_path / "spec", coco)),
        "--mmvp",
        str(mmvp_folder(tmp_path / "mmvp", coco, 4)),
        "--bivlc",
        str(bivlc_folder(tmp_path / "bivlc", coco)),
        "--colorswap",
        str(colorswap_folder(tmp_path / "cs", coco)),
    ]
    out = tmp_path / "board"
    for name, model in zip("ab", saved_models):
        _quiet(
            main,
            [
                "eval",
                "--checkpoint",
                str(model),
                "--no-world",
                "--num-workers",
                "0",
                *flags,
                "--json",
                str(out / f"{name}.json"),
            ],
        )
        _quiet(
            main,
            [
                "eval",
                "--checkpoint",
                str(model),
                "--no-world",
                "--num-workers",
                "0",
                "--cola",
                str(f),
                "--image-root",
                str(images / "vg"),
                "--json",
                str(out / f"{name}_cola.json"),
            ],
        )
    res = json.loads((out / "a.json").read_text())
    assert res["metadata"]["families"]["mmvp"]["official_scale"] == "percent" and "fraction" in res["metadata"]["scale"]
    for k in (
        "vl_checklist/subtype/center",
        "eqben/eqbensd/group_score",
        "spec/i2t_acc",
        "mmvp/average",
        "bivlc/group",
        "colorswap/group_score",
    ):
        assert 0 <= res[k] <= 1 and 0 < res[k.split("/")[0] + "_chance/" + k.split("/", 1)[1]] < 1, k
    items = pd.read_json(out / "a.items.jsonl", lines=True, dtype={"id": str})
    assert set(items.benchmark) == {"vl_checklist", "eqben", "spec", "mmvp", "bivlc", "colorswap"}
    capsys.readouterr()
    main(["eval", "--compare", str(out / "a.json"), str(out / "b.json")])
    table = capsys.readouterr().out
    for metric in (
        "subtype/center",
        "type/Object",
        "eqbensd/group_score",
        "i2t_acc",
        "average",
        "swap/I2T",
        "group_score",
    ):
        assert metric in table, metric
    main(["eval", "--leaderboard", str(out)])
    board = capsys.readouterr().out
    assert "cola/image_score" in board and "bivlc/group" in board and "[" in board


def test_eval_interval_of_a_nested_metric_matches_its_value(tmp_path, coco):
    from hierbench.evaluation.item_metrics import metric_intervals

    repo, images = vl_checklist_folder(tmp_path, coco)
    res, rows = _quiet(run, PixelModel(), {"vl_checklist": str(repo)}, _ctx(image_root=str(images)))
    iv = metric_intervals(rows, n_boot=200).set_index("metric")
    for s in ("center", "large", "color", "spatial"):
        fct.test_close(iv.loc[f"subtype/{s}", "value"], res[f"vl_checklist/subtype/{s}"])
    fct.test_close(iv.loc["type/Object", "value"], res["vl_checklist/type/Object"])


def _sugarcrepe(root: Path, coco):
    "The seven SugarCrepe files, their images found by COCO id among HierArCaps' val2014 images."
    ids = [int(p.stem.split("_")[-1]) for p in coco]
    for s in ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj"):
        (root / "sugarcrepe").mkdir(parents=True, exist_ok=True)
        (root / "sugarcrepe" / f"{s}.json").write_text(
            json.dumps(
                {
                    str(k): dict(
                        filename=f"{ids[k]:012d}.jpg", caption=f"{s} caption {k}", negative_caption=f"{s} negative {k}"
                    )
                    for k in range(3)
                }
            )
        )
    for p in coco:
        _copy(p, root / "hierarcaps" / "test_imgs" / p.name)


def test_phyclip_and_compositional_suites_from_a_data_root(tmp_path, coco):
    from hierbench.evaluation.suites import run_suite, suite_tables

    root = tmp_path / "root"
    repo, images = vl_checklist_folder(root, coco)
    shutil.move(str(repo), root / "vl_checklist")
    shutil.move(str(images / "vg"), root / "vg")
    shutil.move(str(images / "hake"), root / "hake")
    _sugarcrepe(root, coco)
    eqben_folder(root / "eqben", coco)
    mmvp_folder(root / "mmvp", coco, 2)
    colorswap_folder(root / "colorswap", coco)
    m = PixelModel()
    res, items, skips = _quiet(run_suite, m, "phyclip", root, num_workers=0, log=None)
    assert set(items.benchmark) == {"vl_checklist", "sugarcrepe"}
    assert set(items[items.benchmark == "vl_checklist"].file) == {
        "Object_Location_center_vg_obj",
        "Object_Size_large_vg_obj",
    }
    tables = dict(suite_tables("phyclip", res))
    assert (
        tables["VL-CheckList Object"].loc["model", "Location center"]
        == f"{100 * res['vl_checklist/subtype/center']:.1f}"
    )
    assert tables["SugarCrepe"].loc["model", "overall"] == f"{100 * res['sugarcrepe/micro']:.1f}"
    res, items, skips = _quiet(run_suite, m, "compositional", root, num_workers=0, log=None)
    assert {"vl_checklist", "sugarcrepe", "eqben", "mmvp", "colorswap"} <= set(items.benchmark)
    assert any(s.startswith("bivlc/bivlc: skipped") for s in skips) and any(
        s.startswith("cola/cola: skipped") for s in skips
    )
    assert "vl_checklist/type/Relation" in res  # every corpus file in the compositional suite


def test_any_scorer_runs_the_families_in_its_own_geometry(tmp_path, coco):
    """A Lorentz DualEncoder (−geodesic distance), a Hugging Face CLIP (`hf:`) and a text-only scorer (a line, no
    metrics)."""
    from hierbench.models.family import create_model
    from hierbench.models.scorers import TextScorer

    values = {
        "mmvp": str(mmvp_folder(tmp_path / "mmvp", coco, 2)),
        "colorswap": str(colorswap_folder(tmp_path / "cs", coco)),
    }
    lines = []
    lorentz = create_model("world-debug", geometry="lorentz")
    res, rows = run(lorentz, values, EvalContext(num_workers=0, log=lines.append))
    assert any("geodesic" in l for l in lines) and 0 <= res["mmvp/average"] <= 1 and len(rows) == 5
    res, rows = run(
        TextScorer(lambda ts: [[1.0, 0.0]] * len(ts), "a text encoder"),
        values,
        EvalContext(num_workers=0, log=lines.append),
    )
    assert (
        res == {}
        and len(rows) == 0
        and any("MMVP-VLM: skipped" in l for l in lines)
        and any("ColorSwap: skipped" in l for l in lines)
    )
    pytest.importorskip("transformers")
    from hf_fixtures import tiny_hf_clip
    from hierbench.models.scorers import load_scorer

    hf = load_scorer(f"hf:{tiny_hf_clip(tmp_path / 'clip')}")
    res, rows = run(hf, values, EvalContext(num_workers=0, log=None))
    assert 0 <= res["colorswap/group_score"] <= 1 and set(rows.benchmark) == {"mmvp", "colorswap"}
