"""hierbench.recipes.registry: the recipe table against the spec, recipe validation and `replace`, and `compute_loss`
for every
recipe on a tiny batch with a fake model obeying the ARCHITECTURE.md contract (independent of
hierbench.models.family)."""

import os
import copy
import dataclasses
import json
import math
import zlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from hierbench import geometry as geo
from hierbench.recipes import losses as L
from hierbench.recipes import registry as R


# ---------------------------------------------------------------- the spec's table, written out independently
SPEC_WEIGHTS = {
    "clip": {"contrastive": 1.0},
    "meru": {"contrastive": 1.0, "entailment": 0.2},
    "hycoclip": {"contrastive": 1.0, "entailment": 0.2},
    "argent": {"contrastive": 1.0, "adaent": 0.1, "reg": 0.1},
    "argent-no-weight": {"contrastive": 1.0, "adaent": 0.1, "reg": 0.1},
    "argent-weight-all": {"contrastive": 1.0, "adaent": 0.1, "reg": 0.1},
    "argent-no-reg": {"contrastive": 1.0, "adaent": 0.1, "reg": 0.0},
    "negclip": {"contrastive": 1.0},
    "degla": {"contrastive": 1.0, "igc": 0.1, "tgc": 0.1, "distill": 0.005},
    "degla-no-distill": {"contrastive": 1.0, "igc": 0.1, "tgc": 0.1, "distill": 0.0},
    "read": {"contrastive": 1.0, "recon": 0.1, "align": 0.5},
    "read-recon-only": {"contrastive": 1.0, "recon": 0.1, "align": 0.0},
    "read-align-only": {"contrastive": 1.0, "recon": 0.0, "align": 0.5},
    "read-recon-self": {"contrastive": 1.0, "recon": 0.1, "align": 0.5},
    "argent+degla": {"contrastive": 1.0, "igc": 0.1, "tgc": 0.1, "distill": 0.005, "adaent": 0.1, "reg": 0.1},
    "argent+read": {"contrastive": 1.0, "recon": 0.1, "align": 0.5, "adaent": 0.1, "reg": 0.1},
}
SPEC_SHAPE = {  # geometry, contrastive, stage, init_from, K, boxes
    "clip": ("euclidean", "clip", "pretrain", None, 0, False),
    "meru": ("lorentz", "clip", "pretrain", None, 0, False),
    "hycoclip": ("lorentz", "hycoclip", "pretrain", None, 0, True),
    "argent": ("lorentz", "hycoclip", "pretrain", None, 0, True),
    "negclip": ("euclidean", "negclip", "finetune", "clip", 1, False),
    "degla": ("euclidean", "negclip", "finetune", "clip", 4, False),
    "read": ("euclidean", "negclip", "finetune", "clip", 3, False),
    "argent+degla": ("lorentz", "negclip", "finetune", "argent", 4, False),
    "argent+read": ("lorentz", "negclip", "finetune", "argent", 3, False),
}


def test_registry_has_every_required_recipe():
    assert set(SPEC_WEIGHTS) <= set(R.list_recipes())
    with pytest.raises(KeyError, match="unknown recipe 'nope'"):
        R.get_recipe("nope")


@pytest.mark.parametrize("name", list(SPEC_WEIGHTS))
def test_recipe_weights_match_spec(name):
    assert R.get_recipe(name).weights == SPEC_WEIGHTS[name]


@pytest.mark.parametrize("name", list(SPEC_SHAPE))
def test_recipe_shape_matches_spec(name):
    r = R.get_recipe(name)
    assert (r.geometry, r.contrastive, r.stage, r.init_from, r.num_negatives, r.use_boxes) == SPEC_SHAPE[name]


def test_recipe_options_and_needs():
    g = R.get_recipe
    assert g("argent").adaent == L.AdaEntConfig()
    assert g("argent-no-weight").adaent.weight_mode == "none"
    assert g("argent-weight-all").adaent.weight_mode == "all"
    assert g("read-recon-self").recon_target == "captions" and g("read").recon_target == "alternatives"
    assert g("degla").ema_decay == 0.9996 and g("argent+degla").ema_decay == 0.9996
    assert g("degla").tgc_scale == 10.0
    for n in R.list_recipes():
        r = g(n)
        assert r.needs_teacher == (n in {"degla", "degla-no-distill", "argent+degla"}), n
        assert r.needs_decoder == (n in {"read", "read-recon-only", "read-recon-self", "argent+read"}), n
        if r.init_from is not None:
            assert r.init_from in R.list_recipes() and g(r.init_from).geometry == r.geometry


def test_optimizer_defaults_world_and_paper():
    g = R.get_recipe
    d = g("degla").paper
    assert (d.lr, d.weight_decay, d.betas, d.eps, d.warmup_steps, d.epochs, d.batch_size) == (
        1e-6,
        0.1,
        (0.9, 0.98),
        1e-6,
        50,
        5,
        256,
    )
    r = g("read").paper
    assert (r.lr, r.weight_decay, r.warmup_steps, r.batch_size, r.epochs, r.precision) == (
        1e-5,
        0.1,
        50,
        256,
        5,
        "bf16",
    )
    m = g("meru").paper
    assert (m.lr, m.weight_decay, m.betas) == (5e-4, 0.2, (0.9, 0.98))
    for n in R.list_recipes():
        for o in (g(n).world, g(n).paper):
            assert o.lr > 0 and o.batch_size > 0 and o.source
        assert g(n).world.steps  # the trainer counts steps
        ov = g(n).world.train_overrides()
        assert set(ov) == {
            "lr",
            "weight_decay",
            "betas",
            "eps",
            "warmup_steps",
            "batch_size",
            "steps",
            "grad_clip",
            "min_lr_ratio",
        }


def test_recipe_fields():
    g = R.get_recipe
    assert g("clip").fields == ("images", "captions")
    assert g("argent").fields == ("images", "captions", "crops", "phrases")
    assert g("degla").fields == ("images", "captions", "negatives")
    assert g("read").fields == ("images", "captions", "negatives", "paraphrases", "alternatives")
    assert g("read-align-only").fields == ("images", "captions", "negatives", "paraphrases")
    assert g("read-recon-self").fields == ("images", "captions", "negatives", "paraphrases")
    assert g("read").item_fields == ("negatives", "paraphrase", "alternative")
    assert g("hycoclip").item_fields == ("crop", "phrase") and g("clip").item_fields == ()
    assert g("clip").model_kwargs() == {"geometry": "euclidean"}
    assert g("meru").model_kwargs() == {"geometry": "lorentz", "curv_init": 1.0, "learn_curv": True}


def test_replace_merges_and_validates():
    a = R.get_recipe("argent")
    b = a.replace(weights={"reg": 0.0}, adaent={"weight_placement": "inside"}, world={"lr": 3e-4})
    assert b.weights == {"contrastive": 1.0, "adaent": 0.1, "reg": 0.0}
    assert b.adaent.weight_placement == "inside" and b.adaent.beta == 0.1 and b.world.lr == 3e-4
    assert a.weights["reg"] == 0.1  # the registered recipe is untouched
    with pytest.raises(TypeError, match="no field"):
        a.replace(colour="red")
    with pytest.raises(ValueError, match="lorentz"):
        R.get_recipe("clip").replace(weights={"entailment": 0.2})
    with pytest.raises(ValueError, match="unknown loss term"):
        a.replace(weights={"foo": 1.0})
    with pytest.raises(ValueError, match="init_from"):
        a.replace(stage="finetune")
    with pytest.raises(ValueError, match="contrastive"):
        a.replace(weights={"contrastive": 0.0})
    with pytest.raises(ValueError, match="num_negatives"):
        R.get_recipe("degla").replace(num_negatives=0)
    with pytest.raises(ValueError, match="teacher"):
        R.get_recipe("degla").replace(ema_decay=None)
    assert R.register_recipe(a) is a  # the same recipe again (a re-run cell, a re-imported plugin): nothing changes
    with pytest.raises(ValueError, match="shadows a built-in recipe"):
        R.register_recipe(b)
    R.register_recipe(dataclasses.replace(b, name="argent-test-replace"))
    with pytest.raises(ValueError, match="already registered"):
        R.register_recipe(dataclasses.replace(a, name="argent-test-replace"))
    with pytest.raises(TypeError, match="read-only"):
        a.weights["reg"] = 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.num_negatives = 3
    assert dataclasses.asdict(a)["weights"] == {"contrastive": 1.0, "adaent": 0.1, "reg": 0.1}
    assert copy.deepcopy(a) == a and json.dumps(dict(a.weights))


def test_recipes_table():
    t = R.recipes_table()
    assert list(t.index) == R.list_recipes()
    assert t.loc["degla", "lr (paper)"] == 1e-6 and t.loc["degla", "K"] == 4
    assert "lr (world)" in t.columns and "batch_size (paper)" in t.columns


# ---------------------------------------------------------------- a fake model obeying the contract
VOCAB, WIDTH, DIM, S = 101, 16, 8, 4


def _word_ids(texts):
    ids, offsets = [], []
    for t in texts:
        offsets.append(len(ids))
        ids += [zlib.crc32(w.encode()) % VOCAB for w in t.lower().split()] or [0]
    return torch.tensor(ids), torch.tensor(offsets)


class FakeHead(nn.Module):
    def __init__(self, geometry):
        super().__init__()
        self.geometry = geometry
        self.log_curv = nn.Parameter(torch.tensor(0.0))

    @property
    def curv(self):
        return self.log_curv.exp() if self.geometry == "lorentz" else None

    def forward(self, u):
        return F.normalize(u, dim=-1) if self.geometry == "euclidean" else geo.exp_map0(0.5 * u, self.curv)

    def pairwise_sim(self, a, b):
        return a @ b.T if self.geometry == "euclidean" else -geo.pairwise_dist(a, b, self.curv)

    def rowwise_sim(self, a, b):
        return (a * b).sum(-1) if self.geometry == "euclidean" else -geo.dist(a, b, self.curv)


class FakeModel(nn.Module):
    def __init__(self, geometry, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.img = nn.Linear(3 * S * S, DIM)
        self.bag = nn.EmbeddingBag(VOCAB, WIDTH, mode="mean")
        self.txt = nn.Linear(WIDTH, DIM)
        self.head = FakeHead(geometry)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))
        self.calls = []

    def encode_image(self, images):
        self.calls.append(("image", images.shape[0]))
        return self.head(self.img(images.flatten(1)))

    def encode_text(self, texts, return_pooled=False):
        self.calls.append(("text", len(texts)))
        pooled = self.bag(*_word_ids(texts))
        emb = self.head(self.txt(pooled))
        return (emb, pooled) if return_pooled else emb

    def logit_scale_exp(self):
        return self.logit_scale.exp().clamp(max=100)


class FakeRecon(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(WIDTH, VOCAB)
        self.targets = None

    def forward(self, pooled, targets):
        self.targets = list(targets)
        return F.cross_entropy(self.proj(pooled), _word_ids([t.split()[-1] for t in targets])[0])


def tiny_batch(B=3, K=4):
    b = R.demo_batch(B=B, K=K, image_size=S, seed=1)
    return b


def _setup(name):
    r = R.get_recipe(name)
    model = FakeModel(r.geometry)
    teacher = copy.deepcopy(model).requires_grad_(False) if r.needs_teacher else None
    recon = FakeRecon() if r.needs_decoder else None
    return r, model, teacher, recon


@pytest.mark.parametrize("name", list(SPEC_WEIGHTS))
def test_compute_loss_every_recipe(name):
    r, model, teacher, recon = _setup(name)
    batch = tiny_batch(K=max(r.num_negatives, 1))
    loss, terms = R.compute_loss(r, model, batch, teacher=teacher, recon_head=recon)
    assert loss.ndim == 0 and torch.isfinite(loss)
    active = {k for k, w in r.weights.items() if w}
    assert set(terms) == active
    for k, v in terms.items():
        assert v.ndim == 0 and torch.isfinite(v) and not v.requires_grad, k
    assert abs(loss.item() - sum(r.weights[k] * terms[k].item() for k in terms)) < 1e-4 * max(1.0, loss.item())
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert model.txt.weight.grad.abs().sum() > 0 and model.img.weight.grad.abs().sum() > 0
    if teacher is not None:
        assert all(p.grad is None for p in teacher.parameters())
    if recon is not None:
        assert recon.proj.weight.grad.abs().sum() > 0
        want = batch["alternatives"] if r.recon_target == "alternatives" else batch["captions"]
        assert recon.targets == want
    # one text call and one image call per step (plus the teacher's own calls)
    assert [c[0] for c in model.calls] == ["text", "image"]


def test_compute_loss_terms_equal_direct_losses_degla():
    r, model, teacher, _ = _setup("degla")
    with torch.no_grad():  # make the teacher differ from the student so TGC and distill are non-trivial
        for p in teacher.parameters():
            p.add_(0.05 * torch.randn_like(p))
    batch = tiny_batch(K=4)
    loss, terms = R.compute_loss(r, model, batch, teacher=teacher)
    # B = 3 images, K = 4 negatives each
    flat = L.flatten_negatives(batch["negatives"])
    v = model.encode_image(batch["images"])
    t = model.encode_text(batch["captions"])
    tn = model.encode_text(flat)
    s = model.logit_scale_exp()
    head = model.head
    torch.testing.assert_close(
        terms["contrastive"], L.hard_negative_contrastive(v, t, tn, s, head).detach(), atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(
        terms["igc"], L.image_grounded_contrast(v, t, tn, s, head).detach(), atol=1e-5, rtol=1e-5
    )
    tt = teacher.encode_text(batch["captions"])
    torch.testing.assert_close(
        terms["tgc"], L.text_grounded_contrast(t, tt, tn, head, 10.0).detach(), atol=1e-5, rtol=1e-5
    )
    want_d = L.self_distillation([v, t, tn], [teacher.encode_image(batch["images"]), tt, teacher.encode_text(flat)])
    torch.testing.assert_close(terms["distill"], want_d.detach(), atol=1e-5, rtol=1e-5)
    assert terms["distill"] > 0


def test_compute_loss_terms_equal_direct_losses_argent():
    r, model, _, _ = _setup("argent")
    batch = tiny_batch()
    _, terms = R.compute_loss(r, model, batch)
    v, vb = model.encode_image(batch["images"]), model.encode_image(batch["crops"])
    t, tb = model.encode_text(batch["captions"]), model.encode_text(batch["phrases"])
    want = L.argent_terms(v, t, vb, tb, model.logit_scale_exp(), model.head.curv)
    for k in want:
        torch.testing.assert_close(terms[k], want[k].detach(), atol=1e-5, rtol=1e-5)


def test_compute_loss_argent_plus_degla_uses_lorentz_sim():
    r, model, teacher, _ = _setup("argent+degla")
    batch = tiny_batch(K=4)
    _, terms = R.compute_loss(r, model, batch, teacher=teacher)
    v, t = model.encode_image(batch["images"]), model.encode_text(batch["captions"])
    tn = model.encode_text(L.flatten_negatives(batch["negatives"]))
    lor = L.LorentzSimilarity(model.head.curv)
    torch.testing.assert_close(
        terms["igc"], L.image_grounded_contrast(v, t, tn, model.logit_scale_exp(), lor).detach(), atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(
        terms["adaent"], L.argent_entailment(v, t, None, None, model.head.curv).detach(), atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(terms["reg"], L.norm_regularizer(v, t).detach(), atol=1e-5, rtol=1e-5)


def test_compute_loss_errors():
    r, model, teacher, recon = _setup("degla")
    batch = tiny_batch(K=4)
    with pytest.raises(ValueError, match="teacher"):
        R.compute_loss(r, model, batch)
    with pytest.raises(ValueError, match="lorentz"):
        R.compute_loss(R.get_recipe("meru"), model, batch)
    bad = dict(batch)
    del bad["negatives"]
    with pytest.raises(KeyError, match="negatives"):
        R.compute_loss(r, model, bad, teacher=teacher)
    bad = dict(batch, negatives=[list(n) for n in batch["negatives"]])
    bad["negatives"][2][1] = batch["captions"][2]
    with pytest.raises(ValueError, match="negative 1 of sample 2 equals its positive"):
        R.compute_loss(r, model, bad, teacher=teacher)
    bad = dict(batch, negatives=[[] for _ in batch["captions"]])
    with pytest.raises(ValueError, match="K = 0"):
        R.compute_loss(r, model, bad, teacher=teacher)
    rr, m2, _, _ = _setup("read")
    with pytest.raises(ValueError, match="recon_head"):
        R.compute_loss(rr, m2, batch)
    bad = dict(batch, images=batch["images"][:2])
    with pytest.raises(ValueError, match="'images' has 2 items"):
        R.compute_loss(r, model, bad, teacher=teacher)
    bad = dict(batch, paraphrases=batch["paraphrases"][:2])
    with pytest.raises(ValueError, match="paraphrases"):
        R.compute_loss(rr, m2, bad, recon_head=FakeRecon())


def test_make_loss_fn_matches_compute_loss():
    r, model, teacher, _ = _setup("degla")
    batch = tiny_batch(K=4)
    fn = R.make_loss_fn("degla")
    a, ta = fn(model, batch, teacher)
    b, tb = R.compute_loss(r, model, batch, teacher)
    torch.testing.assert_close(a, b)
    assert fn.recipe is R.get_recipe("degla")


def test_demo_batch_is_valid():
    b = R.demo_batch(B=5, K=4)
    assert L.validate_negatives(b["captions"], b["negatives"]) == 4
    assert len(set(b["captions"])) == 5
    assert all(a != c for a, c in zip(b["alternatives"], b["captions"]))


def test_real_world_debug_model_if_available():
    models = pytest.importorskip("hierbench.models.family")
    if "world-debug" not in getattr(models, "ARCHS", {}):
        pytest.skip("no world-debug preset")
    for name in ["clip", "argent+degla"]:
        r = R.get_recipe(name)
        m = models.create_model("world-debug", **r.model_kwargs())
        size = m.image_size if isinstance(m.image_size, int) else m.image_size[0]
        teacher = models.EMATeacher(m, decay=r.ema_decay) if r.needs_teacher else None
        loss, terms = R.compute_loss(r, m, R.demo_batch(B=3, K=4, image_size=size), teacher=teacher)
        assert torch.isfinite(loss) and set(terms) == {k for k, w in r.weights.items() if w}
        loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


# ---------------------------------------------------------------- two gloo processes == one process
def _dist_worker(rank, world, init_file, out_dir, names):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init_file, rank=rank, world_size=world)
    try:
        for name in names:
            r, model, teacher, recon = _setup_seeded(name)
            batch = tiny_batch(B=4, K=max(r.num_negatives, 1))
            b = 4 // world
            shard = {k: v[rank * b : (rank + 1) * b] for k, v in batch.items()}
            loss, terms = R.compute_loss(r, model, shard, teacher=teacher, recon_head=recon)
            loss.backward()
            params = [
                p for p in list(model.parameters()) + (list(recon.parameters()) if recon else []) if p.requires_grad
            ]
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            for g in grads:
                dist.all_reduce(g)
                g /= world
            lt = loss.detach().clone()
            dist.all_reduce(lt)
            lt /= world
            if rank == 0:
                torch.save({"loss": lt, "grads": grads}, f"{out_dir}/{name}.pt")
        dist.barrier()  # both ranks finished every collective before either tears gloo down
    finally:
        dist.destroy_process_group()
    # leave without running C++ static destructors: gloo's worker threads sometimes abort the interpreter's normal
    # exit ("terminate called without an active exception") after all results are written
    os._exit(0)


def _setup_seeded(name):
    r, model, teacher, recon = _setup(name)
    torch.manual_seed(1)
    if teacher is not None:
        with torch.no_grad():
            for p in teacher.parameters():
                p.add_(0.05 * torch.randn_like(p))
    if recon is not None:
        recon = FakeRecon()
        torch.manual_seed(2)
        recon.proj.reset_parameters()
    return r, model, teacher, recon


def test_two_gloo_processes_match_one_process(tmp_path):
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available():
        pytest.skip("torch.distributed not available")
    names = ["hycoclip", "argent+degla", "read"]
    mp.spawn(_dist_worker, args=(2, f"file://{tmp_path / 'init'}", str(tmp_path), names), nprocs=2, join=True)
    for name in names:
        r, model, teacher, recon = _setup_seeded(name)
        batch = tiny_batch(B=4, K=max(r.num_negatives, 1))
        loss, _ = R.compute_loss(r, model, batch, teacher=teacher, recon_head=recon)
        loss.backward()
        params = [p for p in list(model.parameters()) + (list(recon.parameters()) if recon else []) if p.requires_grad]
        got = torch.load(tmp_path / f"{name}.pt", weights_only=True)
        torch.testing.assert_close(got["loss"], loss.detach(), atol=1e-5, rtol=1e-5, msg=name)
        for p, g in zip(params, got["grads"]):
            want = p.grad if p.grad is not None else torch.zeros_like(p)
            torch.testing.assert_close(g, want, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("name", ["argent", "argent+degla", "read"])
def test_compute_loss_under_bf16_autocast_keeps_terms_float32(name):
    "Encoders may run in bf16 under autocast; the geometry and losses run in float32 (close to the fp32 result)."
    r, model, teacher, recon = _setup_seeded(name)
    batch = tiny_batch(K=max(r.num_negatives, 1))
    ref, ref_terms = R.compute_loss(r, model, batch, teacher=teacher, recon_head=recon)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, terms = R.compute_loss(r, model, batch, teacher=teacher, recon_head=recon)
    assert loss.dtype == torch.float32 and all(v.dtype == torch.float32 for v in terms.values())
    assert torch.isfinite(loss)
    for k in ref_terms:
        assert abs(terms[k].item() - ref_terms[k].item()) < 0.05 * max(1.0, abs(ref_terms[k].item())), k
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
