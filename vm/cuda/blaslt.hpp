// Matrix products with fused epilogues through cuBLASLt, loaded at run time as cuBLAS is
// (dlopen "libcublasLt.so.13" / ".12" / "libcublasLt.so"; our own declarations, which
// tests/cpp/test_blaslt.cpp checks against cublasLt.h where it is installed): D = act(A B + bias)
// or D = A B + bias + R in one call, where cuBLAS would need a product and a pointwise kernel.
// The algorithm is cuBLASLt's heuristic's first choice, asked once per shape, layout and
// alignment; the workspace comes from the caching allocator.
#pragma once
#include <string>

#include "vm/dtype.hpp"

namespace cr::cuda {

// cuBLASLt applies its GELU in the tanh form: only gelu(x, {approximate = "tanh"}) maps to it.
enum class Epilogue : int { None, Relu, GeluTanh };

bool blaslt_available(std::string* why = nullptr);
void blaslt_prepare(int index);  // its handle made now, outside a CUDA graph capture (blas_prepare calls it)

// D {M, N} (row-major, leading dimension ldd) = act(A B + bias) + R on device `index`: A, B as
// for gemm (vm/cuda/blas.hpp); bias {N} contiguous or null; R {M, N} row-major with leading
// dimension ldr, or null, only with act None (cuBLASLt adds C before its activation). float32
// (TF32 when allowed: blas.hpp), float16, bfloat16 (accumulating in float32). False when cuBLASLt
// is missing or has no algorithm for the case: nothing was queued, the caller computes it another way.
bool gemm_epilogue(int index, DType d, int M, int N, int K, const void* A, int lda, bool a_colmajor, const void* B,
                   int ldb, bool b_colmajor, const void* bias, Epilogue act, const void* R, int ldr, void* D, int ldd);

}  // namespace cr::cuda
