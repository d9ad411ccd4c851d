#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/) with clang in build-fuzz/ (ASan + UBSan + coverage)
# and runs each over its seed corpus: the safetensors reader, the .npy reader and the Lua
# boundary of the op registry. A finding stops the target and leaves the input in
# build-fuzz/artifacts/ (rerun it: build-fuzz/tests/fuzz/fuzz_<target> FILE).
#   scripts/fuzz.sh [--runs N] [--build-only] [target...]     targets: safetensors npy ops
# Environment: CRESCENT_FUZZ_DIR (default build-fuzz), CRESCENT_JOBS (ninja -j), CXX (clang++).
# Not part of scripts/test.sh: CI builds with gcc only; the regressions found here are ordinary
# tests there (tests/cpp/test_io.cpp, tests/cpp/test_resources.cpp, tests/lua/test_boundary.lua).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

runs=1000000
build_only=0
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) runs="$2"; shift ;;
    --build-only) build_only=1 ;;
    safetensors|npy|ops) targets+=("$1") ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (expected --runs N, --build-only, safetensors, npy, ops)" >&2; exit 2 ;;
  esac
  shift
done
[[ ${#targets[@]} -gt 0 ]] || targets=(safetensors npy ops)
dir="${CRESCENT_FUZZ_DIR:-build-fuzz}"

# ---- build ----------------------------------------------------------------------------------
cxx="${CXX:-$(command -v clang++-14 || command -v clang++ || true)}"
if [[ -z "$cxx" || "$("$cxx" --version)" != *clang* ]]; then
  echo "fuzz.sh: needs clang with libFuzzer (Debian: apt-get install clang-14)" >&2
  exit 1
fi
cc="${cxx/clang++/clang}"
if [[ ! -f "$dir/build.ninja" ]]; then
  CC="$cc" CXX="$cxx" cmake -S . -B "$dir" -G Ninja -DCRESCENT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log" >&2; exit 1; }
fi
jobs=()
[[ -n "${CRESCENT_JOBS:-}" ]] && jobs=(-j "$CRESCENT_JOBS")
ninja -C "$dir" --quiet "${jobs[@]}"
[[ $build_only -eq 0 ]] || exit 0

# ---- seeds ----------------------------------------------------------------------------------
# (leak checking off: the seed writer is a plain script run of the instrumented executable)
rm -rf "$dir/seeds"
ASAN_OPTIONS=detect_leaks=0 "$dir/crescent" tests/fuzz/seeds.lua "$dir/seeds"
mkdir -p "$dir/artifacts"

# ---- run ------------------------------------------------------------------------------------
# Allocations above 256 MiB fail (a clean "out of memory" error, allocator_may_return_null) instead
# of filling the machine: the op target asks for huge tensors on purpose. fuzz_ops leaves leak
# checking to the exit (its VM is closed then): tensors held by Lua's heap are invisible to
# LeakSanitizer between inputs, so the per-input check would report them.
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:max_allocation_size_mb=256:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
status=0
for t in "${targets[@]}"; do
  corpus="$dir/corpus/$t"
  mkdir -p "$corpus"
  extra=(-max_len=4096)
  [[ $t == ops ]] && extra=(-max_len=256 -detect_leaks=0)
  echo "== fuzz_$t: $runs runs"
  if ! "$dir/tests/fuzz/fuzz_$t" -runs="$runs" -timeout=60 -rss_limit_mb=4096 -malloc_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$dir/artifacts/$t-" "${extra[@]}" "$corpus" "$dir/seeds/$t" \
       >"$dir/fuzz_$t.log" 2>&1; then
    tail -60 "$dir/fuzz_$t.log" >&2
    echo "fuzz.sh: fuzz_$t found a problem (log: $dir/fuzz_$t.log)" >&2
    status=1
    continue
  fi
  grep -E '^stat::number_of_executed_units|^Done' "$dir/fuzz_$t.log" || true
done
exit $status
