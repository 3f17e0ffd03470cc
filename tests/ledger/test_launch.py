"""hierbench.ledger.compare: one run per folder across independent processes, preemption → requeue → exact resume
through
submitit's local executor, and the compare graph dispatched as submitit jobs."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

submitit = pytest.importorskip("submitit")

from hierbench.ledger import launchers as L
from hierbench.config import FolderLock
from hierbench.data.sources import WorldData
from hierbench.training.trainer import read_metrics

PY_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}


# ---------------------------------------------------------------- locks between processes that share no parent
HOLD = """
import sys, time
from pathlib import Path
from hierbench.config import FolderLock
with FolderLock(sys.argv[1]):
    Path(sys.argv[2]).write_text("locked")
    time.sleep(float(sys.argv[3]))
"""


def _detached(*args):
    "A python process in a session of its own (setsid): it shares no parent process group with the test's others."
    return subprocess.Popen(
        [sys.executable, "-c", *args],
        env=PY_ENV,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(path: Path, timeout=60):
    t0 = time.time()
    while not path.exists():
        assert time.time() - t0 < timeout, f"{path} never appeared"
        time.sleep(0.05)


def test_folder_lock_between_independent_processes(tmp_path):
    folder = tmp_path / "compare"
    a = _detached(HOLD, str(folder), str(tmp_path / "a-has-it"), "3")
    try:
        _wait_for(tmp_path / "a-has-it")
        assert FolderLock.is_held(folder)
        b = _detached(
            "import sys\nfrom hierbench.config import FolderLock\n"
            "try:\n    FolderLock(sys.argv[1]).__enter__()\nexcept RuntimeError as e: print(e); sys.exit(3)",
            str(folder),
        )
        out, err = b.communicate(timeout=60)
        assert b.returncode == 3, err
        assert f"in use by PID {a.pid} on" in out  # names the other process
        # a third one that waits gets the lock as soon as the first exits
        c = _detached(
            HOLD.replace("FolderLock(sys.argv[1])", "FolderLock(sys.argv[1], timeout=None)"),
            str(folder),
            str(tmp_path / "c-has-it"),
            "0",
        )
        c.communicate(timeout=60)
        assert c.returncode == 0 and a.poll() == 0  # c got it only after a had finished
    finally:
        for p in (a,):
            if p.poll() is None:
                p.kill()
    assert not FolderLock.is_held(folder)


ONCE = """
import sys, os, time
from pathlib import Path
from hierbench.config import run_once
run, log = Path(sys.argv[1]), Path(sys.argv[2])
def finished(): return (run / "done").read_text() if (run / "done").exists() else None
def work():
    with open(log, "a") as f: f.write(f"{os.getpid()}\\n")
    time.sleep(1.5)                      # long enough for the other launcher to arrive while this one works
    (run / "done").write_text(str(os.getpid())); return str(os.getpid())
rec, ran = run_once(run, finished, work)
print(rec, ran)
"""


def test_two_launchers_do_not_run_a_run_twice(tmp_path):
    run, log = tmp_path / "runs" / "clip" / "seed0", tmp_path / "trained-by.txt"
    run.mkdir(parents=True)
    ps = [_detached(ONCE, str(run), str(log)) for _ in range(2)]
    outs = [p.communicate(timeout=90) for p in ps]
    for p, (o, e) in zip(ps, outs):
        assert p.returncode == 0, e
    trained = log.read_text().split()
    assert len(trained) == 1  # one process trained it
    recs = sorted(o.split()[1] for o, _ in outs)
    assert recs == ["False", "True"] and {o.split()[0] for o, _ in outs} == {trained[0]}  # the other reused its record


# ---------------------------------------------------------------- preemption through submitit's local executor
STEPS = 300
TRAIN_KW = dict(
    data=WorldData(n_train=64, cache_dir=False),
    arch="world-debug",
    steps=STEPS,
    batch_size=8,
    log_every=1,
    ckpt_every=10_000,
    quiet=True,
)


def test_submitit_local_preempted_job_is_requeued_and_resumes_exactly(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the jobs inherit it: same threads, same floating point sums
    ex = submitit.AutoExecutor(folder=tmp_path / "submitit", cluster="local")
    ex.update_parameters(timeout_min=30)
    ref = ex.submit(L.Requeueable(L.train_run, "clip", tmp_path / "ref", **TRAIN_KW))
    job = ex.submit(L.Requeueable(L.train_run, "clip", tmp_path / "cut", **TRAIN_KW))
    metrics, lock = tmp_path / "cut" / "metrics.jsonl", tmp_path / "cut" / ".lock"
    t0 = time.time()
    while not (metrics.is_file() and metrics.read_text().count("\n") >= 10):
        assert job.state == "RUNNING" and time.time() - t0 < 120, (job.state, job.stderr())
        time.sleep(0.02)
    pid = int(lock.read_text().split()[1])  # "PID N on HOST": the task training the run
    assert pid != job._process.pid  # the task, not submitit's controller
    os.kill(pid, signal.SIGUSR2)  # what SLURM sends before the time limit (submitit's --signal)
    res = job.result()
    log = (job.stdout() or "") + (job.stderr() or "")
    assert "Requeued job" in log and log.count("Starting with JobEnvironment") == 2, log[-3000:]
    assert res["step"] == STEPS and res["weights"].endswith("model.safetensors")
    ref.result()
    a, b = read_metrics(tmp_path / "ref"), read_metrics(tmp_path / "cut")
    assert [m["step"] for m in b] == list(range(1, STEPS + 1))
    for x, y in zip(a, b):
        for k in ("loss", "lr", "grad_norm", "logit_scale", "contrastive"):
            assert x[k] == y[k], (x["step"], k)
    import torch
    from safetensors.torch import load_file

    wa, wb = load_file(tmp_path / "ref" / "model.safetensors"), load_file(tmp_path / "cut" / "model.safetensors")
    assert all(torch.equal(wa[n], wb[n]) for n in wa)
    # the requeued job resumed from the checkpoint written at the signalled step (kept beside the final one)
    from hierbench.training.trainer import list_checkpoints

    steps = [int(p.name[5:]) for p in list_checkpoints(tmp_path / "cut")]
    assert len(steps) == 2 and 10 <= steps[0] < STEPS and steps[1] == STEPS, steps


# ---------------------------------------------------------------- the compare graph through submitit
from hierbench.ledger import compare as C
from hierbench.ledger.budgets import BUDGETS

TIMING = {"train_seconds", "samples_per_second"}


def _metric_rows(out: Path) -> list[dict]:
    return [r for r in json.loads((out / "results.json").read_text())["rows"] if r["metric"] not in TIMING]


def test_submitit_local_compare_equals_the_process_pool_skips_finished_runs_and_rebuilds(tmp_path, monkeypatch):
    """clip + clip-ft, one seed, smoke budget: the same metrics as the process pool; a rerun submits nothing;
    --report-only."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    kw = dict(seeds=1, recipes=["clip", "clip-ft"], jobs=2, log=lambda *a: None)
    pool = C.launch_compare("smoke", out=tmp_path / "pool", launcher="processes", **kw)
    logs = []
    sub = C.launch_compare("smoke", out=tmp_path / "sub", launcher="submitit-local", **{**kw, "log": logs.append})
    assert sub["meta"]["launcher"] == "SubmititLauncher" and pool["meta"]["launcher"] == "ProcessPool"
    assert _metric_rows(tmp_path / "sub") == _metric_rows(tmp_path / "pool")  # every metric, exactly
    assert any("0 run(s) already finished" in m and "2 task(s) as local jobs" in m for m in logs), logs
    n_jobs = len(list((tmp_path / "sub" / "submitit").glob("*_submitted.pkl")))
    assert n_jobs == 2
    # a rerun into the same folder: both runs finished (same run key, weights and fingerprint): no job at all
    logs.clear()
    C.launch_compare("smoke", out=tmp_path / "sub", launcher="submitit-local", **{**kw, "log": logs.append})
    assert any("2 run(s) already finished" in m and "0 task(s)" in m for m in logs), logs
    assert len(list((tmp_path / "sub" / "submitit").glob("*_submitted.pkl"))) == n_jobs
    assert _metric_rows(tmp_path / "sub") == _metric_rows(tmp_path / "pool")
    # the outputs rebuilt from the folder alone
    for f in ("results.json", "claims.json", "report.html"):
        (tmp_path / "sub" / f).unlink()
    rebuilt = C.launch_compare(out=tmp_path / "sub", report_only=True, log=lambda *a: None)
    assert rebuilt["meta"]["launcher"] == "report-only" and (tmp_path / "sub" / "report.html").is_file()
    assert _metric_rows(tmp_path / "sub") == _metric_rows(tmp_path / "pool")
    claims = lambda out: [{k: v for k, v in c.items()} for c in json.loads((out / "claims.json").read_text())["claims"]]
    assert claims(tmp_path / "sub") == claims(tmp_path / "pool")


def test_report_only_names_unfinished_runs(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a compare folder"):
        C.rebuild_report(tmp_path)
    (tmp_path / "plan.json").write_text(
        json.dumps(
            dict(budget=__import__("dataclasses").asdict(BUDGETS["smoke"]), seeds=2, recipes=["clip", "negclip"])
        )
    )
    with pytest.raises(RuntimeError, match=r"4 of 4 runs are not finished \(clip/seed0, negclip/seed0, clip/seed1"):
        C.rebuild_report(tmp_path, log=lambda *a: None)


FAKE_SBATCH = """#!/bin/bash
# stands in for sbatch: keeps the script it is given and answers like sbatch
n=$(( $(cat "$FAKE_SBATCH_DIR/count" 2>/dev/null || echo 100) + 1 ))
echo $n > "$FAKE_SBATCH_DIR/count"
cp "$1" "$FAKE_SBATCH_DIR/sbatch-$n.sh"
echo "Submitted batch job $n"
"""


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    "`srun` and `sbatch` stand-ins on PATH (no cluster here: nothing runs, the scripts are kept for inspection)."
    bin_, rec = tmp_path / "bin", tmp_path / "sbatch-scripts"
    bin_.mkdir()
    rec.mkdir()
    (bin_ / "sbatch").write_text(FAKE_SBATCH)
    (bin_ / "srun").write_text("#!/bin/sh\nexit 0\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SBATCH_DIR", str(rec))
    return rec


def test_slurm_launcher_submits_one_array_per_stage_with_afterok(tmp_path, fake_slurm):
    ex = L.make_executor(
        "slurm",
        tmp_path / "submitit",
        name="hb",
        slurm_partition="gpu",
        slurm_account="lab",
        gpus_per_run=1,
        cpus_per_run=4,
        timeout_min=30,
        slurm_extra=["qos=high", "constraint=a100"],
    )
    launcher = L.SubmititLauncher(ex, threads=4, slurm_extra=L.parse_slurm_extra(["qos=high", "constraint=a100"]))
    tasks, deps = C.task_graph(["clip", "negclip", "read"], 2)
    run = C._TaskRunner(BUDGETS["smoke"], str(tmp_path / "out"))
    done, todo = launcher.pending(tasks, deps, run)
    assert done == {} and todo == tasks  # nothing finished yet
    jobs = launcher.submit_stages(todo, deps, L._GraphJob(run, 4))
    first, second = (fake_slurm / "sbatch-101.sh").read_text(), (fake_slurm / "sbatch-102.sh").read_text()
    assert not (fake_slurm / "sbatch-103.sh").exists()  # two stages, two arrays
    for script in (first, second):
        for line in (
            "#SBATCH --partition=gpu",
            "#SBATCH --account=lab",
            "#SBATCH --gpus-per-node=1",
            "#SBATCH --cpus-per-task=4",
            "#SBATCH --time=30",
            "#SBATCH --qos=high",
            "#SBATCH --constraint=a100",
            "#SBATCH --job-name=hb",
            "#SBATCH --signal=USR2@90",
        ):
            assert line in script, (line, script)
    assert "#SBATCH --array=0-2%3" in first and "--dependency" not in first  # decoder + 2 pre-trainings
    assert "#SBATCH --array=0-3%4" in second and "#SBATCH --dependency=afterok:101" in second  # 4 fine-tunes
    assert {t: j.job_id for t, j in jobs.items()} == {
        C.DECODER_TASK: "101_0",
        ((0,), "clip"): "101_1",
        ((1,), "clip"): "101_2",
        ((0,), "negclip"): "102_0",
        ((0,), "read"): "102_1",
        ((1,), "negclip"): "102_2",
        ((1,), "read"): "102_3",
    }
    for t, j in jobs.items():  # each array task's pickled call: the requeueable graph job of its task
        call = submitit.helpers.DelayedSubmission.load(j.paths.submitted_pickle)
        assert isinstance(call.function, L.Requeueable) and call.function.args == (t,)
        assert call.function.fn == L._GraphJob(run, 4)


def test_slurm_user_dependency_is_kept(tmp_path, fake_slurm):
    ex = L.make_executor("slurm", tmp_path / "submitit", slurm_extra=["dependency=afterany:7"])
    launcher = L.SubmititLauncher(ex, slurm_extra={"dependency": "afterany:7"})
    tasks, deps = C.task_graph(["clip", "clip-ft"], 1)
    launcher.submit_stages(tasks, deps, L._GraphJob(C._TaskRunner(BUDGETS["smoke"], str(tmp_path / "out"))))
    assert "#SBATCH --dependency=afterany:7\n" in (fake_slurm / "sbatch-101.sh").read_text()
    assert "#SBATCH --dependency=afterany:7,afterok:101\n" in (fake_slurm / "sbatch-102.sh").read_text()


def test_launcher_options_are_checked():
    with pytest.raises(ValueError, match="launcher 'sge'"):
        C.launch_compare(launcher="sge", out="/nonexistent/x")
    with pytest.raises(ValueError, match="need --launcher submitit-local or slurm"):
        C.launch_compare(launcher="processes", gpus_per_run=1, out="/nonexistent/x")
    with pytest.raises(ValueError, match="'qos'"):
        L.parse_slurm_extra(["qos"])
