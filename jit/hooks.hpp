// The compiler's entries of the runtime's hook table (vm/hooks.hpp): eager CUDA ops and copies
// as generated kernels, library kernels' CUBINs from the kernel cache, deferred device checks,
// and native code for capture's graphs.
#pragma once
#include "vm/hooks.hpp"

namespace cr::jit {

void install_hooks(Hooks& h);

}  // namespace cr::jit
