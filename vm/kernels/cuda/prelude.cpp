// The device library every CUDA module starts with (see prelude.hpp): prelude.cuh.
#include "vm/kernels/cuda/prelude.hpp"

#include <string>

#include "vm/error.hpp"
#include "vm/kernels/cuda/sources.hpp"
#include "vm/kernels/philox.hpp"

namespace cr::cuda {

// The prelude, and the random draws of vm/kernels/philox.hpp in namespace cr (the same text the
// CPU compiles: CPU and CUDA draws are the same integers).
const char* prelude() {
  static const std::string text = [] {
    std::string t = cuda_source("prelude.cuh");
    const size_t end = t.rfind("// ---- end of the prelude ----");
    return t.insert(end, cat("namespace cr {\n", CR_PHILOX_TEXT(__forceinline__), "\n}  // namespace cr\n"));
  }();
  return text.c_str();
}

const char* cuda_type(DType d) {
  if (d == DType::f16) return "cr::half_t";  // the prelude's 16-bit storage types
  if (d == DType::bf16) return "cr::bf16_t";
  return ctype(d);  // the prelude defines int32_t / int64_t
}

}  // namespace cr::cuda
