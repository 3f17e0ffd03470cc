"""Dense checks of hierbench.evaluation.metrics: metric values on hand-computed cases, chance levels, bad inputs,
properties."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import kendalltau
from sklearn.metrics import average_precision_score, roc_auc_score

from hierbench.evaluation import metrics as M
from hierbench.data.loaders import SUGARCREPE_GROUPS
from hypothesis import given, settings, strategies as st


def test_recall_single_correct_hand_computed():
    sim = np.array([[0.1, 0.9, 0.2], [0.3, 0.2, 0.1], [0.5, 0.6, 0.7]])
    # ranks of the correct candidate: query0 → 0 (0.9 best), query1 → 2 (0.3,0.2 above 0.1), query2 → 2
    assert M.rank_of_best_correct(sim, [1, 2, 0]).tolist() == [0, 2, 2]
    assert M.recall_at_k(sim, [1, 2, 0], ks=(1, 2, 3)) == {1: 1 / 3, 2: 1 / 3, 3: 1.0}


def test_recall_ties_count_against_the_query():
    sim = np.array([[0.5, 0.5, 0.5]])
    assert M.recall_at_k(sim, [0], ks=(1, 2, 3)) == {1: 0.0, 2: 0.0, 3: 1.0}
    assert M.recall_at_k(sim, [2], ks=(1, 3)) == {1: 0.0, 3: 1.0}  # position does not matter


def test_recall_several_correct_uses_best_and_ignores_other_correct():
    sim = np.array([[0.9, 0.8, 0.7, 0.1]])
    # correct = {1, 3}: best correct 0.8, one wrong candidate above it; the other correct one is not "wrong"
    assert M.rank_of_best_correct(sim, [[1, 3]]).tolist() == [1]
    mask = np.array([[False, True, False, True]])
    assert M.rank_of_best_correct(sim, mask).tolist() == [1]
    assert M.rank_of_best_correct(torch.tensor(sim), [{1, 3}]).tolist() == [1]


def test_recall_matches_brute_force_random():
    rng = np.random.default_rng(0)
    sim = rng.normal(size=(20, 30))
    gt = rng.integers(0, 30, 20)
    r = M.recall_at_k(sim, gt, ks=(1, 5, 10))
    for k in (1, 5, 10):
        topk = np.argsort(-sim, 1)[:, :k]  # no ties in continuous random scores
        assert r[k] == pytest.approx(np.mean([g in t for g, t in zip(gt, topk)]))


def test_recall_bad_inputs():
    with pytest.raises(ValueError, match="non-finite"):
        M.recall_at_k(np.array([[np.nan, 1.0]]), [0])
    with pytest.raises(ValueError, match="out of range"):
        M.recall_at_k(np.zeros((1, 2)), [5])
    with pytest.raises(ValueError, match="no correct"):
        M.recall_at_k(np.zeros((1, 2)), [[]])
    with pytest.raises(ValueError, match="queries"):
        M.recall_at_k(np.zeros((2, 2)), [0])


def test_retrieval_recalls_both_directions_and_chance():
    # 2 images, 4 texts (two each); image 0's best text is image 1's
    sim = np.array([[0.1, 0.5, 0.9, 0.0], [0.0, 0.1, 0.8, 0.9]])
    r = M.retrieval_recalls(sim, [0, 0, 1, 1], ks=(1, 2))
    assert r["i2t_R@1"] == 0.5 and r["i2t_R@2"] == 1.0
    # t2i: text0 best img0 (0.1 > 0.0) ok; text1 ok; text2 → img0 wrong; text3 → img1 ok
    assert r["t2i_R@1"] == 0.75
    assert r["t2i_R@1_chance"] == 0.5
    assert r["i2t_R@1_chance"] == pytest.approx(0.5)  # 2 of 4 correct
    assert r["i2t_R@2_chance"] == pytest.approx(1 - 1 / 6)  # 1 - C(2,2)/C(4,2)


def test_chance_recall_formula_against_simulation():
    rng = np.random.default_rng(1)
    n, k, m = 12, 3, 2
    hits = [bool(set(rng.permutation(n)[:k]) & {0, 1}) for _ in range(20000)]
    assert M.chance_recall_at_k(n, k, m) == pytest.approx(np.mean(hits), abs=0.01)
    assert M.chance_recall_at_k(1000, 10) == pytest.approx(0.01)
    with pytest.raises(ValueError):
        M.chance_recall_at_k(3, 1, n_correct=4)


def test_choice_accuracy_strict_ties_wrong():
    scores = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.1], [0.2, 0.9, 0.9], [0.1, 0.2, 0.3]])
    assert M.choice_correct(scores, [0, 0, 1, 2]).tolist() == [True, False, False, True]
    assert M.choice_accuracy(scores, [0, 0, 1, 2]) == 0.5
    # a constant model is always wrong, not at chance
    assert M.choice_accuracy(np.ones((5, 4)), [0] * 5) == 0.0


def test_choice_bad_inputs():
    with pytest.raises(ValueError, match="out of range"):
        M.choice_correct(np.zeros((1, 2)), [2])
    with pytest.raises(ValueError, match="entries"):
        M.choice_correct(np.zeros((2, 2)), [0])
    with pytest.raises(ValueError, match="2 options"):
        M.choice_correct(np.zeros((2, 1)), [0, 0])


def test_itt_tot_truth_tables():
    # enumerate all orderings of three scores with ties on a small grid
    vals = [0.0, 0.5, 1.0]
    for a in vals:
        for b in vals:
            for n in vals:
                assert M.itt_correct([a], [b], [n])[0] == (a > n and b > n)
                assert M.tot_correct([a], [b], [n])[0] == (a > b and a > n)


def test_itt_tot_from_embeddings_and_chance():
    rng = np.random.default_rng(0)
    rowwise = lambda a, b: (a * b).sum(-1)
    e = [torch.tensor(rng.normal(size=(30000, 8))) for _ in range(4)]
    out = M.itt_tot(*e, rowwise_sim=rowwise)
    assert out["itt"].mean() == pytest.approx(M.CHANCE_ITT_TOT, abs=0.02)
    assert out["tot"].mean() == pytest.approx(M.CHANCE_ITT_TOT, abs=0.02)
    # paraphrase = the caption itself, negative orthogonal → always correct
    p = torch.eye(4)[:2]
    n = torch.eye(4)[2:]
    out = M.itt_tot(p, p, p, n, rowwise_sim=rowwise)
    assert out["itt"].all() and out["tot"].all()


def test_aggregate_micro_macro_and_groups():
    agg = M.aggregate_accuracy({"a": [1, 0, 0, 0], "b": [1, 1]}, prefix="comp_acc")
    assert agg == {"comp_acc/a": 0.25, "comp_acc/b": 1.0, "comp_acc/micro": 0.5, "comp_acc/macro": 0.625}
    g = M.group_means({"swap_obj": 0.5, "swap_att": 0.7, "add_obj": 0.9}, SUGARCREPE_GROUPS)
    assert g == {"swap": pytest.approx(0.6), "add": 0.9}
    with pytest.raises(ValueError, match="empty"):
        M.aggregate_accuracy({"a": []})


TOY = {
    "round": "shape",
    "angular": "shape",
    "circle": "round",
    "oval": "round",
    "square": "angular",
    "rectangle": "angular",
    "triangle": "angular",
}


class ToyTaxonomy:
    "A taxonomy object with .ancestors(node) that excludes the node and includes the root."

    def ancestors(self, node):
        out = []
        while node in TOY:
            node = TOY[node]
            out.append(node)
        return out


@pytest.mark.parametrize("tax", [TOY, ToyTaxonomy()])
def test_hierarchical_metrics_hand_computed(tax):
    # root excluded: A(circle)={circle,round}, A(oval)={oval,round}, A(square)={square,angular}
    s = M.hierarchical_scores(["circle", "oval", "square"], ["circle", "circle", "circle"], tax)
    assert s.tie.tolist() == [0, 2, 4]
    assert s.lca.tolist() == [1, 2, 3]
    assert s.jaccard.tolist() == pytest.approx([1, 1 / 3, 0])
    assert s.h_precision.tolist() == pytest.approx([1, 0.5, 0])
    assert s.h_recall.tolist() == pytest.approx([1, 0.5, 0])
    m = M.hierarchical_metrics(["circle", "oval", "square"], ["circle"] * 3, tax)
    assert m["tie"] == 2 and m["lca"] == 2 and m["jaccard"] == pytest.approx(4 / 9)


def test_hierarchical_metrics_root_option_and_internal_nodes():
    with_root = M.hierarchical_scores(["square"], ["circle"], TOY, include_root=True)
    assert with_root.tie.tolist() == [4] and with_root.lca.tolist() == [3]  # unchanged by the root
    assert with_root.jaccard.tolist() == pytest.approx([1 / 5])  # the shared root gives credit
    # predicting an internal node (super-category) of the truth: precision 1, recall 1/2
    s = M.hierarchical_scores(["round"], ["circle"], TOY)
    assert s.tie.tolist() == [1] and s.h_precision.tolist() == [1.0] and s.h_recall.tolist() == [0.5]


def test_tie_equals_tree_distance_by_bfs():
    import itertools

    adj = {}
    for c, p in TOY.items():
        adj.setdefault(c, set()).add(p)
        adj.setdefault(p, set()).add(c)

    def bfs(a, b):
        frontier, seen, d = {a}, {a}, 0
        while b not in frontier:
            frontier = {n for f in frontier for n in adj[f]} - seen
            seen |= frontier
            d += 1
        return d

    nodes = list(adj)
    pairs = list(itertools.product(nodes, nodes))
    s = M.hierarchical_scores([p for p, _ in pairs], [t for _, t in pairs], TOY)
    assert s.tie.tolist() == [bfs(p, t) for p, t in pairs]


def test_chance_hierarchical_metrics():
    leaves = ["circle", "oval", "square", "rectangle", "triangle"]
    ch = M.chance_hierarchical_metrics(["circle"], leaves, TOY)
    # distances from circle: 0, 2, 4, 4, 4
    assert ch["tie"] == pytest.approx(14 / 5)


def test_taxonomy_errors():
    with pytest.raises(ValueError, match="cycle"):
        M.ancestor_set({"a": "b", "b": "a"}, "a")
    with pytest.raises(TypeError, match="taxonomy"):
        M.ancestor_set(42, "a")
    with pytest.raises(ValueError, match="items"):
        M.hierarchical_metrics(["a"], [], TOY)


def test_pep_reference_toy_and_sklearn():
    r = M.pep_auc_ap([0.9, 0.6], [0.7, 0.1])
    assert r["auc"] == pytest.approx(0.75) and r["ap"] == pytest.approx(0.833333, abs=1e-6)
    assert r["auc_chance"] == 0.5 and r["ap_chance"] == 0.5
    rng = np.random.default_rng(0)
    pos, neg = rng.random(50), rng.random(150)
    r = M.pep_auc_ap(pos, neg)
    y = np.r_[np.ones(50), np.zeros(150)]
    assert r["auc"] == roc_auc_score(y, np.r_[pos, neg]) and r["ap"] == average_precision_score(y, np.r_[pos, neg])
    assert r["ap_chance"] == 0.25
    with pytest.raises(ValueError, match="positives and negatives"):
        M.pep_auc_ap([], [0.1])


def test_pep_score_values():
    phi = np.array([0.0, math.pi / 4, math.pi / 2, 3.0])
    assert np.allclose(M.pep_score(phi), [1.0, 0.5, 0.0, 0.0])
    assert torch.allclose(M.pep_score(torch.tensor(phi)), torch.tensor([1.0, 0.5, 0.0, 0.0], dtype=torch.float64))


def test_d_corr_kendall():
    radii = np.array([[1, 2, 3, 4], [4, 3, 2, 1], [2, 1, 3, 4], [1, 1, 1, 1]], dtype=float)
    taus = M.kendall_per_chain(radii)
    assert taus[:3].tolist() == pytest.approx([1, -1, kendalltau([1, 2, 3, 4], [2, 1, 3, 4]).statistic])
    assert taus[3] == 0.0  # constant radii: no ordering
    assert M.d_corr(radii) == pytest.approx((1 - 1 + 2 / 3 + 0) / 4)
    with pytest.raises(ValueError, match="2 levels"):
        M.d_corr(np.ones((3, 1)))


def test_hierarcaps_sweep_matches_brute_force():
    rng = np.random.default_rng(0)
    sim, r = rng.random((7, 40)), rng.random(40) * 3
    preds = M.hierarcaps_sweep(sim, r, n_thresholds=50)
    for t_i, t in enumerate(np.linspace(r.min(), r.max(), 50)):
        allowed = np.flatnonzero(r <= t)
        assert (preds[:, t_i] == allowed[np.argmax(sim[:, allowed], 1)]).all()


def test_hierarcaps_precision_recall_hand():
    # image 0 chain [0,1,2,3]; radii grow along it; an off-chain text 4 wins only the largest threshold
    sim = np.array([[0.1, 0.2, 0.3, 0.4, 0.5]])
    r = np.array([1.0, 2.0, 3.0, 4.0, 4.0])
    out = M.hierarcaps_retrieval(sim, r, [[0, 1, 2, 3]], n_thresholds=4)
    # thresholds 1,2,3,4 → preds 0,1,2,4 → precision 3/4, recall 3/4
    assert out["precision"] == pytest.approx(0.75) and out["recall"] == pytest.approx(0.75)
    assert 0 <= out["precision_chance"] <= 1 and 0 <= out["recall_chance"] <= 1


def test_hierarchical_metrics_on_world_taxonomy_match_tree_distance():
    from hierbench.world.scenes import SHAPES

    leaves = SHAPES.leaves
    pred = [a for a in leaves for _ in leaves]
    true = [b for _ in leaves for b in leaves]
    s = M.hierarchical_scores(pred, true, SHAPES)
    assert s.tie.tolist() == [SHAPES.distance(a, b) for a, b in zip(pred, true)]
    assert s.lca.tolist() == [
        1 if a == b else 2 if SHAPES.parent[a] == SHAPES.parent[b] else 3 for a, b in zip(pred, true)
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 3), min_size=5, max_size=5), min_size=1, max_size=6),
    st.lists(st.integers(0, 4), min_size=6, max_size=6),
)
def test_recall_pessimistic_rank_property(rows, gts):
    "On integer scores (many ties) the rank equals the count of wrong candidates scoring >= the correct one."
    sim = np.array(rows, dtype=float)
    gt = gts[: len(rows)]
    rank = M.rank_of_best_correct(sim, gt)
    for q, g in enumerate(gt):
        assert rank[q] == sum(1 for j in range(5) if j != g and sim[q, j] >= sim[q, g])
    acc = M.choice_accuracy(sim, gt)
    assert acc == pytest.approx(np.mean(rank == 0))  # choice accuracy is recall@1 among the options


LEAVES = ["circle", "oval", "square", "rectangle", "triangle"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(LEAVES), st.sampled_from(LEAVES)), min_size=1, max_size=10))
def test_hierarchical_metric_properties(pairs):
    pred, true = [p for p, _ in pairs], [t for _, t in pairs]
    a = M.hierarchical_scores(pred, true, TOY)
    b = M.hierarchical_scores(true, pred, TOY)
    assert (a.tie == b.tie).all() and (a.jaccard == b.jaccard).all()  # symmetric
    assert (a.h_precision == b.h_recall).all()  # hP and hR swap roles
    assert ((a.tie == 0) == (np.array(pred) == np.array(true))).all()
    assert (a.lca >= 1).all() and a.jaccard.between(0, 1).all()


# ---------------------------------------------------------------- module boundaries and baselines
def test_metrics_module_does_not_import_torch():
    import subprocess
    import sys

    code = (
        "import sys, hierbench.evaluation.metrics; assert 'torch' not in sys.modules, "
        "'hierbench.evaluation.metrics imported torch'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_pep_score_is_one_function_for_numpy_and_torch():
    phi = [0.0, math.pi / 3, math.pi / 2, 3.0]
    want = [1.0, 1 / 3, 0.0, 0.0]
    assert M.pep_score(np.array(phi)) == pytest.approx(want) and M.pep_score(phi).dtype == np.float64
    t = torch.tensor(phi, requires_grad=True)
    s = M.pep_score(t)
    assert isinstance(s, torch.Tensor) and s.detach().tolist() == pytest.approx(want)
    s.sum().backward()
    assert t.grad.tolist() == pytest.approx([-2 / math.pi, -2 / math.pi, 0.0, 0.0])  # differentiable for the losses
    from hierbench.recipes import losses

    assert not hasattr(losses, "pep_score")  # one implementation in the package


def test_caption_length_baseline_of_d_corr():
    assert M.caption_length("A dog's bed, in a room.") == 6
    assert M.length_d_corr([["a", "a b", "a b c"], ["x y z", "x y", "x"]]) == 0.0  # +1 and -1
    assert M.length_d_corr([["a b", "c d", "e f"]]) == 0.0  # equal lengths: ties
    assert M.length_d_corr([["dog", "a dog", "a brown dog", "a brown dog on a sofa"]]) == 1.0
    assert M.length_key("d_corr/hierarcaps") == "d_corr_length/hierarcaps" and M.length_key("d_corr") == "d_corr_length"
    t = M.results_table({"d_corr/hierarcaps": 0.8, "d_corr_chance/hierarcaps": 0.0, "d_corr_length/hierarcaps": 0.91})
    assert t.metric.tolist() == ["d_corr/hierarcaps"] and (t.value[0], t.chance[0], t.length[0]) == (0.8, 0.0, 0.91)
    assert np.isnan(t.bag_of_words[0])


def test_bag_of_words_tot_ties_are_exact():
    "Same-bag texts tie exactly (counts, not float32 hashes), and a tie is wrong."
    p1 = ["A porcelain tea and bathroom set is on display."]
    p2 = ["On display are a porcelain tea and bathroom set."]
    n = ["A metal tea and bathroom set is on display."]
    assert M._bow_cosine(p1, p2)[0] == M._bow_cosine(p1, n)[0]  # 8 of 9 words shared both ways
    assert M.bag_of_words_tot(p1, p2, n).tolist() == [False]
    assert M.bag_of_words_tot(["a b"], ["b a"], ["c d"]).tolist() == [True]
