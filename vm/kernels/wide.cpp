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
  return cpu_has_avx512() && !capped_below_avx512();
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
