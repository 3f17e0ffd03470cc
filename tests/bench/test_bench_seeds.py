"""Section `seeds` of `hierbench bench` (`hierbench.bench.seeds`): the layouts, a worker's steady step time, a layout's
processes started together, the stacked step, the report lines. No timing is asserted, only that the pieces work."""

import pytest

from hierbench.bench import suite as B
from hierbench.bench import seeds as S


def test_layouts_start_with_the_baseline_and_refuse_a_bad_k():
    lay = S.seed_layouts((2, 4), cores=2)
    assert lay[0] == dict(name="baseline: 1 seed/process", processes=2, threads=1, seeds=1)
    assert [(l["processes"], l["threads"], l["seeds"]) for l in lay[1:]] == [(2, 1, 2), (1, 2, 2), (2, 1, 4), (1, 2, 4)]
    with pytest.raises(ValueError, match=">= 1"):
        S.seed_layouts((0,))


def test_a_worker_reports_its_steady_step_time(tmp_path, monkeypatch):
    monkeypatch.setenv("HIERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    spec = dict(
        recipe="clip", arch="world-debug", batch=8, n_train=16, steps=3, warmup=1, threads=1, seeds=2, first_seed=4
    )
    out = S.seed_worker(spec)
    assert out["seeds"] == 2 and out["step_s"] > 0 and out["step_cpu_s"] > 0
    with pytest.raises(ValueError, match="exceed warmup"):
        S.run_layout(dict(name="x", processes=1, threads=1, seeds=1), "clip", "world-debug", 8, 16, steps=2, warmup=2)


def test_a_layout_runs_its_processes_and_the_report_reads_them(tmp_path, monkeypatch):
    monkeypatch.setenv("HIERBENCH_CACHE_DIR", str(tmp_path / "cache"))  # the worker processes inherit it
    row = S.run_layout(
        dict(name="2 seeds/process", processes=1, threads=1, seeds=2), "clip", "world-debug", 8, 32, 3, 1
    )
    assert len(row["step_s"]) == 1 and row["seed_steps_per_s"] > 0 and row["seed_steps_per_cpu_s"] > 0
    st = S.stacked_step_ratio("world-debug", batch=8, k=2, steps=1, warmup=1)
    assert st["stacked_ms_per_seed"] > 0 and st["ordinary_ms_per_seed"] > 0
    rows = [
        dict(row, name=n, ratio=r, cpu_ratio=r, seeds_per_hour=1.0)
        for n, r in (("baseline: 1 seed/process", 1.0), ("2 seeds/process", 1.1))
    ]
    report = dict(
        recipe="clip",
        arch="world-debug",
        batch=8,
        cores=2,
        cpu="",
        rounds=1,
        steps=3,
        warmup=1,
        rows=rows,
        best=dict(name="2 seeds/process", ratio=1.1, cpu_ratio=1.1),
        goal=S.SEEDS_GOAL,
        meets_goal=False,
        stacked=st,
    )
    text = B.format_report(
        dict(
            meta=dict(
                quick=True, torch="x", threads=1, device="cpu", cpu_count=2, load_avg_1_5_15=[0, 0, 0], started="now"
            ),
            seeds=report,
        )
    )
    assert "== seeds: clip on world-debug" in text and "1.10x the baseline" in text and "goal missed" in text
    assert "stacked parameters (vmap over functional_call), K=2" in text
    assert "seeds" in B.SECTIONS
