#!/usr/bin/env bash
# Issue 34's GPU training target in one command: GPT-2 124M, batch 8 x 512, a training step
# (forward + backward + AdamW) of crescent eager vs PyTorch eager, float32 then bfloat16 autocast,
# tokens/s and reserved device memory (bench/run_train_gpt2.sh's tables, one per dtype).
#   bench/run_train_gpt2_cuda.sh [steps=10] [rounds=2]   (CRESCENT=binary, PYTHON=python as there)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
steps="${1:-10}" rounds="${2:-2}"
for ac in "" bfloat16; do
  echo "== gpt2 8 x 512, autocast ${ac:-none}"
  DEVICE=cuda AUTOCAST="$ac" WARM="${WARM:-3}" bench/run_train_gpt2.sh gpt2 8 512 "$steps" "$rounds"
done
