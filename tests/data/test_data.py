"""Dense checks for hierbench.data.batch: real annotation files, small fixtures of every format, fuzzed parsers, batch
format."""

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st
from PIL import Image

from hierbench.data import batch as D, loaders as L, sources as S
from hierbench.data.batch import (
    CLIP_MEAN,
    CLIP_STD,
    WORLD_MEAN,
    WORLD_STD,
    ChoiceItem,
    CorruptImageError,
    DataFormatError,
    MissingImageError,
    check_image,
    collate_batch,
    image_to_tensor,
    load_image,
    normalize,
)
from hierbench.data.loaders import (
    load_aro_vg,
    load_coco_karpathy,
    load_crepe,
    load_grit,
    load_hierarcaps,
    load_hierarcaps_pairs,
    load_negclip_tsv,
    load_order_benchmark,
    load_sugarcrepe,
    load_sugarcrepe_pp,
    load_valse,
    load_valse_file,
    load_whatsup_controlled,
    load_whatsup_spatial,
    order_options,
)
from hierbench.data.negatives import normalize_text

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
DATA = SHARED / "data"
needs_shared = pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data is absent (a user's clone)")

# ---- the real files ---------------------------------------------------------------------------------------------
SC_COUNTS = dict(
    add_att=692, add_obj=2062, replace_att=788, replace_obj=1652, replace_rel=1406, swap_att=666, swap_obj=245
)


@needs_shared
def test_real_sugarcrepe():
    sc = load_sugarcrepe(DATA / "sugarcrepe", image_root="/imgs")
    assert {k: len(v) for k, v in sc.items()} == SC_COUNTS and sum(SC_COUNTS.values()) == 7511
    for subset, items in sc.items():
        for it in items:
            assert it.subset == subset and it.correct == 0 and len(it.options) == 2 and it.box is None
            assert it.image_path.parent == Path("/imgs") and it.image_path.suffix == ".jpg"
            assert normalize_text(it.options[0]) != normalize_text(it.options[1])
    assert sc["add_att"][0].options[0] == "A drawing of a young woman with many facial piercings."


@needs_shared
def test_real_sugarcrepe_pp():
    # swap_obj records 2 and 8 have a negative equal to a positive: set aside, named in a DataWarning
    with pytest.warns(D.DataWarning, match=r"swap_obj.json: 2 record\(s\) set aside .*\['2', '8'\]"):
        pp = load_sugarcrepe_pp(DATA / "sugarcrepe_pp", image_root="/imgs")
    assert {k: len(v) for k, v in pp.items()} == {
        k: SC_COUNTS[k] - 2 * (k == "swap_obj") for k in L.SUGARCREPE_PP_SUBSETS
    }
    assert sum(map(len, pp.values())) == 4755
    it = pp["swap_obj"][0]
    assert (it.key, it.caption2, it.image_path.name) == (
        "0",
        "The cat swats at the plant while sitting on its hind legs.",
        "000000222235.jpg",
    )


@needs_shared
def test_real_hierarcaps_all_images_open():
    items = load_hierarcaps(DATA / "hierarcaps" / "hierarcaps_test.csv")
    assert len(items) == 1000 and all(len(it.chain) == 4 and all(c.strip() for c in it.chain) for it in items)
    assert items[1].chain[:2] == ("bird", "blue bird")
    assert items[0].image_path.name == "COCO_val2014_000000301718.jpg"
    assert len({it.image_path for it in items}) == 1000
    t0 = time.perf_counter()
    sizes = [check_image(it.image_path) for it in items]  # every real image decodes
    assert all(w > 0 and h > 0 for w, h in sizes)
    assert time.perf_counter() - t0 < 30
    im = items[0].image()
    assert im.mode == "RGB" and im.size == sizes[0]
    x = items[0].image_tensor(32)
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and torch.isfinite(x).all()


# ---- fixtures: every other format -------------------------------------------------------------------------------
def _img(path: Path, size=(64, 48), color=(200, 10, 10)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path)
    return path


def _json(path: Path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))
    return path


KARPATHY = {
    "images": [
        {
            "filepath": "val2014",
            "filename": "a.jpg",
            "split": "test",
            "cocoid": 1,
            "sentences": [
                {"raw": "A man riding a brown horse on a sandy beach."},
                {"raw": "A red bus parked next to a tall building."},
            ],
        },
        {"filepath": "train2014", "filename": "b.jpg", "split": "train", "cocoid": 2, "sentences": [{"raw": "A dog."}]},
        {"filename": "c.jpg", "split": "restval", "sentences": [{"raw": "Two cats on a bed."}]},
    ]
}


def test_karpathy_and_order(tmp_path):
    p = _json(tmp_path / "dataset_coco.json", KARPATHY)
    allimgs = load_coco_karpathy(p, image_root=tmp_path)
    assert [it.split for it in allimgs] == ["test", "train", "restval"]
    assert allimgs[0].image_path == tmp_path / "val2014" / "a.jpg" and allimgs[2].image_path == tmp_path / "c.jpg"
    assert [it.key for it in load_coco_karpathy(p, ["train", "restval"], tmp_path)] == ["2", "2"]
    order = load_order_benchmark(p, image_root=tmp_path, seed=0)
    assert len(order) == 2 and all(len(it.options) == 5 and it.correct == 0 for it in order)
    for it in order:
        orig = sorted(normalize_text(it.options[0]).split())
        assert all(sorted(normalize_text(o).split()) == orig for o in it.options[1:])  # same words, other order
        assert len({normalize_text(o) for o in it.options}) >= 2
    assert order == load_order_benchmark(p, image_root=tmp_path, seed=0)
    assert order_options("A dog.") is None


def test_grit(tmp_path):
    recs = [
        dict(
            key="k1",
            caption="a dog chasing a ball in the park",
            width=100,
            height=100,
            noun_chunks=[[0, 5, 0.0, 0.0, 0.5, 0.5, 0.9], [16, 22, 0.1, 0.1, 0.2, 0.2, 0.5]],
            ref_exps=[[0, 20, 0.0, 0.0, 0.9, 0.9, 0.7]],
        ),
        dict(caption="a cat", width=640, height=480, file_name="x/cat.jpg", noun_chunks=[[0, 5, 10, 20, 60, 80, 1.0]]),
    ]
    p = tmp_path / "grit.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n\n")
    items = load_grit(p, image_root=tmp_path)
    assert [ph.text for ph in items[0].phrases] == ["a dog", "a dog chasing a ball"]  # 10x10 px ball dropped
    assert items[0].phrases[0].box == (0.0, 0.0, 50.0, 50.0) and items[0].image_path == tmp_path / "k1.jpg"
    assert items[1].phrases[0].box == (10.0, 20.0, 60.0, 80.0) and items[1].image_path == tmp_path / "x" / "cat.jpg"
    _img(tmp_path / "k1.jpg", (100, 100))
    assert items[0].crop(0).size == (50, 50)
    assert len(load_grit(p, image_root=tmp_path, min_box_size=0)[0].phrases) == 3


def test_hierarcaps_pairs(tmp_path):
    chain = "animal => dog => brown dog => A brown dog on a sofa"
    neg = "animal => cat => black cat => A black cat on a sofa"
    pd.DataFrame(
        dict(
            positive=[chain],
            negative=[neg],
            image_url=["http://images.cocodataset.org/val2014/COCO_val2014_000000000139.jpg"],
        )
    ).to_csv(tmp_path / "exp.csv", index=False)
    (it,) = load_hierarcaps_pairs(tmp_path / "exp.csv", image_root=tmp_path)
    assert it.positive[1] == "dog" and it.negative[3] == "A black cat on a sofa"
    assert it.image_path == tmp_path / "COCO_val2014_000000000139.jpg"
    pd.DataFrame(dict(positive=[chain], negative=[neg])).to_csv(tmp_path / "train.csv", index=False)
    (tr,) = load_hierarcaps_pairs(tmp_path / "train.csv")
    assert tr.image_path is None
    with pytest.raises(ValueError, match="no image"):
        tr.image()
    pd.DataFrame(dict(positive=["a => b"], negative=[neg])).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(DataFormatError, match=r"bad.csv, record 'row 0', field 'positive': expected 4 levels"):
        load_hierarcaps_pairs(tmp_path / "bad.csv")
    assert load_hierarcaps_pairs(tmp_path / "bad.csv", n_levels=None)[0].positive == ("a", "b")


VALSE_REC = dict(
    dataset="visual7w",
    image_file="v7w_1.jpg",
    caption="There are two dogs.",
    foil="There are no dogs.",
    linguistic_phenomena="existence",
    mturk=dict(caption=3, foil=0, other=0),
)


def test_valse(tmp_path):
    weak = dict(VALSE_REC, mturk=dict(caption=1, foil=2, other=0))
    _json(tmp_path / "ann" / "existence.json", {"s1": VALSE_REC, "s2": weak})
    _json(tmp_path / "ann" / "relations.json", {"r1": dict(VALSE_REC, dataset="coco", image_file="c.jpg")})
    v = load_valse(tmp_path / "ann", image_root=tmp_path, image_dirs={"coco": tmp_path / "coco"})
    assert list(v) == ["existence", "relations"]
    assert [it.key for it in v["existence"]] == ["s1"]  # mturk.caption >= 2 only
    assert len(load_valse_file(tmp_path / "ann" / "existence.json", tmp_path, valid_only=False)) == 2
    assert v["relations"][0].image_path == tmp_path / "coco" / "c.jpg"
    assert v["existence"][0].options == ("There are two dogs.", "There are no dogs.")


def test_aro_crop_and_attribution(tmp_path):
    _img(tmp_path / "vg" / "5.jpg", (200, 100))
    rel = dict(
        image_path="5.jpg",
        bbox_x=10,
        bbox_y=20,
        bbox_w=50,
        bbox_h=30,
        relation_name="on",
        true_caption="the cup is on the table",
        false_caption="the table is on the cup",
    )
    att = dict(
        rel,
        relation_name=None,
        attributes=["white", "black"],
        true_caption="the white cup and the black table",
        false_caption="the black cup and the white table",
    )
    items = load_aro_vg(_json(tmp_path / "rel.json", [rel, att]), image_root=tmp_path / "vg")
    assert [it.subset for it in items] == ["on", "white_black"]
    assert items[0].options[items[0].correct] == "the cup is on the table" and items[0].correct == 1
    assert items[0].image().size == (50, 30)
    overhang = load_aro_vg(_json(tmp_path / "o.json", [dict(rel, bbox_x=180, bbox_w=50)]), image_root=tmp_path / "vg")
    assert overhang[0].image().size == (20, 30)  # clipped to the image border
    outside = load_aro_vg(_json(tmp_path / "o2.json", [dict(rel, bbox_x=500)]), image_root=tmp_path / "vg")
    with pytest.raises(DataFormatError, match="no area"):
        outside[0].image()


def test_negclip_tsv(tmp_path):
    df = pd.DataFrame(
        dict(
            title=["a dog on a sofa", " a cat on a bed "],
            filepath=["train2014/1.jpg", str(tmp_path / "abs" / "2.jpg")],
            neg_caption=[str(["a sofa on a dog", "a dog under a sofa"]), str(["a bed on a cat"])],
            neg_image=["[1]", "[0]"],
        )
    )
    df.to_csv(tmp_path / "n.tsv", sep="\t")  # with the unnamed index column the real file has
    rows = load_negclip_tsv(tmp_path / "n.tsv", image_root=tmp_path)
    assert rows[0].neg_captions == ("a sofa on a dog", "a dog under a sofa") and rows[0].neg_images == (1,)
    assert rows[0].image_path == tmp_path / "train2014" / "1.jpg" and rows[1].image_path == tmp_path / "abs" / "2.jpg"
    assert rows[1].caption == "a cat on a bed"  # outer spaces stripped (upstream rows carry them)
    df3 = df.copy()
    df3.loc[1, "filepath"] = "/abs/2.jpg"
    df3.to_csv(tmp_path / "o.tsv", sep="\t")
    with pytest.raises(
        DataFormatError, match="record 'row 1', field 'filepath': image path '/abs/2.jpg' leaves the image root"
    ):
        load_negclip_tsv(tmp_path / "o.tsv", image_root=tmp_path)
    for bad, msg in [
        ("__import__('os').system('echo pwned')", "not a Python list literal"),
        ("[3]", "expected row ids in"),
        ("{'a': 1}", "expected a list"),
    ]:
        df2 = df.copy()
        df2.loc[1, "neg_image"] = bad
        df2.to_csv(tmp_path / "b.tsv", sep="\t")
        with pytest.raises(DataFormatError, match=rf"b.tsv, record 'row 1', field 'neg_image': {msg}"):
            load_negclip_tsv(tmp_path / "b.tsv")


def test_whatsup(tmp_path):
    ctl = [
        dict(
            image_path="data/controlled_images/mug_on_table.jpeg",
            caption_options=[
                "A mug on a table",
                "A mug under a table",
                "A mug to the left of a table",
                "A mug to the right of a table",
            ],
        )
    ]
    items = load_whatsup_controlled(_json(tmp_path / "controlled_images_dataset.json", ctl), image_root=tmp_path)
    assert items[0].image_path == tmp_path / "data/controlled_images/mug_on_table.jpeg" and len(items[0].options) == 4
    sp = load_whatsup_spatial(
        _json(tmp_path / "coco_qa_one_obj.json", [[139, "a dog left of a cat", "a dog right of a cat"]]),
        image_root=tmp_path,
    )
    assert sp[0].image_path == tmp_path / "000000000139.jpg" and sp[0].options[0] == "a dog left of a cat"
    gqa = load_whatsup_spatial(
        _json(tmp_path / "vg_qa_one_obj.json", [["2354786", "x left", "x right"]]), image_root=tmp_path
    )
    assert gqa[0].image_path == tmp_path / "2354786.jpg"


def test_crepe(tmp_path):
    df = pd.DataFrame(
        dict(
            image_id=[2407890],
            x=[5],
            y=[6],
            width=[40],
            height=[30],
            caption=["a man on a horse"],
            hard_negs=[str(["a horse on a man", "a man beside a horse", "a woman on a horse"])],
        )
    )
    df.to_csv(tmp_path / "prod_vg_hard_negs_swap_complexity_4.csv", index=False)
    (it,) = load_crepe(tmp_path / "prod_vg_hard_negs_swap_complexity_4.csv", image_root=tmp_path)
    assert it.options[0] == "a man on a horse" and len(it.options) == 4 and it.box == (5.0, 6.0, 45.0, 36.0)
    assert it.image_path == tmp_path / "2407890.jpg" and it.subset == "prod_vg_hard_negs_swap_complexity_4"


# ---- images ----------------------------------------------------------------------------------------------------
def test_missing_and_corrupt_images(tmp_path):
    it = ChoiceItem(tmp_path / "nope.jpg", ("a", "b"), 0)
    with pytest.raises(MissingImageError, match=f"expected {tmp_path / 'nope.jpg'}"):
        it.image()
    bad = tmp_path / "bad.jpg"
    good = _img(tmp_path / "good.jpg", (64, 64))
    bad.write_bytes(good.read_bytes()[:200])  # truncated JPEG
    with pytest.raises(CorruptImageError, match="bad.jpg"):
        load_image(bad)
    with pytest.raises(CorruptImageError, match="bad.jpg"):
        check_image(bad)
    (tmp_path / "txt.jpg").write_text("not an image")
    with pytest.raises(CorruptImageError, match="txt.jpg"):
        load_image(tmp_path / "txt.jpg")
    assert check_image(good) == (64, 64)


def test_default_image_root_from_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("HIERBENCH_DATA_ROOT", str(tmp_path / "root"))
    _json(tmp_path / "sc" / "swap_obj.json", {"0": dict(filename="1.jpg", caption="a b", negative_caption="b a")})
    it = load_sugarcrepe(tmp_path / "sc", subsets=["swap_obj"])["swap_obj"][0]
    assert it.image_path == tmp_path / "root" / "coco" / "val2017" / "1.jpg"


def test_image_to_tensor_and_normalize():
    arr = np.random.default_rng(0).integers(0, 256, (10, 20, 3), dtype=np.uint8)
    x = image_to_tensor(arr, 8)
    assert x.shape == (3, 8, 8) and x.dtype == torch.float32
    raw = image_to_tensor(arr[:8, :8], 8, (0, 0, 0), (1, 1, 1))  # already S×S: exact, no resampling
    torch.testing.assert_close(raw, torch.from_numpy(arr[:8, :8]).permute(2, 0, 1).float() / 255)
    torch.testing.assert_close(
        image_to_tensor(torch.from_numpy(arr[:8, :8].copy()), 8, WORLD_MEAN, WORLD_STD), raw * 2 - 1
    )
    torch.testing.assert_close(
        normalize(torch.ones(2, 3, 1, 1), CLIP_MEAN, CLIP_STD)[1, :, 0, 0],
        (1 - torch.tensor(CLIP_MEAN)) / torch.tensor(CLIP_STD),
    )
    with pytest.raises(ValueError, match="uint8"):
        image_to_tensor(arr.astype(np.float32), 8)
    with pytest.raises(TypeError):
        image_to_tensor("x.jpg", 8)
    with pytest.raises(ValueError, match="3, H, W"):
        normalize(torch.ones(4, 4))


# ---- batch format ------------------------------------------------------------------------------------------------
def _item(i, **kw):
    d = dict(image=torch.rand(3, 8, 8), caption=f"a red circle {i}", index=i)
    d.update(kw)
    return d


def test_collate_full_batch():
    items = [
        _item(
            i,
            crop=torch.rand(3, 8, 8),
            phrase="a circle",
            negatives=["a blue circle", "a square"],
            paraphrase="a circle that is red",
            alternative="a shape",
            chain=["shape", "circle", "red circle", "x"],
        )
        for i in range(3)
    ]
    b = collate_batch(items)
    assert set(b) == {
        "images",
        "captions",
        "crops",
        "phrases",
        "negatives",
        "paraphrases",
        "alternatives",
        "chains",
        "index",
    }
    assert b["images"].shape == b["crops"].shape == (3, 3, 8, 8) and b["index"].dtype == torch.long
    assert len(b["negatives"]) == 3 and all(len(n) == 2 for n in b["negatives"])


@pytest.mark.parametrize(
    "items,msg",
    [
        ([], "empty"),
        ([_item(0), _item(1, negatives=["x"])], "keys"),
        ([_item(0, negatives=["x"]), _item(1, negatives=["x", "y"])], "negatives, item 0 has 1"),
        ([_item(0, negatives=[""])], "empty or equal"),
        ([_item(0, negatives=["A red circle 0."])], "empty or equal"),
        ([_item(0), _item(1, image=torch.rand(3, 4, 4))], "shape"),
        ([_item(0, image=np.zeros((8, 8, 3), np.uint8))], "image_to_tensor"),
        ([_item(0, caption="  ")], "non-empty str"),
        ([_item(0, chain=["a", "b"]), _item(1, chain=["a"])], "chain"),
        ([_item(0, foo=1)], "unknown item keys"),
    ],
)
def test_collate_rejects(items, msg):
    with pytest.raises(ValueError, match=msg):
        collate_batch(items)


# ---- fuzzing: truncated / wrong-typed records -> DataFormatError naming file and record -------------------------
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
FUZZ = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)

SC_REC = dict(filename="1.jpg", caption="a dog on a cat", negative_caption="a cat on a dog")
PP_REC = dict(id=0, filename="1.jpg", caption="a dog on a cat", caption2="a cat under a dog", negative_caption="x y")
ARO_REC = dict(
    image_path="1.jpg",
    bbox_x=1,
    bbox_y=2,
    bbox_w=3,
    bbox_h=4,
    true_caption="a b",
    false_caption="b a",
    relation_name="on",
)
WU_REC = dict(image_path="a.jpeg", caption_options=["a", "b", "c", "d"])


def _loader_cases(tmp):
    "(name, write(obj) -> path, loader(path), valid top-level object, path into the object of one record)"
    sc_dir = tmp / "sc"
    pp_dir = tmp / "pp"
    return {
        "sugarcrepe": (
            lambda o: _json(sc_dir / "swap_obj.json", o),
            lambda p: load_sugarcrepe(sc_dir, tmp, ["swap_obj"]),
            {"0": dict(SC_REC), "1": dict(SC_REC)},
            "1",
        ),
        "sugarcrepe_pp": (
            lambda o: _json(pp_dir / "swap_att.json", o),
            lambda p: load_sugarcrepe_pp(pp_dir, tmp, ["swap_att"]),
            [dict(PP_REC), dict(PP_REC, id=1)],
            1,
        ),
        "valse": (
            lambda o: _json(tmp / "existence.json", o),
            lambda p: load_valse_file(p, tmp),
            {"a": dict(VALSE_REC), "b": dict(VALSE_REC)},
            "b",
        ),
        "aro": (lambda o: _json(tmp / "rel.json", o), lambda p: load_aro_vg(p, tmp), [dict(ARO_REC), dict(ARO_REC)], 1),
        "whatsup": (
            lambda o: _json(tmp / "wu.json", o),
            lambda p: load_whatsup_controlled(p, tmp),
            [dict(WU_REC), dict(WU_REC)],
            1,
        ),
        "karpathy": (
            lambda o: _json(tmp / "k.json", o),
            lambda p: load_coco_karpathy(p, image_root=tmp),
            json.loads(json.dumps(KARPATHY)),
            None,
        ),
    }


CASES = ["sugarcrepe", "sugarcrepe_pp", "valse", "aro", "whatsup", "karpathy"]


def _check_error(err: DataFormatError, path: Path):
    assert str(path) in str(err) and err.path == path


@pytest.mark.parametrize("case", CASES)
@FUZZ
@given(data=st.data())
def test_fuzz_wrong_typed_fields(tmp_path, case, data):
    write, load, obj, rkey = _loader_cases(tmp_path)[case]
    if case == "karpathy":
        rec, rkey_s = obj["images"][1], "images[1]"
    else:
        rec, rkey_s = obj[rkey], str(rkey)
    fieldname = data.draw(st.sampled_from(sorted(rec)))
    if data.draw(st.booleans()):
        del rec[fieldname]
    else:
        rec[fieldname] = data.draw(JUNK)
    path = write(obj)
    try:
        load(path)
    except DataFormatError as err:
        _check_error(err, path)
        assert rkey_s in str(err), str(err)
    # a junk value that happens to be valid (e.g. a non-empty string caption) may load; nothing else may escape


@pytest.mark.parametrize("case", CASES)
@FUZZ
@given(data=st.data())
def test_fuzz_truncated_and_wrong_top_level(tmp_path, case, data):
    write, load, obj, _ = _loader_cases(tmp_path)[case]
    path = write(obj)
    text = path.read_text()
    cut = data.draw(st.integers(0, len(text) - 1))
    path.write_text(text[:cut])
    with pytest.raises(DataFormatError) as ei:
        load(path)
    _check_error(ei.value, path)
    path = write(data.draw(st.one_of(st.integers(), st.text(max_size=4), st.none())))
    with pytest.raises(DataFormatError):
        load(path)


def _csv_cases(tmp):
    chain = "a => b => c => d"
    return {
        "hierarcaps": (
            tmp / "h.csv",
            lambda p: load_hierarcaps(p, tmp),
            pd.DataFrame(dict(id=[0, 1], captions=[chain, chain], image_url=["u/COCO_val2014_000000000001.jpg"] * 2)),
            ",",
        ),
        "crepe": (
            tmp / "c.csv",
            lambda p: load_crepe(p, tmp),
            pd.DataFrame(
                dict(
                    image_id=[1, 2],
                    x=[0, 0],
                    y=[0, 0],
                    width=[5, 5],
                    height=[5, 5],
                    caption=["a b", "c d"],
                    hard_negs=[str(["b a"])] * 2,
                )
            ),
            ",",
        ),
        "negclip": (
            tmp / "n.tsv",
            lambda p: load_negclip_tsv(p, tmp),
            pd.DataFrame(
                dict(
                    title=["a b", "c d"],
                    filepath=["1.jpg", "2.jpg"],
                    neg_caption=[str(["b a"])] * 2,
                    neg_image=["[0]", "[1]"],
                )
            ),
            "\t",
        ),
    }


@pytest.mark.parametrize("case", ["hierarcaps", "crepe", "negclip"])
@FUZZ
@given(data=st.data())
def test_fuzz_csv(tmp_path, case, data):
    path, load, df, sep = _csv_cases(tmp_path)[case]
    df = df.astype(object)
    col = data.draw(st.sampled_from(list(df.columns)))
    mode = data.draw(st.sampled_from(["junk", "drop", "truncate", "bytes"]))
    if mode == "junk":
        df.loc[1, col] = data.draw(st.one_of(st.text(max_size=6), st.integers(), st.floats(allow_nan=True), st.none()))
    if mode == "drop":
        df = df.drop(columns=[col])
    df.to_csv(path, sep=sep, index=False)
    if mode == "truncate":
        raw = path.read_bytes()
        path.write_bytes(raw[: data.draw(st.integers(0, len(raw) - 1))])
    if mode == "bytes":
        path.write_bytes(data.draw(st.binary(max_size=40)))
    try:
        load(path)
    except DataFormatError as err:
        _check_error(err, path)


def test_fuzz_grit_lines(tmp_path):
    "Each damaged line of a GRIT file is named by its line number."
    good = dict(key="k", caption="a dog", width=64, height=64, noun_chunks=[[0, 5, 0, 0, 1, 1, 0.9]])
    bads = [
        dict(good, noun_chunks=[[0, 5, 0, 0, 1]]),
        dict(good, noun_chunks=[[0, 99, 0, 0, 1, 1, 1]]),
        dict(good, width="wide"),
        dict(good, caption=None),
        dict(good, noun_chunks="x"),
        dict(good, noun_chunks=[[0, 5, 0.9, 0, 0.1, 1, 1]]),
        dict(good, key=None),
    ]
    for bad in bads:
        p = tmp_path / "g.jsonl"
        p.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(DataFormatError, match=r"g.jsonl, record 'line 2'"):
            load_grit(p, tmp_path)
    p.write_text(json.dumps(good) + "\n" + json.dumps(good)[:20])
    with pytest.raises(DataFormatError, match="line 2.*not valid JSON"):
        load_grit(p, tmp_path)


def test_missing_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_aro_vg(tmp_path / "nope.json", tmp_path)
    with pytest.raises(FileNotFoundError, match="annotation folder not found"):
        load_sugarcrepe(tmp_path / "none")
    with pytest.raises(FileNotFoundError, match="no VALSE files"):
        load_valse(tmp_path)
    with pytest.raises(ValueError, match="unknown subset 'add_att'"):
        load_sugarcrepe_pp(tmp_path, subsets=["add_att"])


# ---- the world as a Dataset ------------------------------------------------------------------------------------
from hierbench.data.sources import WorldDataset, world_loader


@pytest.fixture(scope="module")
def world_ds():
    return WorldDataset(
        "train",
        48,
        seed=3,
        fields=("crop", "negatives", "alternative", "chain", "index"),
        k_negatives=5,
        cache_dir=False,
    )


def test_world_items_are_true_and_negatives_false(world_ds):
    from hierbench.world.scenes import holds, true_texts

    ws = world_ds.ws
    for i in range(len(world_ds)):
        it, scene = world_ds[i], ws.scene(i)
        assert holds(scene, it["caption"]) and it["caption"] in true_texts(scene)
        assert holds(scene, it["alternative"]) and normalize_text(it["alternative"]) != normalize_text(it["caption"])
        assert len(it["negatives"]) == 5 and not any(holds(scene, n) for n in it["negatives"])
        assert it["phrase"] in ws.meta[i]["phrases"] and it["chain"] == ws.meta[i]["chain"] and it["index"] == i
        assert it["image"].shape == it["crop"].shape == (3, 64, 64)
        assert it["image"].min() >= -1 and it["image"].max() <= 1  # WORLD_MEAN/STD maps [0,1] -> [-1,1]


def test_world_sampling_is_deterministic_and_epoch_dependent(world_ds):
    from hierbench.data.sources import WorldDataset

    world_ds = WorldDataset(
        "train", len(world_ds), fields=("index",), world_split=world_ds.ws
    )  # captions sampled freely
    caps0 = [world_ds[i]["caption"] for i in range(len(world_ds))]
    assert caps0 == [world_ds[i]["caption"] for i in range(len(world_ds))]
    world_ds.set_epoch(1)
    caps1 = [world_ds[i]["caption"] for i in range(len(world_ds))]
    world_ds.set_epoch(0)
    assert caps0 != caps1
    lengths = {len(c.split()) for c in caps0 + caps1}
    assert min(lengths) <= 2 and max(lengths) >= 6  # short prompts and full captions both occur


def test_world_paraphrase_mode_and_loader(world_ds):
    ds = WorldDataset(fields=("paraphrase", "negatives"), k_negatives=2, world_split=world_ds.ws)
    for i in range(10):
        it, m = ds[i], world_ds.ws.meta[i]
        group = [m["chain"][-1], *m["paraphrases"]]
        assert it["caption"] in group and it["paraphrase"] in group and it["paraphrase"] != it["caption"]
    top = WorldDataset(caption="top", world_split=world_ds.ws)
    assert top[0]["caption"] == world_ds.ws.meta[0]["chain"][-1] and set(top[0]) == {"image", "caption", "index"}
    batches = list(world_loader(world_ds, 16, seed=0))
    assert [len(b["captions"]) for b in batches] == [16, 16, 16]
    assert sorted(torch.cat([b["index"] for b in batches]).tolist()) == list(range(48))
    assert batches[0]["index"].tolist() == next(iter(world_loader(world_ds, 16, seed=0)))["index"].tolist()
    with pytest.raises(ValueError, match="unknown world field"):
        WorldDataset(fields=("depth",), world_split=world_ds.ws)
    with pytest.raises(IndexError):
        world_ds[48]


def test_world_clip_preprocessing(world_ds):
    ds = WorldDataset(world_split=world_ds.ws, image_size=64, mean=CLIP_MEAN, std=CLIP_STD, fields=("crop",))
    it = ds[0]
    assert it["image"].shape == it["crop"].shape == (3, 64, 64)


def test_errors_pickle(tmp_path):
    import pickle

    for e in [
        DataFormatError(tmp_path / "a.json", "3", "caption", "bad"),
        MissingImageError(tmp_path / "x.jpg"),
        CorruptImageError(tmp_path / "y.jpg", "truncated"),
    ]:
        e2 = pickle.loads(pickle.dumps(e))
        assert type(e2) is type(e) and str(e2) == str(e)


def test_world_items_pair_captions_with_what_they_entail():
    "HyCoCLIP's T_b → T entailment needs a caption that entails the phrase; hard negatives are edits of the caption."
    from hierbench.world import scenes as W
    from hierbench.data.sources import WorldDataset

    boxes = WorldDataset("train", 120, fields=("crop", "index"), cache_dir=False)
    for i in range(len(boxes)):
        it = boxes[i]
        assert W.entails(it["caption"], it["phrase"]), (it["caption"], it["phrase"])
    negs = WorldDataset("train", 120, fields=("negatives", "index"), k_negatives=3, cache_dir=False)
    for i in range(len(negs)):
        it = negs[i]
        assert it["caption"] == negs.ws.meta[i]["chain"][-1]  # the caption the negatives were made from
        assert all(not W.holds(negs.ws.scene(i), t) for t in it["negatives"])


def test_upstream_layouts_aro_crepe_whatsup(tmp_path):
    "ARO reads BLIP's test list; CREPE finds VG images in either VG folder; WhatsUp follows the upstream naming."
    blip = [
        {
            "image": "val2014/COCO_val2014_000000391895.jpg",
            "caption": ["a man with a red helmet on a small moped", "a man riding on the back of a motorcycle"],
        }
    ]
    (tmp_path / "coco_karpathy_test.json").write_text(json.dumps(blip))
    items = L.load_order_benchmark(tmp_path / "coco_karpathy_test.json", image_root=tmp_path)
    assert items and all(it.image_path == tmp_path / "val2014" / "COCO_val2014_000000391895.jpg" for it in items)
    assert all(len(it.options) == 5 for it in items)
    (tmp_path / "weird.json").write_text(json.dumps({"annotations": []}))
    with pytest.raises(DataFormatError, match="unknown layout: expected BLIP's test annotation"):
        L.load_order_benchmark(tmp_path / "weird.json", image_root=tmp_path)
    (tmp_path / "VG_100K_2").mkdir()
    Image.new("RGB", (50, 50)).save(tmp_path / "VG_100K_2" / "2345.jpg")
    pd.DataFrame(
        dict(image_id=["2345"], x=[1], y=[1], width=[20], height=[20], caption=["a dog"], hard_negs=[str(["a cat"])])
    ).to_csv(tmp_path / "crepe.csv", index=False)
    assert (
        L.load_crepe(tmp_path / "crepe.csv", image_root=tmp_path)[0].image_path == tmp_path / "VG_100K_2" / "2345.jpg"
    )
    _json(tmp_path / "coco_qa_two_obj.json", [["139", "a dog left of a cat", "a dog right of a cat"]])
    assert (
        L.load_whatsup_spatial(tmp_path / "coco_qa_two_obj.json", image_root=tmp_path)[0].image_path.name
        == "000000000139.jpg"
    )
    _json(tmp_path / "vg_qa_two_obj.json", [[2354786, "x left of y", "x right of y"]])
    assert (
        L.load_whatsup_spatial(tmp_path / "vg_qa_two_obj.json", image_root=tmp_path)[0].image_path.name == "2354786.jpg"
    )
    assert L.load_whatsup_spatial(tmp_path / "vg_qa_two_obj.json")[0].image_path.parent.name == "vg_images"


# ---------------------------------------------------------------- WorldDataset: mirror twins and the top caption
def _draw_digest(ds, epochs=(0, 3)) -> str:
    import hashlib

    out = []
    for e in epochs:
        ds.set_epoch(e)
        for i in range(len(ds)):
            it, _, _ = ds._item(i)
            out.append({k: v for k, v in it.items() if k not in ("image", "crop")})
    return hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest()[:16]


def test_world_draws_without_the_new_options_are_unchanged():
    "Off by default, mirror twins and top_caption_p leave every caption, crop and negative draw as it was (pinned)."
    assert _draw_digest(S.WorldDataset("train", 64, fields=("index",), cache_dir=False)) == "dc6f954f103516d7"
    assert _draw_digest(S.WorldDataset("train", 64, fields=("crop", "index"), cache_dir=False)) == "a9f8129847d47f2f"
    assert (
        _draw_digest(
            S.WorldDataset("train", 64, fields=("negatives", "alternative", "index"), k_negatives=4, cache_dir=False)
        )
        == "6c80eacf0094d16a"
    )
    assert (
        _draw_digest(S.WorldDataset("train", 64, fields=("paraphrase", "index"), cache_dir=False)) == "4fdf26161481aa6b"
    )


def test_mirror_twins_batches_are_scene_mirror_pairs():
    from hierbench.world.scenes import holds, mirror_scene

    ds = S.WorldDataset("train", 48, fields=("crop", "index"), cache_dir=False, mirror_twins=True)
    n = 48
    assert len(ds) == 2 * n
    seen = []
    for step in range(3):  # one epoch: 3 steps of 16 scenes, each followed by its mirror
        idx = ds.batch_indices(step, 32, seed=5)
        assert np.array_equal(idx, ds.batch_indices(step, 32, seed=5))  # a pure function of (step, size, seed)
        assert np.array_equal(idx[1::2], idx[0::2] + n) and (idx[0::2] < n).all()
        seen += list(idx[0::2])
        items = ds.__getitems__(idx)
        for a, b in zip(items[0::2], items[1::2]):
            assert torch.equal(b["image"], a["image"].flip(-1))
        for i, it in zip(idx[1::2], items[1::2]):
            mirror = mirror_scene(ds.ws.scene(int(i) - n))
            assert holds(mirror, it["caption"]) and it["phrase"] in mirror.phrases
    assert sorted(seen) == list(range(n))  # every scene once per epoch, each with its mirror
    with pytest.raises(ValueError, match="even batch size"):
        ds.batch_indices(0, 31, 0)
    with pytest.raises(ValueError, match="choose one"):
        S.WorldDataset("train", 8, cache_dir=False, mirror_twins=True, pair_neighbours=True)


def test_mirror_twin_negatives_are_false_for_the_mirror():
    from hierbench.world.scenes import holds, mirror_scene

    ds = S.WorldDataset("train", 40, fields=("negatives",), k_negatives=4, cache_dir=False, mirror_twins=True)
    for i in range(40, 80):
        it = ds[i]
        mirror = mirror_scene(ds.ws.scene(i - 40))
        assert holds(mirror, it["caption"])
        assert not any(holds(mirror, t, margin=0.0) for t, ok in zip(it["negatives"], it["negatives_mask"]) if ok)


def test_top_caption_p():
    always = S.WorldDataset("train", 60, cache_dir=False, top_caption_p=1.0)
    assert all(always[i]["caption"] == always.ws.meta[i]["chain"][-1] for i in range(60))
    half = S.WorldDataset("train", 400, cache_dir=False, top_caption_p=0.5)
    plain = S.WorldDataset("train", 400, cache_dir=False)
    share = lambda ds: np.mean([ds[i]["caption"] == ds.ws.meta[i]["chain"][-1] for i in range(len(ds))])
    p0 = share(plain)  # the top caption's share among uniform draws over all true texts
    assert abs(share(half) - (0.5 + 0.5 * p0)) < 0.08 and p0 < 0.2
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="top_caption_p"):
            S.WorldDataset("train", 8, cache_dir=False, top_caption_p=bad)
    with pytest.raises(ValueError, match="caption='sample'"):
        S.WorldDataset("train", 8, fields=("crop",), cache_dir=False, top_caption_p=0.3)


# ---- WorldDataset yields what it yielded before its move to hierbench.data.sources
# -------------------------------------
# tests/fixtures/world_dataset_items.json was written once by tests/fixtures/make_world_dataset_items.py from the old
# implementation
# (`hierbench.data.batch.WorldDataset` at commit 1049646, imported from a clean checkout): for nine option sets, items
# 0, 5,
# last and 7 at epochs 0 and 3 (one by one and through `__getitems__`) — texts exactly, image tensors as shape, sums
# and a 4×4 pooled map — and the batch composition of steps 0, 1, 5.
FIXTURE = Path(__file__).parents[1] / "fixtures" / "world_dataset_items.json"


def _summary(x: torch.Tensor) -> dict:
    x = x.float()
    pooled = torch.nn.functional.adaptive_avg_pool2d(x.mean(0, keepdim=True)[None], 4)[0, 0]
    return {
        "shape": list(x.shape),
        "sum": float(x.double().sum()),
        "abs_sum": float(x.double().abs().sum()),
        "pooled": [round(float(v), 6) for v in pooled.flatten()],
    }


def _same_item(got: dict, want: dict, where: str):
    assert sorted(got) == sorted(want), where
    for k, v in want.items():
        if isinstance(v, dict) and "pooled" in v:
            s = _summary(got[k])
            assert s["shape"] == v["shape"], (where, k)
            np.testing.assert_allclose(
                [s["sum"], s["abs_sum"]], [v["sum"], v["abs_sum"]], rtol=1e-6, atol=1e-3, err_msg=f"{where} {k}"
            )
            np.testing.assert_allclose(s["pooled"], v["pooled"], atol=2e-6, err_msg=f"{where} {k}")
        else:
            assert got[k] == v, (where, k, got[k], v)


@pytest.mark.parametrize(
    "case", ["plain", "all_fields", "crop_only", "alt", "top", "swaps", "mirror", "mirror_crop", "neighbours"]
)
def test_world_dataset_matches_the_saved_items(case):
    want = json.loads(FIXTURE.read_text())[case]
    kw = {k: tuple(v) if isinstance(v, list) else v for k, v in want["kwargs"].items()}
    ds = S.WorldDataset(cache_dir=False, **kw)
    assert len(ds) == want["len"]
    for epoch, items in want["items"].items():
        ds.set_epoch(int(epoch))
        idx = [0, 5, len(ds) - 1, 7]
        for i, w in zip(idx, items["getitem"]):
            _same_item(ds[i], w, f"{case} epoch {epoch} item {i}")
        for i, g, w in zip(idx, ds.__getitems__(idx), items["getitems"]):
            _same_item(g, w, f"{case} epoch {epoch} getitems {i}")
    got = [ds.batch_indices(s, 8, 2) for s in (0, 1, 5)]
    assert [None if b is None else [int(v) for v in b] for b in got] == want["batch_indices"]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 4), h=st.integers(1, 9), w=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_normalize_uint8_images_is_normalize(n, h, w, seed):
    "The batch path's one-pass normalisation gives normalize's floats, channels-last, for any batch and size."
    u8 = np.random.default_rng(seed).integers(0, 256, (n, h, w, 3), dtype=np.uint8)
    for mean, std in ((CLIP_MEAN, CLIP_STD), (WORLD_MEAN, WORLD_STD)):
        got = D.normalize_uint8_images(u8, mean, std)
        want = normalize(torch.from_numpy(u8).permute(0, 3, 1, 2).float() / 255.0, mean, std)
        assert got.shape == (n, 3, h, w) and torch.equal(got, want)
        assert n == 0 or got.stride() == want.stride()  # the same (channels-last) memory layout


def test_normalize_uint8_images_inputs(tmp_path):
    "A read-only memory map is read without a warning and left as it was; a tensor works; bad input is named."
    u8 = np.random.default_rng(1).integers(0, 256, (2, 4, 4, 3), dtype=np.uint8)
    np.save(tmp_path / "x.npy", u8)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = D.normalize_uint8_images(mm)
    assert np.array_equal(mm, u8) and torch.equal(got, D.normalize_uint8_images(torch.from_numpy(u8)))
    for bad in (u8.astype(np.float32), u8[..., :2], u8[0]):
        with pytest.raises(ValueError, match="expected uint8 images"):
            D.normalize_uint8_images(bad)
