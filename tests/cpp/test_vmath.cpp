// vm/kernels/vmath.hpp: ulp error of every function in float and double against long double
// references on random and edge inputs, and the IEEE special values. The sample count per range
// can be raised with CRESCENT_VMATH_SAMPLES (default 4000) for a longer soak.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "vm/kernels/vmath.hpp"

using namespace cr;
using LD = long double;

namespace {

template <class T> using lim = std::numeric_limits<T>;

// |y - ref| in units of the last place of T at ref (subnormal ulp below the normal range);
// inf counts as 2^emax so that an overflow near the boundary is measured, not infinite.
template <class T> double ulp_error(T y, LD ref) {
  if (std::isnan(ref)) return std::isnan(y) ? 0.0 : 1e30;
  if (std::isnan(y)) return 1e30;
  const LD top = std::ldexp(LD(1), lim<T>::max_exponent);
  LD yy = std::isinf(y) ? std::copysign(top, LD(y)) : LD(y);
  if (std::fabs(ref) >= top) ref = std::copysign(top, ref);
  int e = ref == 0 ? lim<T>::min_exponent - 1 : std::max(std::ilogb(ref), lim<T>::min_exponent - 1);
  return double(std::fabs(yy - ref) / std::ldexp(LD(1), e - (lim<T>::digits - 1)));
}

size_t samples() {
  const char* s = std::getenv("CRESCENT_VMATH_SAMPLES");
  return s ? std::strtoul(s, nullptr, 10) : 4000;
}

// Uniform values, uniform bit patterns and log-uniform magnitudes within [lo, hi], plus the
// range ends and the smallest numbers.
template <class T> std::vector<T> inputs(double lo, double hi, uint64_t seed) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> uni(lo, hi);
  double top = std::log2(std::max(std::fabs(lo), std::fabs(hi)));
  std::uniform_real_distribution<double> mag(lim<T>::min_exponent - 30.0, top);
  std::vector<T> v;
  size_t n = samples();
  auto keep = [&](T x) {
    if (x >= T(lo) && x <= T(hi)) v.push_back(x);
  };
  for (size_t i = 0; i < n; ++i) {
    keep(T(uni(g)));
    U b = U(g());
    T x;
    std::memcpy(&x, &b, sizeof x);
    keep(x);
    T m = T(std::exp2(mag(g)));
    keep(g() & 1 ? m : -m);
  }
  for (T x : {T(lo), T(hi), T(0), -T(0), lim<T>::denorm_min(), -lim<T>::denorm_min(), lim<T>::min(), -lim<T>::min(),
              T(1), T(-1), T(0.5), T(-0.5)})
    keep(x);
  return v;
}

template <class T, class F, class R> double max_ulp(F f, R ref, const std::vector<T>& xs, T* worst_x) {
  double worst = 0;
  for (T x : xs) {
    double e = ulp_error(f(x), ref(LD(x)));
    if (e > worst) {
      worst = e;
      *worst_x = x;
    }
  }
  return worst;
}

#define CHECK_ULP(T, FN, REF, LO, HI, SEED)                                                           \
  do {                                                                                                \
    T wx = 0;                                                                                         \
    double e = max_ulp<T>([](T x) { return vmath::FN(x); }, REF, inputs<T>(LO, HI, SEED), &wx);          \
    INFO(#FN << "<" << (sizeof(T) == 4 ? "float" : "double") << "> on [" << LO << ", " << HI          \
              << "]: " << e << " ulp at x = " << double(wx));                                         \
    CHECK(e <= 2.0);                                                                                  \
  } while (0)

template <class T> void accuracy() {
  const double big = double(lim<T>::max()), trig = double(vmath::kTrigLimit<T>) * 0.99;
  auto sigmoid = [](LD x) { return 1 / (1 + std::exp(-x)); };
  CHECK_ULP(T, exp, [](LD x) { return std::exp(x); }, -big, big, 1);
  CHECK_ULP(T, exp, [](LD x) { return std::exp(x); }, -800.0, 800.0, 2);
  CHECK_ULP(T, exp2, [](LD x) { return std::exp2(x); }, -1100.0, 1100.0, 3);
  CHECK_ULP(T, expm1, [](LD x) { return std::expm1(x); }, -800.0, 800.0, 4);
  CHECK_ULP(T, expm1, [](LD x) { return std::expm1(x); }, -2.0, 2.0, 5);
  CHECK_ULP(T, log, [](LD x) { return std::log(x); }, 0.0, big, 6);
  CHECK_ULP(T, log, [](LD x) { return std::log(x); }, 0.5, 2.0, 7);
  CHECK_ULP(T, log2, [](LD x) { return std::log2(x); }, 0.0, big, 8);
  CHECK_ULP(T, log2, [](LD x) { return std::log2(x); }, 0.5, 2.0, 9);
  CHECK_ULP(T, log1p, [](LD x) { return std::log1p(x); }, -1.0, big, 10);
  CHECK_ULP(T, log1p, [](LD x) { return std::log1p(x); }, -1.0, 3.0, 11);
  CHECK_ULP(T, sin, [](LD x) { return std::sin(x); }, -10.0, 10.0, 12);
  CHECK_ULP(T, sin, [](LD x) { return std::sin(x); }, -trig, trig, 13);
  CHECK_ULP(T, cos, [](LD x) { return std::cos(x); }, -10.0, 10.0, 14);
  CHECK_ULP(T, cos, [](LD x) { return std::cos(x); }, -trig, trig, 15);
  CHECK_ULP(T, tan, [](LD x) { return std::tan(x); }, -10.0, 10.0, 16);
  CHECK_ULP(T, tan, [](LD x) { return std::tan(x); }, -trig, trig, 17);
  CHECK_ULP(T, tanh, [](LD x) { return std::tanh(x); }, -30.0, 30.0, 18);
  CHECK_ULP(T, tanh, [](LD x) { return std::tanh(x); }, -big, big, 19);
  CHECK_ULP(T, sigmoid, sigmoid, -800.0, 800.0, 20);
  CHECK_ULP(T, sigmoid, sigmoid, -20.0, 20.0, 21);
  CHECK_ULP(T, erf, [](LD x) { return std::erf(x); }, -7.0, 7.0, 22);
  CHECK_ULP(T, erf, [](LD x) { return std::erf(x); }, -big, big, 23);
}

// Bit-exact comparison, so that NaN == NaN and -0 != +0.
template <class T> bool same(T a, T b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0; }

template <class T> void special_values() {
  const T inf = lim<T>::infinity(), nan = lim<T>::quiet_NaN(), tiny = lim<T>::denorm_min(), big = lim<T>::max();
  struct Case {
    const char* fn;
    T (*f)(T);
    T x, want;
  };
  const Case cases[] = {
      {"exp", vmath::exp<T>, -inf, 0},          {"exp", vmath::exp<T>, inf, inf},           {"exp", vmath::exp<T>, nan, nan},
      {"exp", vmath::exp<T>, big, inf},          {"exp", vmath::exp<T>, -big, 0},            {"exp", vmath::exp<T>, 0, 1},
      {"exp", vmath::exp<T>, tiny, 1},           {"exp2", vmath::exp2<T>, -inf, 0},          {"exp2", vmath::exp2<T>, inf, inf},
      {"exp2", vmath::exp2<T>, 10, 1024},        {"exp2", vmath::exp2<T>, -T(lim<T>::digits - lim<T>::min_exponent), tiny},
      {"exp2", vmath::exp2<T>, nan, nan},        {"expm1", vmath::expm1<T>, -inf, -1},       {"expm1", vmath::expm1<T>, inf, inf},
      {"expm1", vmath::expm1<T>, -0.0, -0.0},    {"expm1", vmath::expm1<T>, tiny, tiny},     {"expm1", vmath::expm1<T>, big, inf},
      {"expm1", vmath::expm1<T>, nan, nan},      {"log", vmath::log<T>, 0, -inf},            {"log", vmath::log<T>, -0.0, -inf},
      {"log", vmath::log<T>, -1, nan},           {"log", vmath::log<T>, -inf, nan},          {"log", vmath::log<T>, inf, inf},
      {"log", vmath::log<T>, 1, 0},              {"log", vmath::log<T>, nan, nan},           {"log2", vmath::log2<T>, 0, -inf},
      {"log2", vmath::log2<T>, -2, nan},         {"log2", vmath::log2<T>, inf, inf},         {"log2", vmath::log2<T>, 1024, 10},
      {"log2", vmath::log2<T>, tiny, T(lim<T>::min_exponent - lim<T>::digits)},           {"log2", vmath::log2<T>, nan, nan},
      {"log1p", vmath::log1p<T>, -1, -inf},      {"log1p", vmath::log1p<T>, -2, nan},        {"log1p", vmath::log1p<T>, inf, inf},
      {"log1p", vmath::log1p<T>, -0.0, -0.0},    {"log1p", vmath::log1p<T>, tiny, tiny},     {"log1p", vmath::log1p<T>, nan, nan},
      {"sin", vmath::sin<T>, -0.0, -0.0},        {"sin", vmath::sin<T>, -tiny, -tiny},       {"sin", vmath::sin<T>, inf, nan},
      {"sin", vmath::sin<T>, nan, nan},          {"sin", vmath::sin<T>, big, nan},           {"cos", vmath::cos<T>, 0, 1},
      {"cos", vmath::cos<T>, -inf, nan},         {"cos", vmath::cos<T>, nan, nan},           {"tan", vmath::tan<T>, -0.0, -0.0},
      {"tan", vmath::tan<T>, inf, nan},          {"tan", vmath::tan<T>, nan, nan},           {"tanh", vmath::tanh<T>, -0.0, -0.0},
      {"tanh", vmath::tanh<T>, tiny, tiny},      {"tanh", vmath::tanh<T>, inf, 1},           {"tanh", vmath::tanh<T>, -inf, -1},
      {"tanh", vmath::tanh<T>, 50, 1},           {"tanh", vmath::tanh<T>, -big, -1},         {"tanh", vmath::tanh<T>, nan, nan},
      {"sigmoid", vmath::sigmoid<T>, -inf, 0},   {"sigmoid", vmath::sigmoid<T>, inf, 1},     {"sigmoid", vmath::sigmoid<T>, 0, 0.5},
      {"sigmoid", vmath::sigmoid<T>, nan, nan},  {"sigmoid", vmath::sigmoid<T>, -big, 0},    {"erf", vmath::erf<T>, inf, 1},
      {"erf", vmath::erf<T>, -inf, -1},          {"erf", vmath::erf<T>, -0.0, -0.0},         {"erf", vmath::erf<T>, 0, 0},
      {"erf", vmath::erf<T>, 10, 1},             {"erf", vmath::erf<T>, nan, nan},
  };
  for (const Case& c : cases) {
    T got = c.f(c.x);
    INFO(c.fn << "<" << (sizeof(T) == 4 ? "float" : "double") << ">(" << double(c.x) << ") = " << double(got)
              << ", expected " << double(c.want));
    CHECK(same(got, c.want));
  }
  // subnormal results: exp / exp2 underflow gradually, sigmoid keeps tiny positive values
  CHECK(vmath::exp(T(sizeof(T) == 4 ? -100 : -740)) > 0);
  CHECK(vmath::exp(T(sizeof(T) == 4 ? -100 : -740)) < lim<T>::min());
  CHECK(vmath::sigmoid(T(sizeof(T) == 4 ? -100 : -740)) > 0);
  // sin / cos / tan are computed up to kTrigLimit and NaN from there on
  const T below = std::nextafter(vmath::kTrigLimit<T>, T(0));
  CHECK(ulp_error(vmath::sin(below), std::sin(LD(below))) <= 1.0);
  CHECK(std::isnan(vmath::cos(vmath::kTrigLimit<T>)));
}

}  // namespace

TEST_CASE("vmath float accuracy is within 2 ulp", "[vmath]") { accuracy<float>(); }
TEST_CASE("vmath double accuracy is within 2 ulp", "[vmath]") { accuracy<double>(); }
TEST_CASE("vmath special values", "[vmath]") {
  special_values<float>();
  special_values<double>();
}

TEST_CASE("vmath float functions on every float16 value", "[vmath]") {
  // All 63488 finite half values (the inputs of float16 tensors) through the float versions,
  // against long double: a dense check over the range that matters most for the model dtypes.
  double worst = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint32_t e = (h >> 10) & 31u;
    if (e == 31) continue;  // inf / nan
    float x = std::ldexp(float((h & 1023u) | (e ? 1024u : 0u)), int(e ? e : 1) - 25) * ((h & 0x8000u) ? -1.0f : 1.0f);
    worst = std::max({worst, ulp_error(vmath::exp(x), std::exp(LD(x))), ulp_error(vmath::tanh(x), std::tanh(LD(x))),
                      ulp_error(vmath::erf(x), std::erf(LD(x))), ulp_error(vmath::sin(x), std::sin(LD(x))),
                      ulp_error(vmath::sigmoid(x), 1 / (1 + std::exp(-LD(x))))});
    if (x > -1) worst = std::max(worst, ulp_error(vmath::log1p(x), std::log1p(LD(x))));
    if (x >= 0) worst = std::max(worst, ulp_error(vmath::log(x), std::log(LD(x))));
  }
  INFO("worst " << worst << " ulp");
  CHECK(worst <= 2.0);
}

// float sin and cos: the float form up to |x| = 256 (kSinNear), the double reduction beyond. A
// grid and random floats of [-300, 300] (both forms and the boundary) and the floats nearest the
// multiples of pi/2 there (the zeros of one, the extremes of the other) are within 2 ulp;
// sin_block / cos_block (the loops' form: float form first, then the far elements again) give
// each element exactly vmath::sin's / vmath::cos's value, in place too.
template <class F, class Ref, class Block>
void check_float_trig(const char* name, F f, Ref ref, Block block) {
  std::vector<float> xs;
  for (int i = 0; i <= 300000; ++i) xs.push_back(-300.0f + float(i) * 0.002f);
  std::mt19937 g(77);
  std::uniform_real_distribution<float> u(-300.0f, 300.0f);
  for (int i = 0; i < 200000; ++i) xs.push_back(u(g));
  for (int j = -195; j <= 195; ++j) {
    float v = std::nextafter(std::nextafter(float(LD(j) * 1.57079632679489661923132169163975144L), -1e9f), -1e9f);
    for (int i = 0; i < 5; ++i, v = std::nextafter(v, 1e9f)) xs.push_back(v);
  }
  double worst = 0;
  float at = 0;
  for (float v : xs) {
    double e = ulp_error(f(v), ref(LD(v)));
    if (e > worst) worst = e, at = v;
  }
  INFO(name << ": worst " << worst << " ulp at " << at);
  CHECK(worst <= 2.0);
  for (float v : {256.0f, std::nextafter(256.0f, 0.0f), std::nextafter(256.0f, 1e9f), -256.0f, 1e20f, lim<float>::infinity(),
                  -lim<float>::infinity(), lim<float>::quiet_NaN(), -0.0f, 1e-40f, vmath::kTrigLimit<float>})
    xs.push_back(v);
  std::vector<float> y(xs.size()), in_place = xs;
  block(xs.data(), y.data(), int64_t(xs.size()));
  block(in_place.data(), in_place.data(), int64_t(xs.size()));
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    float want = f(xs[i]);
    if (std::memcmp(&y[i], &want, sizeof want) != 0 || std::memcmp(&in_place[i], &want, sizeof want) != 0)
      if (differ++ == 0) first = i;
  }
  INFO(name << ": " << differ << " elements differ, the first at x = " << xs[first]);
  CHECK(differ == 0);
}
TEST_CASE("vmath float sin and cos: near and far forms, and their blocks", "[vmath]") {
  check_float_trig("sin", [](float v) { return vmath::sin(v); }, [](LD v) { return std::sin(v); }, [](const float* x, float* y, int64_t n) { vmath::sin_block(x, y, n); });
  check_float_trig("cos", [](float v) { return vmath::cos(v); }, [](LD v) { return std::cos(v); }, [](const float* x, float* y, int64_t n) { vmath::cos_block(x, y, n); });
  CHECK(vmath::cos(0.0f) == 1.0f);
  CHECK(vmath::cos(-0.0f) == 1.0f);
  CHECK(vmath::cos(1e-40f) == 1.0f);
}

// float tanh switches forms at |x| = 1 and rounds to +-1 from 9.01 (vmath.hpp tanh_float): every
// third float of [0.75, 1.25], every fifth of [9, 10.5] and every 1009th of (0, 10], both signs, are
// within 1.5 ulp and odd, and a loop GCC vectorises gives the per-element values.
namespace {
__attribute__((noinline)) void tanh_loop(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = vmath::tanh(x[i]);
}
}  // namespace
TEST_CASE("vmath float tanh on dense grids, and in a vectorised loop", "[vmath]") {
  std::vector<float> xs;
  auto every = [&](float lo, float hi, uint32_t step) {
    for (uint32_t b = std::bit_cast<uint32_t>(lo); b <= std::bit_cast<uint32_t>(hi); b += step) {
      xs.push_back(std::bit_cast<float>(b));
      xs.push_back(-std::bit_cast<float>(b));
    }
  };
  every(0.75f, 1.25f, 3);
  every(9.0f, 10.5f, 5);
  every(lim<float>::denorm_min(), 10.0f, 1009);
  std::vector<float> y(xs.size());
  tanh_loop(xs.data(), y.data(), xs.size());
  float (*one)(float) = vmath::tanh<float>;  // an out-of-line copy: one element at a time
  double worst = 0;
  float at = 0;
  size_t differ = 0, odd = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    float v = one(xs[i]);
    differ += std::memcmp(&v, &y[i], sizeof v) != 0;
    odd += i % 2 == 1 && v != -y[i - 1];
    double e = ulp_error(v, std::tanh(LD(xs[i])));
    if (e > worst) worst = e, at = xs[i];
  }
  INFO("worst " << worst << " ulp at x = " << at);
  CHECK(worst <= 1.5);
  CHECK(differ == 0);
  CHECK(odd == 0);
}

// exp_block / sigmoid_block take the products alone in chunks whose results are normal and build
// subnormal results as bits (vmath::scale): every float of [-106, -85] step 7, runs of -inf as a
// causal mask gives (whole chunks and vectors), normal values, NaN, subnormal arguments, in place
// and at an offset, all with the per-element function's bits; the subnormal results within 1 ulp
// of long double's.
template <class T> void check_exp_blocks() {
  std::vector<T> xs;
  if constexpr (sizeof(T) == 4) {
    for (uint32_t b = std::bit_cast<uint32_t>(-85.0f); b <= std::bit_cast<uint32_t>(-106.0f); b += 7)
      xs.push_back(std::bit_cast<float>(b));
  } else {
    std::mt19937_64 g(5);
    std::uniform_real_distribution<double> u(-750.0, -700.0);
    for (int i = 0; i < 200000; ++i) xs.push_back(u(g));
  }
  for (int i = 0; i < 3000; ++i) xs.push_back((i / 300) % 2 ? -lim<T>::infinity() : T(i % 13) - T(6));
  for (T x : {lim<T>::quiet_NaN(), -lim<T>::quiet_NaN(), lim<T>::infinity(), T(0), -T(0), T(-90), T(-745)})
    xs.push_back(x);
  for (T m = lim<T>::denorm_min(); m < lim<T>::min(); m *= T(3))  // subnormal arguments: f(0)'s bits
    for (T x : {m, -m, std::nextafter(lim<T>::min(), T(0))}) xs.push_back(x);
  T (*exp1)(T) = vmath::exp<T>;  // out-of-line copies: one element at a time
  T (*sigmoid1)(T) = vmath::sigmoid<T>;
  double worst = 0;
  for (T x : xs)
    if (x < T(-80)) worst = std::max(worst, ulp_error(exp1(x), std::exp(LD(x))));
  CHECK(worst <= 1.0);
  auto check = [&](const char* name, T (*one)(T), void (*block)(const T*, T*, int64_t)) {
    for (size_t off : {size_t(0), size_t(3)}) {
      std::vector<T> y(xs.size() - off), z(xs.begin() + off, xs.end());
      block(xs.data() + off, y.data(), int64_t(y.size()));
      block(z.data(), z.data(), int64_t(z.size()));
      size_t differ = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        T v = one(xs[i + off]);
        differ += std::memcmp(&v, &y[i], sizeof v) != 0;
        differ += std::memcmp(&v, &z[i], sizeof v) != 0;
      }
      INFO(name << "<" << (sizeof(T) == 4 ? "float" : "double") << "> block at offset " << off);
      CHECK(differ == 0);
    }
  };
  check("exp", exp1, vmath::exp_block<T>);
  check("sigmoid", sigmoid1, vmath::sigmoid_block<T>);
}
TEST_CASE("vmath exp and sigmoid blocks: the per-element bits, subnormal results included", "[vmath]") {
  check_exp_blocks<float>();
  check_exp_blocks<double>();
}
