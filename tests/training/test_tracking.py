"""--report-to (hierbench.training.tracking): TensorBoard's event files, read back with TensorBoard's own reader, hold
every value
of metrics.jsonl (also across a resume); W&B writes offline unless WANDB_MODE says otherwise; bad backends are one
line."""

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from hierbench.ledger import compare as C
from hierbench.recipes import recipe_run as J
from hierbench.training import tracking as TR
from hierbench.ledger.budgets import BUDGETS
from hierbench.cli.parser import main
from hierbench.recipes.recipe_run import Validation
from hierbench.data.sources import WorldData
from hierbench.training.trainer import read_metrics


def _kw(tmp_path, **over):
    return {
        **dict(
            data=WorldData(n_train=64, cache_dir=tmp_path / "cache"),
            arch="world-debug",
            steps=6,
            batch_size=16,
            log_every=1,
            quiet=True,
        ),
        **over,
    }


def _events(run_dir: Path) -> EventAccumulator:
    return EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0, "images": 0, "histograms": 0}).Reload()


def _check_scalars_equal_metrics(run_dir: Path) -> EventAccumulator:
    ea, lines = _events(run_dir), read_metrics(run_dir)
    keys = sorted({k for m in lines for k, v in m.items() if k != "step" and isinstance(v, (int, float))})
    assert {"loss", "lr", "logit_scale", "grad_norm", "time"} <= set(keys)
    for k in keys:
        want = [(m["step"], float(m[k])) for m in lines if k in m]
        got = [(e.step, e.value) for e in ea.Scalars(TR.metric_tag(k))]
        assert [s for s, _ in got] == [s for s, _ in want], k  # each logged step once, in order
        assert np.allclose([v for _, v in got], [v for _, v in want], rtol=1e-6, atol=0), k  # float32 in the events
    return ea


def test_tensorboard_holds_metrics_jsonl_with_validation_and_figures(tmp_path):
    "A fine-tune with validation every 2 steps: train/, val/ (step 0 too), derived values, and a figure per evaluation."
    base = J.train_recipe("clip", tmp_path / "clip", **_kw(tmp_path, steps=2))
    res = J.train_recipe(
        "negclip",
        tmp_path / "ft",
        init_checkpoint=base.run_dir,
        validation=Validation(every=2, n=32),
        report_to="tensorboard",
        **_kw(tmp_path),
    )
    ea = _check_scalars_equal_metrics(res.run_dir)
    assert [e.step for e in ea.Scalars("val/contrastive")] == [0, 2, 4, 6]
    assert [e.step for e in ea.Images("norms/distribution")] == [0, 2, 4, 6]  # validation steps (+ the last)
    assert {"norms/image", "norms/text"} <= set(ea.Tags()["histograms"])
    temp = ea.Scalars("train/temperature")
    scale = ea.Scalars("train/logit_scale")
    assert np.allclose([t.value for t in temp], [1 / s.value for s in scale], rtol=1e-5)
    rate = ea.Scalars("train/samples_per_second")
    lines = [m for m in read_metrics(res.run_dir) if "time" in m]
    t_prev = [0.0] + [m["time"] for m in lines[:-1]]
    assert len(rate) == len(lines) and np.allclose(
        [r.value for r in rate], [16 / (m["time"] - t) for m, t in zip(lines, t_prev)], rtol=1e-4
    )


def test_a_resumed_run_shows_each_step_once(tmp_path):
    J.train_recipe("meru", tmp_path / "meru", report_to="tensorboard", stop_at=3, **_kw(tmp_path))
    J.train_recipe("meru", tmp_path / "meru", report_to="tensorboard", resume=True, **_kw(tmp_path))
    ea = _check_scalars_equal_metrics(tmp_path / "meru")
    assert [e.step for e in ea.Scalars("train/curvature")] == [1, 2, 3, 4, 5, 6]
    assert [e.step for e in ea.Images("norms/distribution")] == [6]


def test_seeds_side_by_side_report_like_seeds_alone(tmp_path):
    """`compare` trains through `seed_batch.train_seeds`: each seed's dashboard holds its own metrics.jsonl, figures
    included."""
    from hierbench.recipes.seed_batch import train_seeds

    res = train_seeds(
        "negclip",
        tmp_path / "group",
        [0, 1],
        init_checkpoint=None,
        report_to="tensorboard",
        validation=Validation(every=2, n=32),
        **{k: v for k, v in _kw(tmp_path).items() if k != "quiet"},
    )
    for r in res:
        ea = _check_scalars_equal_metrics(r.run_dir)
        assert [e.step for e in ea.Images("norms/distribution")] == [0, 2, 4, 6]
    a, b = (read_metrics(r.run_dir) for r in res)
    assert a[-1]["loss"] != b[-1]["loss"]  # two seeds, two dashboards: not one seed's lines twice


def test_wandb_is_offline_unless_the_user_says_otherwise(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    sent = []
    original = TR.WandbSink.scalars
    monkeypatch.setattr(
        TR.WandbSink,
        "scalars",
        lambda self, step, values: (sent.append((step, dict(values))), original(self, step, values)),
    )
    modes = []
    monkeypatch.setattr(TR.WandbSink, "close", lambda self: (modes.append(self.run.settings.mode), self.run.finish()))
    res = J.train_recipe("clip", tmp_path / "clip", report_to="wandb", **_kw(tmp_path, steps=3))
    assert modes == ["offline"]
    lines = read_metrics(res.run_dir)
    assert [s for s, _ in sent] == [m["step"] for m in lines]
    assert all(
        v[TR.metric_tag(k)] == float(m[k]) for (_, v), m in zip(sent, lines) for k in ("loss", "lr", "grad_norm")
    )
    files = list((res.run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1 and b"train/loss" in files[0].read_bytes()
    monkeypatch.setenv("WANDB_MODE", "disabled")  # the user's setting is honoured
    J.train_recipe("clip", tmp_path / "off", report_to="wandb", **_kw(tmp_path, steps=1))
    assert modes[-1] == "disabled" and not list((tmp_path / "off" / "wandb").glob("offline-run-*"))


def test_a_missing_backend_names_the_extra_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["train", "clip", "--out", str(out), "--arch", "world-debug", "--report-to", "wandb"])
    assert "pip install 'hierbench[track]'" in str(e.value.code) and "\n" not in str(e.value.code)
    assert not out.exists()
    with pytest.raises(SystemExit) as e:
        main(["compare", "--out", str(tmp_path / "cmp"), "--report-to", "tensorboard,wandb"])
    assert "hierbench[track]" in str(e.value.code) and not (tmp_path / "cmp").exists()


def test_compare_passes_report_to_to_every_run_without_touching_reuse(tmp_path, monkeypatch):
    budget = dataclasses.replace(BUDGETS["smoke"], report_to=("tensorboard",))
    assert budget.run_key() == BUDGETS["smoke"].run_key()  # a finished run is reused whatever the dashboards
    seen = {}

    class Stop(Exception):
        pass

    def fake(recipe, out, seeds, data, **kw):
        seen.update(kw)
        raise Stop

    monkeypatch.setattr(C, "train_seeds", fake)
    with pytest.raises(Stop):
        C._train_runs(C.get_recipe("clip"), [0], budget, tmp_path)
    assert seen["report_to"] == ("tensorboard",)
    with pytest.raises(SystemExit) as e:
        main(["compare", "--out", str(tmp_path / "c"), "--report-to", "mlflow"])
    assert "accepted: tensorboard, wandb" in str(e.value.code) and not (tmp_path / "c").exists()


def test_histogram_image_and_norms_of_both_geometries():
    img = TR.histogram_image({"a": np.ones(5), "b": np.ones(5)})  # one value everywhere: still a picture
    assert img.size == (640, 360)
    with pytest.raises(ValueError, match="empty"):
        TR.histogram_image({"a": np.array([])})
    import torch
    from hierbench.models.family import create_model

    batch = dict(images=torch.randn(4, 3, 64, 64), captions=["a red cube", "a dog", "two cats", "a ball"])
    for geometry in ("euclidean", "lorentz"):
        m = create_model("world-debug", geometry=geometry).train()
        norms = TR.embedding_norms_of(m, batch)
        assert set(norms) == {"image", "text"} and all(v.shape == (4,) and (v > 0).all() for v in norms.values())
        assert m.training  # the training flag is restored
