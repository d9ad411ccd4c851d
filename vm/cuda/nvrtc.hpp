// NVRTC, loaded lazily with dlopen: CUDA C source -> CUBIN for one GPU architecture. Never linked
// (the build and the CPU-only hosts have no CUDA): the few NVRTC functions used are declared in
// nvrtc.cpp with their C ABI, and looked up on first use.
#pragma once
#include <string>

namespace cr::cuda {

// Whether NVRTC can be loaded (tries libnvrtc.so.13, .so.12, .so, then under $CUDA_HOME/lib64
// and /usr/local/cuda/lib64). `why` (optional) gets the reason when it cannot.
bool nvrtc_available(std::string* why = nullptr);

// "nvrtc 13.0": part of the kernel cache key. Empty when NVRTC is not available.
std::string nvrtc_version();

// The options CRESCENT_NVRTC_OPTIONS adds to every compile, space-separated ("" without it).
std::string nvrtc_options();

// Compiles `source` (a name for NVRTC's messages) to a CUBIN for `arch` ("sm_90"), with
// --gpu-architecture=<arch> -default-device --std=c++17 (-minimal where NVRTC has
// it) and nvrtc_options(), no host headers. Throws cr::Error with NVRTC's log when it fails (or
// when NVRTC is not available). `log` (optional) gets the log of a compile that succeeded: its
// warnings (empty when there are none).
std::string compile_cubin(const std::string& source, const std::string& name, const std::string& arch = "sm_90",
                          std::string* log = nullptr);

// The same compile to PTX text for a virtual architecture ("compute_90"): what tests read.
std::string compile_ptx(const std::string& source, const std::string& name, const std::string& arch = "compute_90");

}  // namespace cr::cuda
