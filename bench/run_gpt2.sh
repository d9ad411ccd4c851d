#!/usr/bin/env bash
# GPT-2-style generation vs PyTorch eager on the CPU, side by side: `rounds` alternating runs of
# bench/gpt2_bench.lua (crescent eager and compiled) and bench/torch_gpt2.py (torch eager), each
# reporting medians of its own repetitions; then the median over the rounds and the ratios.
#   bench/run_gpt2.sh [config=gpt2] [batch=1] [prompt=128] [new=128] [rounds=3] [reps=3]
#                                                                   (THREADS=2 by default)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
config="${1:-gpt2}" batch="${2:-1}" prompt="${3:-128}" new="${4:-128}" rounds="${5:-3}" reps="${6:-3}"
threads="${THREADS:-2}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for r in $(seq 1 "$rounds"); do
  CRESCENT_NUM_THREADS="$threads" build/crescent bench/gpt2_bench.lua "$config" "$batch" "$prompt" "$new" "$reps" >> "$dir/crescent.jsonl"
  THREADS="$threads" /usr/bin/python3 bench/torch_gpt2.py "$config" "$batch" "$prompt" "$new" "$reps" >> "$dir/torch.jsonl"
  echo "round $r of $rounds done" >&2
done
/usr/bin/python3 - "$dir" <<'PY'
import json, statistics, sys
d = sys.argv[1]
cr = [json.loads(l) for l in open(f"{d}/crescent.jsonl")]
th = [json.loads(l) for l in open(f"{d}/torch.jsonl")]
m = lambda rs, k: statistics.median(r[k] for r in rs)
c0 = cr[0]
print(f"config {c0['config']}, batch {c0['batch']}, prompt {c0['prompt']}, new {c0['new']}; medians of {len(cr)} rounds")
print("| | prefill ms | decode tokens/s | vs torch eager |")
print("|---|---|---|---|")
t = m(th, "decode_tps")
print(f"| torch eager | {m(th, 'prefill_ms'):.1f} | {t:.1f} | 1.00x |")
for side in ("eager", "compiled"):
    v = m(cr, f"{side}_decode_tps")
    print(f"| crescent {side} | {m(cr, f'{side}_prefill_ms'):.1f} | {v:.1f} | {v / t:.2f}x |")
print(f"\ncrescent compiled: first run (capture + compile) {m(cr, 'first_compiled_run_ms'):.0f} ms; "
      f"graphs compiled {c0['graphs_compiled']}, recompiles {c0['recompiles']}")
PY
