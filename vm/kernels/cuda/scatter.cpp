#include "vm/kernels/cuda/scatter.hpp"

#include <memory>

#include "vm/cuda/checks.hpp"
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

}  // namespace

std::string scatter_source(DType d) {
  return cat(prelude(), "\ntypedef ", cuda_type(d), " T;\ntypedef ", scaled_type(d), " A;\n", cuda_source("scatter.cuh"));
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

// Launches `fn` over idx's positions; `alpha` goes between the geometry and the check word.
void launch_scatter(Context& ctx, const char* fn, const Tensor& out, int d, const Tensor& idx, const Tensor& src,
                    void* alpha, const std::string& op, const std::string& what) {
  const int64_t n = idx.numel();
  if (n == 0) return;
  Geo g = geometry(out, d, idx, src);
  const int device = out.device().index;
  const std::shared_ptr<DeviceCheck> check = library_check(device, op, {what});
  void *op_ = out.data_bytes(), *ip = idx.data_bytes(), *sp = src.data_bytes(), *cp = check->word;
  void* args[] = {&op_, &ip, &sp, &g, alpha, &cp};
  constexpr int kBlock = 256;
  const DType dt = out.dtype();
  library_launch(ctx, device, cat("scatter_", dtype_name(dt)), [dt] { return scatter_source(dt); }, fn,
                 (n + kBlock - 1) / kBlock, kBlock, args);
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
  launch_scatter(ctx, "scatter_add", out, d, idx, src, ap, op, what);
}

}  // namespace cr::cuda
