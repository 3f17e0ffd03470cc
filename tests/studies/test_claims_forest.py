"""tools/claims_forest.py: the README's figure is drawn from the claims-ledger results page, and the page's stated
verdicts agree with its stated intervals under the ledger's own verdict rule."""

import importlib.util
import itertools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("claims_forest", ROOT / "tools" / "claims_forest.py")
claims_forest = importlib.util.module_from_spec(spec)
spec.loader.exec_module(claims_forest)


def test_ledger_rows_are_read_in_metric_units():
    led = claims_forest.ledger_from_page()
    assert len(led) == 21 and set(led.verdict) == {"supported", "contradicted", "inconclusive"}
    row = led[(led.id == "DEG-1") & (led.a == "negclip") & (led.b == "clip")].iloc[0]
    assert (row.effect, row.ci_low, row.ci_high) == pytest.approx((0.0065, 0.0014, 0.0116))  # stated in points
    assert (led.ci_low <= led.effect).all() and (led.effect <= led.ci_high).all()


def test_stated_verdicts_follow_the_ledger_rule():
    "Each row's verdict is the one `hierbench.stats.verdict` gives its interval (bounds within their rounding)."
    from hierbench.ledger.claims import CLAIMS
    from hierbench.stats import verdict

    rules = {(c.id, c.a, c.b, c.metric): c for c in CLAIMS}
    led = claims_forest.ledger_from_page()
    wrong = []
    for r in led.itertuples():
        c = rules[(r.id, r.a, r.b, r.metric)]  # every row names a real claim of the ledger
        half = 0.00005 if c.metric in ("comp_acc", "tot_acc", "comp_acc/swap_minus_replace") else 0.0005
        got = {
            verdict(r.ci_low + dl, r.ci_high + dh, c.direction, c.margin)
            for dl, dh in itertools.product((-half, 0, half), repeat=2)
        }
        if r.verdict not in got:
            wrong.append((r.id, r.a, r.b, r.metric, r.verdict, got))
    assert wrong == [], wrong


def test_a_malformed_interval_names_the_row(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell(
                "| claim | A | B | metric | effect | 95% seed interval | unit | verdict "
                "|\n|---|---|---|---|---|---|---|---|\n"
                "| DEG-1 | negclip | clip | comp_acc | +0.65 | +0.14 to +1.16 | points | supported |"
            )
        ]
    )
    page = tmp_path / "p.ipynb"
    nbformat.write(nb, page)
    with pytest.raises(ValueError, match="DEG-1 negclip − clip comp_acc"):
        claims_forest.ledger_from_page(page)


def test_rows_of_a_compare_claims_json(tmp_path):
    "`--claims`: a compare's own ledger, rows not run left out, the title naming the budget, seeds reached and rule."
    import json

    rows = [
        dict(
            id="DEG-1",
            a="degla",
            b="clip",
            metric="comp_acc",
            effect=0.008,
            ci_low=-0.01,
            ci_high=0.03,
            boot_low=0.0,
            boot_high=0.02,
            verdict="inconclusive",
            fragile=False,
            n=9,
        ),
        dict(
            id="READ-1",
            a="read",
            b="read-base",
            metric="comp_acc",
            effect=0.002,
            ci_low=0.001,
            ci_high=0.004,
            boot_low=0.0,
            boot_high=0.004,
            verdict="supported",
            fragile=True,
            n=5,
        ),
        dict(
            id="ARG-2",
            a="argent",
            b="argent-no-weight",
            metric="pep_auc",
            effect=None,
            ci_low=None,
            ci_high=None,
            boot_low=None,
            boot_high=None,
            verdict="not run",
            fragile=None,
            n=0,
        ),
    ]
    path = tmp_path / "claims.json"
    path.write_text(
        json.dumps(
            dict(meta=dict(budget=dict(name="standard"), seeds=9, until_decided=dict(stopped="time cap")), claims=rows)
        )
    )
    led, title = claims_forest.ledger_from_claims(path)
    assert list(led.id) == ["DEG-1", "READ-1"] and "standard budget, 5–9 seeds" in title and "last look" in title
    path.write_text(json.dumps(dict(meta={}, claims=[{"id": "DEG-1"}])))
    with pytest.raises(ValueError, match="claims.json.*lack"):
        claims_forest.ledger_from_claims(path)
