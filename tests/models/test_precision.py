"""Precision (issue 27): open_clip's vocabulary on TrainConfig, the trainer, evaluation models and the bench; geometry
and
heads stay float32 under every precision; old config.json files with `amp` still load and resume exactly."""

import json

import pytest
import torch

from hierbench.recipes import recipe_run as J
from hierbench.models import precision as P
from hierbench.training import trainer as T
from hierbench.models.family import EMATeacher, create_model
from hierbench.data.sources import WorldData
from hierbench.training.trainer import TrainConfig, read_metrics

CAPS = ["a red circle", "two blue squares left of a green triangle", "a small yellow star"]


def images(m, n=3):
    torch.manual_seed(1)
    return torch.randn(n, 3, m.image_size, m.image_size)


# ---- names --------------------------------------------------------------------------------------------------------
def test_names_and_bad_inputs():
    assert P.PRECISIONS == ("fp32", "bf16", "fp16", "amp_bf16", "amp_fp16")
    assert P.check_precision("amp") == "amp_fp16" and P.check_precision("amp_bfloat16") == "amp_bf16"
    for bad in ("bfloat16", "FP32", "", None, 16):
        with pytest.raises(ValueError, match="expected one of fp32"):
            P.check_precision(bad)
    with pytest.raises(ValueError, match="TrainConfig.precision"):
        TrainConfig(precision="half")
    assert TrainConfig().precision == "fp32"  # the world ledger's runs are unchanged
    assert TrainConfig(precision="amp").precision == "amp_fp16"  # canonical name recorded


def test_legacy_amp_flag():
    "`amp: true` meant bf16 autocast on CUDA only: a CPU run ran (and resumes) in fp32."
    assert TrainConfig.from_dict({"amp": True, "device": "cpu"}).precision == "fp32"
    assert TrainConfig.from_dict({"amp": True, "device": "cuda:0"}).precision == "amp_bf16"
    assert TrainConfig.from_dict({"amp": False, "device": "cuda"}).precision == "fp32"
    assert TrainConfig(amp=True, device="cpu", precision="bf16").precision == "bf16"  # an explicit precision wins
    assert "amp" not in json.loads(json.dumps(T.asdict(TrainConfig(amp=True))))


# ---- geometry and heads stay float32 under every precision ----------------------------------------------------------
@pytest.mark.parametrize("precision", P.PRECISIONS)
@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_heads_and_geometry_stay_float32(precision, geometry):
    torch.manual_seed(0)
    ref = create_model("world-debug", geometry=geometry).eval()
    m = create_model("world-debug", geometry=geometry).eval()
    m.load_state_dict(ref.state_dict())
    P.apply_precision(m, precision)
    x = images(m)
    with torch.no_grad():
        img, txt = m.encode_image(x), m.encode_text(CAPS)
        sim, row = m.head.pairwise_sim(img, txt), m.head.rowwise_sim(img, txt)
        feats = m.image_features(x)
    for t in (img, txt, sim, row):
        assert t.dtype == torch.float32 and torch.isfinite(t).all()
    assert all(p.dtype == torch.float32 for p in m.head.parameters())
    assert m.clip.logit_scale.dtype == torch.float32
    want = P.low_dtype(precision) or torch.float32
    assert feats.dtype == want, (precision, feats.dtype)  # the towers do run in the precision asked for
    assert P.tower_dtype(m) == (want if P.is_pure(precision) else torch.float32)
    with torch.no_grad():
        torch.testing.assert_close(img, ref.encode_image(x), rtol=0.1, atol=0.06)
        torch.testing.assert_close(txt, ref.encode_text(CAPS), rtol=0.1, atol=0.06)


def test_apply_precision_refusals():
    m = P.apply_precision(create_model("world-debug"), "bf16")
    with pytest.raises(ValueError, match="already runs at bf16"):
        P.apply_precision(m, "amp_fp16")
    assert P.apply_precision(m, "bf16") is m  # the same precision again: nothing more
    with pytest.raises(TypeError, match="open_clip towers"):
        P.cast_towers_(torch.nn.Linear(2, 2), "fp16")


# ---- the trainer --------------------------------------------------------------------------------------------------
def _kw(tmp_path, **over):
    return dict(
        data=WorldData(n_train=16, cache_dir=tmp_path / "cache"),
        arch="world-debug",
        steps=4,
        batch_size=8,
        log_every=1,
        quiet=True,
        **over,
    )


@pytest.mark.parametrize("precision", P.PRECISIONS)
def test_train_recipe_at_every_precision(tmp_path, precision):
    seen = []

    def spy(event, st):  # at 'begin' the model is cast already: watch its image tower run
        if event == "begin":
            m = st["model"]
            m.clip.visual.register_forward_hook(
                lambda mod, args, out: seen.append(
                    (
                        torch.is_autocast_enabled("cpu"),
                        P.tower_dtype(m),
                        {p.dtype for p in m.parameters() if p.dtype != P.tower_dtype(m)} | {m.clip.logit_scale.dtype},
                        out.dtype,
                    )
                )
            )

    res = J.train_recipe("clip", tmp_path / precision, callbacks=[spy], precision=precision, **_kw(tmp_path))
    cfg = json.loads(res.config_path.read_text())
    assert cfg["precision"] == precision and "amp" not in cfg and precision in cfg["precision_ran"]
    assert cfg["precision_ran"].startswith(precision) and "on cpu" in cfg["precision_ran"]
    ms = read_metrics(res.run_dir)
    assert [m["step"] for m in ms] == [1, 2, 3, 4] and all(torch.isfinite(torch.tensor(m["loss"])) for m in ms)
    assert ("grad_scale" in ms[-1]) == (precision == "amp_fp16")
    # autocast is on exactly for the amp precisions (on CPU too), tower weights are 16-bit exactly for bf16/fp16
    assert seen[0][0] == precision.startswith("amp_")
    assert seen[0][1] == (P.low_dtype(precision) if P.is_pure(precision) else torch.float32)
    assert seen[0][2] == {torch.float32}  # norms, embeddings, the logit scale
    assert seen[0][3] == (P.low_dtype(precision) or torch.float32)  # what the tower computed in


@pytest.mark.parametrize("precision", ["bf16", "amp_fp16"])
def test_resume_is_exact_at_precision(tmp_path, precision):
    kw = _kw(tmp_path, precision=precision)
    full = J.train_recipe("clip", tmp_path / "full", **kw)
    J.train_recipe("clip", tmp_path / "cut", stop_at=2, **kw)
    res = J.train_recipe("clip", tmp_path / "cut", resume=True, **kw)
    a, b = read_metrics(full.run_dir), read_metrics(res.run_dir)
    for x, y in zip(a, b):
        for k in ("loss", "lr", "grad_norm", "logit_scale") + (("grad_scale",) if precision == "amp_fp16" else ()):
            assert x[k] == y[k], (x["step"], k)
    with pytest.raises(ValueError, match=r"precision \(saved '%s', now 'fp32'\)" % precision):
        J.train_recipe("clip", tmp_path / "cut", resume=True, **{**kw, "precision": "fp32"})


def test_old_config_with_amp_still_resumes_exactly(tmp_path):
    'A run folder written before `precision` (config.json has `"amp": true`, a CPU run) resumes bit-exactly.'
    kw = _kw(tmp_path)
    full = J.train_recipe("clip", tmp_path / "full", **kw)
    J.train_recipe("clip", tmp_path / "old", stop_at=2, **kw)
    path = tmp_path / "old" / "config.json"
    old = json.loads(path.read_text())
    old.pop("precision")
    old.pop("precision_ran")
    old["amp"] = True  # what the old trainer wrote
    path.write_text(json.dumps(old, indent=2))
    cfg = TrainConfig.from_dict(old, strict=False)
    assert cfg.precision == "fp32"
    res = J.train_recipe("clip", tmp_path / "old", resume=True, **kw)
    for x, y in zip(read_metrics(full.run_dir), read_metrics(res.run_dir)):
        assert (x["loss"], x["grad_norm"]) == (y["loss"], y["grad_norm"]), x["step"]
    # ...and refuses a precision it did not run at
    path.write_text(json.dumps(old, indent=2))
    with pytest.raises(ValueError, match=r"precision \(saved 'fp32', now 'amp_bf16'\)"):
        J.train_recipe("clip", tmp_path / "old", resume=True, **{**kw, "precision": "amp_bf16"})


def test_pure_precision_needs_towers(tmp_path):
    class Lin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Linear(2, 2)

    with pytest.raises(TypeError, match="open_clip towers"):
        T.train(
            Lin(),
            lambda m, b, t: (m.w(b).sum(), {}),
            lambda s: torch.ones(4, 2),
            TrainConfig(steps=1, batch_size=4, run_dir=str(tmp_path / "r"), precision="bf16", quiet=True),
        )
    assert not (tmp_path / "r").exists()


def test_teacher_follows_the_precision():
    m = create_model("world-debug")
    t = P.cast_towers_(EMATeacher(m, 0.9), "bf16")
    P.cast_towers_(m, "bf16")
    t.update(m)  # EMA over 16-bit towers works
    assert P.tower_dtype(t.module) == torch.bfloat16


# ---- the bench's recipe step --------------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["fp32", "amp_bf16", "bf16"])
def test_bench_recipe_step_at_precision(precision):
    from hierbench.bench import suite as B

    s = B.recipe_setup("clip", "world-debug", batch_size=4, decoder_steps=2, precision=precision)
    assert s["cfg"].precision == precision
    r = B.time_recipe_step(s, steps=1, warmup=0)
    assert r["step_ms"] > 0 and r["samples_per_s"] > 0


# ---- compare budgets ----------------------------------------------------------------------------------------------
def test_budget_precision_keeps_fp32_run_keys():
    import dataclasses
    from hierbench.ledger.budgets import BUDGETS, Budget

    for b in BUDGETS.values():
        assert b.precision == "fp32" and "precision" not in b.run_key()  # finished runs of every budget still reused
    q = dataclasses.replace(BUDGETS["quick"], precision="amp_bf16")
    assert q.run_key() == {**BUDGETS["quick"].run_key(), "precision": "amp_bf16"}
    assert Budget.from_dict({**dataclasses.asdict(q), "recipes": list(q.recipes)}).precision == "amp_bf16"
    with pytest.raises(ValueError, match="budget 'quick': precision 'bf32'"):
        dataclasses.replace(q, precision="bf32")


def _attention_kernels(fn) -> set[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key for e in prof.key_averages() if "scaled_dot_product" in e.key}


@pytest.mark.parametrize("precision", ["fp32", "amp_bf16", "bf16"])
def test_training_forward_takes_the_math_attention_kernel_at_16_bits_on_cpu(precision):
    q = torch.randn(2, 2, 8, 16, requires_grad=True)
    x = q.bfloat16() if precision == "bf16" else q

    def attend():
        with P.training_forward("cpu", precision):
            out = torch.nn.functional.scaled_dot_product_attention(x, x, x)
        out.float().sum().backward()

    kernels = _attention_kernels(attend)
    fused = any("flash_attention" in k for k in kernels)
    assert fused == (precision == "fp32"), kernels
    assert torch.isfinite(q.grad).all()


def test_training_forward_is_autocast_plus_nothing_else_for_fp32():
    with P.training_forward("cpu", "fp32"):
        assert not torch.is_autocast_enabled("cpu")
    with P.training_forward("cpu", "amp_bf16"):
        assert torch.is_autocast_enabled("cpu")
    with pytest.raises(ValueError, match="expected one of"):
        with P.training_forward("cpu", "bf32"):
            pass


# ---- the patch embedding: a ViT's patch convolution as a matmul at 16 bits on a CPU ----


@pytest.mark.parametrize("size", [64, 72])  # 72: the 16-px patches do not tile the image, so the convolution runs
def test_patch_embedding_trains_as_the_convolution(size):
    from hierbench.models.precision import PatchEmbedding

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 32, 16, stride=16, bias=False)
    patch = torch.nn.Conv2d(3, 32, 16, stride=16, bias=False)
    patch.load_state_dict(conv.state_dict())
    patch.__class__ = PatchEmbedding
    x = torch.randn(4, 3, size, size)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert patch.as_matmul(x) == (size % 16 == 0)
        a, b = patch(x), conv(x)
    assert a.shape == b.shape and a.dtype == b.dtype == torch.bfloat16
    torch.testing.assert_close(a.float(), b.float(), atol=0.05, rtol=0.02)
    (a.float() ** 2).sum().backward()
    (b.float() ** 2).sum().backward()
    torch.testing.assert_close(patch.weight.grad, conv.weight.grad, atol=0.5, rtol=0.03)
    # fp32 training and every inference are the convolution itself, bit for bit
    assert not patch.as_matmul(x)
    assert torch.equal(patch(x), conv(x))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(patch(x), conv(x))


def test_patch_embedding_with_bf16_weights_matches_the_bf16_convolution():
    from hierbench.models.precision import PatchEmbedding

    torch.manual_seed(1)
    conv = torch.nn.Conv2d(3, 8, 4, stride=4, bias=False).bfloat16()
    patch = torch.nn.Conv2d(3, 8, 4, stride=4, bias=False).bfloat16()
    patch.load_state_dict(conv.state_dict())
    patch.__class__ = PatchEmbedding
    x = torch.randn(2, 3, 8, 8).bfloat16()
    assert patch.as_matmul(x)
    torch.testing.assert_close(patch(x).float(), conv(x).float(), atol=0.05, rtol=0.02)
    nan = x.clone()
    nan[0, 0, 0, 0] = float("nan")
    assert patch(nan)[0, :, 0, 0].isnan().all() and not patch(nan)[1].isnan().any()  # NaN stays in its patch
