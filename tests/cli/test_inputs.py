"""Inputs that cannot hurt (issue #13): malformed annotation files, paths, values and images are refused with the file,
record and field named, or set aside with a warning that names them — never silently accepted, never a lost
evaluation."""

import json
import os
from pathlib import Path

import pandas as pd
import pytest
import torch
from PIL import Image

from hierbench.data import batch as D, loaders as L
from hierbench.evaluation.benchmarks import evaluate_choice_benchmark
from hierbench.evaluation.encoding import WordHashModel
from hierbench.data.batch import DataFormatError, DataWarning

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _sc(folder: Path, records, name="swap_obj") -> Path:
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.json").write_text(records if isinstance(records, str) else json.dumps(records))
    return folder


def rec(caption="a dog on a sofa", negative="a sofa on a dog", filename="000000000139.jpg"):
    return {"filename": filename, "caption": caption, "negative_caption": negative}


@pytest.mark.parametrize("loader,name", [(L.load_sugarcrepe, "swap_obj"), (L.load_sugarcrepe_pp, "swap_obj")])
def test_deeply_nested_json_is_a_format_error(tmp_path, loader, name):
    _sc(tmp_path, "[" * 1200 + "]" * 1200, name)
    with pytest.raises(DataFormatError, match="swap_obj.json.*nested too deeply"):
        loader(tmp_path, "/imgs", subsets=[name])


def test_deeply_nested_valse(tmp_path):
    (tmp_path / "existence.json").write_text("[" * 1200 + "]" * 1200)
    with pytest.raises(DataFormatError, match="existence.json.*nested too deeply"):
        L.load_valse_file(tmp_path / "existence.json", "/imgs")


def test_duplicate_json_key_loses_nothing(tmp_path):
    _sc(tmp_path, '{"0": %s, "0": %s}' % (json.dumps(rec()), json.dumps(rec("a cat", "a hat"))))
    with pytest.raises(DataFormatError, match="record '0'.*duplicate JSON key"):
        L.load_sugarcrepe(tmp_path, "/imgs", ["swap_obj"])


@pytest.mark.parametrize("neg", ["a dog on a sofa", "A  dog on a sofa.", " a DOG on a sofa "])
def test_sugarcrepe_negative_equal_to_positive_is_set_aside(tmp_path, neg):
    _sc(tmp_path, {"0": rec(), "1": rec(negative=neg)})
    with pytest.warns(DataWarning, match=r"1 record\(s\) set aside .*\['1'\]"):
        items = L.load_sugarcrepe(tmp_path, "/imgs", ["swap_obj"])["swap_obj"]
    assert [it.key for it in items] == ["0"]


def test_sugarcrepe_pp_negative_equal_to_either_positive_and_duplicate_ids(tmp_path):
    r = lambda i, n: {
        "id": i,
        "filename": "x.jpg",
        "caption": "a cat on a mat",
        "caption2": "on a mat sits a cat",
        "negative_caption": n,
    }
    _sc(tmp_path, [r(0, "a mat on a cat"), r(1, "On a mat sits a cat")])
    with pytest.warns(DataWarning, match=r"\['1'\]"):
        L.load_sugarcrepe_pp(tmp_path, "/imgs", ["swap_obj"])
    _sc(tmp_path, [r(0, "a mat on a cat"), r(0, "a hat on a cat")])
    with pytest.raises(DataFormatError, match="duplicate id '0'"):
        L.load_sugarcrepe_pp(tmp_path, "/imgs", ["swap_obj"])
    _sc(tmp_path, [r({"a": 1}, "a mat on a cat")])
    with pytest.raises(DataFormatError, match="field 'id': expected a string or integer id, got dict"):
        L.load_sugarcrepe_pp(tmp_path, "/imgs", ["swap_obj"])


@pytest.mark.parametrize("caption", ["\u200b\u200b\u200b", "\x00\x01", "   ", "\u2028\t"])
def test_captions_empty_in_effect(tmp_path, caption):
    _sc(tmp_path, {"0": rec(caption=caption)})
    with pytest.raises(DataFormatError, match="record '0', field 'caption': empty in effect"):
        L.load_sugarcrepe(tmp_path, "/imgs", ["swap_obj"])


def test_huge_caption_and_csv_cell(tmp_path):
    _sc(tmp_path, {"0": rec(caption="a" * 20_000_000)})
    with pytest.raises(DataFormatError, match="20,000,000 characters"):
        L.load_sugarcrepe(tmp_path, "/imgs", ["swap_obj"])
    pd.DataFrame(
        dict(id=[0], captions=["a => b => c => " + "d" * 30_000_000], image_url=["x/COCO_val2014_000000000001.jpg"])
    ).to_csv(tmp_path / "h.csv", index=False)
    with pytest.raises(DataFormatError, match="h.csv.*characters"):
        L.load_hierarcaps(tmp_path / "h.csv", "/imgs")


def test_empty_benchmarks(tmp_path):
    _sc(tmp_path, {})
    with pytest.raises(DataFormatError, match="no records"):
        L.load_sugarcrepe(tmp_path, "/imgs", ["swap_obj"])
    (tmp_path / "h.csv").write_text("id,captions,image_url\n")
    with pytest.raises(DataFormatError, match="no records"):
        L.load_hierarcaps(tmp_path / "h.csv", "/imgs")


def test_hierarcaps_duplicate_ids(tmp_path):
    row = "0,a => b => c => d,http://x/val2014/COCO_val2014_000000000001.jpg\n"
    (tmp_path / "h.csv").write_text("id,captions,image_url\n" + row + row)
    with pytest.raises(DataFormatError, match="duplicate id '0'"):
        L.load_hierarcaps(tmp_path / "h.csv", "/imgs")


@pytest.mark.parametrize("bad", ["../../../../etc/passwd", "/etc/shadow", "a\x00b.jpg", "../imgs2/good.jpg"])
def test_paths_that_leave_the_image_root(tmp_path, bad):
    _sc(tmp_path / "ann", {"0": rec(filename=bad)})
    with pytest.raises(DataFormatError, match="record '0', field 'filename'.*(leaves the image root|NUL byte)"):
        L.load_sugarcrepe(tmp_path / "ann", tmp_path / "imgs", ["swap_obj"])


def test_valse_votes_out_of_range_and_foil_equal_to_caption(tmp_path):
    base = dict(dataset="coco", image_file="1.jpg", caption="two dogs", foil="three dogs", relation_name="x")
    (tmp_path / "counting.json").write_text(json.dumps({"0": {**base, "mturk": {"caption": -7}}}))
    with pytest.raises(DataFormatError, match="mturk.caption.*0-3 annotator votes, got -7"):
        L.load_valse_file(tmp_path / "counting.json", "/imgs")
    (tmp_path / "counting.json").write_text(
        json.dumps(
            {"0": {**base, "mturk": {"caption": 3}}, "1": {**base, "foil": "Two dogs.", "mturk": {"caption": 3}}}
        )
    )
    with pytest.warns(DataWarning, match=r"foil equal to the caption .*\['1'\]"):
        assert len(L.load_valse_file(tmp_path / "counting.json", "/imgs")) == 1


def test_whatsup_identical_options(tmp_path):
    (tmp_path / "coco_qa_one_obj.json").write_text(
        json.dumps([[139, "same", "same"], [140, "a dog left of a cat", "a dog right of a cat"]])
    )
    with pytest.warns(DataWarning, match="wrong caption equal"):
        assert len(L.load_whatsup_spatial(tmp_path / "coco_qa_one_obj.json", "/imgs")) == 1


def test_nan_box_is_refused(tmp_path):
    Image.new("RGB", (20, 20)).save(tmp_path / "a.jpg")
    with pytest.raises(DataFormatError, match="box .* is not finite"):
        D.load_image(tmp_path / "a.jpg", box=(float("nan"), 0, 10, 10))


def test_folder_symlink_loop_and_bom(tmp_path):
    (tmp_path / "swap_obj.json").mkdir()
    with pytest.raises(IsADirectoryError, match="is a folder, not a file"):
        L.load_sugarcrepe(tmp_path, "/imgs", ["swap_obj"])
    loop = tmp_path / "loop"
    loop.mkdir()
    os.symlink(loop / "swap_obj.json", loop / "swap_obj.json")
    with pytest.raises(DataFormatError, match="symlink loop"):
        L.load_sugarcrepe(loop, "/imgs", ["swap_obj"])
    bom = tmp_path / "bom"
    bom.mkdir()
    (bom / "swap_obj.json").write_bytes(b"\xef\xbb\xbf" + json.dumps({"0": rec()}).encode())
    assert len(L.load_sugarcrepe(bom, "/imgs", ["swap_obj"])["swap_obj"]) == 1  # a BOM is accepted, as in CSV


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path):
    _sc(tmp_path, {"0": rec()})
    os.chmod(tmp_path / "swap_obj.json", 0)
    with pytest.raises(PermissionError, match="not readable"):
        L.load_sugarcrepe(tmp_path, "/imgs", ["swap_obj"])


@pytest.mark.skipif(not (SHARED / "hierarcaps" / "test_imgs").is_dir(), reason="../shared/data not present")
def test_one_truncated_jpeg_costs_only_its_item(tmp_path):
    imgs = sorted((SHARED / "hierarcaps" / "test_imgs").glob("*.jpg"))[:14]
    for p in imgs:
        (tmp_path / p.name).write_bytes(p.read_bytes())
    (tmp_path / imgs[3].name).write_bytes(imgs[3].read_bytes()[:2000])  # truncated
    (tmp_path / imgs[5].name).unlink()  # missing
    items = [
        D.ChoiceItem(tmp_path / p.name, (f"photo {i}", f"drawing {i}"), 0, None, "s", str(i))
        for i, p in enumerate(imgs)
    ]
    with pytest.warns(DataWarning, match="2 of 14 images could not be read"):
        res = evaluate_choice_benchmark(
            WordHashModel(dim=16), items, preprocess=lambda im: torch.zeros(3, 8, 8), prefix="t"
        )
    assert res["t_set_aside"] == 2 and 0 <= res["t/micro"] <= 1


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_geometry_lets_non_finite_points_through_as_nan(bad):
    from hierbench import geometry as G

    torch.manual_seed(0)
    x = G.exp_map0(torch.randn(4, 5, dtype=torch.float64) * 0.5, 1.0)
    y = x.flip(0).clone()
    x_bad = x.clone()
    x_bad[1, 2] = bad
    for name, out in [
        ("dist", G.dist(x_bad, y, 1.0)),
        ("dist0", G.dist0(x_bad, 1.0)),
        ("exterior_angle parent", G.exterior_angle(x_bad, y, 1.0)),
        ("exterior_angle child", G.exterior_angle(y, x_bad, 1.0)),
        ("half_aperture", G.half_aperture(x_bad, 1.0)),
        ("log_map0", G.log_map0(x_bad, 1.0)[:, 0]),
        ("exp_map0", G.exp_map0(x_bad, 1.0)[:, 0]),
        ("pairwise_dist", G.pairwise_dist(x_bad, y, 1.0)[:, 0]),
    ]:
        assert torch.isnan(out[1]), name
        assert torch.isfinite(out[[0, 2, 3]]).all(), name


@pytest.mark.parametrize("c", [0.0, -1.0, float("nan"), float("inf")])
def test_geometry_tensor_curvature_out_of_range_gives_nan(c):
    from hierbench import geometry as G

    x = G.exp_map0(torch.randn(3, 4) * 0.5, 1.0)
    for out in (
        G.dist(x, x.flip(0), torch.tensor(c)),
        G.exterior_angle(x, x.flip(0), torch.tensor(c)),
        G.dist0(x, torch.tensor(c)),
        G.pairwise_dist(x, x, torch.tensor(c)),
    ):
        assert torch.isnan(out).all()
    with pytest.raises(ValueError, match="finite number > 0"):
        G.dist(x, x, c)


def test_resume_with_changed_lr_only_when_allowed_and_recorded(tmp_path):
    from hierbench.recipes.recipe_run import train_recipe
    from hierbench.data.sources import WorldData

    kw = dict(
        data=WorldData(n_train=64, cache_dir=False),
        arch="world-debug",
        steps=6,
        batch_size=16,
        log_every=1,
        ckpt_every=2,
    )
    train_recipe("clip", tmp_path / "r", stop_at=2, **kw)
    (tmp_path / "r" / ".model.safetensors.dead.tmp").write_text("half-written by a killed process")
    with pytest.raises(ValueError, match=r"config differs in lr .*allow_changes=\['lr'\]"):
        train_recipe("clip", tmp_path / "r", resume=True, lr=1e-4, **kw)
    res = train_recipe("clip", tmp_path / "r", resume=True, lr=1e-4, allow_changes=("lr",), **kw)
    cfg = json.loads((tmp_path / "r" / "config.json").read_text())
    assert res.step == 6 and cfg["lr"] == 1e-4 and cfg["history"] == [{"step": 2, "changed": {"lr": [1e-3, 1e-4]}}]
    from hierbench.training.trainer import read_metrics

    lrs = {r["step"]: r["lr"] for r in read_metrics(tmp_path / "r")}
    assert lrs[3] < 1e-4 + 1e-12 and lrs[2] > 1e-4  # the schedule follows the new peak from the resumed step
    assert not list((tmp_path / "r").glob(".*.tmp"))  # swept on resume
    with pytest.raises(ValueError, match="cannot allow changes to"):
        train_recipe("clip", tmp_path / "r", resume=True, allow_changes=("batch_size",), **kw)


def test_compare_folder_is_locked_and_decoder_cache_is_rebuilt(tmp_path):
    from hierbench.ledger.budgets import BUDGETS
    from hierbench.ledger.compare import read_decoder, run_compare
    from hierbench.config import FolderLock

    with FolderLock(tmp_path):
        with pytest.raises(RuntimeError, match=f"in use by PID {os.getpid()}"):
            run_compare("smoke", out=tmp_path, recipes=["clip"], jobs=1, log=lambda m: None)
    (tmp_path / "decoder.safetensors").write_bytes(b"not safetensors")  # a kill mid-write, or damage
    with pytest.warns(UserWarning, match="unreadable"):
        dec = read_decoder(tmp_path, BUDGETS["smoke"])
    from hierbench.models.decoder import CaptionDecoder

    assert isinstance(CaptionDecoder.load(tmp_path / "decoder.safetensors"), CaptionDecoder)
    (tmp_path / "decoder.json").unlink()  # the weights alone are a whole decoder
    assert CaptionDecoder.load(tmp_path / "decoder.safetensors").config == dec.config


@pytest.mark.skipif(not (SHARED / "sugarcrepe_pp").is_dir(), reason="../shared/data not present")
def test_check_command_on_the_real_folders(capsys):
    from hierbench.cli.parser import main

    main(["check", str(SHARED / "sugarcrepe_pp"), "--coco-dir", str(SHARED / "hierarcaps" / "test_imgs")])
    said = capsys.readouterr().out
    assert "swap_obj.json" in said and "['2', '8']" in said
    t = L.check_benchmark_folder(SHARED / "sugarcrepe_pp", coco_dir=SHARED / "hierarcaps" / "test_imgs")
    assert t.records.sum() == 4755 and t.set_aside.sum() == 2 and (t.records - t.missing_images).sum() == 971


def test_absolute_paths_only_when_allowed(tmp_path, monkeypatch):
    _sc(tmp_path / "ann", {"0": rec(filename="/data/coco/val2017/000000000139.jpg")})
    with pytest.raises(DataFormatError, match="HIERBENCH_ALLOW_ABSOLUTE_PATHS"):
        L.load_sugarcrepe(tmp_path / "ann", tmp_path / "imgs", ["swap_obj"])
    monkeypatch.setenv("HIERBENCH_ALLOW_ABSOLUTE_PATHS", "1")
    it = L.load_sugarcrepe(tmp_path / "ann", tmp_path / "imgs", ["swap_obj"])["swap_obj"][0]
    assert it.image_path == Path("/data/coco/val2017/000000000139.jpg")
    _sc(tmp_path / "ann", {"0": rec(filename="../../etc/passwd")})
    with pytest.raises(DataFormatError, match="leaves the image root"):  # relative escapes stay refused
        L.load_sugarcrepe(tmp_path / "ann", tmp_path / "imgs", ["swap_obj"])


from hypothesis import HealthCheck, given, settings, strategies as st

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_records = st.dictionaries(
    st.sampled_from(["filename", "caption", "negative_caption", "caption2", "id", "x"]),
    _json_values | st.text(max_size=20),
    max_size=6,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.one_of(
        _json_values, st.dictionaries(st.text(max_size=4), _records, max_size=4), st.lists(_records, max_size=4)
    )
)
def test_fuzz_sugarcrepe_files_fail_only_clearly(tmp_path_factory, data):
    "Any JSON in a SugarCrepe / SugarCrepe++ file loads, or raises DataFormatError naming the file — nothing else."
    import warnings

    folder = tmp_path_factory.mktemp("fz")
    for loader in (L.load_sugarcrepe, L.load_sugarcrepe_pp):
        (folder / "swap_obj.json").write_text(json.dumps(data))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DataWarning)
            try:
                loader(folder, "/imgs", ["swap_obj"])
            except DataFormatError as err:
                assert "swap_obj.json" in str(err)
