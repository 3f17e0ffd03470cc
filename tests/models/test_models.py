"Tests for hierbench.models.family: heads, dual encoder contract, checkpoints, QuickGELU guard, save/load, EMA teacher."

import json
import math
import warnings

import open_clip
import pytest
import torch
import torch.nn.functional as F
from open_clip.transformer import QuickGELU
from safetensors.torch import save_file

from hierbench.geometry import dist0, exp_map0
from hierbench.models.family import (
    DEFAULT_PRESET,
    ARCHS,
    DualEncoder,
    EMATeacher,
    LorentzHead,
    build_open_clip,
    create_model,
    load_model,
    load_weights_,
    make_head,
    model_from_config,
    openai_derived_hint,
    read_state_dict,
    resolve_architecture,
    save_model,
    text_pooled_and_projected,
    unwrap_model,
)

CAPS = ["a red circle", "a small blue square left of a green triangle", "two stars"]


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    return {g: create_model("world-debug", geometry=g) for g in ("euclidean", "lorentz")}


@pytest.fixture
def images():
    return torch.randn(3, 3, 64, 64, generator=torch.Generator().manual_seed(0))


def _quick_gelu_count(model):
    return sum(isinstance(m, QuickGELU) for m in model.modules())


def _same_state(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


# ---- presets and architectures ------------------------------------------------------------------------------------
def test_presets_are_plain_json_data():
    assert DEFAULT_PRESET == "world-tiny" and {"world-debug", "world-tiny", "world-small"} <= set(ARCHS)
    assert json.loads(json.dumps(ARCHS)) == ARCHS
    n = sum(p.numel() for p in build_open_clip(ARCHS["world-tiny"]).parameters())
    assert 0.3e6 < n < 0.6e6  # ~0.45 M: the world's 39-word text vocabulary instead of a 49 408-token BPE table


def test_image_normalisation_matches_data_module():
    from hierbench.data.batch import CLIP_MEAN, CLIP_STD, WORLD_MEAN, WORLD_STD

    m = create_model("world-debug")
    assert m.image_size == 64 and m.image_mean == tuple(WORLD_MEAN) and m.image_std == tuple(WORLD_STD)
    cfg = resolve_architecture("ViT-B-32")
    assert "preprocess_cfg" not in cfg  # open_clip names fall back to OpenAI statistics in create_model
    assert tuple(open_clip.OPENAI_DATASET_MEAN) == CLIP_MEAN and tuple(open_clip.OPENAI_DATASET_STD) == CLIP_STD


def test_resolve_architecture_overrides_and_errors():
    a = resolve_architecture("world-debug", image_size=24, context_length=16, vision_cfg={"layers": 2})
    assert a["vision_cfg"]["image_size"] == 24 and a["text_cfg"]["context_length"] == 16
    assert a["vision_cfg"]["layers"] == 2 and a["vision_cfg"]["width"] == 32  # merged, not replaced
    assert resolve_architecture("world-debug") == ARCHS["world-debug"]  # fresh copies: ARCHS unchanged
    assert resolve_architecture("ViT-B/32") == resolve_architecture("ViT-B-32")  # open_clip's two spellings
    assert resolve_architecture("RN50-quickgelu")["quick_gelu"] is True
    with pytest.raises(ValueError, match="nope-model"):
        resolve_architecture("nope-model")
    with pytest.raises(ValueError, match="never downloads"):
        resolve_architecture("hf-hub:org/model")
    with pytest.raises(ValueError, match="bogus"):
        resolve_architecture("world-debug", bogus=1)
    with pytest.raises(TypeError, match="vision_cfg"):
        resolve_architecture("world-debug", vision_cfg=3)
    with pytest.raises(ValueError, match="geometry"):
        make_head("spherical", 8)
    with pytest.raises(ValueError, match="geometry"):
        create_model("world-debug", geometry="poincare")


def test_named_open_clip_architecture_from_registered_config(tmp_path):
    cfg = {
        "embed_dim": 16,
        "vision_cfg": {"image_size": 16, "patch_size": 8, "width": 32, "layers": 1, "head_width": 16},
        "text_cfg": {"context_length": 12, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
    }
    (tmp_path / "hb-test-tiny.json").write_text(json.dumps(cfg))
    (tmp_path / "hb-test-tiny-quickgelu.json").write_text(json.dumps({**cfg, "quick_gelu": True}))
    open_clip.add_model_config(tmp_path)
    m = create_model("hb-test-tiny", geometry="lorentz")
    assert isinstance(m.clip, open_clip.CLIP) and m.embed_dim == 16 and m.context_length == 12
    assert m.tokenize(CAPS).shape == (3, 12) and m.encode_image(torch.randn(2, 3, 16, 16)).shape == (2, 16)
    assert _quick_gelu_count(m) == 0 and _quick_gelu_count(create_model("hb-test-tiny-quickgelu")) > 0
    # the stored config rebuilds the architecture without the registry entry
    rebuilt = model_from_config(json.loads(json.dumps(m.model_config)))
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {k: v.shape for k, v in m.state_dict().items()}
    # an open_clip 'local-dir:' folder with open_clip_config.json works the same way
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg}))
    assert resolve_architecture(f"local-dir:{tmp_path / 'local'}") == cfg


def test_custom_text_tower_pooled_matches_open_clip():
    m = create_model("world-debug", custom_text=True)
    assert isinstance(m.clip, open_clip.CustomTextCLIP)
    toks = m.tokenize(CAPS)
    proj, pooled = text_pooled_and_projected(m.clip, toks)
    torch.testing.assert_close(proj, m.clip.encode_text(toks))
    assert pooled.shape == (3, m.text_width)


# ---- encoders: shapes, dtypes, contract ---------------------------------------------------------------------------
@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_encode_shapes_dtypes(models, images, geometry):
    m = models[geometry]
    assert isinstance(m, DualEncoder) and m.geometry == geometry == m.head.geometry
    img, txt = m.encode_image(images), m.encode_text(CAPS)
    assert img.shape == txt.shape == (3, 32) and img.dtype == txt.dtype == torch.float32
    emb, pooled = m.encode_text(CAPS, return_pooled=True)
    torch.testing.assert_close(emb, txt)
    assert pooled.shape == (3, m.text_width) and m.text_width == ARCHS["world-debug"]["text_cfg"]["width"]
    assert m.head.pairwise_sim(img, txt).shape == (3, 3) and m.head.rowwise_sim(img, txt).shape == (3,)
    assert m.head.pairwise_score(img, txt).shape == (3, 3)
    # token tensors are accepted; wrong input is refused clearly
    torch.testing.assert_close(m.encode_text(m.tokenize(CAPS)), txt)
    with pytest.raises(ValueError, match="LongTensor"):
        m.encode_text(torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(TypeError, match="single str"):
        m.encode_text("a red circle")


def test_pooled_state_is_pre_projection(models):
    m = models["euclidean"]
    toks = m.tokenize(CAPS)
    proj, pooled = text_pooled_and_projected(m.clip, toks)
    torch.testing.assert_close(proj, m.clip.encode_text(toks))  # same path as open_clip
    torch.testing.assert_close(pooled @ m.clip.text_projection, proj)
    torch.testing.assert_close(m.text_features(CAPS), proj)


def test_euclidean_embeddings_unit_norm(models, images):
    m = models["euclidean"]
    assert m.head.curv is None
    for e in (m.encode_image(images), m.encode_text(CAPS)):
        torch.testing.assert_close(e.norm(dim=-1), torch.ones(3))
    e = m.encode_text(CAPS)
    torch.testing.assert_close(m.head.pairwise_sim(e, e), e @ e.T)
    torch.testing.assert_close(m.head.pairwise_score(e, e), m.head.pairwise_sim(e, e))


def test_lorentz_lifting_consistent_with_geometry(models, images):
    m = models["lorentz"]
    h = m.head
    assert h.curv.dtype == torch.float32 and h.curv.ndim == 0
    assert math.isclose(h.alpha("image").item(), 1 / math.sqrt(32), rel_tol=1e-6)  # init log(1/sqrt(D))
    for modality, feats, emb in (
        ("image", m.image_features(images), m.encode_image(images)),
        ("text", m.text_features(CAPS), m.encode_text(CAPS)),
    ):
        assert torch.isfinite(emb).all()
        torch.testing.assert_close(dist0(emb, h.curv), (h.alpha(modality) * feats).norm(dim=-1), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(emb, exp_map0(h.alpha(modality) * feats, h.curv))


def test_lorentz_score_ranks_like_sim(models, images):
    m = models["lorentz"]
    img = m.encode_image(torch.randn(8, 3, 64, 64))
    txt = m.encode_text(CAPS * 2)
    sim, score = m.head.pairwise_sim(img, txt), m.head.pairwise_score(img, txt)
    c = m.head.curv
    assert (score <= -1 / c + 1e-4).all()  # Lorentz inner product of points is <= -1/c
    # <x,y>_L = -cosh(sqrt(c) d)/c: the score is a decreasing function of the distance, so rankings agree
    torch.testing.assert_close(sim, -torch.acosh((-c * score).clamp(min=1)) / c.sqrt(), rtol=1e-3, atol=1e-3)
    assert torch.equal(sim.argmax(1), score.argmax(1))


def test_lorentz_rowwise_matches_pairwise_diagonal(models):
    h = models["lorentz"].head
    a, b = exp_map0(torch.randn(6, 32) * 0.3, h.curv), exp_map0(torch.randn(6, 32) * 0.3, h.curv)
    torch.testing.assert_close(h.rowwise_sim(a, b), h.pairwise_sim(a, b).diagonal(), rtol=1e-4, atol=1e-4)


def test_lorentz_gradients_reach_alpha_and_curvature():
    m = create_model("world-debug", geometry="lorentz")
    img, txt = m.encode_image(torch.randn(4, 3, 64, 64)), m.encode_text(CAPS + ["a star"])
    logits = m.logit_scale_exp() * m.head.pairwise_sim(img, txt)
    F.cross_entropy(logits, torch.arange(4)).backward()
    for p in (m.head.log_alpha_image, m.head.log_alpha_text, m.head.log_curv, m.clip.logit_scale):
        assert p.grad is not None and torch.isfinite(p.grad) and p.grad != 0
    assert not create_model("world-debug", geometry="lorentz", learn_curv=False).head.log_curv.requires_grad


# ---- clamps -------------------------------------------------------------------------------------------------------
def test_alpha_and_curvature_clamps_hold_out_of_range():
    h = LorentzHead(16, curv_init=2.0)
    with torch.no_grad():
        h.log_alpha_image.fill_(3.0)
        h.log_alpha_text.fill_(-1.0)
        h.log_curv.fill_(10.0)
    assert h.alpha("image").item() == 1.0 and math.isclose(h.alpha("text").item(), math.exp(-1), rel_tol=1e-6)
    assert math.isclose(h.curv.item(), 20.0, rel_tol=1e-5)  # 10 * c0
    with torch.no_grad():
        h.log_curv.fill_(-10.0)
    assert math.isclose(h.curv.item(), 0.2, rel_tol=1e-5)  # 0.1 * c0
    x = h(torch.randn(4, 16) * 100, "image")
    assert torch.isfinite(x).all()
    # lifting with alpha clamped at 1: d(O,x) = ||u||
    u = torch.randn(4, 16)
    torch.testing.assert_close(dist0(h(u, "image"), h.curv), u.norm(dim=-1), rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        h.log_curv.fill_(10.0)
    h.clamp_parameters_()
    assert h.log_alpha_image.item() == 0.0 and h.log_alpha_text.item() == -1.0
    assert math.isclose(h.log_curv.item(), math.log(20.0), rel_tol=1e-6)
    with pytest.raises(ValueError, match="modality"):
        h(u, "audio")
    with pytest.raises(ValueError, match="curv_init"):
        LorentzHead(4, curv_init=0.0)


def test_logit_scale_init_and_clamp():
    m = create_model("world-debug")
    assert math.isclose(m.logit_scale_exp().item(), 1 / 0.07, rel_tol=1e-5)
    assert m.logit_scale_exp().dtype == torch.float32 and m.logit_scale_exp().ndim == 0
    with torch.no_grad():
        m.clip.logit_scale.fill_(7.0)
    assert math.isclose(m.logit_scale_exp().item(), 100.0, rel_tol=1e-5)
    m.clamp_parameters_()
    assert math.isclose(m.clip.logit_scale.item(), math.log(100.0), rel_tol=1e-6)


@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_bf16_autocast_keeps_head_float32(models, images, geometry):
    m = models[geometry]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        feats = m.image_features(images)
        img, txt = m.encode_image(images), m.encode_text(CAPS)
        sim, row = m.head.pairwise_sim(img, txt), m.head.rowwise_sim(img, txt)
        score = m.head.pairwise_score(img, txt)
    assert feats.dtype == torch.bfloat16  # the towers do run in bf16 ...
    for t in (img, txt, sim, row, score):  # ... the geometry does not
        assert t.dtype == torch.float32 and torch.isfinite(t).all()
    torch.testing.assert_close(img, m.encode_image(images), rtol=0.1, atol=0.05)


# ---- prototypes ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_encode_prototypes(models, geometry):
    m = models[geometry]
    prompts = [["a circle", "a photo of a circle", "circle"], ["a square"]]
    protos = m.encode_prototypes(prompts, batch_size=2)
    assert protos.shape == (2, 32)
    u = m.text_features(prompts[0])
    expected = (
        F.normalize(F.normalize(u, dim=-1).mean(0), dim=-1)
        if geometry == "euclidean"
        else exp_map0(m.head.alpha("text") * u.mean(0), m.head.curv)
    )
    torch.testing.assert_close(protos[0], expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(protos[1], m.encode_text(["a square"])[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="non-empty"):
        m.encode_prototypes([["a"], []])


# ---- checkpoints --------------------------------------------------------------------------------------------------
def test_refuses_non_local_pretrained(tmp_path):
    for bad in ("openai", "laion2b_s34b_b79k", str(tmp_path / "missing.pt"), tmp_path):
        with pytest.raises(FileNotFoundError, match="never downloads"):
            create_model("world-debug", checkpoint=bad)
    with pytest.raises(FileNotFoundError, match="open_clip pretrained tag"):
        create_model("world-debug", pretrained="openai")
    with pytest.raises(ValueError, match="not both"):
        create_model("world-debug", checkpoint="a", pretrained="b")


def test_load_torch_state_dict_weights_only(models, tmp_path):
    src = models["euclidean"]
    p = tmp_path / "plain.pt"
    torch.save(src.clip.state_dict(), p)
    m = create_model("world-debug", checkpoint=p)
    _same_state(m.clip, src.clip)
    assert m.model_config["checkpoint"] == "plain.pt"  # the file's name: no folder of this machine
    # wrapped {'state_dict': {'module.' ...}} as written by DDP trainers
    wrapped = tmp_path / "wrapped.pt"
    torch.save({"state_dict": {"module." + k: v for k, v in src.clip.state_dict().items()}, "epoch": 3}, wrapped)
    _same_state(create_model("world-debug", checkpoint=wrapped).clip, src.clip)
    # safetensors in open_clip layout
    st = tmp_path / "plain.safetensors"
    save_file({k: v.contiguous() for k, v in src.clip.state_dict().items()}, str(st))
    _same_state(create_model("world-debug", checkpoint=st).clip, src.clip)
    # the wrong architecture fails loudly
    with pytest.raises(ValueError, match="do not fit"):
        create_model("world-tiny", checkpoint=p)


def test_refuses_pickled_objects(tmp_path):
    p = tmp_path / "evil.pt"
    torch.save({"state_dict": {"w": torch.zeros(1)}, "obj": warnings.catch_warnings}, p)  # needs unpickling a class
    with pytest.raises(ValueError, match="weights_only"):
        read_state_dict(p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.script(torch.nn.Linear(2, 2)).save(str(tmp_path / "jit.pt"))
        with pytest.raises(ValueError, match="TorchScript"):
            create_model("world-debug", checkpoint=tmp_path / "jit.pt")
    (tmp_path / "list.pt").write_bytes(b"")
    torch.save([torch.zeros(1)], tmp_path / "list.pt")
    with pytest.raises(ValueError, match="not a state dict"):
        read_state_dict(tmp_path / "list.pt")


def test_hierbench_checkpoint_into_other_geometry(models, tmp_path):
    p = save_model(models["euclidean"], tmp_path / "euc.safetensors")
    m = create_model("world-debug", geometry="lorentz", checkpoint=p)  # towers load, head keeps its init
    _same_state(m.clip, models["euclidean"].clip)
    assert math.isclose(m.head.alpha("text").item(), 1 / math.sqrt(32), rel_tol=1e-6)
    with pytest.raises(ValueError, match="does not match"):
        load_weights_(create_model("world-tiny"), p)


@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_save_load_round_trip_exact(tmp_path, geometry, images):
    m = create_model("world-debug", geometry=geometry)
    if geometry == "lorentz":
        with torch.no_grad():
            m.head.log_curv.fill_(0.25)
            m.head.log_alpha_text.fill_(-0.5)
    p = save_model(m, tmp_path / "ck" / "model.safetensors")
    assert p.is_file() and p.with_suffix(".json").is_file()
    assert not [f for f in p.parent.iterdir() if f.name.endswith(".tmp")]  # atomic writes leave no temp files
    back = load_model(p)
    _same_state(back, m)
    assert back.model_config == m.model_config and back.geometry == geometry
    with torch.no_grad():
        assert torch.equal(back.encode_image(images), m.encode_image(images))
        assert torch.equal(back.encode_text(CAPS), m.encode_text(CAPS))
    if geometry == "lorentz":
        assert torch.equal(back.head.curv, m.head.curv)
    # the config is also inside the safetensors metadata: loading works without the sidecar
    p.with_suffix(".json").unlink()
    _same_state(load_model(p), m)
    with pytest.raises(ValueError, match="safetensors"):
        save_model(m, tmp_path / "model.pt")
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "missing.safetensors")


def test_model_config_is_json_and_rebuilds(models):
    for m in models.values():
        cfg = json.loads(json.dumps(m.model_config))
        assert cfg == m.model_config
        rebuilt = model_from_config(cfg)
        assert type(rebuilt.head) is type(m.head)
        assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {k: v.shape for k, v in m.state_dict().items()}
    with pytest.raises(ValueError, match="arch"):
        model_from_config({"name": "x", "geometry": "euclidean"})


# ---- QuickGELU ----------------------------------------------------------------------------------------------------
def _caught(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(x.message) for x in w if "QuickGELU" in str(x.message)]


def test_quick_gelu_modules():
    assert _quick_gelu_count(create_model("world-debug")) == 0
    m = create_model("world-debug", force_quick_gelu=True)
    assert _quick_gelu_count(m.clip.visual) > 0 and _quick_gelu_count(m.clip.transformer) > 0
    assert m.model_config["arch"]["quick_gelu"] is True
    assert _quick_gelu_count(create_model("world-debug", quick_gelu=True)) > 0
    # the activation matters: the same weights give different embeddings (why the mismatch warning exists)
    gelu = create_model("world-debug")
    m.load_state_dict(gelu.state_dict())
    with torch.no_grad():
        assert not torch.allclose(m.encode_text(CAPS), gelu.encode_text(CAPS), atol=1e-4)


def test_quick_gelu_mismatch_warnings(models, tmp_path, caplog):
    sd = {k: v.contiguous() for k, v in models["euclidean"].clip.state_dict().items()}
    (tmp_path / "negclip").mkdir()
    hinted = tmp_path / "negclip" / "weights.pt"
    torch.save(sd, hinted)
    plain = tmp_path / "weights.pt"
    torch.save(sd, plain)
    meta = tmp_path / "finetuned.safetensors"
    save_file(sd, str(meta), metadata={"source": "OpenAI ViT-B/32"})

    _, msgs = _caught(lambda: create_model("world-debug", openai_derived=True))
    assert msgs and "force_quick_gelu=True" in msgs[0]
    with caplog.at_level("WARNING", logger="hierbench.models.family"):
        _, msgs = _caught(lambda: create_model("world-debug", checkpoint=hinted))
    assert msgs and "negclip" in msgs[0] and any("QuickGELU" in r.message for r in caplog.records)
    _, msgs = _caught(lambda: create_model("world-debug", checkpoint=meta))
    assert msgs and "metadata" in msgs[0]
    assert openai_derived_hint(plain) is None
    for kwargs in (
        dict(checkpoint=plain),
        dict(checkpoint=hinted, force_quick_gelu=True),
        dict(checkpoint=hinted, openai_derived=False),
        dict(openai_derived=True, quick_gelu=True),
    ):
        _, msgs = _caught(lambda: create_model("world-debug", **kwargs))
        assert not msgs, kwargs
    # an explicit force_quick_gelu=False with openai_derived=True is a mismatch too
    _, msgs = _caught(lambda: create_model("world-debug", openai_derived=True, force_quick_gelu=False))
    assert msgs


def test_a_hierbench_checkpoint_is_judged_by_its_record_not_its_folder(tmp_path):
    # a world run saved under runs/degla/ is DeGLA's recipe on the world, not an OpenAI fine-tune: no warning
    world = save_model(create_model("world-debug"), tmp_path / "runs" / "degla" / "seed0" / "model.safetensors")
    assert openai_derived_hint(world) is None
    _, msgs = _caught(lambda: create_model("world-debug", checkpoint=world))
    assert not msgs
    # a BPE model saved by hierbench keeps the warning its recorded source earns ...
    src = tmp_path / "negclip_vitb32.safetensors"
    save_file({k: v.contiguous() for k, v in create_model("real-tiny").clip.state_dict().items()}, str(src))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tuned = save_model(create_model("real-tiny", checkpoint=src), tmp_path / "plain" / "model.safetensors")
    assert "negclip" in openai_derived_hint(tuned)
    # ... and one that recorded openai_derived=True says so, wherever it lies
    rec = save_model(create_model("real-tiny", openai_derived=True, quick_gelu=True), tmp_path / "r.safetensors")
    assert "openai_derived=True" in openai_derived_hint(rec)


# ---- EMA teacher --------------------------------------------------------------------------------------------------
def test_ema_teacher_init_freeze_and_one_step():
    torch.manual_seed(0)
    student = create_model("world-debug", geometry="lorentz")
    teacher = EMATeacher(student, decay=0.75)
    _same_state(teacher.module, student)
    assert all(not p.requires_grad for p in teacher.parameters()) and not teacher.module.training
    teacher.train()
    assert not teacher.module.training and not teacher.training
    before = {k: v.clone() for k, v in teacher.module.named_parameters()}
    with torch.no_grad():
        for p in student.parameters():
            p.add_(torch.randn_like(p))
    teacher.update(student)
    for name, p in student.named_parameters():
        torch.testing.assert_close(dict(teacher.module.named_parameters())[name], 0.75 * before[name] + 0.25 * p)
    assert teacher.num_updates.item() == 1
    # the student's autograd is untouched; the teacher delegates the model API
    assert all(p.requires_grad for n, p in student.named_parameters())
    assert teacher.encode_text(CAPS).shape == (3, 32) and teacher.head.geometry == "lorentz"
    assert "module.head.log_curv" in teacher.state_dict()


def test_ema_teacher_averages_parameters_only_and_checks_decay():
    "DeGLA's EMA averages parameters; the teacher's buffers (BatchNorm statistics) stay its own, never the student's."
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
    teacher = EMATeacher(net, decay=0.9)
    start = teacher.module[1].running_mean.clone()
    net.train()
    net(torch.randn(8, 3))  # updates the student's running stats
    teacher.update(net)
    assert not torch.equal(net[1].running_mean, start)
    torch.testing.assert_close(teacher.module[1].running_mean, start)
    # a wrapped student (DataParallel / DDP / torch.compile) updates the same teacher
    assert unwrap_model(torch.nn.DataParallel(net)) is net
    teacher.update(torch.nn.DataParallel(net))
    assert teacher.num_updates.item() == 2
    with pytest.raises(ValueError, match="decay"):
        EMATeacher(net, decay=1.5)
    with pytest.raises(ValueError, match="differ"):
        teacher.update(torch.nn.Linear(3, 3))


# ---------------------------------------------------------------- image readout
def test_flatten_readout_preset_differs_from_world_tiny_in_the_readout_only(tmp_path):
    from hierbench.models.family import FlattenReadout, load_model, resolve_architecture, save_model
    from hierbench.models.export import export_open_clip

    flat, tiny = resolve_architecture("world-tiny-flat"), resolve_architecture("world-tiny")
    assert {k for k in set(flat) | set(tiny) if flat.get(k) != tiny.get(k)} == {"image_readout"}
    assert "image_readout" not in ARCHS["world-tiny"]  # the default presets' configs are what they were
    torch.manual_seed(0)
    m = create_model("world-tiny-flat")
    pool = m.clip.visual.attnpool
    assert isinstance(pool, FlattenReadout) and pool.proj.in_features == 256 * 4 and pool.proj.out_features == 64
    x = torch.randn(3, 3, 64, 64)
    m.eval()
    with torch.no_grad():
        a = m.encode_image(x)
    assert a.shape == (3, 64) and torch.isfinite(a).all()
    # the readout sees where things are: a mirrored feature map moves it as far as an unrelated one (attention
    # pooling, near-uniform at initialisation, hardly moves)
    fmap, other = torch.randn(6, 256, 2, 2).relu(), torch.randn(6, 256, 2, 2).relu()
    attn = create_model("world-tiny").clip.visual.attnpool.eval()
    with torch.no_grad():
        shift = {
            name: ((p(fmap) - p(fmap.flip(-1))).norm(dim=-1) / (p(fmap) - p(other)).norm(dim=-1)).mean()
            for name, p in (("flatten", pool.eval()), ("attention", attn))
        }
    assert shift["flatten"] > 0.5 and shift["attention"] < 0.1
    save_model(m, tmp_path / "m.safetensors")
    m2 = load_model(tmp_path / "m.safetensors").eval()
    with torch.no_grad():
        assert torch.equal(m2.encode_image(x), a)
    with pytest.raises(ValueError, match="readout 'flatten'"):
        export_open_clip(m, tmp_path / "export")
    assert not (tmp_path / "export").exists()  # refused before anything is written
    with pytest.raises(ValueError, match="ResNet"):
        create_model("world-debug", image_readout="flatten")
    with pytest.raises(ValueError, match="image_readout must be one of"):
        create_model("world-tiny", image_readout="mean")


def test_presets_is_the_deprecated_name_of_archs():
    import hierbench.models.family as M

    with pytest.warns(DeprecationWarning, match="hierbench.models.family.ARCHS"):
        assert M.PRESETS is M.ARCHS
    with pytest.raises(AttributeError, match="no_such"):
        M.no_such


# ---- training speed paths: the patch embedding and the text embedding -----------------------------------------------


def test_vit_patch_convolution_becomes_a_patch_embedding_with_the_same_state():
    from hierbench.models.precision import PatchEmbedding

    torch.manual_seed(0)
    m = create_model("real-tiny")
    assert type(m.clip.visual.conv1) is PatchEmbedding
    plain = open_clip.CLIP(**{k: v for k, v in resolve_architecture("real-tiny").items() if k != "preprocess_cfg"})
    assert list(m.clip.state_dict()) == list(plain.state_dict())  # checkpoints load both ways
    resnet = create_model("world-tiny")  # a ResNet stem (3x3, stride 2) is left alone
    assert type(resnet.clip.visual.conv1) is torch.nn.Conv2d


def test_bucketed_text_gives_the_unbucketed_gradient():
    torch.manual_seed(0)
    m = create_model("real-tiny")
    caps = ["a dog", "a small cat on a wooden table next to a red cup", "two birds in the sky above a green field"]
    toks = m.tokenize(caps)
    calls = []
    h = m.clip.token_embedding.register_forward_hook(lambda mod, inp, out: calls.append(inp[0].shape))
    proj, _ = text_pooled_and_projected(m.clip, toks)
    h.remove()
    assert len(calls) == 3 and max(c[1] for c in calls) < toks.shape[1]  # three length groups, each cut short
    (proj**2).sum().backward()
    g = m.clip.token_embedding.weight.grad.clone()
    m.zero_grad()
    (m.clip.encode_text(toks) ** 2).sum().backward()  # open_clip's own path, full context length
    torch.testing.assert_close(g, m.clip.token_embedding.weight.grad, atol=1e-4, rtol=1e-3)  # float32 rounding


def test_a_model_file_does_not_carry_the_folder_it_started_from(tmp_path):
    "Issue 55: the same weights started from the same parent in two folders give the same file, so the same hash."
    import shutil

    from hierbench.ledger.run_folder import file_sha256, tensors_sha256
    from hierbench.models.dual_encoder import create_model
    from hierbench.models.family import save_model

    parent = save_model(create_model("world-debug"), tmp_path / "parent" / "model.safetensors")
    moved = tmp_path / "elsewhere" / "deeper" / "model.safetensors"
    moved.parent.mkdir(parents=True)
    shutil.copy(parent, moved)
    shutil.copy(parent.with_suffix(".json"), moved.with_suffix(".json"))
    a = save_model(create_model("world-debug", checkpoint=parent), tmp_path / "a" / "model.safetensors")
    b = save_model(create_model("world-debug", checkpoint=moved), tmp_path / "b" / "model.safetensors")
    assert str(tmp_path) not in a.read_bytes().decode("latin-1")
    assert file_sha256(a) == file_sha256(b) and tensors_sha256(a) == tensors_sha256(b)
