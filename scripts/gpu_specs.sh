#!/usr/bin/env bash
# Every CUDA test on the GPU machine in one call, several processes at once (the machine has 16
# cores; one GPU takes them all): crescent_tests "[cuda]", the Lua spec files that touch CUDA, and
# seeds of the compile and gradient fuzzers on CUDA. One line per file or seed; outputs in $OUT.
#   scripts/gpu_specs.sh                 (binaries from .device/, docs/gpu-machine.md)
#   FILES="test_cuda test_gpt2" JOBS=6 BUDGET=540 FUZZ_SEEDS="7109 7110" GRAD_SEEDS="9003" scripts/gpu_specs.sh
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
lib=/tmp/crescent_device_lib  # (the carried libraries, docs/gpu-machine.md; outside .device and $OUT)
[ -d $lib ] || [ ! -f .device/lib.tar.gz ] || { mkdir -p $lib && tar xzf .device/lib.tar.gz -C $lib --strip-components=1; }
export LD_LIBRARY_PATH=$lib CRESCENT_TEST_PYTHON=$(command -v python3) CRESCENT_BIN=.device/crescent
out=${OUT:-/tmp/gpu_specs}
mkdir -p "$out"
limit=${BUDGET:-540}
files=${FILES:-$(grep -l cuda tests/lua/test_*.lua | xargs -n1 basename | sed 's/\.lua$//' | grep -v test_compile_fuzz)}
jobs=()
for f in $files; do jobs+=("spec $f"); done
for s in ${FUZZ_SEEDS:-}; do jobs+=("fuzz $s"); done
for s in ${GRAD_SEEDS:-}; do jobs+=("grad $s"); done
one() {
  local kind=$1 name=$2 start=$SECONDS log rc
  case $kind in
    spec) log=$out/$name.txt; timeout "$limit" .device/crescent tests/lua/run.lua "tests/lua/$name.lua" > "$log" 2>&1 ;;
    fuzz) log=$out/fuzz_$name.txt; CRESCENT_FUZZ_DEVICE=cuda CRESCENT_FUZZ_SEED=$name CRESCENT_FUZZ_PROGRAMS=${PROGRAMS:-150} \
            timeout "$limit" .device/crescent tests/lua/run.lua tests/lua/test_compile_fuzz.lua > "$log" 2>&1 ;;
    grad) log=$out/grad_$name.txt; CRESCENT_FUZZ_DEVICE=cuda CRESCENT_GRAD_FUZZ_SEED=$name CRESCENT_GRAD_FUZZ_PROGRAMS=${PROGRAMS:-100} \
            timeout "$limit" .device/crescent tests/lua/run.lua tests/lua/test_compile_grad_fuzz.lua > "$log" 2>&1 ;;
  esac
  rc=$?
  echo "$kind $name rc=$rc $((SECONDS - start))s: $(tail -1 "$log")"
}
export -f one
export out limit
if [ -x .device/crescent_tests ]; then
  (timeout "$limit" .device/crescent_tests "[cuda]" > "$out/cpp_cuda.txt" 2>&1
   echo "crescent_tests [cuda] rc=$?: $(grep -E 'passed|failed' "$out/cpp_cuda.txt" | tail -1)") &
fi
printf '%s\n' "${jobs[@]}" | xargs -P "${JOBS:-6}" -I{} bash -c 'one {}'
wait
grep -l "^FAIL" "$out"/*.txt 2>/dev/null | sed 's/^/failures in /'
