"""The `hierbench` console script: each subcommand runs end to end at tiny sizes."""

import contextlib
import io
import json
import os
import subprocess
import sys
import warnings

import pytest

from hierbench.cli.parser import build_parser, main
from hierbench.cli.commands import geometry_demo

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def run(*args, timeout=600):
    """`hierbench ARGS` through the console script's entry point in this process, reported as a finished process
    reports it (returncode, stdout, stderr): a subprocess would pay the 12 s import for every call. Warnings show as in
    a fresh process (once each); `test_the_console_script_is_the_entry_point` runs the script itself."""
    out, err, code = io.StringIO(), io.StringIO(), 0
    shown = warnings.showwarning
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            warnings.simplefilter("default")  # a changed filter forgets which warnings were shown: a fresh start
            try:
                main([str(a) for a in args])
            except SystemExit as e:  # a refusal's line (str), argparse's 2, a preemption's 75, or sys.exit()
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if isinstance(e.code, str):
                    print(e.code, file=sys.stderr)
    finally:
        warnings.showwarning = shown  # main shows hierbench's warnings in one line for the rest of its process
    return subprocess.CompletedProcess(["hierbench", *args], code, out.getvalue(), err.getvalue())


def run_process(*args, timeout=600):
    "`hierbench ARGS` as a separate process (the console script itself)."
    return subprocess.run(
        [sys.executable, "-m", "hierbench.cli", *args], capture_output=True, text=True, timeout=timeout, env=ENV
    )


def test_the_console_script_is_the_entry_point(tmp_path):
    "The script a user types runs `main` and reports a refusal as its one line and exit status 1, as `run` does."
    here, there = (
        run("train", "clip", "--steps", "0", "--out", tmp_path / "a"),
        run_process("train", "clip", "--steps", "0", "--out", str(tmp_path / "b")),
    )
    assert here.returncode == there.returncode == 1
    assert here.stderr.replace(str(tmp_path / "a"), "X") == there.stderr.replace(str(tmp_path / "b"), "X")


def test_demo_reproduces_the_reference_table(capsys):
    rows = geometry_demo()
    assert all(abs(got - ref) < 1e-5 for _, got, ref in rows)
    main(["demo"])
    assert "2.526113" in capsys.readouterr().out


def test_unknown_subcommand_is_an_error():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["frobnicate"])


HELP_PROBE = """
import contextlib, io, sys
from hierbench.cli.parser import build_parser, main
subs = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction").choices
for argv in [["--help"], *([c, "--help"] for c in subs)]:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try: main(argv)
        except SystemExit as e: assert e.code == 0, (argv, e.code)
    assert "usage: hierbench" in out.getvalue(), argv
heavy = sorted(m for m in ("torch", "pandas", "numpy", "open_clip", "hierbench.cli.commands",
"hierbench.cli.eval_command") if m in sys.modules)
print(len(subs), heavy)
"""


def test_help_of_every_subcommand_imports_no_torch():
    "`hierbench --help` and each `hierbench CMD --help` parse without torch, pandas or numpy (the runners load lazily)."
    res = subprocess.run([sys.executable, "-c", HELP_PROBE], capture_output=True, text=True, timeout=120, env=ENV)
    assert res.returncode == 0, res.stderr
    n, heavy = res.stdout.split(" ", 1)
    assert int(n) >= 10 and heavy.strip() == "[]", res.stdout


def test_every_subcommand_names_a_runner_that_exists():
    "Each parser's LazyCommand resolves to a function of hierbench.cli.commands / hierbench.cli.eval_command."
    from hierbench.cli.parser import LazyCommand

    subs = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction").choices
    for name, sp in subs.items():
        func = sp.get_default("func")
        assert isinstance(func, LazyCommand), name
        assert callable(func.resolve()), (name, func)


def test_train_then_eval_a_saved_run(tmp_path):
    out = tmp_path / "run"
    p = run(
        "train",
        "clip",
        "--out",
        str(out),
        "--arch",
        "world-debug",
        "--steps",
        "2",
        "--n-train",
        "64",
        "--batch-size",
        "8",
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert (out / "model.safetensors").exists() and (out / "metrics.jsonl").exists()
    p = run("eval", "--checkpoint", str(out), "--n-test", "24", "--json", str(tmp_path / "ev.json"))
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads((tmp_path / "ev.json").read_text())
    assert 0 <= res["zs_acc/test-iid"] <= 1 and res["zs_acc_chance/test-iid"] == pytest.approx(1 / 9)


def test_eval_of_a_foreign_file_asks_for_the_architecture(tmp_path):
    f = tmp_path / "weights.safetensors"
    f.write_bytes(b"not really")
    p = run("eval", "--checkpoint", str(f), "--no-world")
    assert p.returncode != 0 and "--arch" in p.stderr


def test_train_runs_under_torchrun_with_two_processes(tmp_path):
    """The same entry point under torchrun (gloo on CPU): two ranks share the global batch. The default preset's ResNet
    tower has BatchNorm, which cannot be synchronised on CPU: the run says so."""
    out = tmp_path / "ddp"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--master_port=29517",
            "-m",
            "hierbench.cli",
            "train",
            "clip",
            "--out",
            str(out),
            "--arch",
            "world-tiny",
            "--steps",
            "2",
            "--n-train",
            "64",
            "--batch-size",
            "8",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=ENV,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    assert [l["step"] for l in lines][-1] == 2
    assert "BatchNorm" in p.stderr and "per rank" in p.stderr


def test_bench_quick_geometry_section(tmp_path):
    p = run("bench", "--quick", "--sections", "geometry", "--json", str(tmp_path / "b.json"))
    assert p.returncode == 0, p.stderr[-2000:]
    rep = json.loads((tmp_path / "b.json").read_text())
    assert "geometry" in rep and "QUICK" in p.stdout


def test_train_narrows_the_negative_types_and_records_them(tmp_path):
    """`--negative-types replace_rel` (the compare page's relation probes as a command): the run's config.json records
    the narrowed list and the resolved settings line names it (that the loader then draws only those types is
    test_fairness's `test_a_narrowed_recipe_draws_only_its_types`)."""
    out = tmp_path / "rel"
    p = run(
        "train",
        "negclip",
        "--out",
        str(out),
        "--arch",
        "world-debug",
        "--steps",
        "2",
        "--n-train",
        "64",
        "--batch-size",
        "8",
        "--negative-types",
        "replace_rel",
        "--weight-decay",
        "0",
    )
    assert p.returncode == 0, p.stderr[-2000:]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["negative_types"] == ["replace_rel"] and cfg["weight_decay"] == 0 and cfg["recipe"] == "negclip"
    assert "negative(s) of replace_rel" in p.stdout


def test_train_negative_types_bad_input_says_what_is_wrong(tmp_path):
    p = run(
        "train",
        "negclip",
        "--out",
        str(tmp_path / "a"),
        "--arch",
        "world-debug",
        "--steps",
        "1",
        "--negative-types",
        "replace_rel,replace_colour",
    )
    assert p.returncode != 0 and "replace_colour" in p.stderr and not (tmp_path / "a").exists()
    p = run(
        "train",
        "clip",
        "--out",
        str(tmp_path / "b"),
        "--arch",
        "world-debug",
        "--steps",
        "1",
        "--negative-types",
        "replace_rel",
    )
    assert p.returncode != 0 and "draws no hard negatives" in p.stderr


def test_train_weights_change_loss_terms_and_are_recorded(tmp_path):
    "`--weights igc=1,tgc=1` (the compare page's relation lever): config.json's recipe_weights hold the new weights."
    out = tmp_path / "w"
    p = run(
        "train",
        "degla",
        "--out",
        str(out),
        "--arch",
        "world-debug",
        "--steps",
        "2",
        "--n-train",
        "64",
        "--batch-size",
        "8",
        "--negative-types",
        "replace_rel",
        "--weights",
        "igc=1,tgc=1",
    )
    assert p.returncode == 0, p.stderr[-2000:]
    w = json.loads((out / "config.json").read_text())["recipe_weights"]
    assert (w["igc"], w["tgc"], w["contrastive"]) == (1.0, 1.0, 1.0) and w["distill"] < 1
    p = run(
        "train",
        "degla",
        "--out",
        str(tmp_path / "bad"),
        "--arch",
        "world-debug",
        "--steps",
        "1",
        "--weights",
        "igc=one",
    )
    assert p.returncode != 0 and "igc=one" in p.stderr and not (tmp_path / "bad").exists()


def test_train_mirror_twins_and_top_caption_p_are_recorded(tmp_path):
    "`--mirror-twins --top-caption-p P` (the compare page's relations under CLIP's own loss): recorded in config.json."
    out = tmp_path / "t"
    p = run(
        "train",
        "clip",
        "--out",
        str(out),
        "--arch",
        "world-tiny-flat",
        "--steps",
        "2",
        "--n-train",
        "64",
        "--batch-size",
        "8",
        "--mirror-twins",
        "--top-caption-p",
        "0.5",
    )
    assert p.returncode == 0, p.stderr[-2000:]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["mirror_twins"] is True and cfg["top_caption_p"] == 0.5 and cfg["preset"] == "world-tiny-flat"
    assert "mirror twins, top caption p 0.5" in " ".join(p.stdout.split())  # the settings line is folded
    # a recipe whose captions are not sampled (NegCLIP's positive is the top caption) refuses the weight, writing
    # nothing
    p = run(
        "train",
        "negclip",
        "--out",
        str(tmp_path / "n"),
        "--arch",
        "world-debug",
        "--steps",
        "1",
        "--top-caption-p",
        "0.5",
    )
    assert p.returncode == 1 and "top_caption_p" in p.stderr and not (tmp_path / "n").exists()
    assert "Traceback" not in p.stderr and p.stderr.splitlines()[-1].startswith("hierbench train: top_caption_p")
    p = run(
        "train",
        "clip",
        "--out",
        str(tmp_path / "o"),
        "--arch",
        "world-debug",
        "--steps",
        "1",
        "--batch-size",
        "7",
        "--mirror-twins",
    )
    assert p.returncode != 0 and "even batch size" in p.stderr and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "argv, dest, value, new",
    [
        (["train", "clip", "--out", "r", "--preset", "world-debug"], "arch", "world-debug", "--arch"),
        (["train", "clip", "--out", "r", "--model", "ViT-B-32"], "arch", "ViT-B-32", "--arch"),
        (
            ["train", "clip", "--out", "r", "--init", "w.safetensors"],
            "init_checkpoint",
            "w.safetensors",
            "--init-checkpoint",
        ),
        (["train", "clip", "--out", "r", "--save-every", "5"], "ckpt_every", 5, "--ckpt-every"),
        (["train", "clip", "--out", "r", "--workers", "3"], "num_workers", 3, "--num-workers"),
        (["compare", "--preset", "smoke"], "budget", "smoke", "--budget"),
        (["bench", "--model-preset", "world-debug"], "arch", "world-debug", "--arch"),
        (["eval", "--model", "st:DIR"], "scorer", "st:DIR", "--scorer"),
        (["eval", "--checkpoint", "f.pt", "--model", "RN50"], "arch", "RN50", "--arch"),
        (["eval", "--out", "m.json"], "json", "m.json", "--json"),
        (["negatives", "--data", "coco:x.json", "--out", "n.jsonl"], "jsonl", "n.jsonl", "--jsonl"),
    ],
)
def test_old_flag_spellings_still_parse_and_name_the_new_one(capsys, argv, dest, value, new):
    "One release of grace: an old spelling sets the new field and says, on stderr, which flag replaces it."
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) == value
    err = capsys.readouterr().err
    assert f"use {new}" in err and "deprecated" in err


def test_help_lists_only_the_new_spellings():
    for cmd, old in (
        ("train", "--save-every"),
        ("compare", "--preset"),
        ("bench", "--model-preset"),
        ("eval", "--out"),
    ):
        sub = next(a for a in build_parser()._actions if isinstance(a, __import__("argparse")._SubParsersAction))
        assert old not in sub.choices[cmd].format_help()


def test_a_bad_old_spelling_value_is_still_checked():
    "`--preset` keeps the budget's choices: a typo is an argparse error, not a silent default."
    with pytest.raises(SystemExit):
        build_parser().parse_args(["compare", "--preset", "quik"])


def test_train_and_eval_record_the_precision_that_ran(tmp_path):
    "`--precision` (open_clip's names) reaches the trainer and the evaluation, and both say what ran."
    out = tmp_path / "bf16"
    p = run(
        "train",
        "clip",
        "--out",
        str(out),
        "--arch",
        "world-debug",
        "--steps",
        "2",
        "--n-train",
        "64",
        "--batch-size",
        "8",
        "--precision",
        "amp_bf16",
        "--keep-checkpoints",
        "1",
        "--no-save-optimizer",
    )
    assert p.returncode == 0, p.stderr[-2000:]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["precision"] == "amp_bf16" and "amp_bf16" in cfg["precision_ran"] and cfg["keep_checkpoints"] == 1
    assert cfg["save_optimizer"] is False
    p = run(
        "eval", "--checkpoint", str(out), "--n-test", "16", "--precision", "bf16", "--json", str(tmp_path / "e.json")
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads((tmp_path / "e.json").read_text())["precision"] == "bf16"


def test_compare_launcher_flags_parse_and_refuse_what_a_launcher_cannot_use(tmp_path):
    a = build_parser().parse_args(
        [
            "compare",
            "--budget",
            "smoke",
            "--launcher",
            "slurm",
            "--slurm-partition",
            "gpu",
            "--slurm-extra",
            "qos=high",
            "--slurm-extra",
            "constraint=a100",
            "--timeout-min",
            "30",
        ]
    )
    assert (a.launcher, a.slurm_partition, a.slurm_extra, a.timeout_min) == (
        "slurm",
        "gpu",
        ["qos=high", "constraint=a100"],
        30,
    )
    p = run("compare", "--budget", "smoke", "--out", str(tmp_path / "c"), "--slurm-partition", "gpu")
    assert p.returncode != 0 and "--launcher" in p.stderr


def test_every_command_fits_100_columns(tmp_path):
    """Issue 55: what train, eval, export, sweep, claims and bench print fits 100 columns (a path is never cut, so a
    line is measured with this test's folder written as a researcher's would be); a table says where the columns it
    left out are. The main job's: tests/ledger/test_compare.py."""
    import re
    from pathlib import Path

    sweep = ("sweep", "clip", "--grid", "world.lr=0.001,0.002", "--budget", "smoke", "--seeds", "2")
    outs = {
        "train": run("train", "clip", "--steps", "3", "--n-train", "64", "--batch-size", "16", "--out", tmp_path / "m"),
        "eval": run("eval", "--checkpoint", tmp_path / "m", "--n-test", "40"),
        "export": run("export", tmp_path / "m", "--out", tmp_path / "x"),
        "sweep": run(*sweep, "--out", tmp_path / "s"),
        "claims": run("claims", Path(__file__).resolve().parents[2] / "nbs" / "results" / "data" / "ledger-standard"),
        "bench": run("bench", "--quick", "--sections", "geometry"),
    }
    for name, out in outs.items():
        assert out.returncode == 0, (name, out.stderr[-1500:])
        lines = re.split(r"[\r\n]", (out.stdout + out.stderr).replace(str(tmp_path), "/home/researcher/work/hierbench"))
        assert not [line for line in lines if len(line) > 100], (name, [line for line in lines if len(line) > 100])
    assert "more column(s)" in outs["sweep"].stdout and "in sweep.json, or --wide" in outs["sweep"].stdout
    compile(outs["export"].stdout.split("load with:\n")[1], "load with", "exec")  # pasted as printed, it runs
    wide = run(*sweep, "--wide", "--out", tmp_path / "s")
    assert "pep_auc" in wide.stdout and "more column(s)" not in wide.stdout
