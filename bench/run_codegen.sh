#!/usr/bin/env bash
# CPU code generation vs PyTorch eager, side by side: `rounds` alternating rounds of
# bench/codegen_bench.lua (crescent eager and compiled) and bench/torch_cpu.py (torch eager), then
# per workload the median over the rounds of each round's median, and the speed-up
# torch eager / crescent compiled with its geomean. The machine is shared and noisy: alternating
# rounds keep both sides under the same conditions.
#   bench/run_codegen.sh [rounds=3] [reps=50]          (THREADS=2 by default)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds="${1:-3}"
reps="${2:-50}"
threads="${THREADS:-2}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for r in $(seq 1 "$rounds"); do
  CRESCENT_NUM_THREADS="$threads" OUT="$dir/crescent.$r.jsonl" build/crescent bench/codegen_bench.lua "$reps" > /dev/null
  THREADS="$threads" COMPILE=0 /usr/bin/python3 bench/torch_cpu.py "$reps" | grep '^{' > "$dir/torch.$r.jsonl"
  echo "round $r of $rounds done" >&2
done
/usr/bin/python3 - "$dir" "$rounds" <<'EOF'
import glob, json, math, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
def rows(side):
    out = {}
    for f in sorted(glob.glob(f"{d}/{side}.*.jsonl")):
        for line in open(f):
            r = json.loads(line)
            if "name" in r and "eager_us" in r:
                out.setdefault(r["name"], []).append(r)
    return out
cr, th = rows("crescent"), rows("torch")
med = lambda rs, k: statistics.median(r[k] for r in rs if r.get(k) is not None)
copy_cr, copy_th = med(cr["copy"], "GBps"), med(th["copy"], "GBps")
print(f"copy bandwidth (2 x bytes / time): crescent {copy_cr:.1f} GB/s, torch {copy_th:.1f} GB/s; "
      f"medians of {rounds} rounds")
print("| workload | torch eager µs | crescent eager µs | crescent compiled µs | GB/s | % of copy | "
      "% of same-size copy | speed-up vs torch eager | cold compile ms | disk-cache compile ms |")
print("|---|---|---|---|---|---|---|---|---|---|")
logs = []
for name, rs in cr.items():
    if name == "copy" or name not in th:
        continue
    t, e, c = med(th[name], "eager_us"), med(rs, "eager_us"), med(rs, "compiled_us")
    gbps = [r["compiled_GBps"] for r in rs if r.get("compiled_GBps")]
    g = statistics.median(gbps) if gbps else None
    same = [r["same_copy_fraction"] for r in rs if r.get("same_copy_fraction")]
    logs.append(math.log(t / c))
    print(f"| {name} | {t:.0f} | {e:.0f} | {c:.0f} | {g and f'{g:.1f}' or '-'} | "
          f"{g and f'{100 * g / copy_cr:.0f}' or '-'} | {same and f'{100 * statistics.median(same):.0f}' or '-'} | "
          f"{t / c:.2f} | {med(rs, 'cold_compile_ms'):.0f} | "
          f"{med(rs, 'disk_compile_ms'):.1f} |")
print(f"\ngeomean speed-up of crescent compiled over torch eager: {math.exp(sum(logs) / len(logs)):.2f} "
      f"({len(logs)} workloads)")
EOF
