// The matrix product core of vm/ops/linalg.cpp, for the ops built on products (conv2d).
#pragma once
#include <functional>

#include "vm/cuda/blaslt.hpp"
#include "vm/tensor.hpp"

namespace cr {

struct Context;

// out {batch.., M, N} (contiguous, freshly made) = a {batchA.., M, K} @ b {batchB.., K, N},
// plus out's current values when accumulate. Batch dims broadcast to out's. OpenBLAS for
// float32 / float64 on the CPU, cuBLAS on CUDA, a generic kernel for the other dtypes.
void matmul_into(Tensor out, Tensor a, Tensor b, bool accumulate);

// out {M, N} (contiguous) = a {M, K} @ b {K, N} (2-D, float32 / float64, any layout BLAS reads) by
// output tiles spread over the pool; after(r0, r1, c0, c1) runs on each tile right after its
// product, while it is in cache (a fused epilogue: vm/ops/epilogue.cpp).
using TileFn = std::function<void(int64_t r0, int64_t r1, int64_t c0, int64_t c1)>;
void matmul_tiles(const Tensor& out, Tensor a, Tensor b, const TileFn& after);

// out {M, N} (contiguous, on CUDA) = act(a {M, K} @ b {K, N} + bias {N}) + residual {M, N} in one
// cuBLASLt call (bias, residual: contiguous or undefined; residual only with act None); false
// when cuBLASLt does not take the case, with nothing done.
bool cuda_matmul_epilogue(const Tensor& out, Tensor a, Tensor b, const Tensor& bias, cuda::Epilogue act,
                          const Tensor& residual);

// out {M, N} (contiguous, on CUDA) = act(a {M, K} @ b {K, N} + bias {N}) + residual {M, N} by the
// GEMV kernel (vm/kernels/cuda/gemv.hpp) when M <= cuda::kGemvRows, the dtype is float32 / float16
// / bfloat16, a's rows have a unit column stride and b is {K, N} or linear's {N, K} weight seen
// as {K, N}, with 16-byte aligned rows of whole 16-byte chunks; false otherwise, with nothing done.
bool cuda_gemv(Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias,
               cuda::Epilogue act, const Tensor& residual);

// The fused products' activation argument (`_addmm_epilogue`, `_int8_weight_mm`): "none" (absent),
// "relu" or "gelu_tanh"; and act(y) by the activation's registry op (y itself for none).
cuda::Epilogue activation_arg(const OpCall& c, int index);
Tensor activated(Context& ctx, const Tensor& y, cuda::Epilogue act);

}  // namespace cr
