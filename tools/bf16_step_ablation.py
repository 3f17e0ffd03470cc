#!/usr/bin/env python3
"""Where a CPU training step spends the time bf16 should save: hierbench's clip step on a real tower, with each of
its three CPU speed paths switched on in turn, against open_clip_train's own step on the same weights, batch and
threads.

    HIERBENCH_DATA_ROOT=../shared/data .venv/bin/python tools/bf16_step_ablation.py            # ViT-B-32, batch 16: ≈ 6 min
    .venv/bin/python tools/bf16_step_ablation.py --arch world-tiny --batch 64 --rounds 5         # the world's model
    .venv/bin/python tools/bf16_step_ablation.py --arch real-tiny --batch 4 --rounds 1 --steps 1  # plumbing

The three paths (`hierbench.models`, `hierbench.precision`):
  embed-once   the bucketed text tower looks its tokens up once (one dense `(vocab, width)` gradient, not one a group)
  patch-matmul a ViT's patch convolution trains as a matmul at 16 bits on a CPU (`PatchEmbedding`)
  math-attn    `training_forward` takes the math kernel of `scaled_dot_product_attention` at 16 bits on a CPU

Each configuration switches paths on one model and one optimizer, so every configuration steps the same tensors;
rounds are interleaved (configuration 1, 2, ..., open_clip_train, then again) and the table gives the median seconds
per step over rounds. The weights keep training from round to round: the step's cost does not depend on their values.
A diagnostic that prints a table; nothing in the library reads it."""
import argparse, copy, statistics, sys, tempfile
from pathlib import Path

import torch


def old_text_path(clip, tokens):
    "The bucketed text tower as it was before embed-once: one embedding lookup per length group."
    from hierbench import models as M
    from open_clip.transformer import text_global_pool
    groups = M._bucketed(clip, tokens)
    if groups is None: return ORIGINAL_TEXT(clip, tokens)
    cast_dtype = clip.transformer.get_cast_dtype()
    parts, order = [], []
    for rows, L in groups:
        tk = tokens[rows, :L]
        x = clip.token_embedding(tk).to(cast_dtype) + clip.positional_embedding[:L].to(cast_dtype)
        x = clip.ln_final(clip.transformer(x, attn_mask=clip.attn_mask[:L, :L]))
        parts.append(text_global_pool(x, tk, clip.text_pool_type)); order.append(rows)
    pooled = torch.cat(parts)[torch.argsort(torch.cat(order))]
    return M._project_text(clip.text_projection, pooled), pooled


ORIGINAL_TEXT = None
CONFIGS = {   # name: (precision, embed-once, patch-matmul, math-attn)
    "fp32, as before": ("fp32", False, False, False),
    "fp32, embed-once": ("fp32", True, False, False),
    "amp_bf16, as before": ("amp_bf16", False, False, False),
    "amp_bf16, + embed-once": ("amp_bf16", True, False, False),
    "amp_bf16, + patch-matmul": ("amp_bf16", True, True, False),
    "amp_bf16, + math-attn (now)": ("amp_bf16", True, True, True),
}


def main(argv=None):
    global ORIGINAL_TEXT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="ViT-B-32"); ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2); ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4, help="timed steps per configuration and round")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from hierbench import bench_real as B, models as M, precision as P
    from hierbench.models import PatchEmbedding, create_model
    ORIGINAL_TEXT = M.text_pooled_and_projected
    torch.manual_seed(0)
    ref = create_model(args.arch)
    state = copy.deepcopy(ref.state_dict())
    with tempfile.TemporaryDirectory() as d:
        images, caps = B._real_train_batch(args.batch, int(ref.image_size), ref.image_mean, ref.image_std, Path(d))
    hb = B._hierbench_real_setup(args.arch, images, caps, "fp32", "cpu", state)
    conv = hb["model"].clip.visual.conv1
    patchable = type(conv) is PatchEmbedding              # a ViT; a ResNet tower has no patch convolution to switch
    oc = {p: B.open_clip_train_stepper(copy.deepcopy(ref.clip), images, ref.tokenize(caps), p, "cpu")
          for p in ("fp32", "amp_bf16")}
    del ref

    def step(name):
        precision, embed_once, patch, math_attn = CONFIGS[name]
        M.text_pooled_and_projected = ORIGINAL_TEXT if embed_once else old_text_path
        if patchable: conv.__class__ = PatchEmbedding if patch else torch.nn.Conv2d
        B.training_forward = P.training_forward if math_attn else P.autocast
        hb["cfg"].precision = precision
        return B._train_step(hb, B.recipe_forward(hb))["total"]

    times = {name: [] for name in [*CONFIGS, "open_clip_train fp32", "open_clip_train amp_bf16"]}
    try:
        for name in CONFIGS: step(name)                   # warm-up: AdamW state, allocator, autograd caches
        for run in oc.values(): run(1)
        for r in range(args.rounds):
            for name in CONFIGS: times[name].append(sum(step(name) for _ in range(args.steps)) / args.steps)
            for p, run in oc.items(): times[f"open_clip_train {p}"].append(run(args.steps))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    finally:                                              # the library's own paths back, whatever happened
        M.text_pooled_and_projected, B.training_forward = ORIGINAL_TEXT, P.training_forward
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.arch}, batch {args.batch}, {args.threads} thread(s), median of {args.rounds} round(s) of {args.steps} step(s)")
    print("| configuration | s/step | samples/s | vs open_clip_train, same precision | vs hierbench fp32 now |")
    print("|---|---|---|---|---|")
    for k, t in med.items():
        p = "fp32" if "fp32" in k else "amp_bf16"
        peer = med[f"open_clip_train {p}"]
        print(f"| {k} | {t:.3f} | {args.batch / t:.1f} | {peer / t:.2f} | {med['fp32, embed-once'] / t:.2f} |")


if __name__ == "__main__":
    main()
