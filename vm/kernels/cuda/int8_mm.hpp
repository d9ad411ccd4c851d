// int8 weight-only matrix products on a CUDA device (int8_mm.cuh), for the `_int8_weight_mm`
// registry op (vm/ops/quant.cpp): y {m, n} = x {m, k} @ (q * scale)^T (+ bias), q int8 {n, kp}
// (rows padded with zero bytes to kp = k rounded up to 16), one scale per row of q.
#pragma once
#include <string>

#include "vm/cuda/blaslt.hpp"
#include "vm/registry.hpp"

namespace cr::cuda {

// y = act(x @ (q * scales)^T + bias) (bias undefined: none) for m <= kInt8GemvRows (gemv.hpp); x, y
// contiguous {m, k} / {m, n} of one floating dtype T, q {n, kp} bytes (any tensor holding them), scales {n}
// of any floating dtype, bias {n} of T.
void int8_gemv(Context& ctx, const Tensor& y, const Tensor& x, const Tensor& q, const Tensor& scales,
               const Tensor& bias, Epilogue act, int64_t m, int64_t n, int64_t k, int64_t kp);

// w {n, k} (contiguous, w's dtype) = q * scales, each product rounded once to w's dtype.
void int8_dequantize(Context& ctx, const Tensor& w, const Tensor& q, const Tensor& scales, int64_t n, int64_t k,
                     int64_t kp);

std::string int8_mm_source(DType x, DType scales);  // (tests compile it to CUBIN without a GPU)

}  // namespace cr::cuda
