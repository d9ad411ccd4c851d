// vm/cuda/cudnn.hpp: cuDNN through dlopen. Our declarations (vm/cuda/cudnn_api.hpp) are checked
// against cuDNN's headers where the build found them (CRESCENT_CUDNN_HEADERS); the library loads
// without a driver (cudnnGetVersion), and without one every convolution raises why; with a GPU,
// each pass of a small convolution is checked by hand.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "vm/cuda/cudnn.hpp"
#include "vm/cuda/cudnn_api.hpp"
#include "vm/cuda/cudnn_graph.hpp"
#include "vm/cuda/cudnn_sdpa.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/error.hpp"

#ifdef CRESCENT_CUDNN_HEADERS
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cudnn.h>

namespace {
using namespace cr::cuda::cudnn_api;

// An argument (or result) of ours stands for the header's: pointers for pointers (our handles and
// descriptors are void*), else the same size and kind (enums as int).
template <class A, class B> constexpr bool same_arg() {
  if constexpr (std::is_pointer_v<A> || std::is_pointer_v<B>) {
    return std::is_pointer_v<A> && std::is_pointer_v<B>;
  } else {
    constexpr bool ia = std::is_integral_v<A> || std::is_enum_v<A>, ib = std::is_integral_v<B> || std::is_enum_v<B>;
    return sizeof(A) == sizeof(B) && ia == ib && std::is_floating_point_v<A> == std::is_floating_point_v<B>;
  }
}
template <class F, class G> struct compatible : std::false_type {};
template <class R1, class... A1, class R2, class... A2> struct compatible<R1 (*)(A1...), R2 (*)(A2...)> {
  static constexpr bool args() {
    if constexpr (sizeof...(A1) == sizeof...(A2)) return (same_arg<A1, A2>() && ...);
    else return false;
  }
  static constexpr bool value = same_arg<R1, R2>() && args();
};

#define CR_CHECK_DECL(name) \
  static_assert(compatible<decltype(Api::name), decltype(&cudnn##name)>::value, "cudnn" #name " differs from cudnn.h");
CR_CUDNN_FUNCTIONS(CR_CHECK_DECL)
#undef CR_CHECK_DECL

static_assert(kSuccess == CUDNN_STATUS_SUCCESS);
static_assert(kFloat == CUDNN_DATA_FLOAT && kDouble == CUDNN_DATA_DOUBLE && kHalf == CUDNN_DATA_HALF &&
              kBfloat16 == CUDNN_DATA_BFLOAT16);
static_assert(kNchw == CUDNN_TENSOR_NCHW && kCrossCorrelation == CUDNN_CROSS_CORRELATION);
static_assert(kDefaultMath == CUDNN_DEFAULT_MATH && kTensorOpMath == CUDNN_TENSOR_OP_MATH && kFmaMath == CUDNN_FMA_MATH);

// the backend (graph) API's enum values
static_assert(kConvolutionDesc == CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR && kEngineDesc == CUDNN_BACKEND_ENGINE_DESCRIPTOR &&
              kEngineCfgDesc == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR && kEngineHeurDesc == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR &&
              kExecutionPlanDesc == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR &&
              kConvForwardOpDesc == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR &&
              kConvBwdFilterOpDesc == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR &&
              kConvBwdDataOpDesc == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR &&
              kOperationGraphDesc == CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR &&
              kVariantPackDesc == CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR && kTensorDesc == CUDNN_BACKEND_TENSOR_DESCRIPTOR);
static_assert(kTypeHandle == CUDNN_TYPE_HANDLE && kTypeDataType == CUDNN_TYPE_DATA_TYPE && kTypeInt64 == CUDNN_TYPE_INT64 &&
              kTypeFloat == CUDNN_TYPE_FLOAT && kTypeDouble == CUDNN_TYPE_DOUBLE && kTypeVoidPtr == CUDNN_TYPE_VOID_PTR &&
              kTypeConvMode == CUDNN_TYPE_CONVOLUTION_MODE && kTypeHeurMode == CUDNN_TYPE_HEUR_MODE &&
              kTypeNumericalNote == CUDNN_TYPE_NUMERICAL_NOTE && kTypeBackendDesc == CUDNN_TYPE_BACKEND_DESCRIPTOR);
static_assert(kHeurModeInstant == CUDNN_HEUR_MODE_INSTANT && kHeurModeFallback == CUDNN_HEUR_MODE_FALLBACK &&
              kHeurModeA == CUDNN_HEUR_MODE_A &&
              kNoteTensorCore == CUDNN_NUMERICAL_NOTE_TENSOR_CORE &&
              kNoteDownConvertInputs == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS &&
              kNoteNondeterministic == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);
static_assert(kAttrConvCompType == CUDNN_ATTR_CONVOLUTION_COMP_TYPE && kAttrConvMode == CUDNN_ATTR_CONVOLUTION_CONV_MODE &&
              kAttrConvDilations == CUDNN_ATTR_CONVOLUTION_DILATIONS &&
              kAttrConvFilterStrides == CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES &&
              kAttrConvPostPaddings == CUDNN_ATTR_CONVOLUTION_POST_PADDINGS &&
              kAttrConvPrePaddings == CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS &&
              kAttrConvSpatialDims == CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS);
static_assert(kAttrHeurMode == CUDNN_ATTR_ENGINEHEUR_MODE && kAttrHeurOperationGraph == CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH &&
              kAttrHeurResults == CUDNN_ATTR_ENGINEHEUR_RESULTS && kAttrEngineCfgEngine == CUDNN_ATTR_ENGINECFG_ENGINE &&
              kAttrPlanHandle == CUDNN_ATTR_EXECUTION_PLAN_HANDLE &&
              kAttrPlanEngineConfig == CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG &&
              kAttrPlanWorkspaceSize == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE);
static_assert(kAttrConvFwdAlpha == CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA &&
              kAttrConvFwdBeta == CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA &&
              kAttrConvFwdConvDesc == CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC &&
              kAttrConvFwdW == CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W &&
              kAttrConvFwdX == CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X &&
              kAttrConvFwdY == CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y);
static_assert(kAttrConvBwdDataAlpha == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA &&
              kAttrConvBwdDataBeta == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA &&
              kAttrConvBwdDataConvDesc == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC &&
              kAttrConvBwdDataW == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W &&
              kAttrConvBwdDataDx == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX &&
              kAttrConvBwdDataDy == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY);
static_assert(kAttrConvBwdFilterAlpha == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA &&
              kAttrConvBwdFilterBeta == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA &&
              kAttrConvBwdFilterConvDesc == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC &&
              kAttrConvBwdFilterDw == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW &&
              kAttrConvBwdFilterX == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X &&
              kAttrConvBwdFilterDy == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY);
static_assert(kAttrGraphHandle == CUDNN_ATTR_OPERATIONGRAPH_HANDLE && kAttrGraphOps == CUDNN_ATTR_OPERATIONGRAPH_OPS &&
              kAttrTensorByteAlignment == CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT &&
              kAttrTensorDataType == CUDNN_ATTR_TENSOR_DATA_TYPE && kAttrTensorDimensions == CUDNN_ATTR_TENSOR_DIMENSIONS &&
              kAttrTensorStrides == CUDNN_ATTR_TENSOR_STRIDES && kAttrTensorUniqueId == CUDNN_ATTR_TENSOR_UNIQUE_ID);
static_assert(kAttrVariantPackUniqueIds == CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS &&
              kAttrVariantPackDataPointers == CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS &&
              kAttrVariantPackWorkspace == CUDNN_ATTR_VARIANT_PACK_WORKSPACE &&
              kAttrEngineGlobalIndex == CUDNN_ATTR_ENGINE_GLOBAL_INDEX &&
              kAttrEngineNumericalNote == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE);
// attention's graphs (vm/cuda/cudnn_sdpa.cpp)
static_assert(kInt32 == CUDNN_DATA_INT32 && kBoolean == CUDNN_DATA_BOOLEAN && kTypeBoolean == CUDNN_TYPE_BOOLEAN &&
              kTypePointwiseMode == CUDNN_TYPE_POINTWISE_MODE &&
              kTypeReductionOperator == CUDNN_TYPE_REDUCTION_OPERATOR_TYPE &&
              kAttrTensorIsVirtual == CUDNN_ATTR_TENSOR_IS_VIRTUAL &&
              kAttrTensorIsByValue == CUDNN_ATTR_TENSOR_IS_BY_VALUE);
static_assert(kPointwiseDesc == CUDNN_BACKEND_POINTWISE_DESCRIPTOR &&
              kPointwiseOpDesc == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR &&
              kMatmulDesc == CUDNN_BACKEND_MATMUL_DESCRIPTOR &&
              kMatmulOpDesc == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR &&
              kReductionDesc == CUDNN_BACKEND_REDUCTION_DESCRIPTOR &&
              kReductionOpDesc == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR &&
              kReshapeOpDesc == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
static_assert(kAttrPointwiseMode == CUDNN_ATTR_POINTWISE_MODE &&
              kAttrPointwiseMathPrec == CUDNN_ATTR_POINTWISE_MATH_PREC &&
              kAttrPointwiseAxis == CUDNN_ATTR_POINTWISE_AXIS &&
              kAttrPointwiseOpDesc == CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR &&
              kAttrPointwiseOpX == CUDNN_ATTR_OPERATION_POINTWISE_XDESC &&
              kAttrPointwiseOpB == CUDNN_ATTR_OPERATION_POINTWISE_BDESC &&
              kAttrPointwiseOpY == CUDNN_ATTR_OPERATION_POINTWISE_YDESC &&
              kAttrPointwiseOpT == CUDNN_ATTR_OPERATION_POINTWISE_TDESC &&
              kAttrPointwiseOpAlpha1 == CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1 &&
              kAttrPointwiseOpAlpha2 == CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2);
static_assert(kAttrMatmulCompType == CUDNN_ATTR_MATMUL_COMP_TYPE &&
              kAttrMatmulOpA == CUDNN_ATTR_OPERATION_MATMUL_ADESC &&
              kAttrMatmulOpB == CUDNN_ATTR_OPERATION_MATMUL_BDESC &&
              kAttrMatmulOpC == CUDNN_ATTR_OPERATION_MATMUL_CDESC &&
              kAttrMatmulOpDesc == CUDNN_ATTR_OPERATION_MATMUL_DESC &&
              kAttrReductionOperator == CUDNN_ATTR_REDUCTION_OPERATOR &&
              kAttrReductionCompType == CUDNN_ATTR_REDUCTION_COMP_TYPE &&
              kAttrReductionIsDeterministic == CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC &&
              kAttrReductionOpX == CUDNN_ATTR_OPERATION_REDUCTION_XDESC &&
              kAttrReductionOpY == CUDNN_ATTR_OPERATION_REDUCTION_YDESC &&
              kAttrReductionOpDesc == CUDNN_ATTR_OPERATION_REDUCTION_DESC &&
              kAttrReshapeOpX == CUDNN_ATTR_OPERATION_RESHAPE_XDESC &&
              kAttrReshapeOpY == CUDNN_ATTR_OPERATION_RESHAPE_YDESC);
static_assert(kPwAdd == CUDNN_POINTWISE_ADD && kPwMul == CUDNN_POINTWISE_MUL && kPwDiv == CUDNN_POINTWISE_DIV &&
              kPwSub == CUDNN_POINTWISE_SUB && kPwExp == CUDNN_POINTWISE_EXP && kPwLog == CUDNN_POINTWISE_LOG &&
              kPwIdentity == CUDNN_POINTWISE_IDENTITY && kPwCmpGe == CUDNN_POINTWISE_CMP_GE &&
              kPwCmpLt == CUDNN_POINTWISE_CMP_LT && kPwGenIndex == CUDNN_POINTWISE_GEN_INDEX &&
              kPwBinarySelect == CUDNN_POINTWISE_BINARY_SELECT && kReduceAdd == CUDNN_REDUCE_TENSOR_ADD &&
              kReduceMax == CUDNN_REDUCE_TENSOR_MAX);
static_assert(sizeof(cudnnBackendHeurMode_t) == sizeof(int) && sizeof(cudnnBackendNumericalNote_t) == sizeof(int) &&
              sizeof(cudnnDataType_t) == sizeof(int) && sizeof(cudnnConvolutionMode_t) == sizeof(int));

template <class P> constexpr bool same_perf() {
  return sizeof(P) == sizeof(AlgoPerf) && offsetof(P, status) == offsetof(AlgoPerf, status) &&
         offsetof(P, memory) == offsetof(AlgoPerf, memory) && offsetof(P, mathType) == offsetof(AlgoPerf, math_type) &&
         sizeof(P::algo) == sizeof(int);
}
static_assert(same_perf<cudnnConvolutionFwdAlgoPerf_t>() && same_perf<cudnnConvolutionBwdDataAlgoPerf_t>() &&
              same_perf<cudnnConvolutionBwdFilterAlgoPerf_t>());
}  // namespace
#pragma GCC diagnostic pop
#endif

using namespace cr;

TEST_CASE("cudnn: the library loads and is cuDNN 9", "[cudnn]") {
  std::string why;
  const int v = cuda::cudnn_version(&why);
  if (v == 0) {
    CHECK(why.find("libcudnn") != std::string::npos);
    WARN("skipped: " << why);
    return;
  }
  CHECK(v / 10000 == 9);
#ifdef CRESCENT_CUDNN_HEADERS
  if (v / 100 != CUDNN_VERSION / 100) WARN("the loaded cuDNN is " << v << ", the headers " << CUDNN_VERSION);
#endif
}

TEST_CASE("cudnn: without a driver a convolution raises why", "[cudnn]") {
  std::string why;
  if (cuda::cudnn_available(&why)) return;
  CHECK(!why.empty());
  CHECK(!cuda::cudnn_usable());
  cuda::ConvShape s;
  s.n = s.c = s.h = s.w = s.k = s.r = s.s = s.oh = s.ow = 1;
  for (bool graph : {false, true}) {
    try {
      if (graph) cuda::cudnn_graph_conv(0, cuda::ConvPass::forward, s, cuda::contiguous_strides(s), nullptr, nullptr, nullptr);
      else cuda::cudnn_conv(0, cuda::ConvPass::forward, s, nullptr, nullptr, nullptr);
      FAIL("the convolution did not raise");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("convolutions through cuDNN need cuDNN: " + why) != std::string::npos);
    }
  }
}

// cuDNN validates a graph's tensors and operations without a device (9.8 on): attention's graphs
// as vm/cuda/cudnn_sdpa.cpp builds them, forward with and without the logsumexp, backward, causal
// or not, float16 / bfloat16, head sizes 64 / 128, a strided q as GPT-2's head views.
TEST_CASE("cudnn: attention's forward and backward graphs finalize", "[cudnn]") {
  const int v = cuda::cudnn_version();
  if (v < 90800) {
    WARN("skipped: cuDNN " << v << " (graphs without a handle need 9.8)");
    return;
  }
  char* fake = reinterpret_cast<char*>(uintptr_t(1) << 20);  // (never dereferenced: alignments only)
  for (DType d : {DType::f16, DType::bf16})
    for (int64_t e : {64, 128})
      for (bool causal : {false, true})
        for (int pass = 0; pass < 3; ++pass) {
          cuda::SdpaCall c;
          c.dtype = d, c.b = 2, c.h = 3, c.s_q = 200, c.s_kv = 130, c.d = e, c.scale = 0.125, c.causal = causal;
          auto dense = [&](int64_t s) { return cuda::SdpaOperand{fake, {3 * s * e, s * e, e, 1}}; };
          c.q = {fake, {200 * 9 * e, e, 9 * e, 1}};  // (a {b, s, 3, h, e} projection's q)
          c.k = c.v = c.dk = c.dv = dense(130);
          c.out = c.dout = c.dq = dense(200);
          c.stats = pass == 1 ? nullptr : fake;
          INFO("dtype " << dtype_name(d) << " e " << e << " causal " << causal << " pass " << pass);
          CHECK_NOTHROW(cuda::cudnn_sdpa_check_graph(c, pass == 2));
        }
}

TEST_CASE("cudnn: the switches of T.backends.cudnn", "[cudnn]") {
  const bool tf32 = cuda::set_cudnn_flag(cuda::CudnnFlag::allow_tf32, false);
  CHECK(!cuda::cudnn_flag(cuda::CudnnFlag::allow_tf32));
  CHECK(!cuda::set_cudnn_flag(cuda::CudnnFlag::allow_tf32, tf32));
  CHECK(cuda::cudnn_flag(cuda::CudnnFlag::allow_tf32) == tf32);
  const cuda::CudnnApi api = cuda::set_cudnn_api_setting(cuda::CudnnApi::legacy);
  CHECK(cuda::cudnn_api_setting() == cuda::CudnnApi::legacy);
  CHECK(cuda::set_cudnn_api_setting(api) == cuda::CudnnApi::legacy);
  CHECK(cuda::cudnn_api_setting() == api);
}

namespace {
// pass 0, 1 or 2 of s on float32 operands through the legacy API (NCHW), or the graph API with
// the operands' strides `graph`.
std::vector<float> on_device(int pass, const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& y,
                             const cuda::ConvShape& s, const cuda::ConvStrides* graph = nullptr) {
  const std::vector<float>* host[3] = {&x, &w, &y};
  void* dev[3];
  for (int i = 0; i < 3; ++i) {
    dev[i] = cuda::device_alloc(host[i]->size() * sizeof(float), 0);
    cuda::copy_to_device(dev[i], host[i]->data(), host[i]->size() * sizeof(float), 0);
  }
  if (graph) CHECK(cuda::cudnn_graph_conv(0, cuda::ConvPass(pass), s, *graph, dev[0], dev[1], dev[2]));
  else cuda::cudnn_conv(0, cuda::ConvPass(pass), s, dev[0], dev[1], dev[2]);
  const int out = pass == 0 ? 2 : pass == 1 ? 0 : 1;
  std::vector<float> r(host[out]->size());
  cuda::copy_to_host(r.data(), dev[out], r.size() * sizeof(float), 0);
  for (int i = 0; i < 3; ++i) cuda::device_free(dev[i], host[i]->size() * sizeof(float), 0);
  return r;
}
bool close(const std::vector<float>& got, const std::vector<float>& want) {  // (an FFT algorithm rounds)
  for (size_t i = 0; i < want.size(); ++i)
    if (got.size() != want.size() || std::abs(got[i] - want[i]) > 1e-4f) return false;
  return true;
}
}  // namespace

TEST_CASE("cudnn: forward, backward data and backward filter of a 2x2 kernel, through both APIs", "[cudnn]") {
  std::string why;
  if (!cuda::cudnn_available(&why)) {
    WARN("skipped: " << why);
    return;
  }
  const bool tf32 = cuda::set_cudnn_flag(cuda::CudnnFlag::allow_tf32, false);
  cuda::ConvShape s;  // x {1, 1, 3, 3} = 1..9, w {1, 1, 2, 2}, y {1, 1, 2, 2}
  s.n = s.c = s.k = 1, s.h = s.w = 3, s.r = s.s = 2, s.oh = s.ow = 2;
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w = {1, 0, 0, 2}, y = {1, 0, 0, 1};
  const cuda::ConvStrides nchw = cuda::contiguous_strides(s);
  for (const cuda::ConvStrides* graph : {static_cast<const cuda::ConvStrides*>(nullptr), &nchw}) {
    INFO((graph ? "graph API" : "legacy API"));
    // y[i][j] = x[i][j] + 2 x[i+1][j+1]
    CHECK(close(on_device(0, x, w, std::vector<float>(4), s, graph), {11, 14, 20, 23}));
    // dx = the windows of w placed at y's ones: (0,0) and (1,1)
    CHECK(close(on_device(1, std::vector<float>(9), w, y, s, graph), {1, 0, 0, 0, 3, 0, 0, 0, 2}));
    // dw[a][b] = x[a][b] + x[a+1][b+1]
    CHECK(close(on_device(2, x, std::vector<float>(4), y, s, graph), {6, 8, 12, 14}));
  }
  cuda::set_cudnn_flag(cuda::CudnnFlag::allow_tf32, tf32);
}

TEST_CASE("cudnn: the graph API takes channels-last operands by their strides (PyTorch's channels_last)", "[cudnn]") {
  std::string why;
  if (!cuda::cudnn_available(&why)) {
    WARN("skipped: " << why);
    return;
  }
  const bool tf32 = cuda::set_cudnn_flag(cuda::CudnnFlag::allow_tf32, false);
  cuda::ConvShape s;  // x {1, 2, 2, 2}: channels 1..4 and 5..8; w {2, 2, 1, 1}: {1, 10} and {100, 1000}
  s.n = 1, s.c = s.k = s.h = s.w = s.oh = s.ow = 2, s.r = s.s = 1;
  const std::vector<float> x_nhwc = {1, 5, 2, 6, 3, 7, 4, 8}, w = {1, 10, 100, 1000};  // (KRSC = KCRS at 1x1)
  cuda::ConvStrides st = cuda::contiguous_strides(s);
  const int64_t nhwc[4] = {8, 1, 4, 2}, krsc[4] = {2, 1, 2, 2};
  std::copy(nhwc, nhwc + 4, st.x), std::copy(krsc, krsc + 4, st.w), std::copy(nhwc, nhwc + 4, st.y);
  CHECK(close(on_device(0, x_nhwc, w, std::vector<float>(8), s, &st), {51, 5100, 62, 6200, 73, 7300, 84, 8400}));
  cuda::set_cudnn_flag(cuda::CudnnFlag::allow_tf32, tf32);
}

TEST_CASE("cudnn: benchmark mode's timed plans, and two shapes' plans run from two threads at once", "[cudnn]") {
  std::string why;
  if (!cuda::cudnn_available(&why)) {
    WARN("skipped: " << why);
    return;
  }
  const bool tf32 = cuda::set_cudnn_flag(cuda::CudnnFlag::allow_tf32, false);
  // a {1, 1, h, h} input of ones through a 2x2 kernel of ones through the graph API: every output
  // is 4 (no Catch2 assertion inside: the second thread calls it too)
  auto fours = [](int64_t h) {
    cuda::ConvShape s;
    s.n = s.c = s.k = 1, s.h = s.w = h, s.r = s.s = 2, s.oh = s.ow = h - 1;
    const size_t nx = size_t(h * h), ny = size_t((h - 1) * (h - 1));
    const std::vector<float> ones(nx, 1.0f);
    void* x = cuda::device_alloc(nx * sizeof(float), 0);
    void* w = cuda::device_alloc(4 * sizeof(float), 0);
    void* y = cuda::device_alloc(ny * sizeof(float), 0);
    cuda::copy_to_device(x, ones.data(), nx * sizeof(float), 0);
    cuda::copy_to_device(w, ones.data(), 4 * sizeof(float), 0);
    std::vector<float> got(ny);
    const bool ran = cuda::cudnn_graph_conv(0, cuda::ConvPass::forward, s, cuda::contiguous_strides(s), x, w, y);
    if (ran) cuda::copy_to_host(got.data(), y, ny * sizeof(float), 0);
    cuda::device_free(x, nx * sizeof(float), 0), cuda::device_free(w, 4 * sizeof(float), 0);
    cuda::device_free(y, ny * sizeof(float), 0);
    return ran && close(got, std::vector<float>(ny, 4.0f));
  };
  const bool bench = cuda::set_cudnn_flag(cuda::CudnnFlag::benchmark, true);
  CHECK(fours(9));  // (its plan timed: the fastest of the first engine configs)
  CHECK(fours(9));
  cuda::set_cudnn_flag(cuda::CudnnFlag::benchmark, bench);
  bool ok[2] = {true, true};
  std::thread other([&] {
    try {
      for (int i = 0; i < 20; ++i) ok[1] = ok[1] && fours(17);
    } catch (const std::exception&) {
      ok[1] = false;
    }
  });
  for (int i = 0; i < 20; ++i) ok[0] = ok[0] && fours(13);
  other.join();
  CHECK(ok[0]);
  CHECK(ok[1]);
  cuda::set_cudnn_flag(cuda::CudnnFlag::allow_tf32, tf32);
}
