#!/usr/bin/env bash
# crescent eager CPU vs PyTorch 1.13 eager CPU, side by side, same thread count.
#   bench/run_eager.sh [reps]         (default 20; CRESCENT_NUM_THREADS default 2)
# Builds crescent first (scripts/setup.sh, quiet when up to date). Prints both tables and a
# comparison: ratio = crescent median / torch median (below 1: crescent is faster).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CRESCENT_NUM_THREADS="${CRESCENT_NUM_THREADS:-2}"
scripts/setup.sh >/dev/null
bench/side_by_side.sh bench/eager_bench.lua bench/torch_eager.py "${1:-20}"
