"""`hierbench eval --compare A B --page FILE --image-root DIR` end to end on the real SugarCrepe files of ../shared and
their COCO images (HierarCaps' test_imgs, found by COCO id through --coco-dir): two random-init `real-tiny` models under
two torch seeds, each scored by `eval --json` (per-item rows beside it), then compared. The page's differing items,
its paired difference and its images are checked against a re-computation from the per-item rows (skipped without
../shared: a user's clone)."""

import base64
import html as html_
import io
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from eval_models import SHARED
from hierbench.cli.parser import main
from hierbench.data.loaders import coco_id
from hierbench.evaluation.item_metrics import differing_items
from hierbench.models.dual_encoder import create_model
from hierbench.models.family import save_model

SUGARCREPE = SHARED / "data" / "sugarcrepe"
COCO = SHARED / "data" / "hierarcaps" / "test_imgs"
LIMIT = 20  # items per SugarCrepe file: 7 × 20 = 140 items, a few seconds an evaluation on one core
K = 6  # differing_items' default: at most this many items a direction on the page

pytestmark = pytest.mark.skipif(
    not (SUGARCREPE.is_dir() and COCO.is_dir()),
    reason="../shared/data/sugarcrepe or ../shared/data/hierarcaps/test_imgs is absent (a user's clone)",
)


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """Two random-init real-tiny models (seeds 0 and 1) scored on SugarCrepe from a checkout beside ../shared (a link
    to it), `--coco-dir ../shared/...` typed relative to it as a user does; returns (checkout, a.json, b.json)."""
    root = tmp_path_factory.mktemp("compare_real")
    work = root / "main"
    work.mkdir()
    (root / "shared").symlink_to(SHARED, target_is_directory=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(warnings, "showwarning", warnings.showwarning)  # main installs its one-line warnings
        mp.chdir(work)
        out = []
        for name, seed in (("a", 0), ("b", 1)):
            torch.manual_seed(seed)
            save_model(create_model("real-tiny"), root / name / "model.safetensors")
            metrics = work / f"{name}.json"
            coco = f"../shared/{COCO.relative_to(SHARED).as_posix()}"  # as typed in a checkout beside ../shared
            main(
                ["eval", "--checkpoint", str(root / name), "--no-world", "--sugarcrepe", str(SUGARCREPE)]
                + ["--coco-dir", coco, "--limit", str(LIMIT), "--num-workers", "0", "--json", str(metrics)]
            )
            out.append(metrics)
    return work, *out


def _rows(metrics: Path) -> dict:
    "The per-item rows beside an `eval --json` file, read without pandas: {(subset, id): row}."
    lines = metrics.with_name(metrics.stem + ".items.jsonl").read_text().splitlines()
    rows = [json.loads(l) for l in lines if l.strip()]
    assert {r["benchmark"] for r in rows} == {"sugarcrepe"}
    return {(r["subset"], str(r["id"])): r for r in rows}


def _cells(tr: str) -> list[str]:
    return re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", tr, flags=re.S)


def _tables(html: str) -> list[list[list[str]]]:
    "Each `<table>` of the page as rows of cell texts (header first)."
    return [
        [_cells(tr) for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", t, flags=re.S)]
        for t in re.findall(r"<table.*?</table>", html, flags=re.S)
    ]


def test_compare_page_of_two_real_models_on_real_sugarcrepe(scored, capsys, monkeypatch):
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    work, a_json, b_json = scored
    monkeypatch.chdir(work)  # the rows name their images relative to the folder the evaluations ran in
    ra, rb = _rows(a_json), _rows(b_json)
    subsets = sorted(p.stem for p in SUGARCREPE.glob("*.json"))
    assert len(subsets) == 7 and set(ra) == set(rb) and len(ra) == 7 * LIMIT
    assert {s for s, _ in ra} == set(subsets)
    for metrics, rows in ((a_json, ra), (b_json, rb)):  # the aggregate the JSON holds is the rows' mean
        micro = json.loads(metrics.read_text())["sugarcrepe/micro"]
        assert micro == pytest.approx(np.mean([r["ok"] for r in rows.values()]))
    assert any(ra[k]["scores"] != rb[k]["scores"] for k in ra), "two seeds gave the same scores"

    page = work / "cmp.html"
    main(["eval", "--compare", str(a_json), str(b_json), "--page", str(page), "--image-root", str(COCO)])
    out = capsys.readouterr().out
    assert f"wrote {page}" in out and page.is_file()
    html = page.read_text()

    # the independent count: the shared items (joined on subset and id) whose two verdicts differ
    shared = sorted(set(ra) & set(rb))
    only_a = {k for k in shared if ra[k]["ok"] and not rb[k]["ok"]}
    only_b = {k for k in shared if rb[k]["ok"] and not ra[k]["ok"]}
    n_differ = len(only_a) + len(only_b)
    assert only_a and only_b and n_differ < len(shared)
    want = {(*k, "a") for k in only_a} | {(*k, "b") for k in only_b}

    # differing_items from the per-item files read with pandas: every differing item, and the page's share of them
    ta, tb = (
        pd.read_json(p.with_name(p.stem + ".items.jsonl"), lines=True, dtype={"id": str}) for p in (a_json, b_json)
    )
    every = differing_items(ta, tb, "sugarcrepe", k=len(shared))
    assert len(every) == n_differ and set(zip(every.subset, every.id, every.right)) == want
    listed = differing_items(ta, tb, "sugarcrepe")
    assert len(listed) == min(K, len(only_a)) + min(K, len(only_b))
    assert set(zip(listed.subset, listed.id, listed.right)) <= want

    assert f"{len(listed)} of {n_differ} shown" in html  # the page says it lists a share of them
    summary, items = _tables(html)
    head = items[0]
    shown = [dict(zip(head, r)) for r in items[1:]]
    assert len(shown) == len(listed)  # the items the page lists are differing_items' own, in its order
    assert [(r["subset"], r["id"], r["right"]) for r in shown] == list(zip(listed.subset, listed.id, listed.right))

    # every listed item's image is embedded (the real COCO file, found), none is named as missing
    section = html.split("the items only one gets right</h2>", 1)[1]
    assert section.count("data:image/png;base64,") == len(shown) and ".jpg</td>" not in section
    for r in shown:
        alt, data = re.fullmatch(r"<img alt='([^']*)' src='data:image/png;base64,([^']*)'>", r["image"]).groups()
        assert Path(alt).is_file()
        record = json.loads((SUGARCREPE / f"{r['subset']}.json").read_text())[r["id"]]
        assert coco_id(alt) == coco_id(record["filename"]) and html_.unescape(r["caption"]) == record["caption"].strip()

        with Image.open(io.BytesIO(base64.b64decode(data))) as im:
            assert im.format == "PNG" and max(im.size) <= 96 and min(im.size) > 0

    # the paired difference, on the page and printed: mean(ok_a) − mean(ok_b) over the shared items
    mean_a, mean_b = (float(np.mean([r[k]["ok"] for k in shared])) for r in (ra, rb))
    row = dict(zip(summary[0], summary[1]))
    assert len(summary) == 2 and (row["benchmark"], row["metric"]) == ("sugarcrepe", "acc")
    assert (int(row["n"]), int(row["differ"]), int(row["only_a"]), int(row["only_b"])) == (len(shared), n_differ, 0, 0)
    assert float(row["a"]) == pytest.approx(mean_a, abs=5e-5) and float(row["b"]) == pytest.approx(mean_b, abs=5e-5)
    assert float(row["diff"]) == pytest.approx(mean_a - mean_b, abs=5e-5)
    lines = out.splitlines()
    header = next(l for l in lines if l.split()[:3] == ["benchmark", "metric", "n"]).split()
    printed = dict(zip(header, next(l for l in lines if l.split()[:3] == ["0", "sugarcrepe", "acc"]).split()[1:]))
    assert float(printed["diff"]) == pytest.approx(mean_a - mean_b, abs=5e-5) and int(printed["differ"]) == n_differ


def test_image_root_finds_the_images_from_another_folder(scored, tmp_path, monkeypatch):
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    _, a_json, b_json = scored
    monkeypatch.chdir(tmp_path)  # not the checkout the evaluations ran in
    names = [r["image"] for r in _rows(a_json).values()]
    assert not any(Path(n).is_file() for n in names) and all((COCO / Path(n).name).is_file() for n in names)
    page = tmp_path / "cmp.html"
    main(["eval", "--compare", str(a_json), str(b_json), "--page", str(page), "--image-root", str(COCO)])
    # the rows name each image by the path the evaluation used (relative to its folder): found by its file name
    section = page.read_text().split("the items only one gets right</h2>", 1)[1]
    assert section.count("<img ") > 0 and ".jpg</td>" not in section
