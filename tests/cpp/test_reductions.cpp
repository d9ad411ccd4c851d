// The reduction engine (vm/kernels/reduce.hpp): how layouts are planned, results against naive
// loops for every reduce mask over strided inputs, the split-range paths, and the vector helpers.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "vm/kernels/folds.hpp"
#include "vm/kernels/reduce.hpp"

using namespace cr;

namespace {

Tensor filled(const Shape& s, uint32_t seed) {
  Tensor t = Tensor::empty(s, DType::f64);
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = u(g);
  return t;
}

// out shape of reducing `in` over mask (keepdim)
Shape kept_shape(const Tensor& in, const std::vector<bool>& mask) {
  Shape s = in.sizes();
  for (size_t d = 0; d < s.size(); ++d)
    if (mask[d]) s[d] = 1;
  return s;
}

// naive sum: walk every input element, add it into its output slot
Tensor naive_sum(const Tensor& in, const std::vector<bool>& mask) {
  Tensor out = Tensor::empty(kept_shape(in, mask), DType::f64);
  fill(out, 0);
  Shape idx(size_t(in.dim()), 0);
  Shape ost = out.strides();
  for (int64_t k = 0; k < in.numel(); ++k) {
    int64_t r = k, ioff = 0, ooff = 0;
    for (int d = in.dim() - 1; d >= 0; --d) {
      int64_t i = r % in.size(d);
      r /= in.size(d);
      ioff += i * in.stride(d);
      if (!mask[size_t(d)]) ooff += i * ost[size_t(d)];
    }
    out.data<double>()[ooff] += in.data<double>()[ioff];
  }
  return out;
}

Tensor engine_sum(const Tensor& in, const std::vector<bool>& mask) {
  Tensor out = Tensor::empty(kept_shape(in, mask), DType::f64);
  double* o = out.data<double>();
  reduce(in, out, mask, folds::Sum<double>{}, [o](double a, int64_t off) { o[off] = a; });
  return out;
}

void require_close(const Tensor& a, const Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  for (int64_t i = 0; i < a.numel(); ++i) REQUIRE(a.data<double>()[i] == Approx(b.data<double>()[i]).margin(1e-12));
}

}  // namespace

TEST_CASE("plan_reduce merges dims and finds the unit-stride dim") {
  Tensor x = Tensor::empty({4, 5, 6}, DType::f32);
  ReducePlan p;
  SECTION("inner: the last dims are reduced and merged into one run") {
    Tensor out = Tensor::empty({4}, DType::f32);
    REQUIRE(plan_reduce(x, out, {false, true, true}, false, &p));
    REQUIRE(p.inner);
    REQUIRE(p.nr == 1);
    REQUIRE(p.rsize[0] == 30);
    REQUIRE(p.n_out == 4);
    REQUIRE(p.n_red == 30);
  }
  SECTION("outer: the first dim is reduced, the rest is one run of kept columns") {
    Tensor out = Tensor::empty({1, 5, 6}, DType::f32);
    REQUIRE(plan_reduce(x, out, {true, false, false}, false, &p));
    REQUIRE_FALSE(p.inner);
    REQUIRE(p.nk == 1);
    REQUIRE(p.ksize[0] == 30);
    REQUIRE(p.kout[0] == 1);
  }
  SECTION("a transposed input is walked in memory order unless positions matter") {
    Tensor t = Tensor::view_of(x, {6, 5, 4}, {1, 6, 30}, 0);
    Tensor out = Tensor::empty({6}, DType::f32);
    REQUIRE(plan_reduce(t, out, {false, true, true}, false, &p));
    REQUIRE_FALSE(p.inner);  // memory order: the kept dim has unit stride
    REQUIRE(p.kin[p.nk - 1] == 1);
    REQUIRE_FALSE(plan_reduce(t, out, {false, true, true}, true, &p));  // ordered: needs a copy
  }
  SECTION("size-1 and 0-d inputs") {
    Tensor s = Tensor::empty({}, DType::f32);
    Tensor out = Tensor::empty({}, DType::f32);
    REQUIRE(plan_reduce(s, out, {}, false, &p));
    REQUIRE(p.n_out == 1);
    REQUIRE(p.n_red == 1);
  }
}

TEST_CASE("reduce matches naive loops for every mask over strided layouts") {
  Tensor base = filled({3, 4, 5, 6}, 7);
  // the same sizes with the dims scrambled in memory, and a sliced view with gaps
  Tensor perm = Tensor::view_of(filled({5, 3, 6, 4}, 8), {3, 4, 5, 6}, {24, 1, 72, 4}, 0);
  Tensor big = filled({3, 4, 5, 12}, 9);
  Tensor gaps = Tensor::view_of(big, {3, 4, 5, 6}, {240, 60, 12, 2}, 1);
  for (const Tensor& in : {base, perm, gaps}) {
    for (int m = 0; m < 16; ++m) {
      std::vector<bool> mask{bool(m & 1), bool(m & 2), bool(m & 4), bool(m & 8)};
      INFO("mask " << m << " strides " << shape_str(in.strides()));
      require_close(engine_sum(in, mask), naive_sum(in, mask));
    }
  }
}

TEST_CASE("long ranges are split into chunks and merged in order") {
  SECTION("inner: one output") {
    Tensor x = filled({300001}, 3);
    require_close(engine_sum(x, {true}), naive_sum(x, {true}));
  }
  SECTION("outer: few columns, many rows") {
    Tensor x = filled({70001, 3}, 4);
    require_close(engine_sum(x, {true, false}), naive_sum(x, {true, false}));
  }
  SECTION("positions survive the split: the first maximum wins") {
    Tensor x = Tensor::empty({400000}, DType::f32);
    fill(x, 0);
    x.data<float>()[333333] = 2;
    x.data<float>()[399999] = 2;
    Tensor out = Tensor::empty({}, DType::i64);
    int64_t* o = out.data<int64_t>();
    reduce(x, out, {true}, folds::Arg<float, true>{}, [o](const auto& a, int64_t off) { o[off] = a.i; });
    REQUIRE(*o == 333333);
  }
}

TEST_CASE("empty reductions give the fold's identity; empty outputs do nothing") {
  Tensor x = Tensor::empty({0, 4}, DType::f64);
  Tensor out = Tensor::empty({4}, DType::f64);
  double* o = out.data<double>();
  reduce(x, out, {true, false}, folds::Prod<double>{}, [o](double a, int64_t off) { o[off] = a; });
  for (int i = 0; i < 4; ++i) REQUIRE(o[i] == 1.0);
  Tensor none = Tensor::empty({0}, DType::f64);
  reduce(x, none, {false, true}, folds::Sum<double>{}, [](double, int64_t) { FAIL("finish called"); });
}

TEST_CASE("vector helpers: exp_fast, extreme, exp_sum") {
  double worst = 0;
  for (float v = -87.0f; v < 88.0f; v += 0.001953125f) {
    double e = std::exp(double(v));
    worst = std::max(worst, std::fabs(lanes::exp_fast(v) - e) / e);
  }
  REQUIRE(worst < 3 * 5.96e-8);  // within 3 ulp
  REQUIRE(lanes::exp_fast(-INFINITY) == 0.0f);
  REQUIRE(lanes::exp_fast(INFINITY) == INFINITY);
  REQUIRE(std::isnan(lanes::exp_fast(NAN)));
  // the edges of the float range: finite just below log(FLT_MAX), subnormals correctly rounded
  // (the polynomial's error plus one rounding: half the smallest subnormal), 0 below them
  REQUIRE(std::isfinite(lanes::exp_fast(88.72f)));
  REQUIRE(std::fabs(lanes::exp_fast(88.72f) - std::exp(double(88.72f))) / std::exp(double(88.72f)) < 3 * 5.96e-8);
  REQUIRE(lanes::exp_fast(88.73f) == INFINITY);
  for (float v = -104.5f; v < -86.0f; v += 0.0078125f)
    REQUIRE(std::fabs(double(lanes::exp_fast(v)) - std::exp(double(v))) <= 0.5 * 1.4013e-45 + 3 * 5.96e-8 * std::exp(double(v)));
  REQUIRE(lanes::exp_fast(-104.0f) == 0.0f);
  REQUIRE(lanes::exp_fast(-1000.0f) == 0.0f);
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 97) - 50.0f;
  bool nan = true;
  REQUIRE(lanes::extreme<true, float>(v.data(), int64_t(v.size()), &nan, lanes::Identity{}) == 46.0f);
  REQUIRE_FALSE(nan);
  v[777] = NAN;
  lanes::extreme<false, float>(v.data(), int64_t(v.size()), &nan, lanes::Identity{});
  REQUIRE(nan);
  std::vector<float> z(37, 0.0f), y(37);
  REQUIRE(lanes::exp_sum(z.data(), y.data(), 37, 0.0f) == Approx(37.0));
  REQUIRE(y[36] == 1.0f);
}

namespace {
// lanes::sum's lanes as an array (its generic form), to which the vector form must agree bit
// for bit.
template <class A> A array_lanes_sum(const A* x, int64_t n) {
  constexpr int L = lanes::kSumLanes<A>;
  A acc[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; ++l) acc[l] += x[i + l];
  for (int l = 0; i < n; ++i, ++l) acc[l] += x[i];
  for (int w = L / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}
template <class A> void same_sums(std::vector<A> x) {
  for (int64_t n = 0; n <= 700; ++n)
    for (int64_t off : {0, 3}) {
      INFO("n " << n << " offset " << off);
      const A want = array_lanes_sum(x.data() + off, n), got = lanes::sum<A>(x.data() + off, n, lanes::Identity{});
      REQUIRE(std::memcmp(&want, &got, sizeof want) == 0);
    }
}
}  // namespace

TEST_CASE("lanes::sum of floats and doubles in vector registers gives the lanes' bits") {
  std::vector<float> f(710);
  std::vector<double> d(710);
  std::mt19937 g(5);
  std::uniform_real_distribution<double> u(-1e3, 1e3);
  for (size_t i = 0; i < f.size(); ++i) d[i] = double(f[i] = float(u(g)));
  f[9] = -0.0f;
  d[9] = -0.0;
  same_sums(f);
  same_sums(d);
  f[300] = INFINITY;
  d[301] = NAN;
  same_sums(f);
  same_sums(d);
}
