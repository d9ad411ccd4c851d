// The device library at the top of every CUDA module, generated (jit/cuda) or hand-written (the
// kernels here): prelude.cuh - integer types (NVRTC compiles without host headers), the functions
// the registry's scalar expressions call (vmath::exp, sm::relu_, std::sqrt, ... with CUDA's device
// math), 16-byte vector access, and the warp / block reductions. Pointwise ops are emitted from
// their registry expression text verbatim, so it names math functions, never ops.
#pragma once
#include "vm/dtype.hpp"

namespace cr::cuda {

const char* prelude();
// The CUDA type of dtype d in code after the prelude (cr::half_t, cr::bf16_t for 16-bit floats).
const char* cuda_type(DType d);

}  // namespace cr::cuda
