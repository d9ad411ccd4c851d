#!/usr/bin/env bash
# A training step (GPT forward + backward + AdamW: crescent eager, its module compiled, the whole
# step compiled) and an AdamW step alone, crescent vs PyTorch 1.13 eager on the CPU, side by side:
# `rounds` alternating runs of bench/train_bench.lua (MODE eager, compiled, step) and
# bench/torch_train.py, each reporting medians and CPU time per step; then the best (and the
# median) over the rounds.
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
runs = {k: [json.loads(l) for l in open(f"{d}/{k}.jsonl")] for k in ("torch", "eager", "compiled", "step")}
m = lambda rs, k: statistics.median(r[k] for r in rs)
best = lambda rs: min(r["step_ms"] for r in rs)
B, L = (int(x) for x in sys.argv[2].split()[5:3:-1])
print(f"GPT (vocab d heads layers ctx batch) = {sys.argv[2]}, {runs['eager'][0]['params']} parameters; {len(runs['eager'])} rounds")
print("| | training step ms, best of rounds (median) | tokens/s (best) | vs torch eager (best) | CPU ms per step, best (vs torch) | AdamW step alone (20 x 256x256) ms |")
print("|---|---|---|---|---|---|")
t = best(runs["torch"])
th = runs["torch"]
tc = min(r["step_cpu_ms"] for r in th)
print(f"| torch 1.13 eager | {t:.1f} ({m(th, 'step_ms'):.1f}) | {B * L / t * 1e3:.0f} | 1.00x | {tc:.1f} (1.00x) | {m(th, 'adamw_single_ms'):.1f} (foreach: {m(th, 'adamw_foreach_ms'):.1f}) |")
for k, name in (("eager", "crescent eager"), ("compiled", "crescent T.compile(model)"), ("step", "crescent T.compile(step)")):
    rs = runs[k]
    c, cc = best(rs), min(r["step_cpu_ms"] for r in rs)
    adamw = f"{m(rs, 'adamw_fused_ms'):.1f} (per-tensor: {m(rs, 'adamw_per_tensor_ms'):.1f})" if k == "eager" else ""
    print(f"| {name} | {c:.1f} ({m(rs, 'step_ms'):.1f}) | {B * L / c * 1e3:.0f} | {t / c:.2f}x | {cc:.1f} ({tc / cc:.2f}x) | {adamw} |")
PY
