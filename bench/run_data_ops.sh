#!/usr/bin/env bash
# crescent's data ops vs PyTorch 1.13 on 16M-element tensors, eager CPU, same thread count.
#   bench/run_data_ops.sh [reps]       (default 5; CRESCENT_NUM_THREADS default 2)
# Prints both tables and a comparison: ratio = crescent median / torch median (below 1: crescent
# is faster).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CRESCENT_NUM_THREADS="${CRESCENT_NUM_THREADS:-2}"
bench/side_by_side.sh bench/data_ops_bench.lua bench/torch_data_ops.py "${1:-5}"
