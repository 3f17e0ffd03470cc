"""Tests of hierbench.bench.suite: structure and sanity of the returned numbers at tiny sizes. No timing assertions."""

import json
import math
from pathlib import Path

import pytest
import torch

from hierbench.bench import suite as B
from hierbench.models import family as M
from hierbench.recipes import registry as R
from hierbench.terminal import fold_long, full_width


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


# ---------------------------------------------------------------- sections at quick sizes


@pytest.fixture(scope="module")
def quick_report():
    return B.run_benchmarks(("geometry", "world"), quick=True, threads=1)


def test_geometry_section(quick_report):
    g = quick_report["geometry"]
    for k in (
        "cosine_matmul_s",
        "pairwise_dist_s",
        "pairwise_over_cosine",
        "dist_s",
        "exterior_angle_s",
        "angle_over_dist",
        "pairwise_over_cosine_cpu_ratio",
        "angle_over_dist_cpu_ratio",
    ):
        assert _positive(g[k]), (k, g[k])
    assert (g["n"], g["d"], g["pairs"]) == (B.QUICK.geometry_n, B.QUICK.geometry_d, B.QUICK.geometry_pairs)
    assert "pairwise_meets_goal" not in g  # the goal is stated for 4096x512 only


def test_world_section(quick_report):
    w = quick_report["world"]
    for k in ("scenes_per_s", "cpu_ms_per_scene", "build_s", "build_scenes_per_s", "reload_s"):
        assert _positive(w[k]), (k, w[k])
    assert w["n"] == B.QUICK.world_scenes and w["workers"] == 1
    assert "build_meets_goal" not in w  # the goal is stated for 20,000 scenes only


def test_meta_and_json(quick_report):
    m = quick_report["meta"]
    assert m["threads"] == 1 and m["quick"] is True
    assert set(m["section_seconds"]) == {"geometry", "world"}
    assert _positive(m["peak_rss_mb"])
    assert json.loads(json.dumps(quick_report)) == quick_report  # plain JSON types only
    assert set(quick_report) == {"meta", "geometry", "world"}  # only the sections asked for


def test_threads_restored():
    before = torch.get_num_threads()
    with B.torch_threads(1) as n:
        assert n == torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"):
        with B.torch_threads(0):
            pass


def test_unknown_section():
    with pytest.raises(ValueError, match="known"):
        B.run_benchmarks(["speed"], quick=True)
    with pytest.raises(ValueError, match="known"):
        B.run_benchmarks([], quick=True)


# ---------------------------------------------------------------- encoder tap


def _calls(name, B_=4, K=2):
    r = R.get_recipe(name)
    m = M.create_model("world-debug", **r.model_kwargs())
    teacher = M.EMATeacher(m, r.ema_decay) if r.needs_teacher else None
    recon = None
    if r.needs_decoder:
        from hierbench.models.decoder import ReconstructionHead, pretrain_decoder

        batch = R.demo_batch(B=B_, K=K)
        texts = [t for key in ("captions", "alternatives", "paraphrases") for t in batch[key]]
        dec, _ = pretrain_decoder(texts, steps=1, d_model=16, n_layers=1, n_heads=2)
        recon = ReconstructionHead(m.text_width, dec)
    return m, B.record_encoder_calls(R.make_loss_fn(r, recon), m, R.demo_batch(B=B_, K=K), teacher)


def test_tap_records_what_the_loss_encodes():
    _, calls = _calls("clip")
    assert [(c[1], c[4]) for c in calls] == [("encode_text", True), ("encode_image", True)]
    assert len(calls[0][2][0]) == 4 and calls[1][2][0].shape[0] == 4
    _, calls = _calls("hycoclip")  # images + crops in one image call, captions + phrases in one text call
    assert len(calls[0][2][0]) == 8 and calls[1][2][0].shape[0] == 8
    _, calls = _calls("degla")  # the teacher's calls run without gradient
    assert [(c[1], c[4]) for c in calls] == [
        ("encode_text", True),
        ("encode_image", True),
        ("encode_image", False),
        ("encode_text", False),
    ]
    assert len(calls[0][2][0]) == 4 * (1 + 2)


def test_encoder_only_loss_reaches_both_towers():
    m, calls = _calls("read")  # encode_text(..., return_pooled=True) returns a tuple
    assert calls[0][3] == {"return_pooled": True}
    loss = B.encoder_only_loss(calls)
    assert loss.shape == () and torch.isfinite(loss)
    loss.backward()
    assert m.clip.visual.conv1.weight.grad is not None
    assert m.clip.token_embedding.weight.grad is not None


def test_encoder_only_loss_needs_a_gradient():
    m = M.create_model("world-debug")
    with torch.no_grad():
        calls = B.record_encoder_calls(R.make_loss_fn("clip"), m, R.demo_batch(B=2))
    with pytest.raises(ValueError, match="gradient"):
        B.encoder_only_loss(calls)


# ---------------------------------------------------------------- recipes section


@pytest.fixture(scope="module")
def recipes_section():
    # every registered recipe, tiny: proves each one's step and its encoder-only twin run
    return B.bench_recipes(B.QUICK)


def test_every_recipe_is_timed(recipes_section):
    rows = recipes_section["rows"]
    assert [r["recipe"] for r in rows] == ["clip", *[n for n in R.list_recipes() if n != "clip"]]
    for r in rows:
        for k in (
            "step_ms",
            "step_cpu_ms",
            "forward_ms",
            "backward_ms",
            "optim_ms",
            "encoder_step_ms",
            "samples_per_s",
            "ratio_to_clip",
            "ratio_to_clip_cpu",
        ):
            assert _positive(r[k]), (r["recipe"], k, r[k])
        assert math.isfinite(r["outside_share"]) and r["outside_share"] < 1
        assert r["batch"] == B.QUICK.recipe_batch and r["meets_outside_goal"] is None  # no goal at quick sizes
        assert r["forward_ms"] + r["backward_ms"] + r["optim_ms"] == pytest.approx(r["step_ms"], rel=0.5)
    assert rows[0]["ratio_to_clip"] == 1.0
    by = {r["recipe"]: r for r in rows}
    assert by["degla"]["teacher"] and not by["clip"]["teacher"]
    assert by["degla"]["K"] == R.get_recipe("degla").num_negatives
    # hard negatives widen the text batch; boxes double both batches
    assert by["degla"]["text_rows"] == B.QUICK.recipe_batch * (1 + by["degla"]["K"])
    assert by["hycoclip"]["image_rows"] == 2 * B.QUICK.recipe_batch
    for r in rows:  # where the step's operator time goes: every class present, shares of one whole
        assert set(r["time_shares"]) == {c for c, _ in B.OP_CLASSES} | {"optimizer", "other"}
        assert sum(r["time_shares"].values()) == pytest.approx(1.0) and min(r["time_shares"].values()) >= 0
    # world-debug's ViT spends time in each class the profile separates: a broken classification would show zeros
    assert all(by["clip"]["time_shares"][c] > 0 for c in ("convolution", "attention", "matmul", "other"))


def test_recipes_clip_first_and_unknown():
    out = B.bench_recipes(B.QUICK, recipes=["meru"])
    assert [r["recipe"] for r in out["rows"]] == ["clip", "meru"]
    with pytest.raises(KeyError, match="no-such-recipe"):
        B.bench_recipes(B.QUICK, recipes=["no-such-recipe"])


def test_model_preset_and_batch_overrides():
    # `--model-preset` / `--batch-size` reach the recipe steps; the goals are judged only for a world model at batch 64
    r = B.run_benchmarks(("recipes",), quick=True, recipes=["clip"], model_preset="world-tiny-r16", batch_size=4)[
        "recipes"
    ]
    assert r["preset"] == "world-tiny-r16" and r["batch"] == 4 and r["rows"][0]["batch"] == 4
    assert r["rows"][0]["meets_peak_goal"] is None  # batch 4 is not the goal's batch
    assert B.goal_applies("world-tiny") and B.goal_applies("world-tiny-r16")
    assert not B.goal_applies("world-debug") and not B.goal_applies("real-tiny")  # smoke model; BPE model
    from hierbench.ledger.budgets import BUDGETS  # the bench steps at the batch quick/standard pre-train at

    assert B.FULL.recipe_batch == BUDGETS["quick"].batch_size == BUDGETS["standard"].batch_size
    with pytest.raises(ValueError, match="no-such-model"):
        B.run_benchmarks(("recipes",), quick=True, model_preset="no-such-model")
    with pytest.raises(ValueError, match="batch_size"):
        B.run_benchmarks(("recipes",), quick=True, batch_size=1)


def test_op_class_matches_matmuls_exactly():
    assert B.op_class("aten::mm") == "matmul" and B.op_class("aten::addmm") == "matmul"
    assert B.op_class("aten::mm_backward_like") == "other"  # a substring of 'aten::mm' is not a matmul
    assert B.op_class("aten::cudnn_batch_norm") == "batch_norm"
    assert B.op_class("aten::convolution_backward") == "convolution"


def test_step_time_shares_rejects_bad_steps():
    s = B.recipe_setup("clip", "world-debug", batch_size=4)
    with pytest.raises(ValueError, match="steps"):
        B.step_time_shares(s, 0)


def test_time_recipe_step_rejects_bad_counts():
    s = B.recipe_setup("clip", "world-debug", batch_size=4)
    with pytest.raises(ValueError, match="steps"):
        B.time_recipe_step(s, steps=0)


# ---------------------------------------------------------------- compare section


def _write_results(folder: Path, preset="quick", rows=None, meta=None):
    folder.mkdir(parents=True, exist_ok=True)
    meta = (
        dict(preset=dict(name=preset), seeds=2, wall_seconds=123.0, peak_rss_mb=2048.0, threads=2)
        if meta is None
        else meta
    )
    rows = (
        rows
        if rows is not None
        else [
            dict(recipe="clip", seed=0, metric="samples_per_second", value=100.0, chance=None),
            dict(recipe="clip", seed=1, metric="samples_per_second", value=300.0, chance=None),
            dict(recipe="clip", seed=0, metric="train_seconds", value=10.0, chance=None),
            dict(recipe="clip", seed=1, metric="train_seconds", value=20.0, chance=None),
            dict(recipe="meru", seed=0, metric="samples_per_second", value=50.0, chance=None),
            dict(recipe="meru", seed=0, metric="train_seconds", value=40.0, chance=None),
            dict(recipe="clip", seed=0, metric="zs_acc/test-iid", value=0.5, chance=0.1),
        ]
    )
    (folder / "results.json").write_text(json.dumps(dict(meta=meta, rows=rows)))
    return folder


def test_read_compare(tmp_path):
    c = B.read_compare(_write_results(tmp_path / "cmp"))
    assert c["preset"] == "quick" and c["wall_s"] == 123.0 and c["peak_rss_mb"] == 2048.0
    assert c["peak_meets_goal"] is True
    by = {r["recipe"]: r for r in c["per_recipe"]}
    assert by["clip"] == dict(recipe="clip", samples_per_s=200.0, train_s=15.0, seeds=2)  # means over seeds
    assert by["meru"]["seeds"] == 1
    big = B.read_compare(
        _write_results(tmp_path / "big", meta=dict(preset=dict(name="quick"), wall_seconds=1.0, peak_rss_mb=7000.0))
    )
    assert big["peak_meets_goal"] is False
    smoke = B.read_compare(_write_results(tmp_path / "smoke", preset="smoke"))
    assert "peak_meets_goal" not in smoke  # the memory goal is about --preset quick
    assert B.bench_compare(B.QUICK, tmp_path / "cmp")["smoke"] is False


def test_read_compare_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError, match="results.json"):
        B.read_compare(tmp_path)
    (tmp_path / "results.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        B.read_compare(tmp_path)
    _write_results(tmp_path, meta=dict(wall_seconds=1.0))
    with pytest.raises(ValueError, match="peak_rss_mb"):
        B.read_compare(tmp_path)
    _write_results(tmp_path, rows=[dict(recipe="clip", seed=0, metric="zs_acc/test-iid", value=0.5, chance=None)])
    with pytest.raises(ValueError, match="samples_per_second"):
        B.read_compare(tmp_path)
    _write_results(tmp_path, rows=[dict(recipe="clip", metric="samples_per_second", value=1.0)])
    with pytest.raises(ValueError, match="seed"):
        B.read_compare(tmp_path)


def test_smoke_compare_in_child_process():
    c = B.bench_compare(B.QUICK)  # trains `clip` for a few steps with the smoke preset in a child process
    assert c["smoke"] is True and "NOT" in c["note"]
    assert _positive(c["wall_s"]) and _positive(c["peak_rss_mb"])
    assert [r["recipe"] for r in c["per_recipe"]] == list(B.QUICK.compare_recipes)
    assert _positive(c["per_recipe"][0]["samples_per_s"])


# ---------------------------------------------------------------- report text


def test_format_report(quick_report, recipes_section, tmp_path):
    rep = dict(
        quick_report, recipes=recipes_section, compare=B.bench_compare(B.QUICK, _write_results(tmp_path / "c")) | dict()
    )
    narrow = B.format_report(json.loads(json.dumps(rep)))  # issue 55: 100 columns, naming what it left out
    assert max(map(len, narrow.splitlines())) <= 100 and "more column(s)" in narrow and "--json, or --wide" in narrow
    with full_width():  # `hierbench bench --wide`: every column
        text = B.format_report(json.loads(json.dumps(rep)))
    assert "more column(s)" not in text
    for needle in (
        "== geometry",
        "== world",
        "== recipes",
        "== compare",
        "QUICK",
        "ratio to clip",
        "outside enc.",
        "n/a",
        "1 thread(s)",
        "✓ goal met",
        "operator time goes",
        "batch_norm",
    ):
        assert needle in text, needle
    for name in R.list_recipes():
        assert name in text
    assert "goal missed" not in text.split("== compare")[0]  # no goals judged at quick sizes


# ---- section `real`: hierbench against open_clip_train and a plain open_clip loop (issue 27) ------------------------
def test_real_section_quick_structure():
    """The section at quick sizes: every ratio finite and positive, the report's lines present (never a timing
    assertion)."""
    import math as _m

    rep = B.run_benchmarks(["real"], quick=True)
    t, e = rep["real"]["train"], rep["real"]["eval"]
    assert t["model"] == B.QUICK.real_model and t["batch"] == B.QUICK.real_batch
    assert [r["precision"] for r in t["rows"]] == ["fp32", "amp_bf16"]
    for r in t["rows"]:
        for k in ("hierbench_samples_per_s", "open_clip_train_samples_per_s", "ratio"):
            assert _m.isfinite(r[k]) and r[k] > 0, (r["precision"], k)
        assert isinstance(r["meets_goal"], bool)
    assert _m.isfinite(t["bf16_over_fp32"]) and t["bf16_over_fp32"] > 0 and t["bf16_meets_goal"] in (True, False, None)
    assert e["items"] == B.QUICK.real_eval_items and e["verdicts_equal"] == e["items"]  # same model, same inputs
    for k in ("hierbench_items_per_s", "plain_loop_items_per_s", "ratio"):
        assert _m.isfinite(e[k]) and e[k] > 0
    text = B.format_report(rep)
    assert "open_clip_train" in text and "plain loop" in text and "amp_bf16 / fp32" in text


def test_conv_layer_rates_cover_the_tower_and_the_loop_report_names_the_thin_layers():
    """Every convolution of the ResNet tower once, with the FLOPs of its shape (the wider tower's twice the narrow
    one's where its channels double on both sides); the loop report's lines say where the convolution time goes and
    fit 100 columns; a ViT tower is refused by name."""
    narrow, wide = B.conv_layer_rates("world-tiny", batch=2, repeats=1), B.conv_layer_rates("world-tiny-r16", 2, 1)
    assert [r["layer"] for r in narrow] == [r["layer"] for r in wide] and len(narrow) == 19
    by_layer = {r["layer"]: r for r in wide}
    assert by_layer["layer2.0.conv2"]["flops"] == 4 * {r["layer"]: r for r in narrow}["layer2.0.conv2"]["flops"]
    assert all(r["ms"] > 0 and r["flop_per_s"] > 0 for r in narrow)
    summary = B.conv_summary(narrow, peak=1e11, thin=8)
    thin = [r for r in narrow if int(r["channels"].split("->")[0]) <= 8]
    assert summary["thin_flop_share"] == pytest.approx(sum(r["flops"] for r in thin) / sum(r["flops"] for r in narrow))
    lo = dict(
        preset="world-tiny", batch=2, n_train=8, steps=1, warmup=0, rows=[], compiled=False, speedup_goal=3.0,
        overhead_goal=0.1, peak_share_goal=0.6, matmul_peak_flop_per_s=1e11, conv_layers=narrow,
    )  # fmt: skip
    lines = fold_long("\n".join(B.format_loop(lo))).splitlines()  # as format_report prints it
    assert any("layers of <= 16 input channels" in line for line in lines)
    slowest = max(narrow, key=lambda r: r["ms"])  # which layer it is depends on the machine's timings
    assert any(slowest["layer"] in line and slowest["channels"] in line for line in lines)
    assert max(map(len, lines)) <= 100
    with pytest.raises(ValueError, match="world-debug.*ResNet"):
        B.conv_layer_rates("world-debug", batch=2, repeats=1)
