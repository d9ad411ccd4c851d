// Library kernels compiled when crescent is built, so that their first use compiles nothing.
//
// NVRTC takes 2 s for the float32 attention kernel (its NVVM and ptxas passes over 8 x 8 scores
// a thread), 0.9 s for a 16-bit one and 0.2 s for cumsum or sort (H100 host): more than a
// graph's whole cold-compile budget. Their sources are fixed templates instantiated per dtype
// (and head size), so the build compiles the common instances for the target GPU
// (tools/prebuild.cpp, sm_90: attention of head sizes 64 and 128, cumsum and sort in every
// dtype) and links the CUBINs into the program, as PyTorch ships its kernels compiled.
// The lookup is by a hash of the exact source NVRTC would compile, the architecture and the
// extra NVRTC options: an instance the build did not make, a source changed since, another GPU
// or CRESCENT_NVRTC_OPTIONS all miss and compile at run time as before - never a stale kernel.
#pragma once
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace cr::cuda {

struct PrebuiltCubin {
  const char* key;  // prebuilt_key of its source
  const unsigned char* data;
  size_t size;
};

// The table linked into this program: tools/prebuild.cpp generates it at build time (empty when
// the build had no NVRTC or CRESCENT_PREBUILT_KERNELS=OFF; tools/prebuilt_none.cpp).
std::span<const PrebuiltCubin> prebuilt_table();

// The instances the build compiles: a name for its log and the module source, as the library
// kernels' launchers build it for an H100 (attention_simt_source's shared-memory limit is sm_90's).
struct LibraryInstance {
  std::string name, source;
};
std::vector<LibraryInstance> prebuilt_instances();

std::string prebuilt_key(const std::string& source, const std::string& arch);

// The CUBIN of `source` for `arch` in the table, or null.
const PrebuiltCubin* find_prebuilt(const std::string& source, const std::string& arch);

}  // namespace cr::cuda
