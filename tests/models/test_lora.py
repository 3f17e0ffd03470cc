"""LoRA fine-tunes (hierbench.models.lora through train_recipe): adapters-only checkpoints, exact resume, the EMA
teacher and
READ's decoder unchanged, export to open_clip, a Lorentz head on a Euclidean checkpoint, and the bad inputs."""

import json

import open_clip
import pytest
import safetensors.torch
import torch

from hierbench.recipes import recipe_run as J
from hierbench.models import lora as L
from hierbench.cli.parser import main
from hierbench.recipes.recipe_run import DecoderSpec, SettingsConflict
from hierbench.models.family import load_model, save_model
from hierbench.data.sources import WorldData
from hierbench.training.trainer import read_metrics


def _data(tmp_path):
    return WorldData(n_train=64, cache_dir=tmp_path / "cache")


def _kw(tmp_path, **over):
    return {**dict(data=_data(tmp_path), steps=6, batch_size=16, log_every=1, quiet=True), **over}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    "A short CLIP run on the world (world-debug), the checkpoint every LoRA run here adapts."
    tmp = tmp_path_factory.mktemp("base")
    J.train_recipe(
        "clip",
        tmp / "clip",
        WorldData(n_train=64, cache_dir=tmp / "cache"),
        arch="world-debug",
        steps=4,
        batch_size=16,
        quiet=True,
    )
    return tmp / "clip"


def test_checkpoints_hold_the_adapters_only_and_resume_is_exact(base, tmp_path):
    """DeGLA with LoRA (EMA teacher, hard negatives): stopped after 3 steps and resumed = an uninterrupted run, bit for
    bit."""
    spec, seen = L.LoraSpec(4), {}

    def look(event, st):  # the EMA teacher shares the student's frozen base (one copy in memory)
        if event == "run_start":
            seen["shared"] = st["teacher"].module.clip.token_embedding.weight is st["model"].clip.token_embedding.weight

    full = J.train_recipe(
        "degla", tmp_path / "full", init_checkpoint=base, lora=spec, callbacks=[look], **_kw(tmp_path)
    )
    assert seen["shared"]
    J.train_recipe("degla", tmp_path / "part", init_checkpoint=base, lora=spec, stop_at=3, **_kw(tmp_path))
    ck = tmp_path / "part" / "checkpoints" / "step-00000003"
    saved = safetensors.torch.load_file(str(ck / "model.safetensors"))
    teacher = safetensors.torch.load_file(str(ck / "teacher.safetensors"))
    assert saved and all(".lora_" in k or k.startswith("head.") or k == "clip.logit_scale" for k in saved)
    assert any(".lora_A." in k for k in saved) and "clip.token_embedding.weight" not in saved
    assert set(teacher) == {"module." + k for k in saved} | {"num_updates"}
    res = J.train_recipe("degla", tmp_path / "part", init_checkpoint=base, lora=spec, resume=True, **_kw(tmp_path))
    a, b = load_model(full.weights_path), load_model(res.weights_path)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    strip = lambda ms: [{k: v for k, v in m.items() if k != "time"} for m in ms]
    assert strip(read_metrics(tmp_path / "full")) == strip(read_metrics(tmp_path / "part"))
    # the frozen base did not move; the adapters did
    plain = load_model(base / "model.safetensors").state_dict()
    assert torch.equal(sa["clip.token_embedding.weight"], plain["clip.token_embedding.weight"])
    assert any(k.endswith("lora_B.default.weight") and sa[k].abs().sum() > 0 for k in sa)
    cfg = json.loads((tmp_path / "full" / "config.json").read_text())
    assert cfg["lora"]["rank"] == 4 and cfg["lora"]["base"]["sha256"] == L.file_sha256(base / "model.safetensors")
    # the final file holds the adapters only too, and is a fraction of the base
    assert (tmp_path / "full" / "model.safetensors").stat().st_size < 0.2 * (base / "model.safetensors").stat().st_size


def test_export_merges_the_adapters_for_open_clip(base, tmp_path):
    res = J.train_recipe(
        "negclip", tmp_path / "ft", init_checkpoint=base, lora=L.LoraSpec(4, targets=("attn", "mlp")), **_kw(tmp_path)
    )
    assert main(["export", str(res.run_dir), "--out", str(tmp_path / "exp"), "--name", "hb-lora-negclip"]) is None
    open_clip.add_model_config(tmp_path / "exp" / "hb-lora-negclip.json")
    oc = open_clip.create_model(
        "hb-lora-negclip", pretrained=str(tmp_path / "exp" / "hb-lora-negclip.safetensors")
    ).eval()
    merged = L.merge_lora(load_model(res.weights_path)).eval()
    torch.manual_seed(0)
    images, tokens = torch.randn(3, 3, 64, 64), merged.tokenize(["a red cube", "two blue balls", "a cat left of a dog"])
    with torch.no_grad():
        assert torch.allclose(oc.encode_image(images), merged.clip.encode_image(images), atol=1e-6)
        assert torch.allclose(oc.encode_text(tokens), merged.clip.encode_text(tokens), atol=1e-6)
        # and the merged model is the adapted one (to float rounding)
        adapted = load_model(res.weights_path).eval()
        assert torch.allclose(adapted.encode_image(images), merged.encode_image(images), atol=1e-5)


def test_read_decoder_and_a_lorentz_head_on_a_euclidean_checkpoint(base, tmp_path):
    "READ's reconstruction head trains whole beside the adapters; meru on the CLIP run lifts it into Lorentz space."
    read = J.train_recipe(
        "read",
        tmp_path / "read",
        init_checkpoint=base,
        lora=L.LoraSpec(2),
        steps=3,
        batch_size=16,
        data=_data(tmp_path),
        quiet=True,
        decoder=DecoderSpec(steps=2),
    )
    ck = tmp_path / "read" / "checkpoints" / "step-00000003"
    recon = safetensors.torch.load_file(str(ck / "module-recon_head.safetensors"))
    assert recon and all(".lora_" not in k for k in recon)  # READ's head trains whole
    assert "recon" in read_metrics(read.run_dir)[-1] and "align" in read_metrics(read.run_dir)[-1]
    lines = []
    meru = J.train_recipe(
        "meru", tmp_path / "meru", init_checkpoint=base, lora=L.LoraSpec(4), log=lines.append, **_kw(tmp_path)
    )
    model = load_model(meru.weights_path)
    assert model.geometry == "lorentz" and "curvature" in read_metrics(meru.run_dir)[-1]
    assert "geometry lorentz (the recipe's) lifting its euclidean towers" in lines[0] and "LoRA rank 4" in lines[0]
    argent = J.train_recipe(
        "argent", tmp_path / "argent", init_checkpoint=base, lora=L.LoraSpec(2), **_kw(tmp_path, steps=2)
    )
    assert load_model(argent.weights_path).geometry == "lorentz" and "adaent" in read_metrics(argent.run_dir)[-1]
    first = read_metrics(meru.run_dir)[0]
    assert (
        first["curvature"] != read_metrics(meru.run_dir)[-1]["curvature"]
        or first["alpha_image"] != read_metrics(meru.run_dir)[-1]["alpha_image"]
    )


def test_a_fine_tune_takes_its_base_architecture_and_precision(tmp_path):
    J.train_recipe("clip", tmp_path / "bf", arch="world-debug", precision="bf16", **_kw(tmp_path, steps=2))
    lines = []
    ft = J.train_recipe(
        "negclip", tmp_path / "ft", init_checkpoint=tmp_path / "bf", log=lines.append, **_kw(tmp_path, steps=2)
    )
    cfg = json.loads(ft.config_path.read_text())
    assert (cfg["preset"], cfg["precision"]) == ("world-debug", "bf16")
    assert f"from {tmp_path / 'bf'}: arch world-debug, geometry euclidean, precision bf16" in lines[0]
    over = J.train_recipe(
        "negclip",
        tmp_path / "ft32",
        init_checkpoint=tmp_path / "bf",
        arch="world-debug",
        precision="fp32",
        **_kw(tmp_path, steps=1),
    )
    assert json.loads(over.config_path.read_text())["precision"] == "fp32"
    with pytest.raises(SettingsConflict, match="--arch 'world-tiny' conflicts"):
        J.train_recipe("negclip", tmp_path / "bad", init_checkpoint=tmp_path / "bf", arch="world-tiny", **_kw(tmp_path))
    assert not (tmp_path / "bad").exists()


def test_a_lora_file_needs_its_base(base, tmp_path):
    res = J.train_recipe("clip-ft", tmp_path / "ft", init_checkpoint=base, lora=L.LoraSpec(2), **_kw(tmp_path, steps=2))
    copy = tmp_path / "base-copy.safetensors"
    save_model(load_model(base / "model.safetensors"), copy)
    res2 = J.train_recipe(
        "clip-ft", tmp_path / "ft2", init_checkpoint=copy, lora=L.LoraSpec(2), **_kw(tmp_path, steps=2)
    )
    assert L.is_lora_file(res.weights_path) and load_model(res2.weights_path).model_config["lora"]["base"][
        "path"
    ] == str(copy)
    copy.rename(tmp_path / "moved.safetensors")
    with pytest.raises(FileNotFoundError, match="not there"):
        load_model(res2.weights_path)
    # a LoRA run can be the base of the next fine-tune (its adapters merged)
    nxt = J.train_recipe("negclip", tmp_path / "next", init_checkpoint=res.run_dir, **_kw(tmp_path, steps=1))
    assert not L.is_lora_file(nxt.weights_path)


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--lora-rank", "0"], "--lora-rank 0: the LoRA rank must be an integer >= 1"),
        (["--lora-rank", "-3"], "--lora-rank -3"),
        (["--lora-rank", "2", "--lora-targets", "q_proj"], "--lora-targets 'q_proj' matches no layer"),
        (["--lora-rank", "2", "--lora-targets", "out_proj"], "never run in the forward pass"),
        (["--lora-alpha", "4"], "give --lora-rank"),
        (["--report-to", "tensorbord"], "accepted: tensorboard, wandb"),
        (["--arch", "world-tiny"], "--arch 'world-tiny' conflicts"),
    ],
)
def test_bad_flags_are_one_line_and_write_nothing(base, tmp_path, capsys, flags, says):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(
            [
                "train",
                "negclip",
                "--out",
                str(out),
                "--init-checkpoint",
                str(base),
                "--steps",
                "2",
                "--n-train",
                "64",
                *flags,
            ]
        )
    msg = str(e.value.code)
    assert says in msg and "\n" not in msg and not out.exists()


def test_lora_on_a_pretraining_from_scratch_is_refused(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["train", "clip", "--out", str(out), "--lora-rank", "4", "--arch", "world-debug"])
    assert "--lora-rank adapts a checkpoint" in str(e.value.code) and "--init-checkpoint" in str(e.value.code)
    assert not out.exists()


def test_a_lora_run_names_its_base_relative_to_itself_and_moves_with_it(base, tmp_path):
    """Issue 55: no run record or model file holds an absolute path (the weights' hash is the weights', not the
    folder's); a run moved together with its base still loads."""
    import shutil

    home = tmp_path / "home"
    shutil.copytree(base, home / "base")
    res = J.train_recipe(
        "clip-ft", home / "ft", init_checkpoint=home / "base", lora=L.LoraSpec(2), **_kw(tmp_path, steps=2)
    )
    kept = [p for p in res.run_dir.rglob("*") if p.is_file() and p.suffix in (".json", ".safetensors", ".jsonl")]
    assert kept and not [p.name for p in kept if str(tmp_path).encode() in p.read_bytes()]
    assert json.loads((res.run_dir / "config.json").read_text())["init_checkpoint"] == "../base/model.safetensors"
    before = load_model(res.weights_path).state_dict()
    home.rename(tmp_path / "elsewhere")
    after = load_model(tmp_path / "elsewhere" / "ft" / "model.safetensors").state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
