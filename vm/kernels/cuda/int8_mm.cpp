#include "vm/kernels/cuda/int8_mm.hpp"

#include "vm/kernels/cuda/gemv.hpp"
#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/cuda/prelude.hpp"
#include "vm/kernels/cuda/sources.hpp"

namespace cr::cuda {
namespace {

void* ptr(const Tensor& t) { return t.defined() ? t.data_bytes() : nullptr; }

void launch(Context& ctx, const Tensor& x, const Tensor& scales, const char* fn, int64_t grid, int block,
            void* const* args, size_t shared = 0) {
  const DType d = x.dtype(), s = scales.dtype();
  library_launch(ctx, x.device().index, cat("int8_mm_", dtype_name(d), "_", dtype_name(s)),
                 [d, s] { return int8_mm_source(d, s); }, fn, grid, block, args, shared);
}

}  // namespace

std::string int8_mm_source(DType x, DType scales) {
  return cat(prelude(), "\ntypedef ", cuda_type(x), " T;\ntypedef ", cuda_type(scales), " S;\ntypedef ",
             x == DType::f64 ? "double" : "float", " A;\n", cuda_source("int8_mm.cuh"));
}

void int8_gemv(Context& ctx, const Tensor& y, const Tensor& x, const Tensor& q, const Tensor& scales,
               const Tensor& bias, Epilogue act, int64_t m, int64_t n, int64_t k, int64_t kp) {
  gemv(ctx, y, x, k, GemvWeights{q.data_bytes(), kp, kp, true, scales, false, settled(ctx, q)}, bias, act, Tensor(), m, n,
       k);
}

void int8_dequantize(Context& ctx, const Tensor& w, const Tensor& q, const Tensor& scales, int64_t n, int64_t k,
                     int64_t kp) {
  if (n == 0 || k == 0) return;
  void *qp = ptr(q), *sp = ptr(scales), *wp = ptr(w);
  long long nn = n, kk = k, kpp = kp;
  void* args[] = {&qp, &sp, &wp, &nn, &kk, &kpp};
  const int64_t blocks = std::min<int64_t>((n * k + 255) / 256, 65536);
  launch(ctx, w, scales, "int8_dequant", blocks, 256, args);
}

}  // namespace cr::cuda
