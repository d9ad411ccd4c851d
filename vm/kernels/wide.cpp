#include "vm/kernels/wide.hpp"

#include "vm/cpu_march.hpp"

#include <cstdlib>
#include <string_view>

namespace cr {

namespace {

bool capped_below_avx512() {
  const int bytes = march_vector_bytes(cpu_march_override());
  return bytes > 0 && bytes < 64;
}

bool detect() {
#if CR_HAVE_AVX512_TWINS
  __builtin_cpu_init();
  // libgcc's cpuid cache reads a feature as absent when the OS does not save its register state
  bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512cd");
  return cpu && !capped_below_avx512();
#else
  return false;
#endif
}

}  // namespace

bool use_avx512_loops() {
  static const bool on = detect();
  return on;
}

}  // namespace cr
