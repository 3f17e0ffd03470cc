"""Progress with an ETA: the time left from the run graph (pure arithmetic), costs refined by finished runs, the
reporter's lines (every finished run said once, by the parent), and the launchers' hooks (pool, submitit)."""
import json
from types import SimpleNamespace

import pytest

from hierbench.budgets import BUDGETS
from hierbench.progress import CompareProgress, RunCosts, duration, eta_seconds, prior_run_seconds

Q = BUDGETS["quick"]


@pytest.mark.parametrize("todo, deps, secs, jobs, running, expected", [
    (list("abcd"), {}, dict.fromkeys("abcd", 10.0), 2, None, 20.0),          # two workers, four equal runs: two rounds
    (list("abc"), {}, dict.fromkeys("abc", 10.0), 2, None, 20.0),            # the third waits for a free worker
    (["p", "f", "q"], {"f": ["p"]}, dict(p=10.0, f=5.0, q=1.0), 2, None, 15.0),   # a fine-tune waits for its parent
    (["f"], {"f": ["p"]}, dict(f=5.0), 2, dict(p=3.0), 8.0),                 # its parent is running, 3 s left
    (["a", "b"], {}, dict(a=4.0, b=6.0), None, None, 6.0),                    # no limit (SLURM): the longest
    (["f"], {"f": ["done"]}, dict(f=2.0), 1, None, 2.0),                      # a parent not in the graph is done
    (["x", "y"], {}, dict(x=1.0, y=1.0), 1, dict(r=5.0), 7.0),               # one worker, busy for 5 s first
])
def test_eta_is_the_launchers_schedule_replayed(todo, deps, secs, jobs, running, expected):
    assert eta_seconds(todo, deps, secs, jobs, running) == pytest.approx(expected)


def test_eta_names_tasks_that_never_run():
    with pytest.raises(ValueError, match="never run"): eta_seconds(["f", "g"], {"f": ["g"], "g": ["f"]}, dict(f=1.0, g=1.0))


def test_costs_move_from_the_prior_to_the_measured_runs():
    c = RunCosts(Q)
    assert c.seconds("hycoclip") == pytest.approx(prior_run_seconds("hycoclip", Q))
    c.add_row(dict(recipe="clip", train_seconds=3 * prior_run_seconds("clip", Q), eval_seconds=0.0))
    assert c.seconds("hycoclip") == pytest.approx(3 * prior_run_seconds("hycoclip", Q))   # a 3x slower machine
    c.add_row(dict(recipe="hycoclip", train_seconds=100.0, eval_seconds=10.0))
    assert c.seconds("hycoclip") == pytest.approx(110.0)                                   # measured wins
    c.add_row(dict(recipe="meru", train_seconds=None, eval_seconds=1.0))                   # unknown: ignored
    assert "meru" not in c.measured


def _reporter(tmp_path, lines, now, **kw):
    return CompareProgress(Q, runs_of=lambda t: [] if t == "decoder" else [(t[1], s) for s in t[0]],
                           run_folder=lambda r, s: tmp_path / "runs" / r / f"seed{s}", jobs=2, log=lines.append,
                           bar=False, clock=lambda: now[0], **kw)


def _row(recipe, seed, secs=100.0):
    return dict(recipe=recipe, seed=seed, train_seconds=secs - 5, eval_seconds=5.0, metrics={"comp_acc": 0.6})


def test_every_finished_run_is_said_once_with_the_count_and_time_left_and_batched_tasks_count_each_seed(tmp_path):
    lines, now = [], [0.0]
    p = _reporter(tmp_path, lines, now, heartbeat_s=60)
    tasks = ["decoder", ((0, 1), "clip"), ((0, 1), "negclip")]
    p.begin(tasks, {tasks[2]: [tasks[1]]})
    assert p.total == 4 and "4 runs, 0 already in the folder, 4 to train" in lines[-1]
    p.started(tasks[0]); p.finished(tasks[0], {})                      # READ's decoder: no run, no line
    p.started(tasks[1]); now[0] = 30.0; p.tick()
    assert len(lines) == 1                                             # quiet until the heartbeat is due
    now[0] = 61.0; p.tick()
    assert "training: clip seed 0 0%, clip seed 1 0%" in lines[-1]   # the heartbeat says what trains
    now[0] = 200.0
    p.finished(tasks[1], [_row("clip", 0), _row("clip", 1)])           # two seeds in one task: two lines
    assert [l.split("]")[0] for l in lines[-2:]] == ["[1/4 runs", "[2/4 runs"] and "3 min elapsed" in lines[-1]
    assert p.eta() == pytest.approx(2 * p.costs.seconds("negclip"))   # both negclip seeds in one task, not started
    p.started(tasks[2]); p.finished(tasks[2], [_row("negclip", 0, 50.0), _row("negclip", 1, 50.0)])
    said = [l for l in lines if "seed " in l and "runs]" in l and "training" not in l]
    assert len(said) == 4 and lines[-1].startswith("[4/4 runs]") and "about 0 s left" in lines[-1]


def test_runs_already_in_the_folder_are_counted_said_reused_and_cost_nothing(tmp_path):
    folder = tmp_path / "runs" / "clip" / "seed0"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"x")
    (folder / "eval.json").write_text(json.dumps(dict(_row("clip", 0, 400.0), run_key=Q.run_key())))
    lines, now = [], [0.0]
    p = _reporter(tmp_path, lines, now)
    t0, t1 = ((0,), "clip"), ((1,), "clip")
    p.begin([t0, t1], {})
    assert "2 runs, 1 already in the folder, 1 to train" in lines[-1] and "(estimated from the measured runs)" in lines[-1]
    assert p.costs.seconds("clip") == pytest.approx(400.0) and p.eta() == pytest.approx(400.0)   # only seed 1 costs
    p.finished(t0, [_row("clip", 0, 400.0)])
    assert lines[-1].endswith("(reused)") and p.costs.measured["clip"] == [400.0]                 # not counted twice


def test_duration_words():
    assert [duration(s) for s in (0, 59.4, 99, 100, 3599, 3600, 7260)] == ["0 s", "59 s", "99 s", "2 min", "60 min",
                                                                          "1 h 00 min", "2 h 01 min"]




def _recorder():
    rec = SimpleNamespace(started=[], finished=[], ticks=0)
    return SimpleNamespace(started=rec.started.append, finished=lambda t, r: rec.finished.append((t, r)),
                           tick=lambda: setattr(rec, "ticks", rec.ticks + 1)), rec


def test_in_process_launcher_tells_the_parent_about_every_task():
    "(The process pool's hooks run in tests/test_until_decided.py's smoke run: two workers, every line said once.)"
    from hierbench.compare import InProcess
    progress, rec = _recorder()
    tasks = [(0, "a"), (0, "b")]
    assert InProcess()(tasks, {(0, "b"): [(0, "a")]}, len, progress=progress) == {t: 2 for t in tasks}
    assert rec.started == tasks and rec.finished == [(t, 2) for t in tasks]


def test_submitit_launcher_tells_the_parent_about_every_task_and_the_runs_already_finished(tmp_path, monkeypatch):
    from hierbench import launch as L
    from hierbench.compare import task_graph, task_runs
    class Job:
        def __init__(self, value): self.value, self.job_id = value, "1"
        def done(self): return True
        def result(self): return self.value
    class Executor:
        cluster, folder = "local", tmp_path
        def submit(self, fn): return Job(fn())
    rows = lambda t: [{"recipe": r, "seed": s} for r, s in task_runs(t)]
    # every clip run is finished in the folder; the negclip runs are not
    monkeypatch.setattr(L, "finished_run", lambda r, s, budget, out: {"recipe": r, "seed": s} if r == "clip" else None)
    monkeypatch.setattr(L, "_GraphJob", lambda run, threads: rows)
    tasks, deps = task_graph(["clip", "negclip"], 2)
    clip = [t for t in tasks if task_runs(t)[0][0] == "clip"]
    progress, rec = _recorder()
    launcher = L.SubmititLauncher(Executor(), jobs=2, poll_s=0.0, log=lambda *a: None)
    done = launcher(tasks, deps, SimpleNamespace(budget=BUDGETS["smoke"], out=str(tmp_path)), progress=progress)
    assert [t for t, _ in rec.finished][:len(clip)] == clip                  # finished in the folder: said at once
    assert sorted(t for t, _ in rec.finished) == sorted(tasks) and sorted(rec.started) == sorted(set(tasks) - set(clip))
    from hierbench.compare import _task_rows
    assert all(_task_rows(done[t]) == rows(t) for t in tasks)                # every run's row, none lost


def test_a_rounds_estimate_counts_runs_already_in_the_folder_as_free(tmp_path):
    "The time cap asks whether a round fits: runs the folder already holds (e.g. seeds of an earlier run) cost nothing."
    folder = tmp_path / "runs" / "clip" / "seed5"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"x")
    (folder / "eval.json").write_text(json.dumps(dict(_row("clip", 5, 300.0), run_key=Q.run_key())))
    p = _reporter(tmp_path, [], [0.0])
    assert p.estimate([((5,), "clip")], {}) == 0.0
    assert p.estimate([((5, 6), "clip")], {}) == pytest.approx(300.0)   # seed 6 costs what seed 5 took
