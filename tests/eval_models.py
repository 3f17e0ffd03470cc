"Tiny table-driven models shared by the evaluation tests (test_benchmarks, test_evaluate)."

import hashlib
import shutil
from pathlib import Path

import torch

from hierbench.evaluation.encoding import _WordHashHead

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
HIERARCAPS = SHARED / "data" / "hierarcaps"


def hierarcaps_sample(folder: Path, n: int) -> tuple[Path, Path]:
    "The first `n` HierarCaps test photos copied into `folder`/imgs, and their rows of its CSV as `folder`/caps.csv."
    import pandas as pd

    df = pd.read_csv(HIERARCAPS / "hierarcaps_test.csv").head(n)
    (folder / "imgs").mkdir()
    for url in df.image_url:
        shutil.copy(HIERARCAPS / "test_imgs" / url.rsplit("/", 1)[-1], folder / "imgs")
    df.to_csv(folder / "caps.csv", index=False)
    return folder / "imgs", folder / "caps.csv"


class TableModel(torch.nn.Module):
    """Texts → fixed vectors from a table (unknown texts: a seeded random vector of the whole string); images are
    pre-embedded (N, D)."""

    def __init__(self, table=None, dim=16, geometry="euclidean"):
        super().__init__()
        self.table, self.dim, self.head = dict(table or {}), dim, _WordHashHead(geometry, 1.0)
        self.image_calls = 0

    def vec(self, t):
        if t not in self.table:
            g = torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little"))
            self.table[t] = torch.nn.functional.normalize(torch.randn(self.dim, generator=g), dim=0)
        return self.table[t]

    def encode_text(self, texts):
        return torch.stack([self.vec(t) for t in texts])

    def encode_image(self, x):
        self.image_calls += len(x)
        return x.flatten(1).float()


def lorentz_chain_table():
    "Two chains along e1 and e2 with norms growing by level; images further out along their chain."
    e = torch.eye(4)
    table, chains, images = {}, [], []
    for j in range(2):
        ch = [f"chain{j} level{l}" for l in range(4)]
        for l, t in enumerate(ch):
            table[t] = e[j] * (0.5 + 0.5 * l)
        chains.append(ch)
        images.append(e[j] * 3.0)
    return table, chains, torch.stack(images)
