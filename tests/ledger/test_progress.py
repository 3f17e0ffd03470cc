"""Progress with an ETA: the time left from the run graph (pure arithmetic), costs refined by finished runs, the
reporter's lines (every finished run said once, by the parent), and the launchers' hooks (pool, submitit)."""

import gzip
import itertools
import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from hierbench.ledger import progress as PG
from hierbench.ledger.budgets import BUDGETS
from hierbench.ledger.progress import CompareProgress, RunCosts, duration, eta_seconds, prior_run_seconds

Q = BUDGETS["quick"]


@pytest.mark.parametrize(
    "todo, deps, secs, jobs, running, expected",
    [
        (list("abcd"), {}, dict.fromkeys("abcd", 10.0), 2, None, 20.0),  # two workers, four equal runs: two rounds
        (list("abc"), {}, dict.fromkeys("abc", 10.0), 2, None, 20.0),  # the third waits for a free worker
        (["p", "f", "q"], {"f": ["p"]}, dict(p=10.0, f=5.0, q=1.0), 2, None, 15.0),  # a fine-tune waits for its parent
        (["f"], {"f": ["p"]}, dict(f=5.0), 2, dict(p=3.0), 8.0),  # its parent is running, 3 s left
        (["a", "b"], {}, dict(a=4.0, b=6.0), None, None, 6.0),  # no limit (SLURM): the longest
        (["f"], {"f": ["done"]}, dict(f=2.0), 1, None, 2.0),  # a parent not in the graph is done
        (["x", "y"], {}, dict(x=1.0, y=1.0), 1, dict(r=5.0), 7.0),  # one worker, busy for 5 s first
    ],
)
def test_eta_is_the_launchers_schedule_replayed(todo, deps, secs, jobs, running, expected):
    assert eta_seconds(todo, deps, secs, jobs, running) == pytest.approx(expected)


def test_eta_names_tasks_that_never_run():
    with pytest.raises(ValueError, match="never run"):
        eta_seconds(["f", "g"], {"f": ["g"], "g": ["f"]}, dict(f=1.0, g=1.0))


def test_costs_move_from_the_prior_to_the_measured_runs():
    c = RunCosts(Q)
    assert c.seconds("hycoclip") == pytest.approx(prior_run_seconds("hycoclip", Q))
    c.add_row(dict(recipe="clip", train_seconds=3 * prior_run_seconds("clip", Q), eval_seconds=0.0))
    assert c.seconds("hycoclip") == pytest.approx(3 * prior_run_seconds("hycoclip", Q))  # a 3x slower machine
    c.add_row(dict(recipe="hycoclip", train_seconds=100.0, eval_seconds=10.0))
    assert c.seconds("hycoclip") == pytest.approx(110.0)  # measured wins
    c.add_row(dict(recipe="meru", train_seconds=None, eval_seconds=1.0))  # unknown: ignored
    assert "meru" not in c.measured


def unfold(line: str) -> str:
    "A progress line as it was before `hierbench.terminal.fold` folded it to 100 columns."
    return line.replace("\n  ", " ")


def test_progress_lines_fit_100_columns_and_unfold_to_the_line(tmp_path):
    lines, now = [], [0.0]
    p = CompareProgress(
        Q,
        runs_of=lambda t: [(t[1], s) for s in t[0]],
        run_folder=lambda r, s: tmp_path / r / f"seed{s}",
        jobs=2,
        log=lines.append,
        bar=False,
        clock=lambda: now[0],
        calibrate_with=None,
    )
    p.begin([((0, 1), "clip"), ((0, 1), "negclip")], {})
    assert all(len(x) <= 100 for x in lines[-1].splitlines()) and unfold(lines[-1]) == p.first_estimate["line"]


def _reporter(tmp_path, lines, now, **kw):
    kw.setdefault("calibrate_with", None)  # no probe of this machine unless a test asks for one
    return CompareProgress(
        Q,
        runs_of=lambda t: [] if t == "decoder" else [(t[1], s) for s in t[0]],
        run_folder=lambda r, s: tmp_path / "runs" / r / f"seed{s}",
        jobs=2,
        log=lambda line: lines.append(unfold(line)),
        bar=False,
        clock=lambda: now[0],
        **kw,
    )


def _row(recipe, seed, secs=100.0):
    return dict(recipe=recipe, seed=seed, train_seconds=secs - 5, eval_seconds=5.0, metrics={"comp_acc": 0.6})


def test_every_finished_run_is_said_once_with_the_count_and_time_left_and_batched_tasks_count_each_seed(tmp_path):
    lines, now = [], [0.0]
    p = _reporter(tmp_path, lines, now, heartbeat_s=60)
    tasks = ["decoder", ((0, 1), "clip"), ((0, 1), "negclip")]
    p.begin(tasks, {tasks[2]: [tasks[1]]})
    assert p.total == 4 and "4 runs, 0 in the folder, 4 to train" in lines[-1]
    p.started(tasks[0])
    p.finished(tasks[0], {})  # READ's decoder: no run, no line
    p.started(tasks[1])
    now[0] = 30.0
    p.tick()
    assert len(lines) == 1  # quiet until the heartbeat is due
    now[0] = 61.0
    p.tick()
    assert "training: clip seed 0 0%, clip seed 1 0%" in lines[-1]  # the heartbeat says what trains
    now[0] = 200.0
    p.finished(tasks[1], [_row("clip", 0), _row("clip", 1)])  # two seeds in one task: two lines
    assert [l.split("]")[0] for l in lines[-2:]] == ["[1/4", "[2/4"] and "3 min in" in lines[-1]
    assert p.eta() == pytest.approx(2 * p.costs.seconds("negclip"))  # both negclip seeds in one task, not started
    p.started(tasks[2])
    p.finished(tasks[2], [_row("negclip", 0, 50.0), _row("negclip", 1, 50.0)])
    said = [l for l in lines if l.startswith("[") and " s" in l and "training" not in l and "comp " in l]
    assert len(said) == 4 and lines[-1].startswith("[4/4]") and "~0 s left" in lines[-1]


def test_runs_already_in_the_folder_are_counted_said_reused_and_cost_nothing(tmp_path):
    folder = tmp_path / "runs" / "clip" / "seed0"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"x")
    (folder / "eval.json").write_text(json.dumps(dict(_row("clip", 0, 400.0), run_key=Q.run_key())))
    lines, now = [], [0.0]
    p = _reporter(tmp_path, lines, now)
    t0, t1 = ((0,), "clip"), ((1,), "clip")
    p.begin([t0, t1], {})
    assert "2 runs, 1 in the folder, 1 to train" in lines[-1] and "(from the measured runs;" in lines[-1]
    assert p.costs.seconds("clip") == pytest.approx(400.0) and p.eta() == pytest.approx(400.0)  # only seed 1 costs
    p.finished(t0, [_row("clip", 0, 400.0)])
    assert lines[-1].endswith("(reused)") and p.costs.measured["clip"] == [400.0]  # not counted twice


def test_duration_words():
    assert [duration(s) for s in (0, 59.4, 99, 100, 3599, 3600, 7260)] == [
        "0 s",
        "59 s",
        "99 s",
        "2 min",
        "60 min",
        "1 h 00 min",
        "2 h 01 min",
    ]


def _recorder():
    rec = SimpleNamespace(started=[], finished=[], ticks=0)
    return SimpleNamespace(
        started=rec.started.append,
        finished=lambda t, r: rec.finished.append((t, r)),
        tick=lambda: setattr(rec, "ticks", rec.ticks + 1),
    ), rec


def test_in_process_launcher_tells_the_parent_about_every_task():
    "(The process pool's hooks run in tests/test_until_decided.py's smoke run: two workers, every line said once.)"
    from hierbench.ledger.launchers import InProcess

    progress, rec = _recorder()
    tasks = [(0, "a"), (0, "b")]
    assert InProcess()(tasks, {(0, "b"): [(0, "a")]}, len, progress=progress) == {t: 2 for t in tasks}
    assert rec.started == tasks and rec.finished == [(t, 2) for t in tasks]


def test_submitit_launcher_tells_the_parent_about_every_task_and_the_runs_already_finished(tmp_path, monkeypatch):
    from hierbench.ledger import launchers as L
    from hierbench.ledger.run_graph import task_graph, task_runs

    class Job:
        def __init__(self, value):
            self.value, self.job_id = value, "1"

        def done(self):
            return True

        def result(self):
            return self.value

    class Executor:
        cluster, folder = "local", tmp_path

        def submit(self, fn):
            return Job(fn())

    rows = lambda t: [{"recipe": r, "seed": s} for r, s in task_runs(t)]
    # every clip run is finished in the folder; the negclip runs are not
    monkeypatch.setattr(L, "finished_run", lambda r, s, budget, out: {"recipe": r, "seed": s} if r == "clip" else None)
    monkeypatch.setattr(L, "_GraphJob", lambda run, threads: rows)
    tasks, deps = task_graph(["clip", "negclip"], 2)
    clip = [t for t in tasks if task_runs(t)[0][0] == "clip"]
    progress, rec = _recorder()
    launcher = L.SubmititLauncher(Executor(), jobs=2, poll_s=0.0, log=lambda *a: None)
    done = launcher(tasks, deps, SimpleNamespace(budget=BUDGETS["smoke"], out=str(tmp_path)), progress=progress)
    assert [t for t, _ in rec.finished][: len(clip)] == clip  # finished in the folder: said at once
    assert sorted(t for t, _ in rec.finished) == sorted(tasks) and sorted(rec.started) == sorted(set(tasks) - set(clip))
    from hierbench.ledger.compare import _task_rows

    assert all(_task_rows(done[t]) == rows(t) for t in tasks)  # every run's row, none lost


def test_a_rounds_estimate_counts_runs_already_in_the_folder_as_free(tmp_path):
    "The time cap asks whether a round fits: runs the folder already holds (e.g. seeds of an earlier run) cost nothing."
    folder = tmp_path / "runs" / "clip" / "seed5"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"x")
    (folder / "eval.json").write_text(json.dumps(dict(_row("clip", 5, 300.0), run_key=Q.run_key())))
    p = _reporter(tmp_path, [], [0.0])
    assert p.estimate([((5,), "clip")], {}) == 0.0
    assert p.estimate([((5, 6), "clip")], {}) == pytest.approx(300.0)  # seed 6 costs what seed 5 took


def test_once_reads_decoder_is_trained_a_later_rounds_estimate_does_not_count_it_again(tmp_path):
    "A round of --until-decided after the one that trained READ's decoder only reads its file: it costs nothing."
    p = _reporter(tmp_path, [], [0.0], decoder_seconds=120.0)
    assert p.estimate(["decoder"], {}) == pytest.approx(120.0)
    p.begin(["decoder"], {})
    p.started("decoder")
    p.finished("decoder", {})
    assert p.estimate(["decoder"], {}) == 0.0
    p.retrain = {("clip", 9)}  # the running round's restored parents: a question about other tasks leaves them
    p.estimate([((5,), "clip")], {}, retrain={("clip", 5)})
    assert p.retrain == {("clip", 9)}


RECORDS = Path(__file__).parents[2] / "nbs" / "results" / "data" / "ledger-standard" / "runs.jsonl.gz"


def test_the_priors_are_the_ledger_records_medians():
    """Each recipe's prior is its median training seconds over the standard ledger's recorded seeds, at their steps and
    batch."""
    # ARGENT's two weighting ablations joined the records later, trained on another machine (Intel Xeon, two runs side
    # by side): their costs are not the AMD EPYC ledger's, so they follow their probe (hycoclip) like any new recipe
    later = {"argent-no-weight", "argent-weight-all"}
    rows = [r for r in map(json.loads, gzip.open(RECORDS)) if r["recipe"] not in later]
    by = {}
    for r in rows:
        by.setdefault(r["recipe"], []).append(r)
    assert set(by) == set(PG.RECORDED_TRAIN_SECONDS)
    for recipe, rs in by.items():
        stage = "finetune" if PG.cost_class(recipe) == "finetune" else "pretrain"
        assert {(r["steps"], r["batch_size"]) for r in rs} == {PG.RECORDED_RUN[stage]}, recipe
        assert PG.RECORDED_TRAIN_SECONDS[recipe] == round(statistics.median(r["train_seconds"] for r in rs)), recipe
    assert PG.RECORDED_EVAL_SECONDS == round(statistics.median(r["eval_seconds"] for r in rows), 1)


def test_a_crop_not_the_geometry_doubles_a_pretraining_step():
    "MERU (Lorentz, no crops) follows CLIP's probe; HyCoCLIP and ARGENT (a crop per image) follow HyCoCLIP's."
    assert {
        r: PG.cost_class(r)
        for r in ("clip", "meru", "hycoclip", "argent", "argent-no-weight", "negclip", "argent+degla")
    } == {
        "clip": "images",
        "meru": "images",
        "hycoclip": "crops",
        "argent": "crops",
        "argent-no-weight": "crops",
        "negclip": "finetune",
        "argent+degla": "finetune",
    }
    step = lambda r: PG.recorded_step_seconds(r, Q)
    assert (
        step("meru") / step("clip") < 1.2 < 1.8 < step("hycoclip") / step("meru")
        and step("argent") / step("clip") > 1.8
    )
    assert step("argent-no-weight") == step("hycoclip")  # not in the priors: its probe's step
    assert step("degla") / step("negclip") > 1.8  # four negatives and the teacher
    assert PG.recorded_step_seconds("clip", BUDGETS["full"]) == pytest.approx(
        step("clip") * 512 / 64
    )  # a step costs its batch


def test_the_quick_plans_records_estimate_is_within_a_quarter_of_its_measured_wall_time():
    """Arithmetic on recorded numbers: the plan replayed on 2 workers at the records' costs against 23.8 min (AMD EPYC,
    the README)."""
    from hierbench.ledger.budgets import plan_runs
    from hierbench.ledger.run_graph import task_graph, task_runs

    tasks, deps = task_graph(plan_runs(list(Q.recipes)), Q.seeds)
    p = CompareProgress(
        Q,
        task_runs,
        lambda r, s: Path("/nonexistent") / r / str(s),
        jobs=2,
        log=lambda *a: None,
        bar=False,
        decoder_seconds=PG.prior_decoder_seconds(Q),
        calibrate_with=None,
    )
    p.begin(tasks, deps)
    assert 0.75 * 23.8 * 60 < p.first_estimate["seconds"] < 1.25 * 23.8 * 60
    assert p.first_estimate["calibration"] is None and "(AMD EPYC)" in p.first_estimate["line"]


def _fake_probe(calls, seconds=None):
    """A probe that trains nothing: each recipe's step at `seconds` (default: the records' step, i.e. the records'
    speed)."""

    def probe(recipe, budget, threads):
        calls.append((recipe, threads))
        return (seconds or {}).get(recipe, PG.recorded_step_seconds(recipe, budget)), 0.5

    return probe


def test_calibrate_probes_one_recipe_of_each_class_and_scales_the_records_by_it():
    calls, clock = [], itertools.count(0, 2.0).__next__
    cal = PG.calibrate(
        Q,
        ["clip", "meru", "negclip", "degla"],
        jobs=2,
        threads=1,
        clock=clock,
        probe=_fake_probe(calls, {"clip": 2 * PG.recorded_step_seconds("clip", Q)}),
    )
    assert calls == [("clip", 1), ("negclip", 1)]  # no crops in the plan: no HyCoCLIP probe
    assert cal.speed == pytest.approx({"images": 2 * 1.15, "finetune": 1.15, "other": (2 * 1.15 + 1.15) / 2})
    assert (
        cal.seconds == 2.0
        and cal.jobs == 2
        and cal.side_by_side == PG.SIDE_BY_SIDE
        and cal.setup_seconds["clip"] == 0.5
    )
    # MERU follows CLIP's probe at its own recorded ratio; evaluation at the median speed
    assert PG.prior_run_seconds("meru", Q, cal.speed) == pytest.approx(
        2000 * PG.recorded_step_seconds("meru", Q) * 2.3 + 3 * PG.RECORDED_EVAL_SECONDS * cal.speed["other"]
    )
    alone = PG.calibrate(Q, ["hycoclip"], jobs=1, threads=None, probe=_fake_probe([]))
    assert alone.speed == pytest.approx({"crops": 1.0, "other": 1.0}) and alone.threads == torch.get_num_threads()
    words = PG.calibration_words(cal)
    assert "a step of clip 0.204 s, negclip 0.233 s" in words and "× 1.15 for 2 workers side by side" in words
    assert "2.30×/1.15× the records' seconds" in words and "1 thread(s) a worker" in words


def test_probe_step_times_the_steps_after_the_warm_up_and_leaves_the_threads_as_they_were():
    "A real smoke run of five steps, timed by a clock that moves 0.5 s at every reading (no timing is asserted)."
    before = torch.get_num_threads()
    assert PG.probe_step("negclip", BUDGETS["smoke"], threads=1, steps=3, clock=itertools.count(0, 0.5).__next__) == (
        0.5,
        0.5,
    )
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="warmup >= 1"):
        PG.probe_step("clip", BUDGETS["smoke"], warmup=0)


def test_begin_calibrates_once_before_the_first_estimate_and_keeps_what_it_assumed(tmp_path):
    calls, lines, now = [], [], [0.0]
    probe = _fake_probe(calls, {"clip": 3 * PG.recorded_step_seconds("clip", Q)})
    p = _reporter(tmp_path, lines, now, calibrate_with=lambda *a, **kw: PG.calibrate(*a, **kw, probe=probe))
    tasks = [((0, 1), "clip"), ((0, 1), "negclip")]
    p.begin(tasks, {tasks[1]: [tasks[0]]})
    assert calls == [("clip", 1), ("negclip", 1)]  # two workers: one thread each
    assert p.costs.speed["images"] == pytest.approx(3 * 1.15)
    assert p.eta() == pytest.approx(
        2 * (PG.prior_run_seconds("clip", Q, p.costs.speed) + PG.prior_run_seconds("negclip", Q, p.costs.speed))
    )
    first = p.first_estimate
    assert first["seconds"] == pytest.approx(p.eta()) and first["runs"] == 4 and first["jobs"] == 2
    assert first["calibration"]["step_seconds"]["clip"] == pytest.approx(3 * 204 / 2000) and first["line"] == lines[-1]
    assert "from the records' run costs, calibrated on this CPU" in lines[-1] and json.dumps(first)
    p.finished(tasks[0], [_row("clip", 0), _row("clip", 1)])
    p.begin([((2,), "clip")], {}, label="round 2:")  # a later round: no second calibration
    assert len(calls) == 2 and p.first_estimate is first


@pytest.mark.parametrize(
    "budget, jobs, finished, why",
    [
        ("smoke", 2, False, "the records say the job takes seconds"),
        ("quick", None, False, "no worker limit: the runs train on other machines (SLURM)"),
        ("quick", 2, True, "every run is in the folder already"),
    ],
)
def test_no_calibration_where_it_would_not_pay(tmp_path, budget, jobs, finished, why):
    calls, lines = [], []
    if finished:
        folder = tmp_path / "runs" / "clip" / "seed0"
        folder.mkdir(parents=True)
        (folder / "eval.json").write_text(
            json.dumps(dict(_row("clip", 0), run_key=BUDGETS[budget].run_key(), recorded={}))
        )
    p = CompareProgress(
        BUDGETS[budget],
        runs_of=lambda t: [(t[1], s) for s in t[0]],
        log=lambda line: lines.append(unfold(line)),
        bar=False,
        jobs=jobs,
        run_folder=lambda r, s: tmp_path / "runs" / r / f"seed{s}",
        clock=lambda: 0.0,
        calibrate_with=lambda *a, **kw: PG.calibrate(*a, **kw, probe=_fake_probe(calls)),
    )
    p.begin([((0,), "clip")] if finished else [((0, 1, 2), "clip"), ((0, 1, 2), "hycoclip")], {})
    assert calls == [] and p.calibration is None, why
    assert "calibrated" not in lines[-1] and "(from the records' run costs (AMD EPYC);" in lines[-1]


def test_a_failing_probe_is_said_and_leaves_the_records_seconds(tmp_path):
    def broken(*a, **kw):
        raise RuntimeError("no world split\nhere")

    lines = []
    p = _reporter(tmp_path, lines, [0.0], calibrate_with=broken)
    p.begin([((0, 1), "clip")], {})
    assert (
        lines[0]
        == "compare: no calibration (RuntimeError: no world split here); the estimate uses the records' seconds"
    )
    assert (
        "(AMD EPYC)" in lines[1]
        and p.eta() == pytest.approx(2 * prior_run_seconds("clip", Q))
        and p.calibrate_with is None
    )


def test_runs_restored_from_records_are_done_but_their_seconds_are_another_machines(tmp_path):
    folder = tmp_path / "runs" / "clip" / "seed0"
    folder.mkdir(parents=True)
    (folder / "eval.json").write_text(
        json.dumps(dict(_row("clip", 0, 900.0), run_key=Q.run_key(), recorded={"records": "x"}))
    )
    p = _reporter(tmp_path, [], [0.0])
    p.begin([((0, 1), "clip")], {})
    assert p.reused == {("clip", 0)} and p.costs.measured == {}  # counted as done; 900 s is not this machine's
    assert p.eta() == pytest.approx(prior_run_seconds("clip", Q))


def test_a_restored_parent_a_new_fine_tune_needs_retrained_counts_as_a_run_to_train(tmp_path):
    "The records keep no weights: a new fine-tune's restored parent is trained again, and the estimate says so."
    folder = tmp_path / "runs" / "clip" / "seed0"
    folder.mkdir(parents=True)
    (folder / "eval.json").write_text(
        json.dumps(dict(_row("clip", 0, 900.0), run_key=Q.run_key(), recorded={"records": "x"}))
    )
    lines = []
    p = _reporter(tmp_path, lines, [0.0])
    tasks, deps = [((0,), "clip"), ((0,), "negclip")], {((0,), "negclip"): [((0,), "clip")]}
    p.begin(tasks, deps, retrain={("clip", 0)})
    assert ("clip", 0) not in p.reused and "2 runs, 0 in the folder, 2 to train (1 of them parents" in lines[-1]
    assert p.eta() == pytest.approx(prior_run_seconds("clip", Q) + prior_run_seconds("negclip", Q))
    assert p.first_estimate["runs"] == 2
    assert p.estimate(tasks, deps) == pytest.approx(prior_run_seconds("negclip", Q))  # cached: the parent is free
    assert p.estimate(tasks, deps, retrain={("clip", 0)}) == pytest.approx(p.eta())
    p.begin(tasks, deps, retrain={("clip", 0)})
    p.started(tasks[0])
    p.finished(tasks[0], dict(_row("clip", 0, 900.0), recorded={"records": "x"}, retrained=dict(train_seconds=250.0)))
    assert p.costs.measured == {"clip": [250.0]} and lines[-1].endswith("(4 min)")  # this machine's seconds, not 900
