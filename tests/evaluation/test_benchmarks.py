"""Dense checks of hierbench.evaluation.benchmarks: the real benchmarks' protocol runners on tiny models and on the real
annotation files."""

import pytest
import torch

from hierbench.evaluation import benchmarks as B, encoding as EN, metrics as M
from hierbench.data.loaders import SUGARCREPE_GROUPS
from eval_models import TableModel, lorentz_chain_table, SHARED


def test_hierarcaps_protocol_perfect_hyperbolic_hierarchy():
    table, chains, images = lorentz_chain_table()
    m = TableModel(table, dim=4, geometry="lorentz")
    r = B.evaluate_hierarcaps(m, chains, images, n_thresholds=50)
    assert r["hc_precision"] == 1.0 and r["hc_recall"] == 1.0
    assert r["d_corr"] == 1.0
    assert r["pep_unverified_auc"] == 1.0  # own chain: φ = 0; the other chain is orthogonal: φ ≥ π/2
    r = B.evaluate_hierarcaps(m, chains, images, negatives=[[chains[1][3]], [chains[0][3]]])
    assert r["pep_auc"] == 1.0 and "pep_unverified_auc" not in r
    # reversed norms: the radius now decreases along the chain
    rev = {t: v / (0.5 + 0.5 * int(t[-1])) * (2.0 - 0.5 * int(t[-1])) for t, v in table.items()}
    r = B.evaluate_hierarcaps(TableModel(rev, dim=4, geometry="lorentz"), chains, images)
    assert r["d_corr"] == -1.0


def test_choice_benchmark_runner_ties_and_dedup():
    table = {"yes": torch.tensor([1.0, 0.0]), "no": torch.tensor([0.0, 1.0]), "same": torch.tensor([1.0, 0.0])}
    m = TableModel(table, dim=2)
    img = {"a.jpg": torch.tensor([1.0, 0.1]), "b.jpg": torch.tensor([0.1, 1.0])}
    items = [
        dict(image_path="a.jpg", options=["yes", "no"], correct=0, subset="s1"),
        dict(image_path="a.jpg", options=["no", "yes"], correct=1, subset="s1"),
        dict(image_path="b.jpg", options=["yes", "no", "same"], correct=1, subset="s2"),
        dict(image_path="a.jpg", options=["yes", "same"], correct=0, subset="s2"),
    ]  # exact tie: wrong
    r = B.evaluate_choice_benchmark(m, items, image_loader=lambda rec: img[rec["image_path"]])
    assert m.image_calls == 2  # each distinct image encoded once
    assert r["acc/s1"] == 1.0 and r["acc/s2"] == 0.5
    assert r["acc/micro"] == 0.75 and r["acc/macro"] == 0.75
    assert r["acc_chance/s1"] == 0.5 and r["acc_chance/s2"] == pytest.approx((1 / 3 + 1 / 2) / 2)


def test_sugarcrepe_pp_runner_text_only_and_with_images():
    e = torch.eye(3)
    table = {"p1": e[0], "p2": e[0] * 0.9 + e[1] * 0.1, "n": e[1], "q1": e[0], "q2": e[2], "m": e[0]}
    m = TableModel(table, dim=3)
    items = [
        dict(caption="p1", caption2="p2", negative="n", subset="swap_att", image_path="x"),
        dict(caption="q1", caption2="q2", negative="m", subset="swap_att", image_path="x"),
    ]
    r = B.evaluate_sugarcrepe_pp(m, items, with_images=False)
    assert (
        r["tot_acc/swap_att"] == 0.5 and "itt_acc/micro" not in r and r["tot_acc_chance/micro"] == pytest.approx(1 / 3)
    )
    r = B.evaluate_sugarcrepe_pp(m, items, image_loader=lambda rec: e[0] + 0.5 * e[2])
    # item 0: sim(I,p1) > sim(I,n) and sim(I,p2) > sim(I,n) → ITT right; item 1: negative = p1 → tie → wrong
    assert r["itt_acc/swap_att"] == 0.5


def test_protocol_bad_inputs():
    m = EN.WordHashModel(dim=8)
    with pytest.raises(ValueError, match="no items"):
        B.evaluate_choice_benchmark(m, [])
    with pytest.raises(TypeError, match="not str"):
        EN.encode_texts(m, ["ok", 3])
    with pytest.raises(ValueError, match="chains for"):
        B.evaluate_hierarcaps(m, [["a", "b"]], torch.zeros(2, 8))
    with pytest.raises(KeyError, match="options"):
        B.evaluate_choice_benchmark(m, [dict(image_path="a", correct=0)], image_loader=lambda r: torch.zeros(8))


def test_sugarcrepe_pp_real_files_text_only():
    ann = SHARED / "data" / "sugarcrepe_pp"
    if not ann.is_dir():
        pytest.skip("shared/data/sugarcrepe_pp not present")
    from hierbench.data.loaders import load_sugarcrepe_pp

    subsets = load_sugarcrepe_pp(ann, image_root="/nonexistent")
    items = subsets["swap_att"][:150] + subsets["replace_obj"][:150]
    r = B.evaluate_sugarcrepe_pp(EN.WordHashModel(dim=64), items, with_images=False)
    # a bag of words cannot see most swaps (some SugarCrepe++ swaps also change a word); replaced words it can see,
    # but a paraphrase changes more words than the negative does, so it stays low there too (SugarCrepe++'s point)
    assert r["tot_acc/swap_att"] < r["tot_acc/replace_obj"] < 0.5
    assert r["tot_acc_chance/micro"] == pytest.approx(1 / 3)


def test_hierarcaps_real_images():
    csv = SHARED / "data" / "hierarcaps" / "hierarcaps_test.csv"
    if not csv.is_file():
        pytest.skip("shared/data/hierarcaps not present")
    from hierbench.data.batch import image_to_tensor
    from hierbench.data.loaders import load_hierarcaps

    items = load_hierarcaps(csv)[:12]
    r = B.evaluate_hierarcaps(
        EN.WordHashModel(dim=32),
        [it.chain for it in items],
        [it.image_path for it in items],
        preprocess=lambda im: image_to_tensor(im, 32),
        batch_size=8,
    )
    for k in ("hc_precision", "hc_recall", "pep_unverified_auc", "pep_unverified_ap"):
        assert 0 <= r[k] <= 1, k
    assert -1 <= r["d_corr"] <= 1
    # the same with a real DualEncoder and the default preprocessing (its image_size, mean and std)
    from hierbench.models.family import create_model

    r = B.evaluate_hierarcaps(
        create_model("world-tiny", geometry="lorentz"),
        [it.chain for it in items[:6]],
        [it.image_path for it in items[:6]],
        batch_size=4,
        suffix="/hierarcaps",
    )
    assert 0 <= r["hc_recall/hierarcaps"] <= 1 and "pep_unverified_auc_chance/hierarcaps" in r


def test_choice_benchmark_groups_recall_and_exclusions():
    table = {
        "t": torch.tensor([1.0, 0.0]),
        "a": torch.tensor([0.9, 0.1]),
        "b": torch.tensor([0.0, 1.0]),
        "c": torch.tensor([0.5, 0.5]),
    }
    m = TableModel(table, dim=2)
    x = torch.tensor([1.0, 0.0])
    items = [
        dict(image_path="i", options=["a", "t", "b", "c"], correct=1, subset="replace_obj"),  # rank 0
        dict(image_path="i", options=["b", "c", "a"], correct=1, subset="swap_obj"),  # rank 1 (a above)
        dict(image_path="i", options=["b", "t"], correct=0, subset="add_att"),
    ]  # rank 1
    r = B.evaluate_choice_benchmark(m, items, image_loader=lambda rec: x, groups=SUGARCREPE_GROUPS, recall_ks=(1, 2))
    assert r["acc/replace"] == 1.0 and r["acc/swap"] == 0.0 and r["acc/add"] == 0.0
    assert r["acc_chance/replace"] == 0.25
    assert r["acc_R@2/swap_obj"] == 1.0 and r["acc_R@1/micro"] == pytest.approx(1 / 3)
    assert r["acc_R@2_chance/add_att"] == 1.0 and r["acc_R@2_chance/swap_obj"] == pytest.approx(2 / 3)
    r = B.evaluate_choice_benchmark(m, items, image_loader=lambda rec: x, exclude_subsets=["add_att"])
    assert "acc/add_att" not in r and r["acc/micro"] == 0.5
    with pytest.raises(ValueError, match="every subset excluded"):
        B.evaluate_choice_benchmark(m, items, image_loader=lambda rec: x, min_subset_size=5)


def test_choice_benchmark_missing_image_is_named():
    ann = SHARED / "data" / "sugarcrepe"
    if not ann.is_dir():
        pytest.skip("shared/data/sugarcrepe not present")
    from hierbench.data.loaders import load_sugarcrepe

    items = load_sugarcrepe(ann, image_root="/nonexistent/coco")["swap_obj"][:3]
    from hierbench.data.batch import DataWarning

    with (
        pytest.warns(DataWarning, match="3 of 3 images could not be read.*nonexistent"),
        pytest.raises(ValueError, match="no image of the 3 items could be read"),
    ):
        B.evaluate_choice_benchmark(EN.WordHashModel(dim=8), items, preprocess=lambda im: torch.zeros(3, 8, 8))


def test_whatsup_pair_and_set_accuracy():
    caps = ["A mug on a plate", "A mug under a plate", "A mug to the left of a plate", "A mug to the right of a plate"]
    e = torch.eye(4)
    m = TableModel({c: e[i] for i, c in enumerate(caps)}, dim=4)
    # four images, one per arrangement; the model gets 'under' wrong (predicts 'on')
    img = {0: e[0], 1: e[0] + 0.1 * e[1], 2: e[2], 3: e[3]}
    items = []
    for i in range(4):
        opts = [caps[i]] + [c for j, c in enumerate(caps) if j != i]  # correct option first, as in WhatsUp
        items.append(dict(image_path=f"im{i}", options=opts, correct=0, subset="controlled_A", idx=i))
    r = B.evaluate_whatsup_controlled(m, items, image_loader=lambda rec: img[rec["idx"]])
    assert r["whatsup/controlled_A"] == 0.75
    assert r["whatsup_pair/controlled_A"] == 0.5  # left-right pair right, on-under pair wrong
    assert r["whatsup_set/controlled_A"] == 0.0
    assert r["whatsup_set_chance/controlled_A"] == pytest.approx(1 / 256)
    with pytest.raises(ValueError, match="preposition"):
        B.whatsup_axis("A mug near a plate")


# ---------------------------------------------------------------- d_corr's caption-length baseline (issue 27)
class _LengthModel(torch.nn.Module):
    "A text encoder whose embedding is (number of words, 0): its radius from the empty text IS the caption length."

    def __init__(self):
        super().__init__()
        self.head = TableModel().head

    def encode_text(self, texts):
        return torch.tensor([[float(M.caption_length(t)), 0.0] for t in texts])

    def encode_image(self, x):
        return x.flatten(1)[:, :2].float()


def test_a_radius_equal_to_caption_length_scores_exactly_the_baseline():
    chains = [
        ["a dog", "a brown dog", "a brown dog on a sofa", "a brown dog on a sofa by a window"],
        ["people", "two people", "two people at a table", "two people at a table eating"],
        ["a cat", "a kitten", "a small kitten", "a small kitten asleep"],
    ]
    r = B.hierarcaps_text_metrics(_LengthModel(), chains, suffix="/hierarcaps")
    assert r["d_corr/hierarcaps"] == r["d_corr_length/hierarcaps"] == M.length_d_corr(chains)
    assert r["d_corr_chance/hierarcaps"] == 0.0
    r = B.evaluate_hierarcaps(_LengthModel(), chains, torch.rand(3, 3, 4, 4), n_thresholds=5)
    assert r["d_corr"] == r["d_corr_length"]
    # a model whose radius is constant scores chance, whatever the captions' lengths
    flat = TableModel({t: torch.tensor([1.0, 0.0]) for ch in chains for t in ch} | {"": torch.zeros(2)}, dim=2)
    assert B.hierarcaps_text_metrics(flat, chains)["d_corr"] == 0.0


def test_hierarcaps_length_baseline_of_the_real_chains_is_high():
    csv = SHARED / "data" / "hierarcaps" / "hierarcaps_test.csv"
    if not csv.is_file():
        pytest.skip("shared/data/hierarcaps not present")
    from hierbench.data.loaders import load_hierarcaps

    chains = [it.chain for it in load_hierarcaps(csv)]
    base = M.length_d_corr(chains)
    assert len(chains) == 1000 and base > 0.85  # 0.913: the chains grow in words level by level
    r = B.hierarcaps_text_metrics(_LengthModel(), chains)
    assert r["d_corr"] == r["d_corr_length"] == base


def test_evaluate_benchmarks_text_only_model_runs_the_text_side_and_says_what_it_skipped():
    csv = SHARED / "data" / "hierarcaps" / "hierarcaps_test.csv"
    if not csv.is_file():
        pytest.skip("shared/data/hierarcaps not present")
    from hierbench.models.scorers import TextScorer

    lines = []
    model = TextScorer(lambda ts: [[float(M.caption_length(t)), 1.0] for t in ts], "word counter")
    r = B.evaluate_benchmarks(model, hierarcaps=str(csv), limit=30, log=lines.append)
    assert set(r) == {"d_corr/hierarcaps", "d_corr_chance/hierarcaps", "d_corr_length/hierarcaps"}
    assert any("the built-in world: skipped" in l for l in lines) and any(
        "HierarCaps retrieval and PEP" in l for l in lines
    )
