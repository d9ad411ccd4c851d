#include "vm/cuda/launch.hpp"

#include <cstring>
#include <mutex>
#include <vector>

#include "vm/cuda/streams.hpp"
#include "vm/env.hpp"

namespace cr::cuda {

bool overlapping_launches(int index) {
  static std::vector<char> on;
  static std::once_flag once;
  std::call_once(once, [] {
    const bool allowed = env_number(kEnvCudaPdl) != 0 && driver() && driver()->cuLaunchKernelEx;
    for (int i = 0; i < device_count(); ++i) on.push_back(allowed && device_info(i).sm_major >= 9);
  });
  return index >= 0 && size_t(index) < on.size() && on[size_t(index)];
}

void launch_kernel(CUfunction f, int index, int64_t grid, int block, size_t shared_bytes, void** args,
                   const char* what) {
  use_device(index);  // (the stream's context must be current: a thread may have used another device)
  const CUstream stream = current_stream(index);
  if (overlapping_launches(index)) {
    constexpr int kProgrammaticStreamSerialization = 6;  // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    LaunchAttribute a;
    std::memset(&a, 0, sizeof a);  // (the driver's union: no stray bytes)
    a.id = kProgrammaticStreamSerialization;
    a.value = 1;
    const LaunchConfig c{{unsigned(grid), 1, 1}, {unsigned(block), 1, 1}, unsigned(shared_bytes), stream, &a, 1};
    CR_CU(cuLaunchKernelEx(&c, f, args, nullptr), what);
    return;
  }
  CR_CU(cuLaunchKernel(f, unsigned(grid), 1, 1, unsigned(block), 1, 1, unsigned(shared_bytes), stream, args, nullptr),
        what);
}

}  // namespace cr::cuda
