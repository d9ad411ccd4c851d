// The matrix product core of vm/ops/linalg.cpp, for the ops built on products (conv2d).
#pragma once
#include "vm/tensor.hpp"

namespace cr {

// out {batch.., M, N} (contiguous, freshly made) = a {batchA.., M, K} @ b {batchB.., K, N},
// plus out's current values when accumulate. Batch dims broadcast to out's. OpenBLAS for
// float32 / float64 on the CPU, cuBLAS on CUDA, a generic kernel for the other dtypes.
void matmul_into(Tensor out, Tensor a, Tensor b, bool accumulate);

}  // namespace cr
