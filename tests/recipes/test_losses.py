"""Dense checks of hierbench.recipes.losses: reference values from the spec, hand-computed tiny batches (explicit loops
in
numpy, float64), gradients, the DeGLA own-negative mask, and negative validation."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from hierbench import geometry as geo
from hierbench.recipes import losses as L
from hierbench.evaluation.metrics import (
    pep_score,
)  # the one PEP score (numpy or torch), used by the losses notebook and the protocols

torch.set_default_dtype(torch.float32)


# ---------------------------------------------------------------- fake heads (independent of hierbench.models.family)
class FakeCosHead:
    geometry = "euclidean"

    def pairwise_sim(self, a, b):
        return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T

    def rowwise_sim(self, a, b):
        return (F.normalize(a, dim=-1) * F.normalize(b, dim=-1)).sum(-1)


class FakeLorentzHead:
    geometry = "lorentz"

    def __init__(self, c=1.0):
        self.curv = torch.as_tensor(c)

    def pairwise_sim(self, a, b):
        return -geo.pairwise_dist(a, b, self.curv)

    def rowwise_sim(self, a, b):
        return -geo.dist(a, b, self.curv)


# ---------------------------------------------------------------- independent numpy references (float64)
def np_cos(a, b):
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def np_ldist(x, y, c):
    xt, yt = math.sqrt(1 / c + x @ x), math.sqrt(1 / c + y @ y)
    return math.acosh(max(1.0, -c * (x @ y - xt * yt))) / math.sqrt(c)


def np_ext_angle(p, q, c):
    "exterior angle at parent p of the triangle O-p-q, from the hyperbolic law of cosines (MERU's closed form)."
    pt, qt = math.sqrt(1 / c + p @ p), math.sqrt(1 / c + q @ q)
    cxyl = c * (p @ q - pt * qt)
    val = (qt + cxyl * pt) / (np.linalg.norm(p) * math.sqrt(cxyl**2 - 1))
    return math.acos(min(1.0, max(-1.0, val)))


def np_aperture(p, c, K=0.1):
    return math.asin(min(1.0, 2 * K / (math.sqrt(c) * np.linalg.norm(p))))


def np_ce_row(logits_row, target):
    m = max(logits_row)
    lse = m + math.log(sum(math.exp(v - m) for v in logits_row))
    return lse - logits_row[target]


def np_sim(a, b, geom, c):
    return np_cos(a, b) if geom == "euclidean" else -np_ldist(a, b, c)


def head_for(geom, c=1.0):
    return FakeCosHead() if geom == "euclidean" else FakeLorentzHead(c)


def rnd(*shape, seed=0, scale=0.5):
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(*shape, generator=g)


def N(t):
    return t.detach().double().numpy()


GEOMS = ["euclidean", "lorentz"]


# ---------------------------------------------------------------- spec reference values
def test_intra_modality_weight_reference():
    d = torch.tensor([0.0, 0.1, 1.0, 3.0])
    torch.testing.assert_close(
        L.intra_modality_weight(d), torch.tensor([0.0, 0.095163, 0.632121, 0.950213]), atol=1e-6, rtol=0
    )


@pytest.mark.parametrize("r,expected", [(1 / math.sqrt(2), 0.846574), (0.5, 0.943147), (1.0, 1.0), (2.0, 3.306853)])
def test_norm_regularizer_reference(r, expected):
    x = torch.tensor([[r * 0.6, r * 0.8, 0.0]])  # norm r, spread over components
    assert abs(L.norm_regularizer(x).item() - expected) < 1e-5


def test_norm_regularizer_is_mean_over_all_sets_and_minimal_at_inv_sqrt2():
    a, b = rnd(3, 4, seed=1), rnd(5, 4, seed=2)
    rs = np.concatenate([np.linalg.norm(N(a), axis=1), np.linalg.norm(N(b), axis=1)])
    assert abs(L.norm_regularizer(a, b).item() - np.mean(rs**2 - np.log(rs))) < 1e-5
    x = torch.tensor([[1 / math.sqrt(2), 0.0]], requires_grad=True)
    L.norm_regularizer(x).backward()
    assert x.grad.abs().max() < 1e-5


def test_norm_regularizer_finite_at_zero():
    x = torch.zeros(2, 3, requires_grad=True)
    v = L.norm_regularizer(x)
    v.backward()
    assert torch.isfinite(v) and torch.isfinite(x.grad).all()


def test_meru_entailment_reference_case():
    t, v = torch.tensor([[0.5, 0.0]]), torch.tensor([[2.0, 0.5]])
    assert abs(L.entailment_cone(t, v, 1.0).item() - 0.018414) < 1e-5
    # the same number from the numpy closed form
    assert (
        abs(np_ext_angle(np.array([0.5, 0]), np.array([2, 0.5]), 1.0) - np_aperture(np.array([0.5, 0]), 1.0) - 0.018414)
        < 1e-5
    )


def test_pep_score_toy():
    phi = torch.tensor([0.0, math.pi / 6, math.pi / 4, math.pi / 2, 2.0])
    torch.testing.assert_close(pep_score(phi), torch.tensor([1.0, 2 / 3, 0.5, 0.0, 0.0]))


def test_pep_of_exterior_angles():
    p = torch.tensor([[0.4, 0.2, 0.0]])
    assert abs(pep_score(geo.exterior_angle(p, 3 * p, 1.0)).item() - 1.0) < 1e-5  # straight outward: entailed
    assert pep_score(geo.exterior_angle(p, 0.2 * p, 1.0)).item() == 0.0  # toward the origin: phi = pi
    side = torch.tensor([[0.4, 0.9, 0.0]])
    phi = geo.exterior_angle(p, side, 1.0).item()
    assert abs(pep_score(torch.tensor(phi)).item() - max(0.0, 1 - 2 * phi / math.pi)) < 1e-6


def test_huber_conventions():
    phi = torch.tensor([0.0, 0.05, 0.1, 0.3, 1.0])
    b = 0.1
    sl1 = [0.5 * p * p / b if p < b else p - 0.5 * b for p in phi.tolist()]
    hub = [0.5 * p * p if p < b else b * (p - 0.5 * b) for p in phi.tolist()]
    torch.testing.assert_close(L.huber_penalty(phi, b, "smooth_l1"), torch.tensor(sl1))
    torch.testing.assert_close(L.huber_penalty(phi, b, "huber"), torch.tensor(hub))
    torch.testing.assert_close(L.huber_penalty(phi, b, "huber"), b * L.huber_penalty(phi, b, "smooth_l1"))
    with pytest.raises(ValueError, match="convention"):
        L.huber_penalty(phi, b, "l2")
    with pytest.raises(ValueError, match="beta"):
        L.huber_penalty(phi, 0.0)


def test_spec_weights():
    assert L.MERU_WEIGHTS == dict(contrastive=1.0, entailment=0.2)
    assert L.HYCOCLIP_WEIGHTS == dict(contrastive=1.0, entailment=0.2)
    assert L.ARGENT_WEIGHTS == dict(contrastive=1.0, adaent=0.1, reg=0.1)
    assert L.DEGLA_WEIGHTS == dict(contrastive=1.0, igc=0.1, tgc=0.1, distill=0.005)
    assert L.READ_WEIGHTS == dict(contrastive=1.0, recon=0.1, align=0.5)
    assert L.TGC_SCALE == 10.0
    cfg = L.AdaEntConfig()
    assert (cfg.beta, cfg.convention, cfg.weight_mode, cfg.weight_placement, cfg.detach_weight) == (
        0.1,
        "smooth_l1",
        "intra",
        "outside",
        True,
    )


# ---------------------------------------------------------------- contrastive losses vs explicit loops
@pytest.mark.parametrize("geom", GEOMS)
def test_clip_contrastive_matches_loop(geom):
    B, s, c = 4, 3.0, 0.7
    I, T = rnd(B, 5, seed=3), rnd(B, 5, seed=4)
    got = L.clip_contrastive(I, T, s, head_for(geom, c)).item()
    i, t = N(I), N(T)
    S = [[s * np_sim(i[a], t[b], geom, c) for b in range(B)] for a in range(B)]
    i2t = np.mean([np_ce_row(S[a], a) for a in range(B)])
    t2i = np.mean([np_ce_row([S[a][b] for a in range(B)], b) for b in range(B)])
    assert abs(got - 0.5 * (i2t + t2i)) < 1e-4


def test_meru_terms_match_loop():
    B, s, c = 3, 2.0, 1.3
    I, T = rnd(B, 4, seed=5, scale=1.0), rnd(B, 4, seed=6, scale=0.4)
    terms = L.meru_terms(I, T, s, torch.tensor(c))
    assert abs(terms["contrastive"].item() - L.clip_contrastive(I, T, s, FakeLorentzHead(c)).item()) < 1e-5
    i, t = N(I), N(T)
    ent = np.mean([max(0.0, np_ext_angle(t[k], i[k], c) - np_aperture(t[k], c)) for k in range(B)])
    assert abs(terms["entailment"].item() - ent) < 1e-4


def _boxes(B=4, D=5):
    return (
        rnd(B, D, seed=7, scale=0.9),
        rnd(B, D, seed=8, scale=0.4),
        rnd(B, D, seed=9, scale=0.7),
        rnd(B, D, seed=10, scale=0.3),
    )


@pytest.mark.parametrize("geom", GEOMS)
def test_hycoclip_contrastive_matches_loop(geom):
    I, T, Ib, Tb = _boxes()
    B, s, c = I.shape[0], 4.0, 0.8
    got = L.hycoclip_contrastive(I, T, Ib, Tb, s, head_for(geom, c)).item()
    i, t, ib, tb = map(N, (I, T, Ib, Tb))

    def ce(anchors, cols):
        return np.mean([np_ce_row([s * np_sim(anchors[a], cols[b], geom, c) for b in range(B)], a) for a in range(B)])

    assert abs(got - 0.25 * (ce(i, t) + ce(t, i) + ce(ib, t) + ce(tb, i))) < 1e-4


def test_hycoclip_entailment_matches_loop():
    I, T, Ib, Tb = _boxes()
    c = 1.0
    got = L.hycoclip_entailment(I, T, Ib, Tb, c).item()
    i, t, ib, tb = map(N, (I, T, Ib, Tb))

    def cone(par, ch, eta):
        return np.mean(
            [max(0.0, np_ext_angle(par[k], ch[k], c) - eta * np_aperture(par[k], c)) for k in range(len(par))]
        )

    want = 0.5 * (cone(t, i, 0.7) + cone(tb, ib, 0.7) + cone(ib, i, 1.2) + cone(tb, t, 1.2))
    assert want > 0
    assert abs(got - want) < 1e-4


# ---------------------------------------------------------------- ARGENT
def _np_adaent(par, ch, c, intra, cfg):
    vals = []
    for k in range(len(par)):
        phi = np_ext_angle(par[k], ch[k], c)
        weighted = cfg.weight_mode == "all" or (cfg.weight_mode == "intra" and intra)
        w = 1 - math.exp(-np_ldist(par[k], ch[k], c)) if weighted else 1.0
        x = phi if cfg.weight_placement == "outside" else w * phi
        b = cfg.beta
        if cfg.convention == "smooth_l1":
            h = 0.5 * x * x / b if x < b else x - 0.5 * b
        else:
            h = 0.5 * x * x if x < b else b * (x - 0.5 * b)
        vals.append(w * h if cfg.weight_placement == "outside" else h)
    return np.mean(vals)


@pytest.mark.parametrize("mode", ["none", "intra", "all"])
@pytest.mark.parametrize("placement", ["outside", "inside"])
@pytest.mark.parametrize("convention", ["smooth_l1", "huber"])
def test_argent_entailment_matches_loop(mode, placement, convention):
    I, T, Ib, Tb = _boxes()
    c = 0.9
    cfg = L.AdaEntConfig(weight_mode=mode, weight_placement=placement, convention=convention)
    got = L.argent_entailment(I, T, Ib, Tb, c, cfg).item()
    i, t, ib, tb = map(N, (I, T, Ib, Tb))
    want = 0.5 * (
        _np_adaent(t, i, c, False, cfg)
        + _np_adaent(tb, ib, c, False, cfg)
        + _np_adaent(ib, i, c, True, cfg)
        + _np_adaent(tb, t, c, True, cfg)
    )
    assert abs(got - want) < 1e-4 * max(1.0, want)


def test_argent_modes_differ_and_no_boxes_is_single_pair():
    I, T, Ib, Tb = _boxes()
    vals = {
        m: L.argent_entailment(I, T, Ib, Tb, 1.0, L.AdaEntConfig(weight_mode=m)).item()
        for m in ["none", "intra", "all"]
    }
    assert vals["none"] > vals["intra"] > vals["all"]  # weights are < 1, and 'all' weights more pairs
    single = L.argent_entailment(I, T, None, None, 1.0)
    torch.testing.assert_close(single, L.adaptive_entailment(T, I, 1.0, intra_modal=False))
    with pytest.raises(ValueError, match="crop and phrase"):
        L.argent_entailment(I, T, Ib, None, 1.0)


def test_argent_detach_weight_changes_gradient_only():
    I, T = rnd(4, 5, seed=11, scale=0.8), rnd(4, 5, seed=12, scale=0.3)
    grads = {}
    for detach in (True, False):
        child = I.clone().requires_grad_(True)
        v = L.adaptive_entailment(T, child, 1.0, intra_modal=True, cfg=L.AdaEntConfig(detach_weight=detach))
        v.backward()
        grads[detach] = (v.item(), child.grad.clone())
    assert abs(grads[True][0] - grads[False][0]) < 1e-7
    assert not torch.allclose(grads[True][1], grads[False][1])


def test_argent_config_rejects_unknown_options():
    for bad in [dict(weight_mode="inter"), dict(weight_placement="middle"), dict(convention="l1"), dict(beta=-1.0)]:
        with pytest.raises(ValueError, match="AdaEntConfig"):
            L.AdaEntConfig(**bad)


def test_argent_terms():
    I, T, Ib, Tb = _boxes()
    terms = L.argent_terms(I, T, Ib, Tb, 3.0, 1.0)
    assert set(terms) == {"contrastive", "adaent", "reg"}
    torch.testing.assert_close(terms["reg"], L.norm_regularizer(torch.cat([I, T, Ib, Tb])))
    torch.testing.assert_close(terms["contrastive"], L.hycoclip_contrastive(I, T, Ib, Tb, 3.0, FakeLorentzHead(1.0)))


# ---------------------------------------------------------------- hard negatives
def _neg_batch(B=3, K=2, D=6, seed=20):
    return rnd(B, D, seed=seed), rnd(B, D, seed=seed + 1), rnd(B * K, D, seed=seed + 2)


@pytest.mark.parametrize("geom", GEOMS)
def test_hard_negative_contrastive_matches_loop(geom):
    B, K, s, c = 3, 2, 5.0, 1.0
    V, T, Tn = _neg_batch(B, K)
    got = L.hard_negative_contrastive(V, T, Tn, s, head_for(geom, c)).item()
    v, t, tn = map(N, (V, T, Tn))
    cols = list(t) + list(tn)
    i2t = np.mean([np_ce_row([s * np_sim(v[i], col, geom, c) for col in cols], i) for i in range(B)])
    t2i = np.mean([np_ce_row([s * np_sim(t[i], v[j], geom, c) for j in range(B)], i) for i in range(B)])
    assert abs(got - 0.5 * (i2t + t2i)) < 1e-4


def test_hard_negative_contrastive_rejects_bad_count():
    V, T, _ = _neg_batch()
    with pytest.raises(ValueError, match="multiple"):
        L.hard_negative_contrastive(V, T, rnd(4, 6), 1.0, FakeCosHead())


@settings(max_examples=20, deadline=None)
@given(st.permutations(list(range(4))), st.integers(0, 1000))
def test_hard_negative_contrastive_is_batch_permutation_invariant(perm, seed):
    B, K = 4, 3
    V, T, Tn = _neg_batch(B, K, seed=seed)
    perm = torch.tensor(perm)
    negperm = (perm[:, None] * K + torch.arange(K)).reshape(-1)  # move each sample's K-block with the sample
    a = L.hard_negative_contrastive(V, T, Tn, 7.0, FakeCosHead())
    b = L.hard_negative_contrastive(V[perm], T[perm], Tn[negperm], 7.0, FakeCosHead())
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- DeGLA IGC / TGC and the tiled-mask bug
def _loop_grounded(q, pos, negs, K, scale, geom, c):
    "explicit loop: row i -> CE([scale*sim(q_i,pos_i), scale*sim(q_i, negs[i*K+k]) for k], 0)."
    out = []
    for i in range(len(q)):
        row = [scale * np_sim(q[i], pos[i], geom, c)] + [
            scale * np_sim(q[i], negs[i * K + k], geom, c) for k in range(K)
        ]
        out.append(np_ce_row(row, 0))
    return float(np.mean(out))


def _tiled_bug_igc(V, T, Tn, scale, head):
    "the released-code mistake, re-implemented: sample i takes rows k*B + i (tiling) instead of i*K + k."
    B, K = V.shape[0], Tn.shape[0] // V.shape[0]
    idx = (torch.arange(K)[None, :] * B + torch.arange(B)[:, None]).reshape(-1)
    negs = head.rowwise_sim(V.repeat_interleave(K, 0), Tn[idx]).view(B, K)
    logits = scale * torch.cat([head.rowwise_sim(V, T)[:, None], negs], 1)
    return F.cross_entropy(logits, torch.zeros(B, dtype=torch.long))


def _per_sample_negatives(B=3, K=2, D=6):
    """negatives whose similarity to their own image differs strongly per sample: sample 0's negatives are near image 0
    (hard), the others' far, so taking another sample's negatives changes the value."""
    V = torch.eye(D)[:B] * 0.8
    T = V + 0.05 * rnd(B, D, seed=30)
    Tn = torch.stack(
        [V[i] * (0.9 if i == 0 else -0.5) + 0.3 * rnd(D, seed=40 + i * K + k) for i in range(B) for k in range(K)]
    )
    return V, T, Tn


@pytest.mark.parametrize("geom", GEOMS)
def test_igc_uses_own_negatives_and_catches_tiled_bug(geom):
    B, K, s, c = 3, 2, 6.0, 1.0
    V, T, Tn = _per_sample_negatives(B, K)
    head = head_for(geom, c)
    ours = L.image_grounded_contrast(V, T, Tn, s, head).item()
    want = _loop_grounded(N(V), N(T), N(Tn), K, s, geom, c)
    assert abs(ours - want) < 1e-4
    assert abs(_tiled_bug_igc(V, T, Tn, s, head).item() - ours) > 1e-2


@pytest.mark.parametrize("geom", GEOMS)
def test_tgc_uses_teacher_positive_and_own_negatives(geom):
    B, K, c = 3, 2, 1.0
    _, T, Tn = _per_sample_negatives(B, K)
    Tt = T + 0.1 * rnd(*T.shape, seed=50)  # teacher embedding of the same captions
    head = head_for(geom, c)
    Ts = T.clone().requires_grad_(True)
    Tt_req = Tt.clone().requires_grad_(True)
    ours = L.text_grounded_contrast(Ts, Tt_req, Tn, head)
    want = _loop_grounded(N(T), N(Tt), N(Tn), K, 10.0, geom, c)
    assert abs(ours.item() - want) < 1e-4
    ours.backward()
    assert Tt_req.grad is None and Ts.grad is not None  # no gradient into the teacher
    # the tiled variant of the mask gives another value on these negatives
    B_idx = (torch.arange(K)[None, :] * B + torch.arange(B)[:, None]).reshape(-1)
    bug = L.text_grounded_contrast(T, Tt, Tn[B_idx], head).item()
    assert abs(bug - ours.item()) > 1e-2


def test_own_negative_sims_layout():
    B, K, D = 2, 3, 4
    q = rnd(B, D, seed=60)
    neg = rnd(B * K, D, seed=61)
    S = L.own_negative_sims(q, neg, FakeCosHead())
    for i in range(B):
        for k in range(K):
            assert abs(S[i, k].item() - np_cos(N(q[i]), N(neg[i * K + k]))) < 1e-5
    with pytest.raises(ValueError, match="K >= 1"):
        L.own_negative_sims(q, neg[:0], FakeCosHead())


def test_self_distillation_is_a_sum_of_normalised_squared_distances():
    a, b, c_ = rnd(3, 4, seed=70), rnd(3, 4, seed=71), rnd(6, 4, seed=72)
    ta, tb, tc = rnd(3, 4, seed=73), rnd(3, 4, seed=74), rnd(6, 4, seed=75)
    got = L.self_distillation([a, b, c_], [ta, tb, tc]).item()
    want = 0.0
    for s_, t_ in [(a, ta), (b, tb), (c_, tc)]:
        for r in range(len(s_)):
            x, y = N(s_[r]), N(t_[r])
            want += float(np.sum((x / np.linalg.norm(x) - y / np.linalg.norm(y)) ** 2))
    assert abs(got - want) < 1e-4
    # a sum: duplicating the batch doubles it
    doubled = L.self_distillation([torch.cat([a, a])], [torch.cat([ta, ta])]).item()
    assert abs(doubled - 2 * L.self_distillation([a], [ta]).item()) < 1e-5
    with pytest.raises(ValueError, match="student"):
        L.self_distillation([a], [tc])


# ---------------------------------------------------------------- READ
@pytest.mark.parametrize("geom", GEOMS)
def test_paraphrase_alignment_matches_loop(geom):
    B, s, c = 4, 3.0, 1.0
    P, T = rnd(B, 5, seed=80), rnd(B, 5, seed=81)
    got = L.paraphrase_alignment(P, T, s, head_for(geom, c)).item()
    p, t = N(P), N(T)
    want = np.mean([np_ce_row([s * np_sim(p[i], t[j], geom, c) for j in range(B)], i) for i in range(B)])
    assert abs(got - want) < 1e-4


def test_reconstruction_loss_calls_head_and_checks():
    pooled = rnd(2, 8)
    seen = {}

    def head(p, targets):
        seen["targets"] = targets
        return (p**2).mean()

    v = L.reconstruction_loss(head, pooled, ["a cat", "a dog"])
    assert seen["targets"] == ["a cat", "a dog"] and abs(v.item() - (pooled**2).mean().item()) < 1e-7
    with pytest.raises(ValueError, match="targets"):
        L.reconstruction_loss(head, pooled, ["x"])
    with pytest.raises(ValueError, match="scalar"):
        L.reconstruction_loss(lambda p, t: p.sum(-1), pooled, ["a", "b"])


# ---------------------------------------------------------------- validation of negatives
def test_validate_negatives():
    pos = ["a red cube left of a ball", "a dog on a mat"]
    assert (
        L.validate_negatives(
            pos, [["a ball left of a red cube", "a blue cube left of a ball"], ["a mat on a dog", "a cat on a mat"]]
        )
        == 2
    )
    assert L.validate_negatives(pos, [[], []]) == 0
    with pytest.raises(ValueError, match=r"sample 1 is empty"):
        L.validate_negatives(pos, [["x"], [""]])
    with pytest.raises(ValueError, match=r"sample 0 equals its positive: 'A Red cube  left of a ball'"):
        L.validate_negatives(pos, [["A Red cube  left of a ball"], ["a cat"]])
    with pytest.raises(ValueError, match="same number"):
        L.validate_negatives(pos, [["x", "y"], ["z"]])
    with pytest.raises(ValueError, match="2 positives but 1"):
        L.validate_negatives(pos, [["x"]])
    with pytest.raises(ValueError, match="not a string"):
        L.validate_negatives(pos, [["x"], [None]])
    assert L.flatten_negatives([["a0", "a1"], ["b0", "b1"]]) == ["a0", "a1", "b0", "b1"]


# ---------------------------------------------------------------- gradients
def _all_losses(I, T, Ib, Tb, Tn, c, geom):
    head = head_for(geom, c)
    out = dict(
        clip=L.clip_contrastive(I, T, 10.0, head),
        negclip=L.hard_negative_contrastive(I, T, Tn, 10.0, head),
        igc=L.image_grounded_contrast(I, T, Tn, 10.0, head),
        tgc=L.text_grounded_contrast(T, T.detach().clone(), Tn, head),
        distill=L.self_distillation([I, T, Tn], [I.detach().clone(), T.detach().clone(), Tn.detach().clone()]),
        align=L.paraphrase_alignment(Tb, T, 10.0, head),
    )
    if geom == "lorentz":
        out.update(
            meru=sum(L.meru_terms(I, T, 10.0, c).values()),
            hycoclip=sum(L.hycoclip_terms(I, T, Ib, Tb, 10.0, c).values()),
            argent=sum(L.argent_terms(I, T, Ib, Tb, 10.0, c).values()),
            argent_all_inside=L.argent_entailment(
                I, T, Ib, Tb, c, L.AdaEntConfig(weight_mode="all", weight_placement="inside", detach_weight=False)
            ),
        )
    return out


@pytest.mark.parametrize("geom", GEOMS)
@pytest.mark.parametrize("identical", [False, True])
def test_gradients_finite(geom, identical):
    B, K, D = 3, 2, 5
    base = rnd(B, D, seed=90)
    xs = [base.clone() if identical else rnd(B, D, seed=91 + j) for j in range(4)]
    tn = torch.cat([base, base]) if identical else rnd(B * K, D, seed=99)
    leaves = [x.clone().requires_grad_(True) for x in xs + [tn]]
    c = torch.tensor(1.0, requires_grad=(geom == "lorentz"))
    for name, v in _all_losses(*leaves, c, geom).items():
        assert torch.isfinite(v), (name, v)
        grads = torch.autograd.grad(v, leaves + ([c] if geom == "lorentz" else []), allow_unused=True)
        for g in grads:
            assert g is None or torch.isfinite(g).all(), (name, identical)


def test_weighted_total():
    terms = dict(
        contrastive=torch.tensor(1.0), igc=torch.tensor(2.0), tgc=torch.tensor(3.0), distill=torch.tensor(40.0)
    )
    assert abs(L.weighted_total(terms, L.DEGLA_WEIGHTS).item() - (1 + 0.2 + 0.3 + 0.2)) < 1e-6
    with pytest.raises(KeyError, match="igc"):
        L.weighted_total(dict(contrastive=torch.tensor(1.0)), L.DEGLA_WEIGHTS)
    assert L.weighted_total(dict(contrastive=torch.tensor(1.0)), dict(contrastive=1.0, igc=0.0)).item() == 1.0
    with pytest.raises(ValueError, match="zero"):
        L.weighted_total(dict(contrastive=torch.tensor(1.0)), dict(contrastive=0.0))


def test_similarity_of():
    class H:
        geometry = "lorentz"
        curv = torch.tensor(2.0)

    s = L.similarity_of(H())
    a, b = rnd(2, 3, seed=1), rnd(2, 3, seed=2)
    torch.testing.assert_close(s.pairwise_sim(a, b), FakeLorentzHead(2.0).pairwise_sim(a, b))
    assert isinstance(L.similarity_of(type("E", (), {"geometry": "euclidean"})()), L.CosineSimilarity)
    with pytest.raises(ValueError, match="geometry"):
        L.similarity_of(object())


# ---------------------------------------------------------------- data parallelism: local anchors vs gathered columns
@pytest.mark.parametrize("geom", GEOMS)
def test_simulated_ranks_average_to_single_process(geom):
    "W ranks, each with b rows + gathered columns + offset rank·b: the mean of local losses is the global loss."
    W, b, K, s, c = 2, 3, 2, 4.0, 1.0
    B = W * b
    I, T, Ib, Tb = (rnd(B, 5, seed=100 + j) for j in range(4))
    Tn = rnd(B * K, 5, seed=110)
    head = head_for(geom, c)
    sl = lambda x, r, k=1: x[r * b * k : (r + 1) * b * k]
    cases = {
        "clip": (
            lambda: L.clip_contrastive(I, T, s, head),
            lambda r: L.clip_contrastive(sl(I, r), sl(T, r), s, head, all_image=I, all_text=T, offset=r * b),
        ),
        "hycoclip": (
            lambda: L.hycoclip_contrastive(I, T, Ib, Tb, s, head),
            lambda r: L.hycoclip_contrastive(
                sl(I, r), sl(T, r), sl(Ib, r), sl(Tb, r), s, head, all_image=I, all_text=T, offset=r * b
            ),
        ),
        "negclip": (
            lambda: L.hard_negative_contrastive(I, T, Tn, s, head),
            lambda r: L.hard_negative_contrastive(
                sl(I, r), sl(T, r), sl(Tn, r, K), s, head, all_image=I, all_text=T, all_neg=Tn, offset=r * b
            ),
        ),
        "align": (
            lambda: L.paraphrase_alignment(Tb, T, s, head),
            lambda r: L.paraphrase_alignment(sl(Tb, r), sl(T, r), s, head, all_text=T, offset=r * b),
        ),
    }
    for name, (full, local) in cases.items():
        torch.testing.assert_close(sum(local(r) for r in range(W)) / W, full(), atol=1e-5, rtol=1e-5, msg=name)
    with pytest.raises(ValueError, match="offset"):
        L.diagonal_ce(torch.zeros(3, 4), offset=2)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(GEOMS))
def test_igc_tgc_invariant_to_order_within_own_negatives_only(seed, geom):
    "Shuffling the K negatives inside each sample's block changes nothing; moving a block to another sample does."
    B, K = 3, 3
    _, T, Tn = _per_sample_negatives(B, K)
    V = T + 0.1 * rnd(B, T.shape[1], seed=seed)
    g = torch.Generator().manual_seed(seed)
    within = torch.cat([i * K + torch.randperm(K, generator=g) for i in range(B)])
    head = head_for(geom)
    a = L.image_grounded_contrast(V, T, Tn, 6.0, head)
    torch.testing.assert_close(L.image_grounded_contrast(V, T, Tn[within], 6.0, head), a, atol=1e-5, rtol=1e-5)
    Tt = T + 0.05
    b = L.text_grounded_contrast(T, Tt, Tn, head)
    torch.testing.assert_close(L.text_grounded_contrast(T, Tt, Tn[within], head), b, atol=1e-5, rtol=1e-5)
    swapped = torch.cat([torch.arange(K, 2 * K), torch.arange(0, K), torch.arange(2 * K, 3 * K)])  # blocks 0 <-> 1
    assert abs(L.image_grounded_contrast(V, T, Tn[swapped], 6.0, head).item() - a.item()) > 1e-3


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.1, 50.0))
def test_contrastive_losses_bounded_below_and_at_log_n_for_equal_sims(seed, s):
    B, K = 4, 2
    V, T, Tn = _neg_batch(B, K, seed=seed)
    for fn in (
        lambda: L.clip_contrastive(V, T, s, FakeCosHead()),
        lambda: L.hard_negative_contrastive(V, T, Tn, s, FakeCosHead()),
    ):
        assert fn().item() >= 0
    same = torch.ones(B, 5)  # all similarities equal -> uniform softmax
    assert abs(L.clip_contrastive(same, same, s, FakeCosHead()).item() - math.log(B)) < 1e-4
    negs = torch.ones(B * K, 5)
    want = 0.5 * (math.log(B * (1 + K)) + math.log(B))
    assert abs(L.hard_negative_contrastive(same, same, negs, s, FakeCosHead()).item() - want) < 1e-4
