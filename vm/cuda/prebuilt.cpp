#include "vm/cuda/prebuilt.hpp"

#include <cstring>

#include "vm/kernels/cuda/attention.hpp"
#include "vm/kernels/cuda/attention_decode.hpp"
#include "vm/kernels/cuda/attention_simt.hpp"
#include "vm/kernels/cuda/gemv.hpp"
#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/cuda/optim.hpp"
#include "vm/kernels/cuda/radix.hpp"
#include "vm/kernels/cuda/scatter.hpp"
#include "vm/kernels/cuda/select.hpp"
#include "vm/cuda/nvrtc.hpp"
#include "vm/error.hpp"
#include "vm/sha256.hpp"

namespace cr::cuda {

// Attention: head sizes 64 and 128 are those of GPT-2, LLaMA and most models since; other sizes
// compile at first use (1-2 s for float32). An H100 grants a block 227 KiB of shared memory.
// cumsum and sort / topk (about 0.1 s each) in the dtypes models sort and sum: float, int32 /
// int64 (ids, positions) and bool (masks); the radix sort of long lines of floats and ids
// (unique). The optimizer updates and scatter_add (the gathers'
// gradients) in the floating dtypes training uses, and decoding's GEMV in those dtypes; the
// selections (x[mask], nonzero, x[idx]) of
// float32 values, int64 ids and bool masks.
std::vector<LibraryInstance> prebuilt_instances() {
  constexpr size_t kSm90Shared = 227 << 10;
  std::vector<LibraryInstance> r;
  for (int e : {64, 128}) {
    r.push_back({cat("attention_f32_", e, "_", e), attention_simt_source(e, e, kSm90Shared)});
    for (DType d : {DType::f16, DType::bf16}) r.push_back({cat("attention_", dtype_name(d), "_", e), attention_source(d, e)});
    for (DType d : {DType::f32, DType::f16, DType::bf16})  // (decoding: the split kernel)
      r.push_back({cat("attention_decode_", dtype_name(d), "_", e, "_", e), attention_decode_source(d, e, e)});
  }
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    r.push_back({cat("cumsum_", dtype_name(d)), cumsum_source(d)});
    r.push_back({cat("sort_", dtype_name(d)), sort_source(d)});
  }
  r.push_back({"sort_bool", sort_source(DType::b8)});
  for (DType d : {DType::f32, DType::i64}) r.push_back({cat("radix_", dtype_name(d)), radix_source(d)});
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    r.push_back({cat("optim_", dtype_name(d)), optim_source(d)});
    r.push_back({cat("scatter_", dtype_name(d)), scatter_source(d)});
    r.push_back({cat("gemv_", dtype_name(d), "_f32"), gemv_source(d, false, DType::f32)});
  }
  for (DType d : {DType::f32, DType::i64, DType::b8}) r.push_back({cat("select_", dtype_name(d)), select_source(d)});
  return r;
}

// Not cubin_key (jit/cuda/backend.hpp): that one names NVRTC's version and the build, because a disk
// cache outlives both. A table is made by this build's NVRTC, and a CUBIN for sm_90 runs under
// any later driver.
std::string prebuilt_key(const std::string& source, const std::string& arch) {
  return sha256_hex(cat(source, "\n", arch, " ", nvrtc_options()));
}

const PrebuiltCubin* find_prebuilt(const std::string& source, const std::string& arch) {
  const std::span<const PrebuiltCubin> table = prebuilt_table();
  if (table.empty()) return nullptr;
  const std::string key = prebuilt_key(source, arch);
  for (const PrebuiltCubin& p : table)
    if (key == p.key) return &p;
  return nullptr;
}

}  // namespace cr::cuda
