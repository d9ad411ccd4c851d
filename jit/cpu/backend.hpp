// The CPU backend (jit/backend.hpp): the plan's kernels as libgccjit code, compiled in a
// compiler process (jit/compiler_process.hpp; CRESCENT_JIT_FORK=0: in process) into a shared
// object that the kernel cache keeps as `<key>.so` and dlopen() loads.
#pragma once
#include "jit/backend.hpp"

namespace cr::jit::cpu {

extern const Backend kBackend;

}  // namespace cr::jit::cpu
