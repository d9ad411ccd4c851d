// vm/cuda/blaslt_abi.hpp (cuBLASLt as crescent declares it, loaded with dlopen) against
// cublasLt.h where the CUDA toolkit is installed: enum values, struct layouts, and each function's
// parameters (count, sizes, pointer or not: our handles are void*).
#include <catch2/catch.hpp>

#include <cstddef>
#include <type_traits>

#include "vm/cuda/blaslt_abi.hpp"

#ifdef CRESCENT_HAVE_CUBLASLT_H
#include <cublasLt.h>

namespace {

template <class A, class B> constexpr bool same_slot() {
  return sizeof(A) == sizeof(B) && std::is_pointer_v<A> == std::is_pointer_v<B>;
}
template <class F, class G> struct SameShape : std::false_type {};
template <class R, class... A, class S, class... B>
struct SameShape<R (*)(A...), S (*)(B...)> {
  static constexpr bool value = sizeof...(A) == sizeof...(B) && same_slot<R, S>() && (same_slot<A, B>() && ...);
};
#define CR_SAME_SHAPE(ours, theirs) SameShape<decltype(lt::Functions::ours), decltype(&theirs)>::value

}  // namespace

TEST_CASE("cuBLASLt declarations match cublasLt.h", "[cuda][blaslt]") {
  using namespace cr::cuda;
  STATIC_REQUIRE(lt::kR32F == CUDA_R_32F);
  STATIC_REQUIRE(lt::kR16F == CUDA_R_16F);
  STATIC_REQUIRE(lt::kR16BF == CUDA_R_16BF);
  STATIC_REQUIRE(lt::kCompute32F == CUBLAS_COMPUTE_32F);
  STATIC_REQUIRE(lt::kCompute32FTf32 == CUBLAS_COMPUTE_32F_FAST_TF32);
  STATIC_REQUIRE(lt::kOpN == CUBLAS_OP_N);
  STATIC_REQUIRE(lt::kOpT == CUBLAS_OP_T);
  STATIC_REQUIRE(lt::kDescTransA == CUBLASLT_MATMUL_DESC_TRANSA);
  STATIC_REQUIRE(lt::kDescTransB == CUBLASLT_MATMUL_DESC_TRANSB);
  STATIC_REQUIRE(lt::kDescEpilogue == CUBLASLT_MATMUL_DESC_EPILOGUE);
  STATIC_REQUIRE(lt::kDescBiasPointer == CUBLASLT_MATMUL_DESC_BIAS_POINTER);
  STATIC_REQUIRE(lt::kEpiDefault == CUBLASLT_EPILOGUE_DEFAULT);
  STATIC_REQUIRE(lt::kEpiRelu == CUBLASLT_EPILOGUE_RELU);
  STATIC_REQUIRE(lt::kEpiBias == CUBLASLT_EPILOGUE_BIAS);
  STATIC_REQUIRE(lt::kEpiGelu == CUBLASLT_EPILOGUE_GELU);
  STATIC_REQUIRE((lt::kEpiRelu | lt::kEpiBias) == CUBLASLT_EPILOGUE_RELU_BIAS);
  STATIC_REQUIRE((lt::kEpiGelu | lt::kEpiBias) == CUBLASLT_EPILOGUE_GELU_BIAS);
  STATIC_REQUIRE(lt::kPrefMaxWorkspace == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES);
  STATIC_REQUIRE(lt::kPrefAlignA == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES);
  STATIC_REQUIRE(lt::kPrefAlignB == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES);
  STATIC_REQUIRE(lt::kPrefAlignC == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES);
  STATIC_REQUIRE(lt::kPrefAlignD == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES);

  STATIC_REQUIRE(lt::kStatusInvalidValue == CUBLAS_STATUS_INVALID_VALUE);
  STATIC_REQUIRE(lt::kStatusNotSupported == CUBLAS_STATUS_NOT_SUPPORTED);
  STATIC_REQUIRE(sizeof(lt::Algo) == sizeof(cublasLtMatmulAlgo_t));
  STATIC_REQUIRE(sizeof(lt::HeuristicResult) == sizeof(cublasLtMatmulHeuristicResult_t));
  STATIC_REQUIRE(offsetof(lt::HeuristicResult, workspace_size) == offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize));
  STATIC_REQUIRE(offsetof(lt::HeuristicResult, state) == offsetof(cublasLtMatmulHeuristicResult_t, state));
  STATIC_REQUIRE(offsetof(lt::HeuristicResult, waves_count) == offsetof(cublasLtMatmulHeuristicResult_t, wavesCount));

  STATIC_REQUIRE(CR_SAME_SHAPE(create, cublasLtCreate));
  STATIC_REQUIRE(CR_SAME_SHAPE(desc_create, cublasLtMatmulDescCreate));
  STATIC_REQUIRE(CR_SAME_SHAPE(desc_set, cublasLtMatmulDescSetAttribute));
  STATIC_REQUIRE(CR_SAME_SHAPE(layout_create, cublasLtMatrixLayoutCreate));
  STATIC_REQUIRE(CR_SAME_SHAPE(pref_create, cublasLtMatmulPreferenceCreate));
  STATIC_REQUIRE(CR_SAME_SHAPE(pref_set, cublasLtMatmulPreferenceSetAttribute));
  STATIC_REQUIRE(CR_SAME_SHAPE(heuristic, cublasLtMatmulAlgoGetHeuristic));
  STATIC_REQUIRE(CR_SAME_SHAPE(matmul, cublasLtMatmul));
}
#else
TEST_CASE("cuBLASLt declarations match cublasLt.h", "[cuda][blaslt]") {
  WARN("cublasLt.h not found: vm/cuda/blaslt_abi.hpp is not checked here");
}
#endif
