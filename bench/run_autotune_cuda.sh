#!/usr/bin/env bash
# mode = "max-autotune" on CUDA (issue 39), side by side with torch.compile in one run:
# bench/autotune_bench.lua with DEVICE=cuda (crescent default vs max-autotune, each from a cold
# cache directory, tuned with a 20 s budget) and bench/torch_autotune.py (torch.compile default
# vs mode="max-autotune"), then one table of device times (medians) and GB/s.
#   bench/run_autotune_cuda.sh [rounds=5] [reps=50]   (CRESCENT=binary, default build/crescent;
#     WORKLOADS=comma list, default the memory-bound ones; DTYPE=float16 / bfloat16 inputs;
#     NO_TORCH=1 skips the torch side)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds="${1:-5}"
reps="${2:-50}"
bin="${CRESCENT:-build/crescent}"
work="${WORKLOADS:-pw_chain,gelu,add_mul_sum,row_sum,bias_relu,softmax,layernorm}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export CUDA_CACHE_DISABLE=1
DEVICE=cuda ONLY="$work" OUT="$dir/crescent.jsonl" "$bin" bench/autotune_bench.lua "$rounds" "$reps"
touch "$dir/torch.jsonl"
if [ -z "${NO_TORCH:-}" ]; then
  TORCHINDUCTOR_CACHE_DIR="$dir/inductor" TRITON_CACHE_DIR="$dir/triton" "${PYTHON:-python3}" bench/torch_autotune.py "$reps" "$work" \
    | grep '^{' > "$dir/torch.jsonl" || echo "(the torch side failed: see above)"
fi
"${PYTHON:-python3}" - "$dir" <<'PY'
import json, os, sys
d = sys.argv[1]
cr = [json.loads(l) for l in open(f"{d}/crescent.jsonl")]
th = {r["name"]: r for r in map(json.loads, open(f"{d}/torch.jsonl"))}
gb = lambda b, us: f"{b / us / 1e3:.0f}" if b and us else "-"
f1 = lambda v: f"{v:.1f}" if v else "-"
print(f"\ndtype {os.environ.get('DTYPE', 'float32')}; device time per call, µs (medians); GB/s of the faster of each side")
print("| workload | crescent default | crescent max-autotune | speed-up | GB/s | tuning ms | torch.compile | torch max-autotune | GB/s | crescent max-autotune vs torch max-autotune |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for c in cr:
    t = th.get(c["name"], {})
    tu, tm = t.get("default_us"), t.get("max-autotune_us")
    vs = f"{tm / c['tuned_us']:.2f}x" if tm else "-"
    print(f"| {c['name']} | {c['default_us']:.1f} | {c['tuned_us']:.1f} | {c['default_us'] / c['tuned_us']:.2f}x | {gb(c['bytes'], c['tuned_us'])} | "
          f"{c['tuning_ms']:.0f} | {f1(tu)} | {f1(tm)} | {gb(c['bytes'], tm)} | {vs} |")
PY
