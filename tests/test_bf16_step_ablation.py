"""tools/bf16_step_ablation.py: every configuration steps the same model, and each switch reaches the code it names."""
import importlib.util
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("bf16_step_ablation", ROOT / "tools" / "bf16_step_ablation.py")
ablation = importlib.util.module_from_spec(spec); spec.loader.exec_module(ablation)


def test_the_old_text_path_is_the_text_tower_to_float_rounding():
    from hierbench import models as M
    torch.manual_seed(0)
    m = M.create_model("real-tiny")
    ablation.ORIGINAL_TEXT = M.text_pooled_and_projected
    toks = m.tokenize(["a dog", "a small cat on a wooden table next to a red cup"])
    calls = []
    h = m.clip.token_embedding.register_forward_hook(lambda *a: calls.append(1))
    old, _ = ablation.old_text_path(m.clip, toks)
    h.remove()
    assert len(calls) == 2                                   # one lookup per length group: what embed-once removed
    torch.testing.assert_close(old, m.clip.encode_text(toks), atol=1e-5, rtol=1e-4)


def test_the_table_has_every_configuration_and_both_peers(capsys):
    from hierbench import bench_real as B, models as M, precision as P
    ablation.main(["--arch", "real-tiny", "--batch", "2", "--rounds", "1", "--steps", "1", "--threads", "1"])
    rows = [l for l in capsys.readouterr().out.splitlines() if l.startswith("| ") and "configuration" not in l]
    assert [r.split(" | ")[0][2:] for r in rows] == [*ablation.CONFIGS, "open_clip_train fp32", "open_clip_train amp_bf16"]
    assert all(float(r.split(" | ")[1]) > 0 for r in rows)
    # the last configuration run leaves the library's own paths in place
    assert M.text_pooled_and_projected is ablation.ORIGINAL_TEXT and B.training_forward is P.training_forward
