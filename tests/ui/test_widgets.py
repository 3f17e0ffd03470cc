"Tests of hierbench.ui.widgets: pure views (figures, tables) and the thin ipywidgets layers."

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from hierbench.ui import widgets as W
from hierbench.models.family import create_model, save_model
from hierbench.world.scenes import make_scene


@pytest.fixture(scope="module")
def lorentz_model():
    torch.manual_seed(0)
    return create_model("world-debug", geometry="lorentz")


@pytest.fixture(scope="module")
def view(lorentz_model):
    return W.entailment_view(lorentz_model, 1, K=0.1, horopca_steps=20)


def fake_results(seeds=(0, 1, 2)):
    rng = np.random.default_rng(0)
    rows = []
    for recipe, base in (("argent", 0.8), ("hycoclip", 0.7), ("clip", 0.5)):
        for s in seeds:
            rows.append(
                dict(recipe=recipe, seed=s, metric="pep_auc", value=base + 0.02 * rng.standard_normal(), chance=0.5)
            )
            rows.append(dict(recipe=recipe, seed=s, metric="zs_acc/test-iid", value=base - 0.1, chance=0.25))
    rows.append(dict(recipe="argent", seed=0, metric="train_seconds", value=3.0, chance=None))
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- scenes
def test_scene_from_index_matches_world():
    es = W.as_entailment_scene(2, split="train", seed=1)
    sc = make_scene(2, seed=1, split="train")
    assert es.chain == sc.chain
    assert [t for _, t in es.negatives] == [n.text for n in sc.negatives]
    assert len(es.texts) == len(es.roles) == len(es.chain) + len(es.phrases) + len(es.negatives)


def test_scene_from_tuple_and_mapping():
    img = np.zeros((40, 50, 3), np.uint8)
    es = W.as_entailment_scene((img, ["an animal", "a dog"], [("replace_obj", "a cat"), "a horse"]))
    assert es.roles == ["chain 0", "chain 1", "negative: replace_obj", "negative: negative"]
    es2 = W.as_entailment_scene(dict(image=img, chain=["a dog"], phrases=["a dog"]))
    assert es2.texts == ["a dog", "a dog"] and es2.roles == ["chain 0", "phrase"]


@pytest.mark.parametrize(
    "bad, err",
    [
        (("img",), TypeError),
        ((np.zeros((4, 4, 3), np.uint8), []), ValueError),
        ((np.zeros((4, 4, 3), np.uint8), "a dog"), ValueError),
        ((np.zeros((4, 4, 3), np.uint8), ["a"], [3]), ValueError),
        (dict(chain=["a"]), ValueError),
        (2.5, TypeError),
    ],
)
def test_scene_bad_input(bad, err):
    with pytest.raises(err):
        W.as_entailment_scene(bad)


# ---------------------------------------------------------------- entailment view
def test_view_table_columns_and_rows(view):
    fig, tab = view
    es = W.as_entailment_scene(1)
    assert list(tab.columns) == list(W.PAIR_COLUMNS)
    assert len(tab) == len(es.texts) + len(es.chain) - 1
    assert tab.holds.dtype == bool and tab.inside_cone.dtype == bool
    img_rows = tab[tab.child == "image"]
    assert list(img_rows.parent) == es.texts
    assert img_rows.holds.tolist() == [not r.startswith("negative") for r in es.roles]
    assert np.all((tab.phi >= 0) & (tab.phi <= math.pi)) and np.all((tab.omega > 0) & (tab.omega < math.pi / 2))
    np.testing.assert_allclose(tab.pep, np.maximum(0, 1 - 2 * tab.phi / math.pi))
    np.testing.assert_array_equal(tab.inside_cone, tab.phi <= tab.omega)


def test_view_angles_match_geometry(lorentz_model, view):
    "φ in the table is the exterior angle at the caption, image as child, at the model's curvature."
    from hierbench.geometry import exterior_angle, half_aperture

    _, tab = view
    es = W.as_entailment_scene(1)
    img, txt = W.embed_scene(lorentz_model, es)
    c = float(lorentz_model.head.curv.detach())
    phi = exterior_angle(txt, img.expand_as(txt), c).numpy()
    np.testing.assert_allclose(tab[tab.child == "image"].phi, phi, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(tab[tab.child == "image"].omega, half_aperture(txt, c, 0.1).numpy(), rtol=1e-9)


def test_view_figure_traces(view):
    fig, _ = view
    names = [t.name for t in fig.data]
    for group in (
        "image",
        "chain",
        "phrase",
        "negative",
        "chain → image",
        "children",
        "chain 0",
    ):  # "chain 0": the apex of the cone panel
        assert group in names, (group, names)
    # the right panel is the cone diagram on the second axes; the left panel on the first
    assert {t.xaxis for t in fig.data} == {"x", "x2"}
    assert any(t.fill == "toself" and t.xaxis == "x2" for t in fig.data)
    for t in fig.data:
        if t.mode == "markers":  # every plotted point is inside the unit disk
            assert np.all(np.hypot(np.asarray(t.x, float), np.asarray(t.y, float)) < 1)


def test_view_controls_change_outputs(lorentz_model, view):
    _, tab = view
    _, wide = W.entailment_view(lorentz_model, 1, K=0.4, horopca_steps=20)
    np.testing.assert_allclose(wide.phi, tab.phi)  # φ does not depend on K
    assert (wide.omega.to_numpy() >= tab.omega.to_numpy()).all() and (wide.omega > tab.omega).any()
    fig_v, tab_v = W.entailment_view(lorentz_model, 1, c_scale=0.1, apex=2, horopca_steps=20)
    pd.testing.assert_frame_equal(tab_v, tab)  # the display curvature never changes the table
    assert (
        "display c" in fig_v.layout.annotations[1].text
        and W.as_entailment_scene(1).texts[2] in fig_v.layout.annotations[1].text
    )


def test_view_real_image_and_texts(lorentz_model, tmp_path):
    path = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (60, 90, 3), dtype=np.uint8)).save(path)
    fig, tab = W.entailment_view(
        lorentz_model, (path, ["an animal", "a dog", "a brown dog on grass"], ["a cat"]), apex="a dog", horopca_steps=10
    )
    assert len(tab) == 4 + 2 and tab.holds.tolist() == [True, True, True, False, True, True]
    assert "photo.png" in fig.layout.title.text


def test_view_bad_input(lorentz_model):
    with pytest.raises(ValueError, match="Lorentz"):
        W.entailment_view(create_model("world-debug"), 1)
    with pytest.raises(ValueError, match="K"):
        W.entailment_view(lorentz_model, 1, K=0)
    with pytest.raises(ValueError, match="apex"):
        W.entailment_view(lorentz_model, 1, apex="not a caption of this scene")
    with pytest.raises(ValueError, match="c_scale"):
        W.entailment_view(lorentz_model, 1, c_scale=-1)


# ---------------------------------------------------------------- entailment explorer
def test_explorer_builds_and_responds(lorentz_model, tmp_path):
    import ipywidgets

    saved = save_model(create_model("world-debug", geometry="lorentz"), tmp_path / "other.safetensors")
    ex = W.entailment_explorer({"a": lorentz_model, "saved": saved}, scenes=[1, 4], horopca_steps=10)
    assert isinstance(ex, ipywidgets.Widget) and ex.error is None
    fig0, tab0 = ex.figure, ex.table
    pd.testing.assert_frame_equal(tab0, W.entailment_view(lorentz_model, 1, horopca_steps=10)[1])
    ex.controls["K"].value = 0.35
    assert ex.figure is not fig0 and (ex.table.omega.to_numpy() >= tab0.omega.to_numpy()).all()
    assert "K = 0.35" in ex.figure.layout.title.text
    ex.controls["scene"].value = 1
    assert ex.table.parent.iloc[0] == make_scene(4, split="test-iid").chain[0] and ex.controls["apex"].value == 0
    ex.controls["apex"].value = 1
    assert make_scene(4, split="test-iid").chain[1] in ex.figure.layout.annotations[1].text
    ex.controls["model"].value = "saved"  # loaded from disk on first use
    assert ex.error is None and not np.allclose(
        ex.table.phi, W.entailment_view(lorentz_model, 4, horopca_steps=10)[1].phi
    )


def test_explorer_reports_euclidean_model(lorentz_model):
    ex = W.entailment_explorer(
        {"hyp": lorentz_model, "clip": create_model("world-debug")}, scenes=[0], horopca_steps=10
    )
    ex.controls["model"].value = "clip"
    assert ex.error is not None and "Lorentz" in ex.error
    ex.controls["model"].value = "hyp"
    assert ex.error is None


# ---------------------------------------------------------------- run browser
def test_load_results_sources(tmp_path):
    df = fake_results()
    rows = json.loads(df.to_json(orient="records"))
    (tmp_path / "results.json").write_text(json.dumps(dict(meta={}, rows=rows)))
    for src in (df, rows, dict(meta={}, rows=rows), dict(results=df), tmp_path, tmp_path / "results.json"):
        out = W.load_results(src)
        assert len(out) == len(df) and {"recipe", "seed", "metric", "value", "chance"} <= set(out.columns)
    with pytest.raises(FileNotFoundError):
        W.load_results(tmp_path / "nope")
    with pytest.raises(ValueError, match="value"):
        W.load_results(df.drop(columns="value"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="bad.json"):
        W.load_results(tmp_path / "bad.json")


def test_run_browser_view_figure_and_table():
    df = fake_results()
    fig, tab = W.run_browser_view(df, "pep_auc")
    assert [type(t).__name__ for t in fig.data] == ["Bar", "Scatter"]
    assert list(fig.data[0].x) == ["argent", "hycoclip", "clip"] and len(fig.data[1].x) == 9
    assert list(tab.columns) == ["recipe", "n", "mean", "std", "low", "high", "half_width", "chance", "seeds"]
    sel = df[(df.metric == "pep_auc") & (df.recipe == "hycoclip")].value
    row = tab.set_index("recipe").loc["hycoclip"]
    assert row.n == 3 and math.isclose(row["mean"], sel.mean()) and math.isclose(row["std"], sel.std(ddof=1))
    assert row.low < row["mean"] < row.high and row.chance == 0.5 and row.seeds == "0,1,2"
    assert any(getattr(s, "y0", None) == 0.5 for s in fig.layout.shapes)  # the chance line


def test_run_browser_view_selection():
    df = fake_results()
    _, tab = W.run_browser_view(df, "pep_auc", recipes=["clip", "argent"], seeds=[1, 2])
    assert tab.recipe.tolist() == ["clip", "argent"] and tab.n.tolist() == [2, 2]
    _, one = W.run_browser_view(df, "train_seconds")
    assert one.n.tolist() == [1] and one.half_width.tolist() == [0.0] and np.isnan(one.chance.iloc[0])
    for kw, msg in (
        (dict(metric="nope"), "not in results"),
        (dict(metric="pep_auc", seeds=[7]), "seeds"),
        (dict(metric="pep_auc", recipes=[]), "recipes"),
        (dict(metric="pep_auc", recipes=["meru"]), "meru"),
    ):
        with pytest.raises(ValueError, match=msg):
            W.run_browser_view(df, **kw)


def test_run_browser_builds_and_responds(tmp_path):
    import ipywidgets

    df = fake_results()
    (tmp_path / "results.json").write_text(json.dumps(dict(meta={}, rows=json.loads(df.to_json(orient="records")))))
    rb = W.run_browser(tmp_path)
    assert (
        isinstance(rb, ipywidgets.Widget) and rb.controls["metric"].value == "zs_acc/test-iid"
    )  # first KEY_METRIC present
    assert rb.table.recipe.tolist() == ["argent", "hycoclip", "clip"]
    rb.controls["metric"].value = "pep_auc"
    assert rb.figure.layout.yaxis.title.text == "pep_auc"
    rb.controls["recipes"].value = ("clip",)
    rb.controls["seeds"].value = (0,)
    assert rb.table.recipe.tolist() == ["clip"] and rb.table.n.tolist() == [1]
    rb.controls["metric"].value = "train_seconds"  # only argent has it: the browser skips the others
    assert rb.error is not None and "recipes" in rb.error
    rb.controls["recipes"].value = ("argent", "clip")
    assert rb.error is None and rb.table.recipe.tolist() == ["argent"]
    with pytest.raises(ValueError, match="metric"):
        W.run_browser(df, metric="nope")
