#!/usr/bin/env python
"""The tables of a results page about a `hierbench compare --until-decided` run, as markdown, from its folder alone
(`claims.json`, `plan.json`): the rounds; every claim row run with the seeds its verdict took, the rule and look that
decided it, its interval, whether one seed overturns it (fragile), why it stopped and the smallest effect its seeds
could detect (80% power, 5%), and (ledgers since issue 48) the seed differences' skewness, a Shapiro–Wilk p-value
and the plain t-rule's verdict beside the skew-guarded one; which verdicts of the earlier
ledger held; PEP AP's smallest detectable effect at the seeds reached. Usage:
    .venv/bin/python tools/until_decided_tables.py OUT [--before CLAIMS_JSON | --before-page PAGE]
OUT is a compare folder or ledger records (both hold claims.json).
Without --before the earlier verdicts are the claims-ledger results page's (nbs/results/2026-12-02_claims-ledger,
five seeds, read as tools/claims_forest.py reads it); with it, another compare's claims.json (e.g. the folder's
claims.json copied before the run). Every row also carries today's rule (one 95% interval) at the first look's seeds.
"""

import argparse
import importlib.util
import json
import math
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
KEY = ["id", "a", "b", "metric"]


def _earlier_from_page() -> pd.DataFrame:
    "The verdicts of the claims-ledger page (tools/claims_forest.py's reading of its table)."
    spec = importlib.util.spec_from_file_location("claims_forest", ROOT / "tools" / "claims_forest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ledger_from_page()[KEY + ["verdict"]]


def earlier_from_until_page(page: Path) -> pd.DataFrame:
    """The verdicts of an earlier until-decided results page (the table this tool writes: claim | A − B | metric | ... |
    verdict | ...)."""
    import nbformat
    import re

    text = "\n".join(c.source for c in nbformat.read(page, as_version=4).cells if c.cell_type == "markdown")
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 8 or not re.match(r"^[A-Z]+-\d+$", cells[0]) or " − " not in cells[1]:
            continue
        a, b = cells[1].split(" − ")
        rows.append(dict(id=cells[0], a=a, b=b, metric=cells[2], verdict=cells[7].replace(" (fragile)", "")))
    if not rows:
        raise SystemExit(f"{page}: no until-decided ledger table found")
    return pd.DataFrame(rows)


def _num(x, digits=4) -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:+.{digits}f}"


def tables(out: Path, before: pd.DataFrame | None) -> str:
    "The page's tables (markdown) for the compare folder `out`; `before`: earlier verdicts (id, a, b, metric, verdict)."
    claims = json.loads((Path(out) / "claims.json").read_text())
    ud = claims["meta"].get("until_decided")
    if ud is None:
        raise SystemExit(f"{out}/claims.json is not from a `compare --until-decided` run (no meta.until_decided)")
    led = pd.DataFrame(claims["claims"])
    led = led[led.verdict != "not run"].reset_index(drop=True)
    parts = [
        f"Plan: looks at {', '.join(map(str, ud['plan']['looks']))} seeds, {ud['plan']['spending']} spending of "
        f"α = {ud['plan']['alpha']}; the rounds stopped: {ud['stopped']}.",
        "",
        "| round | seeds after it | recipes trained | runs | claim rows decided | open |",
        "|---|---|---|---|---|---|",
    ]
    parts += [
        f"| {k} | {r['seeds']} | {len(r['recipes'])} | {r['runs']} | {r['decided']} | {r['open']} |"
        for k, r in enumerate(ud["rounds"], 1)
    ]
    if before is not None:
        led = led.merge(before.rename(columns={"verdict": "earlier"}), on=KEY, how="left")
    else:
        led["earlier"] = None
    diag = "t_verdict" in led  # issue 48's diagnostics: the seed differences' skewness, normality, the plain t-rule
    parts += [
        "",
        "| claim | A − B | metric | seeds | look | level | effect [interval] | verdict | kept without one seed "
        "| stopped | smallest detectable effect | 95% at the first look | earlier ledger | held |"
        + (" skewness | Shapiro–Wilk p | plain t-rule |" if diag else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if diag else ""),
    ]
    for r in led.itertuples():
        held = "" if not isinstance(r.earlier, str) else ("yes" if r.earlier == r.verdict else "no")
        extra = (
            (
                f" {_num(r.skewness, 2)} | {_num(r.shapiro_p, 3).lstrip('+')} | "
                f"{'agrees' if r.rules_agree else f'{r.t_verdict} ({r.t_n} seeds)'} |"
            )
            if diag
            else ""
        )
        parts.append(
            f"| {r.id} | {r.a} − {r.b} | {r.metric} | {r.n} | {r.look} | "
            f"{_num(100 * r.level if r.level is not None else None, 2).lstrip('+')}% | "
            f"{_num(r.effect)} [{_num(r.ci_low)}, {_num(r.ci_high)}] | {r.verdict}{' (fragile)' if r.fragile else ''} "
            "| "
            f"{r.loso_kept}/{r.n} | {r.stopped} | {_num(r.mde).lstrip('+')} | {r.first_look_fixed_verdict} | "
            f"{r.earlier if isinstance(r.earlier, str) else '—'} | {held} |" + extra
        )
    compared = led[led.earlier.apply(lambda v: isinstance(v, str))]
    decided = led.verdict.isin(["supported", "contradicted"])
    parts += [
        "",
        f"Rows run: {len(led)}; decided: {int(decided.sum())} (supported {int((led.verdict == 'supported').sum())}, "
        f"contradicted {int((led.verdict == 'contradicted').sum())}); undecided: {int((~decided).sum())}; "
        f"fragile: {int(led.fragile.eq(True).sum())}; seeds used per row: median {led.n.median():g}, "
        f"range {led.n.min()}–{led.n.max()}.",
    ]
    if len(compared):
        parts.append(
            f"Earlier verdicts compared: {len(compared)}; held: {int((compared.earlier == compared.verdict).sum())}; "
            "changed: "
            + (
                ", ".join(
                    f"{r.id} {r.a} − {r.b} {r.metric} ({r.earlier} → {r.verdict})"
                    for r in compared[compared.earlier != compared.verdict].itertuples()
                )
                or "none"
            )
            + "."
        )
    pep = led[led.metric == "pep_ap"]
    parts += [
        "",
        "| PEP AP row | seeds reached | seed sd of A − B | smallest detectable effect (80% power, 5%) |",
        "|---|---|---|---|",
    ]
    parts += [f"| {r.id} {r.a} − {r.b} | {r.n} | {_num(r.seed_sd)} | {_num(r.mde)} |" for r in pep.itertuples()]
    power = pd.DataFrame(claims.get("power", []))
    if len(power) and "family" in power:
        ap = power[power.family == "pep_ap"]
        if len(ap):
            parts.append(f"\nThe power table's seeds_needed for PEP AP (half-width 0.02): {ap.seeds_needed.iloc[0]}.")
    return "\n".join(parts)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="the compare folder of an --until-decided run")
    p.add_argument(
        "--before",
        default=None,
        help="an earlier claims.json to compare verdicts with (default: the claims-ledger page)",
    )
    p.add_argument("--before-page", default=None, type=Path, help="an earlier until-decided results page instead")
    a = p.parse_args(argv)
    before = (
        pd.DataFrame(json.loads(Path(a.before).read_text())["claims"])[KEY + ["verdict"]]
        if a.before
        else earlier_from_until_page(a.before_page)
        if a.before_page
        else _earlier_from_page()
    )
    print(tables(Path(a.out), before))


if __name__ == "__main__":
    main()
