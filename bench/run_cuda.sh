#!/usr/bin/env bash
# CUDA code generation vs PyTorch eager and torch.compile on the GPU, side by side in one run:
# bench/codegen_bench.lua with DEVICE=cuda (crescent eager: single-op generated kernels;
# compiled: fused NVRTC kernels) and bench/torch_cuda.py, then one table of device times: events
# around each call, and (compiled) around 10 calls issued back to back.
#   bench/run_cuda.sh [reps=50]     (CRESCENT=path to the crescent binary, default build/crescent;
#                                    DTYPE=float16 / bfloat16: the workloads' inputs in that dtype;
#                                    JSONL_DIR=dir keeps both sides' per-workload records there)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
reps="${1:-50}"
bin="${CRESCENT:-build/crescent}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Cold compiles start from empty caches on both sides: codegen_bench gives crescent an empty cache
# dir per workload; NVRTC's own cache (CUDA 12.x on: in the driver's ComputeCache, keyed by the
# preprocessed source, so it answers a kernel this machine compiled before in 10-20 ms) is off;
# torch.compile gets fresh inductor and triton cache dirs.
export CUDA_CACHE_DISABLE=1
DEVICE=cuda OUT="$dir/crescent.jsonl" "$bin" bench/codegen_bench.lua "$reps" > /dev/null
TORCHINDUCTOR_CACHE_DIR="$dir/inductor" TRITON_CACHE_DIR="$dir/triton" "${PYTHON:-python3}" bench/torch_cuda.py "$reps" | grep '^{' > "$dir/torch.jsonl"
if [ -n "${JSONL_DIR:-}" ]; then cp "$dir/crescent.jsonl" "$dir/torch.jsonl" "$JSONL_DIR/"; fi
"${PYTHON:-python3}" - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
cr = {r["name"]: r for r in map(json.loads, open(f"{d}/crescent.jsonl"))}
th = {r["name"]: r for r in map(json.loads, open(f"{d}/torch.jsonl"))}
import os
print(f"dtype {os.environ.get('DTYPE', 'float32')}; float32 copy: crescent {cr['copy']['GBps']:.0f} GB/s, torch {th['copy']['GBps']:.0f} GB/s (device time, medians)")
print("| workload | torch eager µs | torch.compile µs | crescent eager µs | crescent compiled µs | GB/s | vs torch.compile | back to back: torch.compile / crescent µs, GB/s, ratio | cold compile ms (crescent / torch) |")
print("|---|---|---|---|---|---|---|---|---|")
for name, c in cr.items():
    if name == "copy" or name not in th:
        continue
    t = th[name]
    tc = t.get("compiled_us")
    g = c.get("compiled_GBps")
    ratio = f"{tc / c['compiled_us']:.2f}x" if tc else "-"
    tb, cb, gb = t.get("compiled_batch_us"), c.get("compiled_batch_us"), c.get("compiled_batch_GBps")
    batch = f"{tb:.1f} / {cb:.1f}, {gb and f'{gb:.0f}' or '-'}, {tb / cb:.2f}x" if tb and cb else "-"
    print(f"| {name} | {t['eager_us']:.1f} | {tc and f'{tc:.1f}' or '-'} | {c['eager_us']:.1f} | {c['compiled_us']:.1f} | "
          f"{g and f'{g:.0f}' or '-'} | {ratio} | {batch} | {c['cold_compile_ms']:.0f} / {t.get('cold_compile_ms', 0):.0f} |")
PY
