#!/usr/bin/env bash
# Fused GEMM epilogues before / after: `rounds` alternating rounds of bench/epilogue_bench.lua
# with two crescent binaries, then per workload the best round of each, wall and CPU time (the
# machine is shared).
#   bench/run_epilogue.sh BEFORE_BIN AFTER_BIN [rounds=5] [reps=30]      (THREADS=2 by default)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
before="$1" after="$2" rounds="${3:-5}" reps="${4:-30}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for r in $(seq 1 "$rounds"); do
  for side in before after; do
    CRESCENT_NUM_THREADS="${THREADS:-2}" "${!side}" bench/epilogue_bench.lua "$reps" | grep '^{' > "$dir/$side.$r.jsonl"
  done
  echo "round $r of $rounds done" >&2
done
/usr/bin/python3 - "$dir" <<'PY'
import glob, json, sys
d = sys.argv[1]
best = {}
for side in ("before", "after"):
    for f in glob.glob(f"{d}/{side}.*.jsonl"):
        for line in open(f):
            r = json.loads(line)
            for m in ("compiled_us", "cpu_us"):
                k = (r["name"], side, m)
                best[k] = min(best.get(k, float("inf")), r[m])
print("| workload | before µs (CPU µs) | after µs (CPU µs) | speed-up (CPU time) |\n|---|---|---|---|")
for name in sorted({k[0] for k in best}):
    b, a = best[(name, "before", "compiled_us")], best[(name, "after", "compiled_us")]
    bc, ac = best[(name, "before", "cpu_us")], best[(name, "after", "cpu_us")]
    print(f"| {name} | {b:.0f} ({bc:.0f}) | {a:.0f} ({ac:.0f}) | {b / a:.2f}x ({bc / ac:.2f}x) |")
PY
