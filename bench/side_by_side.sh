#!/usr/bin/env bash
# Runs a crescent benchmark and its PyTorch twin with the same arguments and prints both tables,
# the date / CPU / threads, and a comparison of their RESULT lines (ratio = crescent median /
# torch median; below 1: crescent is faster).
#   bench/side_by_side.sh bench/<case>.lua bench/<twin>.py [args...]      (from the repo root)
set -euo pipefail
lua="$1" py="$2"
shift 2
build="${CRESCENT_BUILD_DIR:-build}"

cres=$("$build/crescent" "$lua" "$@")
torch=$(/usr/bin/python3 "$py" "$@")
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
