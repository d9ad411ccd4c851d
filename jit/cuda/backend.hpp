// The CUDA backend (jit/backend.hpp): the plan as one CUDA C module (jit/cuda/emit.hpp), compiled
// by NVRTC into a CUBIN that the kernel cache keeps as `<key>.cubin`, loaded into the device's
// context by the program (vm/cuda/module.hpp). The library kernels' CUBINs share the cache
// (jit/jit.hpp cuda_cubin).
#pragma once
#include <string>
#include <vector>

#include "jit/backend.hpp"
#include "jit/cuda/emit.hpp"

namespace cr::jit::cuda {

extern const Backend kBackend;

// The cache key of the CUBIN of `source` for `arch`: the source, NVRTC's version and options, and
// this build of crescent.
std::string cubin_key(const std::string& source, const std::string& arch);

// NVRTC's CUBIN of module `m` (`name` for its messages): of its parts, compiled at once, packed.
std::string compile_module(const CudaModule& m, const std::string& name);

// The CUBIN of a module in parts (CudaModule::parts): "CRCUBINS", then per part its size (8
// bytes, little-endian) and its CUBIN. unpack_cubins gives a plain CUBIN (an ELF) as its one
// part, and throws for anything that is neither.
std::string pack_cubins(const std::vector<std::string>& cubins);
std::vector<std::string> unpack_cubins(const std::string& bin);

}  // namespace cr::jit::cuda
