"""`hierbench explain` (issue 53, parts 1, 2 and 4 in part): a claim row's seeds and items from records alone."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hierbench.ledger.explain import (
    DRAWN_ITEMS,
    ExplainError,
    driving_items,
    explain,
    item_cells,
    item_pushes,
    page_name,
    row_items,
    row_seeds,
    write_explain,
)
from hierbench.stats import leave_one_out_verdicts

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "nbs" / "results" / "data" / "ledger-standard"


@pytest.fixture(scope="module")
def deg1():
    return explain(RECORDS, "DEG-1")


def test_every_row_of_a_claim_is_explained_from_records(deg1):
    claims = json.loads((RECORDS / "claims.json").read_text())["claims"]
    expected = [(c["a"], c["b"], c["metric"]) for c in claims if c["id"] == "DEG-1"]
    assert [(e.row["a"], e.row["b"], e.row["metric"]) for e in deg1] == expected
    for e, c in zip(deg1, [c for c in claims if c["id"] == "DEG-1"]):
        assert e.row["verdict"] == c["verdict"] and e.row["effect"] == pytest.approx(c["effect"])


def test_the_seeds_that_overturn_a_verdict_are_the_ledgers_fragility(deg1):
    for e in deg1:
        t = e.seeds["table"]
        used = t[t.used]
        assert len(used) == e.row["n"] and used["diff"].mean() == pytest.approx(e.row["effect"])
        assert len(e.seeds["overturned_by"]) == e.row["n"] - e.row["loso_kept"]
        assert bool(e.seeds["overturned_by"]) == e.row["fragile"]
        assert set(e.seeds["overturned_by"]) <= set(used.seed)


def test_a_macro_accuracy_breaks_down_into_types_that_add_up_to_the_row(deg1):
    for e in deg1:
        t = e.items["table"]
        assert e.items["field"] == "type" and e.items["adds_up"] is True
        assert t.contribution.sum() == pytest.approx(e.row["effect"], abs=1e-9)  # over the same seeds as the row
        assert (t.low <= t.effect).all() and (t.effect <= t.high).all()
        ranked = t[t.ranked]
        assert list(ranked.contribution.abs()) == sorted(ranked.contribution.abs(), reverse=True)


def test_the_items_pushes_add_up_to_the_row_and_the_drawn_ones_are_the_worlds(deg1):
    "Issue 53: a compositional row's effect is a sum over its items; the page draws the world's own scenes."
    from hierbench.ledger.records import read_records
    from hierbench.evaluation.world_eval import world_eval_data

    items = read_records(RECORDS).items
    for e in deg1:
        used = e.seeds["table"].seed[e.seeds["table"].used].tolist()
        pushes = item_pushes(e.row, items, used)
        assert pushes.push.sum() == pytest.approx(e.row["effect"], abs=1e-9)
        by_type = pushes.groupby("type").push.sum()
        cells = e.items["table"].set_index("cell").contribution
        assert np.allclose(by_type[cells.index], cells, atol=1e-12)  # items -> types -> row, one sum
        t = e.drivers["table"]
        assert len(t) == len(e.drivers["images"]) == DRAWN_ITEMS and (t.push > 0).all()
        assert list(t.push) == sorted(pushes.push, reverse=True)[:DRAWN_ITEMS]
        # each item's push with its interval over the seeds: zero width only where both arms agree on every seed
        assert (pushes.low <= pushes.push + 1e-15).all() and (pushes.push <= pushes.high + 1e-15).all()
        agree = (pushes.a_right == pushes.b_right) & pushes.a_right.isin([0, len(used)])
        assert np.allclose(pushes.high[agree] - pushes.low[agree], 0) and (t.high > t.low).all()
    data = world_eval_data("test-iid", 300, seed=0, pep_pool=0)
    top = deg1[1].drivers["table"].iloc[0]
    assert top.caption == data.chains[top.group][-1] and (top.type, top.negative) in data.negatives[top.group]
    assert deg1[1].figures["scenes"] is not None and len(deg1[1].as_dict()["drivers"]["table"]) == DRAWN_ITEMS
    # records of another world (other items) are refused by name, not drawn wrong
    with pytest.raises(ExplainError, match="not the world's 299 test-iid scenes"):
        driving_items(deg1[1].row, items, used, 299)


def _toy_items(n_per_type):
    rng = np.random.default_rng(1)

    def run(p):
        t = np.array(["swap_att"] * n_per_type[0] + ["replace_obj"] * n_per_type[1])
        return {"test-iid": {"comp": dict(group=np.arange(len(t)), type=t, ok=rng.random(len(t)) < p)}}

    return {(arm, s): run(0.7 if arm == "A" else 0.6) for arm in "AB" for s in range(3)}


def test_a_cell_with_too_few_items_is_shown_but_not_ranked():
    res = row_items(dict(a="A", b="B", metric="comp_acc"), _toy_items((200, 5)), [0, 1, 2])
    t = res["table"]
    assert t.set_index("cell").loc["replace_obj", "ranked"] == False  # noqa: E712 (numpy bool)
    assert t.cell.iloc[-1] == "replace_obj"  # unranked cells last, whatever their size
    assert res["adds_up"]


def test_swap_minus_replace_weights_its_groups_with_signs():
    field, cells, weights = item_cells("comp_acc/swap_minus_replace", _toy_items((50, 50))[("A", 0)])
    assert field == "type" and weights == {"swap_att": 1.0, "replace_obj": -1.0}
    res = row_items(dict(a="A", b="B", metric="comp_acc/swap_minus_replace"), _toy_items((50, 50)), [0, 1, 2])
    assert res["adds_up"]


def test_a_metric_without_a_field_to_break_down_says_so():
    res = row_items(dict(a="A", b="B", metric="zs_acc/general"), _toy_items((50, 50)), [0, 1])
    assert res["table"] is None and "no field" in res["note"]
    res = row_items(dict(a="A", b="C", metric="comp_acc"), _toy_items((50, 50)), [0, 1])
    assert res["table"] is None and "'C'" in res["note"]


def test_row_seeds_reads_the_plans_rule():
    results = pd.DataFrame(
        [
            dict(recipe=r, seed=s, metric="m", value=v)
            for s, d in enumerate([0.01, 0.012, 0.011, 0.2, 0.013, 0.5])
            for r, v in (("A", 0.5 + d), ("B", 0.5))
        ]
    )
    row = dict(id="X", a="A", b="B", metric="m", direction="higher", n=5, look=1, level=0.95, verdict="supported")
    s = row_seeds(row, results, interval="t")
    assert s["table"].used.tolist() == [True] * 5 + [False]  # the sixth seed came after the look
    d = s["table"]["diff"][:5].to_numpy()
    without = leave_one_out_verdicts(d, "higher", 0.02, 0.95, "t")  # the claim's margin: no claim 'X', the default
    assert s["overturned_by"] == [k for k, v in enumerate(without) if v != "supported"]
    assert s["table"].verdict_without.tolist()[:5] == without


def test_unknown_claim_or_metric_is_one_line_and_writes_nothing(tmp_path):
    with pytest.raises(ExplainError, match="its claims: ARG-1"):
        write_explain(RECORDS, "NOPE-1", tmp_path / "out")
    with pytest.raises(ExplainError, match="its metrics: zs_acc/general"):
        write_explain(RECORDS, "DEG-2", tmp_path / "out", metric="pep_auc")
    with pytest.raises(ExplainError, match="neither ledger records"):
        write_explain(tmp_path, "DEG-2", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_command_writes_a_page_per_row_and_the_same_numbers_as_json(tmp_path, deg1, monkeypatch, capsys):
    "Through the command line's entry point (in this process: the console script's refusals are tested in test_cli)."
    import warnings

    from hierbench.cli.parser import main

    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # main installs its one-line warnings
    out, js = tmp_path / "pages", tmp_path / "deg1.json"
    main(["explain", str(RECORDS), "DEG-1", "--out", str(out), "--json", str(js)])
    assert capsys.readouterr().out.count("wrote ") == len(deg1) + 1
    pages = sorted(p.name for p in out.glob("*.html"))
    assert pages == sorted(page_name(e.row) for e in deg1) and (out / "plotly.min.js").is_file()
    html = (out / page_name(deg1[0].row)).read_text()
    assert "plotly-graph-div" in html and "swap_att" in html and "https://" not in html
    doc = json.loads(js.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in strict JSON"))  # NaN as null
    assert [d["row"]["verdict"] for d in doc] == [e.row["verdict"] for e in deg1]
    assert doc[0]["seeds"]["overturned_by"] == deg1[0].seeds["overturned_by"]
    with pytest.raises(SystemExit) as exit_:
        main(["explain", str(RECORDS), "NOPE", "--out", str(tmp_path / "x")])
    assert str(exit_.value.code).startswith("hierbench explain: no claim 'NOPE'")
    assert not (tmp_path / "x").exists()


def test_a_zero_shot_row_breaks_down_by_the_worlds_classes_and_adds_up():
    (row,) = explain(RECORDS, "DEG-2", figures=False)
    table = row.items["table"]
    assert row.items["field"] == "class" and row.items["adds_up"] is True
    assert table["items"].sum() == 300 and np.isclose(table.weight.sum(), 1.0)  # every image of the general split
    used = row.seeds["table"][row.seeds["table"].used]
    assert np.isclose(table.contribution.sum(), used["diff"].mean(), atol=1e-12)  # the row's own effect
    assert (table.low <= table.effect).all() and (table.effect <= table.high).all()


def test_a_retrieval_recall_breaks_down_by_the_scenes_class():
    from hierbench.ledger.explain import with_classes

    rng = np.random.default_rng(1)
    items = {
        (arm, s): {"test-iid": {"i2t": dict(group=np.arange(50), rank=rng.integers(0, 8 if arm == "A" else 12, 50))}}
        for arm in "AB"
        for s in range(3)
    }
    classes = np.array(["ring", "disc", "cross", "star", "moon"] * 10)
    out = row_items(dict(a="A", b="B", metric="i2t_R@5"), with_classes(items, "i2t_R@5", classes), [0, 1, 2])
    assert out["field"] == "class" and out["adds_up"] is True and len(out["table"]) == 5
    assert not out["table"].ranked.any()  # ten queries a class: shown, not ranked
    with pytest.raises(ExplainError, match="records of another world"):
        with_classes(items, "i2t_R@5", classes[:40])


def test_a_pep_rows_page_draws_the_chains_that_moved_most():
    from hierbench.ledger.explain import driving_chains
    from hierbench.ledger.records import read_records

    (ev,) = explain(RECORDS, "ARG-4", metric="pep_ap")
    t = ev.drivers["table"]
    assert ev.drivers["kind"] == "chains" and len(t) == DRAWN_ITEMS == len(ev.drivers["images"])
    assert (t["shift"] < 0).all() and (t.high >= t["shift"]).all() and (t.low <= t["shift"]).all()  # the row's way
    assert t["shift"].is_monotonic_increasing  # hardest first
    assert np.allclose(t.a_score - t.b_score, t["shift"])
    assert all(len(c.split(" ⊃ ")) == len(p) == 4 for c, p in zip(t.chain, t.a_phi))
    assert "not its parts" in ev.drivers["note"] and ev.figures["scenes"] is not None
    used = ev.seeds["table"].seed[ev.seeds["table"].used].tolist()
    items = read_records(RECORDS).items
    moved = dict(items)
    key = (ev.row["b"], used[0])
    pep = dict(moved[key]["test-iid"]["pep"])
    pep["pos_group"] = np.roll(np.asarray(pep["pos_group"]), 1)
    moved[key] = {**moved[key], "test-iid": {**moved[key]["test-iid"], "pep": pep}}
    with pytest.raises(ExplainError, match="records of another world"):
        driving_chains(ev.row, moved, used, 300)
