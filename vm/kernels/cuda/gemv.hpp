// Products of a few rows with a weight matrix on a CUDA device (gemv.cuh): decoding's
// projections, where cuBLAS leaves most multiprocessors idle and may need a second kernel for the
// activation. w is read once, the epilogue applied in the same kernel.
#pragma once
#include <string>

#include "vm/cuda/blaslt.hpp"
#include "vm/registry.hpp"

namespace cr::cuda {

// The most rows of x a GEMV takes (above: cuBLAS; the kernel re-reads x from shared memory for
// every row of w, bench/RESULTS.md, GPT-2 decoding).
constexpr int64_t kGemvRows = 4;
// int8 weights: the kernel takes up to this many rows (its sums are then bound by the float FMAs,
// still well above dequantising w for cuBLAS, which writes and reads it again at 4x its bytes).
constexpr int64_t kInt8GemvRows = 16;
// Whether a product of `rows` rows of x in dtype d is a GEMV's (its weight's layout aside): the
// dense ops' rule (vm/ops/linalg.cpp), which the graph's epilogue rewrite also follows.
inline bool gemv_takes(DType d, int64_t rows) {
  return rows >= 1 && rows <= kGemvRows && (d == DType::f32 || d == DType::f16 || d == DType::bf16);
}

// The weights of a GEMV: n rows `pitch` bytes apart (a multiple of 16, 16-byte aligned), each
// row's first kp columns read - int8 (kp a multiple of 16, zeros past k, with one scale a row)
// or x's dtype (kp = k, a multiple of 16 bytes). Or, `kn`: x's dtype stored {k, n} (matmul's
// layout), k rows `pitch` bytes apart, n a multiple of 16 bytes.
struct GemvWeights {
  const void* p;
  int64_t pitch, kp;
  bool int8;
  Tensor scales;  // {n} of any floating dtype with int8; undefined otherwise
  bool kn = false;
  bool settled = false;  // no kernel in flight writes w (Context::plan_settled): read before the wait
};
// Whether w's storage is among Context::plan_settled.
bool settled(const Context& ctx, const Tensor& w);

// y {m, n} (contiguous) = act(x @ (w * scales)^T + bias) + residual for m <= kGemvRows (int8 w:
// kInt8GemvRows): x {m, k} of a floating dtype T, rows ldx elements apart (unit column stride);
// bias {n} and residual {m, n} contiguous of T, or undefined. Sums in float32 (float64 for float64
// x), one rounding.
void gemv(Context& ctx, const Tensor& y, const Tensor& x, int64_t ldx, const GemvWeights& w, const Tensor& bias,
          Epilogue act, const Tensor& residual, int64_t m, int64_t n, int64_t k);

std::string gemv_source(DType x, bool int8, DType scales);  // (tests compile it to CUBIN without a GPU)

}  // namespace cr::cuda
