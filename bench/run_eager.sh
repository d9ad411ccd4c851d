#!/usr/bin/env bash
# crescent eager CPU vs PyTorch 1.13 eager CPU, side by side, same thread count.
#   bench/run_eager.sh [reps]         (default 20; CRESCENT_NUM_THREADS default 2)
# Builds crescent first (scripts/setup.sh, quiet when up to date). Prints both tables and a
# comparison: ratio = crescent median / torch median (below 1: crescent is faster).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
reps="${1:-20}"
export CRESCENT_NUM_THREADS="${CRESCENT_NUM_THREADS:-2}"
build="${CRESCENT_BUILD_DIR:-build}"
scripts/setup.sh >/dev/null

cres=$("$build/crescent" bench/eager_bench.lua "$reps")
torch=$(/usr/bin/python3 bench/torch_eager.py "$reps")
grep -v '^RESULT' <<<"$cres"
echo
grep -v '^RESULT' <<<"$torch"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $CRESCENT_NUM_THREADS threads"
awk '
  FNR == 1 { file++ }
  $1 != "RESULT" { next }
  file == 1 { order[++n] = $2; c[$2] = $3 }
  file == 2 { t[$2] = $3 }
  END {
    printf "| %-34s | %14s | %14s | %18s |\n", "case", "crescent (us)", "torch (us)", "crescent / torch"
    printf "|%s|%s|%s|%s|\n", "------------------------------------", "----------------", "----------------", "--------------------"
    for (i = 1; i <= n; i++) {
      k = order[i]; name = k; gsub("_", " ", name)
      if (c[k] == "MISSING") { printf "| %-34s | %14s | %14.2f | %18s |\n", name, "missing", t[k], "-"; continue }
      printf "| %-34s | %14.2f | %14.2f | %18.2f |\n", name, c[k], t[k], c[k] / t[k]
    }
  }' <(echo "$cres") <(echo "$torch")
