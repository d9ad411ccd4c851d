#include "vm/kernels/cuda/sources.hpp"

#include "vm/error.hpp"

namespace cr {

const char* cuda_source(const char* name) {
  if (const char* text = find_embedded(kCudaSources, kCudaSourcesCount, name)) return text;
  throw Error(cat("internal: vm/kernels/cuda/", name, " was not embedded in this build"));
}

}  // namespace cr
