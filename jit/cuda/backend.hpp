// The CUDA backend (jit/backend.hpp): the plan as one CUDA C module (jit/cuda/emit.hpp), compiled
// by NVRTC into a CUBIN that the kernel cache keeps as `<key>.cubin`, loaded into the device's
// context by the program (vm/cuda/module.hpp). The library kernels' CUBINs share the cache
// (jit/jit.hpp cuda_cubin).
#pragma once
#include <string>

#include "jit/backend.hpp"

namespace cr::jit::cuda {

extern const Backend kBackend;

// The cache key of the CUBIN of `source` for `arch`: the source, NVRTC's version and options, and
// this build of crescent.
std::string cubin_key(const std::string& source, const std::string& arch);

}  // namespace cr::jit::cuda
