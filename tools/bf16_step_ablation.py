#!/usr/bin/env python3
"""Where a CPU training step spends the time bf16 should save: hierbench's clip step on a real tower at fp32 and at
amp_bf16, with its two CPU 16-bit speed paths switched on in turn, against open_clip_train's own step on the same
weights, batch and threads.

    HIERBENCH_DATA_ROOT=../shared/data .venv/bin/python tools/bf16_step_ablation.py            # ViT-B-32, batch 16: ≈ 3
    min
    .venv/bin/python tools/bf16_step_ablation.py --arch world-tiny --batch 64 --rounds 5         # the world's model
    .venv/bin/python tools/bf16_step_ablation.py --arch real-tiny --batch 4 --rounds 1 --steps 1  # plumbing

The two paths, both taken only when a CPU trains at 16 bits:
  patch-matmul a ViT's patch convolution trains as a matmul (`hierbench.models.precision.PatchEmbedding`)
  math-attn    `hierbench.models.precision.training_forward` takes the math kernel of `scaled_dot_product_attention`

Every configuration steps one model with one optimizer (the paths are switched between steps), rounds are
interleaved (configuration 1, 2, ..., open_clip_train, then again), and the table gives the median seconds per step
over rounds. The weights keep training from round to round: the step's cost does not depend on their values.
A diagnostic that prints a table; nothing in the library reads it."""

import argparse
import copy
import statistics
import sys
import tempfile
from pathlib import Path

import torch

CONFIGS = {  # name: (precision, patch-matmul, math-attn)
    "fp32": ("fp32", False, False),
    "amp_bf16, neither path": ("amp_bf16", False, False),
    "amp_bf16, + patch-matmul": ("amp_bf16", True, False),
    "amp_bf16, + math-attn (now)": ("amp_bf16", True, True),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="ViT-B-32")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4, help="timed steps per configuration and round")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from hierbench.bench import real as B
    from hierbench.models import precision as P
    from hierbench.models.family import create_model
    from hierbench.models.precision import PatchEmbedding

    torch.manual_seed(0)
    ref = create_model(args.arch)
    state = copy.deepcopy(ref.state_dict())
    with tempfile.TemporaryDirectory() as d:
        images, caps = B._real_train_batch(args.batch, int(ref.image_size), ref.image_mean, ref.image_std, Path(d))
    hb = B._hierbench_real_setup(args.arch, images, caps, "fp32", "cpu", state)
    conv = hb["model"].clip.visual.conv1
    patchable = type(conv) is PatchEmbedding  # a ViT; a ResNet tower has no patch convolution to switch
    oc = {
        p: B.open_clip_train_stepper(copy.deepcopy(ref.clip), images, ref.tokenize(caps), p, "cpu")
        for p in ("fp32", "amp_bf16")
    }
    del ref

    def step(name):
        precision, patch, math_attn = CONFIGS[name]
        if patchable:
            conv.__class__ = PatchEmbedding if patch else torch.nn.Conv2d
        B.training_forward = P.training_forward if math_attn else P.autocast
        hb["cfg"].precision = precision
        return B.time_train_step(hb, B.recipe_forward(hb))["total"]

    times = {name: [] for name in [*CONFIGS, "open_clip_train fp32", "open_clip_train amp_bf16"]}
    try:
        for name in CONFIGS:
            step(name)  # warm-up: AdamW state, allocator, autograd caches
        for run in oc.values():
            run(1)
        for r in range(args.rounds):
            for name in CONFIGS:
                times[name].append(sum(step(name) for _ in range(args.steps)) / args.steps)
            for p, run in oc.items():
                times[f"open_clip_train {p}"].append(run(args.steps))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    finally:  # the library's own paths back, whatever happened
        B.training_forward = P.training_forward
        if patchable:
            conv.__class__ = PatchEmbedding
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"{args.arch}, batch {args.batch}, {args.threads} thread(s), median of {args.rounds} round(s) of {args.steps} "
        "step(s)"
    )
    print("| configuration | s/step | samples/s | vs open_clip_train, same precision | vs hierbench fp32 |")
    print("|---|---|---|---|---|")
    for k, t in med.items():
        peer = med["open_clip_train fp32" if "fp32" in k else "open_clip_train amp_bf16"]
        print(f"| {k} | {t:.3f} | {args.batch / t:.1f} | {peer / t:.2f} | {med['fp32'] / t:.2f} |")


if __name__ == "__main__":
    main()
