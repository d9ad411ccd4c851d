// The device library at the top of every generated CUDA module: integer types (NVRTC compiles
// without host headers), the functions the registry's scalar expressions call (vm::exp,
// sm::relu_, std::sqrt, ... with CUDA's device math), 16-byte vector access, and the warp / block
// reductions. Pointwise ops are emitted from their registry expression text verbatim, so this
// file names math functions, never ops.
#pragma once

namespace cr::jit::cuda {

const char* prelude();

}  // namespace cr::jit::cuda
