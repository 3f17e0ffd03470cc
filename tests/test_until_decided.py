"""Seeds until decided, in the ledger and the compare job: the sequential ledger's columns (seeds used, rule, look,
why a row stopped), fragile rows, which recipes the next round trains, bad input, and one smoke run of the loop."""
import json

import numpy as np
import pandas as pd
import pytest

from hierbench.claims import CLAIMS, evaluate_claims, recipes_to_extend
from hierbench.stats import SequentialPlan, look_schedule, paired_effect, verdict

ROW = [c for c in CLAIMS if c.id == "DEG-1" and c.a == "degla" and c.b == "clip"][0]


def _results(diffs, a=ROW.a, b=ROW.b, metric=ROW.metric):
    "Result rows where recipe a beats b by diffs[s] on seed s (b's value moves with the seed: pairing removes it)."
    return pd.DataFrame([dict(recipe=r, seed=s, metric=metric, value=0.6 + 0.05 * np.sin(s) + (d if r == a else 0.0))
                         for s, d in enumerate(diffs) for r in (a, b)])


def _row(ledger, claim=ROW):
    return ledger[(ledger.id == claim.id) & (ledger.a == claim.a) & (ledger.b == claim.b) & (ledger.metric == claim.metric)].iloc[0]


def test_the_fixed_ledger_is_todays_rule_with_fragility_added():
    diffs = [0.0005, 0.003, 0.002, 0.0025, 0.004]     # supported, but leaving out seed 1 or 3 reaches 0
    row = _row(evaluate_claims(_results(diffs), claims=[ROW]))
    eff, lo, hi, n = paired_effect(np.array(diffs) + 0.6, np.full(5, 0.6))
    assert (row.effect, row.ci_low, row.ci_high, row.n) == pytest.approx((eff, lo, hi, n))
    assert row.verdict == verdict(lo, hi, "higher") == "supported" and row.level == 0.95 and row.rule == "t-interval 95%"
    assert (row.loso_kept, row.fragile, row.stopped) == (3, True, "decided")
    robust = _row(evaluate_claims(_results([0.010, 0.011, 0.009, 0.012, 0.010]), claims=[ROW]))
    assert (robust.verdict, robust.loso_kept, robust.fragile) == ("supported", 5, False)


def test_a_sequential_row_uses_the_seeds_up_to_its_deciding_look_and_says_so():
    plan = SequentialPlan(look_schedule(3, 9, 2))    # looks at 3, 5, 7, 9 seeds
    diffs = [0.02, -0.01, 0.015] + [0.03] * 6          # undecided at 3 seeds, decided later
    row = _row(evaluate_claims(_results(diffs), claims=[ROW], plan=plan))
    assert row.verdict == "supported" and row.stopped == "decided" and row.look >= 2 and row.n == plan.looks[row.look - 1]
    assert row.seeds_available == 9 and row.rule.startswith("group-sequential") and 0.95 < row.level < 1
    assert [h["n"] for h in row.history] == list(plan.looks[:row.look]) and row.history[0]["verdict"] == "inconclusive"
    assert row.first_look_fixed_verdict == verdict(*paired_effect(np.array(diffs[:3]), np.zeros(3))[1:3], "higher")
    null = _row(evaluate_claims(_results([0.01, -0.01, 0.005, -0.004, 0.0]), claims=[ROW], plan=plan))
    assert (null.verdict, null.stopped, null.n) == ("inconclusive", "open", 5)
    done = _row(evaluate_claims(_results([0.01, -0.01, 0.005, -0.004, 0.0, 0.01, -0.02, 0.0, 0.003]), claims=[ROW], plan=plan))
    assert (done.verdict, done.stopped, done.n) == ("inconclusive", "max seeds", 9)


def test_the_next_round_trains_both_arms_of_every_open_row_and_nothing_decided():
    plan = SequentialPlan((5, 7))
    open_row, decided_row = ROW, [c for c in CLAIMS if c.id == "ARG-6" and c.metric == "parent_norm"][0]
    res = pd.concat([_results([0.01, -0.01, 0.005, -0.004, 0.0]),
                     _results([-1.0, -1.1, -0.9, -1.05, -0.95], decided_row.a, decided_row.b, decided_row.metric)])
    led = evaluate_claims(res, claims=[open_row, decided_row], plan=plan)
    assert _row(led, decided_row).verdict == "supported" and _row(led, decided_row).stopped == "decided"
    assert recipes_to_extend(led) == ["degla", "clip"]
    assert recipes_to_extend(evaluate_claims(res, claims=[open_row, decided_row])) == []   # a fixed ledger never asks


def test_claims_json_holds_what_the_results_page_needs(tmp_path):
    "Every field a page about an until-decided run reads comes out of claims.json (JSON-safe, history included)."
    from hierbench.compare import _json_safe
    led = evaluate_claims(_results([0.02, -0.01, 0.015, 0.03, 0.03, 0.03, 0.03]), claims=[ROW],
                          plan=SequentialPlan(look_schedule(3, 7, 2)))
    back = json.loads(json.dumps(_json_safe(led.to_dict("records"))))[0]
    for field in ("verdict", "n", "seeds_available", "rule", "look", "level", "stopped", "fixed_verdict",
                  "first_look_fixed_verdict", "loso_kept", "fragile", "mde", "effect", "ci_low", "ci_high", "history"):
        assert field in back, field
    assert back["history"][0]["n"] == 3 and isinstance(back["fragile"], bool)
