"""Zero-shot classification, the linear probe and hierarchical classification on real files (issue 32): tiny datasets of
every layout built from the shipped COCO images (HierarCaps' 1,000; skipped when absent), every metric checked against
a plain open_clip computation written here (random-init real-tiny towers: nothing is downloaded), the bad inputs, the
eval flags, --compare and --leaderboard with intervals."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import open_clip
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from hierbench.evaluation import hierarchy as H, linear_probe as LP, zeroshot as Z
from hierbench.data.batch import DataFormatError, DataWarning
from hierbench.evaluation.metrics import chance_hierarchical_metrics, hierarchical_metrics
from hierbench.models.family import create_model, save_model
from hierbench.evaluation.suites import SUITES, evaluate_classification

IMAGES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "hierarcaps" / "test_imgs"
CLASSES = ["dog", "cat", "red bus", "pizza", "person", "kitchen"]
TEMPLATES = ["a photo of a {c}.", "a blurry photo of the {c}.", "art of a {c}"]


def _coco(n):
    if not IMAGES.is_dir():
        pytest.skip("shared/data/hierarcaps/test_imgs (the shipped COCO images) not present")
    paths = sorted(IMAGES.glob("*.jpg"))[:n]
    if len(paths) < n:
        pytest.skip(f"need {n} COCO images, found {len(paths)}")
    return paths


def write_wds(folder: Path, split: str, samples, per_shard: int = 7):
    "CLIP_benchmark's layout: DIR/split/{0..n-1}.tar + nshards.txt, written with webdataset's TarWriter."
    import webdataset as wds

    (folder / split).mkdir(parents=True, exist_ok=True)
    parts = [samples[i : i + per_shard] for i in range(0, len(samples), per_shard)]
    for j, part in enumerate(parts):
        with wds.TarWriter(str(folder / split / f"{j}.tar")) as w:
            for s in part:
                w.write(s)
    (folder / split / "nshards.txt").write_text(str(len(parts)))


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    "The same 18 test images (3 per class) as a WebDataset folder and as an ImageFolder; 24 more as the train split."
    paths = _coco(42)
    root = tmp_path_factory.mktemp("cls")
    test, train = paths[:18], paths[18:]
    y_test, y_train = [i % 6 for i in range(18)], [i % 6 for i in range(24)]
    w = root / "wds_tiny"
    write_wds(
        w,
        "test",
        [{"__key__": f"t{i:03d}", "jpg": p.read_bytes(), "cls": y} for i, (p, y) in enumerate(zip(test, y_test))],
    )
    write_wds(
        w,
        "train",
        [{"__key__": f"r{i:03d}", "jpg": p.read_bytes(), "cls": y} for i, (p, y) in enumerate(zip(train, y_train))],
    )
    (w / "classnames.txt").write_text("\n".join(CLASSES) + "\n")
    (w / "zeroshot_classification_templates.txt").write_text("\n".join(TEMPLATES) + "\n")
    f = root / "folder_tiny"
    folders = [f"c{k}_{c.replace(' ', '_')}" for k, c in enumerate(CLASSES)]  # sorted order = label order
    for split, ps, ys in (("test", test, y_test), ("train", train, y_train)):
        for i, (p, y) in enumerate(zip(ps, ys)):
            (f / split / folders[y]).mkdir(parents=True, exist_ok=True)
            shutil.copy(p, f / split / folders[y] / f"{i:03d}.jpg")
    (f / "classnames.txt").write_text("\n".join(CLASSES) + "\n")
    (f / "zeroshot_classification_templates.txt").write_text("\n".join(TEMPLATES) + "\n")
    return dict(
        wds=w, folder=f, test=test, y_test=np.array(y_test), train=train, y_train=np.array(y_train), folders=folders
    )


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return create_model("real-tiny").eval()


def plain_logits(m, paths, classes=CLASSES, templates=TEMPLATES):
    "CLIP_benchmark's zero-shot classifier and scores, written plainly with open_clip on m.clip."
    clip, ctx = m.clip.eval(), m.context_length
    pre = open_clip.image_transform(int(m.image_size), is_train=False, mean=m.image_mean, std=m.image_std)
    with torch.no_grad():
        W = []
        for c in classes:
            e = F.normalize(
                clip.encode_text(open_clip.tokenize([t.format(c=c) for t in templates], context_length=ctx)), dim=-1
            ).mean(0)
            W.append(e / e.norm())
        W = torch.stack(W, dim=1)
        x = torch.stack([pre(Image.open(p).convert("RGB")) for p in paths])
        img = F.normalize(clip.encode_image(x), dim=-1)
    return img, W, img @ W


def plain_metrics(logits, y):
    y = torch.as_tensor(y)
    top = logits.topk(5, dim=1).indices
    pred = top[:, 0]
    recall = [float((pred[y == c] == c).double().mean()) for c in torch.unique(y)]
    return dict(
        acc1=float((pred == y).double().mean()),
        acc5=float((top == y[:, None]).any(1).double().mean()),
        mean_per_class_recall=float(np.mean(recall)),
    ), pred.numpy()


@pytest.mark.parametrize("layout", ["wds", "folder"])
def test_zeroshot_equals_plain_open_clip(sets, model, layout):
    lines = []
    res, rows = evaluate_classification(model, sets[layout], num_workers=0, log=lines.append)
    name = sets[layout].name
    img, W, logits = plain_logits(model, sets["test"])
    want, pred = plain_metrics(logits, sets["y_test"])
    for k, v in want.items():
        assert res[f"zeroshot/{name}/{k}"] == pytest.approx(v, abs=1e-12), k
    index = [int(Path(k).stem) if layout == "folder" else int(k[-3:]) for k in rows.id]  # each row's test image
    assert (
        rows.pred.tolist() == pred[index].tolist()
        and len(rows) == 18
        and rows.acc1.mean() == res[f"zeroshot/{name}/acc1"]
    )
    assert res[f"zeroshot_chance/{name}/acc1"] == pytest.approx(1 / 6) and any("scored by cosine" in l for l in lines)
    # the pieces themselves: prototypes and image embeddings equal open_clip's to float rounding
    cs = Z.open_classification(sets[layout])
    torch.testing.assert_close(Z.zeroshot_classifier(model, cs.classnames, cs.templates), W.T, atol=2e-6, rtol=0)
    enc = Z.encode_split(model, cs, "test", num_workers=0)
    torch.testing.assert_close(enc.emb, img[index], atol=2e-6, rtol=0)


def test_workers_give_the_same_numbers(sets, model):
    a, _ = evaluate_classification(model, sets["wds"], num_workers=0, log=None)
    b, _ = evaluate_classification(model, sets["wds"], num_workers=2, batch_size=4, log=None)
    assert a == b


def _exp_map0(v, c):  # MERU's exponential map at the origin (space components), written out
    r = c.sqrt() * v.norm(dim=-1, keepdim=True)
    return torch.sinh(r) / r * v


def test_lorentz_zeroshot_is_merus(sets):
    torch.manual_seed(1)
    m = create_model("real-tiny", geometry="lorentz").eval()
    lines = []
    res, rows = evaluate_classification(m, sets["wds"], num_workers=0, log=lines.append)
    assert any("−geodesic distance (Lorentz" in l for l in lines)
    clip, c = m.clip, m.head.curv.detach()
    pre = open_clip.image_transform(int(m.image_size), is_train=False, mean=m.image_mean, std=m.image_std)
    with torch.no_grad():
        # MERU: average the templates' projected text features, scale by α_text, lift; images likewise; score <x, y>_L
        protos = torch.stack(
            [
                _exp_map0(
                    m.head.alpha("text")
                    * clip.encode_text(
                        open_clip.tokenize([t.format(c=k) for t in TEMPLATES], context_length=m.context_length)
                    ).mean(0),
                    c,
                )
                for k in CLASSES
            ]
        )
        img = _exp_map0(
            m.head.alpha("image")
            * clip.encode_image(torch.stack([pre(Image.open(p).convert("RGB")) for p in sets["test"]])),
            c,
        )
        time = lambda x: torch.sqrt(1 / c + (x * x).sum(-1))
        inner = img @ protos.T - time(img)[:, None] * time(protos)[None, :]
    want, pred = plain_metrics(inner, sets["y_test"])
    assert rows.pred.tolist() == pred.tolist()
    for k, v in want.items():
        assert res[f"zeroshot/wds_tiny/{k}"] == pytest.approx(v, abs=1e-12), k


def test_linear_probe_equals_a_plain_clip_benchmark_loop(sets, model):
    cfg = LP.ProbeConfig(epochs=3)
    res, rows = evaluate_classification(
        model, sets["wds"], zeroshot=False, linear_probe_=True, num_workers=0, probe=cfg, log=None
    )
    wd = res["linear_probe/wds_tiny/weight_decay"]
    assert set(rows.benchmark) == {"linear_probe/wds_tiny"} and len(rows) == 18
    # plain: CLIP_benchmark's features (normalised encode_image) and its training loop, at the chosen weight decay, on
    # train + held-out part in the order the final fit sees them
    pre = open_clip.image_transform(int(model.image_size), is_train=False, mean=model.image_mean, std=model.image_std)
    feats = lambda ps: F.normalize(
        model.clip.encode_image(torch.stack([pre(Image.open(p).convert("RGB")) for p in ps])), dim=-1
    )
    with torch.no_grad():
        xtr, xte = feats(sets["train"]), feats(sets["test"])
    ytr = torch.as_tensor(sets["y_train"])
    tr, va = LP.holdout_split(len(xtr), cfg.val_proportion, cfg.seed)
    x, y = torch.cat([xtr[tr], xtr[va]]), torch.cat([ytr[tr], ytr[va]])
    torch.manual_seed(cfg.seed)
    lin = torch.nn.Linear(x.shape[1], 6)
    opt = torch.optim.AdamW(lin.parameters(), lr=cfg.lr, weight_decay=wd)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=cfg.batch_size, shuffle=True)
    steps = cfg.epochs * len(loader)
    for e in range(cfg.epochs):
        for i, (xb, yb) in enumerate(loader):
            for g in opt.param_groups:
                g["lr"] = 0.5 * (1 + math.cos(math.pi * (e * len(loader) + i) / steps)) * cfg.lr
            opt.zero_grad()
            F.cross_entropy(lin(xb), yb).backward()
            opt.step()
    with torch.no_grad():
        want, pred = plain_metrics(lin(xte), sets["y_test"])
    assert rows.pred.tolist() == pred.tolist()
    for k, v in want.items():
        assert res[f"linear_probe/wds_tiny/{k}"] == pytest.approx(v, abs=1e-12), k


def test_linear_probe_separable_features_and_the_val_split(tmp_path):
    "Features that separate: the probe is perfect on test; a dataset with a val split validates there (no hold-out)."
    g = torch.Generator().manual_seed(0)
    centres = F.normalize(torch.randn(3, 16, generator=g), dim=-1) * 3
    draw = lambda n: (lambda y: (centres[y] + 0.3 * torch.randn(n, 16, generator=g), y))(torch.arange(n) % 3)
    (xtr, ytr), (xva, yva), (xte, yte) = draw(60), draw(15), draw(30)
    scores, wd, rec = LP.linear_probe(xtr, ytr, xte, 3, xva, yva)
    assert (scores.argmax(1) == yte.numpy()).all() and wd in rec and len(rec) >= 7


def test_hierarchical_metrics_on_the_worlds_taxonomy_and_a_real_folder(sets, model, tmp_path):
    from hierbench.world.scenes import SHAPES

    classes = list(SHAPES.leaves)
    rng = np.random.default_rng(0)
    true, pred = rng.integers(0, len(classes), 200), rng.integers(0, len(classes), 200)
    (tmp_path / "shapes.json").write_text(json.dumps(SHAPES.parent))
    res, rows = H.hierarchical_classification(pred, true, H.read_hierarchy(tmp_path / "shapes.json"), classes, "shapes")
    want = hierarchical_metrics(
        [classes[i] for i in pred], [classes[i] for i in true], SHAPES
    )  # the world's own numbers
    chance = chance_hierarchical_metrics([classes[i] for i in true], classes, SHAPES)
    for k in want:
        assert res[f"hierarchical/shapes/{k}"] == pytest.approx(want[k])
        assert res[f"hierarchical_chance/shapes/{k}"] == pytest.approx(chance[k])
    assert ((rows.tie == 0) == (pred == true)).all()
    # a real folder: a tree over its class folders (an is-a edge list), the zero-shot predictions scored on it
    tree = tmp_path / "isa.txt"
    tree.write_text(
        "thing animal\nthing object\nanimal "
        + sets["folders"][0]
        + "\nanimal "
        + sets["folders"][1]
        + "\nanimal "
        + sets["folders"][4]
        + "\n"
        + "".join(f"object {f}\n" for k, f in enumerate(sets["folders"]) if k in (2, 3, 5))
    )
    res, rows = evaluate_classification(model, sets["folder"], hierarchy=tree, num_workers=0, log=None)
    z = rows[rows.benchmark == "zeroshot/folder_tiny"]
    h = rows[rows.benchmark == "hierarchical/folder_tiny"]
    parent = H.read_hierarchy(tree)
    want = hierarchical_metrics([sets["folders"][i] for i in z.pred], [sets["folders"][i] for i in z.label], parent)
    for k, v in want.items():
        assert res[f"hierarchical/folder_tiny/{k}"] == pytest.approx(v)
    assert h.id.tolist() == z.id.tolist()


def test_wordnet_corpus_is_never_downloaded(monkeypatch):
    nltk = pytest.importorskip("nltk")
    monkeypatch.setattr(nltk, "download", lambda *a, **k: (_ for _ in ()).throw(AssertionError("downloaded")))
    try:
        H.load_wordnet()
    except FileNotFoundError as err:
        assert "never downloads" in str(err)  # the corpus is not on disk here
    else:
        assert H.wordnet_hierarchy(["n01440764"])["n01440764"] is not None  # it is: tench's parent exists


def test_imagenet_val_folder_uses_open_clips_names_and_templates(tmp_path):
    paths = _coco(1)
    from open_clip.zero_shot_metadata import IMAGENET_CLASSNAMES, OPENAI_IMAGENET_TEMPLATES

    val = tmp_path / "imagenet" / "val"
    for k in range(1000):
        (val / f"n{k:08d}").mkdir(parents=True)
        (val / f"n{k:08d}" / "a.jpg").symlink_to(paths[0])
    cs = Z.open_classification(tmp_path / "imagenet")
    assert (
        cs.eval_split == "val"
        and cs.classnames == list(IMAGENET_CLASSNAMES)
        and cs.templates == list(OPENAI_IMAGENET_TEMPLATES)
    )
    assert "open_clip" in cs.sources["classnames"] and "open_clip" in cs.sources["templates"]
    src, labels, keys, aside, ignored = Z.classification_samples(cs, "val", limit=5)
    assert labels.tolist() == [0, 1, 2, 3, 4] and not aside


# ------------------------------------------------------------------------------------------------ bad input
def test_bad_classification_folders_say_where(sets, tmp_path, model):
    p = _coco(3)
    w = tmp_path / "nonames"
    write_wds(w, "test", [{"__key__": "a", "jpg": p[0].read_bytes(), "cls": 0}])
    with pytest.raises(DataFormatError, match="classnames.txt"):
        Z.open_classification(w)
    (w / "classnames.txt").write_text("a\nb\n")
    (w / "zeroshot_classification_templates.txt").write_text("\n\n")
    with pytest.raises(DataFormatError, match="empty template list"):
        Z.open_classification(w)
    (w / "zeroshot_classification_templates.txt").write_text("a photo of a {}.\n")
    with pytest.raises(DataFormatError, match=r"line 1.*cannot be filled"):
        Z.open_classification(w)
    # an ImageFolder whose classes disagree with its class-name file
    f = tmp_path / "folder"
    shutil.copytree(sets["folder"], f)
    (f / "classnames.txt").write_text("\n".join(CLASSES[:5]) + "\n")
    with pytest.raises(DataFormatError, match=r"classnames.txt.*5 class names for 6 class folders"):
        Z.open_classification(f)
    (f / "classnames.txt").unlink()
    (f / "classnames.json").write_text(json.dumps({k: k for k in sets["folders"][:5] + ["c9_boat"]}))
    with pytest.raises(DataFormatError, match=r"c5_kitchen.*c9_boat"):
        Z.open_classification(f)
    (f / "classnames.json").unlink()
    with pytest.raises(DataFormatError, match="classnames.txt.*missing"):
        Z.open_classification(f)
    with pytest.raises(DataFormatError, match="zeroshot_classification_templates|templates"):
        Z.ClassificationSet("x", f, "imagefolder", {}, ["a"], None, ["a"]).require_templates()


def test_bad_samples_are_set_aside_counted_and_named(sets, tmp_path, model):
    p = _coco(4)
    w = tmp_path / "wds_bad"
    write_wds(
        w,
        "test",
        [
            {"__key__": "good0", "jpg": p[0].read_bytes(), "cls": 0},
            {"__key__": "nolabel", "jpg": p[1].read_bytes()},
            {"__key__": "corrupt", "jpg": b"\xff\xd8 not a jpeg", "cls": 1},
            {"__key__": "outside", "jpg": p[2].read_bytes(), "cls": 7},
            {"__key__": "noimage", "cls": 1},
            {"__key__": "good1", "jpg": p[3].read_bytes(), "cls": 1},
        ],
    )
    (w / "classnames.txt").write_text("a\nb\n")
    (w / "zeroshot_classification_templates.txt").write_text("a photo of a {c}.\n")
    lines = []
    with pytest.warns(DataWarning, match="4 of 6 samples set aside"):
        res, rows = evaluate_classification(model, w, num_workers=0, log=lines.append)
    assert res["zeroshot/wds_bad/n_images"] == 2 and res["zeroshot/wds_bad/test_set_aside"] == 4
    said = "\n".join(lines)
    for key in ("0.tar:nolabel: no .cls label", "0.tar:outside: label '7'", "0.tar:noimage: no image"):
        assert key in said, key
    assert len(rows) == 2 and set(rows.id) == {"0.tar:good0", "0.tar:good1"}
    enc = Z.encode_split(model, Z.open_classification(w), "test", num_workers=0)
    assert any("corrupt" in a and "cannot decode" in a for a in enc.set_aside)
    # a missing shard and a corrupt image in an ImageFolder
    (w / "test" / "nshards.txt").write_text("3")
    with pytest.raises(FileNotFoundError, match="1.tar"):
        Z.wds_split(w)
    f = tmp_path / "folder"
    shutil.copytree(sets["folder"], f)
    (f / "test" / sets["folders"][0] / "broken.jpg").write_bytes(b"nope")
    (f / "test" / sets["folders"][0] / "README.md").write_text("not an image")
    lines = []
    with pytest.warns(DataWarning, match="1 of 19 samples set aside"):
        res, rows = evaluate_classification(model, f, num_workers=0, log=lines.append)
    assert res["zeroshot/folder/test_set_aside"] == 1 and len(rows) == 18
    assert any("broken.jpg" in l for l in lines) and any("1 non-image file(s) ignored" in l for l in lines)


# ------------------------------------------------------------------------------------------------ the command line
def test_eval_flags_compare_and_leaderboard(sets, model, tmp_path, capsys):
    from hierbench.cli.parser import main

    base = tmp_path / "base" / "model.safetensors"
    save_model(model, base)
    tuned = create_model("real-tiny")
    tuned.load_state_dict(model.state_dict())
    torch.manual_seed(5)
    with torch.no_grad():  # a "fine-tune": the text projection nudged
        tuned.clip.text_projection.add_(0.5 * torch.randn_like(tuned.clip.text_projection))
    save_model(tuned, tmp_path / "tuned" / "model.safetensors")
    out = tmp_path / "results"
    out.mkdir()
    for name in ("base", "tuned"):
        main(
            [
                "eval",
                "--checkpoint",
                str(tmp_path / name),
                "--no-world",
                "--zeroshot",
                str(sets["wds"]),
                "--linear-probe",
                str(sets["wds"]),
                "--num-workers",
                "0",
                "--json",
                str(out / f"{name}.json"),
            ]
        )
    said = capsys.readouterr().out
    assert "zeroshot/wds_tiny/acc1" in said and "linear_probe/wds_tiny/acc1" in said
    res = json.loads((out / "base.json").read_text())
    assert res["similarity"] == "cosine" and 0 <= res["zeroshot/wds_tiny/mean_per_class_recall"] <= 1
    rows = [json.loads(l) for l in (out / "base.items.jsonl").read_text().splitlines()]
    assert {r["benchmark"] for r in rows} == {"zeroshot/wds_tiny", "linear_probe/wds_tiny"} and len(rows) == 36
    main(["eval", "--compare", str(out / "tuned.json"), str(out / "base.json")])
    table = capsys.readouterr().out
    for metric in ("acc1", "acc5", "mean_per_class_recall"):
        assert metric in table
    assert "ci_low" in table and "mde" in table
    a, b = json.loads((out / "tuned.json").read_text()), res
    from hierbench.cli.eval_command import read_items
    from hierbench.evaluation.item_metrics import paired_metric_differences

    d = paired_metric_differences(read_items(out / "tuned.json"), read_items(out / "base.json"), n_boot=200)
    row = d[(d.benchmark == "zeroshot/wds_tiny") & (d.metric == "acc1")].iloc[0]
    assert row["diff"] == pytest.approx(a["zeroshot/wds_tiny/acc1"] - b["zeroshot/wds_tiny/acc1"]) and row.n == 18
    assert row.ci_low <= row["diff"] <= row.ci_high
    main(["eval", "--leaderboard", str(out)])
    board = capsys.readouterr().out
    assert "zeroshot/wds_tiny/acc1" in board and "[" in board and "base" in board and "tuned" in board


def test_suite_names_match_the_parser():
    from hierbench.config import SUITE_NAMES

    assert tuple(SUITES) == SUITE_NAMES
