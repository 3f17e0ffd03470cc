"""The input audit through the command line: every format issue 32 added (CLIP_benchmark classification and retrieval
WebDatasets, ImageFolder, ImageNet val, COCO-captions / Karpathy / Flickr retrieval files, Winoground, class
hierarchies, a `--suite` data root) and every compositional family issue 47 added (VL-CheckList, EqBen, SPEC, MMVP-VLM,
BiVLC, ColorSwap, COLA; each in its released layout) given malformed, and run as a user runs it:
`hierbench eval ... --json M.json`; issue 46 added damaged ONNX exports (`eval --scorer onnx:DIR`) and `hierbench view`
on photos without captions.

    python tools/input_audit.py            # this table after the loaders' one

Each input is built as small synthetic files in a temporary folder and run through the real entry point,
`hierbench.cli.parser.main(argv)`, in this process (stdout, stderr and warnings captured, the exit status read from
`SystemExit`, a 120 s alarm against hangs); `SUBPROCESS_CASES` of them also run as real `hierbench` processes.
Outcomes: `clear` (refused: exit status 1 and one line on stderr, `hierbench eval: MESSAGE`, naming the file, record,
field or value) and `handled` (scored; the bad samples set aside, named in a warning, and counted in the metrics,
every good one scored) are safe. Unsafe: `raw crash` (a traceback, or a refusal that is not one line naming what it
refuses), `hang`, `silently accepted` (set aside without a count, or scored though it should be refused),
`lost data` (good samples not scored) and `wrong number` (a count that is not the number set aside).

`hierbench view` cases are handled when the workspace holds every image and the texts expected; where the `[view]`
extra is absent (the `[dev]` environment this audit runs in) HyperView's writer is replaced by one that records what
it would have been given: the view itself is read, encoded, laid out and its fields computed by hierbench as for a
user, only HyperView's own files are not written (`tests/ui/test_view.py` writes them where HyperView is installed).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd
from PIL import Image

SAFE = ("clear", "handled")
UNSAFE = ("raw crash", "hang", "silently accepted", "lost data", "wrong number")
HANG_SECONDS = 120
# the cases that also run as real `hierbench` processes, one per kind of refusal (a malformed file, a file that is
# absent, a model folder cut short): each pays the whole import (about 12 s on a 2-core CI machine), and the entry
# point they go through is the one every in-process case runs
SUBPROCESS_CASES = (
    ("COCO-captions", "malformed JSON"),
    ("Winoground", "an image absent"),
    ("ONNX export (--scorer onnx:DIR)", "image.onnx cut short"),
)

# ---- tiny files ---------------------------------------------------------------------------------------------------
COLOURS = [(200, 30, 30), (30, 200, 30), (30, 30, 200), (200, 200, 30), (30, 200, 200), (200, 30, 200)]


def png(colour=(200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buf, format="PNG")
    return buf.getvalue()


def write_png(path: Path, k: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png(COLOURS[k % len(COLOURS)]))
    return path


def write_tar(path: Path, members: list[tuple[str, bytes]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def write_wds(folder: Path, samples: list[dict], kind: str | None = None, nshards: str | None = None) -> Path:
    "A CLIP_benchmark WebDataset folder: `test/0.tar` of `samples` ({ext: bytes} each, key s0, s1, ...)."
    members = [(f"s{i}.{ext}", data) for i, s in enumerate(samples) for ext, data in s.items()]
    write_tar(folder / "test" / "0.tar", members)
    (folder / "test" / "nshards.txt").write_text("1" if nshards is None else nshards)
    if kind:
        (folder / "dataset_type.txt").write_text(kind)
    return folder


N = 4  # samples per good input: a handled case sets one aside and scores the other three


# ---- the formats: a good input each, written into a folder -------------------------------------------------------
def cls_samples(n: int = N) -> list[dict]:
    return [{"png": png(COLOURS[i]), "cls": str(i % 2).encode()} for i in range(n)]


def classification_wds(d: Path, samples=None, classnames="cat\ndog\n", templates="a photo of a {c}.\n") -> Path:
    write_wds(d, cls_samples() if samples is None else samples)
    if classnames is not None:
        (d / "classnames.txt").write_text(classnames)
    if templates is not None:
        (d / "zeroshot_classification_templates.txt").write_text(templates)
    return d


def retrieval_wds(d: Path, samples=None) -> Path:
    samples = (
        [{"png": png(COLOURS[i]), "txt": f"a picture {i}\nanother picture {i}".encode()} for i in range(N)]
        if samples is None
        else samples
    )
    return write_wds(d, samples, kind="retrieval")


def image_folder(d: Path, classes=("cat", "dog"), per_class: int = 2, classnames="cat\ndog\n") -> Path:
    for c, name in enumerate(classes):
        for j in range(per_class):
            write_png(d / "test" / name / f"{j}.png", c * per_class + j)
    if classnames is not None:
        (d / "classnames.txt").write_text(classnames)
    (d / "zeroshot_classification_templates.txt").write_text("a photo of a {c}.\n")
    return d


def coco_captions(d: Path, ids=(1, 2, 3, 4), files=None, mutate=None) -> tuple[Path, Path]:
    "(annotation file, image root): COCO-captions format with two captions per image."
    root = d / "images"
    for k, i in enumerate(ids):
        write_png(root / f"COCO_val2014_{i:012d}.jpg", k)
    images = [{"id": i, "file_name": f"COCO_val2014_{i:012d}.jpg"} for i in ids]
    anns = [{"image_id": i, "caption": f"a photo number {i} {j}"} for i in ids for j in (0, 1)]
    obj = {"images": images, "annotations": anns}
    if mutate:
        obj = mutate(obj)
    f = d / "coco_test_karpathy.json"
    f.write_text(json.dumps(obj))
    return f, root


def karpathy(d: Path, mutate=None) -> tuple[Path, Path]:
    root = d / "coco"
    imgs = []
    for i in range(N):
        write_png(root / "val2014" / f"COCO_val2014_{i + 1:012d}.jpg", i)
        imgs.append(
            {
                "filepath": "val2014",
                "filename": f"COCO_val2014_{i + 1:012d}.jpg",
                "split": "test",
                "cocoid": i + 1,
                "sentences": [{"raw": f"a photo number {i} {j}"} for j in (0, 1)],
            }
        )
    obj = {"images": imgs}
    if mutate:
        obj = mutate(obj)
    f = d / "dataset_coco.json"
    f.write_text(json.dumps(obj))
    return f, root


def flickr_txt(d: Path, lines=None) -> tuple[Path, Path]:
    root = d / "flickr30k-images"
    for i in range(N):
        write_png(root / f"{1000 + i}.jpg", i)
    lines = [f"{1000 + i}.jpg,a child climbs {i} {j}" for i in range(N) for j in (0, 1)] if lines is None else lines
    f = d / "flickr30k_test_karpathy.txt"
    f.write_text("image,caption\n" + "\n".join(lines) + "\n")
    return f, root


def winoground(d: Path, records=None, images=True) -> Path:
    recs = (
        [
            {
                "id": i,
                "caption_0": f"a dog bites a man {i}",
                "caption_1": f"a man bites a dog {i}",
                "image_0": f"ex_{i}_img_0",
                "image_1": f"ex_{i}_img_1",
                "tag": "Object",
                "secondary_tag": "",
                "num_main_preds": 1,
                "collapsed_tag": "Object",
            }
            for i in range(N)
        ]
        if records is None
        else records
    )
    (d / "examples.jsonl").parent.mkdir(parents=True, exist_ok=True)
    (d / "examples.jsonl").write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in recs))
    if images:
        for i in range(N):
            for j in (0, 1):
                write_png(d / "images" / f"ex_{i}_img_{j}.png", 2 * i + j)
    return d


# ---- the cases --------------------------------------------------------------------------------------------------
@dataclass
class Case:
    cls: str  # the class of malformed input
    format: str  # the loader it goes through
    build: Callable[[Path], list[str]]  # writes the input under a folder; returns `hierbench eval`'s data flags
    expect: str  # 'clear' (refused in one line) or 'handled' (set aside and counted)
    names: tuple = ()  # clear: what the line must name (file, record, field or value)
    bench: str = ""  # handled: the per-item rows' benchmark
    good: int = N - 1  # handled: the items scored
    count_key: str = ""  # handled: the metric that counts what was set aside
    bad: int = 1  # handled: its value
    name: str = ""  # the data set's NAME in the metric keys (set when the case is built)
    command: str = "eval"  # the subcommand: 'eval', or 'view' (`build` gives its --images flags)
    texts: int = 0  # view, handled: the texts the workspace holds beside its `good` images


def _rows_of(bench: str) -> Callable:
    "How many items of `bench` the per-item rows score (retrieval: its images, one text_retrieval row each)."
    if bench.startswith("retrieval/"):
        return lambda t: int(((t.benchmark == bench) & (t.subset == "text_retrieval")).sum())
    return lambda t: int((t.benchmark == bench).sum())


def _classification_cases():
    F = "CLIP_benchmark classification (wds)"
    zs = lambda d: ["--zeroshot", str(d)]

    def drop(i, ext):
        return lambda d: zs(
            classification_wds(
                d, [({k: v for k, v in s.items() if not (j == i and k == ext)}) for j, s in enumerate(cls_samples())]
            )
        )

    def with_sample(i, s):
        return lambda d: zs(classification_wds(d, [s if j == i else x for j, x in enumerate(cls_samples())]))

    yield Case(
        "no classnames.txt", F, lambda d: zs(classification_wds(d, classnames=None)), "clear", ("classnames.txt",)
    )
    yield Case(
        "empty template file",
        F,
        lambda d: zs(classification_wds(d, templates="\n")),
        "clear",
        ("zeroshot_classification_templates.txt",),
    )
    yield Case(
        "a template without {c}",
        F,
        lambda d: zs(classification_wds(d, templates="a photo\n")),
        "clear",
        ("zeroshot_classification_templates.txt", "line 1"),
    )
    yield Case(
        "blank line in classnames.txt",
        F,
        lambda d: zs(classification_wds(d, classnames="cat\n\ndog\n")),
        "clear",
        ("classnames.txt", "line 2"),
    )
    handled = dict(expect="handled", bench="zeroshot/{name}", count_key="zeroshot/{name}/test_set_aside")
    yield Case("a sample without a label", F, drop(1, "cls"), **handled)
    yield Case("a label out of range", F, with_sample(1, {"png": png(), "cls": b"7"}), **handled)
    yield Case("a label that is not a number", F, with_sample(1, {"png": png(), "cls": b"cat"}), **handled)
    yield Case("a sample without an image", F, drop(1, "png"), **handled)
    yield Case("a non-image member", F, with_sample(1, {"png": b"not an image at all", "cls": b"0"}), **handled)
    yield Case(
        "no sample usable",
        F,
        lambda d: zs(classification_wds(d, [{"png": png(), "cls": b"9"}] * 2)),
        "clear",
        ("test", "no usable sample"),
    )
    yield Case(
        "an empty shard list", F, lambda d: zs(_wds_nshards(classification_wds(d), "0")), "clear", ("nshards.txt",)
    )
    yield Case("a shard missing", F, lambda d: zs(_wds_nshards(classification_wds(d), "2")), "clear", ("1.tar",))
    yield Case("a shard that is not a tar", F, lambda d: zs(_wds_garbage(classification_wds(d))), "clear", ("0.tar",))
    yield Case(
        "a sample key twice", F, lambda d: zs(_twice(classification_wds(d))), "clear", ("0.tar", "a second .png member")
    )
    yield Case(
        "dataset_type retrieval",
        F,
        lambda d: zs(_write(classification_wds(d), "dataset_type.txt", "retrieval")),
        "clear",
        ("dataset_type.txt",),
    )


def _write(d: Path, name: str, text: str) -> Path:
    (d / name).write_text(text)
    return d


def _wds_nshards(d: Path, n: str) -> Path:
    (d / "test" / "nshards.txt").write_text(n)
    return d


def _twice(d: Path) -> Path:
    write_tar(
        d / "test" / "0.tar",
        [(f"s{i}.{e}", v) for i, s in enumerate(cls_samples()) for e, v in s.items()] + [("s0.png", png())],
    )
    return d


def _wds_garbage(d: Path) -> Path:
    (d / "test" / "0.tar").write_bytes(b"\x89PNG this is no tar file" * 40)
    return d


def _retrieval_wds_cases():
    F = "CLIP_benchmark retrieval (wds)"
    rt = lambda d: ["--retrieval", f"wds:{d}"]
    good = lambda i: {"png": png(COLOURS[i]), "txt": f"a picture {i}\nanother {i}".encode()}

    def with_sample(i, s):
        return lambda d: rt(retrieval_wds(d, [s if j == i else good(j) for j in range(N)]))

    handled = dict(expect="handled", bench="retrieval/{name}", count_key="retrieval/{name}/images_set_aside")
    yield Case("a sample without a caption", F, with_sample(1, {"png": png()}), **handled)
    yield Case("a sample without an image", F, with_sample(1, {"txt": b"a caption"}), **handled)
    yield Case("a non-image member", F, with_sample(1, {"png": b"not an image", "txt": b"a caption"}), **handled)
    yield Case("an empty shard list", F, lambda d: rt(_wds_nshards(retrieval_wds(d), "0")), "clear", ("nshards.txt",))
    yield Case(
        "no dataset_type.txt",
        F,
        lambda d: rt(_unlink(retrieval_wds(d), "dataset_type.txt")),
        "clear",
        ("dataset_type.txt",),
    )
    yield Case("no split folder", F, lambda d: rt(_mkdir(d)), "clear", ("nshards.txt",))


def _unlink(d: Path, name: str) -> Path:
    (d / name).unlink()
    return d


def _mkdir(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "dataset_type.txt").write_text("retrieval")
    return d


def _image_folder_cases():
    F = "ImageFolder"
    zs = lambda d: ["--zeroshot", str(d)]
    yield Case(
        "classes disagree with classnames.txt",
        F,
        lambda d: zs(image_folder(d, classnames="cat\ndog\nbird\n")),
        "clear",
        ("classnames.txt", "3 class names for 2"),
    )
    yield Case(
        "classnames.json without a folder's class",
        F,
        lambda d: zs(_write(image_folder(d, classnames=None), "classnames.json", json.dumps({"cat": "a cat"}))),
        "clear",
        ("classnames.json", "dog"),
    )
    yield Case("no class names", F, lambda d: zs(image_folder(d, classnames=None)), "clear", ("classnames.txt",))
    yield Case(
        "a class folder without images",
        F,
        lambda d: zs(_empty_class(image_folder(d))),
        "clear",
        ("dog", "without images"),
    )
    yield Case(
        "a corrupt image",
        F,
        lambda d: zs(_corrupt(image_folder(d), "test/dog/0.png")),
        "handled",
        bench="zeroshot/{name}",
        count_key="zeroshot/{name}/test_set_aside",
    )
    yield Case(
        "a non-image file",
        F,
        lambda d: zs(_write(image_folder(d), "test/dog/notes.txt", "hello")),
        "handled",
        bench="zeroshot/{name}",
        good=N,
        count_key="",
        bad=0,
    )  # not a sample (as torchvision): named in the log
    yield Case(
        "splits with different classes",
        F,
        lambda d: zs(_other_split(image_folder(d))),
        "clear",
        ("val", "class folders differ"),
    )


def _empty_class(d: Path) -> Path:
    for p in (d / "test" / "dog").iterdir():
        p.unlink()
    return d


def _corrupt(d: Path, rel: str) -> Path:
    (d / rel).write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    return d


def _other_split(d: Path) -> Path:
    write_png(d / "val" / "cat" / "0.png")
    write_png(d / "val" / "bird" / "0.png")
    return d


def _imagenet_cases():
    F = "ImageNet val"
    zs = lambda d: ["--zeroshot", str(d)]

    def flat(d):  # val images not sorted into class folders, and no mapping to sort them
        for i in range(N):
            write_png(d / f"ILSVRC2012_val_{i + 1:08d}.JPEG", i)
        return zs(d)

    def almost(d):  # 999 of the 1,000 WordNet-id class folders: not ImageNet-1k, and no class names beside it
        for k in range(999):
            write_png(d / f"n{1440764 + k:08d}" / "0.JPEG", k)
        return zs(d)

    yield Case("val images without their class mapping", F, flat, "clear", ("ImageFolder",))
    yield Case("999 of the 1,000 class folders", F, almost, "clear", ("classnames.txt", "999 class folders"))


def _retrieval_file_cases():
    def coco(mutate=None, drop=()):
        def build(d):
            f, root = coco_captions(d, mutate=mutate)
            for i in drop:
                (root / f"COCO_val2014_{i:012d}.jpg").unlink()
            return ["--retrieval", f"coco:{f}", "--image-root", str(root)]

        return build

    F = "COCO-captions"

    def no_caption(o):
        o["annotations"][3].pop("caption")
        return o

    def dup(o):
        o["images"][1]["id"] = 1
        return o

    def orphan(o):
        o["annotations"][0]["image_id"] = 99
        return o

    def no_images(o):
        o.pop("images")
        return o

    yield Case(
        "malformed JSON", F, lambda d: _truncate(coco()(d), 0), "clear", ("coco_test_karpathy.json", "not valid JSON")
    )
    yield Case(
        "a missing field", F, coco(no_caption), "clear", ("coco_test_karpathy.json", "annotations[3]", "caption")
    )
    yield Case("no images list", F, coco(no_images), "clear", ("coco_test_karpathy.json", "images"))
    yield Case(
        "an image named but absent",
        F,
        coco(drop=(2,)),
        "handled",
        bench="retrieval/coco",
        count_key="retrieval/coco/images_set_aside",
    )
    yield Case(
        "every image absent", F, coco(drop=(1, 2, 3, 4)), "clear", ("coco_test_karpathy.json", "none of its 4 images")
    )
    yield Case("ids duplicated", F, coco(dup), "clear", ("coco_test_karpathy.json", "duplicate id"))
    yield Case("a caption of an unknown image", F, coco(orphan), "clear", ("annotations[0]", "image_id"))
    F = "Karpathy split"

    def kp(mutate=None, drop=()):
        def build(d):
            f, root = karpathy(d, mutate)
            for i in drop:
                (root / "val2014" / f"COCO_val2014_{i:012d}.jpg").unlink()
            return ["--retrieval", f"coco:{f}", "--image-root", str(root)]

        return build

    def no_sentences(o):
        o["images"][2].pop("sentences")
        return o

    def kdup(o):
        o["images"][1]["cocoid"] = 1
        return o

    yield Case("malformed JSON", F, lambda d: _truncate(kp()(d), 0), "clear", ("dataset_coco.json", "not valid JSON"))
    yield Case("a missing field", F, kp(no_sentences), "clear", ("dataset_coco.json", "sentences"))
    yield Case(
        "an image named but absent",
        F,
        kp(drop=(3,)),
        "handled",
        bench="retrieval/coco",
        count_key="retrieval/coco/images_set_aside",
    )
    yield Case("ids duplicated", F, kp(kdup), "clear", ("dataset_coco.json", "duplicate"))
    F = "Flickr txt"

    def fl(lines=None, drop=()):
        def build(d):
            f, root = flickr_txt(d, lines)
            for i in drop:
                (root / f"{1000 + i}.jpg").unlink()
            return ["--retrieval", f"flickr:{f}", "--image-root", str(root)]

        return build

    yield Case(
        "a line without a caption",
        F,
        fl([f"{1000 + i}.jpg,a child {i}" for i in range(N)] + ["just words"]),
        "clear",
        ("flickr30k_test_karpathy.txt", "line"),
    )
    yield Case(
        "an image named but absent",
        F,
        fl(drop=(0,)),
        "handled",
        bench="retrieval/flickr30k",
        count_key="retrieval/flickr30k/images_set_aside",
    )
    yield Case("no caption line", F, fl(lines=[]), "clear", ("flickr30k_test_karpathy.txt",))


def _truncate(argv: list[str], k: int) -> list[str]:
    "Cut the annotation file named in `argv` (after 'coco:') in half: malformed JSON."
    f = Path(argv[1].split(":", 1)[1])
    raw = f.read_bytes()
    f.write_bytes(raw[: len(raw) // 2])
    return argv


def _winoground_cases():
    F = "Winoground"
    wg = lambda d: ["--winoground", str(d)]

    def recs(mut):
        r = [
            {
                "id": i,
                "caption_0": f"a dog bites a man {i}",
                "caption_1": f"a man bites a dog {i}",
                "image_0": f"ex_{i}_img_0",
                "image_1": f"ex_{i}_img_1",
                "tag": "Object",
                "secondary_tag": "",
                "num_main_preds": 1,
                "collapsed_tag": "Object",
            }
            for i in range(N)
        ]
        mut(r)
        return r

    def gone(d, *names):
        winoground(d)
        for n in names:
            (d / "images" / f"{n}.png").unlink()
        return wg(d)

    yield Case(
        "a missing field",
        F,
        lambda d: wg(winoground(d, recs(lambda r: r[2].pop("caption_1")))),
        "clear",
        ("examples.jsonl", "line 3", "caption_1"),
    )
    yield Case(
        "an image absent",
        F,
        lambda d: gone(d, "ex_1_img_1"),
        "handled",
        bench="winoground",
        count_key="winoground/set_aside",
    )
    yield Case(
        "every image absent",
        F,
        lambda d: gone(d, *[f"ex_{i}_img_{j}" for i in range(N) for j in (0, 1)]),
        "clear",
        ("data", "none of the 4 examples"),
    )
    yield Case("no images folder", F, lambda d: wg(winoground(d, images=False)), "clear", ("images.zip",))
    yield Case(
        "malformed JSON",
        F,
        lambda d: wg(winoground(d, recs(lambda r: None)[:3] + ['{"id": 3, "caption_0": '])),
        "clear",
        ("examples.jsonl", "line 4", "not valid JSON"),
    )
    yield Case(
        "ids duplicated",
        F,
        lambda d: wg(winoground(d, recs(lambda r: r[1].update(id=0)))),
        "clear",
        ("examples.jsonl", "duplicate id"),
    )


def _hierarchy_cases():
    F = "class hierarchy"

    def tree(name, text):
        def build(d):
            image_folder(d / "pets")
            (d / name).write_text(text)
            return ["--zeroshot", str(d / "pets"), "--hierarchy", str(d / name)]

        return build

    yield Case(
        "a cycle",
        F,
        tree("tree.json", json.dumps({"cat": "animal", "dog": "animal", "animal": "cat"})),
        "clear",
        ("tree.json", "cycle"),
    )
    yield Case(
        "two parents (JSON)",
        F,
        tree("tree.json", json.dumps({"cat": ["animal", "pet"], "dog": "animal"})),
        "clear",
        ("tree.json", "2 parents"),
    )
    yield Case(
        "two parents (is-a list)",
        F,
        tree("isa.txt", "animal cat\nanimal dog\npet cat\n"),
        "clear",
        ("isa.txt", "line 3", "two parents"),
    )
    yield Case(
        "an unknown class",
        F,
        tree("tree.json", json.dumps({"cat": "animal"})),
        "clear",
        ("tree.json", "not in the hierarchy", "dog"),
    )
    yield Case("an empty file (JSON)", F, tree("tree.json", ""), "clear", ("tree.json", "not JSON"))
    yield Case("an empty file (is-a list)", F, tree("isa.txt", "\n"), "clear", ("isa.txt", "no edges"))
    yield Case(
        "a file that is not there",
        F,
        lambda d: ["--zeroshot", str(image_folder(d / "pets")), "--hierarchy", str(d / "nope.json")],
        "clear",
        ("nope.json",),
    )


def _suite_cases():
    F = "--suite data root"

    def empty(d):
        d.mkdir(parents=True, exist_ok=True)
        return ["--suite", "argent", "--data-root", str(d)]

    yield Case("a data root with nothing in it", F, empty, "clear", ("nothing", "argent"))
    yield Case(
        "a data root that is not there",
        F,
        lambda d: ["--suite", "degla", "--data-root", str(d / "nope")],
        "clear",
        ("nope",),
    )
    yield Case("no data root", F, lambda d: ["--suite", "read"], "clear", ("--data-root",))


_ONNX: dict = {}  # one export of the audit's model per process, copied into each ONNX case's folder


def onnx_export(d: Path) -> Path:
    "A `hierbench export --format onnx` folder of a world-debug model at `d/onnx` (its tower files to be damaged)."
    if "dir" not in _ONNX:
        from hierbench.models.family import create_model
        from hierbench.models.onnx_export import export_onnx

        _ONNX["tmp"] = tempfile.TemporaryDirectory()
        _ONNX["dir"] = export_onnx(create_model("world-debug"), Path(_ONNX["tmp"].name) / "onnx")["config"].parent
    shutil.copytree(_ONNX["dir"], d / "onnx")
    return d / "onnx"


def _onnx_cases():
    "A damaged ONNX export scored by `eval --scorer onnx:DIR` (issue 46: onnxruntime's InvalidProtobuf traceback)."
    F = "ONNX export (--scorer onnx:DIR)"

    def damaged(damage):
        def build(d):
            folder = onnx_export(d)
            damage(folder)
            return ["--scorer", f"onnx:{folder}", "--zeroshot", str(image_folder(d / "pets"))]

        return build

    def cut(name, keep):
        return lambda f: (f / name).write_bytes((f / name).read_bytes()[:keep])

    def config(mutate):
        return lambda f: (f / "config.json").write_text(json.dumps(mutate(json.loads((f / "config.json").read_text()))))

    yield Case(
        "image.onnx cut short",
        F,
        damaged(cut("image.onnx", 3000)),
        "clear",
        ("image.onnx", "not a readable ONNX model"),
    )
    yield Case(
        "text.onnx overwritten",
        F,
        damaged(lambda f: (f / "text.onnx").write_bytes(b"not a graph " * 40)),
        "clear",
        ("text.onnx", "not a readable ONNX model"),
    )
    yield Case("text.onnx empty", F, damaged(cut("text.onnx", 0)), "clear", ("text.onnx", "not a readable ONNX model"))
    yield Case(
        "image.onnx missing", F, damaged(lambda f: (f / "image.onnx").unlink()), "clear", ("image.onnx", "missing")
    )
    yield Case(
        "the towers swapped",
        F,
        damaged(lambda f: shutil.copy(f / "text.onnx", f / "image.onnx")),
        "clear",
        ("image.onnx", "not the image tower"),
    )
    yield Case("config.json cut short", F, damaged(cut("config.json", 100)), "clear", ("config.json", "not JSON"))
    yield Case(
        "config.json without a field",
        F,
        damaged(config(lambda c: {k: v for k, v in c.items() if k != "tokenizer"})),
        "clear",
        ("config.json", "tokenizer.kind"),
    )


def _view_cases():
    "`hierbench view` on photos (issue 46: without --captions it ended in `IndexError: argmax()`)."
    F = "hierbench view (--images)"

    def photos(d, classes=(None,) * N):
        for k, cls in enumerate(classes):
            write_png((d / cls if cls else d) / f"p{k}.png", k)
        return d

    yield Case(
        "photos without --captions",
        F,
        lambda d: ["--images", str(photos(d / "photos"))],
        "handled",
        command="view",
        good=N,
    )
    yield Case(
        "class folders without --captions",
        F,
        lambda d: ["--images", str(photos(d / "photos", ("cat", "cat", "dog", "dog")))],
        "handled",
        command="view",
        good=N,
    )

    def with_captions(d):
        photos(d / "photos")
        (d / "caps.csv").write_text("image,caption\n" + "".join(f"p{k}.png,a photo {k}\n" for k in range(N)))
        return ["--images", str(d / "photos"), "--captions", str(d / "caps.csv")]

    yield Case("photos with --captions", F, with_captions, "handled", command="view", good=N, texts=N)

    def absent(d):
        photos(d / "photos")
        (d / "caps.csv").write_text("image,caption\np0.png,a photo\nelsewhere.png,a cat\n")
        return ["--images", str(d / "photos"), "--captions", str(d / "caps.csv")]

    yield Case("a caption naming an absent image", F, absent, "clear", ("elsewhere.png", "caps.csv"), command="view")

    def corrupt(d):
        photos(d / "photos")
        (d / "photos" / "p1.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
        return ["--images", str(d / "photos")]

    yield Case("a photo that is not an image", F, corrupt, "clear", ("p1.png", "cannot be read"), command="view")
    yield Case(
        "an empty folder",
        F,
        lambda d: ["--images", str(_mkdirs(d / "photos"))],
        "clear",
        ("photos", "no images"),
        command="view",
    )


def _mkdirs(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    return d


def _has(*modules) -> bool:
    return all(importlib.util.find_spec(m) for m in modules)


# ---- the compositional families of issue 47, in their released layouts ------------------------------------------
def vl_checklist(d: Path, recs=None, yaml_text=None, images=True) -> list[str]:
    "A VL-CheckList folder (corpus/v1/Object/Location/center/vg_obj.yaml → data JSON) and its image root (vg/VG_100K/)."
    repo, root = d / "VL-CheckList", d / "images"
    anno = "data/Object/Location/vg_location/vg_obj_center.json"
    (repo / "corpus/v1/Object/Location/center").mkdir(parents=True, exist_ok=True)
    (repo / "corpus/v1/Object/Location/center/vg_obj.yaml").write_text(
        yaml_text if yaml_text is not None else f'ANNO_PATH: "{anno}"\nIMG_ROOT: "vg/"\nTYPE: "TUPLE_JSON"\n'
    )
    recs = (
        [[f"VG_100K/{i}.png", {"POS": [f"a red thing {i}"], "NEG": [f"a blue thing {i}"]}] for i in range(N)]
        if recs is None
        else recs
    )
    (repo / anno).parent.mkdir(parents=True, exist_ok=True)
    (repo / anno).write_text(recs if isinstance(recs, str) else json.dumps(recs))
    if images:
        for i in range(N):
            write_png(root / "vg" / "VG_100K" / f"{i}.png", i)
    return ["--vl-checklist", str(repo), "--image-root", str(root)]


def _vlc_cases():
    F = "VL-CheckList"
    anno = "vg_obj_center.json"
    handled = dict(expect="handled", bench="vl_checklist", count_key="vl_checklist/set_aside")

    def gone(d):
        f = vl_checklist(d)
        (d / "images/vg/VG_100K/2.png").unlink()
        return f

    def corrupt(d):
        f = vl_checklist(d)
        (d / "images/vg/VG_100K/2.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
        return f

    bad = lambda mut: (
        lambda d: vl_checklist(
            d, recs=mut([[f"VG_100K/{i}.png", {"POS": [f"p{i}"], "NEG": [f"n{i}"]}] for i in range(N)])
        )
    )

    def no_neg(r):
        r[1][1].pop("NEG")
        return r

    def leaves(r):
        r[3][0] = "../../../etc/passwd"
        return r

    yield Case("an image named but absent", F, gone, **handled)
    yield Case("a corrupt image", F, corrupt, **handled)
    yield Case(
        "a YAML without ANNO_PATH",
        F,
        lambda d: vl_checklist(d, yaml_text='IMG_ROOT: "vg/"\n'),
        "clear",
        ("vg_obj.yaml", "ANNO_PATH"),
    )
    yield Case("a record without NEG", F, bad(no_neg), "clear", (anno, "record '1'", "NEG"))
    yield Case(
        "malformed JSON",
        F,
        lambda d: vl_checklist(d, recs='[["VG_100K/0.png", {"POS": '),
        "clear",
        (anno, "not valid JSON"),
    )
    yield Case("an empty file", F, lambda d: vl_checklist(d, recs=[]), "clear", (anno, "no records"))
    yield Case("an image path leaving the root", F, bad(leaves), "clear", (anno, "leaves the image root"))
    yield Case(
        "no corpus folder",
        F,
        lambda d: ["--vl-checklist", str(_mkdir_plain(d)), "--image-root", str(d)],
        "clear",
        ("corpus/v1",),
    )
    yield Case("no image root", F, lambda d: vl_checklist(d)[:2], "clear", ("--image-root",))


def _mkdir_plain(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    return d


def eqben(d: Path, recs=None) -> list[str]:
    "An EqBen folder with eqbensd.json (a list of {image0, caption0, image1, caption1}) and its frames."
    for i in range(2 * N):
        write_png(d / "frames" / f"{i}.png", i)
    recs = (
        [
            dict(
                image0=f"frames/{2 * i}.png",
                image1=f"frames/{2 * i + 1}.png",
                caption0=f"a red car {i}",
                caption1=f"a blue car {i}",
            )
            for i in range(N)
        ]
        if recs is None
        else recs
    )
    (d / "eqbensd.json").write_text(recs if isinstance(recs, str) else json.dumps(recs))
    return ["--eqben", str(d)]


def _eqben_cases():
    F = "EqBen"
    handled = dict(expect="handled", bench="eqben", count_key="eqben/eqbensd/set_aside")

    def recs(mut):
        r = [
            dict(
                image0=f"frames/{2 * i}.png",
                image1=f"frames/{2 * i + 1}.png",
                caption0=f"a red car {i}",
                caption1=f"a blue car {i}",
            )
            for i in range(N)
        ]
        mut(r)
        return r

    def gone(d):
        f = eqben(d)
        (d / "frames/5.png").unlink()
        return f

    yield Case("an image absent", F, gone, **handled)
    yield Case(
        "the same caption twice",
        F,
        lambda d: eqben(d, recs(lambda r: r[1].update(caption1=r[1]["caption0"]))),
        **handled,
    )
    yield Case(
        "a missing field",
        F,
        lambda d: eqben(d, recs(lambda r: r[2].pop("caption1"))),
        "clear",
        ("eqbensd.json", "record '2'", "caption1"),
    )
    yield Case("an empty subset", F, lambda d: eqben(d, []), "clear", ("eqbensd.json", "no records"))
    yield Case("malformed JSON", F, lambda d: eqben(d, '[{"image0": '), "clear", ("eqbensd.json", "not valid JSON"))
    yield Case("no subset file", F, lambda d: ["--eqben", str(_mkdir_plain(d))], "clear", ("eqbensd.json",))


def spec(d: Path, i2t=None, t2i=None) -> list[str]:
    "A SPEC data root with count/ (image2text.json, text2image.json, images/)."
    sub = d / "count"
    for i in range(N):
        write_png(sub / "images" / f"{i}.png", i)
    i2t = (
        [dict(query=f"images/{i}.png", keys=[f"{i} red cars", f"{i + 1} red cars"], label=0) for i in range(2)]
        if i2t is None
        else i2t
    )
    t2i = (
        [dict(query=f"{i} blue boats", keys=["images/2.png", "images/3.png"], label=i) for i in range(2)]
        if t2i is None
        else t2i
    )
    (sub / "image2text.json").write_text(json.dumps(i2t))
    (sub / "text2image.json").write_text(json.dumps(t2i))
    return ["--spec", str(d)]


def _spec_cases():
    F = "SPEC"

    def gone(d):
        f = spec(d)
        (d / "count/images/0.png").unlink()
        return f

    yield Case("an image absent", F, gone, "handled", bench="spec", count_key="spec/count/set_aside")
    yield Case(
        "a label out of range",
        F,
        lambda d: spec(d, t2i=[dict(query="q", keys=["images/2.png", "images/3.png"], label=2)]),
        "clear",
        ("text2image.json", "label"),
    )
    yield Case(
        "a missing field",
        F,
        lambda d: spec(d, i2t=[dict(query="images/0.png", label=0)]),
        "clear",
        ("image2text.json", "keys"),
    )
    yield Case("no subset folder", F, lambda d: ["--spec", str(_mkdir_plain(d))], "clear", ("existence",))


def mmvp(d: Path, rows=None) -> list[str]:
    """Questions.csv and 'MLLM_VLM Images/<Type>/<qid>.jpg' (PNG bytes under the official names: PIL reads them by
    content)."""
    rows = (
        [(q, "Orientation and Direction", f"the thing number {q}") for q in range(1, 2 * N + 1)]
        if rows is None
        else rows
    )
    (d / "Questions.csv").parent.mkdir(parents=True, exist_ok=True)
    (d / "Questions.csv").write_text("Question ID,Type,Statement\n" + "".join(f"{q},{t},{s}\n" for q, t, s in rows))
    for q, t, _ in rows:
        if str(q).isdigit():
            write_png(d / "MLLM_VLM Images" / t / f"{q}.jpg", int(q))
    return ["--mmvp", str(d)]


def _mmvp_cases():
    F = "MMVP-VLM"

    def gone(d):
        f = mmvp(d)
        (d / "MLLM_VLM Images/Orientation and Direction/4.jpg").unlink()
        return f

    base = lambda: [(q, "Orientation and Direction", f"the thing number {q}") for q in range(1, 2 * N + 1)]
    yield Case("an image absent", F, gone, "handled", bench="mmvp", count_key="mmvp/set_aside")
    yield Case("an odd number of rows", F, lambda d: mmvp(d, base()[:-1]), "clear", ("Questions.csv", "odd number"))
    yield Case(
        "a question id that is not a number",
        F,
        lambda d: mmvp(d, [("one", "Texts", "a sign")] + base()[1:]),
        "clear",
        ("Questions.csv", "row 2", "Question ID"),
    )
    yield Case("no Questions.csv", F, lambda d: ["--mmvp", str(_mkdir_plain(d))], "clear", ("Questions.csv",))


def bivlc(d: Path, rows=None, columns=None) -> list[str]:
    "data/test-00000-of-00001.parquet as the Hub holds BiVLC's test split (image, negative_image as {bytes, path})."
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = (
        [
            dict(
                image={"bytes": png(COLOURS[i]), "path": None},
                caption=f"a red thing {i}",
                negative_caption=f"a blue thing {i}",
                negative_image={"bytes": png(COLOURS[(i + 3) % 6]), "path": None},
                type="replace",
                subtype="replace_att",
            )
            for i in range(N)
        ]
        if rows is None
        else rows
    )
    if columns:
        rows = [{k: v for k, v in r.items() if k in columns} for r in rows]
    (d / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), d / "data" / "test-00000-of-00001.parquet")
    return ["--bivlc", str(d)]


def _bivlc_cases():
    F = "BiVLC"

    def rows(mut):
        r = [
            dict(
                image={"bytes": png(COLOURS[i]), "path": None},
                caption=f"a red thing {i}",
                negative_caption=f"a blue thing {i}",
                negative_image={"bytes": png(COLOURS[(i + 3) % 6]), "path": None},
                type="replace",
                subtype="replace_att",
            )
            for i in range(N)
        ]
        mut(r)
        return r

    handled = dict(expect="handled", bench="bivlc", count_key="bivlc/set_aside")
    yield Case(
        "a row without its negative image",
        F,
        lambda d: bivlc(d, rows(lambda r: r[1].update(negative_image=None))),
        **handled,
    )
    yield Case(
        "an image that does not decode",
        F,
        lambda d: bivlc(d, rows(lambda r: r[2].update(image={"bytes": b"not an image", "path": None}))),
        **handled,
    )
    yield Case(
        "a missing column",
        F,
        lambda d: bivlc(d, columns=("image", "caption", "negative_image", "type", "subtype")),
        "clear",
        ("test-00000-of-00001.parquet", "negative_caption"),
    )
    yield Case("no parquet files", F, lambda d: ["--bivlc", str(_mkdir_plain(d))], "clear", ("test-*.parquet",))
    yield Case(
        "not a parquet file",
        F,
        lambda d: _garbage_parquet(d),
        "clear",
        ("test-00000-of-00001.parquet", "not a readable parquet"),
    )


def _garbage_parquet(d: Path) -> list[str]:
    (d / "data").mkdir(parents=True, exist_ok=True)
    (d / "data" / "test-00000-of-00001.parquet").write_bytes(b"PAR1 no parquet" * 10)
    return ["--bivlc", str(d)]


def colorswap(d: Path, recs=None) -> list[str]:
    "test.json (ids, caption_1/2, image_1/2 under images/) and images/img_<id>_<k>.png."
    for i in range(N):
        for k in (1, 2):
            write_png(d / "images" / f"img_{i}_{k}.png", 2 * i + k)
    recs = (
        [
            dict(
                id=i,
                caption_1=f"a yellow hat and a white dress {i}",
                caption_2=f"a white hat and a yellow dress {i}",
                image_1=f"images/img_{i}_1.png",
                image_2=f"images/img_{i}_2.png",
            )
            for i in range(N)
        ]
        if recs is None
        else recs
    )
    (d / "test.json").write_text(json.dumps(recs))
    return ["--colorswap", str(d)]


def _colorswap_cases():
    F = "ColorSwap"

    def recs(mut):
        r = [
            dict(
                id=i,
                caption_1=f"a yellow hat {i}",
                caption_2=f"a white hat {i}",
                image_1=f"images/img_{i}_1.png",
                image_2=f"images/img_{i}_2.png",
            )
            for i in range(N)
        ]
        mut(r)
        return r

    def gone(d):
        f = colorswap(d)
        (d / "images/img_1_2.png").unlink()
        return f

    yield Case("an image absent", F, gone, "handled", bench="colorswap", count_key="colorswap/set_aside")
    yield Case(
        "a missing field",
        F,
        lambda d: colorswap(d, recs(lambda r: r[2].pop("caption_2"))),
        "clear",
        ("test.json", "caption_2"),
    )
    yield Case(
        "ids duplicated",
        F,
        lambda d: colorswap(d, recs(lambda r: r[1].update(id=0))),
        "clear",
        ("test.json", "duplicate id"),
    )
    yield Case("no test.json", F, lambda d: ["--colorswap", str(_mkdir_plain(d))], "clear", ("test.json",))


def cola(d: Path, data=None) -> list[str]:
    "COLA's multi-object JSON ([image URL, caption, image URL, caption]) and its images by file name under vg/VG_100K/."
    url = "https://cs-people.bu.edu/array/data/vg_gqa_images/{}.jpg".format
    for i in range(2 * N):
        write_png(d / "vg" / "VG_100K" / f"{2400000 + i}.jpg", i)
    data = (
        [
            [
                url(2400000 + 2 * i),
                f"white shirt and blue pants {i}",
                url(2400001 + 2 * i),
                f"blue shirt and white pants {i}",
            ]
            for i in range(N)
        ]
        if data is None
        else data
    )
    (d / "COLA_multiobjects_matching_benchmark.json").write_text(json.dumps(data))
    return ["--cola", str(d / "COLA_multiobjects_matching_benchmark.json"), "--image-root", str(d / "vg")]


def _cola_cases():
    F = "COLA"

    def gone(d):
        f = cola(d)
        (d / "vg/VG_100K/2400003.jpg").unlink()
        return f

    def three(d):
        f = cola(d)
        p = Path(f[1])
        data = json.loads(p.read_text())
        data[2] = data[2][:3]
        p.write_text(json.dumps(data))
        return f

    yield Case("an image found nowhere", F, gone, "handled", bench="cola", count_key="cola/set_aside")
    yield Case(
        "a record of three entries", F, three, "clear", ("COLA_multiobjects_matching_benchmark.json", "record '2'")
    )
    yield Case("no image root", F, lambda d: cola(d)[:2], "clear", ("--image-root",))


def all_cases() -> list[Case]:
    return [
        *_classification_cases(),
        *_retrieval_wds_cases(),
        *_image_folder_cases(),
        *_imagenet_cases(),
        *_retrieval_file_cases(),
        *_winoground_cases(),
        *_hierarchy_cases(),
        *_suite_cases(),
        *(_onnx_cases() if _has("onnxruntime", "onnxscript") else ()),
        *_view_cases(),
        *_vlc_cases(),
        *_eqben_cases(),
        *_spec_cases(),
        *_mmvp_cases(),
        *_bivlc_cases(),
        *_colorswap_cases(),
        *_cola_cases(),
    ]


# ---- running one case -------------------------------------------------------------------------------------------
class _Hang(BaseException):
    pass


@dataclass
class Ran:
    code: object  # the exit status (0, or SystemExit's code: a message means 1)
    stdout: str = ""
    stderr: str = ""
    crash: str = ""  # the traceback of an exception that escaped the entry point
    hang: bool = False


def run_inprocess(argv: list[str], seconds: int = HANG_SECONDS) -> Ran:
    """`hierbench.cli.parser.main(argv)` here, as the console script runs it: output captured, warnings printed to
    stderr."""
    from hierbench.cli.parser import main

    out, err = io.StringIO(), io.StringIO()

    def alarm(signum, frame):
        raise _Hang

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        with (
            warnings.catch_warnings(record=True) as caught,
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            warnings.simplefilter("always")
            try:
                main(argv)
                code = 0
            except SystemExit as e:
                code = 0 if e.code is None else e.code
            except _Hang:
                return Ran(None, out.getvalue(), err.getvalue(), hang=True)
            except BaseException:
                return Ran(None, out.getvalue(), err.getvalue(), crash=traceback.format_exc())
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    said = "".join(f"{w.category.__name__}: {w.message}\n" for w in caught)
    if isinstance(code, str):
        return Ran(1, out.getvalue(), err.getvalue() + said + code + "\n")  # what the interpreter prints
    return Ran(code, out.getvalue(), err.getvalue() + said)


def run_subprocess(argv: list[str], seconds: int = HANG_SECONDS) -> Ran:
    "The same through a real `hierbench` process (`python -m hierbench.cli`)."
    try:
        p = subprocess.run(
            [sys.executable, "-m", "hierbench.cli", *argv], capture_output=True, text=True, timeout=seconds
        )
    except subprocess.TimeoutExpired:
        return Ran(None, hang=True)
    crash = p.stderr if "Traceback (most recent call last)" in p.stderr else ""
    return Ran(p.returncode, p.stdout, p.stderr, crash=crash)


def classify(case: Case, ran: Ran, metrics_json: Path) -> tuple[str, str]:
    "(outcome, the message a user saw) of one run of `case`."
    if ran.hang:
        return "hang", f"no answer after {HANG_SECONDS} s"
    if ran.crash:
        return "raw crash", ran.crash.strip().splitlines()[-1][:200]
    lines = [l for l in ran.stderr.splitlines() if l.strip()]
    if ran.code not in (0, None):
        last = lines[-1] if lines else ""
        if not last.startswith(f"hierbench {case.command}: "):
            return "raw crash", f"exit {ran.code} without a one-line refusal: {last[:160]}"
        if "Traceback" in ran.stderr:
            return "raw crash", f"a traceback before: {last[:160]}"
        missing = [n for n in case.names if n not in last]
        if case.expect != "clear":
            return "silently accepted" if not missing else "raw crash", f"refused what should be handled: {last[:200]}"
        return ("clear", last[:220]) if not missing else ("raw crash", f"does not name {missing}: {last[:200]}")
    if case.expect == "clear":
        return "silently accepted", "scored an input that should be refused"
    if case.command == "view":
        return classify_view(case, ran, metrics_json.parent / "ws")
    res = json.loads(metrics_json.read_text())
    items = metrics_json.with_name(metrics_json.stem + ".items.jsonl")
    table = (
        pd.read_json(items, lines=True, dtype={"id": str})
        if items.is_file() and items.stat().st_size
        else pd.DataFrame(columns=["benchmark", "subset"])
    )
    bench = case.bench.format(name=case.name)
    scored = _rows_of(bench)(table) if len(table) else 0
    if scored < case.good:
        return "lost data", f"{scored} of {case.good} good items scored"
    if scored > case.good:
        return "silently accepted", f"{scored} items scored, {case.good} expected"
    key = case.count_key.format(name=case.name)
    if not key:
        return "handled", _said(ran) or f"{scored} items scored"
    if key not in res:
        return "silently accepted", f"{scored} items scored, nothing counted as set aside ({key} absent)"
    if res[key] != case.bad:
        return "wrong number", f"{key} = {res[key]}, {case.bad} set aside"
    said = _said(ran)
    return ("handled", said) if said else ("silently accepted", f"{key} = {res[key]} but no warning named the sample")


def classify_view(case: Case, ran: Ran, workspace: Path) -> tuple[str, str]:
    """A `hierbench view` that went through: its workspace holds every image and the texts expected (and no parents
    without texts)."""
    try:
        rec = json.loads((workspace / "hierbench-view.json").read_text())
    except (OSError, ValueError):
        return "lost data", f"no workspace record in {workspace}"
    images, texts = rec.get("images"), rec.get("samples", 0) - rec.get("images", 0)
    if images != case.good:
        return "lost data", f"{images} of {case.good} images in the workspace"
    if texts != case.texts:
        return "silently accepted", f"{texts} texts in the workspace, {case.texts} expected"
    if not case.texts and any(rec.get("parents", [])):
        return "silently accepted", "parent captions without any caption"
    return "handled", (ran.stdout.strip().splitlines() or [""])[-1][:220]


@contextlib.contextmanager
def hyperview_recorded():
    "Without the [view] extra: `hierbench view` with HyperView's writer replaced by a record of what it would be given."
    from hierbench.ui import view as V

    if _has("hyperview"):
        yield
        return

    def record(view, out, name="hierbench", color_by="label"):
        V.color_labels(view, color_by)
        Path(out).mkdir(parents=True)
        (Path(out) / V.VIEW_MARKER).write_text(
            json.dumps(
                dict(
                    samples=len(view.items.table),
                    images=view.items.n_images,
                    layouts=list(view.layouts),
                    parents=list(view.fields.parent),
                )
            )
        )
        return dict(layouts={g: g for g in view.layouts}, seconds=0.0)

    saved = V.check_hyperview, V.write_workspace
    V.check_hyperview, V.write_workspace = (lambda: None), record
    try:
        yield
    finally:
        V.check_hyperview, V.write_workspace = saved


def _said(ran: Ran) -> str:
    "The line that named what was set aside (a DataWarning, or the log's 'set aside' / 'ignored' line)."
    for text in (ran.stderr, ran.stdout):
        for l in text.splitlines():
            if "set aside" in l or "ignored" in l:
                return l.strip()[:220]
    return ""


def run_case(case: Case, model: Path, folder: Path, via: str = "in-process") -> tuple[str, str]:
    """(outcome, message) of one case built under `folder` and run as `hierbench eval --checkpoint MODEL ...` (a case
    whose flags name a `--scorer` scores with that), or as `hierbench view --scorer hierbench:MODEL ... --out WS`."""
    data = folder / "data"
    folder.mkdir(parents=True, exist_ok=True)
    flags = case.build(data)
    out = folder / "m.json"
    if case.command == "view":
        with hyperview_recorded():
            ran = run_inprocess(["view", "--scorer", f"hierbench:{model}", *flags, "--out", str(folder / "ws")])
        return classify(case, ran, out)
    data_flags = flags[2:] if flags[0] == "--scorer" else flags
    case.name = Path(data_flags[1].split(":", 1)[-1]).name  # NAME in the metric keys: the folder's (or file's) name
    model_flags = [] if flags[0] == "--scorer" else ["--checkpoint", str(model)]
    argv = ["eval", *model_flags, "--no-world", "--num-workers", "0", "--json", str(out), *flags]
    return classify(case, (run_inprocess if via == "in-process" else run_subprocess)(argv), out)


def audit_model(folder: Path) -> Path:
    "The model every case scores with: a saved world-debug `DualEncoder` (any model would do; this one is small)."
    from hierbench.models.family import create_model, save_model

    return save_model(create_model("world-debug"), Path(folder) / "model.safetensors")


def run_cli_audit(subprocess_cases=SUBPROCESS_CASES, log=None) -> pd.DataFrame:
    """Every case once through the entry point in this process, and those in `subprocess_cases` ((format, class)) again
    as processes."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = audit_model(tmp)
        for k, case in enumerate(all_cases()):
            vias = ["in-process"] + (["subprocess"] if (case.format, case.cls) in subprocess_cases else [])
            for via in vias:
                outcome, msg = run_case(case, model, tmp / f"case{k:03d}-{via}", via)
                rows.append(
                    dict(cls=case.cls, format=case.format, expected=case.expect, outcome=outcome, via=via, message=msg)
                )
                if log:
                    log(f"{case.format} / {case.cls} ({via}): {outcome} — {msg}")
    return pd.DataFrame(rows)


def cli_table(audit: pd.DataFrame) -> pd.DataFrame:
    "format | inputs | clear | handled | raw crash | hang | silently accepted | lost data | wrong number."
    t = pd.crosstab(audit.format, audit.outcome).reindex(columns=[*SAFE, *UNSAFE], fill_value=0)
    t.insert(0, "inputs", t.sum(axis=1))
    return t.loc[list(dict.fromkeys(audit.format))]
