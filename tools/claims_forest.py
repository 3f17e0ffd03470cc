#!/usr/bin/env python
"""Draw the README's figure: the claims ledger of the standard run as a forest plot (PNG).

With `--claims OUT/claims.json` the rows are a compare's own ledger (for `--until-decided`, each row's interval is
the one its last look read, at that look's level). Otherwise they are read from the claims-ledger results page
(`nbs/results/2026-12-02_claims-ledger.ipynb`, its markdown table: claim, A, B, metric, effect, 95% seed interval,
unit, verdict), so the numbers stand in one place;
`points` rows are converted to the metric's own units (÷ 100). Drawn with `hierbench.ledger.report.forest_figure` and
written with kaleido (needs Chrome/Chromium). Usage:
    .venv/bin/python tools/claims_forest.py [--page PAGE | --claims CLAIMS_JSON] [--out nbs/images/claims_forest.png]
"""

import argparse
import json
import re
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "nbs/results/2026-12-02_claims-ledger.ipynb"
OUT = ROOT / "nbs/images/claims_forest.png"


def _num(s: str) -> float:
    return float(s.strip().replace("−", "-").replace("+", ""))


def ledger_from_page(page: Path = PAGE) -> pd.DataFrame:
    """The ledger table of a results page as the DataFrame `forest_figure` reads (effect, ci_low, ci_high in metric
    units)."""
    text = "\n".join(c.source for c in nbformat.read(page, as_version=4).cells if c.cell_type == "markdown")
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 8 or not re.match(r"^[A-Z]+-\d+$", cells[0]):
            continue
        cid, a, b, metric, effect, interval, unit, verdict = cells
        m = re.fullmatch(r"\[(.+),(.+)\]", interval)
        if not m:
            raise ValueError(f"{page}: claim {cid} {a} − {b} {metric}: interval {interval!r} is not [low, high]")
        scale = 0.01 if unit == "points" else 1.0
        rows.append(
            dict(
                id=cid,
                a=a,
                b=b,
                metric=metric,
                effect=_num(effect) * scale,
                ci_low=_num(m[1]) * scale,
                ci_high=_num(m[2]) * scale,
                boot_low=np.nan,
                boot_high=np.nan,
                verdict=verdict,
            )
        )
    if not rows:
        raise ValueError(f"{page}: no ledger table found")
    return pd.DataFrame(rows)


def ledger_from_claims(path: Path) -> tuple[pd.DataFrame, str]:
    "The rows of a compare's claims.json that were run, and a title naming its budget, seeds and rule."
    claims = json.loads(Path(path).read_text())
    led = pd.DataFrame(claims["claims"])
    missing = {"id", "a", "b", "metric", "effect", "ci_low", "ci_high", "verdict"} - set(led.columns)
    if missing:
        raise ValueError(f"{path}: claim rows lack {sorted(missing)}: not a compare's claims.json")
    led = led[led.verdict != "not run"].reset_index(drop=True)
    meta = claims.get("meta", {})
    budget = (meta.get("budget") or {}).get("name", "?")
    seeds = (
        f"{led.n.min()}–{led.n.max()} seeds"
        if "n" in led and led.n.min() != led.n.max()
        else f"{meta.get('seeds', '?')} seeds"
    )
    rule = (
        "the interval of each row's last look (group-sequential rule)"
        if meta.get("until_decided")
        else "its 95% seed interval"
    )
    return led, f"Claims ledger, {budget} budget, {seeds}: effect A − B with {rule}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--page", type=Path, default=PAGE)
    p.add_argument("--claims", type=Path, default=None, help="a compare's claims.json instead of the page")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    try:
        from hierbench.ledger.report import forest_figure
    except ImportError:
        from hierbench.ledger.compare import forest_figure
    if args.claims:
        led, title = ledger_from_claims(args.claims)
    else:
        led, title = (
            ledger_from_page(args.page),
            "Claims ledger, standard run (2026-12-02), 5 seeds: effect A − B with its 95% seed interval",
        )
    fig = forest_figure(led)
    fig.update_layout(title=title)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp.png")
    fig.write_image(tmp, scale=1)
    tmp.replace(args.out)
    print(f"{args.out}: {len(led)} claim rows")


if __name__ == "__main__":
    main()
