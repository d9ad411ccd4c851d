#!/usr/bin/env bash
# Issues 34-35's GPU training targets in one command, bench/run_train_gpt2.sh's tables: GPT-2
# 124M, a training step (forward + backward + AdamW), float32 and bfloat16 autocast:
#   - batch 8 x 1024, crescent eager, T.compile(model), T.compile(step) (cold, then a second
#     process on its kernel cache) vs PyTorch eager and torch.compile(model) (default mode):
#     tokens/s, reserved memory, compile times, the first FIRST steps one by one;
#   - then batch 8 x 512, crescent eager vs PyTorch eager (issue 34's table).
#   bench/run_train_gpt2_cuda.sh [steps=10] [rounds=1]
#   (CRESCENT=binary, PYTHON=python as there; FIRST=50 steps from the cold start; SHORT=1: skip
#   the 8 x 512 tables; TIMEOUT: seconds per process; CONFIG/SEQ: e.g. CONFIG=tiny SEQ=32
#   DEVICE=cpu for a smoke run)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
steps="${1:-10}" rounds="${2:-1}" config="${CONFIG:-gpt2}" seq="${SEQ:-1024}"
export DEVICE="${DEVICE:-cuda}" WARM="${WARM:-3}" FIRST="${FIRST:-50}"
for ac in "" bfloat16; do
  echo "== $config 8 x $seq, autocast ${ac:-none}, eager and compiled"
  AUTOCAST="$ac" CRESCENT_MODES="eager model step" TORCH_MODES="eager compile" \
    bench/run_train_gpt2.sh "$config" 8 "$seq" "$steps" "$rounds" || echo "(no table)"
done
[ "${SHORT:-0}" = 1 ] && exit 0
for ac in "" bfloat16; do
  echo "== $config 8 x $((seq / 2)), autocast ${ac:-none}"
  AUTOCAST="$ac" bench/run_train_gpt2.sh "$config" 8 $((seq / 2)) "$steps" "$rounds" || echo "(no table)"
done
