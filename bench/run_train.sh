#!/usr/bin/env bash
# A training step (GPT forward + backward + AdamW: crescent eager, its module compiled, the whole
# step compiled) and an AdamW step alone, crescent vs PyTorch 1.13 eager on the CPU, side by side: `rounds` alternating runs of bench/train_bench.lua
# and bench/torch_train.py, each reporting medians; then the median over the rounds.
#   bench/run_train.sh [vocab=86] [d=96] [heads=4] [layers=3] [ctx=64] [batch=16] [rounds=3] [reps=30]
#                                                                   (THREADS=2 by default)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
args=("${1:-86}" "${2:-96}" "${3:-4}" "${4:-3}" "${5:-64}" "${6:-16}")
rounds="${7:-3}" reps="${8:-30}" threads="${THREADS:-2}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for r in $(seq 1 "$rounds"); do
  for mode in eager compiled step; do
    CRESCENT_NUM_THREADS="$threads" build/crescent bench/train_bench.lua "${args[@]}" "$reps" "$mode" >> "$dir/$mode.jsonl"
  done
  THREADS="$threads" /usr/bin/python3 bench/torch_train.py "${args[@]}" "$reps" >> "$dir/torch.jsonl"
  echo "round $r of $rounds done" >&2
done
/usr/bin/python3 - "$dir" "${args[*]}" <<'PY'
import json, statistics, sys
d = sys.argv[1]
cr = [json.loads(l) for l in open(f"{d}/eager.jsonl")]
modes = {k: [json.loads(l) for l in open(f"{d}/{k}.jsonl")] for k in ("compiled", "step")}
th = [json.loads(l) for l in open(f"{d}/torch.jsonl")]
m = lambda rs, k: statistics.median(r[k] for r in rs)
print(f"GPT (vocab d heads layers ctx batch) = {sys.argv[2]}, {cr[0]['params']} parameters; medians of {len(cr)} rounds")
print("| | training step ms | tokens/s | vs torch | AdamW step alone (20 x 256x256) ms |")
print("|---|---|---|---|---|")
t = m(th, "step_ms")
print(f"| torch 1.13 eager | {t:.1f} | {m(th, 'tokens_per_s'):.0f} | 1.00x | {m(th, 'adamw_single_ms'):.1f} (foreach: {m(th, 'adamw_foreach_ms'):.1f}) |")
c = m(cr, "step_ms")
print(f"| crescent eager | {c:.1f} | {m(cr, 'tokens_per_s'):.0f} | {t / c:.2f}x | {m(cr, 'adamw_fused_ms'):.1f} (per-tensor: {m(cr, 'adamw_per_tensor_ms'):.1f}) |")
for k, name in (("compiled", "crescent T.compile(model)"), ("step", "crescent T.compile(step)")):
    rs = modes[k]
    s = min(r["step_ms"] for r in rs)
    print(f"| {name} | {m(rs, 'step_ms'):.1f} (best {s:.1f}) | {m(rs, 'tokens_per_s'):.0f} | {t / m(rs, 'step_ms'):.2f}x | |")
PY
