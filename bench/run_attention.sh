#!/usr/bin/env bash
# Fused attention on the GPU: crescent's T.attention (bench/attention_bench.lua) and PyTorch's
# scaled_dot_product_attention (bench/torch_attention.py), one after the other on the same GPU.
#   bench/run_attention.sh [reps=30] [fwd|bwd]   (CRESCENT=path to the crescent binary, default build/crescent)
# bwd: the backward on GPT-2 124M's training shape (8 x 12 heads x 512 x 64, causal).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
"${CRESCENT:-build/crescent}" bench/attention_bench.lua "${1:-30}" "${2:-fwd}"
"${PYTHON:-python3}" bench/torch_attention.py "${2:-fwd}"
