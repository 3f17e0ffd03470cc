#!/usr/bin/env bash
# GPU smoke of the real-data path, as one step for a session that has a GPU (issue #11):
# 200 steps of degla on an open_clip ViT-B/32 at batch 256 at PRECISION (default amp_bf16: bf16 autocast; any of
# fp32, bf16, fp16, amp_bf16, amp_fp16 — open_clip's names, `hierbench.models.precision`), streamed from WebDataset shards
# written from the real COCO images of HierarCaps, with hard negatives written once by `hierbench negatives`.
# Prints the precision that ran (config.json), samples/s, peak GPU memory and the loss curve. Random init unless
# INIT=weights.safetensors is set. To compare precisions, run it once per PRECISION with its own OUT.
# Usage: [PRECISION=amp_bf16] tools/gpu_smoke.sh [DATA_DIR (default ../shared/data/hierarcaps)] [OUT (default /tmp/gpu_smoke)]
set -euo pipefail
DATA=${1:-../shared/data/hierarcaps}
OUT=${2:-/tmp/gpu_smoke}
STEPS=${STEPS:-200}
WORKERS=${WORKERS:-8}
MODEL=${MODEL:-ViT-B-32-quickgelu}
PRECISION=${PRECISION:-amp_bf16}
BATCH=${BATCH:-256}   # MODEL=real-tiny BATCH=8 STEPS=2 WORKERS=2 runs the same path on a CPU in seconds
rm -rf "$OUT"; mkdir -p "$OUT/shards"
python - "$DATA" "$OUT" <<'PY'
import sys, webdataset as wds
from pathlib import Path
from hierbench.data.loaders import load_hierarcaps
data, out = Path(sys.argv[1]), Path(sys.argv[2])
items = load_hierarcaps(data / "hierarcaps_test.csv", data / "test_imgs")
per = (len(items) + 3) // 4
for s in range(4):
    with wds.TarWriter(str(out / "shards" / f"shard-{s:03d}.tar")) as w:
        for k, it in enumerate(items[s * per:(s + 1) * per]):
            w.write({"__key__": f"{s:03d}{k:05d}", "jpg": it.image_path.read_bytes(), "txt": it.chain[-1]})
print(f"wrote 4 shards of {len(items)} real COCO images")
PY
SHARDS="$OUT/shards/shard-{000..003}.tar"
hierbench negatives --data "wds:$SHARDS" --out "$OUT/negatives.jsonl" > "$OUT/negatives.log"
tail -n 1 "$OUT/negatives.log"
hierbench train degla --data "wds:$SHARDS" --model "$MODEL" ${INIT:+--init "$INIT"} \
  --negatives "$OUT/negatives.jsonl" --precision "$PRECISION" --steps "$STEPS" --batch-size "$BATCH" --workers "$WORKERS" --log-every "$(( STEPS < 10 ? 1 : 10 ))" \
  --save-every "$STEPS" --out "$OUT/run"
python - "$OUT/run" "$BATCH" <<'PY'
import json, sys
from pathlib import Path
from hierbench.training.trainer import read_metrics
cfg = json.loads((Path(sys.argv[1]) / "config.json").read_text())
print(f"precision: {cfg.get('precision')} ({cfg.get('precision_ran', 'not recorded')}), batch {cfg.get('batch_size')} "
      f"{cfg.get('batch_scope', 'global')}, device {cfg.get('device')}")
rows = read_metrics(sys.argv[1])
t = [r["time"] for r in rows]; s = [r["step"] for r in rows]
rate = (s[-1] - s[0]) * int(sys.argv[2]) / max(t[-1] - t[0], 1e-9)
print(f"samples/s (steps {s[0]}..{s[-1]}): {rate:.0f}; peak GPU memory: {max(r.get('cuda_peak_mb', 0) for r in rows):.0f} MB")
print("loss curve:", " ".join(f"{r['step']}:{r['loss']:.3f}" for r in rows))
PY
