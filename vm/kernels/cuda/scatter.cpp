#include "vm/kernels/cuda/scatter.hpp"

#include <algorithm>
#include <memory>

#include "vm/cuda/checks.hpp"
#include "vm/cuda/driver.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/cuda/prelude.hpp"
#include "vm/kernels/cuda/sources.hpp"

namespace cr::cuda {
namespace {

// The launch's geometry, laid out as scatter.cuh's ScatterGeo.
struct Geo {
  long long sizes[kMaxDims], idx_strides[kMaxDims], src_strides[kMaxDims], out_strides[kMaxDims];
  long long n, limit;
  int nd, d;
};
static_assert(kMaxDims == 16, "scatter.cuh's ScatterGeo holds 16 dims");

// What alpha * src is computed in (scatter.cuh's A): as the CPU's compute_t, integers widened.
const char* scaled_type(DType d) {
  switch (d) {
    case DType::f64: return "double";
    case DType::i32: case DType::i64: return "long long";
    case DType::b8: return "int";
    default: return "float";
  }
}

// What a histogram's shared-memory bins hold (scatter.cuh's B): float sums for float32 (and,
// unused, the 16-bit floats), wrapping integers, bool's "or" in a word.
const char* bin_type(DType d) {
  switch (d) {
    case DType::f64: return "double";
    case DType::i64: return "unsigned long long";
    case DType::i32: case DType::b8: return "unsigned";
    default: return "float";
  }
}
size_t bin_bytes(DType d) { return d == DType::f64 || d == DType::i64 ? 8 : 4; }

}  // namespace

std::string scatter_source(DType d) {
  return cat(prelude(), "\ntypedef ", cuda_type(d), " T;\ntypedef ", scaled_type(d), " A;\ntypedef ", bin_type(d),
             " B;\n", cuda_source("scatter.cuh"));
}

namespace {

Geo geometry(const Tensor& out, int d, const Tensor& idx, const Tensor& src) {
  Geo g{};
  g.nd = idx.dim();
  g.d = d;
  g.n = idx.numel();
  g.limit = out.size(d);
  for (int k = 0; k < g.nd; ++k) {
    g.sizes[k] = idx.size(k);
    g.idx_strides[k] = idx.stride(k);
    g.src_strides[k] = src.stride(k);
    g.out_strides[k] = out.stride(k);
  }
  return g;
}

constexpr int kBlock = 256;
constexpr size_t kBinBytes = 48 << 10;  // the shared memory every launch gets without an opt-in

struct Launch {
  const char* fn;
  int64_t grid;
  size_t shared;
};

// scatter_add's launch. A 1-D line into a 1-D target (a histogram) keeps its bins in shared
// memory when they fit and the line is long enough to pay for clearing them; counting into more
// bins (a constant source) groups a warp's equal bins; anything else is a thread per position.
// (16-bit floats add one by one, as the CPU: float bins would not saturate where they do.)
Launch add_launch(const Tensor& out, const Tensor& idx, const Tensor& src) {
  const int64_t n = idx.numel(), threads = (n + kBlock - 1) / kBlock;
  const bool half = out.dtype() == DType::f16 || out.dtype() == DType::bf16;
  if (out.dim() != 1 || idx.dim() != 1 || n < 4 * kBlock || half) return {"scatter_add", threads, 0};
  const bool counting = src.stride(0) == 0;
  const int64_t waves = int64_t(device_info(out.device().index).multiprocessors) * 4;
  const size_t shared = size_t(out.size(0)) * (counting ? 4 : bin_bytes(out.dtype()));
  if (shared <= kBinBytes && n >= 2 * out.size(0))
    return {"scatter_bins", std::clamp<int64_t>(n / (16 * kBlock), 1, waves), shared};
  if (counting) return {"count_line", std::min(threads, 2 * waves), 0};
  return {"scatter_add", threads, 0};
}

// Launches l.fn over idx's positions; `alpha` goes between the geometry and the check word.
void launch_scatter(Context& ctx, const Launch& l, const Tensor& out, int d, const Tensor& idx, const Tensor& src,
                    void* alpha, const std::string& op, const std::string& what) {
  if (idx.numel() == 0) return;
  Geo g = geometry(out, d, idx, src);
  const int device = out.device().index;
  const std::shared_ptr<DeviceCheck> check = library_check(device, op, {what});
  void *op_ = out.data_bytes(), *ip = idx.data_bytes(), *sp = src.data_bytes(), *cp = check->word;
  void* args[] = {&op_, &ip, &sp, &g, alpha, &cp};
  const DType dt = out.dtype();
  library_launch(ctx, device, cat("scatter_", dtype_name(dt)), [dt] { return scatter_source(dt); }, l.fn, l.grid, kBlock,
                 args, l.shared);
  defer_check(check, current_stream(device));
}

}  // namespace

void scatter_add(Context& ctx, const Tensor& out, int d, const Tensor& idx, const Tensor& src, double alpha,
                 const std::string& op, const std::string& what) {
  double af = alpha;
  float a32 = float(alpha);
  long long ai = static_cast<long long>(alpha);
  int ab = alpha != 0;
  void* ap = nullptr;
  switch (out.dtype()) {
    case DType::f64: ap = &af; break;
    case DType::i32: case DType::i64: ap = &ai; break;
    case DType::b8: ap = &ab; break;
    default: ap = &a32;
  }
  launch_scatter(ctx, add_launch(out, idx, src), out, d, idx, src, ap, op, what);
}

}  // namespace cr::cuda
