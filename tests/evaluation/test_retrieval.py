"""Dense checks of hierbench.evaluation.retrieval (issue 32, item 2): the four annotation layouts built from the shipped
COCO images
give the same set and the same numbers, every recall equals a plain open_clip + CLIP_benchmark-style topk computation
written here, ties are counted pessimistically (and counted), Lorentz models rank by −geodesic distance, and bad
input is named or set aside and counted. Random weights only: nothing is downloaded; the library never imports
clip_benchmark."""

import io
import json
from pathlib import Path

import numpy as np
import open_clip
import pandas as pd
import pytest
import torch
from PIL import Image

from hierbench.evaluation import retrieval as R
from hierbench.data.batch import DataFormatError, DataWarning
from hierbench.evaluation.encoding import WordHashModel, encode_image_sources
from hierbench.models.family import create_model
from hierbench.stats import paired_item_differences
from eval_models import SHARED

IMGS = SHARED / "data" / "hierarcaps" / "test_imgs"
CSV = SHARED / "data" / "hierarcaps" / "hierarcaps_test.csv"
needs_imgs = pytest.mark.skipif(
    not (IMGS.is_dir() and CSV.is_file()), reason="shared/data/hierarcaps (COCO images) not present"
)


# ---- the metrics on hand-built similarity matrices ---------------------------------------------------------------
def topk_recalls(scores: torch.Tensor, owner, ks):
    "CLIP_benchmark's definition, written here: a query counts when a correct candidate is among its topk."
    positive = torch.zeros(scores.shape, dtype=torch.bool)
    positive[torch.arange(len(owner)), torch.as_tensor(owner)] = True
    out = {}
    for k in ks:
        hit_t = positive.gather(1, scores.topk(k, dim=1).indices).any(1)
        hit_i = positive.T.gather(1, scores.T.topk(k, dim=1).indices).any(1)
        out[f"retrieval/image_retrieval_recall@{k}"], out[f"retrieval/text_retrieval_recall@{k}"] = (
            hit_t.double().mean().item(),
            hit_i.double().mean().item(),
        )
    return out


def test_recalls_equal_topk_on_random_scores_and_brute_force_ranks():
    g = torch.Generator().manual_seed(0)
    for trial in range(5):
        n_img = 7 + trial
        owner = np.concatenate([np.arange(n_img), torch.randint(0, n_img, (2 * n_img,), generator=g).numpy()])
        scores = torch.randn(len(owner), n_img, generator=g, dtype=torch.float64)  # continuous: no ties
        res, rows = R.retrieval_scores(scores.numpy(), owner, ks=(1, 2, 5))
        ref = topk_recalls(scores, owner, (1, 2, 5))
        for key, v in ref.items():
            assert res[key] == pytest.approx(v, abs=1e-12), (trial, key)
        assert res["retrieval/image_retrieval_ties"] == res["retrieval/text_retrieval_ties"] == 0
        # the rank of a text query: wrong images scoring at least its own image's score
        s = scores.numpy()
        want = [(s[t] >= s[t, owner[t]]).sum() - 1 for t in range(len(owner))]
        assert rows[rows.subset == "image_retrieval"]["rank"].tolist() == want
        for key, v in ref.items():  # each metric is its column's mean over the rows that have it
            assert rows[key.split("/")[-1]].mean() == pytest.approx(v, abs=1e-12)


def test_ties_are_pessimistic_and_counted():
    # two images, the same caption text for both (identical embeddings → identical score rows)
    sim = np.array(
        [
            [0.5, 0.5],  # text 0 (image 0)
            [0.5, 0.5],  # text 1 (image 1): the same text
            [0.1, 0.9],
        ]
    )  # text 2 (image 1)
    res, rows = R.retrieval_scores(sim, [0, 1, 1], ks=(1, 2))
    assert res["retrieval/image_retrieval_recall@1"] == pytest.approx(
        1 / 3
    )  # texts 0 and 1 tie with the wrong image: misses
    assert res["retrieval/image_retrieval_recall@2"] == 1.0
    assert (
        res["retrieval/image_retrieval_ties"] == 2 and res["retrieval/text_retrieval_ties"] == 1
    )  # image 0: its text ties text 1
    assert res["retrieval/text_retrieval_recall@1"] == 0.5  # image 1 has text 2 on top
    t = rows[rows.subset == "image_retrieval"]
    assert (
        t["rank"].tolist() == [1, 1, 0]
        and t.tie.tolist() == [True, True, False]
        and t.ok.tolist() == [False, False, True]
    )
    # a topk tie-break can only do better: the pessimistic count is a lower bound
    ref = topk_recalls(torch.tensor(sim), [0, 1, 1], (1, 2))
    assert all(res[k] <= v + 1e-12 for k, v in ref.items())


def test_chance_levels():
    res, _ = R.retrieval_scores(np.random.default_rng(0).normal(size=(6, 3)), [0, 0, 0, 1, 2, 2], ks=(1, 2), name="toy")
    assert res["retrieval_chance/toy/image_retrieval_recall@1"] == pytest.approx(1 / 3)
    assert res["retrieval_chance/toy/image_retrieval_recall@2"] == pytest.approx(2 / 3)
    # image→text at K=1 among 6 texts: 3/6, 1/6, 2/6 for images with 3, 1, 2 captions
    assert res["retrieval_chance/toy/text_retrieval_recall@1"] == pytest.approx((3 / 6 + 1 / 6 + 2 / 6) / 3)


def test_bad_matrices():
    with pytest.raises(ValueError, match="no caption"):
        R.retrieval_scores(np.zeros((2, 3)), [0, 1])
    with pytest.raises(ValueError, match="out of range"):
        R.retrieval_scores(np.zeros((2, 2)), [0, 2])
    with pytest.raises(ValueError, match="non-finite"):
        R.retrieval_scores(np.array([[np.nan, 0.0], [0.0, 1.0]]), [0, 1])


# ---- the four layouts from the shipped COCO images -------------------------------------------------------------
def shipped_set(n_images=12):
    "n COCO images of HierarCaps with their three most specific chain captions (each text used once in the set)."
    from hierbench.data.loaders import load_hierarcaps

    out, seen = [], set()
    for it in load_hierarcaps(CSV, IMGS):
        caps = [c for c in it.chain[1:] if c not in seen]
        if len(caps) < 3:
            continue
        seen.update(caps)
        out.append((it.image_path, caps))
        if len(out) == n_images:
            break
    return out


def write_layouts(tmp_path, items):
    "A Karpathy JSON, a COCO-captions JSON, a Flickr txt and a retrieval WebDataset folder of the same images."
    import webdataset as wds

    imgs = tmp_path / "imgs" / "val2014"
    imgs.mkdir(parents=True)
    for p, _ in items:
        (imgs / p.name).write_bytes(p.read_bytes())
    ids = [int(p.stem.split("_")[-1]) for p, _ in items]
    (tmp_path / "dataset_coco.json").write_text(
        json.dumps(
            {
                "images": [
                    {
                        "filepath": "val2014",
                        "filename": p.name,
                        "split": "test",
                        "cocoid": i,
                        "sentences": [{"raw": c} for c in caps],
                    }
                    for (p, caps), i in zip(items, ids)
                ]
                + [
                    {
                        "filepath": "val2014",
                        "filename": "not_in_test.jpg",
                        "split": "train",
                        "cocoid": 1,
                        "sentences": [{"raw": "x"}],
                    }
                ]
            }
        )
    )
    (tmp_path / "coco_test_karpathy.json").write_text(
        json.dumps(
            {
                "images": [{"id": i, "file_name": p.name} for (p, _), i in zip(items, ids)],
                "annotations": [
                    {"image_id": i, "id": 10 * i + j, "caption": c}
                    for (p, caps), i in zip(items, ids)
                    for j, c in enumerate(caps)
                ],
            }
        )
    )
    (tmp_path / "flickr30k_test_karpathy.txt").write_text(
        "image,caption\n" + "".join(f"{p.name},{c}\n" for p, caps in items for c in caps)
    )
    wdir = tmp_path / "wds_coco_toy"
    (wdir / "test").mkdir(parents=True)
    (wdir / "dataset_type.txt").write_text("retrieval\n")
    (wdir / "test" / "nshards.txt").write_text("2\n")
    half = len(items) // 2
    for s, part in enumerate((items[:half], items[half:])):
        with wds.TarWriter(str(wdir / "test" / f"{s}.tar")) as sink:
            for p, caps in part:
                sink.write({"__key__": p.stem, "jpg": p.read_bytes(), "txt": "\n".join(caps)})
    return imgs, wdir


def plain_open_clip(clip, items, size=64, context_length=32):
    "Embeddings the way a user writes it with open_clip: its transform, its tokenizer, normalised features."
    preprocess = open_clip.image_transform(size, is_train=False)
    tok = open_clip.tokenizer.SimpleTokenizer(context_length=context_length)
    texts = [c for _, caps in items for c in caps]
    owner = [i for i, (_, caps) in enumerate(items) for _ in caps]
    with torch.no_grad():
        img = clip.encode_image(
            torch.stack([preprocess(Image.open(p).convert("RGB")) for p, _ in items]), normalize=True
        )
        txt = clip.encode_text(tok(texts), normalize=True)
    return txt, img, owner


@needs_imgs
def test_four_layouts_one_set_and_numbers_equal_plain_open_clip(tmp_path):
    items = shipped_set()
    imgs, wdir = write_layouts(tmp_path, items)
    torch.manual_seed(0)
    model = create_model("real-tiny").eval()
    txt, img, owner = plain_open_clip(model.clip, items)
    ref = topk_recalls(txt @ img.T, owner, (1, 5, 10))
    specs = {
        "karpathy": (f"coco:{tmp_path / 'dataset_coco.json'}", imgs.parent, "coco"),
        "coco-captions": (f"coco:{tmp_path / 'coco_test_karpathy.json'}", imgs, "coco"),
        "flickr-txt": (f"flickr:{tmp_path / 'flickr30k_test_karpathy.txt'}", imgs, "flickr30k"),
        "wds": (f"wds:{wdir}", None, "wds_coco_toy"),
    }
    results = {}
    for layout, (spec, root, name) in specs.items():
        rs = R.load_retrieval(spec, root)
        assert rs.name == name and len(rs) == 12 and rs.n_texts == 36
        assert sorted(map(tuple, rs.captions)) == sorted(tuple(c) for _, c in items), layout
        lines = []
        res, table = R.evaluate_retrieval(model, rs, log=lines.append, num_workers=0)
        assert "ranked by cosine" in lines[0]
        results[layout] = {k.split("/")[-1]: v for k, v in res.items() if k.startswith(f"retrieval/{name}/")}
        for key, v in ref.items():
            assert results[layout][key.split("/")[-1]] == pytest.approx(v, abs=1e-9), (layout, key)
        assert results[layout]["image_retrieval_ties"] == 0 and results[layout]["n_images"] == 12
        assert len(table) == 48 and set(table.benchmark) == {f"retrieval/{name}"} and not table.id.duplicated().any()
        assert not any(k.endswith("set_aside") for k in res)
    assert all(r == results["karpathy"] for r in results.values())  # the layouts agree to the last digit
    assert results["karpathy"]["image_retrieval_recall@10"] < 1.0  # 12 images: K=10 is not trivially 1


@needs_imgs
def test_lorentz_model_ranks_by_negative_geodesic_distance(tmp_path):
    items = shipped_set(10)
    imgs, _ = write_layouts(tmp_path, items)
    torch.manual_seed(1)
    model = create_model("real-tiny", geometry="lorentz", curv_init=0.7).eval()
    preprocess = open_clip.image_transform(64, is_train=False)
    texts = [c for _, caps in items for c in caps]
    owner = [i for i, (_, caps) in enumerate(items) for _ in caps]
    with torch.no_grad():
        img = model.encode_image(torch.stack([preprocess(Image.open(p).convert("RGB")) for p, _ in items])).double()
        txt = model.encode_text(texts).double()
    c = float(model.head.curv.detach())
    # the geodesic distance written out: time components, the Lorentz inner product, arcosh
    ti, tt = torch.sqrt(1 / c + (img**2).sum(-1)), torch.sqrt(1 / c + (txt**2).sum(-1))
    inner = txt @ img.T - tt[:, None] * ti[None, :]
    dist = torch.acosh(torch.clamp(-c * inner, min=1.0)) / c**0.5
    ref = topk_recalls(-dist, owner, (1, 5))
    assert not torch.equal((-dist).topk(1).indices, (txt @ img.T).topk(1).indices)  # not the dot product's ranking
    lines = []
    res, _ = R.evaluate_retrieval(
        model,
        f"flickr:{tmp_path / 'flickr30k_test_karpathy.txt'}",
        image_root=imgs,
        ks=(1, 5),
        log=lines.append,
        num_workers=0,
        name="f30k",
    )
    assert "−geodesic distance (Lorentz, c=0.7)" in lines[0]
    for key, v in ref.items():
        assert res[key.replace("retrieval/", "retrieval/f30k/")] == pytest.approx(v, abs=1e-9), key


@needs_imgs
def test_workers_give_the_numbers_of_the_main_process(tmp_path):
    items = shipped_set(8)
    _, wdir = write_layouts(tmp_path, items)
    model = create_model("real-tiny").eval()
    rs = R.load_retrieval(f"wds:{wdir}")
    e0, r0, f0 = encode_image_sources(model, rs.images, batch_size=3, num_workers=0)
    e2, r2, f2 = encode_image_sources(model, rs.images, batch_size=3, num_workers=2)  # tar members decoded in workers
    assert torch.equal(e0, e2) and r0.tolist() == r2.tolist() == list(range(8)) and f0 == f2 == []


# ---- bad input -------------------------------------------------------------------------------------------------------
@needs_imgs
def test_missing_and_corrupt_images_are_set_aside_and_counted(tmp_path):
    items = shipped_set(6)
    imgs, _ = write_layouts(tmp_path, items)
    (imgs / items[1][0].name).unlink()  # missing
    (imgs / items[4][0].name).write_bytes(b"\xff\xd8 not a jpeg")  # corrupt
    m = WordHashModel(dim=16)
    m.image_size = 16
    with pytest.warns(DataWarning, match=r"2 of 6 images could not be read.*image not found.*cannot decode"):
        res, table = R.evaluate_retrieval(
            m, f"coco:{tmp_path / 'coco_test_karpathy.json'}", image_root=imgs, log=None, num_workers=0
        )
    p = "retrieval/coco/"
    assert res[p + "images_set_aside"] == 2 and res[p + "texts_set_aside"] == 6
    assert res[p + "n_images"] == 4 and res[p + "n_texts"] == 12
    gone = str(int(items[1][0].stem.split("_")[-1]))  # the missing image's COCO id
    assert len(table) == 16 and gone not in set(table.id) and not table.id.str.startswith(gone + "#").any()


@needs_imgs
def test_no_image_found_names_the_expected_path_and_where_it_is(tmp_path):
    items = shipped_set(3)
    imgs, _ = write_layouts(tmp_path, items)
    with pytest.raises(FileNotFoundError, match=r"none of its 3 images found.*is in .*val2014: pass that folder"):
        R.load_retrieval(f"coco:{tmp_path / 'coco_test_karpathy.json'}", imgs.parent)  # COCO's root instead of val2014/
    with pytest.raises(FileNotFoundError, match="none of its 3 images found"):
        R.load_retrieval(f"coco:{tmp_path / 'dataset_coco.json'}", tmp_path / "elsewhere")


def write(tmp_path, name, obj):
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p


def test_malformed_annotation_files_are_named(tmp_path):
    img = {"id": 1, "file_name": "a.jpg"}
    cases = [
        (write(tmp_path, "dup.json", {"images": [img, dict(img)], "annotations": []}), "duplicate id '1'"),
        (
            write(tmp_path, "orphan.json", {"images": [img], "annotations": [{"image_id": 2, "caption": "x"}]}),
            r"record 'annotations\[0\]', field 'image_id': no image with id 2",
        ),
        (
            write(tmp_path, "noid.json", {"images": [{"file_name": "a.jpg"}], "annotations": []}),
            r"images\[0\]', field 'id': missing",
        ),
        (write(tmp_path, "notjson.json", '{"images": [1,'), "not valid JSON"),
        (
            write(tmp_path, "capnum.json", {"images": [img], "annotations": [{"image_id": 1, "caption": 5}]}),
            "expected a string",
        ),
        (
            write(tmp_path, "escape.json", {"images": [{"id": 1, "file_name": "../../x.jpg"}], "annotations": []}),
            "leaves the image root",
        ),
        (
            write(
                tmp_path,
                "karpathy_dup.json",
                {
                    "images": [
                        {"filename": f"{i}.jpg", "split": "test", "cocoid": 5, "sentences": [{"raw": "x"}]}
                        for i in range(2)
                    ]
                },
            ),
            "duplicate image id",
        ),
        (
            write(
                tmp_path,
                "karpathy_empty.json",
                {"images": [{"filename": "a.jpg", "split": "test", "cocoid": 5, "sentences": [{"raw": " "}]}]},
            ),
            "empty in effect",
        ),
        (
            write(
                tmp_path,
                "karpathy_train.json",
                {"images": [{"filename": "a.jpg", "split": "train", "cocoid": 5, "sentences": [{"raw": "x"}]}]},
            ),
            "no image in the 'test' split",
        ),
        (write(tmp_path, "bad_lines.txt", "image,caption\na.jpg,x\nthis line names no image\n"), "record 'line 3'"),
        (write(tmp_path, "empty.txt", "image,caption\n"), "no 'IMAGE.jpg,caption' line"),
    ]
    for path, msg in cases:
        loader = (
            R.load_flickr_captions
            if path.suffix == ".txt"
            else (R.load_karpathy_test if path.stem.startswith("karpathy") else R.load_coco_captions)
        )
        with pytest.raises((DataFormatError, ValueError), match=msg):
            loader(path, tmp_path)


def test_empty_captions_and_captionless_images_are_set_aside_and_counted(tmp_path):
    p = write(
        tmp_path,
        "c.json",
        {
            "images": [
                {"id": 1, "file_name": "a.jpg"},
                {"id": 2, "file_name": "b.jpg"},
                {"id": 3, "file_name": "c.jpg"},
            ],
            "annotations": [
                {"image_id": 1, "caption": "a dog"},
                {"image_id": 1, "caption": ""},
                {"image_id": 2, "caption": "\t"},
            ],
        },
    )
    with pytest.warns(DataWarning) as rec:
        rs = R.load_coco_captions(p, tmp_path)
    msgs = " | ".join(str(w.message) for w in rec)
    assert (
        "2 empty caption(s) set aside: ['1#1', '2#0']" in msgs
        and "2 image(s) without a caption set aside: ['2', '3']" in msgs
    )
    assert rs.image_ids == ("1",) and rs.set_aside == {"texts": 2, "images": 2}
    f = write(tmp_path, "f.txt", "image,caption\na.jpg,\nb.jpg,a cat\n")
    with pytest.warns(DataWarning) as rec:
        assert R.load_flickr_captions(f, tmp_path).image_ids == ("b.jpg",)
    assert [str(w.message).split(": ", 1)[1] for w in rec] == [
        "1 empty caption(s) set aside: ['a.jpg#0']",
        "1 image(s) without a caption set aside: ['a.jpg']",
    ]


def test_wds_folder_problems(tmp_path):
    import webdataset as wds

    d = tmp_path / "wds_bad"
    with pytest.raises(FileNotFoundError, match="folder not found"):
        R.load_retrieval_wds(d)
    (d / "test").mkdir(parents=True)
    with pytest.raises(
        DataFormatError, match="not 'retrieval'.*missing: CLIP_benchmark reads the folder as classification"
    ):
        R.load_retrieval_wds(d)
    (d / "dataset_type.txt").write_text("retrieval\n")
    with pytest.raises(FileNotFoundError, match="nshards.txt not found"):
        R.load_retrieval_wds(d)
    (d / "test" / "nshards.txt").write_text("two\n")
    with pytest.raises(DataFormatError, match="positive shard count"):
        R.load_retrieval_wds(d)
    (d / "test" / "nshards.txt").write_text("2\n")
    png = tmp_path / "x.png"
    Image.new("RGB", (8, 8)).save(png)
    with wds.TarWriter(str(d / "test" / "0.tar")) as sink:
        sink.write({"__key__": "a", "png": png.read_bytes(), "txt": "one\n\ntwo"})
        sink.write({"__key__": "b", "png": png.read_bytes()})  # no captions
        sink.write({"__key__": "c", "png": b"garbage", "txt": "three"})  # undecodable: the encoder sets it aside
        sink.write({"__key__": "d", "png": png.read_bytes(), "txt": b"caf\xe9"})  # Latin-1 captions
    with pytest.raises(FileNotFoundError, match="1 of 2 shard"):
        R.load_retrieval_wds(d)
    (d / "test" / "nshards.txt").write_text("1\n")
    with pytest.warns(DataWarning) as rec:
        rs = R.load_retrieval_wds(d)
    assert rs.image_ids == ("a", "c") and rs.captions[0] == ("one", "two")  # the blank middle line set aside
    assert rs.set_aside == {"images": 2, "texts": 1}
    assert any(
        "'b'" in str(w.message) and "caption" in str(w.message) and "sample 3: captions not UTF-8" in str(w.message)
        for w in rec
    )
    m = WordHashModel(dim=8)
    m.image_size = 8
    with pytest.warns(DataWarning, match="1 of 2 images could not be read.*c: .*cannot decode"):
        res, _ = R.evaluate_retrieval(m, rs, log=None, num_workers=0, ks=(1,))
    assert res["retrieval/wds_bad/images_set_aside"] == 3 and res["retrieval/wds_bad/texts_set_aside"] == 2


def test_text_only_model_is_skipped_with_a_line():
    from hierbench.models.scorers import TextScorer

    lines = []
    res, table = R.evaluate_retrieval(
        TextScorer(lambda ts: torch.ones(len(ts), 4), name="st"), "coco:x.json", log=lines.append
    )
    assert res == {} and table.empty
    assert "retrieval coco:x.json: skipped" in lines[0] and "text-only" in lines[0]


# ---- per-item rows for paired comparisons ------------------------------------------------------------------------
def test_per_query_rows_survive_the_items_file_and_feed_paired_differences():
    rng = np.random.default_rng(0)
    owner = np.repeat(np.arange(20), 2)
    sim_a = rng.normal(size=(40, 20))
    sim_a[np.arange(40), owner] += 3.0  # a: good
    sim_b = rng.normal(size=(40, 20))  # b: chance
    (ra, ta), (rb, tb) = (
        R.retrieval_scores(s, owner, name="toy", image_ids=[f"im{i}" for i in range(20)]) for s in (sim_a, sim_b)
    )
    # the JSON lines round trip of `hierbench eval --json`
    ta, tb = (
        pd.read_json(io.StringIO(t.to_json(orient="records", lines=True)), lines=True, dtype={"id": str, "unit": str})
        for t in (ta, tb)
    )
    assert ta.id.tolist()[:3] == ["im0#0", "im0#1", "im1#0"] and ta.unit.tolist()[:3] == ["im0", "im0", "im1"]
    for k in (1, 5, 10):
        for side in ("image", "text"):
            col = f"{side}_retrieval_recall@{k}"
            assert ta[col].mean() == pytest.approx(ra[f"retrieval/toy/{col}"]) and tb[col].mean() == pytest.approx(
                rb[f"retrieval/toy/{col}"]
            )
            assert ta[col].notna().sum() == (40 if side == "image" else 20)
    d = paired_item_differences(ta, tb, n_boot=300).set_index("benchmark").loc["retrieval/toy"]  # `ok` = the hit at 1
    assert d.n == 60 and d.acc_a == pytest.approx(ta.ok.mean()) and d.ci_low > 0


def test_library_does_not_import_clip_benchmark():
    """No module of the library imports clip_benchmark, at the top or in a function: read from the source, since
    tests/test_clip_benchmark_parity.py imports it into the same test session (`sys.modules` cannot tell)."""
    import ast
    import hierbench

    for path in sorted(Path(hierbench.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n.split(".")[0] == "clip_benchmark" for n in names), (
                f"{path.name}:{node.lineno} imports clip_benchmark"
            )
