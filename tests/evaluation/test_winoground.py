"""Dense checks of hierbench.winoground (issue 32, item 4): the text / image / group verdicts and per-tag scores equal a
plain open_clip computation written here, on Winoground-layout folders built from the shipped COCO images (zipped as
distributed, unzipped, files at the root); Lorentz models score by −geodesic distance; ties are wrong; bad input is
named or set aside and counted. Random weights only: nothing is downloaded."""

import io
import json
import zipfile

import numpy as np
import open_clip
import pandas as pd
import pytest
import torch
from PIL import Image

from hierbench.evaluation.compositional import winoground as W
from hierbench.data.batch import DataFormatError, DataWarning
from hierbench.evaluation.encoding import WordHashModel
from hierbench.models.family import create_model
from hierbench.stats import paired_item_differences
from eval_models import SHARED

IMGS = SHARED / "data" / "hierarcaps" / "test_imgs"
CSV = SHARED / "data" / "hierarcaps" / "hierarcaps_test.csv"
needs_imgs = pytest.mark.skipif(
    not (IMGS.is_dir() and CSV.is_file()), reason="shared/data/hierarcaps (COCO images) not present"
)
TAGS = [
    ("Object", "", 1, "Noun"),
    ("Relation", "Symbolic, Series", 2, "Adjective-Color"),
    ("Both", "Pragmatics", 1, "Noun, Scope"),
    ("Relation", "Series", 1, "Verb-Transitive"),
]


# ---- the verdicts on hand-built similarities ----------------------------------------------------------------------
def plain_verdicts(s):
    "Winoground's definitions, written here: s[n][caption][image]."
    text = [(x[0][0] > x[1][0]) and (x[1][1] > x[0][1]) for x in s]
    image = [(x[0][0] > x[0][1]) and (x[1][1] > x[1][0]) for x in s]
    return text, image, [a and b for a, b in zip(text, image)]


def test_verdicts_equal_the_definitions_and_chance_levels_hold():
    rng = np.random.default_rng(0)
    s = rng.normal(size=(20000, 2, 2))
    s[:50] = np.round(s[:50])  # some exact ties: wrong
    v = W.winoground_scores(s)
    text, image, group = plain_verdicts(s.tolist())
    assert v["text"].tolist() == text and v["image"].tolist() == image and v["group"].tolist() == group
    # random scores: 1/4, 1/4, 1/6 (the paper's chance levels), within 4 standard errors
    for got, want in ((v["text"].mean(), 0.25), (v["image"].mean(), 0.25), (v["group"].mean(), 1 / 6)):
        assert abs(got - want) < 4 * np.sqrt(want * (1 - want) / len(s))
    # relabelling an example (swap both captions and both images) changes nothing
    swapped = s[:, ::-1, ::-1]
    assert all((W.winoground_scores(swapped)[k] == v[k]).all() for k in v)
    with pytest.raises(ValueError, match="shape"):
        W.winoground_scores(np.zeros((3, 2, 3)))
    with pytest.raises(ValueError, match="non-finite"):
        W.winoground_scores(np.full((1, 2, 2), np.nan))


def test_metrics_per_tag_family():
    rows = pd.DataFrame(
        dict(
            text_score=[1.0, 0.0, 1.0],
            image_score=[1.0, 1.0, 0.0],
            group_score=[1.0, 0.0, 0.0],
            collapsed_tag=["Object", "Object", "Both"],
            secondary_tag=["Symbolic, Series", "", "Series"],
            num_main_preds=[1, 2, 2],
            tag=["Noun, Scope", "Noun", "Scope"],
        )
    )
    m = W.winoground_metrics(rows, W.TAG_FAMILIES + ("tag",))
    assert m["winoground/group_score/collapsed_tag=Object"] == 0.5 and m["winoground/n_items/collapsed_tag=Both"] == 1
    assert (
        m["winoground/text_score/secondary_tag=Series"] == 1.0 and m["winoground/n_items/secondary_tag=Symbolic"] == 1
    )
    assert "winoground/text_score/secondary_tag=" not in m  # no tag: in no group
    assert m["winoground/image_score/num_main_preds=2"] == 0.5 and m["winoground/n_items/tag=Scope"] == 2
    assert m["winoground_chance/group_score/tag=Noun"] == pytest.approx(1 / 6)
    assert "winoground/text_score/tag=Noun" not in W.winoground_metrics(rows)  # fine tags only on request


# ---- folders in the dataset's layout from the shipped COCO images ----------------------------------------------------
def coco_examples(n=8, pairs=None):
    "n examples: two COCO images each, captioned by the most specific level of their HierarCaps chains."
    from hierbench.data.loaders import load_hierarcaps

    pairs = list(range(n)) if pairs is None else list(pairs)[:n]
    items = load_hierarcaps(CSV, IMGS)[: 2 * max(pairs) + 2]
    return [
        dict(
            id=k,
            caption_0=items[2 * p].chain[-1],
            caption_1=items[2 * p + 1].chain[-1],
            image_0=f"ex_{k}_img_0",
            image_1=f"ex_{k}_img_1",
            paths=(items[2 * p].image_path, items[2 * p + 1].image_path),
            collapsed_tag=TAGS[k % 4][0],
            secondary_tag=TAGS[k % 4][1],
            num_main_preds=TAGS[k % 4][2],
            tag=TAGS[k % 4][3],
        )
        for k, p in enumerate(pairs)
    ]


def varied_examples(sims, n=8, candidates=100):
    """n examples on which a random-weight model (mostly wrong) gets every kind of verdict — group right, text only,
    image only, neither — chosen by the plain computation `sims(examples)` among `candidates` image pairs, so that
    equal verdicts mean something."""
    text, image, group = plain_verdicts(sims(coco_examples(candidates)).tolist())
    kinds = [
        [k for k in range(candidates) if f(k)]
        for f in (
            lambda k: group[k],
            lambda k: text[k] and not image[k],
            lambda k: image[k] and not text[k],
            lambda k: not (text[k] or image[k]),
        )
    ]
    assert kinds[1] and kinds[2], "the random model never gets a text or an image verdict right: pick another seed"
    picked = kinds[0][:2] + kinds[1][:2] + kinds[2][:2]
    return coco_examples(n, picked + [k for k in kinds[3] if k not in picked][: n - len(picked)])


def write_folder(root, examples, layout="zip", extra_lines=()):
    "The Hugging Face layout (`data/examples.jsonl` + `data/images.zip`), unzipped (`data/images/`), or at the root."
    base = root if layout == "root" else root / "data"
    base.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({k: v for k, v in e.items() if k != "paths"}) for e in examples] + list(extra_lines)
    (base / "examples.jsonl").write_text("\n".join(lines) + "\n")
    pngs = {}
    for e in examples:
        for j in (0, 1):
            buf = io.BytesIO()
            Image.open(e["paths"][j]).convert("RGB").save(buf, "PNG")
            pngs[e[f"image_{j}"]] = buf.getvalue()
    if layout == "zip":
        with zipfile.ZipFile(base / "images.zip", "w") as z:
            for name, data in pngs.items():
                z.writestr(f"images/{name}.png", data)
    else:
        (base / "images").mkdir(exist_ok=True)
        for name, data in pngs.items():
            (base / "images" / f"{name}.png").write_bytes(data)
    return root


def plain_open_clip_sims(clip, examples, size=64, context_length=32):
    "s[n][c][i] the way a user writes it with open_clip: its transform (on the PNGs), its tokenizer, cosine."
    preprocess = open_clip.image_transform(size, is_train=False)
    tok = open_clip.tokenizer.SimpleTokenizer(context_length=context_length)
    with torch.no_grad():
        img = clip.encode_image(
            torch.stack([preprocess(Image.open(p).convert("RGB")) for e in examples for p in e["paths"]]),
            normalize=True,
        )
        txt = clip.encode_text(tok([e[f"caption_{c}"] for e in examples for c in (0, 1)]), normalize=True)
    img, txt = img.reshape(len(examples), 2, -1), txt.reshape(len(examples), 2, -1)
    return torch.einsum("ncd,nid->nci", txt, img).double().numpy()


@needs_imgs
def test_three_layouts_equal_a_plain_open_clip_computation(tmp_path):
    torch.manual_seed(0)
    model = create_model("real-tiny").eval()
    examples = varied_examples(lambda ex: plain_open_clip_sims(model.clip, ex))
    s = plain_open_clip_sims(model.clip, examples)
    text, image, group = plain_verdicts(s.tolist())
    assert any(text) and any(image) and not all(image)
    tables = {}
    for layout in ("zip", "folder", "root"):
        lines = []
        res, rows = W.evaluate_winoground(
            model, write_folder(tmp_path / layout, examples, layout), num_workers=0, log=lines.append
        )
        assert "8 examples, scored by cosine" in lines[0]
        np.testing.assert_allclose(rows[["c0_i0", "c0_i1", "c1_i0", "c1_i1"]].to_numpy(), s.reshape(8, 4), atol=2e-5)
        assert rows.text_score.tolist() == [float(v) for v in text] and rows.image_score.tolist() == [
            float(v) for v in image
        ]
        assert rows.ok.tolist() == group
        assert res["winoground/text_score"] == pytest.approx(np.mean(text))
        assert res["winoground/image_score"] == pytest.approx(np.mean(image))
        assert res["winoground/group_score"] == pytest.approx(np.mean(group))
        df = pd.DataFrame(dict(tag=[e["collapsed_tag"] for e in examples], g=group))
        for tag, g in df.groupby("tag"):
            assert res[f"winoground/group_score/collapsed_tag={tag}"] == pytest.approx(g.g.mean())
        series = [("Series" in e["secondary_tag"]) for e in examples]
        assert res["winoground/text_score/secondary_tag=Series"] == pytest.approx(
            np.mean([t for t, m in zip(text, series) if m])
        )
        assert res["winoground/n_items"] == 8 and "winoground/set_aside" not in res
        assert rows.subset.tolist() == [e["collapsed_tag"] for e in examples] and rows.id.tolist() == [
            str(k) for k in range(8)
        ]
        tables[layout] = rows
    assert tables["zip"].equals(tables["folder"]) and tables["zip"].equals(tables["root"])


def plain_lorentz_sims(model, examples, size=64):
    "s[n][c][i] = −geodesic distance written out in float64: time components, the Lorentz inner product, arcosh."
    preprocess = open_clip.image_transform(size, is_train=False)
    with torch.no_grad():
        img = model.encode_image(
            torch.stack([preprocess(Image.open(p).convert("RGB")) for e in examples for p in e["paths"]])
        ).double()
        txt = model.encode_text([e[f"caption_{c}"] for e in examples for c in (0, 1)]).double()
    c, n = float(model.head.curv.detach()), len(examples)
    t_img, t_txt = (
        torch.sqrt(1 / c + (img**2).sum(-1)).reshape(n, 2),
        torch.sqrt(1 / c + (txt**2).sum(-1)).reshape(n, 2),
    )
    inner = (
        torch.einsum("ncd,nid->nci", txt.reshape(n, 2, -1), img.reshape(n, 2, -1))
        - t_txt[:, :, None] * t_img[:, None, :]
    )
    return (-torch.acosh(torch.clamp(-c * inner, min=1.0)) / c**0.5).numpy()


@needs_imgs
def test_lorentz_model_scores_by_negative_geodesic_distance(tmp_path):
    torch.manual_seed(3)
    model = create_model("real-tiny", geometry="lorentz", curv_init=0.5).eval()
    examples = varied_examples(lambda ex: plain_lorentz_sims(model, ex), candidates=80)
    s = plain_lorentz_sims(model, examples)
    lines = []
    res, rows = W.evaluate_winoground(
        model, write_folder(tmp_path, examples, "folder"), num_workers=0, log=lines.append
    )
    assert "−geodesic distance (Lorentz, c=0.5)" in lines[0]
    np.testing.assert_allclose(
        rows[["c0_i0", "c0_i1", "c1_i0", "c1_i1"]].to_numpy(), s.reshape(len(examples), 4), atol=1e-4
    )
    text, image, group = plain_verdicts(s.tolist())
    assert any(text) and any(image) and not all(image)
    assert rows.text_score.tolist() == [float(v) for v in text] and rows.image_score.tolist() == [
        float(v) for v in image
    ]
    assert res["winoground/group_score"] == pytest.approx(np.mean(group))


# ---- bad input -------------------------------------------------------------------------------------------------------
@needs_imgs
def test_missing_and_corrupt_images_cost_only_their_examples(tmp_path):
    examples = coco_examples(5)
    root = write_folder(tmp_path, examples, "folder")
    (root / "data" / "images" / "ex_1_img_0.png").unlink()
    (root / "data" / "images" / "ex_3_img_1.png").write_bytes(b"\x89PNG not really")
    m = WordHashModel(dim=8)
    m.image_size = 8
    with pytest.warns(
        DataWarning, match=r"2 of 10 images could not be read.*1/image_0: image not found.*3/image_1: .*cannot decode"
    ):
        res, rows = W.evaluate_winoground(m, root, num_workers=0, log=None)
    assert rows.id.tolist() == ["0", "2", "4"] and res["winoground/set_aside"] == 2 and res["winoground/n_items"] == 3
    zroot = write_folder(tmp_path / "z", examples, "zip")
    ex = json.loads((zroot / "data" / "examples.jsonl").read_text().splitlines()[0])
    ex.update(id=99, image_1="not_in_zip")
    with open(zroot / "data" / "examples.jsonl", "a") as f:
        f.write(json.dumps(ex) + "\n")
    with pytest.warns(
        DataWarning,
        match=r"99/image_1: image not found: expected .*images.zip/images/not_in_zip.png \(not in the zip\)",
    ):
        res, rows = W.evaluate_winoground(m, zroot, num_workers=0, log=None)
    assert "99" not in set(rows.id) and res["winoground/set_aside"] == 1


def test_malformed_examples_are_named(tmp_path):
    good = dict(
        id=0,
        caption_0="a b",
        caption_1="b a",
        image_0="x",
        image_1="y",
        tag="Noun",
        secondary_tag="",
        num_main_preds=1,
        collapsed_tag="Object",
    )
    cases = [
        ("not json at all", "record 'line 2': not valid JSON"),
        (json.dumps({**good, "id": 0}), "duplicate id '0'"),
        (json.dumps({k: v for k, v in good.items() if k != "caption_1"} | {"id": 5}), "field 'caption_1': missing"),
        (json.dumps({**good, "id": 5, "caption_0": "  "}), "field 'caption_0': empty in effect"),
        (json.dumps({**good, "id": 5, "tag": 3}), "field 'tag': expected a string"),
        (json.dumps({**good, "id": 5, "num_main_preds": "two"}), "field 'num_main_preds': expected a number"),
        (json.dumps({**good, "id": 5, "image_0": "../../etc/passwd"}), "leaves the image root"),
        (json.dumps([1, 2]), "expected an object"),
    ]
    for i, (line, msg) in enumerate(cases):
        d = tmp_path / f"c{i}" / "data"
        (d / "images").mkdir(parents=True)
        (d / "examples.jsonl").write_text(json.dumps(good) + "\n" + line + "\n")
        with pytest.raises(DataFormatError, match=msg):
            W.load_winoground(d.parent)
    with pytest.raises(FileNotFoundError, match="no data/examples.jsonl"):
        W.load_winoground(tmp_path)
    (tmp_path / "bare" / "data").mkdir(parents=True)
    (tmp_path / "bare" / "data" / "examples.jsonl").write_text(json.dumps(good))
    with pytest.raises(FileNotFoundError, match="neither images/ nor images.zip"):
        W.load_winoground(tmp_path / "bare")
    with pytest.raises(FileNotFoundError, match="folder not found"):
        W.load_winoground(tmp_path / "nowhere")


def test_unscorable_examples_are_set_aside_and_counted(tmp_path):
    d = tmp_path / "data"
    (d / "images").mkdir(parents=True)
    for n, colour in (("x", (200, 0, 0)), ("y", (0, 0, 200))):
        Image.new("RGB", (8, 8), colour).save(d / "images" / f"{n}.png")
    rows = [
        dict(id=0, caption_0="a b", caption_1="b a", image_0="x", image_1="y"),
        dict(id=1, caption_0="the same", caption_1="The same.", image_0="x", image_1="y"),  # one caption twice
        dict(id=2, caption_0="a c", caption_1="c a", image_0="x", image_1="x"),
    ]  # one image twice
    (d / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.warns(DataWarning, match=r"2 record\(s\) set aside — the same caption or image twice .*: \['1', '2'\]"):
        assert [it.id for it in W.load_winoground(tmp_path)] == ["0"]
    m = WordHashModel(dim=8)
    m.image_size = 8
    with pytest.warns(DataWarning):
        res, table = W.evaluate_winoground(m, tmp_path, num_workers=0, log=None)
    assert res["winoground/set_aside"] == 2 and res["winoground/n_items"] == 1 and table.num_main_preds.isna().all()
    assert "winoground/text_score/collapsed_tag=" not in " ".join(res)  # no tags in the file: overall scores only


def test_text_only_model_is_skipped_with_a_line():
    from hierbench.models.scorers import TextScorer

    lines = []
    res, table = W.evaluate_winoground(
        TextScorer(lambda ts: torch.ones(len(ts), 4), name="st"), "/nowhere", log=lines.append
    )
    assert res == {} and table.empty and "Winoground: skipped" in lines[0]


@needs_imgs
def test_rows_feed_paired_item_differences(tmp_path):
    torch.manual_seed(0)
    a = create_model("real-tiny").eval()
    root = write_folder(tmp_path, varied_examples(lambda ex: plain_open_clip_sims(a.clip, ex)), "zip")
    torch.manual_seed(1)
    b = create_model("real-tiny").eval()
    (ra, ta), (rb, tb) = (W.evaluate_winoground(m, root, num_workers=0, log=None) for m in (a, b))
    ta, tb = (
        pd.read_json(io.StringIO(t.to_json(orient="records", lines=True)), lines=True, dtype={"id": str, "unit": str})
        for t in (ta, tb)
    )
    d = paired_item_differences(ta, tb, n_boot=200).set_index("benchmark").loc["winoground"]
    assert (
        d.n == 8
        and d.acc_a == pytest.approx(ra["winoground/group_score"])
        and d.acc_b == pytest.approx(rb["winoground/group_score"])
    )
    assert ta.text_score.mean() == pytest.approx(ra["winoground/text_score"])
