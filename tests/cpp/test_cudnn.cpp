// vm/cuda/cudnn.hpp: cuDNN through dlopen. Our declarations (vm/cuda/cudnn_api.hpp) are checked
// against cuDNN's headers where the build found them (CRESCENT_CUDNN_HEADERS); the library loads
// without a driver (cudnnGetVersion), and without one every convolution raises why.
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <type_traits>

#include "vm/cuda/cudnn.hpp"
#include "vm/cuda/cudnn_api.hpp"
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
  try {
    cuda::cudnn_conv(0, cuda::ConvPass::forward, s, nullptr, nullptr, nullptr);
    FAIL("cudnn_conv did not raise");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("convolutions through cuDNN need cuDNN: " + why) != std::string::npos);
  }
}

TEST_CASE("cudnn: the switches of T.backends.cudnn", "[cudnn]") {
  const bool tf32 = cuda::set_cudnn_flag(cuda::CudnnFlag::allow_tf32, false);
  CHECK(!cuda::cudnn_flag(cuda::CudnnFlag::allow_tf32));
  CHECK(!cuda::set_cudnn_flag(cuda::CudnnFlag::allow_tf32, tf32));
  CHECK(cuda::cudnn_flag(cuda::CudnnFlag::allow_tf32) == tf32);
}
