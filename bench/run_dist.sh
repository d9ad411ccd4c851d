#!/usr/bin/env bash
# The several-GPU check of issue 40 in one command, for a machine with N >= 2 GPUs:
#   specs     the distributed specs: one process (launcher, timeouts, a failing rank), every rank
#             of `crescent --nproc N`, and the compiled collectives (simulated ranks, CPU)
#   allreduce bench/run_allreduce.sh: all_reduce bus bandwidth, crescent vs torch vs bare NCCL
#   gpt2      GPT-2 124M data-parallel training on 1 and N GPUs: crescent DDP (eager and
#             compiled) and PyTorch DDP + torch.compile (its processes spawned by the script, no
#             torchrun), then tokens/s and scaling efficiency (N=1: the single-GPU rows only)
#   bench/run_dist.sh [build=build] [N=2]   (PARTS="specs allreduce gpt2" picks parts; each part
#   runs even when another fails; GPT2="gpt2 8 1024 10": config, rows per rank, seq, steps)
# With the build carried to the GPU machine in .device/ (crescent, nccl_allreduce, lib/,
# unpack.sh): bench/run_dist.sh .device
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${1:-build}" n="${2:-2}" py="${PYTHON:-python3}" parts="${PARTS:-specs allreduce gpt2}"
[ -f "$build/unpack.sh" ] && bash "$build/unpack.sh"
[ -d "$build/lib" ] && export LD_LIBRARY_PATH="$PWD/$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
B="$PWD/$build/crescent"
if [ -z "${CRESCENT_NCCL_LIB:-}" ]; then
  CRESCENT_NCCL_LIB=$($py -c "import glob, site; print(next(iter(p for d in site.getsitepackages() for p in glob.glob(d + '/nvidia/**/libnccl.so.2', recursive=True)), ''))")
fi
export CRESCENT_NCCL_LIB NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}" CRESCENT_BIN="$B" CRESCENT_TEST_PYTHON="$py"
export CRESCENT_CACHE_DIR="${CRESCENT_CACHE_DIR:-/tmp/cc_dist}" CRESCENT_DIST_TIMEOUT="${CRESCENT_DIST_TIMEOUT:-120}"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -8

summary() { grep -v '^\[crescent' | grep -A6 '^FAIL\|passed' | cut -c1-400 | tail -30; }
if [[ " $parts " == *" specs "* ]]; then
  echo "== specs: one process"; timeout 300 "$B" tests/lua/run.lua tests/lua/test_distributed.lua 2>&1 | summary
  echo "== specs: --nproc $n"; timeout 400 "$B" --nproc "$n" tests/lua/run.lua tests/lua/test_distributed.lua 2>&1 | summary
  echo "== specs: compiled collectives"; timeout 300 "$B" tests/lua/run.lua tests/lua/test_dist_compiled.lua 2>&1 | summary
fi
if [[ " $parts " == *" allreduce "* ]]; then
  echo "== all_reduce"; timeout 400 bench/run_allreduce.sh "$n" "$build" 2>&1 | tail -60
fi
if [[ " $parts " == *" gpt2 "* ]]; then
  read -r cfg rows seq steps <<< "${GPT2:-gpt2 8 1024 10}"
  out=$(mktemp)
  worlds=1
  [ "$n" -gt 1 ] && worlds="1 $n"
  for w in $worlds; do
    for c in 0 1; do
      echo "== gpt2 crescent world $w compile $c" >&2
      COMPILE=$c timeout 300 "$B" --nproc "$w" bench/ddp_gpt2_bench.lua "$cfg" "$rows" "$seq" "$steps" 2>&1 | grep '^{' | tee -a "$out"
    done
    echo "== gpt2 torch world $w" >&2
    timeout 400 "$py" bench/torch_ddp_gpt2.py "$cfg" "$rows" "$seq" "$steps" "$w" 2>&1 | grep '^{' | tee -a "$out"
  done
  "$py" - "$out" "$n" <<'PY'
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
key = lambda r: (r["side"], r.get("compile", False))
one = {key(r): r["tokens_per_s"] for r in rs if r["world"] == 1}
torch_at = {r["world"]: r["tokens_per_s"] for r in rs if r["side"] == "torch"}
print("| side | compile | GPUs | step ms | tokens/s | scaling efficiency | vs torch DDP + compile |")
print("|---|---|---|---|---|---|---|")
for r in rs:
    eff = r["tokens_per_s"] / (r["world"] * one[key(r)]) if key(r) in one else float("nan")
    vs = r["tokens_per_s"] / torch_at[r["world"]] if r["world"] in torch_at else float("nan")
    print(f"| {r['side']} | {r.get('compile')} | {r['world']} | {r['step_ms']:.1f} | {r['tokens_per_s']:.0f} | "
          f"{eff:.1%} | {vs:.2f}x |")
PY
  rm -f "$out"
fi
