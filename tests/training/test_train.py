"""Tests of hierbench.training.trainer: optimizer groups, schedule, clipping, NaN guard, atomic checkpoints, exact
resume, EMA."""

import json
import math
import os
import random
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from hierbench.training import trainer as T
from hierbench.recipes import recipe_run as J
from hierbench.training.trainer import TrainConfig, train, read_metrics, NonFiniteLossError


# ---------------------------------------------------------------- a tiny model, data and loss
class Tiny(nn.Module):
    "Two linear 'towers', a norm, a dropout (uses the torch RNG) and a learned log-scale with a clamp hook."

    def __init__(self, d_in=6, d=4, p_drop=0.1):
        super().__init__()
        self.img, self.txt = nn.Linear(d_in, d), nn.Linear(d_in, d)
        self.ln = nn.LayerNorm(d)
        self.drop = nn.Dropout(p_drop)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(10.0)))
        self.clamp_calls = 0

    def logit_scale_exp(self):
        return self.logit_scale.exp()

    def clamp_(self):
        self.clamp_calls += 1
        with torch.no_grad():
            self.logit_scale.clamp_(max=math.log(100.0))


class TinyEMA(nn.Module):
    "Minimal EMA teacher with the hierbench.models.family.EMATeacher contract (`.update(model)` after the step)."

    def __init__(self, model, decay):
        super().__init__()
        import copy

        self.decay, self.module = decay, copy.deepcopy(model).requires_grad_(False)

    @torch.no_grad()
    def update(self, model):
        for t, s in zip(self.module.parameters(), model.parameters()):
            t.lerp_(s.detach(), 1 - self.decay)


def clip_loss(model, batch, teacher=None):
    v = nn.functional.normalize(model.drop(model.ln(model.img(batch["x"]))), dim=-1)
    t = nn.functional.normalize(model.txt(batch["y"]), dim=-1)
    logits = model.logit_scale_exp() * v @ t.T
    y = torch.arange(len(v))
    i2t, t2i = nn.functional.cross_entropy(logits, y), nn.functional.cross_entropy(logits.T, y)
    terms = {"i2t": i2t, "t2i": t2i}
    loss = (i2t + t2i) / 2
    # python/numpy randomness (e.g. a sampled crop) must also resume exactly
    jitter = 1e-3 * (random.random() + float(np.random.rand()))
    loss = loss + jitter
    if teacher is not None:
        with torch.no_grad():
            tv = nn.functional.normalize(teacher.module.img(batch["x"]), dim=-1)
        terms["distill"] = ((v - tv) ** 2).sum(-1).mean()
        loss = loss + 0.1 * terms["distill"]
    return loss, terms


def make_data(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(n, 6, generator=g)
    return [dict(x=x, y=x.flip(0) + 0.1 * torch.randn(6, generator=g)) for x in xs]


def cfg(tmp_path, name="run", **kw):
    base = dict(
        steps=8,
        batch_size=8,
        lr=1e-2,
        warmup_steps=2,
        log_every=1,
        ckpt_every=3,
        run_dir=str(tmp_path / name),
        quiet=True,
    )
    return TrainConfig(**{**base, **kw})


# ---------------------------------------------------------------- optimizer groups
class ScalarZoo(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 3)
        self.norm = nn.LayerNorm(3)
        self.log_curv = nn.Parameter(torch.tensor(0.0))
        self.log_alpha_image = nn.Parameter(torch.tensor(-1.0))
        self.logit_scale = nn.Parameter(torch.ones(1, 1))  # 2-D, caught by name
        self.emb = nn.Embedding(5, 3)
        self.frozen = nn.Parameter(torch.ones(3, 3), requires_grad=False)


def test_param_groups_no_decay_on_scalars_norms_biases():
    groups = {g["group_name"]: g for g in T.param_groups(ScalarZoo().named_parameters(), 0.2)}
    assert sorted(groups["decay"]["param_names"]) == ["emb.weight", "proj.weight"]
    assert sorted(groups["no_decay"]["param_names"]) == [
        "log_alpha_image",
        "log_curv",
        "logit_scale",
        "norm.bias",
        "norm.weight",
        "proj.bias",
    ]
    assert groups["decay"]["weight_decay"] == 0.2 and groups["no_decay"]["weight_decay"] == 0.0
    with pytest.raises(ValueError, match="no trainable"):
        T.param_groups(nn.Linear(2, 2).requires_grad_(False).named_parameters(), 0.1)


def test_trainer_builds_the_groups(tmp_path):
    seen = {}

    def cb(event, st):
        if event == "step_end" and st["step"] == 1:
            seen.update(
                {g["group_name"]: (g["weight_decay"], set(g["param_names"])) for g in st["optimizer"].param_groups}
            )

    train(Tiny(), clip_loss, make_data(), cfg(tmp_path, steps=1, weight_decay=0.3), callbacks=[cb])
    assert seen["decay"] == (0.3, {"img.weight", "txt.weight"})
    assert seen["no_decay"][0] == 0.0 and "logit_scale" in seen["no_decay"][1] and "ln.weight" in seen["no_decay"][1]


# ---------------------------------------------------------------- schedule
def test_schedule_values_warmup_half_end():
    p = nn.Parameter(torch.zeros(1))
    c = TrainConfig(steps=110, warmup_steps=10, lr=1.0, min_lr_ratio=0.0)
    opt = torch.optim.AdamW([p], lr=c.lr)
    sched = T.make_scheduler(opt, c)
    lrs = []
    for _ in range(111):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == pytest.approx(0.1)  # first step already moves (open_clip convention)
    assert lrs[4] == pytest.approx(0.5)  # half of warmup
    assert lrs[9] == pytest.approx(1.0)  # warmup end reaches the peak
    assert lrs[10] == pytest.approx(1.0)  # cosine starts at the peak
    assert lrs[60] == pytest.approx(0.5)  # half-way through the cosine
    assert lrs[110] == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))  # monotone decay
    assert T.lr_factor(110, 10, 110, min_ratio=0.2) == pytest.approx(0.2)
    assert T.lr_factor(0, 0, 10) == pytest.approx(1.0)  # no warmup


def test_logged_lr_follows_schedule(tmp_path):
    c = cfg(tmp_path, steps=6, warmup_steps=2, lr=0.1)
    train(Tiny(), clip_loss, make_data(), c)
    lrs = [m["lr"] for m in read_metrics(c.run_dir)]
    assert lrs == pytest.approx([0.1 * T.lr_factor(t, 2, 6) for t in range(6)])


# ---------------------------------------------------------------- clipping
def test_gradient_clipping(tmp_path):
    def huge_loss(model, batch, teacher=None):
        loss, terms = clip_loss(model, batch)
        return 1e4 * loss, terms

    norms = []

    def cb(event, st):
        if event == "before_optimizer_step":
            total = torch.linalg.vector_norm(
                torch.stack([p.grad.norm() for p in st["model"].parameters() if p.grad is not None])
            )
            norms.append((st["grad_norm"], float(total)))

    c = cfg(tmp_path, steps=3, grad_clip=0.5)
    train(Tiny(), huge_loss, make_data(), c, callbacks=[cb])
    assert all(pre > 0.5 for pre, _ in norms)  # the loss really produced big gradients
    assert all(post <= 0.5 * (1 + 1e-5) for _, post in norms)
    assert [m["grad_norm"] for m in read_metrics(c.run_dir)] == pytest.approx([pre for pre, _ in norms])


def test_no_clipping_when_disabled(tmp_path):
    posts = []

    def cb(event, st):
        if event == "before_optimizer_step":
            posts.append(
                float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in st["model"].parameters()])))
            )

    train(
        Tiny(),
        lambda m, b, t: (1e4 * clip_loss(m, b)[0], {}),
        make_data(),
        cfg(tmp_path, steps=1, grad_clip=0),
        callbacks=[cb],
    )
    assert posts[0] > 1.0


# ---------------------------------------------------------------- NaN guard
def test_nan_guard_names_step_and_term(tmp_path):
    calls = {"n": 0}

    def exploding(model, batch, teacher=None):
        loss, terms = clip_loss(model, batch)
        calls["n"] += 1
        bad = torch.tensor(float("nan")) if calls["n"] == 4 else torch.tensor(0.0)
        return loss + bad, {**terms, "entailment": bad}

    c = cfg(tmp_path, steps=8, ckpt_every=2)
    with pytest.raises(NonFiniteLossError, match=r"step 4: loss term 'entailment' = nan") as e:
        train(Tiny(), exploding, make_data(), c)
    assert (e.value.step, e.value.term) == (4, "entailment") and math.isnan(e.value.value)
    assert [m["step"] for m in read_metrics(c.run_dir)] == [1, 2, 3]  # nothing logged for the bad step
    assert T.latest_checkpoint(c.run_dir).name == "step-00000002"  # last good checkpoint intact


def test_nan_guard_total_and_gradients(tmp_path):
    with pytest.raises(NonFiniteLossError, match="step 1: loss term 'loss' = inf"):
        train(Tiny(), lambda m, b, t: (clip_loss(m, b)[0] * float("inf"), {"ok": 1.0}), make_data(), cfg(tmp_path, "a"))

    # finite loss, non-finite gradient: d/dx sqrt(|x|) at 0
    def sqrt_loss(model, batch, teacher=None):
        with torch.no_grad():
            model.img.bias.zero_()
        return model.img.bias.abs().sqrt().sum() + clip_loss(model, batch)[0], {}

    with pytest.raises(NonFiniteLossError, match="step 1: loss term 'grad_norm'"):
        train(Tiny(), sqrt_loss, make_data(), cfg(tmp_path, "b"))


# ---------------------------------------------------------------- atomic writes
def test_atomic_write_keeps_old_file_on_crash(tmp_path, monkeypatch):
    p = tmp_path / "f.txt"
    T.atomic_write_text(p, "old")

    def boom(*a, **k):
        raise OSError("simulated crash during rename")

    monkeypatch.setattr(T.os, "replace", boom)
    with pytest.raises(OSError, match="simulated"):
        T.atomic_write_text(p, "new")
    assert p.read_text() == "old"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["f.txt"]  # no temporary left behind
    monkeypatch.undo()

    def half_write(tmp):
        tmp.write_text("partial")
        raise RuntimeError("crash while writing")

    with pytest.raises(RuntimeError):
        T.atomic_write(p, half_write)
    assert p.read_text() == "old" and sorted(x.name for x in tmp_path.iterdir()) == ["f.txt"]


def test_checkpoint_crash_leaves_previous_checkpoint_intact(tmp_path, monkeypatch):
    model = Tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = T.make_scheduler(opt, TrainConfig(steps=10, warmup_steps=1))
    loss, _ = clip_loss(model, torch.utils.data.default_collate(make_data()[:8]))
    loss.backward()
    opt.step()
    sched.step()
    ck1 = T.save_checkpoint(tmp_path, model, opt, sched, 1, extra_state={"note": "one"})
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)

    def boom(*a, **k):
        raise OSError("simulated crash")

    monkeypatch.setattr(T.os, "replace", boom)
    with pytest.raises(OSError):
        T.save_checkpoint(tmp_path, model, opt, sched, 2)
    monkeypatch.undo()
    assert T.latest_checkpoint(tmp_path) == ck1
    assert not list(tmp_path.rglob("*.tmp"))
    fresh = Tiny()
    state = T.load_checkpoint(tmp_path, fresh)
    assert state["step"] == 1 and state["note"] == "one"
    for k, v in fresh.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def test_keep_checkpoints_prunes_old(tmp_path):
    c = cfg(tmp_path, steps=8, ckpt_every=2, keep_checkpoints=2)
    train(Tiny(), clip_loss, make_data(), c)
    assert [p.name for p in T.list_checkpoints(c.run_dir)] == ["step-00000006", "step-00000008"]
    assert json.loads((Path(c.run_dir) / "latest.json").read_text())["step"] == 8


# ---------------------------------------------------------------- state files
def test_state_loads_with_weights_only_and_config_saved(tmp_path):
    c = cfg(tmp_path, steps=3, ckpt_every=3)
    res = train(Tiny(), clip_loss, make_data(), c, teacher=TinyEMA(Tiny(), 0.9), extra_config={"recipe": "toy"})
    ck = T.latest_checkpoint(c.run_dir)
    state = torch.load(ck / "state.pt", weights_only=True)
    assert state["step"] == 3 and state["data"]["seed"] == c.seed and state["data"]["n_items"] == 40
    assert set(state["rng"][0]) >= {"python", "numpy", "torch"} and torch.is_tensor(state["rng"][0]["python"]["state"])
    assert {"state", "param_groups"} <= set(state["optimizer"]) and state["scheduler"]["last_epoch"] == 3
    assert (ck / "model.safetensors").is_file() and (ck / "teacher.safetensors").is_file()
    saved = json.loads(res.config_path.read_text())
    assert saved["steps"] == 3 and saved["recipe"] == "toy" and saved["run_dir"] == "."
    assert res.weights_path.is_file() and res.step == 3 and not res.stopped_early
    m = read_metrics(c.run_dir)[-1]
    assert {"step", "lr", "loss", "i2t", "t2i", "distill", "grad_norm", "logit_scale"} <= set(m)


def test_rng_state_roundtrip_through_weights_only(tmp_path):
    random.seed(3)
    np.random.seed(3)
    torch.manual_seed(3)
    random.gauss(0, 1)  # fills python's cached gaussian
    torch.save(T.get_rng_state(), tmp_path / "rng.pt")
    expected = (random.gauss(0, 1), np.random.randn(), torch.randn(2))
    T.set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    got = (random.gauss(0, 1), np.random.randn(), torch.randn(2))
    assert got[0] == expected[0] and got[1] == expected[1] and torch.equal(got[2], expected[2])


# ---------------------------------------------------------------- exact resume
def _run(tmp_path, name, seed_init):
    "Config, model and EMA teacher of one run (the init depends on `seed_init`)."
    torch.manual_seed(seed_init)
    model = Tiny()
    return cfg(tmp_path, name, steps=8, ckpt_every=3), model, TinyEMA(model, 0.8)


@pytest.mark.parametrize("how", ["crash", "stop_at"])
def test_resume_is_exact(tmp_path, how):
    data = make_data()
    # uninterrupted reference
    c, model, teacher = _run(tmp_path, "full", 0)
    train(model, clip_loss, data, c, teacher=teacher)
    ref = read_metrics(c.run_dir)
    # interrupted run: a crash after step 5 (last checkpoint at 3) or a clean stop at 5
    c2, model2, teacher2 = _run(tmp_path, "interrupted", 0)
    if how == "crash":

        def crash(event, st):
            if event == "step_end" and st["step"] == 5:
                raise KeyboardInterrupt("simulated preemption")

        with pytest.raises(KeyboardInterrupt):
            train(model2, clip_loss, data, c2, teacher=teacher2, callbacks=[crash])
        assert [m["step"] for m in read_metrics(c2.run_dir)] == [1, 2, 3, 4, 5]
    else:
        r = train(model2, clip_loss, data, c2, teacher=teacher2, stop_at=5)
        assert r.stopped_early and r.step == 5 and r.weights_path is None
    # resume in a "new process": fresh objects with a different init, RNGs in some other state
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    model3 = Tiny()
    teacher3 = TinyEMA(model3, 0.8)
    res = train(model3, clip_loss, data, c2, teacher=teacher3, resume=True)
    got = read_metrics(c2.run_dir)
    assert [m["step"] for m in got] == list(range(1, 9))
    for a, b in zip(ref, got):
        for k in ("loss", "lr", "i2t", "t2i", "distill", "grad_norm", "logit_scale"):
            assert a[k] == b[k], (a["step"], k)
    for (k, v), v3 in zip(model.state_dict().items(), model3.state_dict().values()):
        assert torch.equal(v, v3), k
    for v, v3 in zip(teacher.state_dict().values(), teacher3.state_dict().values()):
        assert torch.equal(v, v3)
    assert res.step == 8


def test_resume_refusals(tmp_path):
    c = cfg(tmp_path, steps=2)
    train(Tiny(), clip_loss, make_data(), c)
    with pytest.raises(FileExistsError, match="resume=True"):
        train(Tiny(), clip_loss, make_data(), c)
    changed = TrainConfig(**{**asdict(c), "lr": 0.5})
    with pytest.raises(ValueError, match=r"lr \(saved 0.01, now 0.5\)"):
        train(Tiny(), clip_loss, make_data(), changed, resume=True)
    with pytest.raises(ValueError, match="data differs"):
        train(Tiny(), clip_loss, make_data(n=48), c, resume=True)
    # resuming a finished run does nothing more and keeps its metrics
    r = train(Tiny(), clip_loss, make_data(), c, resume=True)
    assert r.step == 2 and len(read_metrics(c.run_dir)) == 2
    # resume=True on an empty directory starts fresh
    r = train(Tiny(), clip_loss, make_data(), cfg(tmp_path, "fresh", steps=1), resume=True)
    assert r.step == 1


# ---------------------------------------------------------------- EMA and clamps
def test_ema_updated_after_optimizer_step_and_clamp_called(tmp_path):
    model, decay = Tiny(), 0.7
    teacher = TinyEMA(model, decay)
    snap = {}

    def cb(event, st):
        if event == "before_optimizer_step":
            snap["teacher"] = [p.detach().clone() for p in teacher.module.parameters()]
        elif event == "step_end":
            for old, t, s in zip(snap["teacher"], teacher.module.parameters(), st["model"].parameters()):
                torch.testing.assert_close(t, decay * old + (1 - decay) * s.detach(), rtol=1e-6, atol=1e-7)
            snap["checked"] = snap.get("checked", 0) + 1

    train(model, clip_loss, make_data(), cfg(tmp_path, steps=3), teacher=teacher, callbacks=[cb])
    assert snap["checked"] == 3 and model.clamp_calls == 3


def test_logit_scale_clamped_by_model_hook(tmp_path):
    model = Tiny()
    with torch.no_grad():
        model.logit_scale.fill_(math.log(100.0))

    def push_up(m, b, t):
        return -m.logit_scale * 10 + 0 * clip_loss(m, b)[0], {}  # gradient only raises the scale

    c = cfg(tmp_path, steps=3, lr=0.5, warmup_steps=0)
    train(model, push_up, make_data(), c)
    assert model.logit_scale.item() <= math.log(100.0) + 1e-6
    assert read_metrics(c.run_dir)[-1]["logit_scale"] == pytest.approx(100.0, rel=1e-5)


def test_no_autocast_on_cpu(tmp_path):
    seen = []

    def loss_fn(m, b, t):
        seen.append(torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda"))
        return clip_loss(m, b)

    train(Tiny(), loss_fn, make_data(), cfg(tmp_path, steps=1, amp=True, device="cpu"))
    assert seen == [False]


# ---------------------------------------------------------------- data order
def test_batch_indices_pure_and_epoch_permutations():
    n, b = 23, 5
    per_epoch = n // b
    for epoch in range(3):
        idx = torch.cat([T.batch_indices(epoch * per_epoch + i, n, b, seed=7) for i in range(per_epoch)])
        assert len(set(idx.tolist())) == per_epoch * b and idx.max() < n  # no repeats within an epoch
    assert torch.equal(T.batch_indices(9, n, b, 7), T.batch_indices(9, n, b, 7))
    assert not torch.equal(T.batch_indices(0, n, b, 7), T.batch_indices(per_epoch, n, b, 7))  # new epoch, new order
    with pytest.raises(ValueError, match="larger than the dataset"):
        T.batch_indices(0, 3, 5, 0)


def test_step_function_data_and_sharding(tmp_path):
    data = make_data()

    def batch_fn(step):
        return torch.utils.data.default_collate(data[(step * 8) % 40 : (step * 8) % 40 + 8])

    c = cfg(tmp_path, steps=3)
    train(Tiny(p_drop=0.0), clip_loss, batch_fn, c)
    assert len(read_metrics(c.run_dir)) == 3
    sh = T.shard_batch(
        {"images": torch.arange(6).view(6, 1), "negatives": [[str(i)] * 2 for i in range(6)], "k": 3}, 2, 3
    )
    assert sh["images"].flatten().tolist() == [4, 5] and sh["negatives"] == [["4"] * 2, ["5"] * 2] and sh["k"] == 3
    with pytest.raises(ValueError, match="cannot split"):
        T.shard_batch(torch.arange(5), 0, 2)
    with pytest.raises(TypeError, match="map-style dataset or a function"):
        train(Tiny(), clip_loss, 42, cfg(tmp_path, "x"))


def test_config_validation_names_field():
    with pytest.raises(ValueError, match="TrainConfig.grad_clip"):
        TrainConfig(grad_clip=-1)
    with pytest.raises(ValueError, match="TrainConfig.betas"):
        TrainConfig(betas=(0.9,))
    assert TrainConfig.from_dict(json.loads(json.dumps(asdict(TrainConfig())))) == TrainConfig()
    with pytest.raises(ValueError, match="recipe"):
        TrainConfig.from_dict({"steps": 3, "recipe": "clip"})
    assert TrainConfig.from_dict({"steps": 3, "recipe": "clip"}, strict=False).steps == 3


# ---------------------------------------------------------------- integration with recipes / models / data
def _recipes_available():
    try:
        import hierbench.recipes.registry
        import hierbench.models.family
        import hierbench.data.batch  # noqa: F401

        return True
    except Exception:
        return False


needs_recipes = pytest.mark.skipif(
    not _recipes_available(), reason="hierbench.recipes.registry/models/data not importable"
)


@needs_recipes
@pytest.mark.parametrize("recipe", ["degla", "read-recon-only"])
def test_train_recipe_resume_is_exact(tmp_path, recipe):
    "A real DualEncoder (+ EMA teacher / READ head) on the world: stop at 2, resume, same losses as 5 straight steps."
    import warnings

    kw = dict(
        data=J.WorldData(n_train=24, cache_dir=tmp_path / "cache"),
        arch="world-tiny",
        steps=5,
        batch_size=8,
        log_every=1,
        quiet=True,
        decoder=J.DecoderSpec(steps=2),
    )  # 3 steps per epoch: crosses an epoch boundary
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no init_checkpoint" for a fine-tune recipe
        full = J.train_recipe(recipe, tmp_path / "full", **kw)
        J.train_recipe(recipe, tmp_path / "cut", stop_at=2, **kw)
        res = J.train_recipe(recipe, tmp_path / "cut", resume=True, **kw)
    a, b = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "cut")
    assert [m["step"] for m in b] == [1, 2, 3, 4, 5]
    terms = {"degla": ("contrastive", "igc", "tgc", "distill"), "read-recon-only": ("contrastive", "recon")}[recipe]
    for x, y in zip(a, b):
        for k in ("loss", "lr", "grad_norm", "logit_scale") + terms:
            assert x[k] == y[k], (x["step"], k, x[k], y[k])
    from hierbench.models.family import load_model

    m1, m2 = load_model(full.weights_path), load_model(res.weights_path)
    for (k, v), v2 in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(v, v2), k
    cfg_saved = json.loads(res.config_path.read_text())
    assert cfg_saved["recipe"] == recipe and cfg_saved["warmup_steps"] == round(20 * 5 / 500)
    if recipe == "read-recon-only":
        assert (T.latest_checkpoint(tmp_path / "cut") / "module-recon_head.safetensors").is_file()


@needs_recipes
def test_train_recipe_lorentz_logs_geometry_scalars(tmp_path):
    r = J.train_recipe(
        "meru",
        tmp_path / "meru",
        J.WorldData(n_train=16, cache_dir=False),
        steps=2,
        batch_size=8,
        log_every=1,
        quiet=True,
    )
    m = r.metrics
    assert {"contrastive", "entailment", "curvature", "alpha_image", "alpha_text", "logit_scale"} <= set(m)
    assert 0.1 <= m["curvature"] <= 10 and 0 < m["alpha_image"] <= 1
    with pytest.raises(FileNotFoundError, match="without model.safetensors"):
        J.train_recipe(
            "negclip", tmp_path / "ft", J.WorldData(cache_dir=False), steps=1, init_checkpoint=tmp_path, quiet=True
        )


def test_resume_drops_cut_off_metrics_line_and_stale_checkpoints(tmp_path):
    c = cfg(tmp_path, steps=6, ckpt_every=2, keep_checkpoints=0)
    ref = cfg(tmp_path, "ref", steps=6, ckpt_every=2)
    torch.manual_seed(0)
    train(Tiny(), clip_loss, make_data(), ref)
    torch.manual_seed(0)
    train(Tiny(), clip_loss, make_data(), c, stop_at=4)
    run = Path(c.run_dir)
    # simulate a crash: pointer back at step 2, a newer (abandoned) checkpoint folder, a half-written metrics line
    T.atomic_write_text(run / "latest.json", json.dumps({"step": 2, "path": "checkpoints/step-00000002"}))
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "lo')
    with pytest.warns(UserWarning, match="cut-off last line"):
        train(Tiny(), clip_loss, make_data(), c, resume=True)
    got = read_metrics(run)
    assert [m["step"] for m in got] == [1, 2, 3, 4, 5, 6]
    assert [m["loss"] for m in got] == [m["loss"] for m in read_metrics(ref.run_dir)]
    (run / "metrics.jsonl").write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        read_metrics(run)


def test_resume_refuses_other_extra_config(tmp_path):
    c = cfg(tmp_path, steps=2)
    train(Tiny(), clip_loss, make_data(), c, stop_at=1, extra_config={"recipe": "clip", "sizes": [1, 2]})
    with pytest.raises(ValueError, match="recipe"):
        train(Tiny(), clip_loss, make_data(), c, resume=True, extra_config={"recipe": "meru", "sizes": [1, 2]})
    train(Tiny(), clip_loss, make_data(), c, resume=True, extra_config={"recipe": "clip", "sizes": (1, 2)})


def test_resume_compares_the_parent_file_not_how_the_record_spells_it(tmp_path):
    """A record names its parent relative to the run folder: an older record's absolute path to the same file resumes,
    so does a run moved together with its parent; another parent is refused."""
    import shutil
    from dataclasses import replace

    parent = tmp_path / "parents" / "model.safetensors"
    parent.parent.mkdir()
    parent.write_bytes(b"")
    old, new = cfg(tmp_path, "old", steps=4), cfg(tmp_path, "new", steps=4)
    rel = os.path.relpath(parent, old.run_dir)  # the same from both run folders
    train(Tiny(), clip_loss, make_data(), old, stop_at=1, extra_config={"init_checkpoint": str(parent)})
    train(Tiny(), clip_loss, make_data(), old, stop_at=2, resume=True, extra_config={"init_checkpoint": rel})
    train(Tiny(), clip_loss, make_data(), new, stop_at=1, extra_config={"init_checkpoint": rel})
    (tmp_path / "moved").mkdir()
    for name in ("new", "parents"):
        shutil.move(str(tmp_path / name), tmp_path / "moved" / name)
    new = replace(new, run_dir=str(tmp_path / "moved" / "new"))
    train(Tiny(), clip_loss, make_data(), new, stop_at=2, resume=True, extra_config={"init_checkpoint": rel})
    with pytest.raises(ValueError, match="init_checkpoint"):
        train(
            Tiny(), clip_loss, make_data(), new, resume=True, extra_config={"init_checkpoint": "../x/model.safetensors"}
        )


def test_an_old_amp_flag_runs_as_it_did_bf16_autocast_on_cuda_only():
    "A config.json from before `precision` (`amp: true`) resumes at what ran: fp32 on a CPU, bf16 autocast on CUDA."
    import contextlib
    import warnings
    from hierbench.models.precision import autocast, legacy_amp_precision

    assert legacy_amp_precision(True, "cpu") == legacy_amp_precision(False, "cuda") == "fp32"
    assert isinstance(autocast(torch.device("cpu"), legacy_amp_precision(True, "cpu")), contextlib.nullcontext)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available" on CPU-only machines
        ctx = autocast(torch.device("cuda", 0), legacy_amp_precision(True, "cuda"))
    assert isinstance(ctx, torch.autocast) and ctx.fast_dtype == torch.bfloat16 and ctx.device == "cuda"


from hypothesis import given, settings, strategies as st


@settings(max_examples=200, deadline=None)
@given(total=st.integers(1, 500), warm_frac=st.floats(0, 1), min_ratio=st.floats(0, 1), t=st.integers(0, 600))
def test_lr_factor_properties(total, warm_frac, min_ratio, t):
    warm = int(warm_frac * total)
    f = T.lr_factor(t, warm, total, min_ratio)
    assert 0 < f <= 1 + 1e-12 or (t >= total and f == pytest.approx(min_ratio))
    if t >= warm:
        assert f >= min_ratio - 1e-12  # never below the floor after warmup
    if warm <= t < total:
        assert T.lr_factor(t + 1, warm, total, min_ratio) <= f + 1e-12  # monotone decay
    if t < warm:
        assert f == pytest.approx((t + 1) / warm)


def test_gather_helpers_validate_layout():
    with pytest.raises(ValueError, match="sample-major"):
        T.gather_with_negatives(torch.zeros(3, 2), torch.zeros(4, 2))
    pos, neg = T.gather_with_negatives(torch.zeros(2, 2), torch.zeros(6, 2))  # single process: identity
    assert pos.shape == (2, 2) and neg.shape == (6, 2)
    with pytest.raises(TypeError, match="nn.Module"):
        T.as_module(object())


def test_dataloader_workers_do_not_change_the_batches(tmp_path):
    "num_workers builds whole steps in worker processes; the losses are those of the in-process run, bit for bit."
    from hierbench.recipes.recipe_run import train_recipe
    from hierbench.training.trainer import read_metrics
    from hierbench.data.sources import WorldData

    for n in (0, 2):
        train_recipe(
            "clip",
            tmp_path / f"w{n}",
            WorldData(n_train=64, cache_dir=False),
            arch="world-debug",
            steps=4,
            batch_size=16,
            log_every=1,
            num_workers=n,
        )
    assert [r["loss"] for r in read_metrics(tmp_path / "w0")] == [r["loss"] for r in read_metrics(tmp_path / "w2")]


# ---------------------------------------------------------------- preemption: SLURM's signals stop a run cleanly
import signal
import subprocess
import sys
import time


@pytest.mark.parametrize("sig", ["SIGUSR1", "SIGUSR2", "SIGTERM"])
def test_preemption_signal_stops_after_the_step_and_resumes_exactly(tmp_path, sig):
    "A signal in the middle of step 5: step 5 finishes, its checkpoint is written, no final weights; resume is exact."
    data = make_data()
    c, model, teacher = _run(tmp_path, "full", 0)
    train(model, clip_loss, data, c, teacher=teacher)
    c2, model2, teacher2 = _run(tmp_path, "preempted", 0)

    def send(event, st):
        if event == "before_optimizer_step" and st["step"] == 5:
            os.kill(os.getpid(), getattr(signal, sig))

    before = signal.getsignal(getattr(signal, sig))
    r = train(model2, clip_loss, data, c2, teacher=teacher2, callbacks=[send])
    assert (r.preempted, r.step, r.weights_path, r.stopped_early) == (sig, 5, None, True)
    assert (
        T.latest_checkpoint(c2.run_dir).name == "step-00000005"
        and not (Path(c2.run_dir) / "model.safetensors").exists()
    )
    assert [m["step"] for m in read_metrics(c2.run_dir)] == [1, 2, 3, 4, 5]
    assert signal.getsignal(getattr(signal, sig)) is before  # the previous handler is back
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    model3 = Tiny()
    teacher3 = TinyEMA(model3, 0.8)
    res = train(model3, clip_loss, data, c2, teacher=teacher3, resume=True)
    assert res.preempted is None and res.weights_path is not None
    assert read_metrics(c2.run_dir) == [
        {**m, "time": n["time"]} for m, n in zip(read_metrics(c.run_dir), read_metrics(c2.run_dir))
    ]
    for v, v3 in zip(model.state_dict().values(), model3.state_dict().values()):
        assert torch.equal(v, v3)


def test_stop_signals_empty_leaves_handlers_alone(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    seen = []

    def look(event, st):
        if event == "step_end":
            seen.append(signal.getsignal(signal.SIGTERM))

    train(Tiny(), clip_loss, make_data(), cfg(tmp_path, steps=2), callbacks=[look], stop_signals=())
    assert seen == [before, before]


def _hierbench_train(out, steps, *resume):
    "`hierbench train` (as torchrun would start it: `python -m hierbench.cli`) on the smallest world architecture."
    return [
        sys.executable,
        "-m",
        "hierbench.cli",
        "train",
        "clip",
        "--out",
        str(out),
        "--arch",
        "world-debug",
        "--steps",
        str(steps),
        "--n-train",
        "64",
        "--batch-size",
        "8",
        "--log-every",
        "1",
        "--ckpt-every",
        "10000",
        *resume,
    ]


@needs_recipes
def test_sigterm_to_hierbench_train_checkpoints_exits_75_and_resumes_exactly(tmp_path):
    "SIGTERM (SLURM's preemption and time-limit signal) to `hierbench train`; `--resume` then equals a straight run."
    steps = 300
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    run = lambda *cmd: subprocess.run(_hierbench_train(*cmd), env=env, capture_output=True, text=True, timeout=180)
    ref = run(tmp_path / "ref", steps)
    assert ref.returncode == 0, ref.stderr[-3000:]
    cut = tmp_path / "cut"
    p = subprocess.Popen(
        _hierbench_train(cut, steps), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline and p.poll() is None:  # wait until some steps are logged, then signal
            m = cut / "metrics.jsonl"
            if m.is_file() and m.read_text().count("\n") >= 10:
                break
            time.sleep(0.02)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == T.PREEMPTED_EXIT_CODE == 75, (p.returncode, err[-3000:])
    logged = [m["step"] for m in read_metrics(cut)]
    k = logged[-1]
    assert 10 <= k < steps and logged == list(range(1, k + 1))
    assert f"SIGTERM after step {k}" in err and "--resume" in err
    assert T.latest_checkpoint(cut).name == f"step-{k:08d}"  # the checkpoint of the signalled step
    assert not (cut / "model.safetensors").exists()
    res = run(cut, steps, "--resume")
    assert res.returncode == 0, res.stderr[-3000:]
    a, b = read_metrics(tmp_path / "ref"), read_metrics(cut)
    assert [m["step"] for m in b] == list(range(1, steps + 1))
    for x, y in zip(a, b):
        for key in ("loss", "lr", "grad_norm", "logit_scale", "contrastive"):
            assert x[key] == y[key], (x["step"], key)
    from safetensors.torch import load_file

    wa, wb = load_file(tmp_path / "ref" / "model.safetensors"), load_file(cut / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[n], wb[n]) for n in wa)


@needs_recipes
def test_train_recipe_old_keywords_still_work_and_warn(tmp_path):
    """The pre-description spelling (preset=, n_train=, cache_dir=, validate_every=, val_n=) trains the same run, with
    warnings."""
    new = J.train_recipe(
        "clip",
        tmp_path / "new",
        J.WorldData(n_train=16, cache_dir=False),
        arch="world-debug",
        steps=2,
        batch_size=8,
        log_every=1,
        quiet=True,
        validation=J.Validation(every=1, n=8),
    )
    with pytest.warns(DeprecationWarning) as rec:
        old = J.train_recipe(
            "clip",
            tmp_path / "old",
            preset="world-debug",
            steps=2,
            n_train=16,
            batch_size=8,
            log_every=1,
            quiet=True,
            cache_dir=False,
            validate_every=1,
            val_n=8,
        )
    said = " | ".join(str(w.message) for w in rec)
    for spelling in (
        "arch=",
        "data=WorldData(n_train=...)",
        "data=WorldData(cache_dir=...)",
        "validation=Validation(every=...)",
        "validation=Validation(n=...)",
    ):
        assert spelling in said, spelling
    a, b = (json.loads(r.config_path.read_text()) for r in (new, old))
    assert {k: v for k, v in a.items() if k != "run_dir"} == {k: v for k, v in b.items() if k != "run_dir"}
    assert a["preset"] == "world-debug" and a["n_train"] == 16 and a["validate_every"] == 1
    lines = lambda r: [
        {k: v for k, v in m.items() if "time" not in k and "second" not in k} for m in read_metrics(r.run_dir)
    ]
    assert lines(new) == lines(old) and any("val_contrastive" in m for m in lines(new))
    with pytest.warns(DeprecationWarning, match=r"data=RealData\('coco:x.json'\)"), pytest.raises(FileNotFoundError):
        J.train_recipe("clip", tmp_path / "real", data="coco:x.json", preset="real-tiny", steps=1)
    with pytest.raises(ValueError, match="built-in world"):
        J.train_recipe("clip", tmp_path / "real", J.RealData("coco:x.json"), arch="real-tiny", mirror_twins=True)
    with pytest.raises(TypeError, match="unexpected keyword"):
        J.train_recipe("clip", tmp_path / "x", J.WorldData(), steps=1, no_such_field=3)
