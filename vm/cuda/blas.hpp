// Matrix products on CUDA devices through cuBLAS, loaded at run time like the driver (dlopen
// "libcublas.so.13" / ".12" / "libcublas.so"): linking it would make the binary need CUDA's
// libraries everywhere, and its kernels are the fastest general GEMMs for the H100 we can call.
// Full float32 precision unless TF32 is allowed (T.backends.cuda.matmul.allow_tf32, PyTorch's
// flag, off by default); float16 / bfloat16 products accumulate in float32
// (cublasGemmStridedBatchedEx, compute type 32F).
#pragma once
#include <cstdint>
#include <string>

#include "vm/dtype.hpp"

namespace cr::cuda {

bool blas_available(std::string* why = nullptr);
// Whether float32 products may round their inputs to TF32 (tensor cores): read at each call.
void set_allow_tf32(bool on);
bool allow_tf32();
// Creates the calling thread's current stream's handle now, when cuBLAS is there (a CUDA graph
// capture must not create one: vm/cuda/graphs.hpp).
void blas_prepare(int index);

// C = A B + beta C on device `index`, all row-major in crescent's terms: C {M, N} with leading
// dimension ldc; A {M, K}, B {K, N} each either row-major (element (i, j) at p[i * ld + j]) or,
// when its flag is set, column-major (p[i + j * ld]), of dtype d (floating).
void gemm(int index, DType d, int M, int N, int K, const void* A, int lda, bool a_colmajor, const void* B, int ldb,
          bool b_colmajor, void* C, int ldc, double beta);
// The same for `batch` products whose operands are `sa`, `sb`, `sc` elements apart (sa or sb 0:
// one matrix broadcast over the batch): one cuBLAS call instead of one per matrix.
void gemm_batched(int index, DType d, int M, int N, int K, const void* A, int lda, bool a_colmajor, int64_t sa,
                  const void* B, int ldb, bool b_colmajor, int64_t sb, void* C, int ldc, int64_t sc, int batch, double beta);

}  // namespace cr::cuda
