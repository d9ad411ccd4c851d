// The CUDA C of the hand-written device kernels and of the prelude (vm/kernels/cuda/*.cuh),
// embedded at build time (cmake/embed.cmake): the launchers hand it to NVRTC, and tools and
// readers find it in those files.
#pragma once
#include "vm/embedded.hpp"

namespace cr {

extern const EmbeddedFile kCudaSources[];
extern const int kCudaSourcesCount;

// The text of vm/kernels/cuda/<name> ("scan.cuh"); throws when the build embedded no such file.
const char* cuda_source(const char* name);

}  // namespace cr
