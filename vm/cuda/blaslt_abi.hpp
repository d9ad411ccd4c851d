// cuBLASLt's ABI as crescent declares it (cublasLt.h, library_types.h, cublas_api.h): the values
// of the enums and the structs vm/cuda/blaslt.cpp uses, so that the library loads at run time
// without CUDA's headers. tests/cpp/test_blaslt.cpp compares each with the header's.
#pragma once
#include <cstddef>
#include <cstdint>

namespace cr::cuda::lt {

using Status = int;
using Handle = void*;  // cublasLtHandle_t, cublasLtMatmulDesc_t, ... (opaque pointers)
using Stream = void*;  // CUstream

constexpr Status kStatusInvalidValue = 7, kStatusNotSupported = 15;  // cublasStatus_t
constexpr int kR32F = 0, kR16F = 2, kR16BF = 14;         // cudaDataType_t
constexpr int kCompute32F = 68, kCompute32FTf32 = 77;  // cublasComputeType_t
constexpr int kOpN = 0, kOpT = 1;                      // cublasOperation_t
// cublasLtMatmulDescAttributes_t (TRANSA / TRANSB int32, EPILOGUE uint32, BIAS_POINTER void*)
constexpr int kDescTransA = 3, kDescTransB = 4, kDescEpilogue = 7, kDescBiasPointer = 8;
// cublasLtEpilogue_t
constexpr uint32_t kEpiDefault = 1, kEpiRelu = 2, kEpiBias = 4, kEpiGelu = 32;
// cublasLtMatmulPreferenceAttributes_t (MAX_WORKSPACE_BYTES uint64, MIN_ALIGNMENT_*_BYTES uint32)
constexpr int kPrefMaxWorkspace = 1, kPrefAlignA = 5, kPrefAlignB = 6, kPrefAlignC = 7, kPrefAlignD = 8;

struct Algo {  // cublasLtMatmulAlgo_t
  uint64_t data[8];
};
struct HeuristicResult {  // cublasLtMatmulHeuristicResult_t
  Algo algo;
  size_t workspace_size;
  Status state;
  float waves_count;
  int reserved[4];
};

struct Functions {
  Status (*create)(Handle*);
  Status (*desc_create)(Handle*, int compute, int scale);
  Status (*desc_set)(Handle, int attr, const void* buf, size_t size);
  Status (*layout_create)(Handle*, int type, uint64_t rows, uint64_t cols, int64_t ld);
  Status (*pref_create)(Handle*);
  Status (*pref_set)(Handle, int attr, const void* buf, size_t size);
  Status (*heuristic)(Handle, Handle desc, Handle a, Handle b, Handle c, Handle d, Handle pref, int requested,
                      HeuristicResult* results, int* returned);
  Status (*matmul)(Handle, Handle desc, const void* alpha, const void* A, Handle a, const void* B, Handle b,
                   const void* beta, const void* C, Handle c, void* D, Handle d, const Algo* algo, void* workspace,
                   size_t workspace_size, Stream stream);
};

}  // namespace cr::cuda::lt
