// The empty table of prebuilt CUBINs (vm/cuda/prebuilt.hpp): for tools/prebuild.cpp itself, and
// for builds with CRESCENT_PREBUILT_KERNELS=OFF. Every library kernel then compiles at first use.
#include "vm/cuda/prebuilt.hpp"

namespace cr::cuda {
std::span<const PrebuiltCubin> prebuilt_table() { return {}; }
}  // namespace cr::cuda
