"""Section `evals` of `hierbench bench` at quick sizes (zero-shot, retrieval and, since issue 47, the compositional
families): it runs through `run_benchmarks`, both sides agree on every number, the report says so (no timing
assertions)."""

from hierbench.bench.suite import format_report, run_benchmarks
from hierbench.bench.evals import EVAL_QUICK, plain_retrieval, plain_zeroshot, bench_folders


def test_evals_section_agrees_with_the_plain_loops():
    report = run_benchmarks("evals", quick=True)
    z, r = report["evals"]["zeroshot"], report["evals"]["retrieval"]
    assert all(z["metrics_equal"].values()) and z["same_predictions"] == z["images"] == EVAL_QUICK.images
    assert all(r["metrics_equal"].values()) and r["texts"] >= r["images"] == EVAL_QUICK.retrieval_images
    assert z["ratio"] > 0 and r["ratio"] > 0
    text = format_report(report)
    assert "== evals" in text and "metrics equal: True" in text and "recalls equal: True" in text
    c = report["evals"]["compositional"]  # issue 47: the seven families against a plain per-item loop
    assert all(c["metrics_equal"].values()) and len(c["metrics_equal"]) >= 20 and c["ratio"] > 0
    assert f"numbers equal: {len(c['metrics_equal'])}/{len(c['metrics_equal'])}" in text


def test_plain_loops_read_the_folders_as_written(tmp_path):
    import torch
    from hierbench.models.family import create_model

    zs, rt, _ = bench_folders(EVAL_QUICK, tmp_path)
    torch.manual_seed(0)
    m = create_model("real-tiny").eval()
    z = plain_zeroshot(m, zs, batch_size=5, num_workers=0)
    assert len(z["pred"]) == EVAL_QUICK.images and 0 <= z["acc1"] <= z["acc5"] <= 1
    r = plain_retrieval(m, rt, batch_size=5, num_workers=0)
    assert all(
        0 <= r[f"image_retrieval_recall@{k}"] <= r[f"image_retrieval_recall@{k2}"] <= 1 for k, k2 in ((1, 5), (5, 10))
    )
