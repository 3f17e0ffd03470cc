"""The fast world step (issue 54): what it changes and what it must not.

The batch path (images normalised as one NHWC array and stacked channels-last, memoised parsing and tokenising) must
give the same floats as the per-item path it replaced; the compiled image tower (`TrainConfig.compile`) may differ only
by float order, is off by default, and says in the run folder which path trained it."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from hierbench.config import SettingsError, load_settings
from hierbench.data.batch import collate_batch, image_to_tensor, normalize, stack_images
from hierbench.data.sources import WorldDataset
from hierbench.models.dual_encoder import COMPILED_IMAGE_TOWER, create_model, cxx_compiler
from hierbench.models.towers import (
    WordLevelTokenizer,
    build_open_clip,
    class_token_attention_pool,
    conv_tower_features,
    resolve_architecture,
)
from hierbench.recipes.recipe_run import train_recipe
from hierbench.recipes.registry import get_recipe
from hierbench.training.metrics_log import read_metrics
from hierbench.training import trainer
from hierbench.training.train_config import RESUME_FREE_FIELDS, TrainConfig
from hierbench.world import language


def test_world_batches_equal_the_per_item_path_bit_for_bit():
    ds = WorldDataset("train", 16, fields=("crop", "index"), cache_dir=False)
    idx = [3, 0, 7, 12, 5]
    many = ds.__getitems__(idx)
    for k, i in enumerate(idx):
        one = ds[i]
        assert torch.equal(one["image"], many[k]["image"]) and torch.equal(one["crop"], many[k]["crop"])
    # the batch of before: the (B, 3, S, S) permute of the uint8 stack, scaled and normalised
    arrays = [ds._item(i)[1] for i in idx]
    before = normalize(torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).float() / 255.0, ds.mean, ds.std)
    batch = collate_batch(many)["images"]
    assert torch.equal(batch, before)
    assert batch.is_contiguous(memory_format=torch.channels_last) and batch.dtype == torch.float32


def test_stack_images_keeps_other_layouts_as_torch_stack_does():
    plain = [torch.rand(3, 5, 5) for _ in range(3)]
    assert torch.equal(stack_images(plain), torch.stack(plain)) and stack_images(plain).is_contiguous()
    halves = [t.half() for t in plain]
    assert stack_images(halves).dtype == torch.float32  # as collate_batch always gave
    arr = (np.random.default_rng(0).random((6, 6, 3)) * 255).astype(np.uint8)
    one = image_to_tensor(arr, 6)
    assert torch.equal(stack_images([one, one])[1], one)


def _ids_before(tok, text):
    words = str(text).lower().replace(".", " ").replace(",", " ").split()[: tok.context_length - 2]
    return [tok.start_id, *(tok.index.get(w, 1) for w in words), tok.end_id]


def test_word_tokenizer_memo_gives_the_ids_of_before():
    tok = WordLevelTokenizer(["a", "red", "circle", "left", "of"], context_length=6)
    texts = ["A red circle.", "a circle left of a red circle", "unknown words here", "", "a, red", "A red circle."]
    out = tok(texts)
    for row, t in zip(out.tolist(), texts):
        ids = _ids_before(tok, t)
        assert row == ids + [0] * (6 - len(ids))
    assert torch.equal(tok(texts), out)  # the second call reads the memo
    assert set(tok.known_texts) == set(texts)
    assert tok([]).shape == (0, 6)
    with pytest.raises(TypeError, match="list of strings"):
        tok("a red circle")


def test_parse_is_memoised_and_still_refuses_text_outside_the_language():
    text = "a red circle left of a blue square"
    assert language.parse(text) is language.parse(text)  # one Meaning, immutable
    for bad in ("circle red the", "a purple elephant"):
        for _ in range(2):  # a refusal is not memoised away
            with pytest.raises(ValueError, match="outside the world's language"):
                language.parse(bad)
    with pytest.raises(ValueError, match="not a string"):
        language.parse(["a red circle"])


def test_compile_is_off_by_default_and_a_setting_turns_it_on(tmp_path):
    assert TrainConfig().compile is None and load_settings(env={}).compile is False
    assert load_settings(env={"HIERBENCH_COMPILE": "1"}).compile is True
    with pytest.raises(SettingsError, match="compile"):
        load_settings(env={"HIERBENCH_COMPILE": "maybe"})
    assert "compile" in RESUME_FREE_FIELDS  # float order only: a resumed run may switch it


def test_a_transformer_tower_is_not_compiled():
    model = create_model("world-tiny-vit")
    assert model.compile_image_tower_() is False and COMPILED_IMAGE_TOWER not in model.__dict__


@pytest.mark.parametrize("preset", ["world-tiny", "world-tiny-wide", "world-small"])
def test_the_class_token_pool_is_open_clips_pool_to_float_order(preset):
    """The fast step's pool computes only the row open_clip's pool returns: in float64 the outputs and every gradient
    (the feature maps' and each pool parameter's) agree to 1e-12; a NaN in a map stays a NaN in its own row only."""
    torch.manual_seed(0)
    visual = build_open_clip(resolve_architecture(preset)).visual.double()
    pool = visual.attnpool
    channels = pool.k_proj.in_features
    maps = torch.randn(6, channels, 2, 2, dtype=torch.float64, requires_grad=True)
    ours, theirs = class_token_attention_pool(pool, maps), pool(maps)
    assert ours.shape == theirs.shape == (6, pool.c_proj.out_features)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    wrt = [maps, *pool.parameters()]
    target = torch.randn_like(ours)
    for a, b in zip(torch.autograd.grad((ours * target).sum(), wrt), torch.autograd.grad((theirs * target).sum(), wrt)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    bad = maps.detach().clone()
    bad[2, 0, 1, 1] = float("nan")
    out = class_token_attention_pool(pool, bad)
    assert out[2].isnan().all() and not out[[0, 1, 3, 4, 5]].isnan().any()
    images = torch.randn(2, 3, 64, 64, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(conv_tower_features(visual, images), visual(images), rtol=1e-10, atol=1e-12)


needs_compiler = pytest.mark.skipif(cxx_compiler() is None, reason="torch.compile on a CPU needs a C++ compiler")


@needs_compiler
@pytest.mark.parametrize("recipe", ["clip", "argent", "degla"])
def test_compiled_step_agrees_with_the_eager_step_to_float_order(tmp_path, recipe):
    """Four steps of each recipe family (Euclidean pre-training, Lorentz pre-training with entailment, a fine-tune with
    crops and an EMA teacher), compiled and eager from the same seed: losses within float-order distance, and the
    run folder names its path."""
    # the image tower sees 16 images a step in every family (ARGENT's 8 captions bring 8 box crops), so the three
    # share one compiled graph: the first compile costs ~85 s on 2 cores, the others read it from inductor's cache
    batch_size = 8 if get_recipe(recipe).use_boxes else 16
    runs = {}
    for compiled in (False, True):
        folder = tmp_path / f"{recipe}-{compiled}"
        train_recipe(
            recipe, folder, arch="world-tiny", steps=4, seed=0, batch_size=batch_size, log_every=1, compile=compiled
        )
        runs[compiled] = (
            [m["loss"] for m in read_metrics(folder) if "loss" in m],
            json.loads((folder / "config.json").read_text())["step_path"],
        )
    (eager, eager_path), (fast, fast_path) = runs[False], runs[True]
    assert (eager_path, fast_path) == ("eager", "compiled image tower, one-row pool")
    assert len(eager) == len(fast) == 4
    assert eager[0] == pytest.approx(fast[0], rel=1e-5, abs=1e-5)  # before any update: the same forward
    assert np.allclose(eager, fast, rtol=1e-3, atol=1e-3), (eager, fast)


def test_compile_without_a_compiler_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("CXX", raising=False)
    assert shutil.which("g++") is None
    with pytest.raises(SettingsError, match="C\\+\\+ compiler"):
        create_model("world-tiny").compile_image_tower_()


_CHURN = """
import resource, sys, torch
from hierbench.training.trainer import hold_freed_memory
held = hold_freed_memory() if sys.argv[1] == "held" else False
if not held:  # glibc's default mmap threshold, pinned: where its dynamic one ends up depends on what import freed
    import ctypes

    ctypes.CDLL("libc.so.6").mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD: 1 MB blocks mapped and unmapped each time
def churn():
    for _ in range(5):
        blocks = [torch.ones(250_000) for _ in range(20)]  # 20 MB in 1 MB blocks, then all freed
        del blocks
churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
churn()
print(held, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator: Linux only")
def test_held_memory_is_reused_without_page_faults_and_a_cpu_run_holds_it(tmp_path, monkeypatch):
    """The same allocations freed and made again: under glibc's default threshold (pinned: the dynamic one moves with
    whatever import freed, and left it high in about 4 of 10 processes on an Intel Xeon, where the churn then faulted
    not at all) every page faults anew (about 5 x 20 MB / 4 KB); held, none does. A run on the CPU asks for it once."""
    counts = {}
    for mode in ("plain", "held"):
        out = subprocess.run([sys.executable, "-c", _CHURN, mode], capture_output=True, text=True, check=True).stdout
        held, faults = out.split()
        counts[mode] = (held, int(faults))
    assert counts["plain"][0] == "False" and counts["plain"][1] > 10_000, counts
    assert counts["held"][0] == "True" and counts["held"][1] < 100, counts
    calls = []
    monkeypatch.setattr(trainer, "hold_freed_memory", lambda: calls.append(1) or True)
    train_recipe("clip", tmp_path / "run", arch="world-debug", steps=1, seed=0, batch_size=4, quiet=True)
    assert calls == [1]
