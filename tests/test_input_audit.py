"The fuzz table of tools/input_audit.py: every malformed-input class over every loader it applies to is handled safely."
import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("input_audit", Path(__file__).resolve().parents[1] / "tools" / "input_audit.py")
audit_tool = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(audit_tool)


@pytest.fixture(scope="module")
def audit():
    return audit_tool.run_audit()


def test_no_input_crashes_is_accepted_silently_or_loses_data(audit):
    bad = audit[audit.outcome.isin(audit_tool.UNSAFE)]
    assert bad.empty, bad[["cls", "format", "outcome", "message"]].to_string()


def test_every_class_ran_with_the_outcome_it_expects(audit):
    table = audit_tool.fuzz_table(audit)
    assert len(table) >= 25 and (table.inputs > 0).all() and audit.format.nunique() == 8
    # a path outside the image root is refused, a negative equal to its positive set aside: never a mere format error
    assert (audit[audit.expected == "refused"].outcome == "refused").all()
    assert (audit[audit.expected == "handled"].outcome == "handled").all()


def test_the_audit_sees_a_silent_acceptance(monkeypatch, audit):
    "The audit itself can fail: a loader that stops setting aside negatives equal to positives shows up."
    from hierbench import loaders as L, winoground as WG
    for module in (L, WG):   # hierbench.winoground imports the loaders' helper by name
        monkeypatch.setattr(module, "_set_aside", lambda path, items, bad, why: list(items))
    again = audit_tool.run_audit()
    rows = again[again.cls.str.startswith("negative equal")]
    assert (rows.outcome == "silently accepted").all()
