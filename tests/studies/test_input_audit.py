"The fuzz table of tools/input_audit.py: every malformed-input class over every loader it applies to is handled safely."

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "input_audit", Path(__file__).resolve().parents[2] / "tools" / "input_audit.py"
)
audit_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(audit_tool)


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
    from hierbench.data import loaders as L
    from hierbench.evaluation.compositional import winoground as WG

    for module in (
        L,
        WG,
    ):  # the Winoground loader (hierbench.evaluation.compositional.winoground) imports the helper by name
        monkeypatch.setattr(module, "set_aside_items", lambda path, items, bad, why: list(items))
    again = audit_tool.run_audit()
    rows = again[again.cls.str.startswith("negative equal")]
    assert (rows.outcome == "silently accepted").all()


# ---- the same formats' malformed inputs through the command line (tools/input_audit_cli.py, issue 42) -------------
_cli_spec = importlib.util.spec_from_file_location(
    "input_audit_cli", Path(__file__).resolve().parents[2] / "tools" / "input_audit_cli.py"
)
cli_audit_tool = importlib.util.module_from_spec(_cli_spec)
sys.modules["input_audit_cli"] = cli_audit_tool  # its dataclasses look their module up there
_cli_spec.loader.exec_module(cli_audit_tool)


@pytest.fixture(scope="module")
def cli_audit():
    return cli_audit_tool.run_cli_audit()


def test_every_malformed_input_through_the_cli_is_refused_in_one_line_or_set_aside_and_counted(cli_audit):
    bad = cli_audit[cli_audit.outcome.isin(cli_audit_tool.UNSAFE)]
    assert bad.empty, bad[["cls", "format", "via", "outcome", "message"]].to_string()
    assert (cli_audit.outcome == cli_audit.expected).all()
    table = cli_audit_tool.cli_table(cli_audit)
    assert len(table) >= 10 and table.inputs.sum() >= 60 and (table.handled.sum(), table.clear.sum()) > (10, 45)
    # a handful also ran as real processes: one line on stderr there too, never a traceback
    assert (cli_audit.via == "subprocess").sum() == len(cli_audit_tool.SUBPROCESS_CASES)


def _case(fmt, cls):
    return next(c for c in cli_audit_tool.all_cases() if (c.format, c.cls) == (fmt, cls))


def test_the_cli_audit_sees_a_traceback_and_a_silent_drop(tmp_path, monkeypatch):
    "The audit itself can fail: a refusal that escapes the entry point, a set-aside sample left uncounted."
    from hierbench.cli import parser as cli
    from hierbench.evaluation import suites

    model = cli_audit_tool.audit_model(tmp_path)
    with monkeypatch.context() as m:
        m.setattr(cli, "run_command", lambda args: args.func(args))  # the entry point without its catch
        outcome, msg = cli_audit_tool.run_case(
            _case("CLIP_benchmark classification (wds)", "no classnames.txt"), model, tmp_path / "a"
        )
    assert outcome == "raw crash" and "classnames.txt" in msg
    monkeypatch.setattr(
        suites, "_say_set_aside", lambda name, split, enc, log: {}
    )  # set aside, but neither said nor counted
    outcome, msg = cli_audit_tool.run_case(
        _case("CLIP_benchmark classification (wds)", "a sample without a label"), model, tmp_path / "b"
    )
    assert outcome == "silently accepted" and "test_set_aside" in msg
