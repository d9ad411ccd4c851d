#!/usr/bin/env bash
# The include rule of crescent's layers (vm/README.md "Layers"): a file of vm/, jit/ or tools/
# includes ("...") only files of its own layer and of the layers below it.
#   1 runtime   vm/, vm/ops/, vm/kernels/ (and cuda/), vm/cuda/, vm/io/: the vm/ folders not below
#   2 capture   vm/graph/, vm/guards/
#   3 jit       jit/
#   4 lua       vm/lua/ (the Lua boundary and the executable)
#   5 programs  tools/ (build tools: may include any layer)
# Calls upward go through the runtime's hook table (vm/hooks.hpp) instead; the build checks the
# same order by linking each layer without the layers above it (CMakeLists.txt "layer checks").
# Inside jit/, the loop IR and its passes (loop_ir, reduce, lower, lower_*, fusion/) include
# no backend and no driver file of jit/, and neither backend (jit/cpu/, jit/cuda/) the other.
# Prints every violation as file:line and exits 1 if there is one. Usage: check_layers.sh [ROOT]
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
grep -rnE --include='*.cpp' --include='*.hpp' --include='*.h' --include='*.cuh' \
  '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' vm jit tools |
awk '
function layer(p) {
  if (p ~ /^vm\/lua\//) return 4
  if (p ~ /^vm\/(graph|guards)\//) return 2
  if (p ~ /^vm\//) return 1
  if (p ~ /^jit\//) return 3
  if (p ~ /^tools\//) return 5
  return 0
}
# the part of jit/ a path is in: "ir", "cpu", "cuda" or "driver"
function part(p) {
  if (p ~ /^jit\/(loop_ir|reduce|lower|lower_[a-z]+)\.(hpp|cpp)$/ || p ~ /^jit\/fusion\//) return "ir"
  if (p ~ /^jit\/(cpu|cuda)\//) { split(p, q, "/"); return q[2] }
  return "driver"
}
BEGIN { split("runtime capture jit lua programs", name, " ") }
{
  split($0, f, ":")  # file, line, text
  match($0, /"[^"]*"/)
  target = substr($0, RSTART + 1, RLENGTH - 2)
  from = layer(f[1]); to = layer(target)
  if (to == 0) {
    printf "%s:%s: includes \"%s\", which is in no layer\n", f[1], f[2], target; bad++
  } else if (to > from) {
    printf "%s:%s: the %s layer includes \"%s\" of the %s layer above it\n", f[1], f[2], name[from], target, name[to]; bad++
  } else if (from == 3 && to == 3) {
    pf = part(f[1]); pt = part(target)
    if ((pf == "ir" && pt != "ir") || (pf == "cpu" && pt == "cuda") || (pf == "cuda" && pt == "cpu")) {
      printf "%s:%s: jit/%s code includes \"%s\" (jit/%s)\n", f[1], f[2], pf, target, pt; bad++
    }
  }
  n++
}
END {
  if (bad) { printf "%d include(s) against the layer order (scripts/check_layers.sh)\n", bad; exit 1 }
  printf "layers: %d includes checked, none goes up a layer\n", n
}'
