"""Seeds until decided, in the ledger and the compare job: the sequential ledger's columns (seeds used, rule, look,
why a row stopped), fragile rows, which recipes the next round trains, bad input, and one smoke run of the loop."""

import json
import re

import numpy as np
import pandas as pd
import pytest

from hierbench.ledger.claims import CLAIMS, evaluate_claims, recipes_to_extend
from hierbench.stats import SequentialPlan, look_schedule, read_interval, verdict

ROW = [c for c in CLAIMS if c.id == "DEG-1" and c.a == "degla" and c.b == "clip"][0]


def _results(diffs, a=ROW.a, b=ROW.b, metric=ROW.metric):
    "Result rows where recipe a beats b by diffs[s] on seed s (b's value moves with the seed: pairing removes it)."
    return pd.DataFrame(
        [
            dict(recipe=r, seed=s, metric=metric, value=0.6 + 0.05 * np.sin(s) + (d if r == a else 0.0))
            for s, d in enumerate(diffs)
            for r in (a, b)
        ]
    )


def _row(ledger, claim=ROW):
    return ledger[
        (ledger.id == claim.id) & (ledger.a == claim.a) & (ledger.b == claim.b) & (ledger.metric == claim.metric)
    ].iloc[0]


def test_the_fixed_ledger_is_todays_rule_with_fragility_added():
    # supported at 9 seeds by the ledger's (skew-guarded) rule, but six of the nine leave-one-seed-out intervals reach 0
    # (seed 7 low: a left skew of -1.5 the guard widens for)
    diffs = [0.002, 0.003, 0.0025, 0.0035, 0.003, 0.0028, 0.0031, 0.001, 0.0029]
    row = _row(evaluate_claims(_results(diffs), claims=[ROW]))
    eff, lo, hi, n = read_interval(diffs)
    assert (row.effect, row.ci_low, row.ci_high, row.n) == pytest.approx((eff, lo, hi, n))
    assert (
        row.verdict == verdict(lo, hi, "higher") == "supported"
        and row.level == 0.95
        and row.rule == SequentialPlan((9,)).rule
    )
    assert (row.loso_kept, row.fragile, row.stopped) == (3, True, "decided")
    robust = _row(evaluate_claims(_results([0.010, 0.011, 0.009, 0.012, 0.010]), claims=[ROW]))
    assert (robust.verdict, robust.loso_kept, robust.fragile) == ("supported", 5, False)


def test_a_sequential_row_uses_the_seeds_up_to_its_deciding_look_and_says_so():
    plan = SequentialPlan(look_schedule(5, 11, 2))  # looks at 5, 7, 9, 11 seeds (the guarded rule reads none at 5)
    diffs = [0.02, 0.01, 0.015, 0.03, 0.025, 0.03, 0.028, 0.032, 0.03, 0.029, 0.031]  # undecided early, decided at 11
    row = _row(evaluate_claims(_results(diffs), claims=[ROW], plan=plan))
    assert (
        row.verdict == "supported" and row.stopped == "decided" and row.look >= 2 and row.n == plan.looks[row.look - 1]
    )
    assert row.seeds_available == 11 and row.rule.startswith("group-sequential") and 0.95 < row.level < 1
    assert [h["n"] for h in row.history] == list(plan.looks[: row.look]) and row.history[0]["verdict"] == "inconclusive"
    assert row.first_look_fixed_verdict == verdict(*read_interval(np.array(diffs[:5]))[1:3], "higher")
    null = _row(evaluate_claims(_results([0.01, -0.01, 0.005, -0.004, 0.0, 0.002, -0.003]), claims=[ROW], plan=plan))
    assert (null.verdict, null.stopped, null.n) == ("inconclusive", "open", 7)
    done = _row(
        evaluate_claims(
            _results([0.01, -0.01, 0.005, -0.004, 0.0, 0.01, -0.02, 0.0, 0.003, 0.001, -0.002]), claims=[ROW], plan=plan
        )
    )
    assert (done.verdict, done.stopped, done.n) == ("inconclusive", "max seeds", 11)


def test_the_next_round_trains_both_arms_of_every_open_row_and_nothing_decided():
    plan = SequentialPlan((7, 9))
    open_row, decided_row = ROW, [c for c in CLAIMS if c.id == "ARG-6" and c.metric == "parent_norm"][0]
    res = pd.concat(
        [
            _results([0.01, -0.01, 0.005, -0.004, 0.0, 0.002, -0.003]),
            _results([-1.0, -1.1, -0.9, -1.05, -0.95, -1.02, -0.98], decided_row.a, decided_row.b, decided_row.metric),
        ]
    )
    led = evaluate_claims(res, claims=[open_row, decided_row], plan=plan)
    assert _row(led, decided_row).verdict == "supported" and _row(led, decided_row).stopped == "decided"
    assert recipes_to_extend(led) == ["degla", "clip"]
    assert recipes_to_extend(evaluate_claims(res, claims=[open_row, decided_row])) == []  # a fixed ledger never asks


def test_claims_json_holds_what_the_results_page_needs(tmp_path):
    "Every field a page about an until-decided run reads comes out of claims.json (JSON-safe, history included)."
    from hierbench.ledger.run_folder import json_safe as _json_safe

    led = evaluate_claims(
        _results([0.02, -0.01, 0.015, 0.03, 0.03, 0.03, 0.03]),
        claims=[ROW],
        plan=SequentialPlan(look_schedule(3, 7, 2)),
    )
    back = json.loads(json.dumps(_json_safe(led.to_dict("records"))))[0]
    for field in (
        "verdict",
        "n",
        "seeds_available",
        "rule",
        "look",
        "level",
        "stopped",
        "fixed_verdict",
        "first_look_fixed_verdict",
        "loso_kept",
        "fragile",
        "mde",
        "effect",
        "ci_low",
        "ci_high",
        "history",
    ):
        assert field in back, field
    assert back["history"][0]["n"] == 3 and isinstance(back["fragile"], bool)


# --- the compare job in rounds --------------------------------------------------------------------------------------
from hierbench.ledger import compare as C
from hierbench.cli.parser import main as cli_main


def _value(recipe, seed, metric):
    "Made-up metrics: meru orders far better than clip (decided at once); negclip ties clip-ft (never decided)."
    if metric == "d_corr":
        return {"meru": 0.5 + 0.001 * (seed % 2), "clip": 0.1}.get(recipe)
    if metric == "comp_acc":
        return {"clip": 0.60, "clip-ft": 0.61, "negclip": 0.61 + (0.01 if seed % 2 else -0.01)}.get(recipe)


def _fake_launcher(calls):
    "A launcher that trains nothing: each task's row holds made-up metrics (and says it took 1 s)."

    def launcher(tasks, deps, run, progress=None):
        calls.append([run for t in tasks for run in C.task_runs(t)])  # (recipe, seed), whatever a task's form
        done = {}
        for t in tasks:
            done[t] = [
                dict(
                    recipe=recipe,
                    seed=seed,
                    train_seconds=1.0,
                    eval_seconds=0.1,
                    samples_per_second=1.0,
                    metrics={m: v for m in ("d_corr", "comp_acc") if (v := _value(recipe, seed, m)) is not None},
                )
                for recipe, seed in C.task_runs(t)
            ]
            if progress:
                progress.started(t)
                progress.finished(t, done[t])
        return done

    return launcher


@pytest.fixture
def outputs(monkeypatch):
    "compare_outputs replaced by a recorder (the fake runs have no per-item records to report)."
    got = {}
    monkeypatch.setattr(
        C,
        "compare_outputs",
        lambda out, budget, seeds, order, runs, meta, plan=None, still_open="open", **kw: (
            got.update(seeds=seeds, runs=runs, meta=meta, plan=plan, still_open=still_open) or got
        ),
    )
    return got


def test_rounds_add_seeds_only_to_the_recipes_of_open_rows_until_the_last_look(tmp_path, outputs):
    calls, lines = [], []
    C.run_compare(
        "smoke",
        seeds=5,
        out=tmp_path,
        recipes=["clip", "meru", "negclip", "clip-ft"],
        log=lines.append,
        launcher=_fake_launcher(calls),
        until_decided=True,
        max_seeds=9,
        round_seeds=2,
    )
    assert [sorted({s for _, s in c}) for c in calls] == [[0, 1, 2, 3, 4], [5, 6], [7, 8]]
    assert {r for r, _ in calls[0]} == {"clip", "meru", "negclip", "clip-ft"}
    # meru's only row (HYP-1 against clip) is decided at 7 seeds, the first look the skew-guarded rule reads: it gets
    # no more; clip stays as the fine-tunes' parent
    assert {r for r, _ in calls[1]} == {"clip", "meru", "negclip", "clip-ft"}
    assert {r for r, _ in calls[2]} == {"clip", "negclip", "clip-ft"}
    ud = outputs["meta"]["until_decided"]
    assert ud["seeds_per_recipe"] == {"clip": 9, "meru": 7, "negclip": 9, "clip-ft": 9} and ud["stopped"] == "max seeds"
    assert [r["seeds"] for r in ud["rounds"]] == [5, 7, 9] and outputs["plan"].looks == (5, 7, 9)
    assert len(outputs["runs"]) == 4 * 7 + 3 * 2 and outputs["seeds"] == 9
    plan = json.loads((tmp_path / "plan.json").read_text())  # what --report-only rebuilds from
    assert plan["until_decided"]["seeds_per_recipe"] == ud["seeds_per_recipe"]
    # every run said once, with the round and the count of its round's runs
    said = [l for l in lines if "] " in l and " zs " in l]
    assert len(said) == len(outputs["runs"]) and sum("round 3: [6/6]" in l for l in said) == 1
    # round 1 also says what the rest of the plan costs at most: every recipe to 9 seeds, 2 rounds of 4 x 2 runs
    bound = [l for l in lines if l.startswith("compare: then at most")]
    assert (
        len(bound) == 1 and "16 runs in 2 more round(s)" in bound[0] and "before 9 seeds" in " ".join(bound[0].split())
    )
    assert lines.index(bound[0]) == 1 + next(i for i, l in enumerate(lines) if l.startswith("compare: round 1:"))


def test_a_round_that_cannot_finish_in_the_time_left_is_not_begun(tmp_path, outputs):
    calls, lines = [], []
    C.run_compare(
        "smoke",
        seeds=3,
        out=tmp_path,
        recipes=["clip", "negclip", "clip-ft"],
        log=lines.append,
        launcher=_fake_launcher(calls),
        until_decided=True,
        max_seeds=7,
        max_hours=1e-4,
    )  # 0.36 s
    assert len(calls) == 1 and outputs["meta"]["until_decided"]["stopped"] == "time cap"
    assert outputs["still_open"] == "time cap" and any("does not fit" in l for l in lines)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--seeds", "5", "--max-seeds", "3"], "--max-seeds 3 is below the 5 seeds"),
        (["--seeds", "2"], "needs --max-seeds"),
        (["--seeds", "2", "--max-seeds", "4", "--round-seeds", "0"], "--round-seeds 0"),
        (["--seeds", "2", "--max-seeds", "4", "--max-hours", "0"], "--max-hours 0"),
    ],
)
def test_bad_until_decided_flags_are_one_line_errors_before_anything_trains(tmp_path, argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["compare", "--budget", "smoke", "--out", str(tmp_path), "--until-decided", *argv])
    assert message in str(e.value) and "\n" not in str(e.value) and not (tmp_path / "runs").exists()


def test_max_seeds_without_until_decided_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="go with --until-decided"):
        cli_main(["compare", "--budget", "smoke", "--out", str(tmp_path), "--max-seeds", "4"])


def test_until_decided_refuses_a_folder_of_another_budgets_runs_and_keeps_them(tmp_path):
    run = tmp_path / "runs" / "clip" / "seed0"
    run.mkdir(parents=True)
    record = json.dumps(dict(recipe="clip", seed=0, budget_name="quick", run_key={"steps": "other"}))
    (run / "eval.json").write_text(record)
    with pytest.raises(SystemExit) as e:
        cli_main(
            [
                "compare",
                "--budget",
                "smoke",
                "--out",
                str(tmp_path),
                "--until-decided",
                "--seeds",
                "1",
                "--max-seeds",
                "3",
                "--recipes",
                "clip",
            ]
        )
    assert "another budget ('quick'" in str(e.value) and "\n" not in str(e.value)
    assert (run / "eval.json").read_text() == record and sorted(p.name for p in (tmp_path / "runs").rglob("*")) == [
        "clip",
        "eval.json",
        "seed0",
    ]


def test_until_decided_at_the_smoke_budget_end_to_end(tmp_path):
    "Two worker processes, two rounds: every run trained once and said by the parent, the ledger and plan rebuildable."
    from hierbench.ledger.compare import rebuild_report

    lines = []
    res = C.run_compare(
        "smoke",
        seeds=2,
        out=tmp_path,
        recipes=["clip", "negclip"],
        jobs=2,
        log=lines.append,
        until_decided=True,
        max_seeds=3,
        round_seeds=1,
    )
    ud = res["meta"]["until_decided"]
    assert [r["seeds"] for r in ud["rounds"]] == [2, 3] and ud["seeds_per_recipe"] == {"clip": 3, "negclip": 3}
    said = [l for l in lines if "] " in l and " zs " in l]
    trained = [(m[1], int(m[2])) for l in said if (m := re.search(r"left\s+(\S+)\s+s(\d+)\s+zs ", l))]
    assert sorted(trained) == [(r, s) for r in ("clip", "negclip") for s in range(3)]  # each once, none lost
    assert any(l.startswith("compare: round 1: 4 runs") for l in lines) and "round 2: [2/2]" in said[-1]
    claims = json.loads((tmp_path / "claims.json").read_text())
    row = [c for c in claims["claims"] if c["id"] == "DEG-1" and c["a"] == "negclip" and c["b"] == "clip"][0]
    assert (
        row["rule"].startswith("group-sequential") and row["n"] in (2, 3) and row["stopped"] in ("decided", "max seeds")
    )
    assert {"loso_kept", "fragile", "history", "level", "look", "first_look_fixed_verdict", "mde"} <= set(row)
    assert claims["meta"]["until_decided"]["plan"]["looks"] == [2, 3]
    again = rebuild_report(tmp_path, log=lambda *a: None)
    cols = ["id", "a", "b", "metric", "verdict", "n", "look", "stopped", "loso_kept"]
    pd.testing.assert_frame_equal(again["ledger"][cols], res["ledger"][cols])
    # the results page's tables come from the folder alone (tools/until_decided_tables.py)
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "udt", Path(__file__).resolve().parents[2] / "tools" / "until_decided_tables.py"
    )
    udt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(udt)
    page = udt.tables(tmp_path, udt._earlier_from_page())
    deg = [l for l in page.splitlines() if l.startswith("| DEG-1 | negclip − clip |")][0]
    assert f"| {row['verdict']}" in deg and "| supported |" in deg  # the 5-seed ledger page said supported
    assert "| 1 | 2 |" in page and "Rows run: 1;" in page and "Earlier verdicts compared: 1;" in page


def test_an_until_decided_folder_refuses_another_plan(tmp_path, outputs):
    """Looks changed after the results of the first ones were seen would not keep the error rate: the second plan is
    refused."""
    C.run_compare(
        "smoke",
        seeds=3,
        out=tmp_path,
        recipes=["clip", "meru"],
        log=lambda *a: None,
        launcher=_fake_launcher([]),
        until_decided=True,
        max_seeds=5,
    )
    with pytest.raises(ValueError, match=r"looks at \[3, 5\] seeds .* these flags plan \[3, 5, 7, 9\]"):
        C.run_compare(
            "smoke",
            seeds=3,
            out=tmp_path,
            recipes=["clip", "meru"],
            log=lambda *a: None,
            launcher=_fake_launcher([]),
            until_decided=True,
            max_seeds=9,
        )
    C.run_compare(
        "smoke",
        seeds=3,
        out=tmp_path,
        recipes=["clip", "meru"],
        log=lambda *a: None,  # the same plan: fine
        launcher=_fake_launcher([]),
        until_decided=True,
        max_seeds=5,
        max_hours=2,
    )


def test_the_quick_budgets_first_look_is_at_five_seeds_not_two(tmp_path, outputs):
    """Issue 39: a look at 2 seeds (one degree of freedom, at the plan's strictest level) can never decide: no round is
    spent on it."""
    calls = []
    C.run_compare(
        "quick",
        out=tmp_path,
        recipes=["clip", "meru"],
        log=lambda *a: None,
        launcher=_fake_launcher(calls),
        until_decided=True,
        max_seeds=9,
    )
    assert sorted({s for _, s in calls[0]}) == [0, 1, 2, 3, 4] and outputs["plan"].looks[0] == C.FIRST_LOOK == 5
    assert C.BUDGETS["quick"].seeds == 2  # without --until-decided the main job keeps its two seeds
    with pytest.raises(ValueError, match=r"looks at \[5, 7, 9\] seeds .* these flags plan \[2, 4, 6, 8, 9\]"):
        C.run_compare(
            "quick",
            seeds=2,
            out=tmp_path,
            recipes=["clip", "meru"],
            log=lambda *a: None,
            launcher=_fake_launcher([]),
            until_decided=True,
            max_seeds=9,
        )  # a plan change stays refused
