"""Several seeds in one process (`hierbench.recipes.seed_batch`): each seed's run is bit for bit the run
`train_recipe` trains
alone — whatever seeds share its process, for every kind of recipe — its batches are the single trainer's, it resumes
exactly (after a stop, a preemption, or seeds left at different steps), and bad input trains nothing."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hierbench.ledger.launchers import InProcess
from hierbench.training import trainer as T
from hierbench.recipes.recipe_run import Validation, train_recipe
from hierbench.recipes.seed_batch import check_seeds, seed_dir, train_seeds
from hierbench.data.sources import WorldData
from hierbench.training.trainer import NonFiniteLossError, PreemptionGuard, read_metrics


def _data(tmp_path, n=24):
    return WorldData(n_train=n, cache_dir=tmp_path / "cache")


def _kw(tmp_path, **over):
    return {**dict(data=_data(tmp_path), arch="world-debug", steps=3, batch_size=8, log_every=1, quiet=True), **over}


def _metrics(folder):
    return [{k: v for k, v in m.items() if k != "time"} for m in read_metrics(folder)]


def _state(folder):
    return torch.load(T.latest_checkpoint(folder) / T.STATE_FILE, map_location="cpu", weights_only=True)


def _equal(a, b, path="") -> None:
    "Nested dicts / lists / tensors equal bit for bit (the saved optimizer, scheduler and RNG states)."
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b), path
        return
    if isinstance(a, dict):
        assert set(a) == set(b), (path, set(a) ^ set(b))
        for k in a:
            _equal(a[k], b[k], f"{path}.{k}")
        return
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _equal(x, y, f"{path}[{i}]")
        return
    assert a == b, (path, a, b)


def assert_same_run(a: Path, b: Path, finished: bool = True) -> None:
    "Two run folders hold the same run: weights (+ teacher, heads in the checkpoint), metrics, optimizer/RNG state."
    if finished:
        wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), (a, b)
    assert _metrics(a) == _metrics(b), (a, b)
    ca, cb = T.latest_checkpoint(a), T.latest_checkpoint(b)
    assert ca.name == cb.name
    for f in sorted(p.name for p in ca.glob("*.safetensors")):
        fa, fb = load_file(ca / f), load_file(cb / f)
        assert fa.keys() == fb.keys() and all(torch.equal(fa[k], fb[k]) for k in fa), f
    sa, sb = _state(a), _state(b)
    for key in ("step", "optimizer", "scheduler", "rng", "data"):
        _equal(sa[key], sb[key], key)
    drop = ("run_dir", "seed_group", "init_checkpoint")
    conf = lambda f: {k: v for k, v in json.loads((f / "config.json").read_text()).items() if k not in drop}
    assert conf(a) == conf(b)


# ------------------------------------------------------------------ every kind of recipe, bit for bit


@pytest.mark.filterwarnings("ignore:recipe 'negclip-img' fine-tunes")
@pytest.mark.parametrize(
    "recipe, arch",
    [
        ("meru", "world-debug"),  # Lorentz head: curvature and alpha clamps
        ("argent", "world-tiny"),  # boxes (images + crops in one call) through the BatchNorm ResNet tower
        ("negclip-img", "world-debug"),  # hard-negative images: the dataset composes its own batches
    ],
)
def test_a_group_trains_each_pretraining_seed_as_train_recipe_does(tmp_path, recipe, arch):
    kw = _kw(tmp_path, arch=arch)
    group = train_seeds(recipe, tmp_path / "group", [0, 2], **kw)
    assert [r.run_dir for r in group] == [seed_dir(tmp_path / "group", s) for s in (0, 2)]
    for s in (0, 2):
        alone = train_recipe(recipe, tmp_path / f"alone{s}", seed=s, **kw)
        assert_same_run(seed_dir(tmp_path / "group", s), alone.run_dir)


@pytest.mark.parametrize("recipe", ["degla", "read"])
def test_fine_tunes_start_each_seed_from_its_own_parent(tmp_path, recipe):
    """DeGLA (EMA teacher, world-tiny's BatchNorm) and READ (a frozen decoder all seeds share) from per-seed CLIP
    parents."""
    arch = "world-tiny" if recipe == "degla" else "world-debug"
    parents = tmp_path / "clip"
    train_seeds("clip", parents, [0, 1], **_kw(tmp_path, arch=arch))
    from hierbench.models.decoder import pretrain_decoder
    from hierbench.data.sources import world_captions, world_source
    from hierbench.recipes.registry import get_recipe
    from hierbench.models.family import create_model

    decoder = None
    if recipe == "read":
        ds = world_source(get_recipe("read"), create_model(arch), _data(tmp_path))
        decoder = pretrain_decoder(world_captions(ds), steps=2, seed=0)[0].freeze()
    kw = _kw(tmp_path, arch=arch, validation=Validation(every=1, n=8), decoder=decoder)
    train_seeds(recipe, tmp_path / "ft", [0, 1], init_checkpoint=parents, **kw)
    for s in (0, 1):
        alone = train_recipe(recipe, tmp_path / f"alone{s}", seed=s, init_checkpoint=parents / f"seed{s}", **kw)
        assert_same_run(tmp_path / "ft" / f"seed{s}", alone.run_dir)
        assert any("val_contrastive" in m for m in read_metrics(alone.run_dir))
    cfg = json.loads((tmp_path / "ft" / "seed1" / "config.json").read_text())
    named = Path(cfg["init_checkpoint"])  # relative to the run folder: the record names no folder of this machine
    assert not named.is_absolute()
    assert (tmp_path / "ft" / "seed1" / named).resolve() == (parents / "seed1" / "model.safetensors").resolve()


def test_a_seed_does_not_depend_on_which_seeds_share_its_process(tmp_path):
    "Seed 1 in {0, 1, 2}, alone and beside seed 3 (world-tiny, BatchNorm): the same run each time, and train_recipe's."
    kw = _kw(tmp_path, arch="world-tiny")
    for name, seeds in (("three", [0, 1, 2]), ("alone", [1]), ("pair", [3, 1])):
        train_seeds("clip", tmp_path / name, seeds, **kw)
    single = train_recipe("clip", tmp_path / "single", seed=1, **kw)
    for name in ("three", "alone", "pair"):
        assert_same_run(tmp_path / name / "seed1", single.run_dir)
    w0, w1 = (load_file(tmp_path / "three" / f"seed{s}" / "model.safetensors") for s in (0, 1))
    assert not all(torch.equal(w0[k], w1[k]) for k in w0)  # the seeds are different runs
    assert json.loads((tmp_path / "pair" / "seed1" / "config.json").read_text())["seed_group"] == [3, 1]


@pytest.mark.filterwarnings("ignore:recipe 'negclip' fine-tunes")
def test_each_seed_sees_the_batches_the_single_trainer_draws_for_it(tmp_path, monkeypatch):
    "Fairness: seed k's batches (scenes, captions, negatives and their masks) are a function of (k, step) only."
    seen = {}
    step_fn = T.train_step

    def record(r, cfg, loss_fn, batch, step, *rest):
        seen[(r.run_dir.parent.name, r.run_dir.name, step)] = (
            batch["index"].tolist(),
            list(batch["captions"]),
            batch["negatives"],
            batch["negatives_mask"].tolist(),
        )
        return step_fn(r, cfg, loss_fn, batch, step, *rest)

    monkeypatch.setattr(T, "train_step", record)
    kw = _kw(tmp_path, steps=4)  # 24 scenes, batch 8: the fourth step is in the second epoch
    train_seeds("negclip", tmp_path / "group", [0, 1], **kw)
    for s in (0, 1):
        train_recipe("negclip", tmp_path / "alone" / f"seed{s}", seed=s, **kw)
    for s in (0, 1):
        for step in range(1, 5):
            assert seen[("group", f"seed{s}", step)] == seen[("alone", f"seed{s}", step)]
    assert seen[("group", "seed0", 1)][0] != seen[("group", "seed1", 1)][0]  # each seed its own data order


# ------------------------------------------------------------------ resume, preemption, failures


def test_a_stopped_group_resumes_exactly_also_with_seeds_at_different_steps(tmp_path):
    kw = _kw(tmp_path, steps=6, ckpt_every=2)
    train_seeds("clip", tmp_path / "straight", [0, 1], **kw)
    train_seeds("clip", tmp_path / "cut", [0, 1], stop_at=3, **kw)
    assert [T.latest_checkpoint(tmp_path / "cut" / f"seed{s}").name for s in (0, 1)] == ["step-00000003"] * 2
    assert not (tmp_path / "cut" / "seed0" / "model.safetensors").exists()
    # as if the process died between the two seeds' checkpoints of step 3: seed 1 is back at step 2
    import shutil

    shutil.rmtree(tmp_path / "cut" / "seed1" / "checkpoints" / "step-00000003")
    (tmp_path / "cut" / "seed1" / "latest.json").unlink()
    train_seeds("clip", tmp_path / "cut", [0, 1], resume=True, **kw)
    for s in (0, 1):
        assert_same_run(tmp_path / "cut" / f"seed{s}", tmp_path / "straight" / f"seed{s}")


def test_group_folders_are_ordinary_runs_that_resume_alone_and_back(tmp_path):
    "A group's seed folder resumes under train_recipe, and train_recipe's folders resume in a group: the same runs."
    from hierbench.models.family import load_model

    kw = _kw(tmp_path, steps=5)
    train_seeds("meru", tmp_path / "straight", [0, 1], **kw)
    train_seeds("meru", tmp_path / "mixed", [0], stop_at=2, **kw)  # seed 0 started in a group,
    train_recipe("meru", tmp_path / "mixed" / "seed0", seed=0, resume=True, **kw)  # finished alone
    train_recipe("meru", tmp_path / "mixed" / "seed1", seed=1, stop_at=3, **kw)  # seed 1 started alone,
    train_seeds("meru", tmp_path / "mixed", [0, 1], resume=True, **kw)  # finished in a group (seed 0 is done)
    for s in (0, 1):
        assert_same_run(tmp_path / "mixed" / f"seed{s}", tmp_path / "straight" / f"seed{s}")
    model = load_model(tmp_path / "mixed" / "seed1" / "model.safetensors")
    assert model.geometry == "lorentz" and read_metrics(tmp_path / "mixed" / "seed1")[-1]["step"] == 5


def test_a_preemption_signal_stops_every_seed_after_the_same_step(tmp_path):
    kw = _kw(tmp_path, steps=5, ckpt_every=100)
    train_seeds("clip", tmp_path / "straight", [0, 1, 2], **kw)
    guard = PreemptionGuard(())

    def signal_at_step_2(seed):
        def cb(event, state):
            if event == "before_optimizer_step" and state["step"] == 2 and seed == 1:
                guard.request("SIGTERM")

        return [cb]

    res = train_seeds("clip", tmp_path / "cut", [0, 1, 2], callbacks=signal_at_step_2, stop_signals=guard, **kw)
    assert [(r.preempted, r.step, r.weights_path) for r in res] == [("SIGTERM", 2, None)] * 3
    assert [T.latest_checkpoint(r.run_dir).name for r in res] == ["step-00000002"] * 3
    train_seeds("clip", tmp_path / "cut", [0, 1, 2], resume=True, **kw)
    for s in (0, 1, 2):
        assert_same_run(tmp_path / "cut" / f"seed{s}", tmp_path / "straight" / f"seed{s}")


def test_a_signal_before_a_later_seed_begins_stops_it_too(tmp_path):
    "Seed 1 resumes at step 3, seed 0 from scratch; a signal at step 2 (seed 0 alone) stops both, seed 1 untouched."
    kw = _kw(tmp_path, steps=5, ckpt_every=100)
    train_seeds("clip", tmp_path / "straight", [0, 1], **kw)
    train_recipe("clip", tmp_path / "cut" / "seed1", seed=1, stop_at=3, **kw)
    before = (tmp_path / "cut" / "seed1" / "metrics.jsonl").read_text()
    guard = PreemptionGuard(())

    def signal_at_step_2(event, state):
        if event == "before_optimizer_step" and state["step"] == 2:
            guard.request("SIGUSR2")

    res = train_seeds(
        "clip", tmp_path / "cut", [0, 1], resume=True, callbacks=[signal_at_step_2], stop_signals=guard, **kw
    )
    assert [(r.preempted, r.step, r.weights_path) for r in res] == [("SIGUSR2", 2, None), ("SIGUSR2", 3, None)]
    assert (tmp_path / "cut" / "seed1" / "metrics.jsonl").read_text() == before
    train_seeds("clip", tmp_path / "cut", [0, 1], resume=True, **kw)
    for s in (0, 1):
        assert_same_run(tmp_path / "cut" / f"seed{s}", tmp_path / "straight" / f"seed{s}")


def test_a_seed_that_fails_stops_alone_and_is_named(tmp_path):
    kw = _kw(tmp_path, steps=4, ckpt_every=1)

    def poison(seed):
        def cb(event, state):  # seed 1's logit scale becomes NaN after step 2: its step 3 loss is NaN
            if event == "step_end" and state["step"] == 2 and seed == 1:
                with torch.no_grad():
                    state["model"].clip.logit_scale.fill_(float("nan"))

        return [cb]

    with pytest.raises(NonFiniteLossError) as info:
        train_seeds("clip", tmp_path / "group", [0, 1, 2], callbacks=poison, **kw)
    assert info.value.step == 3 and any("seed 1 of the group" in n for n in info.value.__notes__)
    for s in (0, 2):
        alone = train_recipe("clip", tmp_path / f"alone{s}", seed=s, **kw)
        assert_same_run(tmp_path / "group" / f"seed{s}", alone.run_dir)
    assert not (tmp_path / "group" / "seed1" / "model.safetensors").exists()
    assert T.latest_checkpoint(tmp_path / "group" / "seed1").name == "step-00000002"


# ------------------------------------------------------------------ bad input trains nothing


def test_bad_seeds_and_data_are_one_line_errors_before_anything_is_written(tmp_path):
    from hierbench.data.real_data import RealData

    for bad, msg in (
        ([0, 0], "given twice"),
        ([1, -1], "negative"),
        ([0, "1"], "not an integer"),
        ([], "none given"),
        ([True], "not an integer"),
    ):
        with pytest.raises(ValueError, match=msg):
            check_seeds(bad)
        with pytest.raises(ValueError, match=msg):
            train_seeds("clip", tmp_path / "x", bad, **_kw(tmp_path))
    with pytest.raises(ValueError, match="built-in world"):
        train_seeds("clip", tmp_path / "x", [0, 1], RealData("coco:nothing.json"), arch="world-debug")
    with pytest.raises(ValueError, match="num_workers"):
        train_seeds("clip", tmp_path / "x", [0, 1], **_kw(tmp_path), num_workers=2)
    assert not (tmp_path / "x").exists()
    with pytest.raises(FileNotFoundError, match="no finished seed1/"):  # a parent seed that is not trained
        train_seeds("clip", tmp_path / "parents", [0], **_kw(tmp_path))
        train_seeds("negclip", tmp_path / "ft", [0, 1], init_checkpoint=tmp_path / "parents", **_kw(tmp_path))
    assert not (tmp_path / "ft").exists()


def test_a_folder_holding_a_run_is_refused_without_resume_and_nothing_is_touched(tmp_path):
    kw = _kw(tmp_path, steps=2)
    train_recipe("clip", tmp_path / "g" / "seed1", seed=1, **kw)
    before = (tmp_path / "g" / "seed1" / "metrics.jsonl").read_text()
    with pytest.raises(FileExistsError, match="seed1 already holds a run"):
        train_seeds("clip", tmp_path / "g", [0, 1], **kw)
    assert not (tmp_path / "g" / "seed0").exists()
    assert (tmp_path / "g" / "seed1" / "metrics.jsonl").read_text() == before
    res = train_seeds("clip", tmp_path / "g", [0, 1], resume=True, **kw)  # the finished seed is kept as it is
    assert [r.step for r in res] == [2, 2] and (tmp_path / "g" / "seed1" / "metrics.jsonl").read_text() == before


# ------------------------------------------------------------------ compare: groups of seeds per process


def test_compare_groups_seeds_without_changing_a_number_and_reuses_across_group_sizes(tmp_path, monkeypatch):
    "K=2 and K=1 compares hold the same runs (weights hashes, results); a K=2 compare into K=1's folder trains nothing."
    from hierbench.ledger import compare as C

    kw = dict(recipes=["clip", "negclip"], launcher=InProcess(), log=lambda *_: None, progress=False)
    one = C.run_compare("smoke", seeds=3, out=tmp_path / "one", seeds_per_process=1, **kw)
    two = C.run_compare("smoke", seeds=3, out=tmp_path / "two", seeds_per_process=2, **kw)
    assert (one["meta"]["seeds_per_process"], two["meta"]["seeds_per_process"]) == (1, 2)
    sha = lambda res: {(r["recipe"], r["seed"]): r["weights_sha256"] for r in res["runs"]}
    for r in one["runs"]:  # the same tensors (a fine-tune's file also records its parent's path, which differs)
        assert_same_run(
            C.run_dir(tmp_path / "one", r["recipe"], r["seed"]), C.run_dir(tmp_path / "two", r["recipe"], r["seed"])
        )
    key = ["recipe", "seed", "metric"]
    clean = lambda res: (
        res["results"]
        .query("metric not in ('train_seconds', 'samples_per_second')")
        .sort_values(key)
        .reset_index(drop=True)
    )
    import pandas as pd

    pd.testing.assert_frame_equal(clean(one), clean(two))
    groups = {(r["recipe"], r["seed"]): r["seed_group"] for r in two["runs"]}
    assert groups[("clip", 1)] == [0, 1] and groups[("negclip", 2)] == [2]

    def no_training(*a, **k):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(C, "_train_runs", no_training)
    again = C.run_compare("smoke", seeds=3, out=tmp_path / "one", seeds_per_process=3, **kw)
    assert sha(again) == sha(one)


def test_compare_refuses_more_seeds_per_process_than_seeds_before_touching_the_folder(tmp_path, capsys):
    from hierbench.ledger import compare as C
    from hierbench.cli.parser import main

    with pytest.raises(ValueError, match="larger than the 2 seed"):
        C.run_compare("smoke", seeds=2, out=tmp_path / "c", recipes=["clip"], seeds_per_process=3, log=lambda *_: None)
    assert not (tmp_path / "c" / "plan.json").exists() and not (tmp_path / "c" / "runs").exists()
    with pytest.raises(SystemExit) as info:
        main(["compare", "--budget", "smoke", "--seeds", "2", "--seeds-per-process", "3", "--out", str(tmp_path / "c")])
    assert "larger than the 2 seed(s) asked for" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ValueError, match="a round adds"):
        C.run_compare(
            "smoke",
            seeds=3,
            out=tmp_path / "u",
            recipes=["clip"],
            seeds_per_process=3,
            until_decided=True,
            max_seeds=5,
            round_seeds=2,
            log=lambda *_: None,
        )


def test_hierbench_train_seeds_writes_one_run_folder_per_seed(tmp_path, capsys):
    from hierbench.cli.parser import main

    common = [
        "--arch",
        "world-debug",
        "--steps",
        "2",
        "--n-train",
        "16",
        "--batch-size",
        "8",
        "--out",
        str(tmp_path / "g"),
    ]
    main(["train", "clip", "--seeds", "2,0", *common])
    out = capsys.readouterr().out
    assert "trained clip seed 2 for 2 steps" in out and "trained clip seed 0 for 2 steps" in out
    assert all((tmp_path / "g" / f"seed{s}" / "model.safetensors").is_file() for s in (0, 2))
    with pytest.raises(SystemExit, match="already holds a run"):
        main(["train", "clip", "--seeds", "0,1", *common])
    assert not (tmp_path / "g" / "seed1").exists()
    with pytest.raises(SystemExit, match="real data trains one seed per run"):
        main(["train", "clip", "--seeds", "0,1", "--data", "coco:x.json", "--out", str(tmp_path / "r")])
    main(
        [
            "train",
            "negclip",
            "--seeds",
            "0,2",
            *common[:-1],
            str(tmp_path / "ft"),
            "--init-checkpoint",
            str(tmp_path / "g"),
        ]
    )
    cfg = json.loads((tmp_path / "ft" / "seed2" / "config.json").read_text())
    named = Path(cfg["init_checkpoint"])  # relative to the run folder
    assert (tmp_path / "ft" / "seed2" / named).resolve() == (tmp_path / "g" / "seed2" / "model.safetensors").resolve()


# ------------------------------------------------------------------ one helper for a run's events


class _Recorder:
    "A callback that keeps what it is told (event, step, the metrics line without its time) and adds a term of its own."

    def __init__(self):
        self.seen = []

    def __call__(self, event, state):
        m = state.get("metrics")
        self.seen.append((event, state.get("step"), None if m is None else {k: v for k, v in m.items() if k != "time"}))
        return {"probe": float(state["step"])} if event in ("begin", "log") else None


def test_train_and_a_seed_group_tell_their_callbacks_the_same_events(tmp_path):
    """One helper (`hierbench.training.callbacks.RunEvents`) sends both: run_start, step 0's terms, every metrics line,
    step_end, run_end."""
    alone, grouped = _Recorder(), _Recorder()
    train_recipe("clip", tmp_path / "alone", seed=1, callbacks=[alone], **_kw(tmp_path))
    train_seeds("clip", tmp_path / "group", [1], callbacks=[grouped], **_kw(tmp_path))
    assert alone.seen == grouped.seen
    events = [e for e, _, _ in alone.seen]
    assert events[:3] == ["run_start", "begin", "metrics"] and events[-1] == "run_end" and events.count("step_end") == 3
    assert alone.seen[2][2] == {"step": 0, "probe": 0.0} and read_metrics(tmp_path / "group" / "seed1")[0] == {
        "step": 0,
        "probe": 0.0,
    }
