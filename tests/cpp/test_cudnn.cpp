// vm/cuda/cudnn.hpp: cuDNN through dlopen. Our declarations (vm/cuda/cudnn_api.hpp) are checked
// against cuDNN's headers where the build found them (CRESCENT_CUDNN_HEADERS); the library loads
// without a driver (cudnnGetVersion), and without one every convolution raises why; with a GPU,
// each pass of a small convolution is checked by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include "vm/cuda/cudnn.hpp"
#include "vm/cuda/cudnn_api.hpp"
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
static_assert(kNchw == CUDNN_TENSOR_NCHW && kNhwc == CUDNN_TENSOR_NHWC && kCrossCorrelation == CUDNN_CROSS_CORRELATION);
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

namespace {
std::vector<float> on_device(int pass, const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& y,
                             const cuda::ConvShape& s) {
  const std::vector<float>* host[3] = {&x, &w, &y};
  void* dev[3];
  for (int i = 0; i < 3; ++i) {
    dev[i] = cuda::device_alloc(host[i]->size() * sizeof(float), 0);
    cuda::copy_to_device(dev[i], host[i]->data(), host[i]->size() * sizeof(float), 0);
  }
  CHECK(cuda::cudnn_conv(0, cuda::ConvPass(pass), s, dev[0], dev[1], dev[2]));  // (no layout refused)
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

TEST_CASE("cudnn: forward, backward data and backward filter of a 2x2 kernel", "[cudnn]") {
  std::string why;
  if (!cuda::cudnn_available(&why)) {
    WARN("skipped: " << why);
    return;
  }
  const bool tf32 = cuda::set_cudnn_flag(cuda::CudnnFlag::allow_tf32, false);
  cuda::ConvShape s;  // x {1, 1, 3, 3} = 1..9, w {1, 1, 2, 2}, y {1, 1, 2, 2}
  s.n = s.c = s.k = 1, s.h = s.w = 3, s.r = s.s = 2, s.oh = s.ow = 2;
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w = {1, 0, 0, 2}, y = {1, 0, 0, 1};
  // y[i][j] = x[i][j] + 2 x[i+1][j+1]
  CHECK(close(on_device(0, x, w, std::vector<float>(4), s), {11, 14, 20, 23}));
  // dx = the windows of w placed at y's ones: (0,0) and (1,1)
  CHECK(close(on_device(1, std::vector<float>(9), w, y, s), {1, 0, 0, 0, 3, 0, 0, 0, 2}));
  // dw[a][b] = x[a][b] + x[a+1][b+1]
  CHECK(close(on_device(2, x, std::vector<float>(4), y, s), {6, 8, 12, 14}));
  cuda::set_cudnn_flag(cuda::CudnnFlag::allow_tf32, tf32);
}

TEST_CASE("cudnn: a forward pass in the channels-last layouts", "[cudnn]") {
  std::string why;
  if (!cuda::cudnn_available(&why)) {
    WARN("skipped: " << why);
    return;
  }
  const bool tf32 = cuda::set_cudnn_flag(cuda::CudnnFlag::allow_tf32, false);
  cuda::ConvShape s;  // x {1, 2, 2, 2}: channels 1..4 and 5..8; w {2, 2, 1, 1}: {1, 10} and {100, 1000}
  s.n = 1, s.c = s.k = s.h = s.w = s.oh = s.ow = 2, s.r = s.s = 1;
  const std::vector<float> x_nhwc = {1, 5, 2, 6, 3, 7, 4, 8}, w = {1, 10, 100, 1000};  // (KRSC = KCRS at 1x1)
  s.layout = cuda::ConvLayout::nhwc;
  CHECK(close(on_device(0, x_nhwc, w, std::vector<float>(8), s), {51, 5100, 62, 6200, 73, 7300, 84, 8400}));
  s.layout = cuda::ConvLayout::nhwc_nchw;
  CHECK(close(on_device(0, x_nhwc, w, std::vector<float>(8), s), {51, 62, 73, 84, 5100, 6200, 7300, 8400}));
  cuda::set_cudnn_flag(cuda::CudnnFlag::allow_tf32, tf32);
}
