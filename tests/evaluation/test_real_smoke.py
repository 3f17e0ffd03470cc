"""The real-image path: a few training steps and the HierarCaps/PEP evaluation on the real HierarCaps test images in
../shared/data/hierarcaps (skipped when absent), through the same trainer, losses and evaluation as the world."""

import math
from pathlib import Path

import pytest

from hierbench.evaluation.benchmarks import hierarcaps_smoke

HIERARCAPS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "hierarcaps" / "hierarcaps_test.csv"
pytestmark = pytest.mark.skipif(not HIERARCAPS.exists(), reason="../shared/data/hierarcaps not present")


@pytest.mark.parametrize("recipe", ["clip", "meru"])
def test_train_and_evaluate_on_real_hierarcaps_images(tmp_path, recipe):
    res = hierarcaps_smoke(HIERARCAPS, tmp_path / recipe, recipe=recipe, steps=3, n=48)
    assert res["steps"] == 3 and len(res["losses"]) == 3 and all(math.isfinite(l) for l in res["losses"])
    m = res["metrics"]
    for key in ("hc_precision", "hc_recall", "d_corr", "pep_unverified_auc"):
        assert math.isfinite(m[key]), key
    assert 0 <= m["hc_precision"] <= 1 and -1 <= m["d_corr"] <= 1 and m["d_corr_chance"] == 0.0


def test_refuses_recipes_that_need_world_only_fields(tmp_path):
    with pytest.raises(ValueError, match="negatives"):
        hierarcaps_smoke(HIERARCAPS, tmp_path / "x", recipe="negclip")
