#include "vm/kernels/wide.hpp"

#include <cstdlib>
#include <string_view>

namespace cr {

namespace {

bool capped_below_avx512() {
  const char* env = std::getenv("CRESCENT_CPU_MARCH");
  if (!env) return false;
  std::string_view v(env);
  if (v.starts_with("-march=")) v.remove_prefix(7);
  return v == "x86-64" || v == "x86-64-v2" || v == "x86-64-v3";
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
