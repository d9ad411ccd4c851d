#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs an example model script.
#   scripts/run_example.sh [script.lua [args...]]     (default: examples/gpt2.lua)
# Environment: CRESCENT_BUILD_DIR (default build), CRESCENT_NUM_THREADS, see README.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh
script="${1:-examples/gpt2.lua}"
[[ $# -gt 0 ]] && shift
exec "${CRESCENT_BUILD_DIR:-build}/crescent" "$script" "$@"
