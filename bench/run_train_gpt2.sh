#!/usr/bin/env bash
# Training step (forward + backward + AdamW) of crescent vs PyTorch, side by side: `rounds`
# alternating runs of bench/train_gpt2_bench.lua (one process per MODE of CRESCENT_MODES: eager,
# model, step; "step" also runs a second time on the first's kernel cache, as "step-disk") and
# bench/torch_train_gpt2.py (TORCH_MODES: eager, compile), each reporting the median step of its
# own STEPS; then bench/train_gpt2_table.py's tables (medians over the rounds). Every compiled
# run starts on an empty cache directory (CRESCENT_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR).
#   bench/run_train_gpt2.sh [config=small] [batch=8] [seq=128] [steps=10] [rounds=3]
#   (THREADS=2 by default; DEVICE=cuda, AUTOCAST=bfloat16 on a GPU; CRESCENT=binary; PYTHON=python;
#   FIRST (and FIRST_DISK for step-disk): steps timed from the cold start; TIMEOUT: seconds per process, default 300)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
config="${1:-small}" batch="${2:-8}" seq="${3:-128}" steps="${4:-10}" rounds="${5:-3}"
threads="${THREADS:-2}" bin="${CRESCENT:-build/crescent}" py="${PYTHON:-/usr/bin/python3}"
cmodes="${CRESCENT_MODES:-eager}" tmodes="${TORCH_MODES:-eager}" limit="${TIMEOUT:-300}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
start=$SECONDS
run() {  # run NAME CMD...: one JSON line into $dir/NAME.jsonl; a failure is reported, not fatal
  local name="$1"; shift
  echo "  [$((SECONDS - start)) s] $name ..." >&2
  if ! timeout "$limit" "$@" > "$dir/out" 2> "$dir/err"; then
    echo "  $name failed: $(tail -3 "$dir/err")" >&2
    return 0
  fi
  grep '^{' "$dir/out" | tail -1 >> "$dir/$name.jsonl" || echo "  $name printed no result" >&2
}
for r in $(seq 1 "$rounds"); do
  for mode in $cmodes; do
    cache="$dir/cache-$mode-$r"
    mkdir -p "$cache"
    MODE="$mode" CRESCENT_CACHE_DIR="$cache" CRESCENT_NUM_THREADS="$threads" \
      run "crescent-$mode" "$bin" bench/train_gpt2_bench.lua "$config" "$batch" "$seq" "$steps"
    if [ "$mode" = step ]; then
      MODE=step FIRST="${FIRST_DISK:-${FIRST:-50}}" CRESCENT_CACHE_DIR="$cache" CRESCENT_NUM_THREADS="$threads" \
        run crescent-step-disk "$bin" bench/train_gpt2_bench.lua "$config" "$batch" "$seq" "$steps"
    fi
  done
  for mode in $tmodes; do
    mkdir -p "$dir/inductor-$r"
    MODE="$mode" THREADS="$threads" TORCHINDUCTOR_CACHE_DIR="$dir/inductor-$r" TRITON_CACHE_DIR="$dir/triton-$r" \
      run "torch-$mode" "$py" bench/torch_train_gpt2.py "$config" "$batch" "$seq" "$steps"
  done
  echo "round $r of $rounds done ($((SECONDS - start)) s)" >&2
done
"$py" bench/train_gpt2_table.py "$dir"
