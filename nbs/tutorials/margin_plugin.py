"""A plugin of one's own, as the tutorial "testing your own objective" writes it: a loss term (a hinge on DeGLA's
hard negatives), a recipe that weighs it, and a claim row that asks whether it helps.

`hierbench compare --plugin margin_plugin.py ...` loads it in every process of a job
(nbs/tutorials/testing_your_own_objective.ipynb)."""

import torch
import hierbench
from hierbench.ledger.claims import Claim, register_claim


def margin(inputs, m: float = 0.2):
    """Each image closer to its own caption than to that caption's hard negatives by at least `m` (a hinge on the
    head's similarity; empty negative slots are left out)."""
    v, t, n, ok = inputs["images"], inputs["captions"], inputs["negatives"], inputs["negatives_mask"]
    B, K, D = n.shape
    pos = inputs["similarity"](v, t).diagonal()  # (B,)
    neg = inputs["similarity"](v, n.reshape(B * K, D)).reshape(B, B, K)[torch.arange(B), torch.arange(B)]  # (B, K)
    hinge = torch.relu(m - (pos[:, None] - neg)) * ok
    return hinge.sum() / ok.sum().clamp(min=1)


hierbench.register_term("margin", margin)
hierbench.register_recipe(
    hierbench.get_recipe("degla").replace(
        name="degla-margin",
        summary="DeGLA + a hinge keeping each hard negative 0.2 below the positive",
        weights={"margin": 0.5},
    )
)
register_claim(
    Claim(
        "MINE-1",
        "this tutorial",
        "a margin on DeGLA's hard negatives raises compositional accuracy",
        "degla-margin",
        "degla",
        "comp_acc",
        differs_in=("weights.margin",),
    )
)
