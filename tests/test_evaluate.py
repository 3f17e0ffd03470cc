"Dense checks of hierbench.evaluate: metric values on hand-computed cases, chance levels, bad inputs, protocol runners on a tiny model."
import hashlib
import math

import numpy as np
import pytest
import torch
from scipy.stats import kendalltau
from sklearn.metrics import average_precision_score, roc_auc_score

from hierbench import evaluate as ev


# ---------------------------------------------------------------- recall@K
def test_recall_single_correct_hand_computed():
    sim = np.array([[0.1, 0.9, 0.2], [0.3, 0.2, 0.1], [0.5, 0.6, 0.7]])
    # ranks of the correct candidate: query0 → 0 (0.9 best), query1 → 2 (0.3,0.2 above 0.1), query2 → 2
    assert ev.rank_of_best_correct(sim, [1, 2, 0]).tolist() == [0, 2, 2]
    assert ev.recall_at_k(sim, [1, 2, 0], ks=(1, 2, 3)) == {1: 1 / 3, 2: 1 / 3, 3: 1.0}


def test_recall_ties_count_against_the_query():
    sim = np.array([[0.5, 0.5, 0.5]])
    assert ev.recall_at_k(sim, [0], ks=(1, 2, 3)) == {1: 0.0, 2: 0.0, 3: 1.0}
    assert ev.recall_at_k(sim, [2], ks=(1, 3)) == {1: 0.0, 3: 1.0}  # position does not matter


def test_recall_several_correct_uses_best_and_ignores_other_correct():
    sim = np.array([[0.9, 0.8, 0.7, 0.1]])
    # correct = {1, 3}: best correct 0.8, one wrong candidate above it; the other correct one is not "wrong"
    assert ev.rank_of_best_correct(sim, [[1, 3]]).tolist() == [1]
    mask = np.array([[False, True, False, True]])
    assert ev.rank_of_best_correct(sim, mask).tolist() == [1]
    assert ev.rank_of_best_correct(torch.tensor(sim), [{1, 3}]).tolist() == [1]


def test_recall_matches_brute_force_random():
    rng = np.random.default_rng(0)
    sim = rng.normal(size=(20, 30))
    gt = rng.integers(0, 30, 20)
    r = ev.recall_at_k(sim, gt, ks=(1, 5, 10))
    for k in (1, 5, 10):
        topk = np.argsort(-sim, 1)[:, :k]  # no ties in continuous random scores
        assert r[k] == pytest.approx(np.mean([g in t for g, t in zip(gt, topk)]))


def test_recall_bad_inputs():
    with pytest.raises(ValueError, match="non-finite"): ev.recall_at_k(np.array([[np.nan, 1.0]]), [0])
    with pytest.raises(ValueError, match="out of range"): ev.recall_at_k(np.zeros((1, 2)), [5])
    with pytest.raises(ValueError, match="no correct"): ev.recall_at_k(np.zeros((1, 2)), [[]])
    with pytest.raises(ValueError, match="queries"): ev.recall_at_k(np.zeros((2, 2)), [0])


def test_retrieval_recalls_both_directions_and_chance():
    # 2 images, 4 texts (two each); image 0's best text is image 1's
    sim = np.array([[0.1, 0.5, 0.9, 0.0], [0.0, 0.1, 0.8, 0.9]])
    r = ev.retrieval_recalls(sim, [0, 0, 1, 1], ks=(1, 2))
    assert r["i2t_R@1"] == 0.5 and r["i2t_R@2"] == 1.0
    # t2i: text0 best img0 (0.1 > 0.0) ok; text1 ok; text2 → img0 wrong; text3 → img1 ok
    assert r["t2i_R@1"] == 0.75
    assert r["t2i_R@1_chance"] == 0.5
    assert r["i2t_R@1_chance"] == pytest.approx(0.5)          # 2 of 4 correct
    assert r["i2t_R@2_chance"] == pytest.approx(1 - 1 / 6)    # 1 - C(2,2)/C(4,2)


def test_chance_recall_formula_against_simulation():
    rng = np.random.default_rng(1)
    n, k, m = 12, 3, 2
    hits = [bool(set(rng.permutation(n)[:k]) & {0, 1}) for _ in range(20000)]
    assert ev.chance_recall_at_k(n, k, m) == pytest.approx(np.mean(hits), abs=0.01)
    assert ev.chance_recall_at_k(1000, 10) == pytest.approx(0.01)
    with pytest.raises(ValueError): ev.chance_recall_at_k(3, 1, n_correct=4)


# ---------------------------------------------------------------- choice, ITT, TOT
def test_choice_accuracy_strict_ties_wrong():
    scores = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.1], [0.2, 0.9, 0.9], [0.1, 0.2, 0.3]])
    assert ev.choice_correct(scores, [0, 0, 1, 2]).tolist() == [True, False, False, True]
    assert ev.choice_accuracy(scores, [0, 0, 1, 2]) == 0.5
    # a constant model is always wrong, not at chance
    assert ev.choice_accuracy(np.ones((5, 4)), [0] * 5) == 0.0


def test_choice_bad_inputs():
    with pytest.raises(ValueError, match="out of range"): ev.choice_correct(np.zeros((1, 2)), [2])
    with pytest.raises(ValueError, match="entries"): ev.choice_correct(np.zeros((2, 2)), [0])
    with pytest.raises(ValueError, match="2 options"): ev.choice_correct(np.zeros((2, 1)), [0, 0])


def test_itt_tot_truth_tables():
    # enumerate all orderings of three scores with ties on a small grid
    vals = [0.0, 0.5, 1.0]
    for a in vals:
        for b in vals:
            for n in vals:
                assert ev.itt_correct([a], [b], [n])[0] == (a > n and b > n)
                assert ev.tot_correct([a], [b], [n])[0] == (a > b and a > n)


def test_itt_tot_from_embeddings_and_chance():
    rng = np.random.default_rng(0)
    rowwise = lambda a, b: (a * b).sum(-1)
    e = [torch.tensor(rng.normal(size=(30000, 8))) for _ in range(4)]
    out = ev.itt_tot(*e, rowwise_sim=rowwise)
    assert out["itt"].mean() == pytest.approx(ev.CHANCE_ITT_TOT, abs=0.02)
    assert out["tot"].mean() == pytest.approx(ev.CHANCE_ITT_TOT, abs=0.02)
    # paraphrase = the caption itself, negative orthogonal → always correct
    p = torch.eye(4)[:2]; n = torch.eye(4)[2:]
    out = ev.itt_tot(p, p, p, n, rowwise_sim=rowwise)
    assert out["itt"].all() and out["tot"].all()


def test_aggregate_micro_macro_and_groups():
    agg = ev.aggregate_accuracy({"a": [1, 0, 0, 0], "b": [1, 1]}, prefix="comp_acc")
    assert agg == {"comp_acc/a": 0.25, "comp_acc/b": 1.0, "comp_acc/micro": 0.5, "comp_acc/macro": 0.625}
    g = ev.group_means({"swap_obj": 0.5, "swap_att": 0.7, "add_obj": 0.9}, ev.SUGARCREPE_GROUPS)
    assert g == {"swap": pytest.approx(0.6), "add": 0.9}
    with pytest.raises(ValueError, match="empty"): ev.aggregate_accuracy({"a": []})


# ---------------------------------------------------------------- hierarchical classification
TOY = {"round": "shape", "angular": "shape", "circle": "round", "oval": "round", "square": "angular",
       "rectangle": "angular", "triangle": "angular"}


class ToyTaxonomy:
    "A taxonomy object with .ancestors(node) that excludes the node and includes the root."
    def ancestors(self, node):
        out = []
        while node in TOY: node = TOY[node]; out.append(node)
        return out


@pytest.mark.parametrize("tax", [TOY, ToyTaxonomy()])
def test_hierarchical_metrics_hand_computed(tax):
    # root excluded: A(circle)={circle,round}, A(oval)={oval,round}, A(square)={square,angular}
    s = ev.hierarchical_scores(["circle", "oval", "square"], ["circle", "circle", "circle"], tax)
    assert s.tie.tolist() == [0, 2, 4]
    assert s.lca.tolist() == [1, 2, 3]
    assert s.jaccard.tolist() == pytest.approx([1, 1 / 3, 0])
    assert s.h_precision.tolist() == pytest.approx([1, 0.5, 0])
    assert s.h_recall.tolist() == pytest.approx([1, 0.5, 0])
    m = ev.hierarchical_metrics(["circle", "oval", "square"], ["circle"] * 3, tax)
    assert m["tie"] == 2 and m["lca"] == 2 and m["jaccard"] == pytest.approx(4 / 9)


def test_hierarchical_metrics_root_option_and_internal_nodes():
    with_root = ev.hierarchical_scores(["square"], ["circle"], TOY, include_root=True)
    assert with_root.tie.tolist() == [4] and with_root.lca.tolist() == [3]   # unchanged by the root
    assert with_root.jaccard.tolist() == pytest.approx([1 / 5])               # the shared root gives credit
    # predicting an internal node (super-category) of the truth: precision 1, recall 1/2
    s = ev.hierarchical_scores(["round"], ["circle"], TOY)
    assert s.tie.tolist() == [1] and s.h_precision.tolist() == [1.0] and s.h_recall.tolist() == [0.5]


def test_tie_equals_tree_distance_by_bfs():
    import itertools
    adj = {}
    for c, p in TOY.items(): adj.setdefault(c, set()).add(p); adj.setdefault(p, set()).add(c)
    def bfs(a, b):
        frontier, seen, d = {a}, {a}, 0
        while b not in frontier:
            frontier = {n for f in frontier for n in adj[f]} - seen; seen |= frontier; d += 1
        return d
    nodes = list(adj)
    pairs = list(itertools.product(nodes, nodes))
    s = ev.hierarchical_scores([p for p, _ in pairs], [t for _, t in pairs], TOY)
    assert s.tie.tolist() == [bfs(p, t) for p, t in pairs]


def test_chance_hierarchical_metrics():
    leaves = ["circle", "oval", "square", "rectangle", "triangle"]
    ch = ev.chance_hierarchical_metrics(["circle"], leaves, TOY)
    # distances from circle: 0, 2, 4, 4, 4
    assert ch["tie"] == pytest.approx(14 / 5)


def test_taxonomy_errors():
    with pytest.raises(ValueError, match="cycle"): ev.ancestor_set({"a": "b", "b": "a"}, "a")
    with pytest.raises(TypeError, match="taxonomy"): ev.ancestor_set(42, "a")
    with pytest.raises(ValueError, match="items"): ev.hierarchical_metrics(["a"], [], TOY)


# ---------------------------------------------------------------- PEP, d_corr
def test_pep_reference_toy_and_sklearn():
    r = ev.pep_auc_ap([0.9, 0.6], [0.7, 0.1])
    assert r["auc"] == pytest.approx(0.75) and r["ap"] == pytest.approx(0.833333, abs=1e-6)
    assert r["auc_chance"] == 0.5 and r["ap_chance"] == 0.5
    rng = np.random.default_rng(0)
    pos, neg = rng.random(50), rng.random(150)
    r = ev.pep_auc_ap(pos, neg)
    y = np.r_[np.ones(50), np.zeros(150)]
    assert r["auc"] == roc_auc_score(y, np.r_[pos, neg]) and r["ap"] == average_precision_score(y, np.r_[pos, neg])
    assert r["ap_chance"] == 0.25
    with pytest.raises(ValueError, match="positives and negatives"): ev.pep_auc_ap([], [0.1])


def test_pep_score_values():
    phi = np.array([0.0, math.pi / 4, math.pi / 2, 3.0])
    assert np.allclose(ev.pep_score(phi), [1.0, 0.5, 0.0, 0.0])
    assert torch.allclose(ev.pep_score(torch.tensor(phi)), torch.tensor([1.0, 0.5, 0.0, 0.0], dtype=torch.float64))


def test_d_corr_kendall():
    radii = np.array([[1, 2, 3, 4], [4, 3, 2, 1], [2, 1, 3, 4], [1, 1, 1, 1]], dtype=float)
    taus = ev.kendall_per_chain(radii)
    assert taus[:3].tolist() == pytest.approx([1, -1, kendalltau([1, 2, 3, 4], [2, 1, 3, 4]).statistic])
    assert taus[3] == 0.0  # constant radii: no ordering
    assert ev.d_corr(radii) == pytest.approx((1 - 1 + 2 / 3 + 0) / 4)
    with pytest.raises(ValueError, match="2 levels"): ev.d_corr(np.ones((3, 1)))


# ---------------------------------------------------------------- HierarCaps retrieval
def test_hierarcaps_sweep_matches_brute_force():
    rng = np.random.default_rng(0)
    sim, r = rng.random((7, 40)), rng.random(40) * 3
    preds = ev.hierarcaps_sweep(sim, r, n_thresholds=50)
    for t_i, t in enumerate(np.linspace(r.min(), r.max(), 50)):
        allowed = np.flatnonzero(r <= t)
        assert (preds[:, t_i] == allowed[np.argmax(sim[:, allowed], 1)]).all()


def test_hierarcaps_precision_recall_hand():
    # image 0 chain [0,1,2,3]; radii grow along it; an off-chain text 4 wins only the largest threshold
    sim = np.array([[0.1, 0.2, 0.3, 0.4, 0.5]])
    r = np.array([1.0, 2.0, 3.0, 4.0, 4.0])
    out = ev.hierarcaps_retrieval(sim, r, [[0, 1, 2, 3]], n_thresholds=4)
    # thresholds 1,2,3,4 → preds 0,1,2,4 → precision 3/4, recall 3/4
    assert out["precision"] == pytest.approx(0.75) and out["recall"] == pytest.approx(0.75)
    assert 0 <= out["precision_chance"] <= 1 and 0 <= out["recall_chance"] <= 1


# ---------------------------------------------------------------- protocol runners on tiny models
from pathlib import Path

from hierbench.evaluate import _WordHashHead

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


class TableModel(torch.nn.Module):
    "Texts → fixed vectors from a table (unknown texts: a seeded random vector of the whole string); images are pre-embedded (N, D)."
    def __init__(self, table=None, dim=16, geometry="euclidean"):
        super().__init__()
        self.table, self.dim, self.head = dict(table or {}), dim, _WordHashHead(geometry, 1.0)
        self.image_calls = 0
    def vec(self, t):
        if t not in self.table:
            g = torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little"))
            self.table[t] = torch.nn.functional.normalize(torch.randn(self.dim, generator=g), dim=0)
        return self.table[t]
    def encode_text(self, texts): return torch.stack([self.vec(t) for t in texts])
    def encode_image(self, x):
        self.image_calls += len(x)
        return x.flatten(1).float()


class OracleWorldModel(TableModel):
    "Knows each world image's top caption and each crop's shape: encode_image looks the pixels up."
    def __init__(self, data, dim=64):
        super().__init__(dim=dim)
        self.by_pixels = {}
        for im, ch in zip(data.images, data.chains): self.by_pixels[im.tobytes()] = ch[-1]
        from hierbench import world
        for im, lab in zip(data.class_images, data.class_labels):
            self.by_pixels.setdefault(im.tobytes(), world.render_np(world.NP(lab)))
    def encode_image(self, x):
        # undo the normalisation done by the protocol (CLIP mean/std) to recover the uint8 pixels
        from hierbench.data import CLIP_MEAN, CLIP_STD
        px = (x * torch.tensor(CLIP_STD).view(1, 3, 1, 1) + torch.tensor(CLIP_MEAN).view(1, 3, 1, 1)) * 255
        px = px.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
        return self.encode_text([self.by_pixels[p.tobytes()] for p in px])


@pytest.fixture(scope="module")
def iid_data():
    return ev.world_eval_data("test-iid", 40, seed=0, pep_pool=30, cache_dir=False)


def test_world_split_chance_model_in_range(iid_data):
    m = ev.WordHashModel(dim=32)
    r = ev.evaluate_world_split(m, iid_data)
    for k, v in r.items():
        assert np.isfinite(v), k
        if "acc" in k or "_R@" in k or k.startswith(("pep", "zs_jaccard", "zs_h_")):
            if not k.endswith("swap_minus_replace"): assert 0 <= v <= 1, (k, v)
    assert r["zs_acc_chance/test-iid"] == pytest.approx(1 / 9)
    assert r["comp_acc_chance"] == 0.5 and r["itt_acc_chance"] == pytest.approx(1 / 3)
    n_pos = 4 * len(iid_data.chains)
    n_neg = sum(len(p) for p in iid_data.pool_negatives)
    assert r["pep_ap_chance"] == pytest.approx(n_pos / (n_pos + n_neg))
    # a bag of words cannot tell a swap from its caption: identical embeddings tie, and ties count as wrong
    assert r["tot_acc/swap_att"] == 0.0 and r["tot_acc/swap_obj"] == 0.0
    assert r["d_corr"] == 0.0   # every text has norm 1: radii from the empty-string root (the origin) are equal
    assert "aperture_saturated" not in r


def test_zero_shot_images_are_each_object_alone_at_its_own_box(iid_data):
    "Multi-object splits classify every object drawn alone at its own place and scale, aligned with the crops' labels."
    from hierbench import world
    ws = world.build_split("test-iid", 40, seed=0, cache_dir=False)
    assert len(iid_data.class_images) == len(iid_data.class_labels) == len(ws.crops)
    assert iid_data.class_labels == [o.shape for i in range(len(ws)) for o in ws.objects(i)]
    np.testing.assert_array_equal(ev.isolated_object_images(ws, 0), iid_data.class_images)  # deterministic
    assert not np.array_equal(ev.isolated_object_images(ws, 1), iid_data.class_images)      # seeded backgrounds
    row = 0
    for i in range(len(ws)):
        objs = ws.objects(i)
        for k, o in enumerate(objs):
            img = iid_data.class_images[row].astype(float); row += 1
            x0, y0, x1, y1 = o.box
            inside = img[y0:y1, x0:x1].reshape(-1, 3)
            # the object's colour covers part of its own box ...
            near = np.abs(inside - np.asarray(world.COLOUR_RGB[o.colour], float)).max(axis=1) < 40
            assert near.mean() > 0.2, (i, k)
            # ... and no other object is drawn: outside this box the image is smooth background (noise std 4)
            mask = np.ones(img.shape[:2], bool); mask[y0:y1, x0:x1] = False
            for other in objs[:k] + objs[k + 1:]:
                ox0, oy0, ox1, oy1 = other.box
                patch = img[oy0:oy1, ox0:ox1]
                assert patch.std(axis=(0, 1)).max() < 15, (i, k)


def test_pep_pool_takes_the_captions_true_of_the_fewest_images():
    "ARGENT's pool: lowest degree first. In `general` scenes top captions repeat, so degrees differ."
    from hierbench import world
    data = ev.world_eval_data("general", 120, seed=0, pep_pool=15, cache_dir=False)
    ws = world.build_split("general", 120, seed=0, cache_dir=False)
    tops = list(dict.fromkeys(c[-1] for c in ws.chains))
    degree = {t: sum(world.holds(ws.scene(i), t, margin=0.0) for i in range(len(ws))) for t in tops}
    pool = {t for negs in data.pool_negatives for t in negs}
    assert len(pool) == 15  # each pool caption is false for some scene, so each shows up
    left_out = [degree[t] for t in tops if t not in pool]
    assert max(degree[t] for t in pool) <= min(left_out)
    assert len(set(degree.values())) > 1   # the choice mattered


def test_world_pool_negatives_are_false(iid_data):
    from hierbench import world
    ws = world.build_split("test-iid", 40, seed=0, cache_dir=False)
    for i in range(0, 40, 7):
        assert iid_data.pool_negatives[i], "pool should have false captions for every scene"
        # verified false even under the lenient reading (margin 0), the world's standard for negatives
        assert not any(world.holds(ws.scene(i), t, margin=0.0) for t in iid_data.pool_negatives[i])
    assert all(world.holds(ws.scene(i), t) for i in range(5) for t in iid_data.chains[i])


def test_world_oracle_model_is_perfect_where_it_should_be(iid_data):
    m = OracleWorldModel(iid_data)
    r = ev.evaluate_world_split(m, iid_data)
    assert r["i2t_R@1"] == 1.0 and r["t2i_R@1"] == 1.0      # index alignment of images, texts and duplicates
    assert r["comp_acc"] == 1.0 and r["comp_acc/micro"] == 1.0
    assert r["zs_acc/test-iid"] == 1.0 and r["zs_tie/test-iid"] == 0.0 and r["zs_lca/test-iid"] == 1.0
    assert r["pep_auc"] > 0.6        # the top caption scores 1 (φ = 0); the rest is noise around φ = π/2


def test_world_lorentz_geometry_metrics(iid_data):
    small = ev.WordHashModel(dim=32, geometry="lorentz", scale=0.1)   # norm 0.1 < 2K/sqrt(c) = 0.2: saturated
    r = ev.evaluate_world_split(small, iid_data)
    assert r["aperture_saturated"] == 1.0 and r["parent_norm"] == pytest.approx(0.1, rel=1e-5)
    big = ev.WordHashModel(dim=32, geometry="lorentz", scale=2.0)
    r = ev.evaluate_world_split(big, iid_data)
    assert r["aperture_saturated"] == 0.0
    assert r["radius/text_l1"] == pytest.approx(math.asinh(2.0), rel=1e-5)


def test_evaluate_world_all_splits_small():
    r = ev.evaluate_world(ev.WordHashModel(dim=16), n_test=12, cache_dir=False, pep_pool=10)
    for k in ("zs_acc/test-iid", "zs_acc/test-comp", "zs_acc/general", "i2t_R@5", "i2t_R@5/test-comp",
              "comp_acc", "comp_acc/test-comp", "pep_auc", "pep_ap", "d_corr", "tot_acc", "itt_acc"):
        assert k in r, k
        assert ev.chance_key(k) in r, ev.chance_key(k)
    t = ev.results_table(r)
    assert not t.metric.str.contains("_chance").any()


def lorentz_chain_table():
    "Two chains along e1 and e2 with norms growing by level; images further out along their chain."
    e = torch.eye(4)
    table, chains, images = {}, [], []
    for j in range(2):
        ch = [f"chain{j} level{l}" for l in range(4)]
        for l, t in enumerate(ch): table[t] = e[j] * (0.5 + 0.5 * l)
        chains.append(ch); images.append(e[j] * 3.0)
    return table, chains, torch.stack(images)


def test_hierarcaps_protocol_perfect_hyperbolic_hierarchy():
    table, chains, images = lorentz_chain_table()
    m = TableModel(table, dim=4, geometry="lorentz")
    r = ev.evaluate_hierarcaps(m, chains, images, n_thresholds=50)
    assert r["hc_precision"] == 1.0 and r["hc_recall"] == 1.0
    assert r["d_corr"] == 1.0
    assert r["pep_unverified_auc"] == 1.0     # own chain: φ = 0; the other chain is orthogonal: φ ≥ π/2
    r = ev.evaluate_hierarcaps(m, chains, images, negatives=[[chains[1][3]], [chains[0][3]]])
    assert r["pep_auc"] == 1.0 and "pep_unverified_auc" not in r
    # reversed norms: the radius now decreases along the chain
    rev = {t: v / (0.5 + 0.5 * int(t[-1])) * (2.0 - 0.5 * int(t[-1])) for t, v in table.items()}
    r = ev.evaluate_hierarcaps(TableModel(rev, dim=4, geometry="lorentz"), chains, images)
    assert r["d_corr"] == -1.0


def test_choice_benchmark_runner_ties_and_dedup():
    table = {"yes": torch.tensor([1.0, 0.0]), "no": torch.tensor([0.0, 1.0]), "same": torch.tensor([1.0, 0.0])}
    m = TableModel(table, dim=2)
    img = {"a.jpg": torch.tensor([1.0, 0.1]), "b.jpg": torch.tensor([0.1, 1.0])}
    items = [dict(image_path="a.jpg", options=["yes", "no"], correct=0, subset="s1"),
             dict(image_path="a.jpg", options=["no", "yes"], correct=1, subset="s1"),
             dict(image_path="b.jpg", options=["yes", "no", "same"], correct=1, subset="s2"),
             dict(image_path="a.jpg", options=["yes", "same"], correct=0, subset="s2")]   # exact tie: wrong
    r = ev.evaluate_choice_benchmark(m, items, image_loader=lambda rec: img[rec["image_path"]])
    assert m.image_calls == 2                                   # each distinct image encoded once
    assert r["acc/s1"] == 1.0 and r["acc/s2"] == 0.5
    assert r["acc/micro"] == 0.75 and r["acc/macro"] == 0.75
    assert r["acc_chance/s1"] == 0.5 and r["acc_chance/s2"] == pytest.approx((1 / 3 + 1 / 2) / 2)


def test_sugarcrepe_pp_runner_text_only_and_with_images():
    e = torch.eye(3)
    table = {"p1": e[0], "p2": e[0] * 0.9 + e[1] * 0.1, "n": e[1], "q1": e[0], "q2": e[2], "m": e[0]}
    m = TableModel(table, dim=3)
    items = [dict(caption="p1", caption2="p2", negative="n", subset="swap_att", image_path="x"),
             dict(caption="q1", caption2="q2", negative="m", subset="swap_att", image_path="x")]
    r = ev.evaluate_sugarcrepe_pp(m, items, with_images=False)
    assert r["tot_acc/swap_att"] == 0.5 and "itt_acc/micro" not in r and r["tot_acc_chance/micro"] == pytest.approx(1 / 3)
    r = ev.evaluate_sugarcrepe_pp(m, items, image_loader=lambda rec: e[0] + 0.5 * e[2])
    # item 0: sim(I,p1) > sim(I,n) and sim(I,p2) > sim(I,n) → ITT right; item 1: negative = p1 → tie → wrong
    assert r["itt_acc/swap_att"] == 0.5


def test_protocol_bad_inputs():
    m = ev.WordHashModel(dim=8)
    with pytest.raises(ValueError, match="no items"): ev.evaluate_choice_benchmark(m, [])
    with pytest.raises(TypeError, match="not str"): ev.encode_texts(m, ["ok", 3])
    with pytest.raises(ValueError, match="chains for"): ev.evaluate_hierarcaps(m, [["a", "b"]], torch.zeros(2, 8))
    with pytest.raises(KeyError, match="options"):
        ev.evaluate_choice_benchmark(m, [dict(image_path="a", correct=0)], image_loader=lambda r: torch.zeros(8))


def test_eval_mode_is_restored():
    m = ev.WordHashModel(dim=8); m.train()
    ev.encode_texts(m, ["a circle"])
    assert m.training


# ---------------------------------------------------------------- real annotation files (skipped without ../shared)
def test_sugarcrepe_pp_real_files_text_only():
    ann = SHARED / "data" / "sugarcrepe_pp"
    if not ann.is_dir(): pytest.skip("shared/data/sugarcrepe_pp not present")
    from hierbench.data import load_sugarcrepe_pp
    subsets = load_sugarcrepe_pp(ann, image_root="/nonexistent")
    items = subsets["swap_att"][:150] + subsets["replace_obj"][:150]
    r = ev.evaluate_sugarcrepe_pp(ev.WordHashModel(dim=64), items, with_images=False)
    # a bag of words cannot see most swaps (some SugarCrepe++ swaps also change a word); replaced words it can see,
    # but a paraphrase changes more words than the negative does, so it stays low there too (SugarCrepe++'s point)
    assert r["tot_acc/swap_att"] < r["tot_acc/replace_obj"] < 0.5
    assert r["tot_acc_chance/micro"] == pytest.approx(1 / 3)


def test_hierarcaps_real_images():
    csv = SHARED / "data" / "hierarcaps" / "hierarcaps_test.csv"
    if not csv.is_file(): pytest.skip("shared/data/hierarcaps not present")
    from hierbench.data import load_hierarcaps, image_to_tensor
    items = load_hierarcaps(csv)[:12]
    r = ev.evaluate_hierarcaps(ev.WordHashModel(dim=32), [it.chain for it in items], [it.image_path for it in items],
                               preprocess=lambda im: image_to_tensor(im, 32), batch_size=8)
    for k in ("hc_precision", "hc_recall", "pep_unverified_auc", "pep_unverified_ap"):
        assert 0 <= r[k] <= 1, k
    assert -1 <= r["d_corr"] <= 1
    # the same with a real DualEncoder and the default preprocessing (its image_size, mean and std)
    from hierbench.models import create_model
    r = ev.evaluate_hierarcaps(create_model("world-tiny", geometry="lorentz"), [it.chain for it in items[:6]],
                               [it.image_path for it in items[:6]], batch_size=4, suffix="/hierarcaps")
    assert 0 <= r["hc_recall/hierarcaps"] <= 1 and "pep_unverified_auc_chance/hierarcaps" in r


def test_choice_benchmark_groups_recall_and_exclusions():
    table = {"t": torch.tensor([1.0, 0.0]), "a": torch.tensor([0.9, 0.1]), "b": torch.tensor([0.0, 1.0]),
             "c": torch.tensor([0.5, 0.5])}
    m = TableModel(table, dim=2)
    x = torch.tensor([1.0, 0.0])
    items = [dict(image_path="i", options=["a", "t", "b", "c"], correct=1, subset="replace_obj"),   # rank 0
             dict(image_path="i", options=["b", "c", "a"], correct=1, subset="swap_obj"),          # rank 1 (a above)
             dict(image_path="i", options=["b", "t"], correct=0, subset="add_att")]                # rank 1
    r = ev.evaluate_choice_benchmark(m, items, image_loader=lambda rec: x, groups=ev.SUGARCREPE_GROUPS,
                                     recall_ks=(1, 2))
    assert r["acc/replace"] == 1.0 and r["acc/swap"] == 0.0 and r["acc/add"] == 0.0
    assert r["acc_chance/replace"] == 0.25
    assert r["acc_R@2/swap_obj"] == 1.0 and r["acc_R@1/micro"] == pytest.approx(1 / 3)
    assert r["acc_R@2_chance/add_att"] == 1.0 and r["acc_R@2_chance/swap_obj"] == pytest.approx(2 / 3)
    r = ev.evaluate_choice_benchmark(m, items, image_loader=lambda rec: x, exclude_subsets=["add_att"])
    assert "acc/add_att" not in r and r["acc/micro"] == 0.5
    with pytest.raises(ValueError, match="every subset excluded"):
        ev.evaluate_choice_benchmark(m, items, image_loader=lambda rec: x, min_subset_size=5)


@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_real_dual_encoder_contract(geometry):
    "The protocols run on hierbench.models' DualEncoder (untrained: numbers at chance, but every code path exercised)."
    from hierbench.models import create_model
    torch.manual_seed(0)
    m = create_model("world-tiny", geometry=geometry)
    r = ev.evaluate_world(m, n_test=8, cache_dir=False, pep_pool=8, batch_size=16)
    assert all(np.isfinite(v) for v in r.values())
    assert ("aperture_saturated" in r) == (geometry == "lorentz")
    assert m.training   # create_model returns a training-mode model; evaluation must leave it that way


def test_word_hash_model_bag_of_words_is_exact():
    m = ev.WordHashModel(dim=16)
    e = m.encode_text(["a red circle left of a blue square", "a blue circle left of a red square"])
    assert torch.equal(e[0], e[1])          # bit-identical, so the comparison is a tie, not a coin flip


def test_hierarchical_metrics_on_world_taxonomy_match_tree_distance():
    from hierbench.world import SHAPES
    leaves = SHAPES.leaves
    pred = [a for a in leaves for _ in leaves]; true = [b for _ in leaves for b in leaves]
    s = ev.hierarchical_scores(pred, true, SHAPES)
    assert s.tie.tolist() == [SHAPES.distance(a, b) for a, b in zip(pred, true)]
    assert s.lca.tolist() == [1 if a == b else 2 if SHAPES.parent[a] == SHAPES.parent[b] else 3 for a, b in zip(pred, true)]


def test_choice_benchmark_missing_image_is_named():
    ann = SHARED / "data" / "sugarcrepe"
    if not ann.is_dir(): pytest.skip("shared/data/sugarcrepe not present")
    from hierbench.data import load_sugarcrepe
    items = load_sugarcrepe(ann, image_root="/nonexistent/coco")["swap_obj"][:3]
    from hierbench.data import DataWarning
    with pytest.warns(DataWarning, match="3 of 3 images could not be read.*nonexistent"), \
         pytest.raises(ValueError, match="no image of the 3 items could be read"):
        ev.evaluate_choice_benchmark(ev.WordHashModel(dim=8), items, preprocess=lambda im: torch.zeros(3, 8, 8))


def test_whatsup_pair_and_set_accuracy():
    caps = ["A mug on a plate", "A mug under a plate", "A mug to the left of a plate", "A mug to the right of a plate"]
    e = torch.eye(4)
    m = TableModel({c: e[i] for i, c in enumerate(caps)}, dim=4)
    # four images, one per arrangement; the model gets 'under' wrong (predicts 'on')
    img = {0: e[0], 1: e[0] + 0.1 * e[1], 2: e[2], 3: e[3]}
    items = []
    for i in range(4):
        opts = [caps[i]] + [c for j, c in enumerate(caps) if j != i]   # correct option first, as in WhatsUp
        items.append(dict(image_path=f"im{i}", options=opts, correct=0, subset="controlled_A", idx=i))
    r = ev.evaluate_whatsup_controlled(m, items, image_loader=lambda rec: img[rec["idx"]])
    assert r["whatsup/controlled_A"] == 0.75
    assert r["whatsup_pair/controlled_A"] == 0.5        # left-right pair right, on-under pair wrong
    assert r["whatsup_set/controlled_A"] == 0.0
    assert r["whatsup_set_chance/controlled_A"] == pytest.approx(1 / 256)
    with pytest.raises(ValueError, match="preposition"): ev.whatsup_axis("A mug near a plate")


# ---------------------------------------------------------------- properties
from hypothesis import given, settings, strategies as st


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=5, max_size=5), min_size=1, max_size=6),
       st.lists(st.integers(0, 4), min_size=6, max_size=6))
def test_recall_pessimistic_rank_property(rows, gts):
    "On integer scores (many ties) the rank equals the count of wrong candidates scoring >= the correct one."
    sim = np.array(rows, dtype=float)
    gt = gts[:len(rows)]
    rank = ev.rank_of_best_correct(sim, gt)
    for q, g in enumerate(gt):
        assert rank[q] == sum(1 for j in range(5) if j != g and sim[q, j] >= sim[q, g])
    acc = ev.choice_accuracy(sim, gt)
    assert acc == pytest.approx(np.mean(rank == 0))    # choice accuracy is recall@1 among the options


LEAVES = ["circle", "oval", "square", "rectangle", "triangle"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(LEAVES), st.sampled_from(LEAVES)), min_size=1, max_size=10))
def test_hierarchical_metric_properties(pairs):
    pred, true = [p for p, _ in pairs], [t for _, t in pairs]
    a = ev.hierarchical_scores(pred, true, TOY)
    b = ev.hierarchical_scores(true, pred, TOY)
    assert (a.tie == b.tie).all() and (a.jaccard == b.jaccard).all()           # symmetric
    assert (a.h_precision == b.h_recall).all()                                   # hP and hR swap roles
    assert ((a.tie == 0) == (np.array(pred) == np.array(true))).all()
    assert (a.lca >= 1).all() and a.jaccard.between(0, 1).all()


# ---------------------------------------------------------------- position_readout
class _PixelModel(torch.nn.Module):
    """A stand-in image encoder over each pixel's distance from the image's median colour: `profile` keeps its mean per
    column and per row (where the object is), else its mean and spread over the whole image (how big, not where)."""
    def __init__(self, profile: bool):
        super().__init__(); self.profile = profile
    def encode_image(self, x):
        d = (x - x.flatten(2).median(-1).values[..., None, None]).abs().sum(1)
        if self.profile: return torch.cat([d.mean(1), d.mean(2)], 1)
        return torch.stack([d.mean(dim=(1, 2)), d.std(dim=(1, 2)), x.mean(dim=(1, 2, 3))], 1)


def test_position_readout_tells_a_position_aware_embedding_from_a_blind_one():
    aware = ev.position_readout(_PixelModel(True), n=600, cache_dir=False)
    blind = ev.position_readout(_PixelModel(False), n=600, cache_dir=False)
    for r in (aware, blind):
        assert r["n_fit_left_right"] > 100 and r["n_scored_left_right"] > 100 and 0.5 <= r["chance_left_right"] < 0.62
    assert aware["left_right"] > 0.9 and aware["above_below"] > 0.9
    assert blind["left_right"] < 0.65 and blind["above_below"] < 0.65
