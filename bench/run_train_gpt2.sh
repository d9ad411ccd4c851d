#!/usr/bin/env bash
# Training step (forward + backward + AdamW) vs PyTorch eager, side by side: `rounds` alternating
# runs of bench/train_gpt2_bench.lua and bench/torch_train_gpt2.py, each reporting the median step of its
# own STEPS; then the median over the rounds and the ratio.
#   bench/run_train_gpt2.sh [config=small] [batch=8] [seq=128] [steps=10] [rounds=3]
#   (THREADS=2 by default; DEVICE=cuda, AUTOCAST=bfloat16 on a GPU; CRESCENT=binary; PYTHON=python)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
config="${1:-small}" batch="${2:-8}" seq="${3:-128}" steps="${4:-10}" rounds="${5:-3}"
threads="${THREADS:-2}" bin="${CRESCENT:-build/crescent}" py="${PYTHON:-/usr/bin/python3}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for r in $(seq 1 "$rounds"); do
  CRESCENT_NUM_THREADS="$threads" "$bin" bench/train_gpt2_bench.lua "$config" "$batch" "$seq" "$steps" >> "$dir/crescent.jsonl"
  THREADS="$threads" "$py" bench/torch_train_gpt2.py "$config" "$batch" "$seq" "$steps" >> "$dir/torch.jsonl"
  echo "round $r of $rounds done" >&2
done
"$py" - "$dir" <<'PY'
import json, statistics, sys
d = sys.argv[1]
cr = [json.loads(l) for l in open(f"{d}/crescent.jsonl")]
th = [json.loads(l) for l in open(f"{d}/torch.jsonl")]
m = lambda rs, k: statistics.median(r[k] for r in rs)
c0, t0 = cr[0], th[0]
print(f"config {c0['config']} ({c0['params']} parameters), batch {c0['batch']} x {c0['seq']}, device {c0['device']}, "
      f"autocast {c0['autocast']}; torch {t0['torch']}; medians of {len(cr)} rounds")
print("| | step ms | tokens/s | vs torch eager | reserved MiB | loss first -> last |")
print("|---|---|---|---|---|---|")
t = m(th, "tokens_per_s")
for side, rs in (("torch eager", th), ("crescent eager", cr)):
    peak = f"{m(rs, 'reserved_mib'):.0f}" if "reserved_mib" in rs[0] else "-"
    print(f"| {side} | {m(rs, 'step_ms'):.1f} | {m(rs, 'tokens_per_s'):.0f} | {m(rs, 'tokens_per_s') / t:.2f}x | {peak} | "
          f"{rs[0]['first_loss']:.3f} -> {rs[0]['last_loss']:.3f} |")
if "peak_mib" in th[0]:
    print(f"\ntorch's peak allocated (not reserved): {m(th, 'peak_mib'):.0f} MiB")
PY
