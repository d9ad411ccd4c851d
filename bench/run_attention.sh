#!/usr/bin/env bash
# Fused attention on the GPU: crescent's T.attention (bench/attention_bench.lua) and PyTorch's
# scaled_dot_product_attention (bench/torch_attention.py), one after the other on the same GPU.
#   bench/run_attention.sh [reps=30]     (CRESCENT=path to the crescent binary, default build/crescent)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
"${CRESCENT:-build/crescent}" bench/attention_bench.lua "${1:-30}"
"${PYTHON:-python3}" bench/torch_attention.py
