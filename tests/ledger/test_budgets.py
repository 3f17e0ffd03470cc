"""`hierbench.ledger.budgets`: the run key that finished runs are reused by must not change with the rename
ComparePreset.model_preset -> Budget.arch; old results.json meta still reads."""

import dataclasses
import json

import pytest

from hierbench.ledger import budgets as B

# Budget.run_key() of every shipped budget as `hierbench.ledger.compare.PRESETS[name].run_key()` gave it before the
# split
# (commit 1049646, computed once from `git show HEAD:hierbench/compare.py`). Finished runs record this dict in their
# eval.json and are reused only when it is equal: a change here orphans every user's finished runs.
OLD_RUN_KEYS = {
    "smoke": {
        "model_preset": "world-debug",
        "pretrain_steps": 6,
        "finetune_steps": 4,
        "decoder_steps": 20,
        "n_train": 256,
        "n_test": 64,
        "pep_pool": 20,
        "batch_size": 16,
        "finetune_batch_size": 16,
        "validate_every": 2,
        "snapshots": [0.25, 0.5],
    },
    "quick": {
        "model_preset": "world-tiny",
        "pretrain_steps": 2000,
        "finetune_steps": 150,
        "decoder_steps": 1500,
        "n_train": 4000,
        "n_test": 300,
        "pep_pool": 100,
        "batch_size": 64,
        "finetune_batch_size": None,
        "validate_every": 50,
        "snapshots": [0.25, 0.5],
    },
    "standard": {
        "model_preset": "world-tiny",
        "pretrain_steps": 2000,
        "finetune_steps": 150,
        "decoder_steps": 1500,
        "n_train": 4000,
        "n_test": 300,
        "pep_pool": 100,
        "batch_size": 64,
        "finetune_batch_size": None,
        "validate_every": 50,
        "snapshots": [0.25, 0.5],
    },
    "full": {
        "model_preset": "world-small",
        "pretrain_steps": 5000,
        "finetune_steps": 1000,
        "decoder_steps": 3000,
        "n_train": 20000,
        "n_test": 1000,
        "pep_pool": 100,
        "batch_size": 512,
        "finetune_batch_size": 256,
        "validate_every": 100,
        "snapshots": [0.25, 0.5],
    },
}


@pytest.mark.parametrize("name", list(OLD_RUN_KEYS))
def test_run_key_of_every_budget_is_what_it_was(name):
    assert B.BUDGETS[name].run_key() == OLD_RUN_KEYS[name]
    # what eval.json holds (via JSON) compares equal too, and the key keeps the field name `model_preset`
    assert json.loads(json.dumps(B.BUDGETS[name].run_key())) == OLD_RUN_KEYS[name]
    assert list(B.BUDGETS[name].run_key()) == list(OLD_RUN_KEYS[name])


def test_budget_names_and_settings_are_kept():
    assert list(B.BUDGETS) == ["smoke", "quick", "standard", "full"]
    assert B.BUDGETS["quick"].run_key() == B.BUDGETS["standard"].run_key()  # standard reuses every quick run
    assert set(B.BUDGETS["quick"].recipes) <= set(B.BUDGETS["standard"].recipes)
    assert (B.BUDGETS["quick"].seeds, B.BUDGETS["standard"].seeds, B.BUDGETS["smoke"].seeds) == (2, 5, 1)


def test_old_results_meta_reads_as_a_budget():
    old = {
        "name": "smoke",
        "model_preset": "world-debug",
        "pretrain_steps": 6,
        "finetune_steps": 4,
        "decoder_steps": 20,
        "n_train": 256,
        "n_test": 64,
        "pep_pool": 20,
        "batch_size": 16,
        "finetune_batch_size": 16,
        "recipes": list(B.ALL_RECIPES),
        "seeds": 1,
        "validate_every": 2,
        "snapshots": [0.25, 0.5],
        "n_boot": 50,
    }
    assert B.budget_from_meta({"preset": old, "seeds": 1}) == B.BUDGETS["smoke"]
    assert B.budget_from_meta({"budget": dataclasses.asdict(B.BUDGETS["smoke"])}) == B.BUDGETS["smoke"]
    with pytest.raises(ValueError, match="unknown field.*colour"):
        B.Budget.from_dict({**old, "colour": 1})
    with pytest.raises(ValueError, match="missing field.*n_test"):
        B.Budget.from_dict({k: v for k, v in old.items() if k != "n_test"})
    with pytest.raises(ValueError, match="no budget"):
        B.budget_from_meta({})


def test_plan_runs_adds_parents_first():
    assert B.plan_runs(["read", "argent+degla"]) == ["clip", "read", "argent", "argent+degla"]
    assert B.plan_runs(None) == list(B.ALL_RECIPES)
    with pytest.raises(ValueError, match="nope"):
        B.plan_runs(["nope"])
