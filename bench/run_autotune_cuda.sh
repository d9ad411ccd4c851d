#!/usr/bin/env bash
# mode = "max-autotune" on CUDA (issue 39), side by side with torch.compile in one run, per dtype:
# bench/autotune_bench.lua with DEVICE=cuda (crescent default vs max-autotune, each from a cold
# cache directory, tuned with a 20 s budget) and bench/torch_autotune.py (torch.compile default
# vs mode="max-autotune", timed as shared/anchors/ times it), then one table of device times.
#   bench/run_autotune_cuda.sh [rounds=3] [reps=50]   (CRESCENT=binary, default build/crescent;
#     WORKLOADS=float32 workloads, BF16=bfloat16 workloads (comma lists; empty: none);
#     CAP=seconds a torch compile may take (default 90); NO_TORCH=1 skips the torch side)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds="${1:-3}"
reps="${2:-50}"
bin="${CRESCENT:-build/crescent}"
py="${PYTHON:-python3}"
declare -A work=(
  [float32]="${WORKLOADS-pw_chain,gelu,row_sum,softmax,layernorm,sum_all,row_sum_long,mlp,attention}"
  [bfloat16]="${BF16-mlp,attention}"
)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export CUDA_CACHE_DISABLE=1
start=$SECONDS
for dt in float32 bfloat16; do
  [ -n "${work[$dt]}" ] || continue
  echo "[run_autotune_cuda $((SECONDS - start)) s] crescent, $dt: ${work[$dt]}" >&2
  DTYPE=$dt DEVICE=cuda ONLY="${work[$dt]}" OUT="$dir/crescent.$dt.jsonl" "$bin" bench/autotune_bench.lua "$rounds" "$reps" >&2
  touch "$dir/torch.$dt.jsonl"
  if [ -z "${NO_TORCH:-}" ]; then
    echo "[run_autotune_cuda $((SECONDS - start)) s] torch.compile, $dt" >&2
    DTYPE=$dt TORCHINDUCTOR_CACHE_DIR="$dir/inductor" TRITON_CACHE_DIR="$dir/triton" "$py" bench/torch_autotune.py "${work[$dt]}" \
      | grep '^{' > "$dir/torch.$dt.jsonl" || echo "(the torch side failed: see above)" >&2
  fi
done
echo "[run_autotune_cuda $((SECONDS - start)) s] done" >&2
"$py" - "$dir" <<'PY'
import glob, json, os, sys
d = sys.argv[1]
f1 = lambda v: f"{v:.1f}" if v else "-"
gb = lambda b, us: f"{b / us / 1e3:.0f}" if b and us else "-"
x = lambda a, b: f"{a / b:.2f}x" if a and b else "-"
print("\ndevice time per call, µs (crescent: T.bench medians, best of the rounds; torch: do_bench medians); "
      "GB/s of crescent max-autotune; ratios: torch time / crescent max-autotune time")
print("| workload | dtype | crescent default | crescent max-autotune | torch.compile | torch max-autotune | GB/s | "
      "vs torch.compile | vs torch max-autotune | crescent tuning ms | torch max-autotune compile s |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for dt in ("float32", "bfloat16"):
    if not os.path.exists(f"{d}/crescent.{dt}.jsonl"):
        continue
    th = {r["name"]: r for r in map(json.loads, open(f"{d}/torch.{dt}.jsonl"))}
    for c in map(json.loads, open(f"{d}/crescent.{dt}.jsonl")):
        t = th.get(c["name"], {})
        tu, tm = t.get("default_us"), t.get("max-autotune_us")
        cs = t.get("max-autotune_compile_ms")
        print(f"| {c['name']} | {dt} | {c['default_us']:.1f} | {c['tuned_us']:.1f} | {f1(tu)} | {f1(tm)} | "
              f"{gb(c['bytes'], c['tuned_us'])} | {x(tu, c['tuned_us'])} | {x(tm, c['tuned_us'])} | {c['tuning_ms']:.0f} | "
              f"{f'{cs / 1e3:.1f}' if cs else t.get('max-autotune_error', '-')} |")
PY
