"""tools/bf16_step_ablation.py: every configuration and both peers are timed, and the library's paths are put back."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bf16_step_ablation", ROOT / "tools" / "bf16_step_ablation.py")
ablation = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ablation)


def test_the_table_has_every_configuration_and_both_peers(capsys):
    from hierbench.bench import real as B
    from hierbench.models import precision as P

    ablation.main(["--arch", "real-tiny", "--batch", "2", "--rounds", "1", "--steps", "1", "--threads", "1"])
    rows = [l for l in capsys.readouterr().out.splitlines() if l.startswith("| ") and "configuration" not in l]
    assert [r.split(" | ")[0][2:] for r in rows] == [
        *ablation.CONFIGS,
        "open_clip_train fp32",
        "open_clip_train amp_bf16",
    ]
    assert all(float(r.split(" | ")[1]) > 0 for r in rows)
    assert B.training_forward is P.training_forward  # switched per step, put back at the end
