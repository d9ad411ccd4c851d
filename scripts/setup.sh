#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages), configures and builds crescent.
#   scripts/setup.sh [--sanitize] [--build-dir DIR] [--no-build]
# Idempotent: when every package is installed and the build is up to date it prints one line.
# Environment: CRESCENT_BUILD_DIR (default build, or build-asan with --sanitize),
#              CRESCENT_BUILD_TYPE (default Release), CRESCENT_JOBS (ninja -j; default: all cores).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

sanitize=0
build=1
build_dir=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sanitize) sanitize=1 ;;
    --build-dir) build_dir="$2"; shift ;;
    --no-build) build=0 ;;
    -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown argument '$1' (expected --sanitize, --build-dir DIR, --no-build)" >&2; exit 2 ;;
  esac
  shift
done

# ---- 1. Debian packages ------------------------------------------------------------------------
# python3-torch gives the reference values of the tests (/usr/bin/python3 -c 'import torch').
packages=(g++ cmake ninja-build libluajit-5.1-dev libgccjit-12-dev catch2 libopenblas-dev
          libreadline-dev pkg-config python3-torch)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup: installing ${missing[*]}"
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then sudo=(sudo); else
      echo "setup: not root and no sudo: run as root: apt-get update && apt-get install -y ${missing[*]}" >&2
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[[ $build -eq 1 ]] || exit 0

# ---- 2. configure + build ---------------------------------------------------------------------
if [[ -z "$build_dir" ]]; then
  if [[ $sanitize -eq 1 ]]; then build_dir="${CRESCENT_BUILD_DIR:-build}-asan"; else build_dir="${CRESCENT_BUILD_DIR:-build}"; fi
fi
# The sanitizer build is -O1 -g1: fast enough to run every test, stack traces with lines (full
# -g doubled its compile time); it compiles no sm_90 CUBINs at build time (no GPU runs it; the
# Release build checks the table).
if [[ $sanitize -eq 1 ]]; then
  config=(-DCRESCENT_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
          -DCRESCENT_PREBUILT_KERNELS=OFF)
else
  config=(-DCRESCENT_SANITIZE=OFF "-DCMAKE_BUILD_TYPE=${CRESCENT_BUILD_TYPE:-Release}")
fi
# CUDA is optional: picked up from /usr/local/cuda when it is there.
if [[ -x /usr/local/cuda/bin/nvcc ]]; then config+=(-DCUDAToolkit_ROOT=/usr/local/cuda); fi

mkdir -p "$build_dir"
log="$build_dir/setup.log"
if ! cmake -S . -B "$build_dir" -G Ninja "${config[@]}" >"$log" 2>&1; then
  cat "$log" >&2
  echo "setup: cmake configure failed (log: $log)" >&2
  exit 1
fi
jobs=()
[[ -n "${CRESCENT_JOBS:-}" ]] && jobs=(-j "$CRESCENT_JOBS")
# ninja --quiet: no progress lines, but compiler warnings and errors still show
if ! ninja -C "$build_dir" --quiet "${jobs[@]}"; then
  echo "setup: build failed in $build_dir" >&2
  exit 1
fi
echo "setup: $build_dir/crescent is built ($([[ $sanitize -eq 1 ]] && echo 'ASan+UBSan' || echo "${CRESCENT_BUILD_TYPE:-Release}"))"
