"""hierbench against CLIP_benchmark's own code (PyPI `clip-benchmark==1.6.2`, used as a black box): zero-shot
classification (`zeroshot_classification.evaluate`), image–text retrieval (`zeroshot_retrieval.evaluate`) and the
linear probe with its weight-decay sweep (`linear_probe.evaluate`), on the same real-tiny model (open_clip towers,
seeded, no download: CLIP_benchmark gets `model.clip`), the same files read by CLIP_benchmark's own dataset builder,
open_clip's eval transform and tokenizer. Euclidean models only: CLIP_benchmark has no hyperbolic scoring. The data
are the shipped COCO images and HierarCaps captions (../shared/data/hierarcaps; every test skips without them).

How CLIP_benchmark is run here, and why:
- `amp=False`: hierbench evaluates in float32 on the CPU; CLIP_benchmark's default `amp=True` would autocast to
bfloat16.
- CLIP_benchmark's `accuracy` calls `float()` on a one-element 1-D array, which numpy deprecated in 1.25 and refuses
  here (2.4.6; CLIP_benchmark issue #147, open): its module gets a `float` that takes the element, as numpy used to.
- `linear_probe.evaluate` asserts `device == 'cuda'` and calls `.cuda()` and `DataParallel`; it is run on the CPU with
  those made no-ops (`cpu_linear_probe`), the rest of its code (featurising, sweep, training, scoring) as it is.
- The probe is compared with an explicit val split (CLIP_benchmark's `--val_split`): CLIP_benchmark's
  `--val_proportion` draws `random_split` from the global RNG after the model is built, so its held-out part cannot be
  reproduced outside its CLI; hierbench's is seeded (`holdout_split`).

Where CLIP_benchmark differs from the usual definitions (documented here; hierbench is left as it is):
- Ties: CLIP_benchmark ranks with `topk` (which of two equal scores wins is torch's choice); hierbench breaks
  classification ties by class index (argmax order) and counts retrieval ties as misses (and reports them). The data
  here has no ties (asserted), so the numbers must agree exactly.
- Retrieval recalls are averaged in float32 by CLIP_benchmark (0.4722222089… for 17/36): compared to 1e-6.
- The linear probe reports acc5 only when the test labels reach 5 (`target.max() >= 5`, i.e. at least 6 classes
  with the last one present in test), zero-shot whenever there are ≥ 5 class names; with exactly 5 classes its
  linear probe gives NaN where hierbench (and CLIP_benchmark's zero-shot) give acc5. Below 5 classes CLIP_benchmark
  reports acc5 as NaN, hierbench leaves the key out.
- The probe's classifier has `max(train label) + 1` outputs in CLIP_benchmark, one per class name in hierbench:
  the same when the last class occurs in train (it does here), else different initial weights.
"""

import builtins
import re

import numpy as np
import open_clip
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder

pytest.importorskip(
    "clip_benchmark", reason="CLIP_benchmark not installed (pip install clip-benchmark==1.6.2, in the dev extra)"
)
from clip_benchmark.datasets import builder as cb_builder
from clip_benchmark.datasets.builder import build_dataset, image_captions_collate_fn
from clip_benchmark.metrics import linear_probe as cb_lp, zeroshot_classification as cb_zs, zeroshot_retrieval as cb_ret

from hierbench.evaluation import linear_probe as LP, retrieval as R, zeroshot as Z
from hierbench.models.family import create_model
from hierbench.evaluation.suites import evaluate_classification

# the toy datasets of the plain-loop tests: the same files, now read by CLIP_benchmark too
from test_retrieval import CSV, IMGS, needs_imgs, shipped_set, write_layouts
from test_zeroshot import CLASSES, TEMPLATES, _coco, sets, write_wds  # noqa: F401 (sets: the fixture)

pytestmark = [
    pytest.mark.filterwarnings("ignore:WebDataset\\(shardshuffle"),  # CLIP_benchmark's wds builder
    pytest.mark.filterwarnings("ignore:'pin_memory' argument"),  # its probe loaders, on a CPU
    pytest.mark.filterwarnings("ignore::sklearn.exceptions.UndefinedMetricWarning"),
]  # its classification_report


def cb_inputs(m):
    "What CLIP_benchmark's `load_clip` returns for an open_clip model: the model, its eval transform, its tokenizer."
    transform = open_clip.image_transform(m.image_size, is_train=False, mean=m.image_mean, std=m.image_std)
    return m.clip.eval(), transform, open_clip.tokenizer.SimpleTokenizer(context_length=m.context_length)


@pytest.fixture(scope="module")
def model():
    """real-tiny from a seeded random init, then 30 contrastive steps (≈ 2 s) on 64 COCO images no test here evaluates,
    with their HierarCaps captions. A random init maps the images to nearly one point (mean cosine 0.97 between the 12
    retrieval images; each image's top caption is one of the same two), leaving the comparisons little to tell apart;
    after the steps they are spread out (mean cosine 0.02), and a bilinear instead of bicubic resize on CLIP_benchmark's
    side changes the zero-shot scores, the recalls and the probe's results."""
    from hierbench.data.loaders import load_hierarcaps

    if not CSV.is_file():
        pytest.skip("shared/data/hierarcaps/hierarcaps_test.csv not present")
    evaluated = {p.name for p in _coco(60)} | {p.name for p, _ in shipped_set()}
    recs = [r for r in load_hierarcaps(CSV, IMGS) if r.image_path.name not in evaluated][-64:]
    torch.manual_seed(0)
    m = create_model("real-tiny")
    clip, transform, tokenizer = cb_inputs(m)
    images = torch.stack([transform(Image.open(r.image_path).convert("RGB")) for r in recs])
    texts, target = tokenizer([r.chain[-1] for r in recs]), torch.arange(32)
    opt = torch.optim.AdamW(clip.parameters(), lr=1e-3, weight_decay=0.0)
    clip.train()
    for _ in range(30):
        i = torch.randperm(64)[:32]
        img, txt, scale = clip(images[i], texts[i])  # unit features and exp(logit_scale)
        logits = scale * img @ txt.T
        opt.zero_grad()
        ((F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2).backward()
        opt.step()
    return m.eval()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    "Tiny tensors: a second thread only adds synchronisation (the probe test: 13 s on 2 busy cores, 0.6 s on one)."
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def no_download(monkeypatch):
    "CLIP_benchmark's builder fetches a missing file with wget through `subprocess.call`: here that is an error."

    def refuse(cmd, *a, **k):
        raise AssertionError(f"CLIP_benchmark tried to download: {cmd}")

    monkeypatch.setattr(cb_builder, "call", refuse)


@pytest.fixture(autouse=True)
def numpy_float(monkeypatch):
    "`float(array([x]))` → x in CLIP_benchmark's `accuracy` (zero-shot and linear probe), as older numpy gave."
    monkeypatch.setattr(
        cb_zs, "float", lambda x: builtins.float(x.item() if isinstance(x, np.ndarray) else x), raising=False
    )


def wds_loader(dataset, batch_size=8):
    "CLIP_benchmark's CLI loader for a `wds/` dataset: batched by webdataset, not by the DataLoader."
    return DataLoader(dataset.batched(batch_size), batch_size=None, shuffle=False, num_workers=0)


# ---- zero-shot classification ----------------------------------------------------------------------------------------
def cb_classification(folder, layout, transform):
    "The test split as CLIP_benchmark builds it: `wds/NAME` through its builder; an ImageFolder through torchvision."
    if layout == "wds":
        ds = build_dataset(f"wds/{folder.name}", root=str(folder), transform=transform, split="test")
        return ds, wds_loader(ds)
    ds = ImageFolder(str(folder / "test"), transform=transform)
    ds.classes, ds.templates = list(CLASSES), list(TEMPLATES)  # what build_dataset sets on its ImageFolder datasets
    return ds, DataLoader(ds, batch_size=8, shuffle=False, num_workers=0)


@pytest.mark.parametrize("layout", ["wds", "folder"])
def test_zeroshot_classification_equals_clip_benchmark(sets, model, layout):  # noqa: F811 (sets: the fixture)
    res, rows = evaluate_classification(model, sets[layout], num_workers=0, log=None)
    clip, transform, tokenizer = cb_inputs(model)
    ds, loader = cb_classification(sets[layout], layout, transform)
    assert ds.classes == CLASSES and ds.templates == TEMPLATES  # it read the same class names and templates
    want = cb_zs.evaluate(clip, loader, tokenizer, ds.classes, ds.templates, "cpu", amp=False)
    name = sets[layout].name
    for k in ("acc1", "acc5", "mean_per_class_recall"):
        assert res[f"zeroshot/{name}/{k}"] == pytest.approx(want[k], abs=1e-9), k
    # image by image: CLIP_benchmark's logits (same image order: shard order / torchvision's) give hierbench's
    # predictions
    classifier = cb_zs.zero_shot_classifier(clip, tokenizer, ds.classes, ds.templates, "cpu", amp=False)
    logits, target = cb_zs.run_classification(clip, classifier, loader, "cpu", amp=False)
    assert rows.label.tolist() == target.tolist() and rows.pred.tolist() == logits.argmax(1).tolist()
    # and the scores behind them: hierbench's prototypes and cosines are CLIP_benchmark's classifier and logits / 100 to
    # float rounding (hierbench runs the text tower on shorter padded buckets; open_clip on the full context)
    cs = Z.open_classification(sets[layout])
    protos = Z.zeroshot_classifier(model, cs.classnames, cs.templates)
    torch.testing.assert_close(protos, classifier.T, atol=1e-6, rtol=0)
    with torch.no_grad():
        scores = model.head.pairwise_sim(Z.encode_split(model, cs, "test", num_workers=0).emb, protos)
    torch.testing.assert_close(100 * scores, logits, atol=1e-4, rtol=0)
    # not degenerate: some right, some wrong, more than one class predicted, and no tied top scores
    assert 0 < want["acc1"] < 1 and want["acc5"] < 1 and rows.pred.nunique() > 1
    top2 = logits.topk(2, dim=1).values
    assert (top2[:, 0] > top2[:, 1]).all()


# ---- image–text retrieval ------------------------------------------------------------------------------------------
@needs_imgs
@pytest.mark.parametrize("layout", ["mscoco_captions", "flickr30k", "wds"])
def test_retrieval_equals_clip_benchmark(tmp_path, model, layout):
    imgs, wdir = write_layouts(tmp_path, shipped_set())  # 12 COCO images × 3 captions in each annotation layout
    clip, transform, tokenizer = cb_inputs(model)
    # hierbench's spec for the layout; CLIP_benchmark's dataset name, root and annotation file for the same files
    spec, root, name, cb_root, annotation = {
        "mscoco_captions": (
            f"coco:{tmp_path / 'coco_test_karpathy.json'}",
            imgs,
            "coco",
            imgs.parent,
            tmp_path / "coco_test_karpathy.json",
        ),
        "flickr30k": (
            f"flickr:{tmp_path / 'flickr30k_test_karpathy.txt'}",
            imgs,
            "flickr30k",
            imgs,
            tmp_path / "flickr30k_test_karpathy.txt",
        ),
        "wds": (f"wds:{wdir}", None, wdir.name, wdir, None),
    }[layout]
    res, _ = R.evaluate_retrieval(model, spec, image_root=root, ks=(1, 5, 10), num_workers=0, log=None)
    if layout == "wds":
        ds = build_dataset(
            f"wds/{wdir.name}", root=str(wdir), transform=transform, split="test", task="zeroshot_retrieval"
        )
        loader = wds_loader(ds, batch_size=5)
    # torchvision's CocoCaptions / CLIP_benchmark's Flickr over the annotation file; nothing is downloaded: all exist
    else:
        ds = build_dataset(
            layout,
            root=str(cb_root),
            transform=transform,
            split="test",
            annotation_file=str(annotation),
            task="zeroshot_retrieval",
        )
        loader = DataLoader(ds, batch_size=5, shuffle=False, num_workers=0, collate_fn=image_captions_collate_fn)
    want = cb_ret.evaluate(clip, loader, tokenizer, "cpu", amp=False, recall_k_list=[1, 5, 10])
    p = f"retrieval/{name}/"
    assert res[p + "n_images"] == 12 and res[p + "n_texts"] == 36
    for k, v in want.items():
        assert res[p + k] == pytest.approx(v, abs=1e-6), k  # CLIP_benchmark averages in float32
    # not degenerate: no ties (topk's tie-break plays no part), and neither all hits nor all misses
    assert res[p + "image_retrieval_ties"] == res[p + "text_retrieval_ties"] == 0
    assert 0 < want["image_retrieval_recall@1"] < 1 and 0 < want["text_retrieval_recall@1"] < 1
    assert want["image_retrieval_recall@10"] < 1  # 12 images: K=10 is not trivially 1


# ---- linear probe ----------------------------------------------------------------------------------------------------
def _redness(path):
    rgb = np.asarray(Image.open(path).convert("RGB"), dtype=np.float64).reshape(-1, 3).mean(0)
    return rgb[0] - rgb[2]


@pytest.fixture(scope="module")
def probe_set(tmp_path_factory):
    """60 COCO images in CLIP_benchmark's WebDataset layout with train/val/test splits, labelled by how red they are
    (6 classes of 10): a label a probe on the tiny model's features can partly learn, so the weight-decay sweep sees
    different validation accuracies. Each class: 3 test, 5 train, 2 val images."""
    paths = _coco(60)
    order = np.argsort([_redness(p) for p in paths], kind="stable")
    label = np.empty(60, dtype=np.int64)
    label[order] = np.arange(60) // 10
    split = {}
    for c in range(6):
        for j, i in enumerate(np.flatnonzero(label == c)):
            split[i] = "test" if j < 3 else "train" if j < 8 else "val"
    root = tmp_path_factory.mktemp("probe") / "wds_redness"
    for s in ("train", "val", "test"):
        write_wds(
            root,
            s,
            [
                {"__key__": f"{s}{i:03d}", "jpg": paths[i].read_bytes(), "cls": int(label[i])}
                for i in range(60)
                if split[i] == s
            ],
        )
    (root / "classnames.txt").write_text("".join(f"redness level {c}\n" for c in range(6)))
    (root / "zeroshot_classification_templates.txt").write_text(
        "a photo of {c}.\n"
    )  # CLIP_benchmark's builder asks for one
    return root


class _CpuNamedCuda(str):
    "The device 'cpu' to torch, yet equal to 'cuda' for `linear_probe.evaluate`'s `assert device == 'cuda'`."

    def __eq__(self, other):
        return other == "cuda" or str.__eq__(self, other)

    __hash__ = str.__hash__


@pytest.fixture
def cpu_linear_probe(monkeypatch):
    """CLIP_benchmark's CUDA-only linear probe on the CPU: `.cuda()` and `DataParallel` become no-ops while the test
    runs."""
    monkeypatch.setattr(torch.nn.Module, "cuda", lambda self, *a, **k: self)
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    monkeypatch.setattr(torch.nn, "DataParallel", lambda module, device_ids=None: module)
    return _CpuNamedCuda("cpu")


def test_linear_probe_and_its_sweep_equal_clip_benchmark(probe_set, model, tmp_path, capsys, request):
    cfg = LP.ProbeConfig()  # CLIP_benchmark's CLI defaults: lr 0.1, 10 epochs, batch 64, seed 0
    res, rows = evaluate_classification(
        model, probe_set, zeroshot=False, linear_probe_=True, num_workers=0, probe=cfg, log=None
    )
    # the sweep itself: the validation accuracy of every weight decay hierbench tried, from its features
    cs = Z.open_classification(probe_set)
    enc = {s: Z.encode_split(model, cs, s, num_workers=0) for s in ("train", "val", "test")}
    feats = {s: LP.probe_features(e.emb, "euclidean") for s, e in enc.items()}
    _, wd, tried = LP.linear_probe(
        feats["train"], enc["train"].labels, feats["test"], 6, feats["val"], enc["val"].labels, cfg
    )

    device = request.getfixturevalue("cpu_linear_probe")  # the patches only now: hierbench ran unpatched
    clip, transform, _ = cb_inputs(model)
    # CLIP_benchmark's CLI: train and val loaders over the unbatched wds pipeline, the test loader batched by webdataset
    split = lambda s: build_dataset(f"wds/{probe_set.name}", root=str(probe_set), transform=transform, split=s)
    train, val = (
        DataLoader(split(s), batch_size=cfg.batch_size, shuffle=False, num_workers=0) for s in ("train", "val")
    )
    torch.manual_seed(cfg.seed)  # the CLI seeds once before anything (the order of its train features is drawn from it)
    capsys.readouterr()
    want = cb_lp.evaluate(
        clip,
        train,
        wds_loader(split("test"), cfg.batch_size),
        -1,
        cfg.batch_size,
        0,
        cfg.lr,
        cfg.epochs,
        "real-tiny",
        cfg.seed,
        str(tmp_path / "features"),
        device,
        val_dataloader=val,
        normalize=True,
        amp=False,
        verbose=True,
    )
    said = capsys.readouterr().out
    # its sweep, from its verbose lines (each weight decay it trained, with its validation accuracy)
    cb_tried = {float(w): float(a) for w, a in re.findall(r"Valid accuracy with weight_decay (\S+): (\S+)", said)}
    assert cb_tried == pytest.approx(tried, abs=1e-12) and wd == want["weight_decay"]
    p = "linear_probe/wds_redness/"
    assert res[p + "weight_decay"] == want["weight_decay"] and res[p + "n_images"] == 18
    for k in ("acc1", "acc5", "mean_per_class_recall"):
        assert res[p + k] == pytest.approx(want[f"lp_{k}"], abs=1e-9), k
    # not degenerate: the sweep's accuracies differ, its peak is a refined point (not a coarse one), the probe is
    # neither right nor wrong everywhere
    grid, coarse = LP.weight_decay_grid()
    assert len(set(tried.values())) > 2 and want["weight_decay"] not in [grid[i] for i in coarse]
    assert 0 < want["lp_acc1"] < 1 and rows.pred.nunique() > 1
