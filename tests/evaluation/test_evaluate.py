"Dense checks of hierbench.evaluation.world_eval: the built-in world's protocols and probes on tiny and oracle models."

import math

import numpy as np
import pytest
import torch

from hierbench.evaluation import encoding as EN, world_eval as ev, metrics as M
from eval_models import TableModel


class OracleWorldModel(TableModel):
    "Knows each world image's top caption and each crop's shape: encode_image looks the pixels up."

    def __init__(self, data, dim=64):
        super().__init__(dim=dim)
        self.by_pixels = {}
        for im, ch in zip(data.images, data.chains):
            self.by_pixels[im.tobytes()] = ch[-1]
        from hierbench.world import scenes as world

        for im, lab in zip(data.class_images, data.class_labels):
            self.by_pixels.setdefault(im.tobytes(), world.render_np(world.NP(lab)))

    def encode_image(self, x):
        # undo the normalisation done by the protocol (CLIP mean/std) to recover the uint8 pixels
        from hierbench.data.batch import CLIP_MEAN, CLIP_STD

        px = (x * torch.tensor(CLIP_STD).view(1, 3, 1, 1) + torch.tensor(CLIP_MEAN).view(1, 3, 1, 1)) * 255
        px = px.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
        return self.encode_text([self.by_pixels[p.tobytes()] for p in px])


@pytest.fixture(scope="module")
def iid_data():
    return ev.world_eval_data("test-iid", 40, seed=0, pep_pool=30, cache_dir=False)


def test_world_split_chance_model_in_range(iid_data):
    m = EN.WordHashModel(dim=32)
    r = ev.evaluate_world_split(m, iid_data)
    for k, v in r.items():
        assert np.isfinite(v), k
        if "acc" in k or "_R@" in k or k.startswith(("pep", "zs_jaccard", "zs_h_")):
            if not k.endswith("swap_minus_replace"):
                assert 0 <= v <= 1, (k, v)
    assert r["zs_acc_chance/test-iid"] == pytest.approx(1 / 9)
    assert r["comp_acc_chance"] == 0.5 and r["itt_acc_chance"] == pytest.approx(1 / 3)
    n_pos = 4 * len(iid_data.chains)
    n_neg = sum(len(p) for p in iid_data.pool_negatives)
    assert r["pep_ap_chance"] == pytest.approx(n_pos / (n_pos + n_neg))
    # a bag of words cannot tell a swap from its caption: identical embeddings tie, and ties count as wrong
    assert r["tot_acc/swap_att"] == 0.0 and r["tot_acc/swap_obj"] == 0.0
    assert r["d_corr"] == 0.0  # every text has norm 1: radii from the empty-string root (the origin) are equal
    assert "aperture_saturated" not in r


def test_zero_shot_images_are_each_object_alone_at_its_own_box(iid_data):
    "Multi-object splits classify every object drawn alone at its own place and scale, aligned with the crops' labels."
    from hierbench.world import scenes as world

    ws = world.build_split("test-iid", 40, seed=0, cache_dir=False)
    assert len(iid_data.class_images) == len(iid_data.class_labels) == len(ws.crops)
    assert iid_data.class_labels == [o.shape for i in range(len(ws)) for o in ws.objects(i)]
    np.testing.assert_array_equal(ev.isolated_object_images(ws, 0), iid_data.class_images)  # deterministic
    assert not np.array_equal(ev.isolated_object_images(ws, 1), iid_data.class_images)  # seeded backgrounds
    row = 0
    for i in range(len(ws)):
        objs = ws.objects(i)
        for k, o in enumerate(objs):
            img = iid_data.class_images[row].astype(float)
            row += 1
            x0, y0, x1, y1 = o.box
            inside = img[y0:y1, x0:x1].reshape(-1, 3)
            # the object's colour covers part of its own box ...
            near = np.abs(inside - np.asarray(world.COLOUR_RGB[o.colour], float)).max(axis=1) < 40
            assert near.mean() > 0.2, (i, k)
            # ... and no other object is drawn: outside this box the image is smooth background (noise std 4)
            mask = np.ones(img.shape[:2], bool)
            mask[y0:y1, x0:x1] = False
            for other in objs[:k] + objs[k + 1 :]:
                ox0, oy0, ox1, oy1 = other.box
                patch = img[oy0:oy1, ox0:ox1]
                assert patch.std(axis=(0, 1)).max() < 15, (i, k)


def test_pep_pool_takes_the_captions_true_of_the_fewest_images():
    "ARGENT's pool: lowest degree first. In `general` scenes top captions repeat, so degrees differ."
    from hierbench.world import scenes as world

    data = ev.world_eval_data("general", 120, seed=0, pep_pool=15, cache_dir=False)
    ws = world.build_split("general", 120, seed=0, cache_dir=False)
    tops = list(dict.fromkeys(c[-1] for c in ws.chains))
    degree = {t: sum(world.holds(ws.scene(i), t, margin=0.0) for i in range(len(ws))) for t in tops}
    pool = {t for negs in data.pool_negatives for t in negs}
    assert len(pool) == 15  # each pool caption is false for some scene, so each shows up
    left_out = [degree[t] for t in tops if t not in pool]
    assert max(degree[t] for t in pool) <= min(left_out)
    assert len(set(degree.values())) > 1  # the choice mattered


def test_world_pool_negatives_are_false(iid_data):
    from hierbench.world import scenes as world

    ws = world.build_split("test-iid", 40, seed=0, cache_dir=False)
    for i in range(0, 40, 7):
        assert iid_data.pool_negatives[i], "pool should have false captions for every scene"
        # verified false even under the lenient reading (margin 0), the world's standard for negatives
        assert not any(world.holds(ws.scene(i), t, margin=0.0) for t in iid_data.pool_negatives[i])
    assert all(world.holds(ws.scene(i), t) for i in range(5) for t in iid_data.chains[i])


def test_world_oracle_model_is_perfect_where_it_should_be(iid_data):
    m = OracleWorldModel(iid_data)
    r = ev.evaluate_world_split(m, iid_data)
    assert r["i2t_R@1"] == 1.0 and r["t2i_R@1"] == 1.0  # index alignment of images, texts and duplicates
    assert r["comp_acc"] == 1.0 and r["comp_acc/micro"] == 1.0
    assert r["zs_acc/test-iid"] == 1.0 and r["zs_tie/test-iid"] == 0.0 and r["zs_lca/test-iid"] == 1.0
    assert r["pep_auc"] > 0.6  # the top caption scores 1 (φ = 0); the rest is noise around φ = π/2


def test_world_lorentz_geometry_metrics(iid_data):
    small = EN.WordHashModel(dim=32, geometry="lorentz", scale=0.1)  # norm 0.1 < 2K/sqrt(c) = 0.2: saturated
    r = ev.evaluate_world_split(small, iid_data)
    assert r["aperture_saturated"] == 1.0 and r["parent_norm"] == pytest.approx(0.1, rel=1e-5)
    big = EN.WordHashModel(dim=32, geometry="lorentz", scale=2.0)
    r = ev.evaluate_world_split(big, iid_data)
    assert r["aperture_saturated"] == 0.0
    assert r["radius/text_l1"] == pytest.approx(math.asinh(2.0), rel=1e-5)


def test_evaluate_world_all_splits_small():
    r = ev.evaluate_world(EN.WordHashModel(dim=16), n_test=12, cache_dir=False, pep_pool=10)
    for k in (
        "zs_acc/test-iid",
        "zs_acc/test-comp",
        "zs_acc/general",
        "i2t_R@5",
        "i2t_R@5/test-comp",
        "comp_acc",
        "comp_acc/test-comp",
        "pep_auc",
        "pep_ap",
        "d_corr",
        "tot_acc",
        "itt_acc",
    ):
        assert k in r, k
        assert M.chance_key(k) in r, M.chance_key(k)
    t = M.results_table(r)
    assert not t.metric.str.contains("_chance").any()


@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_real_dual_encoder_contract(geometry):
    """The protocols run on hierbench.models.family' DualEncoder (untrained: numbers at chance, but every code path
    exercised)."""
    from hierbench.models.family import create_model

    torch.manual_seed(0)
    m = create_model("world-tiny", geometry=geometry)
    r = ev.evaluate_world(m, n_test=8, cache_dir=False, pep_pool=8, batch_size=16)
    assert all(np.isfinite(v) for v in r.values())
    assert ("aperture_saturated" in r) == (geometry == "lorentz")
    assert m.training  # create_model returns a training-mode model; evaluation must leave it that way


class _PixelModel(torch.nn.Module):
    """A stand-in image encoder over each pixel's distance from the image's median colour: `profile` keeps its mean per
    column and per row (where the object is), else its mean and spread over the whole image (how big, not where)."""

    def __init__(self, profile: bool):
        super().__init__()
        self.profile = profile

    def encode_image(self, x):
        d = (x - x.flatten(2).median(-1).values[..., None, None]).abs().sum(1)
        if self.profile:
            return torch.cat([d.mean(1), d.mean(2)], 1)
        return torch.stack([d.mean(dim=(1, 2)), d.std(dim=(1, 2)), x.mean(dim=(1, 2, 3))], 1)


def test_position_readout_tells_a_position_aware_embedding_from_a_blind_one():
    aware = ev.position_readout(_PixelModel(True), n=600, cache_dir=False)
    blind = ev.position_readout(_PixelModel(False), n=600, cache_dir=False)
    for r in (aware, blind):
        assert r["n_fit_left_right"] > 100 and r["n_scored_left_right"] > 100 and 0.5 <= r["chance_left_right"] < 0.62
    assert aware["left_right"] > 0.9 and aware["above_below"] > 0.9
    assert blind["left_right"] < 0.65 and blind["above_below"] < 0.65
